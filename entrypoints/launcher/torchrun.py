"""torchrun for one host: its command line, and running it with SageMaker's stop passed on.

Static rendezvous at the first host: nnodes and node rank from SM_HOSTS and SM_CURRENT_HOST,
master address from the contract, port `contract.MASTER_PORT` unless MASTER_PORT_ENV is set;
`torch.distributed.run` unless TORCHRUN_MODULE_ENV names another module.
A stop signal (SIGTERM, SIGINT) is forwarded to torchrun, which stops its workers; if torchrun
still runs after half the grace period (`STOP_GRACE_ENV`, default SageMaker's 120 s), its
whole tree is killed. Stdlib only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from entrypoints.launcher import container
from entrypoints.shared import contract

MASTER_PORT_ENV = "ORCHESTRATOR_MASTER_PORT"
# The module run as torchrun; tests name a stand-in that starts without importing torch.
TORCHRUN_MODULE = "torch.distributed.run"
TORCHRUN_MODULE_ENV = "ORCHESTRATOR_TORCHRUN_MODULE"
# SageMaker's grace between its SIGTERM and its SIGKILL; a Batch job's request sets ECS's
# (`bootstrap.environment`), the local SageMaker-style backend passes its own.
STOP_GRACE_S = 120.0
STOP_GRACE_ENV = "ORCHESTRATOR_STOP_GRACE_S"


def torchrun_command(job: dict, ctr: contract.Contract, env: dict[str, str], job_file: Path,
                     stats_dir: Path, train_module: str) -> list[str]:
    """The torchrun command line for this host (static rendezvous at the first host)."""
    port = env.get(MASTER_PORT_ENV) or str(contract.MASTER_PORT)
    return [
        sys.executable, "-m", env.get(TORCHRUN_MODULE_ENV) or TORCHRUN_MODULE,
        "--nnodes", str(ctr.num_nodes),
        "--node_rank", str(ctr.node_rank),
        "--nproc_per_node", str(int(job["workers_per_node"])),
        "--master_addr", ctr.master_addr,
        "--master_port", port,
        "-m", train_module,
        "--job", str(job_file),
        "--stats-dir", str(stats_dir),
    ]


class StopSignals:
    """SIGTERM/SIGINT (SageMaker's stop, the local backend's stop): remembered, and passed on
    to torchrun when it runs; the launcher itself goes on to push the cache and report.

    SageMaker kills the container `grace_s` (120) after its SIGTERM: torchrun gets half of it
    to stop its workers (it waits for them up to 30 s), then its whole tree is killed, so the
    last push and the final results.json fit in the other half."""

    def __init__(self, log: Callable[[str], None], grace_s: float | None = None) -> None:
        self.log = log
        self.signum: int | None = None
        self.child: subprocess.Popen | None = None
        if grace_s is None:
            grace_s = float(os.environ.get(STOP_GRACE_ENV) or STOP_GRACE_S)
        self.torchrun_deadline_s = grace_s / 2
        self.deadline: threading.Timer | None = None
        # Whether the child leads a process group of its own that a stop signals whole
        # (`run_torchrun(..., group=True)`: the precompile pass under its wrapper).
        self.group = False

    def __enter__(self) -> StopSignals:
        signal.signal(signal.SIGTERM, self.handle)
        signal.signal(signal.SIGINT, self.handle)
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    def handle(self, signum: int, _frame=None) -> None:
        self.signum = signum
        child = self.child
        if child is None:
            return
        if self.group:
            # Every process of the group, the wrapper's children too: a wrapper that exits on the
            # signal would leave them running, holding our pipe open.
            _signal_group(child.pid, signum)
        elif child.poll() is None:
            child.send_signal(signum)
        else:
            return
        if self.deadline is None:
            self.deadline = threading.Timer(self.torchrun_deadline_s, self._kill_late_child)
            self.deadline.daemon = True
            self.deadline.start()

    def _kill_late_child(self) -> None:
        child = self.child
        if child is None:
            return
        if self.group:
            if _signal_group(child.pid, 0):
                self.log(f"the pass still runs {self.torchrun_deadline_s:g} s after the stop signal: killing its "
                         "process group")
                _signal_group(child.pid, signal.SIGKILL)
        elif child.poll() is None:
            self.log(f"torchrun still runs {self.torchrun_deadline_s:g} s after the stop signal: killing it and its workers")
            container.kill_tree(child.pid)


def _signal_group(pgid: int, signum: int) -> bool:
    """Send `signum` to process group `pgid`; whether any process of it was there."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_torchrun(command: list[str], env: dict[str, str], cwd: Path, stop: StopSignals, *,
                 group: bool = False, on_line: Callable[[str], None] | None = None) -> tuple[int, list[str]]:
    """Run torchrun, streaming its output line by line; (exit code, last lines of output).

    `group`: the command runs in a process group of its own, which a stop signals whole and
    which is emptied when the command ends (a wrapper such as neuron_parallel_compile may exit
    on SIGTERM and leave its torchrun behind, which would hold the output pipe, and so this
    call, open). `on_line` sees each line too (it must not block: the MLflow run's buffer)."""
    tail: deque[str] = deque(maxlen=400)
    proc = subprocess.Popen(command, env=env, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1,
                            start_new_session=group)
    stop.group = group
    stop.child = proc
    try:
        if stop.signum is not None:
            stop.handle(stop.signum)  # the signal came while it started
        assert proc.stdout is not None  # we asked for a pipe
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            tail.append(line.rstrip("\n"))
            if on_line is not None:
                on_line(line)
        return proc.wait(), list(tail)
    finally:
        if group:
            _signal_group(proc.pid, signal.SIGKILL)  # nothing of the pass outlives it
            proc.wait()
            stop.group = False
