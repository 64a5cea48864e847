"""Doctor rules of the batch backend (Inferentia2 through AWS Batch), N040-N049: an inf2 type
the stack has a queue for (N040), one instance (N041), spot only with retries (N042), no
SageMaker-only settings (N043, N044), the retry limit of Batch (N045), the Neuron runtime on
the NeuronCores (N046), checkpoints that no one copies to S3 (N047), the job definition's image
(N048) and data that no one downloads (N049).

Why one instance and one job per instance: Batch places jobs by vCPU and memory only, and a
job definition's `/dev/neuronN` devices cannot be overridden per job, so the stack keeps one
compute environment and queue per inf2 size and one job definition per chip count; inf2 has
no EFA (the Neuron docs' Inf2 architecture page lists none), so there is no multi-node inf2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import catalog
from orchestrator.doctor.finding import Finding

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

# botocore's batch model, RetryStrategy.attempts: "between 1 and 10 attempts".
MAX_ATTEMPTS = 10


def check(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """Every batch rule on `spec` (a spec whose backend is batch)."""
    return [*_instance(spec, target), *_spot(spec), *_sagemaker_only(spec), *_retries(spec), *_runtime(spec, target),
            *_checkpoints(spec), *_image(spec), *_data(spec)]


def _types() -> str:
    return ", ".join(catalog.batch_instance_types())


def _instance(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """N040: a type the batch backend runs; N041: one instance."""
    itype = spec.instance.type
    out = []
    if target.facts is None or not target.facts.batch:
        if itype.startswith("ml.") and catalog.instance(itype.removeprefix("ml.")) is not None \
                and catalog.instance(itype.removeprefix("ml.")).batch:
            why, fix = (f"{itype} is a SageMaker name; AWS Batch runs the EC2 type",
                        f"set instance.type: {itype.removeprefix('ml.')}")
        elif target.family.startswith("trn"):
            why, fix = (f"{itype} is a Trainium type, which the orchestrator trains on through SageMaker",
                        f"set backend: sagemaker (with instance.type ml.{itype.removeprefix('ml.')}), or an inf2 type")
        else:
            why, fix = (f"the batch backend runs Inferentia2 types only, not {itype}",
                        "set instance.type: inf2.xlarge")
        out.append(Finding("N040-batch-instance-type", "error",
                           f"{why} (the stack has a queue for each of {_types()})", fix, "instance.type"))
    if spec.instance.count > 1:
        out.append(Finding(
            "N041-batch-single-instance", "error",
            f"count is {spec.instance.count}, but a batch job runs on one instance: inf2 has no EFA for "
            "multi-node training",
            "set instance.count: 1 (inf2.48xlarge has 24 NeuronCores), or train multi-node on ml.trn1.32xlarge "
            "through SageMaker", "instance.count"))
    return out


def _spot(spec: JobSpec) -> list[Finding]:
    """N042: spot only with retries, since a reclaimed instance fails the attempt."""
    if spec.instance.spot and spec.max_retry_attempts < 1:
        return [Finding(
            "N042-batch-spot-retries", "error",
            "spot on AWS Batch needs retries: a spot reclaim ends the attempt (\"Host EC2 ... terminated\"), and "
            "without a retry the job fails",
            "set max_retry_attempts to at least 1 (each retry starts again from the last pushed compile cache)",
            "max_retry_attempts")]
    return []


def _sagemaker_only(spec: JobSpec) -> list[Finding]:
    """N043: max_wait_minutes; N044: LNC and volume size (trn-only, or set by the stack)."""
    out = []
    if spec.instance.max_wait_minutes is not None:
        out.append(Finding(
            "N043-batch-max-wait", "error",
            "max_wait_minutes is a SageMaker managed-spot setting; on AWS Batch how long a job may wait is the "
            "job queue's time limit (the stack's), and each attempt runs at most max_run_minutes",
            "remove instance.max_wait_minutes", "instance.max_wait_minutes"))
    if spec.instance.lnc is not None:
        out.append(Finding(
            "N044-batch-trn-option", "error",
            "instance.lnc is a Trainium2 setting; Inferentia2 exposes each NeuronCore-v2 as it is",
            "remove instance.lnc", "instance.lnc"))
    default = type(spec.instance).model_fields["volume_gb"].default
    if spec.instance.volume_gb != default:
        out.append(Finding(
            "N044-batch-trn-option", "error",
            f"instance.volume_gb ({spec.instance.volume_gb}) cannot be set per job on AWS Batch: the stack's "
            "launch template sizes the root volume of every instance",
            "remove instance.volume_gb (change the launch template in infra/stack.yaml instead)",
            "instance.volume_gb"))
    return out


def _retries(spec: JobSpec) -> list[Finding]:
    """N045: at most MAX_ATTEMPTS attempts in all."""
    if 1 + spec.max_retry_attempts > MAX_ATTEMPTS:
        return [Finding(
            "N045-batch-retry-limit", "error",
            f"max_retry_attempts {spec.max_retry_attempts} makes {1 + spec.max_retry_attempts} attempts; AWS Batch "
            f"allows at most {MAX_ATTEMPTS} (RetryStrategy.attempts)",
            f"set max_retry_attempts to at most {MAX_ATTEMPTS - 1}", "max_retry_attempts")]
    return []


def _runtime(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """N046: the native runtime leaves the NeuronCores idle."""
    if spec.training.runtime == "native" and target.facts is not None and target.facts.batch:
        return [Finding(
            "N046-batch-native-runtime", "warning",
            f"runtime native on {spec.instance.type} runs eager PyTorch on the host CPUs: its NeuronCores stay idle",
            "use runtime: xla", "training.runtime")]
    return []


def _checkpoints(spec: JobSpec) -> list[Finding]:
    """N047: checkpoints stay on the instance: nothing copies /opt/ml/checkpoints to S3 on Batch."""
    if spec.training.checkpoint_every > 0:
        return [Finding(
            "N047-batch-checkpoints-local", "warning",
            "on AWS Batch nothing copies /opt/ml/checkpoints to S3 (SageMaker's CheckpointConfig does): the "
            "checkpoints are lost with the instance, and a retried attempt starts from step 0",
            "set training.checkpoint_every: 0, or use the sagemaker backend to resume after interruptions",
            "training.checkpoint_every")]
    return []


def _image(spec: JobSpec) -> list[Finding]:
    """N048: the image is the job definition's (SubmitJob cannot override it)."""
    default = catalog.default_sdk()
    if spec.image.uri is not None or (spec.image.neuron_sdk or default) != default:
        what = f"image.uri {spec.image.uri}" if spec.image.uri else f"image.neuron_sdk {spec.image.neuron_sdk}"
        return [Finding(
            "N048-batch-image-fixed", "error",
            f"{what}: a batch job runs its job definition's image (the stack's, the catalog's image for Neuron SDK "
            f"{default}); SubmitJob cannot override the image",
            "remove image.uri and image.neuron_sdk (or change the job definitions' image in infra/stack.yaml)",
            "image.uri" if spec.image.uri else "image.neuron_sdk")]
    return []


def _data(spec: JobSpec) -> list[Finding]:
    """N049: nothing downloads an s3:// data source on Batch (SageMaker's train channel does)."""
    if spec.data.source != "synthetic":
        return [Finding(
            "N049-batch-data-source", "error",
            f"data.source {spec.data.source}: on AWS Batch no input channel downloads it (SageMaker's does), and "
            "the batch bootstrap fetches the code only",
            "use data.source: synthetic on the batch backend, or the sagemaker backend for S3 data",
            "data.source")]
    return []
