"""Which spec field a parameter of a request we send came from, so that AWS's refusal of a
derived value (`aws_contract`) is reported at the field the user can change: the code
channel's S3Uri, S3OutputPath and the TensorBoard prefix at output.uri, the job name at name,
an environment variable the user set at environment.NAME. None: the orchestrator's own value.

`field(spec, operation, request, path)` takes a path as `aws_contract.Violation.path` writes it.
"""

from __future__ import annotations

import re

from entrypoints.launcher import bootstrap
from entrypoints.shared import contract

# CreateTrainingJob: the first segment of a parameter path -> the spec field it came from.
_SAGEMAKER = {
    "TrainingJobName": "name",
    "RoleArn": "role_arn",
    "OutputDataConfig": "output.uri",
    "CheckpointConfig": "output.uri",
    "TensorBoardOutputConfig": "output.uri",
    "StoppingCondition.MaxRuntimeInSeconds": "max_run_minutes",
    "StoppingCondition.MaxWaitTimeInSeconds": "instance.max_wait_minutes",
    "ResourceConfig.InstanceType": "instance.type",
    "ResourceConfig.InstanceCount": "instance.count",
    "ResourceConfig.VolumeSizeInGB": "instance.volume_gb",
    "ResourceConfig.KeepAlivePeriodInSeconds": "instance.keep_alive_minutes",
    "EnableManagedSpotTraining": "instance.spot",
    "RetryStrategy": "max_retry_attempts",
    "HyperParameters.sagemaker_job_name": "name",
    "HyperParameters.sagemaker_region": "region",
}
# SubmitJob's, likewise.
_BATCH = {
    "jobName": "name",
    "timeout": "max_run_minutes",
    "retryStrategy.attempts": "max_retry_attempts",
}


def _lookup(table: dict[str, str], path: str) -> str | None:
    plain = re.sub(r"\[\d+\]", "", path)
    for prefix, found in table.items():
        if plain == prefix or plain.startswith(prefix + ".") or plain.startswith(prefix + " "):
            return found
    return None


def _tag(spec, key: str | None) -> str:
    # The user's tags are theirs; the orchestrator's (job, spec hash, sweep) follow the name.
    return f"tags.{key}" if key in spec.tags else "name"


def _variable(spec, name: str | None) -> str | None:
    if name in spec.environment:
        return f"environment.{name}"
    if name == bootstrap.CODE_URI_ENV:
        return "output.uri"
    return None


def field(spec, operation: str, request: dict, path: str) -> str | None:
    """The spec field (dotted) that `path` of `request` came from; None when it is our own."""
    index = re.match(r"^[A-Za-z]+\[(\d+)\]", path)
    if operation == "CreateTrainingJob":
        if path.startswith("InputDataConfig[") and index:
            channel = request["InputDataConfig"][int(index.group(1))]
            return "output.uri" if channel.get("ChannelName") == contract.CODE_CHANNEL else "data.source"
        if path.startswith("Tags[") and index:
            return _tag(spec, request["Tags"][int(index.group(1))].get("Key"))
        if path.startswith("Environment"):
            name = path.removeprefix("Environment").lstrip(". ").removeprefix("key ").strip("'")
            return _variable(spec, name.split(".")[0])
        if path.startswith("AlgorithmSpecification.TrainingImage"):
            return "image.uri" if spec.image.uri else "image.neuron_sdk"
        return _lookup(_SAGEMAKER, path)
    if operation == "SubmitJob":
        if path in ("containerOverrides", "payload"):
            # The overrides' and the payload's size: the environment is what grows them (the
            # user's variables and the hyperparameters; the rest is the bootstrap's, fixed).
            return "environment"
        if path.startswith("containerOverrides.environment[") and (item := re.search(r"\[(\d+)\]", path)):
            entry = request["containerOverrides"]["environment"][int(item.group(1))]
            return _variable(spec, entry.get("name"))
        if path.startswith("tags"):
            key = path.removeprefix("tags").lstrip(". ").removeprefix("key ").strip("'").split(".")[0]
            return _tag(spec, key) if key else "tags"
        if path.startswith("jobQueue"):
            return "batch.job_queue" if spec.batch.job_queue else "batch.stack"
        if path.startswith("jobDefinition"):
            return "batch.job_definition" if spec.batch.job_definition else "batch.stack"
        return _lookup(_BATCH, path)
    return None
