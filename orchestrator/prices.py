"""Refresh SageMaker training prices from the AWS Price List API into ORCHESTRATOR_HOME.

`fetch(pricing_client, types, regions, today)` asks `GetProducts` (ServiceCode
"AmazonSageMaker", the us-east-1 endpoint) for each instance type and region, filtered on
product family "ML Instance", `instanceName`, `regionCode` and `component` "Training", follows
`NextToken`, and reads the OnDemand hourly USD price out of each PriceList JSON document.
`write(found)` merges the prices into the override file the catalog reads
(`$ORCHESTRATOR_HOME/prices.json`, same format as `orchestrator/data/prices.json`), atomically:
rows for other types and regions are kept, so a partial refresh loses nothing.

A type the API has no training price for is reported in `Refresh.missing`, never guessed.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from entrypoints.shared import atomic
from orchestrator import catalog
from orchestrator.errors import BackendError, InputError, service_message
from orchestrator.paths import home
from orchestrator.spec import REGION_PATTERN

SERVICE_CODE = "AmazonSageMaker"
SOURCE = "AWS Price List API (AmazonSageMaker)"
KIND = "sagemaker-on-demand"
# The Price List API is served from us-east-1 (and a few others); prices cover every region.
PRICING_REGION = "us-east-1"
_HOURLY_UNITS = frozenset({"hrs", "hr", "hour", "hours"})
# The range of hourly USD prices taken as real, checked before a price is stored (issue 32:
# `Infinity` made every plan exit 2, 1e-10 let every budget pass). Assumed bounds, far outside
# SageMaker's training prices (cents to about a hundred USD an hour per instance).
MIN_USD_PER_HOUR = 0.001
MAX_USD_PER_HOUR = 10_000.0


@dataclass(frozen=True)
class Found:
    """One training price from the API."""

    type: str
    region: str
    usd_per_hour: float
    sku: str
    description: str

    def as_row(self, as_of: str) -> dict:
        return {"type": self.type, "region": self.region, "usd_per_hour": self.usd_per_hour,
                "source": SOURCE, "as_of": as_of, "kind": KIND}


@dataclass
class Refresh:
    """The outcome of a refresh: prices found, (type, region) pairs without one, and notes
    (e.g. products skipped because they carried no USD hourly price)."""

    as_of: str
    found: list[Found] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    path: Path | None = None


def default_types() -> list[str]:
    """The catalog's instance types that SageMaker training accepts."""
    accepted = catalog.training_instance_types()
    return sorted(t for t in catalog.instances() if t in accepted)


def check_known(types: Iterable[str], regions: Iterable[str]) -> None:
    """InputError naming the first instance type SageMaker training does not accept, or the
    first region that is not a region name."""
    import difflib
    import re

    accepted = catalog.training_instance_types()
    for type_ in types:
        if type_ not in accepted:
            if type_.startswith("ml.inf2."):
                hint = ("inf2 is offered for hosting and batch transform only; ml.trn1.2xlarge has the same "
                        "NeuronCore-v2 and trains")
            else:
                close = difflib.get_close_matches(type_, sorted(accepted), n=1, cutoff=0.8)
                hint = f"did you mean {close[0]}?" if close else f"e.g. {', '.join(default_types())}"
            raise InputError(f"--types: {type_!r} is not a SageMaker training instance type", hint=hint)
    for region in regions:
        if not re.fullmatch(REGION_PATTERN, region):
            raise InputError(f"--region: {region!r} is not an AWS region name", hint="e.g. us-east-1")


def client():
    """A boto3 pricing client on the Price List API's endpoint region (`aws.client`: timeouts,
    a checked endpoint), with standard retries."""
    from orchestrator import aws

    return aws.client("pricing", PRICING_REGION,
                      config=aws.client_config(retries={"mode": "standard", "total_max_attempts": 8}))


def filters(type_: str, region: str) -> list[dict]:
    """The GetProducts filters for one instance type's training price in one region."""
    return [
        {"Type": "TERM_MATCH", "Field": "productFamily", "Value": "ML Instance"},
        {"Type": "TERM_MATCH", "Field": "instanceName", "Value": type_},
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
        {"Type": "TERM_MATCH", "Field": "component", "Value": "Training"},
    ]


def _on_demand_usd_per_hour(doc: dict) -> tuple[float, str] | None:
    """The OnDemand hourly USD price of one PriceList document, and its description."""
    for term in (doc.get("terms", {}).get("OnDemand") or {}).values():
        for dim in (term.get("priceDimensions") or {}).values():
            unit = str(dim.get("unit", "")).lower()
            usd = (dim.get("pricePerUnit") or {}).get("USD")
            if unit not in _HOURLY_UNITS or usd is None:
                continue
            try:
                value = float(usd)
            except (TypeError, ValueError):
                continue
            if math.isfinite(value) and MIN_USD_PER_HOUR <= value <= MAX_USD_PER_HOUR:
                return value, str(dim.get("description", ""))
    return None


def _products(pricing, type_: str, region: str) -> Iterable[dict]:
    """The PriceList documents for one type and region: BackendError for an item that is not a
    JSON object, or pages that never end (`aws.MAX_PAGES`, `aws.MAX_PAGING_S`)."""
    from orchestrator import aws

    token = None
    seen: set[str] = set()
    pages = 0
    while True:
        pages += 1
        if pages > aws.MAX_PAGES:
            raise BackendError(f"Price List API: GetProducts for {type_} in {region} did not end after "
                               f"{aws.MAX_PAGES} pages, each with a new NextToken; stopped asking, nothing written",
                               hint="try again later; the catalog's prices stay as they were")
        kwargs = {"ServiceCode": SERVICE_CODE, "Filters": filters(type_, region), "FormatVersion": "aws_v1",
                  "MaxResults": 100}
        if token:
            kwargs["NextToken"] = token
        response = pricing.get_products(**kwargs)
        for item in response.get("PriceList", []):
            try:
                doc = json.loads(item) if isinstance(item, str) else item
            except ValueError:
                doc = None
            if not isinstance(doc, dict):
                raise BackendError(f"Price List API answered GetProducts for {type_} in {region} with an item that "
                                   f"is not a JSON object ({service_message(repr(item), 80)}); nothing written",
                                   hint="try again later; the catalog's prices stay as they were")
            yield doc
        token = response.get("NextToken")
        if not token or token in seen:  # a repeated token would loop forever
            return
        seen.add(token)


def fetch(pricing, types: Iterable[str], regions: Iterable[str], today: dt.date | None = None) -> Refresh:
    """Ask the Price List API for each type in each region (see the module docstring).

    Raises BackendError when the API refuses (credentials, permissions, throttled past the
    client's retries), naming the type and region it was asking about.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    from orchestrator import aws_errors

    refresh = Refresh(as_of=(today or dt.date.today()).isoformat())
    for region in regions:
        for type_ in types:
            candidates: list[tuple[float, str, str, str]] = []
            try:
                for doc in _products(pricing, type_, region):
                    product = doc.get("product", {})
                    attrs = product.get("attributes", {})
                    if attrs.get("instanceName") != type_ or attrs.get("regionCode", region) != region:
                        continue
                    if str(attrs.get("component", "Training")).lower() != "training":
                        continue
                    price = _on_demand_usd_per_hour(doc)
                    sku = product.get("sku", "?")
                    if price is None:
                        refresh.notes.append(f"{type_} {region}: product {sku} has no OnDemand USD hourly price from "
                                             f"{MIN_USD_PER_HOUR:g} to {MAX_USD_PER_HOUR:g} (a finite number); skipped")
                        continue
                    candidates.append((price[0], sku, price[1], str(attrs.get("usagetype", ""))))
            except ClientError as exc:
                error = exc.response.get("Error", {})
                status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
                detail = service_message(f"{error.get('Code')}: {error.get('Message')}")
                if aws_errors.kind_of(exc) in aws_errors.TRANSIENT_KINDS:
                    raise BackendError(f"Price List API failed on GetProducts for {type_} in {region} "
                                       f"(HTTP {status}): {detail}",
                                       hint="try again later; the catalog's prices stay as they were") from None
                raise BackendError(f"Price List API refused GetProducts for {type_} in {region}: {detail}",
                                   hint="the caller needs pricing:GetProducts; the catalog's prices stay as they were") from None
            except BotoCoreError as exc:
                from orchestrator import aws

                silent = aws.describe(exc, "GetProducts")
                if silent is not None:
                    raise BackendError(f"Price List API asked for {type_} in {region}: {silent}; {aws.tries_said(exc)}",
                                       hint=aws.NO_ANSWER_HINT) from None
                from botocore.exceptions import NoCredentialsError, PartialCredentialsError

                if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
                    raise BackendError(f"Price List API not asked for {type_} in {region}: no usable AWS credentials "
                                       f"({exc})", hint="configure credentials (aws configure, AWS_PROFILE, or "
                                       "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; any account can read prices); the "
                                       "catalog's prices stay as they were") from None
                raise BackendError(f"Price List API unreachable asking for {type_} in {region}: {exc}") from None
            if not candidates:
                refresh.missing.append((type_, region))
                continue
            # The plain training usage type ("USE1-Train:ml.x") wins over variants (e.g. spot).
            plain = [c for c in candidates if c[3].endswith(f"Train:{type_}")]
            chosen = min(plain or candidates)
            if len({c[0] for c in (plain or candidates)}) > 1:
                refresh.notes.append(f"{type_} {region}: {len(plain or candidates)} training prices; "
                                     f"took the lowest, {chosen[0]} USD/h (SKU {chosen[1]})")
            refresh.found.append(Found(type=type_, region=region, usd_per_hour=chosen[0], sku=chosen[1],
                                       description=chosen[2]))
    return refresh


def override_path() -> Path:
    """The refreshed prices file the catalog prefers to its shipped one."""
    return home() / "prices.json"


def write(refresh: Refresh, path: Path | None = None) -> Path:
    """Merge the refreshed prices into the override file, atomically; return its path.

    The file starts from the current override (or the shipped prices) so that types and
    regions not refreshed keep their price. Raises InputError, writing nothing, if an existing
    override is not a valid prices file (`catalog.read_price_file`; the user can delete it to
    start over) or the file cannot be written.
    """
    path = path or override_path()
    base_rows: list[dict]
    if path.exists():
        base_rows = list(catalog.read_price_file(
            path, hint=f"delete {path} and refresh again to start from the shipped prices"))
    else:
        base_rows = list(json.loads((catalog.DATA / "prices.json").read_text())["prices"])
    fresh = {(f.type, f.region): f.as_row(refresh.as_of) for f in refresh.found}
    rows = [r for r in base_rows if (r.get("type"), r.get("region")) not in fresh] + list(fresh.values())
    rows.sort(key=lambda r: (r.get("type", ""), r.get("region", "")))
    doc = {
        "currency": "USD",
        "unit": "instance-hour",
        "note": "Written by `python -m orchestrator prices refresh`; rows whose source is not the Price List API "
                "come from the shipped file.",
        "prices": rows,
    }
    try:
        atomic.write_text(path, json.dumps(doc, indent=1) + "\n")
    except OSError as exc:
        from orchestrator.paths import write_hint

        raise InputError(f"{path}: cannot write the prices file: {exc.strerror or exc}", hint=write_hint(
            exc, "point ORCHESTRATOR_HOME at a folder you can write to") + "; the catalog's prices stay as they were"
        ) from None
    refresh.path = path
    return path
