"""The exact `CreateTrainingJob` request of a sagemaker spec (botocore's sagemaker model), which
`request.prepare` asks the backend for, `plan` prints and the sagemaker backend sends as it is;
the local backend lays out its container tree from the same request.

Contract: `build(...)` is pure and deterministic. Field names are SageMaker's; this is the one
place snake_case becomes PascalCase.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from entrypoints.shared import contract
from orchestrator import catalog, locations, preferences, tracking
from orchestrator.errors import Problem, SpecError

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

TRAIN_CHANNEL = "train"
CHECKPOINT_LOCAL_PATH = f"{contract.OPT_ML}/{contract.CHECKPOINT_DIR}"
TENSORBOARD_LOCAL_PATH = f"{contract.OPT_ML}/{contract.TENSORBOARD_DIR}"
# Local jobs never reach AWS; the request still needs a well-formed RoleArn (and an image:
# `catalog.LOCAL_IMAGE`), so the local backend receives placeholders (never sent anywhere).
LOCAL_ROLE_ARN = "arn:aws:iam::000000000000:role/orchestrator-local"


def training_image(spec: JobSpec, target: catalog.Target) -> str:
    """The target's image: image.uri, the catalog image for image.neuron_sdk, or "local";
    InputError (from the catalog) for a Neuron SDK version it has no image for."""
    if target.image_uri is None:
        catalog.image(spec.image.neuron_sdk)  # raises, naming the versions it knows
    return target.image_uri


def metric_definitions() -> list[dict]:
    """SageMaker metric definitions whose regexes match `contract.metric_line` output: the
    ranks' (`METRIC_NAMES`) and the launcher's utilization lines (`LAUNCH_METRIC_NAMES`)."""
    return [{"Name": name, "Regex": contract.metric_regex(tag, key)}
            for name, (tag, key) in {**contract.METRIC_NAMES, **contract.LAUNCH_METRIC_NAMES}.items()]


def code_channel(source_uri: str) -> dict:
    """The `code` input channel: the one object `source_uri` names (S3Prefix of its whole key),
    which SageMaker downloads to /opt/ml/input/data/code/sourcedir.tar.gz before the container
    starts, as the SageMaker SDK v3 ModelTrainer delivers a source archive."""
    return {
        "ChannelName": contract.CODE_CHANNEL,
        "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix",
            "S3Uri": source_uri,
            "S3DataDistributionType": "FullyReplicated",
        }},
    }


def build(spec: JobSpec, *, job_name: str, where: locations.Locations, job: dict, hyperparameters: dict[str, str],
          target: catalog.Target, choices: list | tuple = ()) -> dict:
    """The exact CreateTrainingJob request (pure; see the module docstring), from the spec's
    resolved `target`, at the job's locations `where`.

    Raises only for what cannot be expressed at all, which the doctor reports first with its
    location: an unknown image version (InputError) and spot without a max wait (SpecError at
    instance.max_wait_minutes, for callers that build without the doctor).
    """
    inst = spec.instance
    stopping = {"MaxRuntimeInSeconds": spec.max_run_minutes * 60}
    if inst.spot:
        if inst.max_wait_minutes is None:
            field = "instance.max_wait_minutes"
            file, line, column = spec.locate(field)
            minutes = spec.max_run_minutes
            raise SpecError([Problem(file or "<spec>", line, column, field,
                                     "managed spot training (spot: true) needs max_wait_minutes, the longest "
                                     "the job may wait for capacity plus run")],
                            hint=f"set {field} to at least max_run_minutes ({minutes}), e.g. "
                                 f"`instance: {{type: {inst.type}, spot: true, max_wait_minutes: {minutes}}}`")
        stopping["MaxWaitTimeInSeconds"] = inst.max_wait_minutes * 60
    tags = [{"Key": key, "Value": value} for key, value in sorted(job["tags"].items())]
    request: dict = {
        "TrainingJobName": job_name,
        "AlgorithmSpecification": {
            "TrainingImage": training_image(spec, target),
            "TrainingInputMode": "File",
            "MetricDefinitions": metric_definitions(),
            # launch.py as the container's first process, so SageMaker's stop signal reaches it
            # (the image's own entrypoint passes none on: see entrypoints/launcher/container.py).
            "ContainerEntrypoint": contract.container_entrypoint(),
        },
        "RoleArn": spec.role_arn or LOCAL_ROLE_ARN,
        "HyperParameters": dict(hyperparameters),
        "InputDataConfig": [code_channel(where.source)],
        "Environment": dict(job["environment"]),
        "OutputDataConfig": {"S3OutputPath": where.output},
        "ResourceConfig": resource_config(spec, choices),
        "StoppingCondition": stopping,
        "EnableManagedSpotTraining": inst.spot,
        "Tags": tags,
    }
    if inst.preferences:
        # botocore: InstancePreferences is mutually exclusive with EnableManagedSpotTraining
        # (the doctor's N070 refuses spot with them), so the field is left out, not sent false.
        del request["EnableManagedSpotTraining"]
    if spec.data.source != "synthetic":
        request["InputDataConfig"].append({
            "ChannelName": TRAIN_CHANNEL,
            "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": spec.data.source,
                "S3DataDistributionType": "FullyReplicated",
            }},
        })
    if inst.spot or spec.training.checkpoint_every > 0:
        request["CheckpointConfig"] = {"S3Uri": where.checkpoints, "LocalPath": CHECKPOINT_LOCAL_PATH}
    # Rank 0's TensorBoard scalars (entrypoints.trainer.scalars), which SageMaker uploads while the job runs.
    request["TensorBoardOutputConfig"] = {"LocalPath": TENSORBOARD_LOCAL_PATH,
                                          "S3OutputPath": where.tensorboard}
    if inst.keep_alive_minutes > 0:
        # A managed warm pool (botocore: ResourceConfig.KeepAlivePeriodInSeconds).
        request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = inst.keep_alive_minutes * 60
    if spec.max_retry_attempts > 0:
        request["RetryStrategy"] = {"MaximumRetryAttempts": spec.max_retry_attempts}
    mlflow = tracking.mlflow_config(job.get("mlflow"))
    if mlflow is not None:
        # A SageMaker MLflow App or tracking server: SageMaker links the job to the run. The
        # container logs the run itself too (the job file's "mlflow", with the ARN as its URI).
        request["MlflowConfig"] = mlflow
    return request


def resource_config(spec: JobSpec, choices: list | tuple | None = None) -> dict:
    """ResourceConfig: one InstanceType and InstanceCount, or with instance.preferences the
    InstancePreferences list (botocore: mutually exclusive with InstanceType; a count on every
    preference and none for the job, each chosen by `preferences.choices` to train the same
    global batch; a preference's own plan as its one TrainingPlanArns entry). A job-level
    instance.training_plan_arn is ResourceConfig.TrainingPlanArn either way. `choices`: the
    diagnosis's (computed here when not given)."""
    inst = spec.instance
    config: dict = {"InstanceType": inst.type, "InstanceCount": inst.count, "VolumeSizeInGB": inst.volume_gb}
    if inst.preferences:
        config = {"InstancePreferences": [], "VolumeSizeInGB": inst.volume_gb}
        for choice in choices or preferences.choices(spec):
            entry: dict = {"InstanceType": choice.type, "InstanceCount": choice.count or inst.count}
            if choice.training_plan_arn:
                entry["TrainingPlanArns"] = [choice.training_plan_arn]
            config["InstancePreferences"].append(entry)
    if inst.training_plan_arn:
        config["TrainingPlanArn"] = inst.training_plan_arn
    return config
