"""The stack's outputs: read from CloudFormation, and written as the `infra:` file a job spec
names (keys as in `orchestrator.spec.INFRA_FIELDS`, plus region, bucket and stack_name)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from entrypoints.shared import atomic
from orchestrator.errors import BackendError, InputError
from orchestrator.infra.cloudformation import describe_stack, region_of
from orchestrator.infra.template import check_stack_name

# Output keys of infra/stack.yaml.
OUTPUT_KEYS = {
    "RoleArn": "role_arn",
    "BucketName": "bucket",
    "CompileCacheUri": "compile_cache_uri",
    "OutputUri": "output_uri",
    "DataUri": "data_uri",
    "OperatorPolicyArn": "operator_policy_arn",
    "KmsKeyArn": "kms_key_arn",
}
REQUIRED_OUTPUTS = ("RoleArn", "BucketName", "CompileCacheUri", "OutputUri", "OperatorPolicyArn")


@dataclass(frozen=True)
class StackOutputs:
    """What the stack made, in the orchestrator's words."""

    stack_name: str
    region: str | None
    role_arn: str
    bucket: str
    compile_cache_uri: str
    output_uri: str
    operator_policy_arn: str
    data_uri: str | None = None
    kms_key_arn: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def infra_file(self) -> dict[str, str]:
        """The mapping `infra outputs --write` stores and a job spec's `infra:` reads."""
        data = {
            "role_arn": self.role_arn,
            "compile_cache_uri": self.compile_cache_uri,
            "output_uri": self.output_uri,
            "bucket": self.bucket,
            "stack_name": self.stack_name,
        }
        if self.region:
            data["region"] = self.region
        return data


def read_outputs(cfn, stack_name: str) -> StackOutputs:
    """The stack's outputs. InputError when no such stack exists (wrong name or region);
    BackendError when it exists but has not (or not successfully) finished deploying."""
    stack = describe_stack(cfn, check_stack_name(stack_name))
    if stack is None:
        raise InputError(f"no stack {stack_name!r} in region {region_of(cfn) or '(default)'}",
                         hint="deploy it first with `python -m orchestrator infra deploy`, or pass the --stack-name and "
                              "--region it was deployed with")
    return outputs_of(cfn, stack, stack_name)


def outputs_of(cfn, stack: Mapping, stack_name: str) -> StackOutputs:
    """A DescribeStacks entry's outputs as StackOutputs; BackendError when some are missing."""
    raw = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs") or []}
    missing = [key for key in REQUIRED_OUTPUTS if key not in raw]
    if missing:
        raise BackendError(f"stack {stack_name} ({stack['StackStatus']}) has no output {', '.join(missing)}",
                           hint="is it the orchestrator's stack, deployed to completion? `python -m orchestrator infra "
                                "deploy` creates or updates it")
    known = {key: raw[key] for key in OUTPUT_KEYS if key in raw}
    return StackOutputs(
        stack_name=stack_name,
        region=region_of(cfn),
        extra={k: v for k, v in raw.items() if k not in OUTPUT_KEYS},
        **{OUTPUT_KEYS[key]: value for key, value in known.items()},
    )


def check_outputs_target(path: Path, force: bool = False) -> None:
    """InputError (exit 2) unless `--write path` may be written (`paths.check_output_file`,
    the rule of every output file): a new path, or an outputs file an earlier `--write` made
    (its keys all among the infra file's), or any regular file with `force`. Never a link,
    device, FIFO, socket or folder, forced or not."""
    from orchestrator.paths import check_output_file

    check_output_file(path, "--write", force=force, ours=_not_outputs_file, create_folder=True)


def _not_outputs_file(path: Path) -> str | None:
    """None for an outputs file an earlier --write made, else what the file is instead."""
    from orchestrator import spec

    allowed = set(spec.INFRA_FIELDS) | set(spec.INFRA_OTHER_KEYS)
    try:
        with open(path, "rb") as handle:
            data = yaml.safe_load(handle.read(1 << 20))
    except (OSError, ValueError, yaml.YAMLError):
        data = ...  # unreadable as YAML: not an outputs file either
    if data is None or (isinstance(data, dict) and data and set(map(str, data)) <= allowed):
        return None
    what = (f"its keys are {', '.join(sorted(map(str, data))[:6])}" if isinstance(data, dict)
            else "it is not a YAML mapping of outputs")
    return f"is not an infra outputs file ({what})"


def write_outputs_file(outputs: StackOutputs, path: Path) -> Path:
    """Write the `infra:` file for job specs, atomically (a temp file, then replace)."""
    path = Path(path)
    header = (f"# Written by `python -m orchestrator infra outputs --write` from stack {outputs.stack_name}"
              f"{' in ' + outputs.region if outputs.region else ''}.\n"
              "# A job spec's `infra:` key points here; keys: see orchestrator/spec/loading.py INFRA_FIELDS.\n")
    text = header + yaml.safe_dump(outputs.infra_file(), sort_keys=False, default_flow_style=False)
    try:
        atomic.write_text(path, text, follow_symlinks=False)
    except OSError as exc:
        from orchestrator.paths import write_hint

        raise InputError(f"cannot write {path}: {exc.strerror or exc}", hint=write_hint(
            exc, "pass --write a file in a folder you can write, e.g. --write configs/infra.yaml")) from None
    return path
