"""Price-performance results: read `results.json` objects, join SageMaker and prices, render.

Two halves, kept apart so each can be tested alone:

- `collect(prefix, ...)` -> `Collection` (a list of `Row`): reads every
  `<prefix>/results/<job>/results.json` (schema "orchestrator.results/v1", written by the
  entrypoint), in parallel, joins `DescribeTrainingJob` for SageMaker jobs (status, billable
  and training seconds, managed spot) and the catalog's price for the instance type.
  It needs no ledger: everything comes from the store and from SageMaker, so it works from a
  machine that never submitted the jobs.
- `render_table`, `render_csv`, `render_json`, `render_plot` turn rows into a string (or PNG
  bytes). They never print; `cli.py` does.

Contracts:

- No job is silently dropped. A results object that is missing, truncated (not JSON) or of an
  unknown schema becomes a row with status "missing" or "unreadable" and a note; on S3, a job
  without one that SageMaker knows gets SageMaker's status and failure reason instead of
  "missing" (a capacity error, a stop, a job still starting). Throttling,
  5xx and connection errors are retried, by botocore (the backends' retry config) and
  then again per job (`attempts`, jittered exponential backoff); a job that still fails is a
  row with status "error" and the error as its note. The one exception is a `job` filter
  naming a job with no results object: that is an InputError saying where it looked (the
  user pointed at the wrong prefix or mistyped the name), not a table of one "missing" row.
- Keys and paths stay under the prefix: a `job` filter must be a job name (SageMaker's rule),
  and a listed folder that is not one plain path segment is an "unreadable" row, never read.
- The `sweep` filter takes a sweep id (`instances-e232772a`), a sweep name (`instances`: every
  sweep made from files named so, across edits) or a schedule's untimed id
  (`nightly-1a2b3c4d`: all its ticks, `nightly-1a2b3c4d-<YYYYMMDDHHMM>`). A row belongs to it
  when its sweep is that id, or has that name or untimed id; its sweep is the results' tag
  `orchestrator:sweep` when there is one (the tag wins over the name; results tagged
  `orchestrator:job` without it belong to no sweep, as a plain `submit` writes), else it is read from
  the job name the way sweep.py makes it (`<sweep id>-t<8 hex>[-rN]`, the name part
  truncated to fit 63 characters). So listed folders with no readable results, SageMaker
  jobs with no results yet, and tagged results are matched by the same rule. A job name not
  of that shape belongs when it is `<sweep>-...`. A filter that matches nothing is an
  InputError whose hint lists the sweep ids tagged under the prefix.
- A number that is NaN or infinite in a results object shows as blank, and the row keeps its
  status with a note naming the field ("non-finite value in step_time_s.p50").
- Prices: `price_per_hour` is the instance's rate (`cost.rate`: SageMaker's own price, or an
  unverified price times the stated markup) times the instance count. For managed spot with
  known seconds, it is the effective price, `rate x billable / training seconds`. A row priced
  from an unverified price has `price_verified` False, and the table marks its cost cells
  with "~" and says why below it.
  Local-backend jobs have no price (their rows say so) and take part in no ranking.
- `relative` is the row's samples per dollar over the best completed row's (best = 1.0).
- Rows are sorted best first; rows without a ranking follow (see `rank`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from entrypoints.storage import FileStore, open_store
from orchestrator import catalog, cost
from orchestrator.errors import BackendError, InputError

SCHEMA = "orchestrator.results/v1"
RESULTS_DIR = "results"
RESULTS_FILE = "results.json"
SWEEP_TAG = "orchestrator:sweep"
TRIAL_TAG = "orchestrator:trial"
# sweep.TAG_ATTEMPT: "failover:<type>" on a trial's job that failed over from <type>.
ATTEMPT_TAG = "orchestrator:attempt"
# Objects larger than this are not results.json files (they are a few KiB): refuse to read them.
MAX_RESULTS_BYTES = 4 * 1024 * 1024
DEFAULT_WORKERS = 16
# Statuses of rows that carry no results from a job.
MISSING, UNREADABLE, ERROR = "missing", "unreadable", "error"

# --- results.json, as this module reads it ------------------------------------------------
# Extra keys are ignored (a newer writer may add some); the keys read here must have the
# right types, or the object is reported as unreadable with the offending field.

class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Instance(_Lenient):
    type: str
    count: int = Field(ge=1)
    neuron_cores: int | None = Field(None, ge=0)


class _StepTime(_Lenient):
    p50: float | None = None


class _Cache(_Lenient):
    mode: str | None = None
    hit_entries: int | None = Field(None, ge=0)
    new_entries: int | None = Field(None, ge=0)


class ResultsV1(_Lenient):
    schema_: str = Field(alias="schema")
    job_name: str
    status: str
    failure_reason: str | None = None
    backend: str | None = None  # None from an older writer: a SageMaker job
    region: str | None = None
    instance: _Instance
    runtime: str | None = None
    precision: str | None = None
    global_batch: int | None = Field(None, ge=0)
    step_time_s: _StepTime | None = None
    samples_per_s: float | None = None
    compile_s: float | None = None
    cache: _Cache | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    steps: int | None = Field(None, ge=0)
    steps_done: int | None = Field(None, ge=0)
    heartbeat_at: str | None = None


class Unreadable(Exception):
    """A results object that exists but cannot be used; the message says why."""


def parse(data: bytes) -> ResultsV1:
    """Parse one results.json object. Raises `Unreadable` with a reason a user can act on."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Unreadable(f"not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        truncated = "" if data.rstrip().endswith((b"}", b"]")) else " (truncated?)"
        # json's messages may end in "at" ("Unterminated string starting at"): a colon reads
        # right after every one of them, as in json's own str(exc).
        raise Unreadable(f"not valid JSON{truncated}: {exc.msg}: line {exc.lineno} column {exc.colno}") from None
    if not isinstance(doc, dict):
        raise Unreadable(f"not a JSON object but {type(doc).__name__}")
    found = doc.get("schema")
    if found != SCHEMA:
        newer = re.fullmatch(r"orchestrator\.results/v(\d+)", str(found))
        what = ("; a newer orchestrator wrote it: upgrade this one (`git pull` in its checkout) to read it"
                if newer and int(newer.group(1)) > int(SCHEMA.rsplit("v", 1)[1]) else "")
        raise Unreadable(f"unknown schema {found!r}; this orchestrator reads {SCHEMA!r}{what}")
    try:
        return ResultsV1.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise Unreadable(f"field {where}: {first['msg']}{more}") from None


# --- rows ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One job in the price-performance table. Fields that are unknown are None.

    `price_per_hour` is for all instances of the job (effective price for managed spot when
    its seconds are known); `cost_usd` is what the job billed (billable seconds x that
    price), when SageMaker says; `relative` is samples per dollar over the best row's.
    """

    job: str
    status: str
    backend: str | None = None
    region: str | None = None
    sweep: str | None = None
    trial: str | None = None
    instance: str | None = None
    count: int | None = None
    cores: int | None = None
    runtime: str | None = None
    precision: str | None = None
    global_batch: int | None = None
    step_time_p50_s: float | None = None
    samples_per_s: float | None = None
    price_per_hour: float | None = None
    price_source: str | None = None
    price_verified: bool | None = None  # False: an unverified price times the markup (cost.rate)
    failover_from: str | None = None  # a sweep job that failed over from this instance type
    spot: bool = False
    spot_savings: float | None = None
    billable_s: int | None = None
    training_s: int | None = None
    cost_usd: float | None = None
    cost_per_million_samples: float | None = None
    samples_per_dollar: float | None = None
    relative: float | None = None
    compile_s: float | None = None
    cache_hit_ratio: float | None = None
    steps_done: int | None = None
    note: str | None = None
    uri: str | None = None

    @property
    def ok(self) -> bool:
        return self.status not in (MISSING, UNREADABLE, ERROR)


@dataclass(frozen=True)
class Collection:
    """What `collect` found: rows (best first), where it looked, and how much it retried."""

    prefix: str
    rows: list[Row]
    retries: int = 0

    @property
    def errors(self) -> list[Row]:
        return [r for r in self.rows if r.status == ERROR]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def build_row(job: str, results: ResultsV1, uri: str, describe: dict | None,
              price: catalog.Price | None, note: str | None = None) -> Row:
    """The row for one job from its results, its DescribeTrainingJob answer (None when there
    is none: local jobs, or no such SageMaker job) and the catalog price of one instance."""
    inst = results.instance
    notes = [note] if note else []
    status = results.status
    spot = False
    billable = training = None
    if describe is not None:
        status = our_status(describe)
        spot = bool(describe.get("EnableManagedSpotTraining"))
        billable = describe.get("BillableTimeInSeconds")
        training = describe.get("TrainingTimeInSeconds")
        if describe.get("FailureReason") and status == "failed":
            notes.append(str(describe["FailureReason"]))
    elif results.failure_reason:
        notes.append(results.failure_reason)
    if results.status == "running":
        # A heartbeat: the job runs, or it was killed before launch.py wrote its final record.
        of = f" of {results.steps}" if results.steps is not None else ""
        at = f" at {results.heartbeat_at}" if results.heartbeat_at else ""
        ended = ("; the job ended before its final results were written: this is its last known state"
                 if status in ("failed", "stopped", "completed") else "")
        notes.append(f"heartbeat{at}: step {results.steps_done if results.steps_done is not None else '?'}{of}{ended}")

    local = results.backend == "local"
    price_per_hour = price_source = spot_savings = verified = None
    hourly = None
    if local:
        price_source = "local: no cloud cost"
    elif price is None:
        notes.append(f"no price for {inst.type} in {results.region}; run `python -m orchestrator prices refresh`")
    else:
        hourly = cost.rate(price)
        verified = hourly.verified
        price_per_hour = hourly.usd_per_hour * inst.count
        price_source = (f"{price.source}, {price.as_of}" if verified else
                        f"~ {price.source}, {price.as_of}, x {hourly.markup:g} (assumed SageMaker markup; "
                        f"{cost.UNVERIFIED})")
        if spot:
            if billable is not None and training:
                spot_savings = max(0.0, 1.0 - billable / training)
                price_per_hour *= billable / training
                price_source += f"; spot, {spot_savings:.0%} saved"
            else:
                notes.append("spot savings unknown: on-demand price shown")

    attempt = results.tags.get(ATTEMPT_TAG, "")
    failover_from = attempt.removeprefix("failover:") if attempt.startswith("failover:") else None
    if failover_from:
        batch = f", global batch {results.global_batch}" if results.global_batch is not None else ""
        notes.append(f"failed over from {failover_from}: not its trial's configuration (ran on {inst.type} "
                     f"x{inst.count}{batch}); compare it as a configuration of its own")

    read = {"step_time_s.p50": results.step_time_s.p50 if results.step_time_s else None,
            "samples_per_s": results.samples_per_s, "compile_s": results.compile_s}
    odd = [name for name, value in read.items() if value is not None and not math.isfinite(value)]
    if odd:
        notes.append(f"non-finite value in {', '.join(odd)}")
    sps = _finite(results.samples_per_s)
    samples_per_dollar = cost_per_million = None
    if price_per_hour is not None and sps is not None and sps > 0 and price_per_hour > 0:
        samples_per_dollar = sps * 3600.0 / price_per_hour
        cost_per_million = 1e6 / samples_per_dollar
    cost_usd = None
    if hourly is not None and billable is not None:
        cost_usd = billable / 3600.0 * hourly.usd_per_hour * inst.count

    hit_ratio = None
    cache = results.cache
    if cache is not None and cache.hit_entries is not None and cache.new_entries is not None:
        total = cache.hit_entries + cache.new_entries
        hit_ratio = cache.hit_entries / total if total else None

    return Row(
        job=job, status=status, backend=results.backend, region=results.region,
        sweep=results.tags.get(SWEEP_TAG), trial=results.tags.get(TRIAL_TAG),
        instance=inst.type, count=inst.count,
        cores=None if inst.neuron_cores is None else inst.neuron_cores * inst.count,
        runtime=results.runtime, precision=results.precision, global_batch=results.global_batch,
        step_time_p50_s=_finite(results.step_time_s.p50) if results.step_time_s else None,
        samples_per_s=sps, price_per_hour=price_per_hour, price_source=price_source, price_verified=verified,
        failover_from=failover_from,
        spot=spot,
        spot_savings=spot_savings, billable_s=billable, training_s=training, cost_usd=cost_usd,
        cost_per_million_samples=cost_per_million, samples_per_dollar=samples_per_dollar,
        compile_s=_finite(results.compile_s), cache_hit_ratio=hit_ratio, steps_done=results.steps_done,
        note="; ".join(notes) or None, uri=uri,
    )


def rank(rows: Iterable[Row]) -> list[Row]:
    """Rows with `relative` filled in (best completed row = 1.0), sorted best first; then
    unranked rows with results, fastest first; then rows without results."""
    rows = list(rows)
    best = max((r.samples_per_dollar for r in rows if r.status == "completed" and r.samples_per_dollar), default=None)
    ranked = [replace(r, relative=(r.samples_per_dollar / best if best and r.samples_per_dollar
                                   and r.status == "completed" else None)) for r in rows]
    return sorted(ranked, key=lambda r: (r.relative is None, -(r.relative or 0.0), not r.ok,
                                         -(r.samples_per_s or 0.0), r.job))


# --- where results live -------------------------------------------------------------------

def local_store_uri() -> str:
    """Where local-backend jobs write: file://$ORCHESTRATOR_HOME/store/jobs."""
    from orchestrator.paths import home

    return (home() / "store" / "jobs").as_uri()


def has_results(file_prefix: str) -> bool:
    """Whether a file:// prefix holds any job's results folder."""
    return bool(_FileStore(file_prefix).jobs())


def results_uri(prefix: str, job: str) -> str:
    return f"{prefix.rstrip('/')}/{RESULTS_DIR}/{job}/{RESULTS_FILE}"


# S3's bucket naming rule (the part a results prefix can get wrong by hand).
def check_prefix(prefix: str, argument: str = "results prefix") -> str:
    """`prefix` if it can be a results prefix: what `storage.open_store` takes (s3://BUCKET[/key]
    with a valid bucket name, file:///absolute/path) and, for file://, a folder or nothing yet.
    InputError naming `argument` otherwise; nothing is read."""
    hint = "give the jobs' output.uri: s3://bucket/prefix or file:///path (a folder)"
    try:
        store = open_store(prefix)
    except ValueError as exc:
        raise InputError(f"{argument} {prefix!r}: {str(exc).removeprefix(f'{prefix}: ')}", hint=hint) from None
    if isinstance(store, FileStore):
        from orchestrator.paths import unusable

        why = unusable(store.root)
        if why is not None:
            raise InputError(f"{argument} {prefix!r}: {store.root}: {why}", hint=hint)
        if store.root.exists() and not store.root.is_dir():
            raise InputError(f"{argument} {prefix!r}: {store.root} is not a folder", hint=hint)
    return prefix


def _segment(job: str) -> str:
    """`job` as one path segment under <prefix>/results/, so no key or path leaves the prefix."""
    if not job or job in (".", "..") or any(c in job for c in "/\\\x00"):
        raise Unreadable(f"{job!r} is not a job folder name; not read")
    return job


class _Store(Protocol):
    """The results prefix of one output.uri: which jobs have a folder, and their object
    (None when the job has none; `Unreadable` when it cannot be a results object)."""

    def jobs(self) -> list[str]: ...

    def get(self, job: str) -> bytes | None: ...

    def uri(self, job: str) -> str: ...


class _FileStore:
    def __init__(self, prefix: str):
        self.prefix = prefix.rstrip("/")
        parsed = urlparse(prefix)
        self.root = Path(unquote(parsed.netloc + parsed.path) if parsed.netloc else unquote(parsed.path))

    def jobs(self) -> list[str]:
        base = self.root / RESULTS_DIR
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir())

    def get(self, job: str) -> bytes | None:
        from orchestrator.paths import NotRegularFile, read_regular

        path = self.root / RESULTS_DIR / _segment(job) / RESULTS_FILE
        try:
            data = read_regular(path, MAX_RESULTS_BYTES)
        except FileNotFoundError:
            return None
        except NotRegularFile as exc:  # a FIFO would block for ever, /dev/zero never end
            raise Unreadable(f"{exc.strerror}; not read") from None
        if len(data) > MAX_RESULTS_BYTES:
            raise Unreadable(f"more than {MAX_RESULTS_BYTES} bytes: too large for a results object")
        return data

    def uri(self, job: str) -> str:
        return results_uri(self.prefix, job)


class _S3Store:
    def __init__(self, prefix: str, client):
        parsed = urlparse(prefix)
        self.prefix = prefix.rstrip("/")
        self.bucket = parsed.netloc
        key = parsed.path.lstrip("/").rstrip("/")
        self.base = f"{key}/{RESULTS_DIR}/" if key else f"{RESULTS_DIR}/"
        self.client = client

    def jobs(self) -> list[str]:
        names = set()
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.base):
            for obj in page.get("Contents", []):
                rest = obj["Key"][len(self.base):]
                if "/" in rest:
                    names.add(rest.split("/", 1)[0])
        return sorted(names)

    def get(self, job: str) -> bytes | None:
        from botocore.exceptions import ClientError

        key = f"{self.base}{_segment(job)}/{RESULTS_FILE}"
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise
        if response.get("ContentLength", 0) > MAX_RESULTS_BYTES:
            response["Body"].close()
            raise Unreadable(f"{response['ContentLength']} bytes: too large for a results object")
        return response["Body"].read()

    def uri(self, job: str) -> str:
        return results_uri(self.prefix, job)


def client_config(workers: int):
    """botocore config for collection (`aws.client_config`: timeouts, the backends' retry
    settings), with a connection pool as large as our thread pool."""
    from orchestrator import aws

    return aws.client_config(pool=workers + 2)


def our_status(described: dict) -> str:
    """Our status name for a DescribeTrainingJob answer, by the sagemaker backend's table."""
    from orchestrator.backends.sagemaker import status_of

    primary = str(described.get("TrainingJobStatus", ""))
    try:
        return status_of(primary, described.get("SecondaryStatus"))
    except BackendError:
        return primary.lower() or "unknown"


# --- retries ------------------------------------------------------------------------------

def retryable(exc: BaseException) -> bool:
    """Throttling, 5xx and dropped connections: worth another try (`aws.classify`). An
    endpoint that cannot be reached or does not answer is not: the client already tried it
    `aws.NO_ANSWER_ATTEMPTS` times, and every other read would wait as long again."""
    from orchestrator import aws

    failure = aws.classify(exc)
    return failure is not None and not failure.permanent and failure.kind not in ("no-answer", "unreachable")


# --- collection ---------------------------------------------------------------------------

class _Collector:
    def __init__(self, store: _Store, *, region: str | None, sagemaker, workers: int, attempts: int,
                 sleep: Callable[[float], None]):
        self.store = store
        self.region = region
        self.workers = workers
        self.attempts = attempts
        self.sleep = sleep
        self._sagemaker = {}
        if sagemaker is not None:
            self._sagemaker[sagemaker.meta.region_name] = sagemaker
        self._lock = threading.Lock()
        self._default_region: str | None = None
        self._prices: dict[tuple[str, str], catalog.Price | None] = {}
        self.retries = 0
        self.sweeps_seen: set[str] = set()  # sweep tags read, for the hint of a filter that matches none

    def sagemaker(self, region: str):
        with self._lock:
            client = self._sagemaker.get(region)
            if client is None:
                from orchestrator import aws

                client = aws.client("sagemaker", region, config=client_config(self.workers))
                self._sagemaker[region] = client
            return client

    def job_region(self, results: ResultsV1) -> str:
        """The results' region, else the command's region rule (`default_region`: --region,
        AWS_REGION, ..., us-east-1), resolved once and only when a SageMaker job's results
        object names none (a local job's needs no AWS configuration).
        An AWS config that rule cannot read is the command's error, not one job's."""
        if results.region:
            return results.region
        if results.backend == "local":
            return "us-east-1"  # a local row is priced as "local": no AWS config to read for it
        return self.command_region()

    def price(self, type_: str, region: str) -> catalog.Price | None:
        key = (type_, region)
        if key not in self._prices:
            self._prices[key] = catalog.price(type_, region)
        return self._prices[key]

    def retry(self, what: Callable[[], Any]) -> Any:
        """Call `what`, again after a jittered exponential backoff while it fails retryably."""
        attempt = 1
        while True:
            try:
                return what()
            except Exception as exc:
                if attempt >= self.attempts or not retryable(exc):
                    raise
            with self._lock:
                self.retries += 1
            self.sleep(random.uniform(0.5, 1.0) * min(8.0, 0.25 * 2 ** (attempt - 1)))
            attempt += 1

    def describe(self, job: str, region: str) -> tuple[dict | None, str | None]:
        """DescribeTrainingJob, or (None, why) when SageMaker has no such job."""
        from botocore.exceptions import ClientError

        client = self.sagemaker(region)
        try:
            return self.retry(lambda: client.describe_training_job(TrainingJobName=job)), None
        except ClientError as exc:
            error = exc.response.get("Error", {})
            if error.get("Code") in ("ValidationException", "ResourceNotFound"):
                return None, f"no SageMaker job {job} in {region}"
            raise

    def row(self, job: str, sweep: str | None) -> Row | None:
        """The row of one job; None when the sweep filter excludes it."""
        uri = self.store.uri(job)
        try:
            data = self.retry(lambda: self.store.get(job))
        except Unreadable as exc:
            return Row(job=job, status=UNREADABLE, note=str(exc), uri=uri) if _name_in(job, sweep) else None
        except Exception as exc:
            if not _name_in(job, sweep):
                return None
            return Row(job=job, status=ERROR, note=f"reading results failed: {_reason(exc)}", uri=uri)
        if data is None:
            if not _name_in(job, sweep):
                return None
            return self.missing_row(job, uri)
        try:
            results = parse(data)
        except Unreadable as exc:
            if not _name_in(job, sweep):
                return None
            return Row(job=job, status=UNREADABLE, note=str(exc), uri=uri)
        tagged = results.tags.get(SWEEP_TAG)
        if tagged is not None:
            with self._lock:
                self.sweeps_seen.add(tagged)
        if sweep is not None and not _in_sweep(job, results.tags, sweep):
            return None
        note = None if results.job_name == job else f"results name {results.job_name!r} differs"
        region = self.job_region(results)
        describe = None
        if results.backend != "local":
            try:
                describe, why = self.describe(job, region)
            except Exception as exc:
                base = build_row(job, results, uri, None, self.price(results.instance.type, region), note)
                return replace(base, status=ERROR, note=f"DescribeTrainingJob failed: {_reason(exc)}")
            note = "; ".join(n for n in (note, why) if n) or None
        return build_row(job, results, uri, describe, self.price(results.instance.type, region), note)

    def missing_row(self, job: str, uri: str) -> Row:
        """The row of a job with no results object: on S3, what SageMaker says of it (a job
        that failed or was stopped before writing one, a capacity error, one still starting),
        else (or when SageMaker has no such job) "missing"."""
        missing = f"no {RESULTS_FILE} at {uri}"
        if not isinstance(self.store, _S3Store):
            return Row(job=job, status=MISSING, note=missing, uri=uri)
        region = self.command_region()
        try:
            described, _ = self.describe(job, region)
        except Exception as exc:
            return Row(job=job, status=MISSING, note=f"{missing}; DescribeTrainingJob failed: {_reason(exc)}", uri=uri)
        if described is None:
            return Row(job=job, status=MISSING, note=missing, uri=uri)
        status = our_status(described)
        why = described.get("FailureReason")
        config = described.get("ResourceConfig") or {}
        note = f"{missing}: the job is {status}" + (f": {why}" if why else "")
        return Row(job=job, status=status, backend="sagemaker", region=region, instance=config.get("InstanceType"),
                   count=config.get("InstanceCount"), spot=bool(described.get("EnableManagedSpotTraining")),
                   billable_s=described.get("BillableTimeInSeconds"), training_s=described.get("TrainingTimeInSeconds"),
                   note=note, uri=uri)

    def command_region(self) -> str:
        """The command's region rule (`default_region`: --region, AWS_REGION, ..., us-east-1),
        resolved once: for jobs whose results name no region or are missing."""
        with self._lock:
            if self._default_region is None:
                from orchestrator.backends.sagemaker import default_region

                try:
                    self._default_region = default_region(self.region)
                except InputError as exc:
                    raise _CommandError(exc) from None
            return self._default_region

    def run(self, jobs: list[str], sweep: str | None, progress: Callable[[int, int], None] | None) -> list[Row]:
        rows: list[Row] = []
        total = len(jobs)
        if progress:
            progress(0, total)
        if self.workers <= 1:
            for done, job in enumerate(jobs, 1):
                row = self._safe_row(job, sweep)
                if row is not None:
                    rows.append(row)
                if progress:
                    progress(done, total)
            return rows
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="results") as pool:
            futures = [pool.submit(self._safe_row, job, sweep) for job in jobs]
            for done, future in enumerate(as_completed(futures), 1):
                row = future.result()
                if row is not None:
                    rows.append(row)
                if progress:
                    progress(done, total)
        return rows

    def _safe_row(self, job: str, sweep: str | None) -> Row | None:
        try:
            return self.row(job, sweep)
        except _CommandError as exc:
            raise exc.error from None
        except Exception as exc:  # a bug or an odd answer for one job must not lose the others
            return Row(job=job, status=ERROR, note=f"{type(exc).__name__}: {exc}", uri=self.store.uri(job))


class _CommandError(Exception):
    """Carries an InputError about the whole command (its AWS config) out of one job's row."""

    def __init__(self, error: InputError):
        super().__init__(error.message)
        self.error = error


# A sweep id as sweep.py makes it: <name>-<8 hex>, and a scheduled tick's adds -<YYYYMMDDHHMM>.
# A sweep's job name: <job prefix>-t<8 hex>[-rN], the job prefix being the sweep id with its
# name part truncated (see sweep.Identity.job_prefix).
_SWEEP_JOB = re.compile(r"(?P<prefix>.+)-t[0-9a-f]{8}(?:-r[0-9]+)?")


def _tag_in(tagged: str, sweep: str) -> bool:
    from orchestrator.sweep import sweep_keys

    return sweep in sweep_keys(tagged)


def _in_sweep(job: str, tags: dict, sweep: str) -> bool:
    """Whether readable results belong to `sweep`: by their sweep tag when they have one; a
    job our launcher tagged (`orchestrator:job`) without a sweep tag is in no sweep, whatever
    its name; untagged results (written elsewhere) are matched by name."""
    from orchestrator.request import TAG_JOB

    tagged = tags.get(SWEEP_TAG)
    if tagged is not None:
        return _tag_in(tagged, sweep)
    if TAG_JOB in tags:
        return False
    return _name_in(job, sweep)


def _name_in(job: str, sweep: str | None) -> bool:
    """Whether a job known only by its name belongs to `sweep` (see the module docstring)."""
    if sweep is None:
        return True
    shaped = _SWEEP_JOB.fullmatch(job)
    from orchestrator.sweep import SWEEP_ID, Identity

    parts = SWEEP_ID.fullmatch(shaped["prefix"]) if shaped else None
    if parts is None:
        return job.startswith(f"{sweep}-")

    digest, tick = parts["digest"], parts["tick"]
    prefix = shaped["prefix"]
    # `sweep` read as a sweep name ...
    if Identity(sweep, digest, tick).job_prefix == prefix:
        return True
    # ... or as a sweep id, timed or untimed.
    asked = SWEEP_ID.fullmatch(sweep)
    return (asked is not None and asked["digest"] == digest and asked["tick"] in (None, tick)
            and Identity(asked["name"], digest, tick).job_prefix == prefix)


def _listing_needle(sweep: str) -> str:
    """A substring of every job name of `sweep` (read as a name or as an id): the start of the
    name part, as much of it as sweep.py keeps when it truncates for the longest suffix."""
    from orchestrator.sweep import MAX_PREFIX, SWEEP_ID

    asked = SWEEP_ID.fullmatch(sweep)
    name = asked["name"] if asked else sweep
    kept = MAX_PREFIX - len("-12345678-202601010000") - 1
    return name[:kept].rstrip("-") or name[:1]


def _reason(exc: BaseException) -> str:
    from botocore.exceptions import ClientError

    from orchestrator import aws

    silent = aws.describe(exc)
    if silent is not None:
        return f"{silent}; {aws.tries_said(exc)}"

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', 'error')}: {error.get('Message', '')}".rstrip(": ")
    return f"{type(exc).__name__}: {exc}"


def _sagemaker_jobs(collector: _Collector, sweep: str, region: str) -> list[str]:
    """Names of this sweep's SageMaker jobs (by name prefix), so that jobs without a results
    object yet still appear as rows."""
    client = collector.sagemaker(region)
    needle = _listing_needle(sweep)

    def names() -> list[str]:
        found = []
        for page in client.get_paginator("list_training_jobs").paginate(NameContains=needle):
            found.extend(s["TrainingJobName"] for s in page.get("TrainingJobSummaries", []))
        return found

    return [n for n in collector.retry(names) if _name_in(n, sweep)]


def collect(prefix: str, *, job: str | None = None, sweep: str | None = None, region: str | None = None,
            s3=None, sagemaker=None, workers: int = DEFAULT_WORKERS, attempts: int = 4,
            progress: Callable[[int, int], None] | None = None,
            sleep: Callable[[float], None] | None = None) -> Collection:
    """Rows for the jobs under `prefix` (an output.uri: s3://bucket/jobs or file:///...).

    `job` limits to one job (InputError when its object is missing, saying where it looked;
    a row when it is unreadable or could not be fetched); `sweep` to the jobs of a sweep id,
    a sweep name or a schedule's untimed id, by tag or else by job name (see the module
    docstring; on S3 also its SageMaker jobs with no results yet; InputError listing the
    sweeps found when it matches nothing). `region` (default: the region rule of
    `backends.sagemaker.default_region`) is the S3 client's, that of jobs whose results name
    none, and where a sweep's SageMaker jobs are listed. `s3` and `sagemaker` are boto3
    clients (created with `client_config` when None; SageMaker ones per job region).
    `workers` 1 collects sequentially. `progress(done, total)` is called as jobs finish.
    Raises InputError for an unusable prefix or filter, or an AWS config that cannot be read.
    """
    from orchestrator.request import JOB_NAME_PATTERN, MAX_JOB_NAME

    if job is not None and sweep is not None:
        raise InputError("--job and --sweep select different things; give one",
                         hint="a job's row already shows its sweep")
    if sweep is not None and not sweep.strip():
        raise InputError("--sweep is empty", hint="give a sweep id (e.g. instances-1a2b3c4d) or a sweep name")
    if job is not None and (len(job) > MAX_JOB_NAME or not JOB_NAME_PATTERN.match(job)):
        raise InputError(f"--job {job[:80]!r} is not a job name: 1-63 letters, digits and dashes, starting and "
                         "ending with a letter or digit", hint="use the name `submit` printed")
    check_prefix(prefix)
    scheme = urlparse(prefix).scheme
    if scheme == "s3":
        from orchestrator.backends.sagemaker import default_region

        # botocore itself reads AWS_DEFAULT_REGION only: without this, AWS_REGION alone would
        # send S3 calls to us-east-1 (another partition's endpoint for cn-/us-gov- regions).
        region = default_region(region)
        if s3 is None:
            from orchestrator import aws

            s3 = aws.client("s3", region, config=client_config(workers))
        store: _Store = _S3Store(prefix, s3)
    else:
        store = _FileStore(prefix)
    collector = _Collector(store, region=region, sagemaker=sagemaker, workers=max(1, workers),
                           attempts=max(1, attempts), sleep=sleep or time.sleep)
    if job is not None:
        jobs = [job]
    else:
        try:
            jobs = collector.retry(store.jobs)
        except Exception as exc:
            from orchestrator import aws

            hint = (aws.NO_ANSWER_HINT if aws.describe(exc) else
                    "check the prefix (the job spec's output.uri) and your credentials")
            raise BackendError(f"cannot list {prefix}: {_reason(exc)}", hint=hint) from None
        if sweep is not None and scheme == "s3":
            from orchestrator.backends.sagemaker import default_region

            where = default_region(region)
            try:
                listed = _sagemaker_jobs(collector, sweep, where)
            except Exception as exc:
                # Without this list, a sweep's jobs that have no results yet would vanish unseen.
                raise BackendError(f"cannot list SageMaker training jobs of sweep {sweep} in {where}: {_reason(exc)}",
                                   hint="the caller needs sagemaker:ListTrainingJobs; or pass --region") from None
            jobs = sorted(set(jobs) | set(listed))
    rows = collector.run(jobs, sweep, progress)
    if sweep is not None and not rows:
        known = sorted(collector.sweeps_seen)
        shown = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
        raise InputError(f"no results for sweep {sweep} under {prefix}",
                         hint=(f"sweeps with results there: {shown}; " if known else "no sweep's results are there; ")
                         + "--sweep takes a sweep id, a sweep name, or a schedule's untimed id; check --prefix "
                         f"(results live at <output.uri>/{RESULTS_DIR}/<job>/{RESULTS_FILE})")
    if job is not None and [row.status for row in rows] == [MISSING]:
        raise InputError(f"--job {job}: no {RESULTS_FILE} at {store.uri(job)}",
                         hint=f"results live at <output.uri>/{RESULTS_DIR}/<job>/{RESULTS_FILE}; if the job wrote "
                              "elsewhere, pass --prefix with its output.uri (or --spec with its job spec); a job "
                              "still running has written none yet")
    return Collection(prefix=prefix, rows=rank(rows), retries=collector.retries)


# --- rendering ----------------------------------------------------------------------------

COLUMNS = (
    # (header, Row attribute, format)
    ("job", "job", "s"),
    ("instance", "instance", "s"),
    ("n", "count", "d"),
    ("cores", "cores", "d"),
    ("runtime", "runtime", "s"),
    ("prec", "precision", "s"),
    ("batch", "global_batch", "d"),
    ("step p50 s", "step_time_p50_s", ".4f"),
    ("samples/s", "samples_per_s", ",.1f"),
    ("USD/h", "price_per_hour", ".4f"),
    ("USD/M samples", "cost_per_million_samples", ".4f"),
    ("samples/USD", "samples_per_dollar", ",.0f"),
    ("rel.", "relative", ".2f"),
    ("compile s", "compile_s", ".1f"),
    ("cache hit", "cache_hit_ratio", ".0%"),
    ("status", "status", "s"),
)


# Columns computed from the price: marked "~" when the price is unverified (cost.rate).
_PRICED = frozenset({"price_per_hour", "cost_per_million_samples", "samples_per_dollar", "relative"})


def _cell(row: Row, attr: str, fmt: str) -> str:
    value = getattr(row, attr)
    if value is None:
        return "local" if attr == "price_per_hour" and row.backend == "local" else "-"
    text = format(value, fmt) if fmt != "s" else str(value)
    if attr == "instance" and row.failover_from:
        return f"{text} (failover from {row.failover_from})"
    return f"~{text}" if attr in _PRICED and row.price_verified is False else text


def render_table(collection: Collection, width: int | None = None, color: bool = False) -> str:
    """A rich table (as text) of the rows, then one line per note and the price sources.
    `width` caps the table's width (cells fold); by default it takes its natural width."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Values are data, never rich markup (an instance type or prefix with "[/x]" in it): Text.
    table = Table(title=Text(f"results under {collection.prefix}"), title_justify="left")
    for header, _, fmt in COLUMNS:
        table.add_column(header, justify="left" if fmt == "s" else "right", overflow="fold")
    for row in collection.rows:
        style = None if row.ok else "red"
        table.add_row(*(Text(_cell(row, attr, fmt)) for _, attr, fmt in COLUMNS), style=style)
    buffer = io.StringIO()
    # 16 columns squeezed into a narrow terminal become unreadable: by default the table takes
    # its natural width (a ceiling, not a target) and the terminal wraps, losing nothing.
    console = Console(file=buffer, width=width or 400, force_terminal=color, no_color=not color,
                      color_system="auto" if color else None)
    console.print(table)
    for row in collection.rows:
        if row.note:
            console.print(f"{row.job}: {row.note}", markup=False, highlight=False)
    sources = sorted({r.price_source for r in collection.rows if r.price_source})
    for source in sources:
        console.print(f"price: {source}", markup=False, highlight=False)
    if any(r.price_verified is False for r in collection.rows):
        console.print(f"~ estimated: an EC2 price times an assumed SageMaker markup, not SageMaker's own price "
                      f"({cost.UNVERIFIED})", markup=False, highlight=False)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


def _record(row: Row) -> dict:
    return asdict(row)


def render_csv(collection: Collection) -> str:
    """CSV with a header of Row field names; unknown values are empty cells."""
    buffer = io.StringIO()
    names = [f.name for f in fields(Row)]
    writer = csv.DictWriter(buffer, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for row in collection.rows:
        writer.writerow({k: ("" if v is None else v) for k, v in _record(row).items()})
    return buffer.getvalue()


def render_json(collection: Collection) -> str:
    """{"prefix", "retries", "rows": [Row fields...]}; unknown values are null."""
    return json.dumps({"prefix": collection.prefix, "retries": collection.retries,
                       "rows": [_record(r) for r in collection.rows]}, indent=2)


def _label(row: Row) -> str:
    parts = [f"{row.instance} x{row.count}" if row.instance else "?"]
    if row.failover_from:
        parts.append(f"(failover from {row.failover_from})")
    if row.global_batch is not None:
        parts.append(f"b{row.global_batch}")
    if row.precision:
        parts.append(row.precision)
    if row.runtime:
        parts.append(row.runtime)
    return f"{row.job}\n{' '.join(parts)}"


def render_plot(collection: Collection) -> bytes:
    """A PNG: samples per dollar (left) and samples/s (right) per job and configuration.

    Raises InputError when no row has a throughput to plot.
    """
    rows = [r for r in collection.rows if r.samples_per_s is not None]
    if not rows:
        raise InputError("nothing to plot: no job has a measured samples/s",
                         hint="wait for jobs to complete, or check the rows' status and notes")
    # The Agg canvas directly, not pyplot: no global backend switch, no GUI, thread-safe enough.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels = [_label(r) for r in rows]
    ys = list(range(len(rows)))
    height = max(3.0, 0.6 * len(rows) + 1.5)
    fig = Figure(figsize=(13, height), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, sharey=True)
    per_dollar = [r.samples_per_dollar or 0.0 for r in rows]
    bars = left.barh(ys, per_dollar, color=["#2a7ab0" if r.samples_per_dollar else "#cccccc" for r in rows])
    for bar, row in zip(bars, rows, strict=True):
        text = (f"{row.samples_per_dollar:,.0f} ({row.relative:.2f})" if row.relative is not None
                else f"{row.samples_per_dollar:,.0f}" if row.samples_per_dollar else
                ("local job: no cloud cost" if row.backend == "local" else "no price known"))
        left.annotate(text, (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(3, 0),
                      textcoords="offset points", va="center", fontsize=8)
    left.set_yticks(ys, labels, fontsize=8)
    left.invert_yaxis()
    if any(per_dollar):
        left.set_xlim(0, max(per_dollar) * 1.4)  # room for the labels right of the bars
    else:
        left.set_xlim(0, 1)
        left.set_xticks([])
    left.set_xlabel("samples per dollar (relative to best)")
    left.set_title("price-performance")
    throughput = [r.samples_per_s for r in rows]
    right.barh(ys, throughput, color="#e08a2c")
    for y, value in zip(ys, throughput, strict=True):
        right.annotate(f"{value:,.1f}", (value, y), xytext=(3, 0), textcoords="offset points", va="center",
                       fontsize=8)
    right.set_xlabel("samples/s (global)")
    right.set_title("throughput")
    right.set_xlim(0, max(throughput) * 1.25 or 1.0)
    fig.suptitle(f"results under {collection.prefix}", fontsize=9)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
