"""launch.py as the container's first process: what the image's start script and the training
toolkit did before, done by the process that receives SageMaker's stop signal (why:
docs/ARCHITECTURE.md, "One host: inside the container").

`adopt_sm_environment()` sets the SM_* variables (the toolkit's own when it is installed, else
`contract.sm_environment`; a variable already set wins); `prepare()` builds and preloads the
image's host-name fix for torchrun, installs `requirements.txt` from the code directory and,
with several hosts, waits until every host resolves; `Reaper` reaps orphaned zombies that are
not launch.py's own. What was done is recorded in results.json's `container`. Stdlib only (the
toolkit is imported when present); nothing here imports `orchestrator`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from entrypoints.shared import contract

# Set to "off" to compute the SM_* variables and install requirements without the toolkit (its
# fallback, tested on its own); anything else uses the toolkit when it can be imported.
TOOLKIT_ENV = "ORCHESTRATOR_SM_TOOLKIT"
# The start script's source of the gethostname() override (its path in the training image).
CHANGEHOSTNAME_C_ENV = "ORCHESTRATOR_CHANGEHOSTNAME_C"
CHANGEHOSTNAME_C = "/changehostname.c"
# How long the hosts' names may take to resolve (the toolkit retries for 15 minutes).
DNS_WAIT_S = 15 * 60
PR_SET_CHILD_SUBREAPER = 36


@dataclass
class Setup:
    """What the container entrypoint set up, for results.json's `container` (docs/RESULTS.md)."""

    entrypoint: bool = True
    sm_environment: str = "emulated"  # "sagemaker-training <version>" or "emulated"
    hostname: str | None = None  # the name gethostname() returns to the training processes
    requirements: str = "none"  # "installed" | "none" (no requirements.txt)
    warnings: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # for torchrun only (LD_PRELOAD)

    def record(self) -> dict:
        out = asdict(self)
        for internal in ("env", "warnings"):  # warnings go to results.json's own list
            out.pop(internal)
        return out


def base_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("SAGEMAKER_BASE_DIR") or contract.OPT_ML)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def _decoded(raw: Mapping[str, object]) -> dict[str, object]:
    """Hyperparameter values as the toolkit decodes them: JSON when they parse, else the text."""
    out: dict[str, object] = {}
    for key, value in raw.items():
        try:
            out[key] = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            out[key] = value
    return out


def job_name_hyperparameter(root: Path | None = None) -> str | None:
    """The job's name as its request's hyperparameters give it (`contract.HP_JOB_NAME`), or None
    outside a SageMaker container."""
    config = (base_dir() if root is None else root) / "input" / "config"
    value = _decoded(_read_json(config / "hyperparameters.json")).get(contract.HP_JOB_NAME)
    return value if isinstance(value, str) else None


def emulated_sm_environment(root: Path) -> dict[str, str]:
    """The SM_* variables from the container's config files, without the toolkit."""
    config = root / "input" / "config"
    resource = _read_json(config / "resourceconfig.json")
    hosts = list(resource.get("hosts") or ["algo-1"])
    current = str(resource.get("current_host") or hosts[0])
    channels = sorted(_read_json(config / "inputdataconfig.json"))
    # The toolkit keeps its own `sagemaker_*` hyperparameters out of SM_HPS and SM_HP_*.
    hyperparameters = {k: v for k, v in _decoded(_read_json(config / "hyperparameters.json")).items()
                       if not k.startswith("sagemaker_")}
    env = contract.sm_environment(root, hosts, current, str(resource.get("current_instance_type") or ""),
                                  hyperparameters, channels, num_neurons=0)
    env["SM_NETWORK_INTERFACE_NAME"] = str(resource.get("network_interface_name") or "eth0")
    env["SM_RESOURCE_CONFIG"] = json.dumps(resource)
    return env


def toolkit_sm_environment() -> tuple[dict[str, str], str] | None:
    """(SM_* variables, "sagemaker-training <version>") from the installed toolkit, or None."""
    if os.environ.get(TOOLKIT_ENV, "").lower() == "off":
        return None
    try:
        from importlib import metadata

        from sagemaker_training import environment
    except ImportError:
        return None
    values = environment.Environment().to_env_vars()
    return {k: str(v) for k, v in values.items()}, f"sagemaker-training {metadata.version('sagemaker-training')}"


def install_requirements(code_dir: Path, toolkit: bool) -> str:
    """pip-install `code_dir/requirements.txt` as the toolkit does; "installed" or "none".
    Raises RuntimeError naming the failure."""
    if not (code_dir / "requirements.txt").is_file():
        return "none"
    if toolkit:
        from sagemaker_training import errors, modules

        try:
            modules.install_requirements(str(code_dir), capture_error=False)
        except errors.ClientError as exc:  # InstallRequirementsError and its kin
            raise RuntimeError(f"requirements.txt could not be installed: {exc}") from None
        return "installed"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-r", "requirements.txt"], cwd=str(code_dir),
                          stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"requirements.txt could not be installed: pip exited with code {done.returncode}")
    return "installed"


def hostname_library(source: Path, host: str, into: Path) -> Path:
    """The start script's gethostname() override for `host`: the image's C file with its
    placeholder replaced by the host's name, built into a shared library in `into`.
    Raises RuntimeError (no compiler, a compile error)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("no gcc to build the gethostname() override")
    code = source.read_text().replace("PLACEHOLDER_HOSTNAME", json.dumps(host))
    c_file, obj, lib = into / "changehostname.c", into / "changehostname.o", into / "libchangehostname.so"
    c_file.write_text(code)
    for command in ([gcc, "-o", str(obj), "-c", "-fPIC", "-Wall", str(c_file)],
                    [gcc, "-o", str(lib), "-shared", "-export-dynamic", str(obj), "-ldl"]):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"building the gethostname() override failed: {done.stderr.strip()[-300:]}")
    return lib


def wait_for_hosts(hosts: list[str], timeout_s: float = DNS_WAIT_S,
                   resolve: Callable[[str], object] = socket.gethostbyname,
                   sleep: Callable[[float], None] = time.sleep) -> None:
    """Until every host name resolves (the toolkit's wait as the cluster comes up); RuntimeError
    naming the host that never did."""
    deadline = time.monotonic() + timeout_s
    for host in hosts:
        delay = 0.1
        while True:
            try:
                resolve(host)
                break
            except OSError:
                if time.monotonic() + delay > deadline:
                    raise RuntimeError(f"host {host} did not resolve within {timeout_s:.0f} s") from None
                sleep(delay)
                delay = min(30.0, delay * 2)


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux), as PID 1 is."""
    if os.getpid() == 1:
        return True
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def adopt_sm_environment(log: Callable[[str], None]) -> Setup:
    """Steps 1 and 5 of the module docstring: the SM_* variables into os.environ (what is set
    already wins), and this process as the reaper of orphans."""
    done = Setup()
    become_subreaper()
    found = toolkit_sm_environment()
    if found is not None:
        values, done.sm_environment = found
    else:
        values = emulated_sm_environment(base_dir())
    for key, value in values.items():
        os.environ.setdefault(key, value)
    log(f"container entrypoint: SM_* variables from {done.sm_environment}")
    return done


def prepare(done: Setup, ctr: contract.Contract, log: Callable[[str], None]) -> None:
    """Steps 2 to 4 of the module docstring, recorded in `done`. Raises RuntimeError when the
    job cannot run (requirements that do not install, hosts that never resolve)."""
    source = Path(os.environ.get(CHANGEHOSTNAME_C_ENV) or CHANGEHOSTNAME_C)
    if source.is_file():
        try:
            lib = hostname_library(source, ctr.current_host, Path(tempfile.mkdtemp(prefix="orchestrator-hostname-")))
            done.env["LD_PRELOAD"] = " ".join(p for p in (str(lib), os.environ.get("LD_PRELOAD", "")) if p)
            done.hostname = ctr.current_host
        except (OSError, RuntimeError) as exc:
            done.warnings.append(f"host name not set: {exc}")
            log(f"WARNING {done.warnings[-1]}")
    done.requirements = install_requirements(contract_code_dir(), toolkit=done.sm_environment != "emulated")
    if ctr.num_nodes > 1 and os.environ.get("SM_STUDIO_LOCAL_MODE", "").lower() != "true":
        wait_for_hosts(list(ctr.hosts))
    log(f"container entrypoint: requirements {done.requirements}, host name "
        f"{done.hostname or 'as the platform set it'}")


def contract_code_dir() -> Path:
    """The code directory: the one holding the `entrypoints` package (the entrypoint unpacks it
    there), two folders above this module."""
    return Path(__file__).resolve().parents[2]


# --- processes -------------------------------------------------------------------------------


def _children_table() -> list[tuple[int, int, str]]:
    """(pid, ppid, state) of every process, from /proc (Linux); empty elsewhere."""
    rows = []
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        rows.append((int(entry.name), int(fields[1]), fields[0]))
    return rows


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (read once, before any is signalled)."""
    children: dict[int, list[int]] = {}
    for child, parent, _ in _children_table():
        children.setdefault(parent, []).append(child)
    found, stack = [pid], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and its descendants (torchrun's workers sit in sessions of their own)."""
    for target in descendants(pid):
        try:
            os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def reap_orphans(keep: set[int]) -> list[int]:
    """Wait for this process's zombie children except `keep` (children it waits for itself);
    the pids reaped."""
    me = os.getpid()
    reaped = []
    for pid, parent, state in _children_table():
        if parent == me and state == "Z" and pid not in keep:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped.append(pid)
            except ChildProcessError:
                pass
    return reaped


class Reaper(threading.Thread):
    """Reaps orphaned zombies every `interval_s` while torchrun runs (see `reap_orphans`)."""

    def __init__(self, keep: Callable[[], set[int]], interval_s: float = 1.0) -> None:
        super().__init__(name="reaper", daemon=True)
        self.keep = keep
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.reaped: list[int] = []

    def run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            self.reaped += reap_orphans(self.keep())

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join()
        self.reaped += reap_orphans(self.keep())
