"""The local backend's job folder: its layout, the files in it, and what each host gets.

One folder per job under `ORCHESTRATOR_HOME/jobs/<job>/` (docs/USAGE.md, "Running locally" shows the
tree): `plan.json` (what the supervisor runs: hosts, environments, entrypoint, channels),
`status.json` (what `status` reads: state, secondary, failure reason, times, pids; written
atomically, as every file here, by `entrypoints.shared.atomic`; a few hundred bytes), `supervisor.pid`, `stop-requested` (a stop was asked),
`logs/` (each host's output and the merged `all.log`), and one /opt/ml-like tree per host,
`algo-N/`, with SageMaker's config files (`host_tree`). The backend (`local.py`) lays the
folder out; the supervisor (`supervisor.py`) runs it.
"""

from __future__ import annotations

import json
import os
import socket
import tarfile
from pathlib import Path

from entrypoints.shared import contract
from entrypoints.shared.atomic import write_json
from orchestrator.backends.local import capacity as local_capacity
from orchestrator.env_seconds import env_seconds
from orchestrator.errors import InputError
from orchestrator.lifecycle import REPORTED

STATUS_FILE = "status.json"
# status.json's format: written into every status file ("format"); a file without one is of
# format 1 (written before the field). A newer format is refused by name (`NewerStatus`), not
# read as damaged: raise this with any change an earlier reader would misread.
STATUS_FORMAT = 1
MAX_STATUS_BYTES = 1 << 20  # a status file is a few hundred bytes
PLAN_FILE = "plan.json"
PID_FILE = "supervisor.pid"
# How long a laid-out job may wait for its supervisor's pid before it counts as orphaned: more
# than submit's own wait for the supervisor to start (60 s), on a loaded machine.
START_GRACE_S = 120.0
STOP_FILE = "stop-requested"
LOG_DIR = "logs"
MERGED_LOG = "all.log"
SUPERVISOR_LOG = "supervisor.log"
RUNNER_MODULE = "orchestrator.backends.local.supervisor"
LOOPBACK = "127.0.0.1"
# SageMaker's time between the SIGTERM to a container's first process and the SIGKILL to all.
STOP_GRACE_S = 120.0
STOP_GRACE_ENV = "ORCHESTRATOR_LOCAL_STOP_GRACE_S"


def host_names(count: int) -> list[str]:
    return [f"algo-{i}" for i in range(1, count + 1)]


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on now (the rendezvous binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def read_json(path: Path) -> dict | None:
    """The JSON in `path` as it is (the supervisor's reader; `status`, `logs` and `stop` check
    status.json through `_parse_status`); None when there is no such file. A file that is not
    JSON raises ValueError."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


class NewerStatus(InputError):
    """A status.json in a format above STATUS_FORMAT: written by a newer orchestrator (exit 2)."""

    def __init__(self, path: Path, found: int):
        super().__init__(f"{path}: the local job's status file is in format {found}, written by a newer version of "
                         f"the orchestrator; this one reads formats up to {STATUS_FORMAT}",
                         hint="upgrade this orchestrator (pip install -U, or the checkout that wrote it) to read it")
        self.found = found


def status_format(data: dict) -> int:
    """A status.json's format: its "format", 1 where there is none (written before the field)."""
    found = data.get("format", 1)
    return found if isinstance(found, int) and not isinstance(found, bool) else 1


def parse_status(text: str) -> tuple[dict | None, str | None]:
    """(status, None) for a status.json as the backend and its supervisor write it, else
    (None, why it is not one). A status of a newer format than STATUS_FORMAT is returned as it
    is, unchecked: the caller refuses it by name (`status_format`)."""
    if not text.strip():
        return None, "it is empty"
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, f"not JSON ({exc})"
    if not isinstance(data, dict):
        return None, f"a JSON {_JSON_TYPES.get(type(data), type(data).__name__)}, not an object"
    if status_format(data) > STATUS_FORMAT:
        return data, None
    if data.get("state") not in REPORTED:
        return None, f"state {data.get('state')!r} is none of {', '.join(REPORTED)}"
    for field in ("created", "started", "ended"):
        value = data.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return None, f"{field} {value!r} is not a time in seconds"
    pid = data.get("pid")
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int)):
        return None, f"pid {pid!r} is not a process id"
    hosts = data.get("hosts")
    if hosts is not None and not (isinstance(hosts, dict) and all(isinstance(h, dict) for h in hosts.values())):
        return None, "hosts is not an object of host objects"
    return data, None


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def channels_of(request: dict) -> dict[str, str]:
    """Channel name -> source URI from the request's InputDataConfig."""
    return {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in request.get("InputDataConfig") or []}


def output_prefix(request: dict, job_name: str) -> str:
    """Where SageMaker puts the job's model.tar.gz and output.tar.gz."""
    return f"{request['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{job_name}/output"


def host_tree(root: Path, request: dict, host: str, hosts: list[str], instance_type: str) -> None:
    """Create one host's /opt/ml-like tree under `root` with SageMaker's config files, on a host
    of `instance_type` (the selected one, `capacity.selected`)."""
    for rel in (contract.MODEL_DIR, contract.OUTPUT_DATA_DIR, contract.CHECKPOINT_DIR, contract.CODE_DIR,
                "input/config", contract.INPUT_DATA):
        (root / rel).mkdir(parents=True, exist_ok=True)
    write_json(root / contract.HYPERPARAMETERS, dict(request.get("HyperParameters") or {}))
    write_json(root / contract.RESOURCE_CONFIG, {
        "current_host": host, "hosts": hosts, "network_interface_name": "lo",
        "current_instance_type": instance_type, "current_group_name": "homogeneousCluster",
        "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": instance_type,
                             "hosts": hosts}],
    })
    channels = {name: {"S3DistributionType": "FullyReplicated", "TrainingInputMode": "File",
                       "RecordWrapperType": "None"} for name in channels_of(request)}
    write_json(root / "input/config/inputdataconfig.json", channels)
    for name in channels:
        (root / contract.INPUT_DATA / name).mkdir(parents=True, exist_ok=True)


def host_environment(root: Path, request: dict, host: str, hosts: list[str], port: int, runtime: str,
                     stop_grace_s: float) -> dict[str, str]:
    """What the platform gives a host's first process, plus the loopback rendezvous.

    The request's Environment, then what SageMaker sets itself (TRAINING_JOB_NAME) and what
    places the container on this machine: SAGEMAKER_BASE_DIR (the host's tree stands in for
    /opt/ml), SM_STUDIO_LOCAL_MODE (host names do not resolve here), the rendezvous on
    loopback, and SM_NUM_CPUS, the host's share of this machine's CPUs (the hosts share it). The
    SM_* variables themselves are launch.py's to compute, as in the container.
    GLOO_SOCKET_IFNAME and PJRT_DEVICE are defaults the user's Environment may override.
    """
    env: dict[str, str] = {"GLOO_SOCKET_IFNAME": "lo"}
    if runtime == "xla":
        env["PJRT_DEVICE"] = "CPU"
    env.update({k: str(v) for k, v in (request.get("Environment") or {}).items()})
    env[contract.BASE_DIR_ENV] = str(root)
    env["SM_STUDIO_LOCAL_MODE"] = "true"
    env["SM_NUM_CPUS"] = str(max(1, (os.cpu_count() or 1) // len(hosts)))
    env[contract.MASTER_ADDR_ENV] = LOOPBACK
    env["ORCHESTRATOR_MASTER_PORT"] = str(port)
    env["ORCHESTRATOR_STOP_GRACE_S"] = f"{stop_grace_s:g}"
    env["TRAINING_JOB_NAME"] = request["TrainingJobName"]
    return env


def stop_grace_s(default: float = STOP_GRACE_S) -> float:
    """`default` (SageMaker's 120 s; ECS's 30 s for a batch job), or `STOP_GRACE_ENV` (a
    positive number of seconds) when set."""
    return env_seconds(STOP_GRACE_ENV, default, example=20)


def lay_out(prepared, job_dir: Path, *, ledger: Path, python: str, now: float) -> None:
    """Write the folder of the job `prepared` describes into `job_dir` (which exists, empty):
    every host's tree, `request.json`, the supervisor's `plan.json`, and a pending
    `status.json` created at `now`."""
    request = prepared.request
    instance_type, count = local_capacity.selected(request["ResourceConfig"])
    hosts = host_names(count)
    runtime = prepared.job["spec"]["training"]["runtime"]
    grace = stop_grace_s()
    port = free_port()
    os.chmod(job_dir, 0o700)  # the request (and its environment) is this user's only
    (job_dir / LOG_DIR).mkdir(mode=0o700)
    write_json(job_dir / "request.json", request, mode=0o600)
    plan_hosts = {}
    for host in hosts:
        root = job_dir / host
        host_tree(root, request, host, hosts, instance_type)
        plan_hosts[host] = {"root": str(root),
                            "env": host_environment(root, request, host, hosts, port, runtime, grace)}
    algorithm = request["AlgorithmSpecification"]
    plan = {
        "hosts": hosts,
        "host": plan_hosts,
        "entrypoint": list(algorithm["ContainerEntrypoint"]) + list(algorithm.get("ContainerArguments") or []),
        "stop_grace_s": grace,
        "channels": channels_of(request),
        "output_prefix": output_prefix(request, prepared.job_name),
        "tensorboard": tensorboard_of(request),
        "max_run_s": request.get("StoppingCondition", {}).get("MaxRuntimeInSeconds"),
    }
    write_plan_and_status(job_dir, prepared, plan, ledger=ledger, python=python, now=now,
                          instance_type=instance_type, count=count, output_uri=f"{plan['output_prefix']}/model.tar.gz")


def write_plan_and_status(job_dir: Path, prepared, plan: dict, *, ledger: Path, python: str, now: float,
                          instance_type: str, count: int, output_uri: str | None) -> None:
    """Write the supervisor's `plan.json` (`plan`: what the job runs, with what every local
    job's plan holds: its name, the ledger, this Python and its PYTHONPATH) and a pending
    `status.json` created at `now`: the one writer of both for a SageMaker and a batch layout."""
    plan = {"job_name": prepared.job_name, **plan,
            "ledger": str(ledger), "python": python, "pythonpath": os.environ.get("PYTHONPATH", "")}
    write_json(job_dir / PLAN_FILE, plan, mode=0o600)  # each host's environment
    write_json(job_dir / STATUS_FILE, {
        "format": STATUS_FORMAT, "job_name": prepared.job_name, "state": "pending", "secondary": "Starting", "failure_reason": None,
        "created": now, "started": None, "ended": None, "pid": None, "hosts": {},
        "instance_type": instance_type, "instance_count": count,
        "output_uri": output_uri, "tags": prepared.job.get("tags") or {},
        # The job's record of results (what `results` reads), which `status` shows too.
        "results_uri": prepared.job.get("results_uri"),
    })


def tensorboard_of(request: dict) -> dict | None:
    """{"local": the LocalPath relative to the /opt/ml root, "uri": S3OutputPath} of the
    request's TensorBoardOutputConfig; None without one (or a LocalPath outside /opt/ml)."""
    config = request.get("TensorBoardOutputConfig")
    if not config:
        return None
    local = config.get("LocalPath") or f"{contract.OPT_ML}/{contract.TENSORBOARD_DIR}"
    if not local.startswith(contract.OPT_ML + "/"):
        return None
    return {"local": local[len(contract.OPT_ML) + 1:], "uri": config["S3OutputPath"].rstrip("/")}


def pack_dir(source: Path, target: Path) -> None:
    """`target` = a gzip tarball of the contents of `source` (names relative to it)."""
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(source.rglob("*")):
            tar.add(path, arcname=path.relative_to(source).as_posix(), recursive=False)
