"""Instance, image and price facts, read from the data files beside this module, and what
they mean for one job spec (`resolve`).

Every fact comes with the source and date it was taken from. The set of instance types that
SageMaker training accepts is read from the installed botocore's service model
(`TrainingInstanceType`), not copied, so the check follows botocore when AWS adds a type.

`resolve(spec)` derives, once, everything about where and how a spec runs that the doctor,
the cost estimate and the request read: the instance's facts and family, the LNC, workers per
host, EFA, the container environment as sent, the image and the price (a frozen `Target`).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from entrypoints.shared import atomic
from orchestrator.errors import InputError
from orchestrator.paths import home, read_regular

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

DATA = Path(__file__).parent / "data"


class Instance(NamedTuple):
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
    # An EC2 type (no ml. prefix) that the batch backend runs through AWS Batch.
    batch: bool = False

    def logical_cores(self, lnc: int | None = None) -> int:
        """Worker processes per host: one per logical NeuronCore at the given LNC."""
        return self.neuron_cores // (lnc or self.lnc_default)


class Image(NamedTuple):
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


class Price(NamedTuple):
    type: str
    region: str
    usd_per_hour: float
    source: str
    as_of: str
    kind: str

    @property
    def verified(self) -> bool:
        """Whether this is the price the job bills: SageMaker's own (from `prices refresh`) for an
        ml.* type, or the EC2 price of an EC2 type (batch: AWS Batch adds no charge of its own)."""
        return self.kind.startswith("sagemaker") or (self.kind.startswith("ec2") and not self.type.startswith("ml."))

    def describe(self) -> str:
        return f"{self.usd_per_hour:.4f} USD/h ({self.source}, {self.as_of})"


class Markup(NamedTuple):
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
            batch=bool(row.get("batch", False)),
        )
    return out


def instance(type_: str) -> Instance | None:
    return instances().get(type_)


def batch_instance_types() -> tuple[str, ...]:
    """The EC2 types the batch backend runs (Inferentia2), smallest first."""
    return tuple(t for t, facts in sorted(instances().items(), key=lambda item: item[1].vcpus) if facts.batch)


def batch_source() -> str:
    """Where the catalog's facts of the Batch (EC2) types come from."""
    return _load("instances.json")["batch_source"]


# What the caches below hold is botocore's, so they are kept per botocore version: a new
# botocore reads its own model again.
MAX_CACHE_BYTES = 1 << 20


@cache
def _botocore_version() -> str:
    """The installed botocore's version, read from its __init__.py: importing botocore (and
    logging with it) costs `validate` more than the cached facts it keys. Imported when the
    file does not say."""
    import importlib.util

    try:
        origin = importlib.util.find_spec("botocore").origin
        found = re.search(r"^__version__ = ['\"]([^'\"]+)['\"]", Path(origin).read_text(encoding="utf-8"), re.M)
    except (AttributeError, ImportError, OSError, TypeError, ValueError):
        found = None
    if found:
        return found.group(1)
    import botocore

    return botocore.__version__


def _read_cache(name: str):
    """The JSON value cached as `name` for this botocore, or None (missing, damaged, or not a
    regular file: a FIFO there is never opened for a blocking read)."""
    try:
        return json.loads(read_regular(home() / "cache" / f"{name}-{_botocore_version()}.json", MAX_CACHE_BYTES))
    except (OSError, ValueError):
        return None


def _write_cache(name: str, value) -> None:
    try:
        atomic.write_text(home() / "cache" / f"{name}-{_botocore_version()}.json", json.dumps(value))
    except OSError:
        pass  # a read-only home only costs the next run the same lookup


def botocore_version() -> str:
    """The installed botocore's version, without importing botocore."""
    return _botocore_version()


def botocore_cached(name: str, compute):
    """The JSON value `compute()` returns, cached in ORCHESTRATOR_HOME as `name` per botocore
    version (as the facts above are): loading a service model costs a command more than this."""
    cached = _read_cache(name)
    if cached is None:
        cached = compute()
        _write_cache(name, cached)
    return cached


@cache
def _sagemaker_model():
    """botocore's sagemaker service model, loaded once however many of the caches above miss."""
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker")


@cache
def training_instance_types() -> frozenset[str]:
    """Instance types SageMaker training accepts, from botocore's sagemaker service model.

    Loading that model costs a few hundred milliseconds, so the enum is cached in
    ORCHESTRATOR_HOME per botocore version: a new botocore reads its own model again.
    """
    cached = _read_cache("sagemaker-training-instance-types")
    # A cache of the wrong shape (damaged, edited) is rebuilt from botocore like a missing one.
    if isinstance(cached, list) and cached and all(isinstance(t, str) and t for t in cached):
        return frozenset(cached)
    types = frozenset(_sagemaker_model().shape_for("TrainingInstanceType").enum)
    _write_cache("sagemaker-training-instance-types", sorted(types))
    return types


@cache
def sagemaker_tag_shapes() -> dict[str, dict]:
    """{"TagKey": {...}, "TagValue": {...}} with the "pattern", "min" and "max" botocore's
    sagemaker service model gives a tag's key and value; cached in ORCHESTRATOR_HOME per
    botocore version, like `training_instance_types`."""
    cached = _read_cache("sagemaker-tag-shapes")
    if isinstance(cached, dict) and all(isinstance(cached.get(n), dict) and isinstance(cached[n].get("pattern"), str)
                                        for n in ("TagKey", "TagValue")):
        return cached
    model = _sagemaker_model()
    shapes = {name: {key: model.shape_for(name).metadata.get(key) for key in ("pattern", "min", "max")}
              for name in ("TagKey", "TagValue")}
    _write_cache("sagemaker-tag-shapes", shapes)
    return shapes


class EnvironmentLimits(NamedTuple):
    """What CreateTrainingJob's Environment accepts (botocore's TrainingEnvironmentMap)."""

    max_variables: int
    max_name: int
    max_value: int
    name_pattern: str


@cache
def environment_limits() -> EnvironmentLimits:
    """The Environment map's limits from botocore's sagemaker service model (cached in
    ORCHESTRATOR_HOME per botocore version, as `training_instance_types` is)."""
    cached = _read_cache("sagemaker-training-environment-limits")
    try:
        return EnvironmentLimits(**cached)
    except TypeError:
        pass  # missing or damaged: read botocore again
    shape = _sagemaker_model().shape_for("TrainingEnvironmentMap")
    limits = EnvironmentLimits(max_variables=int(shape.metadata["max"]), max_name=int(shape.key.metadata["max"]),
                               max_value=int(shape.value.metadata["max"]),
                               name_pattern=str(shape.key.metadata["pattern"]))
    _write_cache("sagemaker-training-environment-limits", limits._asdict())
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


# --- what the facts mean for one spec -------------------------------------------------------

# The Neuron compiler's default persistent cache (AWS Neuron docs, "Neuron Persistent Cache",
# general/arch/neuron-features/neuron-caching); launch.py pulls the cache tarball here.
NEURON_CACHE_DIR = "/var/tmp/neuron-compile-cache"
LNC_FLAG = re.compile(r"(?:^|\s)(?:-lnc|--lnc|--logical-nc-config)(?:=|\s+)(\d+)")
MODEL_TYPE_FLAG = re.compile(r"(?:^|\s)--model[-_]type(?:=|\s+)(\S+)")
# What the Neuron samples and the SDK's reference request give the compiler for transformer
# models (its default is `generic`); every model the orchestrator trains is a ViT.
TRANSFORMER_FLAG = "--model-type=transformer"
# Local jobs never reach AWS; the request still names an image, which the local backend ignores.
LOCAL_IMAGE = "local"


def type_family(instance_type: str) -> str:
    """`ml.trn1n.32xlarge` -> `trn1n` (the catalog's family groups trn1n with trn1); the EC2
    type `inf2.xlarge` -> `inf2`."""
    parts = instance_type.split(".")
    if len(parts) == 2 and parts[0] != "ml":
        return parts[0]
    return parts[1] if len(parts) == 3 and parts[0] == "ml" else ""


class Target(NamedTuple):
    """Where and how one job spec runs, derived once from the spec and the catalog (`resolve`),
    and passed down: the doctor, the cost estimate and the request read it, none derives it
    again. `environment` must not be changed (a copy goes into the request)."""

    instance_type: str
    family: str  # `type_family`: trn1, trn1n, trn2, inf2...; "" for a name not of the form [ml.]X.Y
    facts: Instance | None  # None for a type the catalog does not know
    lnc: int  # instance.lnc, else the type's default (1 when the catalog does not know it)
    logical_cores: int  # NeuronCores per host at that LNC (0 when unknown)
    workers_per_node: int  # training.workers_per_node, else one per logical core (SageMaker) or 1
    trainium: bool  # a Trainium instance (the catalog's accelerator)
    efa: bool  # multi-node SageMaker on a type with EFA: the orchestrator adds EFA_ENV
    environment: dict[str, str]  # the container's environment as the request sends it
    image_uri: str | None  # image.uri, the catalog image, "local"; None: no image for image.neuron_sdk
    price: Price | None  # SageMaker, Batch: the type's hourly price in the region; None if unknown or local
    neuron: bool = False  # the xla runtime on NeuronCores (Trainium or Inferentia2) in the cloud


def resolve(spec: JobSpec) -> Target:
    """The `Target` of `spec` (pure but for the price, read from the catalog's price files).

    - LNC: instance.lnc, else the instance's default. Workers per host: the spec's, else one
      per logical NeuronCore on SageMaker (at least 1), else 1 (local, or a type without facts).
    - EFA: a multi-node SageMaker job on an instance with EFA (trn1.32xlarge, trn1n, trn2). The
      SageMaker training toolkit sets the EFA variables itself only inside its own torchrun
      distribution; launch.py (the container's entrypoint) runs torchrun itself, so every EFA
      instance needs them from us.
    - Image: none is resolved for a local spec ("local"); an unknown image.neuron_sdk leaves
      `image_uri` None (the doctor's N010 says so; `catalog.image` raises the error).
    """
    facts = instance(spec.instance.type)
    lnc = spec.instance.lnc if spec.instance.lnc is not None else (facts.lnc_default if facts else 1)
    cloud = spec.backend_type.cloud
    logical = facts.logical_cores(lnc) if facts else 0
    if spec.training.workers_per_node is not None:
        workers = spec.training.workers_per_node
    else:
        workers = max(1, logical) if cloud and facts is not None else 1
    trainium = facts is not None and facts.accelerator.startswith("Trainium")
    neuron = cloud and facts is not None and facts.neuron_cores > 0 and spec.training.runtime == "xla"
    efa = cloud and spec.instance.count > 1 and facts is not None and facts.efa_gbps > 0
    family = type_family(spec.instance.type)
    if not cloud:
        image_uri: str | None = LOCAL_IMAGE
    elif spec.image.uri:
        image_uri = spec.image.uri
    else:
        found = images().get(spec.image.neuron_sdk or default_sdk())
        image_uri = found.uri(spec.region) if found else None
    return Target(
        instance_type=spec.instance.type, family=family, facts=facts, lnc=lnc, logical_cores=logical,
        workers_per_node=workers, trainium=trainium, efa=efa,
        environment=_environment(spec, family, lnc, neuron=neuron, efa=efa),
        image_uri=image_uri, price=price(spec.instance.type, spec.region) if cloud else None, neuron=neuron,
    )


def _environment(spec: JobSpec, family: str, lnc: int, *, neuron: bool, efa: bool) -> dict[str, str]:
    """The container's environment as the request sends it: spec.environment plus what the
    Neuron stack needs (the doctor's N023 checks exactly this).

    - xla on a Trainium or Inferentia2 instance (SageMaker, Batch; `neuron`): NEURON_CC_FLAGS gains
      `--model-type=transformer` unless the user's flags choose a model type, `--cache_dir`
      (where launch.py pulls the compile cache) and, on trn2, `--lnc=<lnc>` to match the
      runtime's NEURON_LOGICAL_NC_CONFIG, which is set too. Flags the user gave are kept first.
      The compile cache key holds these flags (all but `--cache_dir`), so it follows them.
    - multi-node on an EFA instance (`efa`): the EFA variables (`contract.EFA_ENV`); a user
      value wins (N019 warns about it).
    """
    env = dict(spec.environment)
    if neuron:
        flags = env.get("NEURON_CC_FLAGS", "").split()
        if not MODEL_TYPE_FLAG.search(" " + " ".join(flags)):
            flags.append(TRANSFORMER_FLAG)
        if spec.compile_cache.mode == "tarball" and not any(f.startswith("--cache_dir") for f in flags):
            flags.append(f"--cache_dir={NEURON_CACHE_DIR}")
        if family == "trn2":
            if not LNC_FLAG.search(" " + " ".join(flags)):
                flags.append(f"--lnc={lnc}")
            env.setdefault("NEURON_LOGICAL_NC_CONFIG", str(lnc))
        env["NEURON_CC_FLAGS"] = " ".join(flags)
    if efa:
        from entrypoints.shared.contract import EFA_ENV  # only then: the contract is not on validate's path

        for key, value in EFA_ENV.items():
            env.setdefault(key, value)
    return dict(sorted(env.items()))
