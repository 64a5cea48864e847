"""Job specs: strict, frozen pydantic models and YAML loading with located errors.

Contract:
- `load(path)` returns a frozen `JobSpec` or raises `SpecError` whose problems each carry the
  file, 1-based line and column, the dotted field path and the reason (with "did you mean"
  for unknown keys). It never raises anything else for any input text.
- `loads(text, filename)` is the same on a string.
- Only regular files are read (a directory, FIFO or device is refused without being opened
  for reading), and at most MAX_SPEC_BYTES + 1 bytes of them: the spec, a sweep, a sweep's
  `base:` and the `infra:` file alike. A sweep given as a job spec (or the reverse) is named as
  such in one problem at line 1. A file that does not exist gets a did-you-mean hint naming a
  YAML file of a close name in the same folder, if there is one. Numbers are strict: a boolean,
  NaN or infinity is not one.
- Cross-field problems (a sagemaker spec without role_arn, output.uri, ...) are all reported
  in one SpecError, each at its own field.
- The models do no I/O and read no clock. The one piece of I/O besides reading the file is
  the optional `infra:` key, which names an outputs file written by `python -m orchestrator
  infra outputs --write`; the loader fills `role_arn`, `compile_cache.uri` and `output.uri`
  from it where the spec leaves them out.
- `spec_hash(spec)` is the sha256 of the spec's canonical JSON: the identity of a job.
"""

from __future__ import annotations

import difflib
import errno
import hashlib
import json
import os
import re
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from orchestrator.errors import Problem, SpecError

# SageMaker job names are at most 63 characters; the job name adds "-" and 8 hex digits.
MAX_NAME = 54
NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$"
# S3's bucket naming rule, as entrypoints/storage.py checks it. A file URI names an absolute
# path, file:///PATH (`file://relative/x` would read `relative` as a host name; the job's data
# reader takes what follows file:// as the path, so file://localhost/PATH is refused too).
S3_BUCKET = r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"
FILE_URI = r"file:///.+"
URI_PATTERN = rf"^(s3://{S3_BUCKET}(/.*)?|{FILE_URI})$"
ROLE_PATTERN = r"^arn:aws[a-z\-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$"
# Two letters, one or more words, a number: us-east-1, us-gov-west-1, cn-north-1, eu-isoe-west-1.
# The CLI's --region and `prices refresh` check with this one pattern too.
REGION_PATTERN = r"^[a-z]{2}(-[a-z]+)+-\d+$"
INSTANCE_PATTERN = r"^ml\.[a-z0-9]+\.[a-z0-9]+$"
ARCH_PATTERN = r"^vit_[a-z0-9_]+$"
SDK_PATTERN = r"^\d+\.\d+\.\d+$"
# SageMaker's S3DataSource takes a whole bucket (s3://bucket) or a prefix in it.
DATA_PATTERN = rf"^(synthetic|s3://{S3_BUCKET}(/.*)?|{FILE_URI})$"
# Spec files are small; this bounds what anchors and aliases may expand to.
MAX_EXPANDED_NODES = 20_000
MAX_SPEC_BYTES = 1_000_000


def _cross(field_path: str | tuple[str, ...], message: str) -> PydanticCustomError:
    """A cross-field error that the loader locates at `field_path` below the model (dotted,
    or a tuple where a part may hold dots: a tag or variable name)."""
    return PydanticCustomError("cross_field", "{message}", {"field": field_path, "message": message})


def _crosses(found: list[tuple[str | tuple[str, ...], str]]) -> PydanticCustomError:
    """Several cross-field errors (field path, message) as one: a model validator can raise
    only one error, and the user should get every problem in one round. `problems_from`
    turns each into its own located problem."""
    if len(found) == 1:
        return _cross(*found[0])
    return PydanticCustomError("cross_field", "{message}", {
        "field": found[0][0], "message": "; ".join(message for _, message in found), "all": tuple(found)})


def _not_bool(value: Any) -> Any:
    # pydantic reads True as 1 for int and float fields; in YAML `batch_size: yes` is a mistake.
    if isinstance(value, bool):
        raise PydanticCustomError("bool_not_number", "expected a number, got a boolean")
    return value


# The number types of every spec field: a boolean is refused (NaN and infinity are refused by
# the models' allow_inf_nan=False).
def valid_bucket(name: str) -> bool:
    """An S3 bucket name as entrypoints/storage.py accepts it: S3_BUCKET, and no '..'."""
    return re.fullmatch(S3_BUCKET, name) is not None and ".." not in name


def _bucket_checked(value: str | None) -> str | None:
    """A URI field's value, refused when its S3 bucket has '..' (which S3_BUCKET, a pattern
    pydantic checks without look-ahead, lets through)."""
    if isinstance(value, str) and value.startswith("s3://"):
        bucket = value[len("s3://"):].partition("/")[0]
        if ".." in bucket:
            raise PydanticCustomError("uri_bucket", "{message}",
                                      {"message": f"{value!r} is not valid: {_uri_reason(value)}"})
    return value


Int = Annotated[int, BeforeValidator(_not_bool)]
# A URI field's text (its pattern is on the field): also refused when its S3 bucket has '..'.
UriText = Annotated[str, AfterValidator(_bucket_checked)]
Float = Annotated[float, BeforeValidator(_not_bool)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)


class InstanceSpec(_Strict):
    type: str = Field(
        "ml.trn1.2xlarge",
        pattern=INSTANCE_PATTERN,
        description="SageMaker training instance type, e.g. ml.trn1.2xlarge, ml.trn1.32xlarge, "
        "ml.trn1n.32xlarge, ml.trn2.48xlarge.",
    )
    count: Int = Field(1, ge=1, le=64, description="Number of instances (hosts).")
    spot: bool = Field(False, description="Use managed spot training; needs max_wait_minutes.")
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
    lnc: Annotated[Literal[1, 2], BeforeValidator(_not_bool)] | None = Field(
        None,
        description="Logical NeuronCore config: 2 groups two physical cores (trn2 default), "
        "1 exposes each core. trn1 supports only 1.",
    )


class ImageSpec(_Strict):
    neuron_sdk: str | None = Field(
        None,
        pattern=SDK_PATTERN,
        description="Neuron SDK version of the PyTorch Neuron training image, resolved from the "
        "catalog (default: the catalog's latest training image).",
    )
    uri: str | None = Field(None, min_length=1, description="Pin an exact image URI instead.")

    @model_validator(mode="after")
    def _one_of(self) -> ImageSpec:
        if self.neuron_sdk is not None and self.uri is not None:
            raise _cross("uri", "give either neuron_sdk or uri, not both")
        return self


class ModelSpec(_Strict):
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
    def _heads_divide(self) -> ModelSpec:
        if self.embed_dim is not None and self.num_heads is not None and self.embed_dim % self.num_heads:
            raise _cross("num_heads", f"embed_dim {self.embed_dim} is not divisible by num_heads {self.num_heads}")
        return self


class OptimizerSpec(_Strict):
    name: Literal["adam", "adamw", "sgd"] = Field("adamw", description="Optimizer.")
    lr: Float = Field(1e-4, gt=0, le=10, description="Learning rate.")
    weight_decay: Float = Field(0.0, ge=0, le=1, description="Weight decay.")
    momentum: Float = Field(0.9, ge=0, lt=1, description="SGD momentum (sgd only).")


class TrainingSpec(_Strict):
    runtime: Literal["xla", "native"] = Field(
        "xla",
        description="xla: torch-xla, the Neuron path; native: eager PyTorch (CPU/CUDA, DDP), "
        "optionally torch.compile.",
    )
    compile: bool = Field(False, description="native only: wrap the model in torch.compile.")
    steps: Int = Field(500, ge=1, le=10_000_000, description="Optimizer steps per worker.")
    warmup_steps: Int = Field(10, ge=0, description="First steps excluded from step-time statistics.")
    batch_size: Int = Field(32, ge=1, le=65536, description="Samples per worker per step.")
    precision: Literal["bf16", "fp32", "fp16"] = Field(
        "bf16", description="bf16 (autocast), fp32; fp16 is refused on Neuron by the doctor."
    )
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="Optimizer.")
    seed: Int = Field(0, ge=0, le=2**31 - 1, description="Random seed.")
    checkpoint_every: Int = Field(0, ge=0, description="Checkpoint every N steps; 0 = off.")
    log_every: Int = Field(10, ge=1, description="Log a metrics line every N steps.")
    workers_per_node: Int | None = Field(
        None,
        ge=1,
        le=256,
        description="Worker processes per host (default: the instance's logical NeuronCores; "
        "locally: 1).",
    )

    @model_validator(mode="after")
    def _coherent(self) -> TrainingSpec:
        found = []
        if self.compile and self.runtime != "native":
            found.append(("compile", "compile: true needs runtime: native (xla always compiles)"))
        if self.warmup_steps >= self.steps:
            found.append(("warmup_steps", f"warmup_steps ({self.warmup_steps}) must be below steps ({self.steps})"))
        if found:
            raise _crosses(found)
        return self


class DataSpec(_Strict):
    source: UriText = Field(
        "synthetic",
        pattern=DATA_PATTERN,
        description="synthetic, or an s3:// (or file://) prefix holding an ImageFolder tree.",
    )
    num_workers: Int = Field(4, ge=0, le=64, description="DataLoader workers per training worker.")


class CompileCacheSpec(_Strict):
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


class OutputSpec(_Strict):
    uri: UriText | None = Field(
        None,
        pattern=URI_PATTERN,
        description="Job outputs and results prefix (s3:// or file://); local jobs default to "
        "the local store.",
    )


class BudgetSpec(_Strict):
    max_cost_usd: Float | None = Field(None, gt=0, description="Refuse a job estimated above this.")


class JobSpec(_Strict):
    name: str = Field(
        ...,
        min_length=1,
        max_length=MAX_NAME,
        pattern=NAME_PATTERN,
        description=f"Job name prefix: letters, digits and single dashes, at most {MAX_NAME} characters.",
    )
    backend: Literal["sagemaker", "local"] = Field("sagemaker", description="sagemaker or local.")
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
    instance: InstanceSpec = Field(default_factory=InstanceSpec, description="Compute.")
    image: ImageSpec = Field(default_factory=ImageSpec, description="Training image.")
    model: ModelSpec = Field(default_factory=ModelSpec, description="The ViT.")
    training: TrainingSpec = Field(default_factory=TrainingSpec, description="The loop.")
    data: DataSpec = Field(default_factory=DataSpec, description="Input data.")
    compile_cache: CompileCacheSpec = Field(default_factory=CompileCacheSpec, description="Compile cache.")
    output: OutputSpec = Field(default_factory=OutputSpec, description="Outputs.")
    max_run_minutes: Int = Field(120, ge=1, le=40320, description="Stopping condition, minutes.")
    max_retry_attempts: Int = Field(
        0, ge=0, le=30, description="SageMaker RetryStrategy: retries on internal errors; 0 = off."
    )
    budget: BudgetSpec = Field(default_factory=BudgetSpec, description="Cost guard.")
    tags: dict[str, str] = Field(default_factory=dict, description="Tags on the job (at most 40).")
    environment: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the training container."
    )

    _source: SourceMap | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _coherent(self) -> JobSpec:
        # Every problem is collected, so that one round of `validate` shows them all.
        found: list[tuple[str, str]] = []
        if self.backend == "sagemaker":
            if self.role_arn is None:
                found.append(("role_arn", _NEEDS_ROLE))
            if self.output.uri is None or not self.output.uri.startswith("s3://"):
                found.append(("output.uri", _NEEDS_OUTPUT))
            if self.compile_cache.mode == "tarball" and (
                self.compile_cache.uri is None or not self.compile_cache.uri.startswith("s3://")
            ):
                found.append(("compile_cache.uri", _NEEDS_CACHE))
            if self.data.source.startswith("file://"):
                found.append(("data.source", "a sagemaker job cannot read file:// data; use s3://"))
        if len(self.tags) > 40:
            found.append(("tags", f"{len(self.tags)} tags; at most 40 (the orchestrator adds its own)"))
        for key, value in self.tags.items():
            if key.lower().startswith(("aws:", "orchestrator:")) or not 1 <= len(key) <= 128 or len(value) > 256:
                found.append((("tags", key), f"tag {key!r}: keys are 1-128 characters, values at most 256, "
                              "and the prefixes aws: and orchestrator: are reserved"))
        for key in self.environment:
            if not key or not (key[0].isalpha() or key[0] == "_") or not all(c.isalnum() or c == "_" for c in key):
                found.append((("environment", key), f"{key!r} is not a valid environment variable name"))
        if found:
            raise _crosses(found)
        return self

    def locate(self, dotted: str) -> tuple[str, int, int]:
        """(file, line, column) of a dotted field path in the YAML it came from, or of its
        nearest present ancestor; ("", 0, 0) for a spec not loaded from YAML."""
        if self._source is None:
            return ("", 0, 0)
        return self._source.where(_split(dotted))


@dataclass
class SourceMap:
    """Where each value of a YAML document sits: path tuple -> (line, column), 1-based.

    `plain` keeps the text of unquoted scalars that YAML read as something other than a
    string (`off`, `2.30`, `5`), for messages that say how the value was read. `borrowed`
    maps a path whose value came from another file (the `infra:` outputs) to that file's map
    and the path there; `where` and `raw` follow it.
    """

    file: str
    values: dict[tuple, tuple[int, int]] = field(default_factory=dict)
    keys: dict[tuple, tuple[int, int]] = field(default_factory=dict)
    plain: dict[tuple, str] = field(default_factory=dict)
    borrowed: dict[tuple, tuple[SourceMap, tuple]] = field(default_factory=dict)

    def _owner(self, path: tuple) -> tuple[SourceMap, tuple]:
        path = tuple(str(p) for p in path)
        for i in range(len(path), 0, -1):
            if path[:i] in self.borrowed:
                other, at = self.borrowed[path[:i]]
                return other, at + path[i:]
        return self, path

    def where(self, path: tuple, prefer_key: bool = False) -> tuple[str, int, int]:
        """(file, line, column) of `path`, in the file its value came from."""
        owner, at = self._owner(path)
        return (owner.file, *owner.find(at, prefer_key))

    def raw(self, path: tuple) -> str | None:
        """The source text of an unquoted non-string scalar at `path`, if that is what it was."""
        owner, at = self._owner(path)
        return owner.plain.get(at)

    def find(self, path: tuple, prefer_key: bool = False) -> tuple[int, int]:
        path = tuple(str(p) for p in path)
        while True:
            if prefer_key and path in self.keys:
                return self.keys[path]
            if path in self.values:
                return self.values[path]
            if not path:
                return (1, 1)
            path = path[:-1]


def _split(dotted: str) -> tuple:
    return tuple(p for p in dotted.split(".") if p)


def spec_hash(spec: BaseModel) -> str:
    """sha256 hex of the spec's canonical JSON (sorted keys, no whitespace)."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


# --- YAML loading -----------------------------------------------------------------------


def read_yaml(text: str, filename: str) -> tuple[Any, SourceMap]:
    """Parse one YAML document into plain data plus its source map.

    Raises SpecError (never anything else) for syntax errors, duplicate keys, more than one
    document, recursive or explosive aliases, and nesting too deep to parse.
    """
    smap = SourceMap(filename)
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise SpecError([Problem(filename, 0, 0, "", f"file is larger than {MAX_SPEC_BYTES} bytes")])
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise SpecError([Problem(filename, 1, 1, "", "the file is empty; expected a mapping of fields")])
            _walk(node, (), smap, filename, set(), [0])
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except SpecError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        reason = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        if "'\\t'" in str(exc.problem):
            # PyYAML refuses tabs in indentation (and after a key's colon) with a scanner error.
            lines = text.splitlines()
            row = lines[line - 1] if 0 < line <= len(lines) else ""
            leading = row[: col - 1].strip(" \t") == ""
            reason += "; indent with spaces, not tabs" if leading else "; use spaces, not tabs"
        raise SpecError([Problem(filename, line, col, "", f"YAML syntax: {reason}")]) from None
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise SpecError([Problem(filename, line, column, "", f"YAML: {exc.reason} (character {exc.character!r})")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem(filename, 1, 1, "", f"YAML: {exc}")]) from None
    except RecursionError:
        raise SpecError([Problem(filename, 1, 1, "", "the document is nested too deeply")]) from None
    return data, smap


class _Loader(yaml.SafeLoader):
    """SafeLoader whose value errors (e.g. an impossible date) carry the node's position."""

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(None, None, f"cannot read this value: {exc}",
                                                    node.start_mark) from None


_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _walk(node: yaml.Node, path: tuple, smap: SourceMap, filename: str, active: set, count: list) -> None:
    count[0] += 1
    if count[0] > MAX_EXPANDED_NODES:
        raise SpecError([Problem(filename, node.start_mark.line + 1, node.start_mark.column + 1, _dotted(path),
                                 f"the document expands to more than {MAX_EXPANDED_NODES} values (aliases?)")])
    if id(node) in active:
        raise SpecError([Problem(filename, node.start_mark.line + 1, node.start_mark.column + 1, _dotted(path),
                                 "recursive alias: a value contains itself")])
    smap.values.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.ScalarNode) and node.style is None and node.tag != _STR_TAG:
        smap.plain.setdefault(path, node.value)
    if isinstance(node, yaml.MappingNode):
        active.add(id(node))
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            kmark = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if not isinstance(key_node, yaml.ScalarNode):
                raise SpecError([Problem(filename, *kmark, _dotted(path),
                                         f"a {key_node.id} cannot be a key; keys are field names")])
            if key_node.tag not in (_STR_TAG, _MERGE_TAG):
                # `null: x`, `1: x`, `yes: x`: pydantic would say "Keys should be strings" at the
                # mapping, or not at all once YAML had turned the key into None or True.
                shown = key_node.value or "(empty)"
                raise SpecError([Problem(filename, *kmark, _dotted(path),
                                         f"key {shown} is not a string; quote it: \"{key_node.value}\":")])
            key = key_node.value
            if key in seen and key != "<<":
                raise SpecError([Problem(filename, *kmark, _dotted(path + (key,)),
                                         f"duplicate key {key!r} (first on line {seen[key]})")])
            seen[key] = kmark[0]
            smap.keys.setdefault(path + (key,), kmark)
            _walk(value_node, path + (key,), smap, filename, active, count)
        active.discard(id(node))
    elif isinstance(node, yaml.SequenceNode):
        active.add(id(node))
        for i, item in enumerate(node.value):
            _walk(item, path + (str(i),), smap, filename, active, count)
        active.discard(id(node))


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str] | None:
    """Field names of the sub-model that `loc` points into, for "did you mean"."""
    current: Any = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        info = current.model_fields.get(str(part))
        if info is None:
            return None
        current = info.annotation
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return None


# What each pattern means, in words: pydantic's own message quotes the regex.
PATTERN_HINTS = {
    NAME_PATTERN: "letters, digits and single dashes (no spaces or underscores), starting and ending "
                  "with a letter or digit",
    URI_PATTERN: "s3://BUCKET/PREFIX (bucket: 3-63 lowercase letters, digits, dots, dashes) or "
                 "file:///ABSOLUTE/PATH",
    ROLE_PATTERN: "an IAM role ARN such as arn:aws:iam::123456789012:role/NAME",
    REGION_PATTERN: "an AWS region such as us-east-1",
    INSTANCE_PATTERN: "a SageMaker instance type such as ml.trn1.2xlarge",
    ARCH_PATTERN: "a timm ViT architecture such as vit_base_patch16_224",
    SDK_PATTERN: "a Neuron SDK version such as 2.30.0",
    DATA_PATTERN: "synthetic, s3://BUCKET/PREFIX (bucket: 3-63 lowercase letters, digits, dots, dashes; "
                  "the prefix may be left out) or file:///ABSOLUTE/PATH",
}


def problems_from(exc: ValidationError, model: type[BaseModel], smap: SourceMap) -> list[Problem]:
    """Turn pydantic's errors into located problems with readable reasons."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(str(p) for p in err["loc"])
        kind = err["type"]
        message = err["msg"]
        prefer_key = False
        if kind == "cross_field":
            # One error may carry several (see `_crosses`): each is located at its own field.
            for field_path, each in err["ctx"].get("all", ((err["ctx"]["field"], err["ctx"]["message"]),)):
                at = loc + (_split(field_path) if isinstance(field_path, str) else tuple(field_path))
                problems.append(Problem(*smap.where(at, prefer_key=not isinstance(field_path, str)), _dotted(at), each))
            continue
        elif kind == "extra_forbidden":
            prefer_key = True
            known = _fields_at(model, loc[:-1]) or []
            close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
            message = f"unknown field {loc[-1]!r}"
            message += f"; did you mean {close[0]!r}?" if close else (
                f"; expected one of: {', '.join(known)}" if known else "")
        elif kind == "missing":
            message = "required field is missing"
        elif kind == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") in PATTERN_HINTS:
            pattern = err["ctx"]["pattern"]
            why = _uri_reason(err.get("input")) if pattern in (URI_PATTERN, DATA_PATTERN) else None
            message = f"{err.get('input')!r} is not valid: {why or f'expected {PATTERN_HINTS[pattern]}'}"
        elif kind == "model_type" or kind == "dict_type":
            message = f"expected a mapping, got {type(err.get('input')).__name__}"
            if loc == ("schedule",) and isinstance(err.get("input"), str):
                message += f'; write schedule: {{cron: "{err["input"]}"}}'
        elif kind == "bool_not_number":
            raw = smap.raw(loc)
            message = f"expected a number, got a boolean ({raw})" if raw else "expected a number, got a boolean"
        elif kind == "finite_number":
            message = f"must be a finite number, got {smap.raw(loc) or err.get('input')}"
        elif kind in ("literal_error", "string_type", "enum"):
            message = _unquoted_hint(err, smap.raw(loc), _field_pattern(model, loc)) or message
        file, line, col = smap.where(loc, prefer_key=prefer_key)
        problems.append(Problem(file, line, col, _dotted(loc), message))
    return problems


def _uri_reason(value: Any) -> str | None:
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


def _field_pattern(model: type[BaseModel], loc: tuple) -> str | None:
    """The regex a text field at `loc` must match, if it has one (for quoting hints)."""
    current: Any = model
    for i, part in enumerate(loc):
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return None
        if i == len(loc) - 1:
            return next((m.pattern for m in field.metadata if getattr(m, "pattern", None)), None)
        candidates = [field.annotation, *getattr(field.annotation, "__args__", ())]
        current = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return None


def _unquoted_hint(err: dict, raw: str | None, pattern: str | None = None) -> str | None:
    """For a text field given a boolean or a number: how YAML read it and how to write it.

    YAML 1.1 reads unquoted yes/no/on/off/true/false as booleans and 2.30 as the number 2.3,
    so `mode: off` reaches the model as False; the user meant the word. Quoting is suggested
    only where the quoted text would pass the field's pattern; otherwise the pattern's own
    description says what to write (`neuron_sdk: 2.30` needs "2.30.0").
    """
    value = err.get("input")
    expected = err.get("ctx", {}).get("expected")
    if isinstance(value, bool):
        got = f"got {str(value).lower()}"
        if raw is None:
            return f"{got}; if you meant a word, write it in quotes"
        why = f"{got} (YAML reads unquoted {raw} as a boolean)"
        if expected is None or f"'{raw}'" in expected:
            return f'{why}; write "{raw}" in quotes'
        return f"{why}; expected {expected}"
    if isinstance(value, (int, float)) and expected is None:
        got = f"expected text, got the number {value}"
        if raw is not None and raw != str(value):
            got += f" (YAML read {raw} as a number)"
        text = raw if raw is not None else str(value)
        if pattern is not None and not re.search(pattern, text):
            return f"{got}; write it in quotes, as {PATTERN_HINTS.get(pattern, f'text matching {pattern}')}"
        return f'{got}; write "{text}" in quotes'
    return None


_NEEDS_ROLE = "the sagemaker backend needs role_arn (or infra: pointing at stack outputs)"
_NEEDS_OUTPUT = "the sagemaker backend needs an s3:// output.uri"
_NEEDS_CACHE = "the sagemaker backend needs an s3:// compile_cache.uri, or mode: off"


def _sagemaker_fields_absent(data: Mapping) -> list[tuple[tuple[str, ...], str]]:
    """The fields a sagemaker spec needs that `data` leaves out altogether, read from the raw
    data: pydantic runs JobSpec's cross-field checks only when every field is valid, so with
    another problem in the file these would otherwise surface one round later."""
    if data.get("backend") != "sagemaker":
        return []

    def part(name: str) -> Mapping:
        value = data.get(name)
        return value if isinstance(value, Mapping) else {}

    found = []
    if data.get("role_arn") is None:
        found.append((("role_arn",), _NEEDS_ROLE))
    if isinstance(data.get("output", {}), Mapping) and part("output").get("uri") is None:
        found.append((("output", "uri"), _NEEDS_OUTPUT))
    cache = data.get("compile_cache", {})
    if isinstance(cache, Mapping) and cache.get("mode", "tarball") == "tarball" and cache.get("uri") is None:
        found.append((("compile_cache", "uri"), _NEEDS_CACHE))
    return found


def validate(model: type[BaseModel], data: Any, smap: SourceMap) -> BaseModel:
    """Validate plain data against `model`, raising SpecError with located problems."""
    if not isinstance(data, Mapping):
        raise SpecError([Problem(smap.file, 1, 1, "", f"expected a mapping of fields, got {type(data).__name__}")])
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        problems = problems_from(exc, model, smap)
        if model is JobSpec:
            seen = {p.path for p in problems}
            problems += [Problem(*smap.where(loc), _dotted(loc), message)
                         for loc, message in _sagemaker_fields_absent(data) if _dotted(loc) not in seen]
        raise SpecError(problems) from None
    except RecursionError:
        raise SpecError([Problem(smap.file, 1, 1, "", "the document is nested too deeply")]) from None


INFRA_FIELDS = {
    "role_arn": ("role_arn",),
    "compile_cache_uri": ("compile_cache", "uri"),
    "output_uri": ("output", "uri"),
}
# Keys `infra outputs --write` writes besides INFRA_FIELDS (region is used; the rest is a record).
INFRA_OTHER_KEYS = ("region", "bucket", "stack_name")


# How alike two file names' stems must be (difflib ratio) for "did you mean".
CLOSE_NAME_CUTOFF = 0.75


class _Unreadable(Exception):
    """Why a file cannot be read as a spec; the caller says where the file was named.

    `missing` is True when nothing is at the path (see `_missing_hint`); `hint` says what to
    do; `line` and `column` (1-based, 0 when unknown) locate the problem in the file."""

    def __init__(self, message: str, missing: bool = False, hint: str | None = None, line: int = 0,
                 column: int = 0):
        super().__init__(message)
        self.missing = missing
        self.hint = hint
        self.line = line
        self.column = column


def _close_spec_name(path: Path, referrer: str | None = None) -> str | None:
    """The name of a YAML file in `path`'s folder close to `path`'s name, or None.

    For a path that does not exist: first the same name with the other YAML extension
    (`local-smoke.yaml` for `local-smoke.yml`, the likeliest slip), else a name whose stem is
    close (names compared without their extension: a shared ".yaml" would make any two look
    alike; close enough that `local-tiny` does not suggest `latin1`), the same extension
    first among equally close ones. `referrer`, the file whose field names `path`, is never
    offered for itself."""
    try:
        with os.scandir(path.parent) as entries:
            names = [e.name for e in entries if e.name.endswith((".yaml", ".yml")) and e.name != path.name]
    except (OSError, ValueError):
        return None
    if referrer is not None:
        names = [name for name in names if not _same_file(path.parent / name, referrer)]
    wanted = Path(path.name)
    same_stem = [name for name in sorted(names) if Path(name).stem == wanted.stem]
    if same_stem:
        return same_stem[0]
    scored = [(difflib.SequenceMatcher(None, wanted.stem, Path(name).stem).ratio(), Path(name).suffix == wanted.suffix,
               name) for name in names]
    close = [entry for entry in scored if entry[0] >= CLOSE_NAME_CUTOFF]
    if not close:
        return None
    return max(close, key=lambda entry: (entry[0], entry[1], [-ord(c) for c in entry[2]]))[2]


def _same_file(a: Path, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _missing_hint(path: Path) -> str:
    """A hint for a spec file named on the command line that does not exist: a close name in
    its folder, or to check the path."""
    if not path.parent.is_dir():
        return f"check the path: the folder {path.parent} does not exist"
    close = _close_spec_name(path)
    if close:
        return f"did you mean {path.parent / close}?"
    return f"check the path: {path.parent} has no YAML file of a close name"


def _read_text(path: Path) -> str:
    """The text of `path`, which must be a regular file of at most MAX_SPEC_BYTES UTF-8 bytes.

    Never opens anything but a regular file (a FIFO would block forever, /dev/zero never
    ends) and never reads more than MAX_SPEC_BYTES + 1 bytes. Raises `_Unreadable` whose
    message completes "<path> ...".
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        raise _Unreadable("does not exist", missing=True) from None
    except (OSError, ValueError) as exc:
        raise _Unreadable(f"cannot be read: {getattr(exc, 'strerror', None) or exc}", hint=_os_hint(exc)) from None
    if stat.S_ISDIR(info.st_mode):
        raise _Unreadable("is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise _Unreadable("is not a regular file (a device, pipe or socket?)")
    too_big = f"is larger than {MAX_SPEC_BYTES} bytes; spec files are small"
    if info.st_size > MAX_SPEC_BYTES:
        raise _Unreadable(too_big)
    try:
        # O_NONBLOCK: if the path was swapped for a FIFO since the stat, opening must not block.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise _Unreadable("is not a regular file (a device, pipe or socket?)")
            raw = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise _Unreadable(f"cannot be read: {exc.strerror or exc}", hint=_os_hint(exc)) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise _Unreadable(too_big)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise _Unreadable(f"is not UTF-8 text (byte {exc.start}): byte 0x{raw[exc.start]:02x} at line {line}, "
                          f"column {column} is not UTF-8 (a Latin-1 or Windows-1252 file?)",
                          hint=f"save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 {shlex.quote(str(path))} > "
                               "NEW.yaml`, then use NEW.yaml", line=line, column=column) from None


def _os_hint(exc: BaseException) -> str | None:
    """What to do about an OSError met reading a spec file."""
    code = getattr(exc, "errno", None)
    if code == errno.ENAMETOOLONG:
        return "a name in the path is longer than the file system allows (255 bytes a name): use a shorter one"
    if code in (errno.EACCES, errno.EPERM):
        return "make the file readable (chmod) or copy it somewhere you can read"
    if code == errno.ELOOP:
        return "the path goes round a loop of symbolic links: fix the links"
    if isinstance(exc, ValueError):
        return "remove the NUL byte from the path"
    return None


def _read_spec_file(path: Path) -> str:
    """`_read_text` for a file named on the command line: problems are located at the file."""
    try:
        return _read_text(path)
    except _Unreadable as exc:
        raise SpecError([Problem(str(path), exc.line, exc.column, "", str(exc))],
                        hint=_missing_hint(path) if exc.missing else exc.hint) from None


# The top-level keys that tell a job spec from a sweep spec (see `_kind`).
SWEEP_KEYS = {"sweep", "grid", "random"}


def _kind(data: Any) -> str | None:
    """"sweep", "job", or None (not clearly either) for a parsed document.

    A sweep has `base:` and any of sweep:, grid:, random:; a job spec has none of those and a
    field only job specs have. Validating one as the other gives a screen of unknown fields.
    """
    if not isinstance(data, Mapping):
        return None
    keys = {k for k in data if isinstance(k, str)}
    if "base" in keys and keys & SWEEP_KEYS:
        return "sweep"
    if "base" not in keys and not keys & SWEEP_KEYS and keys & (set(JobSpec.model_fields) - set(SweepSpec.model_fields)):
        return "job"
    return None


def _apply_infra(data: dict, base_dir: Path, smap: SourceMap) -> tuple[dict, list[Problem], str | None]:
    """Fill fields the spec leaves out from an infra outputs file (see `infra outputs --write`):
    (the merged data, problems found that validation will not, and a hint for them).

    The filled paths are recorded in `smap.borrowed`, so that a problem with a filled value is
    located in the infra file, at its own line. The problems (the infra file's region is no
    region; the spec's region differs from the stack's) are reported with validation's own,
    not instead of them.
    """
    ref = data.get("infra")
    if not isinstance(ref, str):
        return data, [], None
    path = base_dir / ref
    line, col = smap.find(("infra",))
    hint = "run `python -m orchestrator infra outputs --write <path>` after deploying the stack"
    try:
        text = _read_text(path)
    except _Unreadable as exc:
        close = _close_spec_name(path, referrer=smap.file) if exc.missing else None
        where = f"did you mean infra: {Path(ref).parent / close}? If not, " if close else ""
        raise SpecError([Problem(smap.file, line, col, "infra", f"infra outputs {path} {exc}")],
                        hint="; ".join(filter(None, (exc.hint, where + hint)))) from None
    outputs, infra_map = read_yaml(text, str(path))
    if not isinstance(outputs, Mapping):
        raise SpecError([Problem(smap.file, line, col, "infra", f"{path} is not a mapping of outputs")], hint=hint)
    known = [*INFRA_FIELDS, *INFRA_OTHER_KEYS]
    unknown = [key for key in outputs if key not in known]
    if unknown:
        # A misspelt key would otherwise be skipped, and the field it was meant to fill reported
        # missing in the spec instead.
        problems = []
        for key in unknown:
            key_line, key_col = infra_map.find((key,))
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            problems.append(Problem(str(path), key_line, key_col, str(key),
                                    "unknown key in the infra outputs file"
                                    + (f"; did you mean {close[0]!r}?" if close else "")))
        raise SpecError(problems, hint=f"an infra outputs file holds {', '.join(known)}; {hint}")
    merged = json.loads(json.dumps(data, default=str))
    for out_key, target in INFRA_FIELDS.items():
        value = outputs.get(out_key)
        if value is None:
            continue
        parent = merged
        for part in target[:-1]:
            if not isinstance(parent.get(part, {}), dict):
                break
            parent = parent.setdefault(part, {})
        else:
            if target[-1] not in parent:
                parent[target[-1]] = value
                smap.borrowed[target] = (infra_map, (out_key,))
    stack_region = outputs.get("region")
    if "region" not in merged and isinstance(stack_region, str):
        merged["region"] = stack_region
        smap.borrowed[("region",)] = (infra_map, ("region",))
        return merged, [], None
    if "region" not in outputs:
        return merged, [], None
    if not isinstance(stack_region, str) or not re.fullmatch(REGION_PATTERN, stack_region):
        # Not filled in (the spec names its region), so validation never sees it: said here.
        region_line, region_col = infra_map.find(("region",))
        return merged, [Problem(str(path), region_line, region_col, "region",
                                f"{stack_region!r} is not valid: expected an AWS region such as us-east-1")], (
            f"fix region: in {path} (the region of the stack it describes), or run `python -m orchestrator infra "
            "outputs --write` again")
    if merged.get("region") != stack_region and any(target != ("region",) for target in smap.borrowed):
        # The bucket, the role's grants and the operator policy all live in the stack's region.
        line, col = smap.find(("region",))
        return merged, [Problem(smap.file, line, col, "region",
                                f"region {merged.get('region')} differs from the region of the stack whose "
                                f"outputs {ref} fills in ({stack_region}): its bucket, role grants and image "
                                "access are for that region")], (
            f"remove region: to use {stack_region}, or deploy the stack in {merged.get('region')} and point infra: "
            "at its outputs")
    return merged, [], None


def _job_spec(data: Any, smap: SourceMap, base_dir: Path) -> JobSpec:
    found: list[Problem] = []
    hint = None
    if isinstance(data, dict):
        data, found, hint = _apply_infra(data, base_dir, smap)
    try:
        spec = validate(JobSpec, data, smap)
    except SpecError as exc:
        if not found:
            raise
        raise SpecError(found + exc.problems, hint="; ".join(filter(None, (hint, exc.hint)))) from None
    if found:
        raise SpecError(found, hint=hint)
    spec._source = smap
    return spec


def loads(text: str, filename: str = "<string>", base_dir: Path | None = None) -> JobSpec:
    """Load a job spec from YAML text. See the module docstring for the contract."""
    data, smap = read_yaml(text, filename)
    if _kind(data) == "sweep":
        # A sweep with a schedule runs on its cron; `sweep run` would run it once, now.
        run = (f"follow its schedule with `python -m orchestrator schedule run {filename}` (or "
               f"`schedule crontab {filename}` for system cron)" if isinstance(data, Mapping) and data.get("schedule")
               else f"run it with `python -m orchestrator sweep run {filename}`")
        raise SpecError([Problem(filename, 1, 1, "", "this is a sweep spec, not a job spec")],
                        hint=f"check it with `python -m orchestrator sweep plan {filename}`, {run}")
    return _job_spec(data, smap, base_dir or Path.cwd())


def load(path: str | Path) -> JobSpec:
    """Load a job spec file. See the module docstring for the contract."""
    path = Path(path)
    return loads(_read_spec_file(path), str(path), base_dir=path.parent)


def with_overrides(spec: JobSpec, overrides: Mapping[str, Any]) -> JobSpec:
    """A new spec with dotted-path overrides applied and everything validated again.

    Raises SpecError naming the override path when the result does not validate.
    """
    data = spec.model_dump(mode="json")
    for dotted, value in overrides.items():
        parent = data
        parts = _split(dotted)
        for part in parts[:-1]:
            parent = parent.setdefault(part, {})
        parent[parts[-1]] = value
    smap = spec._source or SourceMap("<overrides>")
    try:
        new = JobSpec.model_validate(data)
    except ValidationError as exc:
        # The spec file's text at an overridden path is the value replaced, not the offending one.
        raise SpecError(problems_from(exc, JobSpec, _Overridden(smap, [_split(d) for d in overrides]))) from None
    new._source = smap
    return new


@dataclass
class _Overridden:
    """A spec's source map as seen through overrides: the same locations, but no source text
    for an overridden path (the file's text there is the value the override replaced)."""

    smap: SourceMap
    paths: list[tuple]

    def _overridden(self, path: tuple) -> bool:
        path = tuple(str(p) for p in path)
        return any(path[:len(p)] == p for p in self.paths)

    def where(self, path: tuple, prefer_key: bool = False) -> tuple[str, int, int]:
        return self.smap.where(path, prefer_key)

    def raw(self, path: tuple) -> str | None:
        return None if self._overridden(path) else self.smap.raw(path)

    def find(self, path: tuple, prefer_key: bool = False) -> tuple[int, int]:
        return self.smap.find(path, prefer_key)

    @property
    def file(self) -> str:
        return self.smap.file


def json_schema() -> dict:
    """The JSON Schema of job specs (for editors), built from the field descriptions."""
    return JobSpec.model_json_schema()


# --- Sweep specs --------------------------------------------------------------------------
#
# A sweep names a base job spec (a path relative to the sweep file) and axes over the base's
# dotted field paths. `load_sweep(path)` returns a frozen `SweepSpec` (with the base spec
# loaded) or raises SpecError with located problems: unknown paths (with "did you mean"),
# paths that may not vary, duplicate or overlapping axes, zero trials, a bad cron. Expanding
# the axes into trials (and checking each trial's values) is `orchestrator.sweep`'s job.

# Every trial of a sweep runs on one backend in one region: the runner holds one client.
UNSWEEPABLE = {
    "backend": "all trials of a sweep share one backend",
    "region": "all trials of a sweep share one region",
    "infra": "infra outputs are applied when the base spec loads, not per trial",
}
MAX_TRIALS = 10_000
CRON_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


class RandomParam(_Strict):
    """One randomly sampled axis: exactly one of uniform, loguniform, int, choice."""

    uniform: tuple[Float, Float] | None = Field(None, description="[low, high]: a float drawn uniformly.")
    loguniform: tuple[Float, Float] | None = Field(
        None, description="[low, high], both > 0: a float whose logarithm is drawn uniformly.")
    int_: tuple[Int, Int] | None = Field(None, alias="int", description="[low, high]: an integer, both ends included.")
    choice: list[Any] | None = Field(None, min_length=1, description="One of these values, each equally likely.")

    @model_validator(mode="after")
    def _one_kind(self) -> RandomParam:
        given = [k for k in ("uniform", "loguniform", "int_", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise _cross("", "give exactly one of uniform, loguniform, int, choice")
        low_high = self.uniform or self.loguniform or self.int_
        if low_high is not None and low_high[0] > low_high[1]:
            raise _cross(given[0].rstrip("_"), f"low {low_high[0]} is above high {low_high[1]}")
        if self.loguniform is not None and self.loguniform[0] <= 0:
            raise _cross("loguniform", "loguniform bounds must be above 0")
        return self

    @property
    def kind(self) -> str:
        return next(k.rstrip("_") for k in ("uniform", "loguniform", "int_", "choice") if getattr(self, k) is not None)


class RandomSpec(_Strict):
    trials: Int = Field(..., ge=1, le=MAX_TRIALS, description="Random trials (per grid point when a grid is given).")
    seed: Int = Field(0, ge=0, le=2**32 - 1, description="Seed of the sampler: same seed, same trials.")
    params: dict[str, RandomParam] = Field(..., min_length=1, description="Dotted field path -> distribution.")


class ScheduleSpec(_Strict):
    cron: str = Field(..., min_length=1, description="Five-field cron expression (or @daily, @hourly, ...).")
    catchup: Literal["latest", "all", "none"] = Field(
        "latest",
        description="Ticks missed while the machine slept: latest submits only the most recent, all "
        "submits each (at most max_catchup), none skips them.",
    )
    max_catchup: Int = Field(24, ge=1, le=1000, description="catchup: all submits at most this many missed ticks.")
    timezone: str = Field("UTC", min_length=1, description="IANA time zone the cron is read in; tick ids are UTC.")


class SweepBudgetSpec(_Strict):
    max_total_cost_usd: Float | None = Field(
        None, gt=0, description="Refuse a sweep whose trials' cost bounds add up to more; also caps retries.")


class SweepSpec(_Strict):
    sweep: str = Field(..., min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN,
                       description="Sweep name: letters, digits and single dashes.")
    base: str = Field(..., min_length=1, description="Base job spec, relative to this file.")
    grid: dict[str, list[Any]] = Field(default_factory=dict,
                                       description="Dotted field path -> values; every combination is a trial.")
    random: RandomSpec | None = Field(None, description="Seeded random trials (crossed with the grid).")
    concurrency: Int = Field(4, ge=1, le=1000, description="Jobs of this sweep in flight at once, on any machine.")
    failover: dict[Literal["instance.type"], list[str]] = Field(
        default_factory=dict,
        description="On a capacity error, retry the trial with the next of these instance types.")
    schedule: ScheduleSpec | None = Field(None, description="Run the sweep on a cron schedule.")
    budget: SweepBudgetSpec = Field(default_factory=SweepBudgetSpec, description="Cost guard for the whole sweep.")
    max_retries: Int = Field(2, ge=0, le=10, description="Resubmissions of a trial after a retryable failure "
                             "(capacity, spot interruption, internal error); user errors are never retried.")

    _source: SourceMap | None = PrivateAttr(default=None)
    _path: Path | None = PrivateAttr(default=None)
    _base: JobSpec | None = PrivateAttr(default=None)

    @property
    def base_spec(self) -> JobSpec:
        """The loaded base job spec (set by `load_sweep`)."""
        if self._base is None:
            raise ValueError("this SweepSpec was not loaded with load_sweep; no base spec")
        return self._base

    @property
    def path(self) -> Path | None:
        return self._path

    def locate(self, *path: str) -> tuple[str, int, int]:
        """(file, line, column) of a path of YAML keys ("grid", "instance.type", "0")."""
        if self._source is None:
            return ("", 0, 0)
        line, col = self._source.find(tuple(path))
        return (self._source.file, line, col)

    def axis_paths(self) -> list[str]:
        """Every varied dotted path, grid first, in file order."""
        return list(self.grid) + (sorted(self.random.params) if self.random else [])


def job_field_paths(model: type[BaseModel] = JobSpec, prefix: str = "") -> dict[str, Any]:
    """Dotted path -> annotation of every leaf field of `model` (sub-models are walked)."""
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        dotted = f"{prefix}{name}"
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out.update(job_field_paths(annotation, dotted + "."))
        else:
            out[dotted] = annotation
    return out


def _check_axis_path(dotted: str, where: tuple, smap: SourceMap) -> Problem | None:
    leaves = job_field_paths()
    line, col = smap.find(where, prefer_key=True)
    parts = dotted.split(".")
    if dotted in leaves or (len(parts) == 2 and parts[0] in ("tags", "environment") and parts[1]):
        if parts[0] in UNSWEEPABLE:
            return Problem(smap.file, line, col, dotted, f"{dotted} cannot vary in a sweep: {UNSWEEPABLE[parts[0]]}")
        return None
    parent = ".".join(parts[:-1])
    siblings = {p.rsplit(".", 1)[-1]: p for p in leaves if (p.rsplit(".", 1)[0] if "." in p else "") == parent}
    if siblings:
        # The parent exists: suggest among its fields, as for an unknown key in a job spec.
        close = [siblings[c] for c in difflib.get_close_matches(parts[-1], list(siblings), n=1, cutoff=0.6)]
    else:
        close = difflib.get_close_matches(dotted, list(leaves), n=1, cutoff=0.6)
    if close:
        hint = f"; did you mean {close[0]!r}?"
    else:
        under = [p for p in leaves if p.startswith(parts[0] + ".")]
        hint = f"; fields under {parts[0]!r}: {', '.join(under)}" if under else ""
    return Problem(smap.file, line, col, dotted, f"{dotted!r} is not a field of the job spec{hint}")


def _sweep_problems(sweep: SweepSpec, smap: SourceMap) -> list[Problem]:
    """The checks pydantic cannot locate well: paths, overlaps, trial count, cron."""
    import re

    problems: list[Problem] = []
    axes: list[tuple[str, tuple]] = [(p, ("grid", p)) for p in sweep.grid]
    if sweep.random:
        axes += [(p, ("random", "params", p)) for p in sweep.random.params]
    for dotted, where in axes:
        found = _check_axis_path(dotted, where, smap)
        if found:
            problems.append(found)
    for i, (a, where_a) in enumerate(axes):
        for b, where_b in axes[:i]:
            if a == b or a.startswith(b + ".") or b.startswith(a + "."):
                line, col = smap.find(where_a, prefer_key=True)
                first = smap.find(where_b, prefer_key=True)[0]
                problems.append(Problem(smap.file, line, col, a, f"duplicate axis: {a} is also varied by "
                                        f"{'.'.join(where_b[:-1])} {b!r} (line {first})"))
    for dotted, values in sweep.grid.items():
        if not values:
            line, col = smap.find(("grid", dotted))
            problems.append(Problem(smap.file, line, col, f"grid.{dotted}",
                                    "an axis with no values gives zero trials; give at least one value"))
    grid_points = 1
    for values in sweep.grid.values():
        grid_points *= max(len(values), 1)
    total = grid_points * (sweep.random.trials if sweep.random else 1)
    if total > MAX_TRIALS:
        line, col = smap.find(("grid",))
        problems.append(Problem(smap.file, line, col, "grid", f"{total} trials; at most {MAX_TRIALS}"))
    for dotted, values in sweep.failover.items():
        line, col = smap.find(("failover", dotted))
        if not values:
            problems.append(Problem(smap.file, line, col, f"failover.{dotted}", "give at least one fallback"))
        for i, value in enumerate(values):
            if not isinstance(value, str) or not re.fullmatch(r"ml\.[a-z0-9]+\.[a-z0-9]+", value):
                vline, vcol = smap.find(("failover", dotted, str(i)))
                problems.append(Problem(smap.file, vline, vcol, f"failover.{dotted}",
                                        f"{value!r} is not an instance type like ml.trn1.32xlarge"))
    if sweep.schedule is not None:
        problems += _schedule_problems(sweep.schedule, smap)
    return problems


# The five cron fields, in order, with what each accepts.
CRON_FIELDS = (("minute", "0-59"), ("hour", "0-23"), ("day of month", "1-31"),
               ("month", "1-12 or jan-dec"), ("day of week", "0-7 or sun-sat"))
# A cron with no fire time this many years ahead never fires (Feb 29 recurs within 8 years).
CRON_HORIZON_YEARS = 8
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _cron_problem(expr: str) -> str | None:
    """Why a cron expression is unusable, or None. Only `@` aliases and five fields are taken."""
    from croniter import croniter

    fields = expr.split()
    if expr.startswith("@"):
        if expr in CRON_ALIASES:
            return None
        return f"cannot parse cron {expr!r}: unknown alias; use one of {', '.join(CRON_ALIASES)}"
    if len(fields) != 5:
        return (f"cannot parse cron {expr!r}: expected five fields: minute hour day-of-month month "
                "day-of-week, e.g. \"0 3 * * 1\"")
    if not croniter.is_valid(expr):
        # Try each field alone among stars, to name the one that is wrong.
        bad = [i for i in range(5) if not croniter.is_valid(" ".join(f if j == i else "*" for j, f in enumerate(fields)))]
        if not bad:
            return f"cannot parse cron {expr!r}: a field is out of range or malformed"
        named = "; ".join(f"the {CRON_FIELDS[i][0]} field {fields[i]!r} is out of range or malformed "
                          f"({CRON_FIELDS[i][0]}: {CRON_FIELDS[i][1]})" for i in bad)
        return f"cannot parse cron {expr!r}: {named}"
    from datetime import datetime, timezone

    try:
        croniter(expr, datetime.now(timezone.utc),
                 max_years_between_matches=CRON_HORIZON_YEARS).get_next(datetime)
    except (ValueError, ArithmeticError, LookupError, TypeError):  # CroniterBadDateError is a ValueError
        return f"this cron never fires ({_never_why(expr)}?)"
    return None


def _never_why(expr: str) -> str:
    """A guess at why a valid cron never fires: a day of month that its months lack."""
    from croniter import croniter

    try:
        _, _, days, months, weekdays = croniter(expr).expanded[:5]
    except (ValueError, TypeError):
        return f"no time matches in the next {CRON_HORIZON_YEARS} years"
    months = list(range(1, 13)) if months == ["*"] else months
    if (weekdays == ["*"] and days != ["*"] and all(isinstance(d, int) for d in days)
            and all(isinstance(m, int) and 1 <= m <= 12 for m in months)
            and min(days) > max(_MONTH_DAYS[m - 1] for m in months)):
        day_text = f"day {days[0]} never occurs" if len(days) == 1 else \
            f"days {', '.join(map(str, days))} never occur"
        return f"{day_text} in {' or '.join(_MONTHS[m - 1] for m in months)}"
    return f"no time matches in the next {CRON_HORIZON_YEARS} years"


def _schedule_problems(schedule: ScheduleSpec, smap: SourceMap) -> list[Problem]:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    problems = []
    line, col = smap.find(("schedule", "cron"))
    why = _cron_problem(schedule.cron.strip())
    if why:
        problems.append(Problem(smap.file, line, col, "schedule.cron", why))
    try:
        ZoneInfo(schedule.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        tline, tcol = smap.find(("schedule", "timezone"))
        problems.append(Problem(smap.file, tline, tcol, "schedule.timezone",
                                f"unknown time zone {schedule.timezone!r}; use an IANA name like Europe/Paris"))
    return problems


def loads_sweep(text: str, filename: str = "<string>", base_dir: Path | None = None) -> SweepSpec:
    """Load a sweep spec from YAML text, and its base job spec from `base_dir / base`."""
    data, smap = read_yaml(text, filename)
    if _kind(data) == "job":
        raise SpecError([Problem(filename, 1, 1, "", "this is a job spec; a sweep needs base: and grid:/random:")],
                        hint=f"check it with `python -m orchestrator validate {filename}`, "
                             f"run it with `python -m orchestrator submit {filename}`")
    sweep = validate(SweepSpec, data, smap)
    problems = _sweep_problems(sweep, smap)
    if problems:
        raise SpecError(problems)
    base_path = (base_dir or Path.cwd()) / sweep.base
    line, col = smap.find(("base",))
    try:
        base_text = _read_text(base_path)
    except _Unreadable as exc:
        close = _close_spec_name(base_path, referrer=filename) if exc.missing else None
        where = f"did you mean base: {Path(sweep.base).parent / close}? " if close else ""
        raise SpecError([Problem(filename, line, col, "base", f"base job spec {base_path} {exc}")],
                        hint="; ".join(filter(None, (exc.hint, f"{where}base is a path relative to the sweep file")))) from None
    naming = Problem(filename, line, col, "base", f"the base job spec {base_path} named here does not load; "
                     "its problems follow")
    try:
        base_data, base_map = read_yaml(base_text, str(base_path))
        if _kind(base_data) == "sweep":
            raise SpecError([Problem(filename, line, col, "base",
                                     f"base {base_path} is itself a sweep spec; base must name a job spec")])
        if not isinstance(base_data, Mapping):
            what = "empty" if base_data is None else f"a YAML {type(base_data).__name__}, not a mapping of fields"
            raise SpecError([Problem(filename, line, col, "base", f"base {base_path} is not a job spec: it is {what}")],
                            hint="base names the job spec the sweep varies (a YAML file with name:, backend:, ...), "
                                 "as a path relative to the sweep file")
        sweep._base = _job_spec(base_data, base_map, base_path.parent)
    except SpecError as exc:
        if exc.problems and exc.problems[0].file == filename:
            raise
        # A problem inside the base file: say first which sweep file, at which line, named it.
        raise SpecError([naming, *exc.problems], hint=exc.hint) from None
    sweep._source = smap
    # Text given without a file name has no path: a crontab line cannot point at "<string>".
    sweep._path = None if filename == "<string>" else Path(filename)
    return sweep


def load_sweep(path: str | Path) -> SweepSpec:
    """Load a sweep spec file and its base job spec. Raises SpecError with located problems."""
    path = Path(path)
    return loads_sweep(_read_spec_file(path), str(path), base_dir=path.parent)
