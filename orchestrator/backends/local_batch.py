"""A batch spec run on this machine (`submit SPEC --local`): the AWS Batch job as an ECS task
would run it, emulated by the local backend.

`request.prepare(diagnosis, local=True)` builds the spec's exact SubmitJob request
(`batch_request.build`, the same bootstrap command and environment as `plan` shows) for a job
of this machine: the job is named `<name>-<8 hex>-local` (the real job keeps `<name>-<8 hex>`:
the ledger holds both), the source archive goes to the local store
(`file://$ORCHESTRATOR_HOME/store/jobs/source/...`, which the bootstrap's fetch copies), and the
job file names the local store for results.json and the compile cache and says `"backend":
"local"` (results.json then says the job ran on this machine: no cloud price, no MFU, `local
CPU xN`). The spec itself, and so its hash, is the one the real submit sends.

`lay_out(prepared, job_dir, ...)` writes the job folder the local supervisor runs
(`local_runner`): one container, `algo-1/` standing in for its /opt/ml, whose first process
is the image's entrypoint with the request's command as its arguments, `bash -m
start_with_right_hostname.sh <command words>`. `START_SCRIPT` is a minimal equivalent of the
image's script (aws-neuron/deep-learning-containers common/start_with_right_hostname.sh at
2be9ed1, the ENTRYPOINT of pytorch/training/2.9.0/Dockerfile.neuronx): for anything but
`train` it runs `eval "$@"`, which is all a Batch job reaches; `train` (the SageMaker
toolkit's path, with its host-name library) is not emulated and exits 127. So the command's
quoting, its `exec`s and the bootstrap (lay out /opt/ml, fetch the archive, exec launch.py)
run as in the container, and launch.py becomes the first process.

The environment is containerOverrides.environment as sent, with what places the container
on this machine (each listed here, nothing else changed):
- paths private to a container are moved into the job folder: /opt/ml (the SM_* paths, and
  SAGEMAKER_BASE_DIR set to `algo-1/`, as for the training toolkit) and the Neuron compile
  cache the request names (`catalog.NEURON_CACHE_DIR`, under `algo-1/var-tmp/`);
- this machine's CPUs stand in for the instance: SM_NUM_CPUS is this machine's count,
  SM_NUM_NEURONS 0 (no NeuronCores here), PJRT_DEVICE=CPU for runtime xla; the workers per
  node stay the spec's for runtime native (the doctor's N004 holds: a local run of an
  inf2.xlarge spec runs its 2 workers as 2 CPU processes), and are 1 for runtime xla, whose
  PJRT CPU device runs one process (the job file says so: `request.local_store`);
- an ECS task has its own network namespace; here the rendezvous port is a free one on
  loopback (ORCHESTRATOR_MASTER_PORT) and GLOO_SOCKET_IFNAME defaults to lo;
- what Batch sets in every container: AWS_BATCH_JOB_ID (the job name here),
  AWS_BATCH_JOB_ATTEMPT (1), AWS_BATCH_JQ_NAME (the request's queue).
Nothing else: in particular no stop timeout; launch.py learns ECS's 30 s from the request
(`bootstrap.environment`), as the real job does.

Stop as ECS stops a task (TerminateJob, the attempt timeout): SIGTERM to the container's first
process, SIGKILL to all of it after the stop timeout: `STOP_GRACE_S`, 30 s, ECS's default for
EC2 container instances (Amazon ECS API Reference, StopTask and ContainerDefinition
stopTimeout: ECS_CONTAINER_STOP_TIMEOUT, 30 s when unset; the AWS Batch user guide's "Job
timeouts" says the same of a timed-out attempt); `local_layout.STOP_GRACE_ENV` shortens it, as
for SageMaker-style jobs. An attempt that outlives timeout.attemptDurationSeconds is stopped so
and ends failed, as Batch terminates it (`TIMEOUT_REASON`), not stopped. Nothing is uploaded
when the job ends (Batch uploads nothing: launch.py wrote results.json and pushed the compile
cache itself).

Not emulated: the image and its packages (this Python runs), the job queue and compute
environment (the job starts at once), retries (retryStrategy: one attempt), the job
definition's devices, limits and shared memory, the resource requirements, CloudWatch Logs
(the log is the job folder's), and the ECS task's network namespace.
"""

from __future__ import annotations

import os
from pathlib import Path

from entrypoints.launcher import bootstrap
from entrypoints.shared import contract
from entrypoints.shared.atomic import write_json, write_text
from orchestrator.backends.local_layout import (
    LOG_DIR,
    LOOPBACK,
    PLAN_FILE,
    STATUS_FILE,
    free_port,
    host_names,
    stop_grace_s,
)

# ECS's stop timeout (see the module docstring), the one the request tells launch.py.
STOP_GRACE_S = bootstrap.ECS_STOP_TIMEOUT_S
# The status reason of a job whose attempt timed out, as reported of Batch (not checked
# against a real job here).
TIMEOUT_REASON = "Job attempt duration exceeded timeout"
START_SCRIPT_NAME = "start_with_right_hostname.sh"
# A minimal equivalent of the image's entrypoint script (see the module docstring).
START_SCRIPT = """\
#!/usr/bin/env bash
# The local backend's stand-in for the PyTorch Neuron training image's entrypoint script: for
# anything but `train` it evaluates its arguments, as the image's script does.
if [[ "$1" = "train" ]]; then
    echo "start_with_right_hostname.sh: the SageMaker toolkit's train path is not emulated" >&2
    exit 127
else
    eval "$@"
fi
"""
VAR_TMP = "var-tmp"


def is_batch_request(request: dict) -> bool:
    """Whether `request` is a Batch SubmitJob request (else a CreateTrainingJob one)."""
    return "containerOverrides" in request


def container_environment(request: dict, root: Path, *, runtime: str, port: int) -> dict[str, str]:
    """The first process's environment: containerOverrides.environment as sent, with the
    placements the module docstring lists."""
    from orchestrator import catalog

    cache = str(root / VAR_TMP / Path(catalog.NEURON_CACHE_DIR).name)
    env: dict[str, str] = {"GLOO_SOCKET_IFNAME": "lo"}
    if runtime == "xla":
        env["PJRT_DEVICE"] = "CPU"
    for item in request["containerOverrides"]["environment"]:
        value = item["value"]
        if value == contract.OPT_ML or value.startswith(contract.OPT_ML + "/"):
            value = str(root) + value[len(contract.OPT_ML):]
        env[item["name"]] = value.replace(catalog.NEURON_CACHE_DIR, cache)
    env[contract.BASE_DIR_ENV] = str(root)
    env["SM_NUM_CPUS"] = str(os.cpu_count() or 1)
    env["SM_NUM_NEURONS"] = "0"
    env[contract.MASTER_ADDR_ENV] = LOOPBACK
    env["ORCHESTRATOR_MASTER_PORT"] = str(port)
    # No stop timeout is added: launch.py reads ECS's from the request's own environment, as
    # in the real container (`grace`, the supervisor's SIGKILL delay, is this machine's).
    env["AWS_BATCH_JOB_ID"] = request["jobName"]
    env["AWS_BATCH_JOB_ATTEMPT"] = "1"
    env["AWS_BATCH_JQ_NAME"] = request["jobQueue"]
    return env


def lay_out(prepared, job_dir: Path, *, ledger: Path, python: str, now: float) -> None:
    """Write the folder of the batch job `prepared` describes into `job_dir` (which exists,
    empty): `request.json`, the start script, an empty `algo-1/` (the bootstrap lays out its
    /opt/ml), the supervisor's `plan.json` and a pending `status.json` created at `now`."""
    request = prepared.request
    host = host_names(1)[0]
    root = job_dir / host
    root.mkdir()
    (job_dir / LOG_DIR).mkdir()
    write_json(job_dir / "request.json", request)
    script = job_dir / START_SCRIPT_NAME
    write_text(script, START_SCRIPT)
    script.chmod(0o755)
    grace = stop_grace_s(STOP_GRACE_S)
    env = container_environment(request, root, runtime=prepared.job["spec"]["training"]["runtime"],
                                port=free_port())
    plan = {
        "job_name": prepared.job_name,
        "hosts": [host],
        "host": {host: {"root": str(root), "env": env}},
        # The image's ENTRYPOINT with SubmitJob's command as its arguments (Docker's rule).
        "entrypoint": ["bash", "-m", str(script), *request["containerOverrides"]["command"]],
        "stop_grace_s": grace,
        "channels": {},  # the bootstrap fetches the source archive itself
        "output_prefix": None,  # Batch uploads nothing
        "tensorboard": None,
        "max_run_s": request["timeout"]["attemptDurationSeconds"],
        "overtime_reason": f"{TIMEOUT_REASON} ({request['timeout']['attemptDurationSeconds']} s)",
        "ledger": str(ledger),
        "python": python,
        "pythonpath": os.environ.get("PYTHONPATH", ""),
    }
    write_json(job_dir / PLAN_FILE, plan)
    write_json(job_dir / STATUS_FILE, {
        "job_name": prepared.job_name, "state": "pending", "secondary": "Starting", "failure_reason": None,
        "created": now, "started": None, "ended": None, "pid": None, "hosts": {},
        "instance_type": prepared.spec.instance.type, "instance_count": 1,
        "output_uri": prepared.job["results_uri"], "tags": prepared.job.get("tags") or {},
    })
