"""The exact AWS Batch `SubmitJob` request of a batch spec (botocore's batch 2016-08-10 model:
jobName, jobQueue, jobDefinition, containerOverrides, retryStrategy, timeout, tags,
propagateTags), built from the same job file and source archive as a SageMaker request.

Contract: `build(...)` is pure and deterministic; `request.prepare` calls it for a spec whose
backend is batch, `plan` prints it and the batch backend sends it as it is.

- Queue and job definition: batch.job_queue / batch.job_definition, else the stack's names
  (`queue_name`, `job_definition_name`): one queue per inf2 size (and per spot or on-demand),
  one job definition per chip count (its /dev/neuronN devices).
- containerOverrides: the bootstrap command (`entrypoints.launcher.bootstrap`: lays out /opt/ml,
  fetches the source archive, runs launch.py), the environment (the job's own, the SM_*
  contract variables, the hyperparameters and where the archive is), and the whole instance's
  vCPUs and memory (`resources`), so that Batch places one job per instance.
- retryStrategy: 1 + max_retry_attempts attempts, retried only when the host went away (a spot
  reclaim or an instance failure: status reason "Host EC2 (instance i-...) terminated."),
  ended on any other exit (a training error would fail again).
- timeout: max_run_minutes per attempt (attemptDurationSeconds).
- tags: the job's tags (the user's and the orchestrator's), propagated to the ECS task.
"""

from __future__ import annotations

from entrypoints.launcher import bootstrap
from orchestrator import catalog
from orchestrator.spec import JobSpec

# The status reason Batch gives an attempt whose instance went away (AWS Batch user guide,
# "Automated job retries": evaluateOnExit with onStatusReason "Host EC2*").
HOST_TERMINATED = "Host EC2*"
# The ECS agent and the OS keep part of an instance's memory: the job asks for this share of
# it (an assumption: a job asking for more than the instance registers stays RUNNABLE).
MEMORY_SHARE = 0.9


def queue_name(spec: JobSpec) -> str:
    """batch.job_queue, else the stack's queue for the type: <stack>-inf2-xlarge[-spot]."""
    if spec.batch.job_queue:
        return spec.batch.job_queue
    suffix = "-spot" if spec.instance.spot else ""
    return f"{spec.batch.stack}-{spec.instance.type.replace('.', '-')}{suffix}"


def job_definition_name(spec: JobSpec, target: catalog.Target) -> str:
    """batch.job_definition, else the stack's for the type's chips: <stack>-neuron-<chips>chip."""
    if spec.batch.job_definition:
        return spec.batch.job_definition
    chips = target.facts.chips if target.facts else 1
    return f"{spec.batch.stack}-neuron-{chips}chip"


def resources(target: catalog.Target) -> list[dict]:
    """The whole instance: every vCPU and MEMORY_SHARE of its memory, in MiB."""
    facts = target.facts
    if facts is None:
        return []
    memory = int(facts.host_memory_gib * 1024 * MEMORY_SHARE)
    return [{"type": "VCPU", "value": str(facts.vcpus)}, {"type": "MEMORY", "value": str(memory)}]


def build(spec: JobSpec, *, job_name: str, source_uri: str, job: dict, hyperparameters: dict[str, str],
          target: catalog.Target) -> dict:
    """The SubmitJob request (see the module docstring)."""
    facts = target.facts
    env = dict(job["environment"])
    env.update(bootstrap.environment(instance_type=spec.instance.type, neuron_cores=facts.neuron_cores if facts else 0,
                                     vcpus=facts.vcpus if facts else 0, hyperparameters=hyperparameters,
                                     code_uri=source_uri, region=spec.region))
    overrides: dict = {
        "command": bootstrap.command(),
        "environment": [{"name": key, "value": value} for key, value in sorted(env.items())],
    }
    if resources(target):
        overrides["resourceRequirements"] = resources(target)
    return {
        "jobName": job_name,
        "jobQueue": queue_name(spec),
        "jobDefinition": job_definition_name(spec, target),
        "containerOverrides": overrides,
        "retryStrategy": {
            "attempts": 1 + spec.max_retry_attempts,
            "evaluateOnExit": [
                {"onStatusReason": HOST_TERMINATED, "action": "RETRY"},
                {"onReason": "*", "action": "EXIT"},
            ],
        },
        "timeout": {"attemptDurationSeconds": spec.max_run_minutes * 60},
        "tags": dict(sorted(job["tags"].items())),
        "propagateTags": True,
    }
