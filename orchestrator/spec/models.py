"""Job specs: the strict, frozen pydantic models of a job, and its identity (`spec_hash`).

Contract: the models do no I/O and read no clock; every field is documented once, in its
`Field(description=...)` (`python -m orchestrator schema` prints them). Numbers are strict: a
boolean, NaN or infinity is not one. Cross-field problems are all reported in one error, each
at its own field (`cross_fields`; `orchestrator.spec.problems` locates them). Models build
their validators on first use (`defer_build`): a command validates only the models it needs.
"""

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    Strict,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError, core_schema

from orchestrator.region import REGION_PATTERN
from orchestrator.spec import tracking_uri as uris
from orchestrator.spec.backend_name import BackendName, backend_problems, class_of

# The job's identity (`spec_hash`, LATER_FIELDS) lives in `identity`; named here as before.
from orchestrator.spec.identity import LATER_FIELDS, spec_hash  # noqa: F401
from orchestrator.spec.source import SourceMap, split_path
from orchestrator.spec.tracking_uri import MLFLOW_ARN_PATTERN, mlflow_arn_region  # noqa: F401

# SageMaker job names are at most 63 characters; the job name adds "-" and 8 hex digits.
MAX_NAME = 54
NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$"
# S3's bucket naming rule, as entrypoints/shared/storage/ checks it. A file URI names an absolute
# path, file:///PATH (`file://relative/x` would read `relative` as a host name; the job's data
# reader takes what follows file:// as the path, so file://localhost/PATH is refused too).
S3_BUCKET = r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"
FILE_URI = r"file:///.+"
URI_PATTERN = rf"^(s3://{S3_BUCKET}(/.*)?|{FILE_URI})$"
ROLE_PATTERN = r"^arn:aws[a-z\-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$"
# Two letters, one or more words, a number: us-east-1, us-gov-west-1, cn-north-1, eu-isoe-west-1.
# The CLI's --region and `prices refresh` check with this one pattern too.
# SageMaker's types carry the ml. prefix (ml.trn1.2xlarge); AWS Batch runs EC2 types (inf2.xlarge).
INSTANCE_PATTERN = r"^(ml\.)?[a-z0-9]+\.[a-z0-9]+$"
ARCH_PATTERN = r"^vit_[a-z0-9_]+$"
SDK_PATTERN = r"^\d+\.\d+\.\d+$"
# SageMaker's S3DataSource takes a whole bucket (s3://bucket) or a prefix in it.
DATA_PATTERN = rf"^(synthetic|s3://{S3_BUCKET}(/.*)?|{FILE_URI})$"


def cross_field(field_path: str | tuple[str, ...], message: str) -> PydanticCustomError:
    """A cross-field error that the loader locates at `field_path` below the model (dotted,
    or a tuple where a part may hold dots: a tag or variable name)."""
    return PydanticCustomError("cross_field", "{message}", {"field": field_path, "message": message})


def cross_fields(found: list[tuple[str | tuple[str, ...], str]]) -> PydanticCustomError:
    """Several cross-field errors (field path, message) as one: a model validator can raise
    only one error, and the user should get every problem in one round. `problems_from`
    turns each into its own located problem."""
    if len(found) == 1:
        return cross_field(*found[0])
    return PydanticCustomError("cross_field", "{message}", {
        "field": found[0][0], "message": "; ".join(message for _, message in found), "all": tuple(found)})


def _not_bool(value: Any) -> Any:
    # pydantic reads True as 1 for int and float fields; in YAML `batch_size: yes` is a mistake.
    if isinstance(value, bool):
        raise PydanticCustomError("bool_not_number", "expected a number, got a boolean")
    return value


def valid_bucket(name: str) -> bool:
    """An S3 bucket name as entrypoints/shared/storage/ accepts it: S3_BUCKET, and no '..'."""
    return re.fullmatch(S3_BUCKET, name) is not None and ".." not in name


def _bucket_checked(value: str | None) -> str | None:
    """A URI field's value, refused when its S3 bucket has '..' (which S3_BUCKET, a pattern
    pydantic checks without look-ahead, lets through)."""
    if isinstance(value, str) and value.startswith("s3://"):
        bucket = value[len("s3://"):].partition("/")[0]
        if ".." in bucket:
            raise PydanticCustomError("uri_bucket", "{message}",
                                      {"message": f"{value!r} is not valid: {uri_reason(value)}"})
    return value


class _Check:
    """Annotated metadata running `function` (value -> value) before or after the field's own
    validation: the core schema pydantic's BeforeValidator and AfterValidator build, through
    pydantic's public hook for custom types. Those inspect the function's signature again at
    every field that uses them (about 30 here), on each command's first validation."""

    def __init__(self, function, mode: Literal["before", "after"]):
        self.function = function
        self.mode = mode

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        if self.mode == "before":
            return core_schema.no_info_before_validator_function(self.function, handler(source))
        return core_schema.no_info_after_validator_function(self.function, handler(source))


# The largest integer a spec takes: what a signed 64-bit field holds (AWS's Long). A larger one
# (keep_alive_minutes: 10**310) is a mistake to say as such, before any arithmetic meets it.
MAX_INT = 2**63 - 1


def _in_range(value: int) -> int:
    if not -MAX_INT <= value <= MAX_INT:
        raise PydanticCustomError("int_out_of_range", "number out of range: at most {limit} in size",
                                  {"limit": MAX_INT})
    return value


_NOT_BOOL = _Check(_not_bool, "before")
# The number types of every spec field, strict (as the README says): a boolean is refused, and
# so is text ('30' quoted in YAML), and a float for an integer; NaN and infinity are refused by
# the models' allow_inf_nan=False. An int is a float.
Int = Annotated[int, _NOT_BOOL, Strict(), _Check(_in_range, "after")]
# A URI field's text (its pattern is on the field): also refused when its S3 bucket has '..'.
UriText = Annotated[str, _Check(_bucket_checked, "after")]
Float = Annotated[float, _NOT_BOOL, Strict()]
# A yes/no field: true or false only (YAML's own booleans), not the text "yes".
Bool = Annotated[bool, Strict()]

# What a sagemaker spec needs; said by JobSpec's cross-field check and, for fields left out
# altogether, by `Backend.missing`.
NEEDS_ROLE = "the sagemaker backend needs role_arn (or infra: pointing at stack outputs)"
NEEDS_OUTPUT = "the sagemaker backend needs an s3:// output.uri"
NEEDS_CACHE = "the sagemaker backend needs an s3:// compile_cache.uri, or mode: off"
# A Batch job runs with its job definition's role (jobRoleArn): SubmitJob cannot override it.
BATCH_ROLE = ("role_arn is the SageMaker execution role; a batch job runs with its job definition's job role "
              "(the stack's), which SubmitJob cannot override: remove role_arn")


class StrictModel(BaseModel):
    """The base of every spec model: unknown keys refused, frozen, defaults validated, no NaN
    or infinity. The validator is built when a model first validates, not at import."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False,
                              defer_build=True)

    @classmethod
    def defaults(cls):
        """The model with every field at its default: a section the spec leaves out. Made
        without validation (`model_construct`), so that a command builds the validator of the
        model it validates and not, besides, that of each section left out. The defaults are
        constants; a test holds that each section's equals what validating {} gives."""
        return cls.model_construct()


# botocore's InstancePreferences (CreateTrainingJob's ResourceConfig): 1 to 5 preferences, each
# with at most one training plan ARN of this pattern (its TrainingPlanArns list).
MAX_PREFERENCES = 5
TRAINING_PLAN_PATTERN = r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:training-plan/.+$"


class PreferenceSpec(StrictModel):
    type: str = Field(..., pattern=INSTANCE_PATTERN,
                      description="A SageMaker training instance type SageMaker may choose, e.g. ml.trn1n.32xlarge.")
    count: Int | None = Field(
        None, ge=1, le=64,
        description="Instances if this type is chosen; on every preference or none. Default: the count that "
        "trains the same global batch as instance.count of the first preference.")
    training_plan_arn: str | None = Field(
        None, pattern=TRAINING_PLAN_PATTERN,
        description="A Flexible Training Plan for this type (its reserved capacity); without one the "
        "preference uses on-demand capacity. Not together with instance.training_plan_arn.")


class InstanceSpec(StrictModel):
    type: str = Field(
        "ml.trn1.2xlarge",
        pattern=INSTANCE_PATTERN,
        description="SageMaker training instance type, e.g. ml.trn1.2xlarge, ml.trn1.32xlarge, "
        "ml.trn1n.32xlarge, ml.trn2.48xlarge; with backend: batch an EC2 Inferentia2 type: inf2.xlarge, "
        "inf2.8xlarge, inf2.24xlarge, inf2.48xlarge.",
    )
    count: Int = Field(1, ge=1, le=64, description="Number of instances (hosts).")
    spot: Bool = Field(False, description="Use managed spot training; needs max_wait_minutes.")
    max_wait_minutes: Int | None = Field(
        None,
        ge=1,
        le=40320,
        description="Managed spot: the longest the job may wait plus run, in minutes; "
        "at least max_run_minutes.",
    )
    volume_gb: Int = Field(
        100,
        ge=1,
        le=16384,
        description="EBS volume per instance, GB. Ignored on instance types with NVMe instance "
        "storage (trn1, trn1n, trn2): SageMaker uses the instance storage instead.",
    )
    lnc: Annotated[Literal[1, 2], _NOT_BOOL] | None = Field(
        None,
        description="Logical NeuronCore config: 2 groups two physical cores (trn2 default), "
        "1 exposes each core. trn1 supports only 1.",
    )
    keep_alive_minutes: Int = Field(
        0,
        ge=0,
        description="SageMaker managed warm pool: keep the instances this many minutes (at most 60) after "
        "the job, for the next matching job (same type, count, volume, role, network) to start at once and "
        "find its compile cache on disk. Billed while kept; 0 = off. Ignored by the local backend.",
    )
    preferences: list[PreferenceSpec] | None = Field(
        None, min_length=1, max_length=MAX_PREFERENCES,
        description="Instance types in priority order (at most 5), instead of one type: SageMaker launches "
        "the job on the first with capacity (ResourceConfig.InstancePreferences). On-demand or training "
        "plan capacity only (no spot). instance.type is then the first preference's.",
    )
    training_plan_arn: str | None = Field(
        None, pattern=TRAINING_PLAN_PATTERN,
        description="The Flexible Training Plan whose reserved capacity the job runs on "
        "(ResourceConfig.TrainingPlanArn).",
    )
    plan_full: Literal["wait", "on-demand"] = Field(
        "wait",
        description="What a sweep does with a trial its training plan (instance.training_plan_arn) has no free "
        "instances for, or that comes before the plan is Active: wait for the plan, or run it on demand "
        "without the plan. A plan that has ended stops a sweep that waits (exit 2).",
    )

    @model_validator(mode="before")
    @classmethod
    def _type_from_preferences(cls, data: Any) -> Any:
        # One type either way: with preferences, instance.type is the first one's, so everything
        # that reads the type (catalog, names, the doctor) reads the first choice.
        if not isinstance(data, dict) or not isinstance(data.get("preferences"), list):
            return data
        prefs = data["preferences"]
        first = prefs[0].get("type") if prefs and isinstance(prefs[0], dict) else None
        if "type" in data and first is not None and data["type"] != first:
            raise cross_field("type", f"instance.type ({data['type']}) differs from the first preference "
                              f"({first}): give preferences alone, or type equal to the first")
        if first is not None and "type" not in data:
            data = {**data, "type": first}
        count = prefs[0].get("count") if prefs and isinstance(prefs[0], dict) else None
        if count is not None and "count" in data and data["count"] != count:
            raise cross_field("count", f"instance.count ({data['count']}) differs from the first preference's "
                              f"count ({count}): give counts on the preferences alone")
        if count is not None and "count" not in data:
            data = {**data, "count": count}
        return data


class ImageSpec(StrictModel):
    neuron_sdk: str | None = Field(
        None,
        pattern=SDK_PATTERN,
        description="Neuron SDK version of the PyTorch Neuron training image, resolved from the "
        "catalog (default: the catalog's latest training image).",
    )
    uri: str | None = Field(None, min_length=1, description="Pin an exact image URI instead.")

    @model_validator(mode="after")
    def _one_of(self) -> "ImageSpec":
        if self.neuron_sdk is not None and self.uri is not None:
            raise cross_field("uri", "give either neuron_sdk or uri, not both")
        return self


class ModelSpec(StrictModel):
    arch: str = Field(
        "vit_base_patch16_224",
        pattern=ARCH_PATTERN,
        description="timm ViT architecture name.",
    )
    @field_validator("arch", mode="before")
    @classmethod
    def _no_pretrained_tag(cls, value: Any) -> Any:
        # timm names pretrained weights "<arch>.<tag>"; the job builds the architecture with
        # random weights, so the tag has no use here, and the pattern alone would not say why.
        if isinstance(value, str) and "." in value and re.fullmatch(ARCH_PATTERN, value.split(".", 1)[0]):
            arch, tag = value.split(".", 1)
            raise PydanticCustomError(
                "arch_tag", "{value!r} names pretrained weights ({tag}); training starts from random "
                "weights, so write the architecture alone: {arch}", {"value": value, "tag": tag, "arch": arch})
        return value

    patch_embed: Literal["linear", "conv"] = Field(
        "linear",
        description="linear: a conv-free patch embedding (reshape + matmul), the same function "
        "as timm's conv one; conv: timm's Conv2d.",
    )
    image_size: Int = Field(224, ge=8, le=1024, description="Input image side, pixels.")
    num_classes: Int = Field(1000, ge=1, le=100000, description="Classifier outputs.")
    patch_size: Int | None = Field(
        None, ge=1, le=64, description="Override the arch's patch size (default: from the arch name)."
    )
    depth: Int | None = Field(None, ge=1, le=64, description="Override the number of blocks.")
    embed_dim: Int | None = Field(None, ge=8, le=8192, description="Override the embedding width.")
    num_heads: Int | None = Field(None, ge=1, le=128, description="Override the attention heads.")

    @model_validator(mode="after")
    def _heads_divide(self) -> "ModelSpec":
        if self.embed_dim is not None and self.num_heads is not None and self.embed_dim % self.num_heads:
            raise cross_field("num_heads", f"embed_dim {self.embed_dim} is not divisible by num_heads {self.num_heads}")
        return self


class OptimizerSpec(StrictModel):
    name: Literal["adam", "adamw", "sgd"] = Field("adamw", description="Optimizer.")
    lr: Float = Field(1e-4, gt=0, le=10, description="Learning rate.")
    weight_decay: Float = Field(0.0, ge=0, le=1, description="Weight decay.")
    momentum: Float = Field(0.9, ge=0, lt=1, description="SGD momentum (sgd only).")


class TrainingSpec(StrictModel):
    runtime: Literal["xla", "native"] = Field(
        "xla",
        description="xla: torch-xla, the Neuron path; native: eager PyTorch (CPU/CUDA, DDP), "
        "optionally torch.compile.",
    )
    compile: Bool = Field(False, description="native only: wrap the model in torch.compile.")
    steps: Int = Field(500, ge=1, le=10_000_000, description="Optimizer steps per worker.")
    warmup_steps: Int = Field(10, ge=0, description="First steps excluded from step-time statistics.")
    batch_size: Int = Field(32, ge=1, le=65536, description="Samples per worker per step.")
    precision: Literal["bf16", "fp32", "fp16"] = Field(
        "bf16", description="bf16 (autocast), fp32; fp16 is refused on Neuron by the doctor."
    )
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec.defaults, description="Optimizer.")
    seed: Int = Field(0, ge=0, le=2**31 - 1, description="Random seed.")
    checkpoint_every: Int = Field(0, ge=0, description="Checkpoint every N steps; 0 = off.")
    log_every: Int = Field(10, ge=1, description="Log a metrics line every N steps.")
    precompile: Bool = Field(
        False,
        description="runtime xla on Neuron: before training, a short graph-extraction pass (the same torchrun "
        "command, a few steps) under neuron_parallel_compile compiles every graph in parallel on all vCPUs and "
        "pushes them to the compile cache at once. Skipped, with the reason in results.json, where the tool is "
        "absent (the local backend) or runtime is native.",
    )
    workers_per_node: Int | None = Field(
        None,
        ge=1,
        le=256,
        description="Worker processes per host (default: the instance's logical NeuronCores; "
        "locally: 1).",
    )

    @model_validator(mode="after")
    def _coherent(self) -> "TrainingSpec":
        found = []
        if self.compile and self.runtime != "native":
            found.append(("compile", "compile: true needs runtime: native (xla always compiles)"))
        if self.warmup_steps >= self.steps:
            found.append(("warmup_steps", f"warmup_steps ({self.warmup_steps}) must be below steps ({self.steps})"))
        if found:
            raise cross_fields(found)
        return self


class DataSpec(StrictModel):
    source: UriText = Field(
        "synthetic",
        pattern=DATA_PATTERN,
        description="synthetic, or an s3:// (or file://) prefix holding an ImageFolder tree.",
    )
    num_workers: Int = Field(4, ge=0, le=64, description="DataLoader workers per training worker.")


class CompileCacheSpec(StrictModel):
    uri: UriText | None = Field(
        None,
        pattern=URI_PATTERN,
        description="Where compile caches live (s3:// or file://); local jobs default to the "
        "local store.",
    )
    mode: Literal["tarball", "off"] = Field(
        "tarball", description="tarball: pull before training, push while it runs and at the end; off."
    )
    push_interval_s: Int = Field(
        60,
        ge=1,
        le=3600,
        description="While training runs, how often the job looks for newly compiled cache entries and "
        "pushes them (the first push follows the warmup steps, the last one the end of training): a "
        "stopped or killed job loses at most this much compiling.",
    )


class OutputSpec(StrictModel):
    uri: UriText | None = Field(
        None,
        pattern=URI_PATTERN,
        description="Job outputs and results prefix (s3:// or file://); local jobs default to "
        "the local store.",
    )


# A Batch job queue or job definition as SubmitJob takes it (AWS Batch API Reference, SubmitJob:
# jobQueue is "the name or the Amazon Resource Name (ARN) of the queue"; jobDefinition is
# "definition-name, definition-name:revision, or the ARN ... with or without the revision").
# Names: up to 128 letters, numbers, hyphens and underscores (CreateJobQueue, RegisterJobDefinition);
# revisions count from 1. ARN: arn:PARTITION:batch:REGION:ACCOUNT:job-queue/NAME or
# job-definition/NAME[:REVISION] (Service Authorization Reference, AWS Batch resource types).
_BATCH_NAME = r"[A-Za-z0-9][A-Za-z0-9_\-]{0,127}"
_BATCH_ARN = re.compile(r"arn:(?P<partition>[^:]*):(?P<service>[^:]*):(?P<region>[^:]*):(?P<account>[^:]*):"
                        r"(?P<kind>[^/]*)/(?P<rest>.*)")
_BATCH_KINDS = {"job_queue": ("job-queue", "job queue"), "job_definition": ("job-definition", "job definition")}


def batch_reference(value: str, field: str) -> str | None:
    """What is wrong with `value` as batch.`field` (job_queue or job_definition), in words; None
    when SubmitJob takes its form. Region and partition are checked against the spec's region
    by `JobSpec` (`batch_arn_place`)."""
    kind, what = _BATCH_KINDS[field]
    revisable = field == "job_definition"
    example = "my-definition:3" if revisable else "my-queue"
    arn = _BATCH_ARN.fullmatch(value)
    if value.startswith("arn:"):
        if arn is None or arn["service"] != "batch" or not re.fullmatch(r"aws[a-z\-]*", arn["partition"]) \
                or not re.fullmatch(REGION_PATTERN, arn["region"]) or not re.fullmatch(r"[0-9]{12}", arn["account"]):
            return (f"{value!r} is not an AWS Batch {what} ARN; write "
                    f"arn:aws:batch:REGION:ACCOUNT:{kind}/NAME{'[:REVISION]' if revisable else ''} or just the name")
        if arn["kind"] != kind:
            other = dict(_BATCH_KINDS.values()).get(arn["kind"], f"{arn['kind']} resource")
            return f"{value!r} is the ARN of a {other}; batch.{field} takes a {what}"
        value = arn["rest"]
    name, colon, revision = value.partition(":")
    if colon and not revisable:
        return f"{value!r}: a job queue has no revision; write its name alone (e.g. {example})"
    if colon and not re.fullmatch(r"[1-9][0-9]*", revision):
        return f"{value!r}: a job definition's revision is a whole number from 1 (e.g. {example})"
    if not re.fullmatch(_BATCH_NAME, name):
        return (f"{name!r} is not a {what} name: up to 128 letters, digits, hyphens and underscores, "
                f"starting with a letter or digit (e.g. {example})")
    return None


def batch_arn_place(value: str | None, region: str) -> str | None:
    """Where an ARN in batch.job_queue or job_definition is not: the spec's `region`, or the
    partition of that region (aws-cn for cn-*, aws-us-gov for us-gov-*, else aws). None for a
    name, or an ARN in the right place."""
    arn = _BATCH_ARN.fullmatch(value or "")
    if arn is None:
        return None
    partition = "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"
    if arn["partition"] != partition:
        return f"the ARN is in partition {arn['partition']}, but region {region} is in {partition}"
    if arn["region"] != region:
        return f"the ARN is in region {arn['region']}, but the job runs in region {region}; SubmitJob looks in {region}"
    return None


class BatchSpec(StrictModel):
    stack: str = Field(
        "orchestrator",
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z][A-Za-z0-9\-]*$",
        description="The stack (`infra deploy --stack-name`) whose queues and job definitions run the job: "
        "<stack>-<type with dashes> (e.g. orchestrator-inf2-xlarge) and <stack>-neuron-<chips>chip; "
        "an `infra:` file fills it in.",
    )
    job_queue: str | None = Field(
        None, max_length=2048, description="A job queue name or ARN instead of the stack's queue for the type."
    )
    job_definition: str | None = Field(
        None,
        max_length=2048,
        description="A job definition name[:revision] or ARN instead of the stack's for the type's chip count.",
    )

    @field_validator("job_queue", "job_definition")
    @classmethod
    def _submit_job_takes_it(cls, value: str | None, info) -> str | None:
        problem = None if value is None else batch_reference(value, info.field_name)
        if problem:
            raise PydanticCustomError("batch_reference", "{problem}", {"problem": problem})
        return value


class MlflowSpec(StrictModel):
    tracking_uri: Annotated[str, _Check(uris.checked, "after")] = Field(
        ..., min_length=1, max_length=2048,
        description="Where runs are logged: an MLflow tracking server's http(s):// URL, or (sagemaker backend) a "
        "SageMaker MLflow App or tracking server ARN in the job's region, sent as CreateTrainingJob's MlflowConfig.")
    experiment: str | None = Field(
        None, min_length=1, max_length=256, pattern=r"^[^\x00-\x1f]+$",
        description="The MLflow experiment. Default: the sweep's name for a sweep's trials, else the job's name.")


class BudgetSpec(StrictModel):
    max_cost_usd: Float | None = Field(None, gt=0, description="Refuse a job estimated above this.")


# The spec's sections that one backend alone reads (`Backend.section`).
SECTIONS = {"batch": BatchSpec}


class JobSpec(StrictModel):
    name: str = Field(
        ...,
        min_length=1,
        max_length=MAX_NAME,
        pattern=NAME_PATTERN,
        description=f"Job name prefix: letters, digits and single dashes, at most {MAX_NAME} characters.",
    )
    backend: BackendName = Field(
        "sagemaker", description="sagemaker (Trainium), batch (Inferentia2 through AWS Batch) or local.")
    region: str = Field("us-east-1", pattern=REGION_PATTERN, description="AWS region.")
    role_arn: str | None = Field(
        None,
        max_length=2048,
        pattern=ROLE_PATTERN,
        description="SageMaker execution role (sagemaker backend).",
    )
    infra: str | None = Field(
        None,
        description="Path (relative to this spec) of an outputs file from `python -m orchestrator infra "
        "outputs --write`; fills role_arn and the URIs the spec leaves out.",
    )
    instance: InstanceSpec = Field(default_factory=InstanceSpec.defaults, description="Compute.")
    batch: BatchSpec = Field(default_factory=BatchSpec.defaults, description="AWS Batch queue and job definition (batch backend).")
    image: ImageSpec = Field(default_factory=ImageSpec.defaults, description="Training image.")
    model: ModelSpec = Field(default_factory=ModelSpec.defaults, description="The ViT.")
    training: TrainingSpec = Field(default_factory=TrainingSpec.defaults, description="The loop.")
    data: DataSpec = Field(default_factory=DataSpec.defaults, description="Input data.")
    compile_cache: CompileCacheSpec = Field(default_factory=CompileCacheSpec.defaults, description="Compile cache.")
    output: OutputSpec = Field(default_factory=OutputSpec.defaults, description="Outputs.")
    max_run_minutes: Int = Field(120, ge=1, le=40320, description="Stopping condition, minutes.")
    max_retry_attempts: Int = Field(
        0, ge=0, le=30, description="SageMaker RetryStrategy: retries on internal errors; 0 = off."
    )
    budget: BudgetSpec = Field(default_factory=BudgetSpec.defaults, description="Cost guard.")
    tags: dict[str, str] = Field(default_factory=dict, description="Tags on the job (at most 40).")
    environment: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the training container."
    )
    mlflow: MlflowSpec | None = Field(
        None, description="Log params, metrics and results.json to MLflow (docs/USAGE.md, \"MLflow\").")

    _source: SourceMap | None = PrivateAttr(default=None)
    _backend_type: type | None = PrivateAttr(default=None)

    @property
    def backend_type(self):
        """The backend's class (`backends.planning.Planning`), looked up once (`backend_name.class_of`)."""
        self._backend_type = self._backend_type or class_of(self.backend)
        return self._backend_type

    @model_validator(mode="after")
    def _coherent(self) -> "JobSpec":
        # Every problem is collected, so that one round of `validate` shows them all.
        found: list[tuple[str, str]] = []
        found += backend_problems(self, SECTIONS)
        if len(self.tags) > 40:
            found.append(("tags", f"{len(self.tags)} tags; at most 40 (the orchestrator adds its own)"))
        for key, value in self.tags.items():
            if key.lower().startswith(("aws:", "orchestrator:")) or not 1 <= len(key) <= 128 or len(value) > 256:
                found.append((("tags", key), f"tag {key!r}: keys are 1-128 characters, values at most 256, "
                              "and the prefixes aws: and orchestrator: are reserved"))
        found += uris.problems(self)
        for key in self.environment:
            if not key or not (key[0].isalpha() or key[0] == "_") or not all(c.isalnum() or c == "_" for c in key):
                found.append((("environment", key), f"{key!r} is not a valid environment variable name"))
        if found:
            raise cross_fields(found)
        return self

    def locate(self, dotted: str) -> tuple[str, int, int]:
        """(file, line, column) of a dotted field path in the YAML it came from, or of its
        nearest present ancestor; ("", 0, 0) for a spec not loaded from YAML."""
        if self._source is None:
            return ("", 0, 0)
        return self._source.where(split_path(dotted))


def uri_reason(value: Any) -> str | None:
    """What is wrong with an s3:// or file:// URI that fails its pattern, and a valid example;
    None for anything else (the pattern's words say what is expected then)."""
    if not isinstance(value, str):
        return None
    if value.startswith("s3://"):
        bucket, slash, key = value[len("s3://"):].partition("/")
        if valid_bucket(bucket):
            return None
        # Upper case, underscores and doubled dots are the usual slips; suggest the name without them.
        guess = re.sub(r"\.{2,}", ".", re.sub(r"[^a-z0-9.\-]", "-", bucket.lower())).strip(".-")
        example = f"s3://{guess if valid_bucket(guess) else 'my-bucket'}{slash}{key or ''}"
        what = f"{bucket!r} is not a valid S3 bucket name" if bucket else "no bucket name after s3://"
        return (f"{what}; a bucket name has 3-63 lowercase letters, digits, dots (never two in a row) and "
                f"dashes, starting and ending with a letter or digit: write s3://BUCKET/PREFIX, e.g. {example}")
    if value.startswith("file://"):
        rest = value[len("file://"):]
        host, _, path = rest.partition("/")
        if host:
            # One rule for every host name: the job reads what follows file:// as the path.
            return (f"a file URI needs an absolute path and no host: file://{rest} reads {host!r} as a host "
                    "name, and relative paths are not allowed; write file:///ABSOLUTE/PATH, e.g. "
                    f"file:///{rest.strip('/')} if you meant /{rest.strip('/')}")
    return None
