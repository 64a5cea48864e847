"""The `orchestrator.results/v1` document (`results.json`), defined once.

Stdlib only; nothing here imports `orchestrator` or pydantic. One frozen dataclass per object
of the document, one description per field (`field(metadata={"doc": ...})`):

- the writer (`entrypoints.launcher.report`) builds each record through these classes (`from_values`
  for the objects it keeps as dicts), so a field it forgets or misnames is a TypeError, and
  serialises it with `as_document`;
- a reader validates with pydantic over the same classes,
  `pydantic.TypeAdapter(results_schema.Results).validate_python(doc)`: unknown fields are
  ignored, a field with a default may be absent, and `AtLeast` bounds are pydantic's own
  `ge` checks (pydantic calls the hook; nothing here needs pydantic);
- docs/RESULTS.md's field tables are `markdown()`, and a test keeps them equal.

Required fields (no default) are those every v1 document has: `schema`, `job_name`,
`status`, `instance.type` and `instance.count`. Any other field may be missing from a v1
document (an earlier writer had not added it yet, see the versioning rule in
docs/RESULTS.md) and then reads as its default (None, or an empty list or object for those
never null); the launcher always writes every field.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

SCHEMA = "orchestrator.results/v1"
_SCHEMA_NAME = re.compile(r"orchestrator\.results/v(\d+)")
RESULTS_FILE = "results.json"
Status = Literal["running", "completed", "stopped", "failed"]
STATUSES: tuple[str, ...] = typing.get_args(Status)
T = TypeVar("T")


class AtLeast:
    """Metadata of an int field: its value is at least `minimum`. Pydantic reads it through
    `__get_pydantic_core_schema__` (a `ge` bound, pydantic's own check and message)."""

    def __init__(self, minimum: int) -> None:
        self.minimum = minimum

    def __repr__(self) -> str:
        return f"AtLeast({self.minimum})"

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        schema = handler(source)
        schema["ge"] = self.minimum
        return schema


Count = Annotated[int, AtLeast(0)]
Positive = Annotated[int, AtLeast(1)]


def doc(text: str, **options: Any) -> Any:
    """A dataclass field described by `text` (Markdown, as docs/RESULTS.md shows it)."""
    return field(metadata={"doc": text}, **options)


def optional(text: str, empty: Callable[[], Any] | None = None) -> Any:
    """A field that may be absent from a v1 document: it then reads as None, or as `empty()`
    for a list or an object that is never null. Its type says what a document holds when the
    field is there: null only where the type says `| None`."""
    return doc(text, default=None) if empty is None else doc(text, default_factory=empty)



def is_newer(schema: object) -> bool:
    """Whether `schema` (a document's "schema") names a later version than SCHEMA: a newer
    orchestrator wrote it, and a reader says so ("upgrade") instead of guessing at it."""
    found = _SCHEMA_NAME.fullmatch(str(schema))
    return found is not None and int(found.group(1)) > int(_SCHEMA_NAME.fullmatch(SCHEMA).group(1))

@dataclass(frozen=True, kw_only=True)
class Instance:
    """`instance`: the hardware of the job."""

    type: str = doc("the instance type (`ml.trn1.2xlarge`...)")
    count: Positive = doc("hosts")
    neuron_cores: Count | None = optional("NeuronCores per host (the catalog's); null when unknown")
    logical_cores: Count | None = optional("logical NeuronCores per host at the job's LNC; null when unknown")
    workers_per_node: Positive = optional("ranks per host")
    cpus: Count | None = optional(
        "CPUs of each host as the container reported them (`SM_NUM_CPUS`): on the local backend, this "
        "machine's")
    preference: Positive | None = optional(
        "with `instance.preferences`: the place in the list of the type SageMaker selected, which `type` "
        "names (1: the first choice); null without preferences")


@dataclass(frozen=True, kw_only=True)
class Model:
    """`model`: what was trained, from the spec."""

    arch: str | None = optional("the timm architecture (`vit_base_patch16_224`...)")
    image_size: Positive | None = optional("input height and width in pixels")
    patch_embed: Literal["linear", "conv"] | None = optional("how images become tokens")


@dataclass(frozen=True, kw_only=True)
class StepTime:
    """`step_time_s`: seconds per step over the reporting rank's post-warmup steps
    (device-synchronised)."""

    p50: float = optional("the median (the mean of the middle two for an even count)")
    p90: float = optional("the 90th percentile, by nearest rank")
    mean: float = optional("the mean")
    n: Count = optional("steps measured")


@dataclass(frozen=True, kw_only=True)
class CacheStats:
    """`cache`: this host's compile cache pull and pushes. A bad cache never fails a job:
    the launcher logs `WARNING compile cache: ...` and training compiles from scratch."""

    mode: Literal["tarball", "off"] = optional("`off` also when the job has no cache URI")
    uri: str | None = optional("the compile cache root (`compile_cache.uri`)")
    key: str | None = optional(
        "digest of the cache key (compiler kind and version, runtime, flags, target family, world size): "
        "the folder under `uri` (docs/COMPILE_CACHE.md)")
    hit_entries: Count = optional("entries pulled and unpacked before the first rank started")
    new_entries: Count = optional(
        "entries this host pushed (missing from the manifest before), over all its pushes")
    pull_bytes: Count = optional("bytes downloaded by the pull")
    pull_s: float = optional("seconds spent pulling (download, verify, unpack)")
    push_bytes: Count = optional("bytes uploaded, over all pushes")
    push_s: float = optional("seconds spent pushing (pack, upload, manifest), over all pushes")
    pushes: Count = optional(
        "pushes that found new complete entries: right after the warmup steps, every "
        "`compile_cache.push_interval_s` seconds while there were new ones, and at the end")
    warnings: list[str] = optional(
        "what went wrong with the cache: a corrupted, truncated or hostile archive (rejected: the job "
        "runs cold), a failed push", empty=list)
    persistent_dir: str | None = optional(
        "the folder of a SageMaker warm pool's persistent cache (`SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY`) "
        "the compile cache lived in, kept for the next job on the same instances; null without a warm pool")
    local_entries: Count = optional(
        "complete entries of the key already on disk before the pull (left in the persistent cache by an "
        "earlier job on a reused warm-pool instance): never downloaded again")


@dataclass(frozen=True, kw_only=True)
class Container:
    """`container`: what ran the job on this host."""

    entrypoint: bool = optional(
        "true: launch.py was the container's first process (the request's `ContainerEntrypoint`)")
    sm_environment: str = optional(
        "whose SM_* variables it used: `\"sagemaker-training <version>\"`, the training toolkit's own "
        "library; `\"emulated\"`, launch.py's copy where the toolkit is not installed; `\"given\"`, set by "
        "whoever started launch.py")
    hostname: str | None = optional(
        "the name `gethostname()` returns to the training processes when launch.py preloaded the image's "
        "override, as the image's start script does; else null")
    requirements: Literal["installed", "none"] = optional(
        "whether the code directory's requirements.txt was pip-installed")


@dataclass(frozen=True, kw_only=True)
class Precompile:
    """`precompile`: the graph-extraction pass under `neuron_parallel_compile` before training
    (`training.precompile`, `entrypoints/launcher/precompile.py`), apart from training's own times."""

    requested: bool = optional("`training.precompile` of the spec")
    ran: bool = optional("whether the pass ran (it applies to runtime xla where the tool is on PATH)")
    reason: str | None = optional(
        "why it did not run or did not finish cleanly (not requested, runtime native, the tool absent, its "
        "exit code and last line); null after a clean pass")
    seconds: float | None = optional(
        "wall time of the pass: graph extraction and parallel compilation; not in `compile_s` or "
        "`time_to_first_step_s`, which are the real run's")
    steps: Count | None = optional("steps the pass ran")
    exit_code: int | None = optional("the tool's exit status")


@dataclass(frozen=True, kw_only=True)
class Utilization:
    """`utilization`: this host over the job, from `neuron-monitor` run beside training
    (`entrypoints/launcher/utilization.py`): the mean and the peak of its once-a-second reports. Without
    neuron-monitor (a local run, a CPU host) every figure is null and `reason` says why."""

    source: Literal["neuron-monitor"] | None = optional("what measured it; null when nothing did")
    reason: str | None = optional("why nothing was measured; null when `source` is set")
    samples: Count = optional("reports read")
    bad_lines: Count = optional("output lines that were not a JSON report (skipped)")
    neuroncores_in_use: Count | None = optional("the most NeuronCores a report showed in use")
    neuroncore_util_pct_mean: float | None = optional(
        "NeuronCore utilization in percent (`neuroncore_counters`), averaged over the cores in use")
    neuroncore_util_pct_peak: float | None = optional("the highest of a report's averages")
    device_memory_bytes_mean: float | None = optional(
        "Neuron device memory the training processes used (`memory_used`, summed over them)")
    device_memory_bytes_peak: float | None = optional("the most of it a report showed")
    host_vcpu_pct_mean: float | None = optional(
        "host vCPUs busy in percent, all vCPUs (`vcpu_usage.average_usage`: 100 - idle - io_wait)")
    host_vcpu_pct_peak: float | None = optional("the highest of it a report showed")
    host_memory_bytes_mean: float | None = optional("host memory in use (`memory_info.memory_used_bytes`)")
    host_memory_bytes_peak: float | None = optional("the most of it a report showed")
    host_memory_total_bytes: float | None = optional("the host's memory (`memory_info.memory_total_bytes`)")


@dataclass(frozen=True, kw_only=True)
class Versions:
    """`versions`: the software as the reporting rank saw it (null when not installed)."""

    python: str | None = optional("Python")
    torch: str | None = optional("PyTorch")
    torch_xla: str | None = optional("torch-xla")
    timm: str | None = optional("timm")
    neuronx_cc: str | None = optional("the Neuron compiler")


@dataclass(frozen=True, kw_only=True)
class Mlflow:
    """`mlflow`: the job's MLflow run, a copy of this record (`entrypoints/launcher/mlflow_run.py`)."""

    tracking_uri: str = doc("the spec's `mlflow.tracking_uri`: a tracking server's URL or a SageMaker MLflow ARN")
    experiment: str = doc("the experiment's name")
    run_id: str | None = optional("the run's id; null until the server has answered (or when it never did)")
    parent_run_id: str | None = optional("a sweep's trial: the sweep's parent run")
    warning: str | None = optional("why the run is missing or incomplete (the server was down, slow or refusing)")


@dataclass(frozen=True, kw_only=True)
class Results:
    """The record of one training job on one host."""

    schema: Literal["orchestrator.results/v1"] = doc(
        "always `\"orchestrator.results/v1\"`; a reader refuses other values")
    job_name: str = doc("the SageMaker (or local) job name")
    spec_hash: str = optional("sha256 of the spec's canonical JSON (`orchestrator.spec.spec_hash`)")
    status: Status = doc(
        "`running` while the launcher runs (its start and heartbeats; the last word of a job killed "
        "outright); `completed` only when every rank of this host exited 0 and the results were stored; "
        "`stopped` when the launcher was signalled (a stop, or the max run time) before anything else failed; "
        "`failed` otherwise")
    failure_reason: str | None = optional(
        "why the job failed: which rank failed and its error, or the last error line of torchrun's output; "
        "`stopped: ...` when the launcher was signalled; `could not write results to ...` when storing this "
        "document failed (the local copy then says `failed`). The failure file (`/opt/ml/output/failure`, "
        "SageMaker's `FailureReason`) holds `<host>: <this text>`, cut to 1,024 characters")
    # Any name: a backend is added by the orchestrator's registry alone (docs/ARCHITECTURE.md,
    # "Adding a backend"), which this container side cannot read.
    backend: str | None = optional(
        "the backend that ran it, as the orchestrator names it (`sagemaker`, `batch`, `local`, or one "
        "registered since): the job file's `backend` (a batch spec run by the local backend, "
        "`submit --local`), else the spec's")
    region: str | None = optional("from the spec")
    instance: Instance = doc("see `instance` below")
    world_size: Positive = optional("ranks in the job (hosts × workers per node)")
    runtime: Literal["xla", "native"] | None = optional("training runtime")
    compile: bool = optional("native only: whether `torch.compile` was on")
    precision: Literal["bf16", "fp32", "fp16"] | None = optional("training precision")
    batch_size: Count = optional("samples per worker per step")
    global_batch: Count = optional("`batch_size × world_size`")
    steps: Count | None = optional("steps the spec asked for")
    warmup_steps: Count | None = optional("first steps left out of the step-time statistics")
    steps_done: Count = optional("steps the reporting rank finished (including steps before a resume)")
    model: Model = optional("see `model` below")
    step_time_s: StepTime | None = optional("see `step_time_s` below; null when no step was measured")
    samples_per_s: float | None = optional("global throughput: `global_batch / step_time_s.mean`")
    time_to_first_step_s: float | None = optional(
        "from the rank's start to the end of its first step: compilation (or the cache hit) shows here")
    compile_s: float | None = optional("time the rank spent compiling, as it measured it")
    flops_per_sample: float | None = optional(
        "model FLOPs of one training sample, forward and backward, counted once on this host by PyTorch's "
        "FlopCounterMode on the meta device (matrix products, convolutions, attention; `entrypoints/trainer/flops.py`): "
        "with `samples_per_s` and the instance's peak, the MFU `results` shows; null when not counted (the run "
        "ended before its last step, or counting failed: the log says why)")
    compiler_cache: dict[str, Count] = optional(
        "native runtime with `compile: true`: the reporting rank's lookups in PyTorch's own caches, "
        "`fxgraph_hit|miss|bypass` (inductor's compiled graphs) and `aotautograd_hit|miss|bypass` (the traced "
        "forward/backward pair); on the CPU also `isa_probe_hit|miss` (inductor's vector-ISA probes answered "
        "from memos in the compile cache, or run: see `entrypoints/trainer/isa_probe.py`; the ranks of a host share "
        "one probe, so in a cold job the reporting rank may count as hits the probes another rank ran); a "
        "warm job shows hits and no misses. Empty otherwise", empty=dict)
    ddp_split_graphs: bool | None = optional(
        "native, compiled, more than one rank: whether torch.compile split the DDP graph per gradient bucket "
        "(only when the gradients span more than one bucket: a split graph is never in AOTAutograd's cache); "
        "null otherwise")
    cache: CacheStats = optional("see `cache` below")
    container: Container = optional("see `container` below")
    final_loss: float | None = optional("loss of the last step")
    utilization: Utilization | None = optional(
        "see `utilization` below; null in documents of writers before it")
    precompile: Precompile | None = optional("see `precompile` below; null in documents of writers before it")
    versions: Versions = optional("see `versions` below")
    started_at: str = optional("UTC, `YYYY-MM-DDTHH:MM:SSZ`: the launcher's start on this host")
    ended_at: str | None = optional("UTC: the launcher's end on this host; null while `running`")
    heartbeat_at: str = optional("UTC time this document was written: `ended_at` in the final record")
    duration_s: float = optional("`heartbeat_at - started_at`, including cache pull and push")
    tags: dict[str, str] = optional(
        "the job's tags (the spec's plus `orchestrator:spec-hash`, `orchestrator:job`, and for sweeps "
        "`orchestrator:sweep`, `orchestrator:trial`, and on a trial's resubmission `orchestrator:attempt`: "
        "`retry`, `resumed` or `failover:<the instance type it failed over from>`)", empty=dict)
    warnings: list[str] = optional(
        "anything the job survived: compile cache warnings (prefixed `compile cache:`), missing rank stats, "
        "TensorBoard scalars not written (no tensorboard package in the image)",
        empty=list)
    varied: dict[str, Any] = optional(
        "a sweep trial's values of the fields its sweep varies (dotted spec path -> value, as the sweep "
        "file gave them: `{\"training.optimizer.lr\": 0.001}`); empty for a job outside a sweep", empty=dict)
    mlflow: Mlflow | None = optional("see `mlflow` below; null for a job whose spec has no `mlflow:`")


def from_values(cls: type[T], values: Mapping[str, Any]) -> T:
    """`cls(**values)` for a writer: TypeError when `values` lacks one of the fields (a
    default is for readers of older documents, never for the writer) or has another."""
    missing = [item.name for item in dataclasses.fields(cls) if item.name not in values]  # type: ignore[arg-type]
    if missing:
        raise TypeError(f"{cls.__name__}: no value for {', '.join(missing)}")
    return cls(**values)


def as_document(record: Results) -> dict[str, Any]:
    """`record` as the JSON object written to results.json (every field, nested objects as
    objects)."""
    return dataclasses.asdict(record)


# --- the tables of docs/RESULTS.md --------------------------------------------------------

SECTIONS: tuple[tuple[str, type], ...] = (
    ("## Fields", Results), ("### `instance`", Instance), ("### `model`", Model),
    ("### `step_time_s`", StepTime), ("### `cache`", CacheStats), ("### `container`", Container),
    ("### `utilization`", Utilization), ("### `precompile`", Precompile), ("### `versions`", Versions),
    ("### `mlflow`", Mlflow),
)
_NAMES = {str: "string", int: "int", float: "float", bool: "bool", type(None): "null"}


def type_text(annotation: Any) -> str:
    """How docs/RESULTS.md writes a field's type (`string \\| null`, `"xla" \\| "native"`...)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return type_text(args[0])
    if origin is Literal:
        return " \\| ".join(f'`"{value}"`' for value in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_text(arg) for arg in args)
    if origin is list:
        return f"list of {type_text(args[0])}s"
    if origin is dict or dataclasses.is_dataclass(annotation):
        return "object"
    return _NAMES[annotation]


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def table(cls: type) -> str:
    """The Markdown table of one object's fields: name, type, meaning."""
    hints = typing.get_type_hints(cls, include_extras=True)
    rows = ["| field | type | meaning |", "|---|---|---|"]
    for item in dataclasses.fields(cls):
        rows.append(f"| `{item.name}` | {type_text(hints[item.name])} | {_escape(item.metadata['doc'])} |")
    return "\n".join(rows)


def required_fields(cls: type = Results, prefix: str = "") -> list[str]:
    """The dotted names of the fields every v1 document has."""
    found = []
    hints = typing.get_type_hints(cls, include_extras=True)
    for item in dataclasses.fields(cls):
        if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
            found.append(prefix + item.name)
            if dataclasses.is_dataclass(hints[item.name]):
                found.extend(required_fields(hints[item.name], f"{prefix}{item.name}."))
    return found


def markdown() -> str:
    """docs/RESULTS.md's generated part: the field tables, and which fields are required."""
    parts = []
    for heading, cls in SECTIONS:
        intro = " ".join((cls.__doc__ or "").split())
        parts.append(f"{heading}\n\n{intro}\n\n{table(cls)}\n")
    names = ", ".join(f"`{name}`" for name in required_fields())
    parts.append(f"Every v1 document has {names}. Any other field may be missing from a document an earlier "
                 "v1 writer wrote; a reader then takes it as null (a list or an object that is never null as "
                 "empty). The launcher writes every field.\n")
    return "\n".join(parts)
