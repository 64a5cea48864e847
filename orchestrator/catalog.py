"""Instance, image and price facts, read from the data files beside this module.

Every fact comes with the source and date it was taken from. The set of instance types that
SageMaker training accepts is read from the installed botocore's service model
(`TrainingInstanceType`), not copied, so the check follows botocore when AWS adds a type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from orchestrator.errors import InputError
from orchestrator.paths import home, read_regular, write_atomic

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Instance:
    type: str
    family: str
    accelerator: str
    chips: int
    neuron_cores: int
    core_version: str
    device_memory_gib: int
    vcpus: int
    host_memory_gib: int
    efa_gbps: int
    multi_node: bool
    lnc_default: int
    lnc_allowed: tuple[int, ...]
    source: str
    as_of: str
    # NVMe instance storage, which SageMaker uses instead of an EBS volume: VolumeSizeInGB is ignored.
    instance_storage: bool = False

    def logical_cores(self, lnc: int | None = None) -> int:
        """Worker processes per host: one per logical NeuronCore at the given LNC."""
        return self.neuron_cores // (lnc or self.lnc_default)


@dataclass(frozen=True)
class Image:
    neuron_sdk: str
    tag: str
    torch: str
    torch_neuronx: str
    neuronx_cc: str
    python: str

    def uri(self, region: str) -> str:
        data = _images()
        host = data["registry_host"].format(account=data["registry_account"], region=region)
        return f"{host}/{data['repository']}:{self.tag}"


@dataclass(frozen=True)
class Price:
    type: str
    region: str
    usd_per_hour: float
    source: str
    as_of: str
    kind: str

    @property
    def verified(self) -> bool:
        """Whether this is SageMaker's own price (from `prices refresh`), not an EC2 price."""
        return self.kind.startswith("sagemaker")

    def describe(self) -> str:
        return f"{self.usd_per_hour:.4f} USD/h ({self.source}, {self.as_of})"


@dataclass(frozen=True)
class Markup:
    """What an unverified (non-SageMaker) price is multiplied by, and where that comes from."""

    factor: float
    source: str
    as_of: str


def sagemaker_markup() -> Markup:
    """The shipped data's assumed SageMaker-over-EC2 markup (data/prices.json)."""
    data = _load("prices.json")["sagemaker_markup"]
    return Markup(float(data["factor"]), data["source"], data["as_of"])


@cache
def _load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


# A prices file is a few KB; more is not one.
MAX_PRICES_BYTES = 16 * 2**20


def _images() -> dict:
    return _load("images.json")


@cache
def instances() -> dict[str, Instance]:
    data = _load("instances.json")
    out = {}
    for row in data["instances"]:
        out[row["type"]] = Instance(
            type=row["type"],
            family=row["family"],
            accelerator=row["accelerator"],
            chips=row["chips"],
            neuron_cores=row["neuron_cores"],
            core_version=row["core_version"],
            device_memory_gib=row["device_memory_gib"],
            vcpus=row["vcpus"],
            host_memory_gib=row["host_memory_gib"],
            efa_gbps=row["efa_gbps"],
            multi_node=row["multi_node"],
            lnc_default=row["lnc"]["default"],
            lnc_allowed=tuple(row["lnc"]["allowed"]),
            source=data["source"],
            as_of=data["as_of"],
            instance_storage=bool(row.get("instance_storage", False)),
        )
    return out


def instance(type_: str) -> Instance | None:
    return instances().get(type_)


@cache
def training_instance_types() -> frozenset[str]:
    """Instance types SageMaker training accepts, from botocore's sagemaker service model.

    Loading that model costs a few hundred milliseconds, so the enum is cached in
    ORCHESTRATOR_HOME per botocore version: a new botocore reads its own model again.
    """
    import botocore

    cache_file = home() / "cache" / f"sagemaker-training-instance-types-{botocore.__version__}.json"
    try:
        cached = json.loads(read_regular(cache_file, 1 << 20))
    except (OSError, ValueError):
        cached = None
    # A cache of the wrong shape (damaged, edited) is rebuilt from botocore like a missing one.
    if isinstance(cached, list) and cached and all(isinstance(t, str) and t for t in cached):
        return frozenset(cached)
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    types = frozenset(model.shape_for("TrainingInstanceType").enum)
    try:
        write_atomic(cache_file, json.dumps(sorted(types)))
    except OSError:
        pass  # a read-only home only costs the next run the same lookup
    return types


@cache
def sagemaker_tag_shapes() -> dict[str, dict]:
    """{"TagKey": {...}, "TagValue": {...}} with the "pattern", "min" and "max" botocore's
    sagemaker service model gives a tag's key and value; cached in ORCHESTRATOR_HOME per
    botocore version, like `training_instance_types`."""
    import botocore

    cache_file = home() / "cache" / f"sagemaker-tag-shapes-{botocore.__version__}.json"
    try:
        cached = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cached = None
    if isinstance(cached, dict) and all(isinstance(cached.get(n), dict) and isinstance(cached[n].get("pattern"), str)
                                        for n in ("TagKey", "TagValue")):
        return cached
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    shapes = {name: {key: model.shape_for(name).metadata.get(key) for key in ("pattern", "min", "max")}
              for name in ("TagKey", "TagValue")}
    try:
        write_atomic(cache_file, json.dumps(shapes))
    except OSError:
        pass
    return shapes


@dataclass(frozen=True)
class EnvironmentLimits:
    """What CreateTrainingJob's Environment accepts (botocore's TrainingEnvironmentMap)."""

    max_variables: int
    max_name: int
    max_value: int
    name_pattern: str


@cache
def environment_limits() -> EnvironmentLimits:
    """The Environment map's limits from botocore's sagemaker service model (cached in
    ORCHESTRATOR_HOME per botocore version, as `training_instance_types` is)."""
    import botocore

    cache_file = home() / "cache" / f"sagemaker-training-environment-limits-{botocore.__version__}.json"
    try:
        return EnvironmentLimits(**json.loads(cache_file.read_text()))
    except (OSError, ValueError, TypeError):
        pass  # missing or damaged: read botocore again
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    shape = model.shape_for("TrainingEnvironmentMap")
    limits = EnvironmentLimits(max_variables=int(shape.metadata["max"]), max_name=int(shape.key.metadata["max"]),
                               max_value=int(shape.value.metadata["max"]),
                               name_pattern=str(shape.key.metadata["pattern"]))
    try:
        write_atomic(cache_file, json.dumps(limits.__dict__))
    except OSError:
        pass
    return limits


def images() -> dict[str, Image]:
    return {row["neuron_sdk"]: Image(**row) for row in _images()["images"]}


def default_sdk() -> str:
    return _images()["default_training_sdk"]


def last_xla_training_sdk() -> str:
    return _images()["last_xla_training_sdk"]


def image_regions() -> tuple[str, ...]:
    return tuple(_images()["regions"])


def image_repository() -> str:
    """The ECR repository name of the PyTorch Neuron training images."""
    return _images()["repository"]


def vit_architectures() -> frozenset[str]:
    """The ViT architecture names timm registers (data/timm_vit.json, from the pinned timm)."""
    return frozenset(_load("timm_vit.json")["architectures"])


def vit_hybrid_architectures() -> frozenset[str]:
    """The ViTs among `vit_architectures` whose patch embedding is a ResNet/conv stem
    (timm's HybridEmbed), which `patch_embed: linear` cannot stand in for."""
    return frozenset(_load("timm_vit.json")["hybrid"])


def vit_architectures_source() -> tuple[str, str]:
    """(timm version, as_of) of `vit_architectures`."""
    data = _load("timm_vit.json")
    return data["timm"], data["as_of"]


def image_source() -> tuple[str, str]:
    data = _images()
    return data["source"], data["as_of"]


def image(neuron_sdk: str | None) -> Image:
    """The training image for a Neuron SDK version (None: the default). InputError if unknown."""
    version = neuron_sdk or default_sdk()
    found = images().get(version)
    if found is None:
        known = ", ".join(sorted(images(), key=version_key))
        raise InputError(f"no PyTorch Neuron training image for Neuron SDK {version}",
                         hint=f"known versions: {known}; or pin one with image.uri")
    return found


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def _price_rows() -> list[dict]:
    override = _override_prices_path()
    if override.exists():
        # `prices refresh` refuses to merge into a damaged file, so the way out starts with deleting it.
        return read_price_file(override, hint=(
            f"delete {override} to fall back to the built-in prices, then run `python -m orchestrator prices refresh` "
            "again to fetch current ones"))
    return _load("prices.json")["prices"]


def _override_prices_path() -> Path:
    """A refreshed price file in ORCHESTRATOR_HOME takes precedence over the shipped one."""
    return home() / "prices.json"


_PRICE_TEXT_FIELDS = ("type", "region", "source", "as_of", "kind")


def read_price_file(path: Path, hint: str) -> list[dict]:
    """The rows of a prices file (the format of `data/prices.json`), every field checked.

    InputError with `hint`, naming the file and the first thing wrong, when it cannot be read,
    is not JSON, or is not an object whose "prices" is a list of rows, each an object with
    non-empty strings "type" and "region", strings "source", "as_of" and "kind", and a
    positive number "usd_per_hour". Other keys are allowed and ignored.
    """
    import math

    def bad(what: str) -> InputError:
        return InputError(f"{path}: {what}", hint=hint)

    try:
        data = read_regular(path, MAX_PRICES_BYTES)  # never a FIFO (it would block) or a device
        if len(data) > MAX_PRICES_BYTES:
            raise bad(f"larger than {MAX_PRICES_BYTES} bytes; a prices file is small")
        doc = json.loads(data)
    except OSError as exc:
        raise bad(f"cannot read the prices file: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}", hint=hint) from None
    except ValueError:  # bytes that are not UTF-8 (or -16/-32) text
        raise bad("not valid JSON: not UTF-8 text") from None
    if not isinstance(doc, dict):
        raise bad(f"expected a JSON object with a 'prices' list, got {_json_kind(doc)}")
    if "prices" not in doc:
        raise bad("missing 'prices' (a list of price rows)")
    rows = doc["prices"]
    if not isinstance(rows, list):
        raise bad(f"prices: expected a list of price rows, got {_json_kind(rows)}")
    for index, row in enumerate(rows):
        where = f"prices[{index}]"
        if not isinstance(row, dict):
            raise bad(f"{where}: expected an object, got {_json_kind(row)}")
        for key in (*_PRICE_TEXT_FIELDS, "usd_per_hour"):
            if key not in row:
                raise bad(f"{where}: missing '{key}'")
        for key in _PRICE_TEXT_FIELDS:
            value = row[key]
            if not isinstance(value, str) or (key in ("type", "region") and not value):
                raise bad(f"{where}.{key}: expected a {'non-empty ' if key in ('type', 'region') else ''}string, "
                          f"got {_json_kind(value)}")
        usd = row["usd_per_hour"]
        if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd) or usd <= 0:
            raise bad(f"{where}.usd_per_hour: expected a positive number, got {_json_kind(usd)}")
    return rows


def _json_kind(value: object) -> str:
    """How a JSON value reads in a message: its JSON type, and the value when short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}" if len(value) <= 40 else "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _price(row: dict, **changes) -> Price:
    fields = {key: row[key] for key in (*_PRICE_TEXT_FIELDS, "usd_per_hour")}
    fields.update(changes)
    return Price(**fields)


def price(type_: str, region: str) -> Price | None:
    """The hourly price of an instance type in a region, with its source; None if unknown.

    A price for the exact region wins; failing that, the us-east-1 price is returned with its
    source saying so, since relative comparisons are what the tool mostly needs.
    """
    rows = _price_rows()
    for row in rows:
        if row["type"] == type_ and row["region"] == region:
            return _price(row)
    for row in rows:
        if row["type"] == type_ and row["region"] == "us-east-1":
            return _price(row, region=region, source=f"{row['source']}; us-east-1 price used for {region}")
    return None
