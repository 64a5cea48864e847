"""From a job spec to the exact `CreateTrainingJob` request, and everything that travels with it.

Contract:
- A job is named by `names.job_name(spec)` unless the caller names it.
- `resolved_job(spec, name)` is the job file (`job.json`, schema in `entrypoints.contract`)
  with every default filled in: worker count, cache and output locations, the environment
  the container gets, and the tags.
- `build(...)` is pure: the request dict, exactly what `plan` shows and what the sagemaker
  backend sends (the local backend lays out its container tree from the same dict). Field
  names are SageMaker's; this is the one place snake_case becomes PascalCase.
- A batch spec's request is AWS Batch's SubmitJob instead (`orchestrator.batch_request`),
  from the same job file, archive and hyperparameters.
- `prepare(spec or diagnosis)` runs all of it on the doctor's diagnosis (`doctor.diagnose`:
  the resolved target, the cost estimate and the findings, each computed once; given one, it
  is not computed again). It is deterministic: the same spec gives the same request and the
  same archive bytes.

The flow is one way: spec -> doctor (target, cost, findings) -> request -> backend; what the
catalog derives about the spec (workers, LNC, environment, image) is read from the one
`catalog.Target`, never derived here again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from entrypoints import contract
from orchestrator import catalog, cost, doctor, names, preferences, sourcedir
from orchestrator.errors import InputError, Problem, SpecError

# Where a job's objects go (its own module, so `validate` checks them without this one's imports).
from orchestrator.locations import (  # noqa: F401 - callers use them as request.X
    TENSORBOARD_DIR,
    compile_cache_uri,
    object_uris,
    output_uri,
    results_uri,
    source_uri,
    tensorboard_uri,
)
from orchestrator.names import TAG_JOB, TAG_SPEC_HASH
from orchestrator.paths import home
from orchestrator.spec import JobSpec, spec_hash

CONTAINER_LOG_LEVEL = 20
TRAIN_CHANNEL = "train"
CHECKPOINT_LOCAL_PATH = f"{contract.OPT_ML}/{contract.CHECKPOINT_DIR}"
TENSORBOARD_LOCAL_PATH = f"{contract.OPT_ML}/{contract.TENSORBOARD_DIR}"
# Local jobs never reach AWS; the request still needs a well-formed RoleArn (and an image:
# `catalog.LOCAL_IMAGE`), so the local backend receives placeholders (never sent anywhere).
LOCAL_ROLE_ARN = "arn:aws:iam::000000000000:role/orchestrator-local"


def resolved_job(spec: JobSpec, job_name: str, extra_tags: dict | None = None,
                 target: catalog.Target | None = None, varied: dict | None = None,
                 choices: list | tuple | None = None) -> dict:
    """The job file (`job.json`, schema `contract.JOB_FILE_SCHEMA`) with every default resolved,
    from the spec's `target` (`catalog.resolve(spec)` when not given). `varied` (a sweep
    trial's values, dotted path -> value) travels as the file's "varied" object, so the
    job's results.json names them; a job outside a sweep has no such key."""
    target = target or catalog.resolve(spec)
    digest = spec_hash(spec)
    facts = target.facts
    instance = {
        "type": spec.instance.type,
        "family": facts.family if facts else target.family,
        "neuron_cores": facts.neuron_cores if facts else 0,
        "logical_cores": target.logical_cores,
        "lnc": target.lnc,
        "vcpus": facts.vcpus if facts else 0,
    }
    tags = dict(spec.tags)
    tags[TAG_SPEC_HASH] = digest
    tags[TAG_JOB] = job_name
    tags.update(extra_tags or {})
    job = {
        "schema": contract.JOB_FILE_SCHEMA,
        "job_name": job_name,
        "spec_hash": digest,
        "spec": spec.model_dump(mode="json"),
        "instance": instance,
        "workers_per_node": target.workers_per_node,
        "compile_cache": {"uri": compile_cache_uri(spec), "mode": spec.compile_cache.mode,
                          "push_interval_s": spec.compile_cache.push_interval_s},
        "results_uri": results_uri(output_uri(spec), job_name),
        "environment": dict(target.environment),
        "tags": dict(sorted(tags.items())),
    }
    if spec.instance.preferences:
        # What the container needs of each type SageMaker may select (entrypoints/ cannot ask
        # the catalog): launch.py adapts to the selected one's row.
        job["preferences"] = preferences.table(list(choices) if choices else preferences.choices(spec))
    if spec.backend == "batch":
        # A Batch job has no TensorBoardOutputConfig: launch.py uploads rank 0's event files here.
        job["tensorboard_uri"] = tensorboard_uri(output_uri(spec), job_name)
    if varied:
        job["varied"] = dict(varied)
    return job


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


def hyperparameters(spec: JobSpec, job_name: str) -> dict[str, str]:
    """The toolkit's hyperparameters, each value JSON-encoded as it decodes them. launch.py
    reads the SM_* variables through the toolkit's library, which takes the program's name,
    the region, the job name and the log level from these. No `sagemaker_submit_directory`:
    the code arrives as the `code` channel, unpacked by the container entrypoint."""
    values = {
        contract.HP_PROGRAM: contract.PROGRAM,
        contract.HP_REGION: spec.region,
        contract.HP_JOB_NAME: job_name,
        contract.HP_LOG_LEVEL: CONTAINER_LOG_LEVEL,
    }
    return {key: json.dumps(value) for key, value in values.items()}


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


def _output_prefix(spec: JobSpec, job: dict, name: str) -> str:
    """The output prefix resolved_job chose (read back so build() stays free of I/O)."""
    if spec.output.uri:
        return spec.output.uri.rstrip("/")
    return job["results_uri"].removesuffix(results_uri("", name))


def build(spec: JobSpec, *, job_name: str, source_uri: str, job: dict, target: catalog.Target | None = None,
          choices: list | tuple | None = None) -> dict:
    """The exact CreateTrainingJob request (pure; see the module docstring), from the spec's
    `target` (`catalog.resolve(spec)` when not given).

    Raises only for what cannot be expressed at all, which the doctor reports first with its
    location: an unknown image version (InputError) and spot without a max wait (SpecError at
    instance.max_wait_minutes, for callers that build without the doctor).
    """
    target = target or catalog.resolve(spec)
    out = _output_prefix(spec, job, job_name)
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
            # (the image's own entrypoint passes none on: see entrypoints/container.py).
            "ContainerEntrypoint": contract.container_entrypoint(),
        },
        "RoleArn": spec.role_arn or LOCAL_ROLE_ARN,
        "HyperParameters": hyperparameters(spec, job_name),
        "InputDataConfig": [code_channel(source_uri)],
        "Environment": dict(job["environment"]),
        "OutputDataConfig": {"S3OutputPath": out},
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
        request["CheckpointConfig"] = {"S3Uri": f"{out}/checkpoints/{job_name}", "LocalPath": CHECKPOINT_LOCAL_PATH}
    # Rank 0's TensorBoard scalars (entrypoints.scalars), which SageMaker uploads while the job runs.
    request["TensorBoardOutputConfig"] = {"LocalPath": TENSORBOARD_LOCAL_PATH,
                                          "S3OutputPath": tensorboard_uri(out, job_name)}
    if inst.keep_alive_minutes > 0:
        # A managed warm pool (botocore: ResourceConfig.KeepAlivePeriodInSeconds).
        request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = inst.keep_alive_minutes * 60
    if spec.max_retry_attempts > 0:
        request["RetryStrategy"] = {"MaximumRetryAttempts": spec.max_retry_attempts}
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


@dataclass(frozen=True)
class Prepared:
    """Everything a backend needs to run one job, computed once."""

    spec: JobSpec
    job_name: str
    spec_hash: str
    job: dict
    parts: sourcedir.Archive  # the archive as its parts: the code shared by every prepared job
    source_uri: str
    request: dict
    estimate: cost.Estimate
    findings: list[doctor.Finding]
    target: catalog.Target

    @property
    def archive(self) -> bytes:
        return self.parts.data()

    @property
    def archive_sha256(self) -> str:
        return self.parts.sha256


def check_contract(spec: JobSpec, request: dict, job_name: str) -> None:
    """SpecError (exit 2) for anything in the request, or in the S3 keys the job derives, that
    AWS would refuse (`aws_contract`): before any AWS call, each at the spec field it came from."""
    from orchestrator import aws_contract, provenance

    aws_contract.check_uris(spec, object_uris(spec))
    service, operation = ("batch", "SubmitJob") if spec.backend == "batch" else ("sagemaker", "CreateTrainingJob")
    found = aws_contract.violations(service, operation, request)
    aws_contract.raise_for(spec, found, lambda path: provenance.field(spec, operation, request, path),
                           what=f"the {operation} request")


def local_store(job: dict, name: str) -> str:
    """Make the job file `job` one of this machine's: results.json and the compile cache in its
    store, run by the local backend (results.json's backend), and one worker for runtime xla
    (torch-xla on PJRT's CPU device runs one process; the spec's workers, one per NeuronCore,
    need the NeuronCores). Returns the output prefix it uses."""
    store = f"file://{home()}/store"
    job["results_uri"] = results_uri(f"{store}/jobs", name)
    job["compile_cache"]["uri"] = f"{store}/compile-cache"
    if "tensorboard_uri" in job:
        job["tensorboard_uri"] = tensorboard_uri(f"{store}/jobs", name)
    job["backend"] = "local"
    if job["spec"]["training"]["runtime"] == "xla":
        job["workers_per_node"] = 1
    return f"{store}/jobs"


def prepare(source: JobSpec | doctor.Diagnosis, *, job_name: str | None = None,
            extra_tags: dict | None = None, varied: dict | None = None, local: bool = False) -> Prepared:
    """Job file, archive and request for a spec, on its diagnosis (deterministic).

    `source` is the spec, or the doctor's diagnosis of it (`doctor.diagnose`): the target, the
    cost estimate and the findings are then taken as they are, not computed again. `varied`:
    a sweep trial's values (`resolved_job`). Findings
    are returned, not raised: callers decide (`doctor.raise_for`). Only a spec too broken to
    build a request for raises, and then with the doctor's located errors; and a request AWS
    would refuse (`check_contract`: SpecError at the fields it came from).

    `local` (a batch spec run on this machine, `submit --local`): the same request, for the job
    `names.local_job_name(spec)`, with the archive, results.json and the compile cache in this
    machine's store (`local_store`); the local backend runs it.
    """
    diagnosis = source if isinstance(source, doctor.Diagnosis) else doctor.diagnose(source)
    spec, target = diagnosis.spec, diagnosis.target
    name = job_name
    if name is None:
        name = names.local_job_name(spec) if local else names.job_name(spec)
    names.check_job_name(name)
    job = resolved_job(spec, name, extra_tags, target, varied, diagnosis.choices)
    output = local_store(job, name) if local else _output_prefix(spec, job, name)
    archive = sourcedir.build_parts(job)
    src = source_uri(output, archive.sha256)
    try:
        if spec.backend == "batch":
            from orchestrator import batch_request

            request = batch_request.build(spec, job_name=name, source_uri=src, job=job,
                                          hyperparameters=hyperparameters(spec, name), target=target)
        else:
            request = build(spec, job_name=name, source_uri=src, job=job, target=target, choices=diagnosis.choices)
    except InputError:
        doctor.raise_for(spec, diagnosis.findings)
        raise
    # What AWS would refuse, once the doctor has nothing to say: its findings name the cause
    # better (an instance type SageMaker does not train on is also outside the model's enum).
    if not local and spec.backend != "local" and not doctor.errors(diagnosis.findings):
        check_contract(spec, request, name)
    return Prepared(spec=spec, job_name=name, spec_hash=job["spec_hash"], job=job, parts=archive,
                    source_uri=src, request=request, estimate=diagnosis.estimate,
                    findings=diagnosis.findings, target=target)

