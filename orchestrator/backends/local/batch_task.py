"""A batch spec run on this machine (`submit SPEC --local`): the spec's exact SubmitJob request
(`request.prepare(diagnosis, local=<the local backend>)`, at `locations.store`, as `<name>-<8 hex>-local`) run
as an ECS task would run it: `lay_out` writes the job folder the supervisor runs, one container
whose first process is the image's start script with the request's command; stopped as ECS
stops a task (`STOP_GRACE_S`). Details and what is not emulated: docs/ARCHITECTURE.md, "A
batch spec run here".
"""

from __future__ import annotations

import os
from pathlib import Path

from entrypoints.launcher import bootstrap
from entrypoints.shared import contract
from entrypoints.shared.atomic import write_json, write_text
from orchestrator.backends.local.layout import (
    LOG_DIR,
    LOOPBACK,
    free_port,
    host_names,
    stop_grace_s,
    write_plan_and_status,
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
    os.chmod(job_dir, 0o700)  # the request (and its environment) is this user's only
    write_json(job_dir / "request.json", request, mode=0o600)
    script = job_dir / START_SCRIPT_NAME
    write_text(script, START_SCRIPT)
    script.chmod(0o755)
    grace = stop_grace_s(STOP_GRACE_S)
    env = container_environment(request, root, runtime=prepared.job["spec"]["training"]["runtime"],
                                port=free_port())
    plan = {
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
    }
    write_plan_and_status(job_dir, prepared, plan, ledger=ledger, python=python, now=now,
                          instance_type=prepared.spec.instance.type, count=1,
                          output_uri=prepared.job["results_uri"])
