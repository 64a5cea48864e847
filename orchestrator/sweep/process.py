"""The process that runs a sweep on this machine: its lock, starting one in the background,
and stopping it.

Contract:
- One runner per sweep per machine: `runner_lock` is a `filelock` lock, which the OS drops
  when the process dies, so a killed runner never blocks the next one. The holder records
  its pid beside the lock (`lock_holder`); RunnerBusy (exit 2) names it when the lock is
  taken.
- `spawn` starts `sweep resume ID` detached, logging under ORCHESTRATOR_HOME/sweeps, and
  returns once it holds the lock (a pipe carries its "ok", or "busy PID").
- `Sigterm` turns the SIGTERM that `sweep stop` sends into `Terminated` inside the run, so a
  runner ends as after a stop it noticed itself; `take_over` signals a runner of this machine
  and waits for its lock, for the process that stops the sweep.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from entrypoints.shared.atomic import write_json
from orchestrator.errors import BackendError, InputError, OrchestratorError
from orchestrator.paths import check_write_target, home_folder
from orchestrator.processes import process_alive

# How long `spawn` waits for its background runner to say it holds the sweep.
READY_SECONDS = 120.0
# How long `take_over` waits for a runner it signalled to exit, whatever its caller says.
RUNNER_EXIT_SECONDS = 5.0


def lock_path(sweep_id: str) -> Path:
    """The sweep's runner lock file, under ORCHESTRATOR_HOME/sweeps (made if missing)."""
    return home_folder("sweeps") / f"{sweep_id}.lock"


def log_path(sweep_id: str) -> Path:
    """Where a background runner of the sweep (`spawn`) writes its output."""
    return lock_path(sweep_id).with_suffix(".log")


def holder_path(sweep_id: str) -> Path:
    """Where the process holding the sweep's runner lock records its pid."""
    return lock_path(sweep_id).with_suffix(".runner")


def lock_holder(sweep_id: str) -> int | None:
    """The pid the last holder of the sweep's runner lock recorded (None if unreadable)."""
    try:
        pid = json.loads(holder_path(sweep_id).read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else None


def lock_held(sweep_id: str) -> bool | None:
    """Whether a process holds the sweep's runner lock now (None when this cannot be told
    here: no flock). Reads only: a missing lock file is "not held", nothing is created."""
    try:
        import fcntl
    except ImportError:
        return None
    from orchestrator.paths import home

    path = home() / "sweeps" / f"{sweep_id}.lock"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


class RunnerBusy(InputError):
    """Another process of this machine holds the sweep's runner lock; `pid` is its pid when
    it recorded one."""

    def __init__(self, sweep_id: str, pid: int | None, hint: str | None = None):
        who = f" (pid {pid})" if pid else ""
        super().__init__(f"sweep {sweep_id} is being run by another process on this machine{who}",
                         hint=hint or f"watch it with `python -m orchestrator sweep status {sweep_id}`, or stop it "
                                      f"with `python -m orchestrator sweep stop {sweep_id}`")
        self.sweep_id = sweep_id
        self.pid = pid


@contextlib.contextmanager
def runner_lock(sweep_id: str, *, wait_seconds: float = 0.0):
    """Hold the sweep's runner lock (one runner per sweep on this machine), waiting at most
    `wait_seconds` for it: a `filelock` lock, which the OS drops when the process dies, so a
    killed runner never blocks the next one. The holder records its pid beside the lock
    (`lock_holder`); RunnerBusy names it when the lock is taken."""
    from filelock import FileLock, Timeout

    path = lock_path(sweep_id)
    lock = FileLock(str(path), timeout=wait_seconds, poll_interval=0.2)
    try:
        lock.acquire()
    except Timeout:
        # The holder writes its pid just after it got the lock: give it a moment to.
        deadline = time.monotonic() + 1.0
        pid = lock_holder(sweep_id)
        while not process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
            pid = lock_holder(sweep_id)
        raise RunnerBusy(sweep_id, pid if process_alive(pid) else None) from None
    try:
        try:
            write_json(holder_path(sweep_id), {"pid": os.getpid()}, indent=None)
        except OSError:
            pass  # only a message names it
        yield path
    finally:
        lock.release()


def tell(ready_fd: int | None, answer: str) -> None:
    """Answer the `spawn` that started this runner ("ok", or "busy PID")."""
    if ready_fd is None:
        return
    try:
        os.write(ready_fd, f"{answer}\n".encode())
        os.close(ready_fd)
    except OSError:
        pass  # the starter is gone: nobody to tell


def spawn(sweep_id: str, ledger_home: Path, poll: float | None) -> tuple[int, Path]:
    """Start `sweep resume ID` as a detached process logging under ORCHESTRATOR_HOME/sweeps,
    and return once it holds the sweep's runner lock: (its pid, its log). RunnerBusy (exit 2,
    naming the holder's pid) while another process of this machine runs the sweep, also when
    one took it between the check here and the child's start (two `--detach` at once);
    BackendError (exit 1, with its last log line) when the child ended without starting."""
    with runner_lock(sweep_id):
        pass
    log = log_path(sweep_id)
    check_write_target(log, "the sweep's log")  # a FIFO there would block the open below
    read_fd, write_fd = os.pipe()
    command = [sys.executable, "-m", "orchestrator", "sweep", "resume", sweep_id, "--ready-fd", str(write_fd)]
    if poll is not None:
        command += ["--poll", str(poll)]
    env = dict(os.environ, ORCHESTRATOR_HOME=str(ledger_home))
    try:
        with open(log, "ab") as handle:
            start = handle.tell()
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True, pass_fds=(write_fd,))
    finally:
        os.close(write_fd)
    answer = b""
    try:
        while b"\n" not in answer and select.select([read_fd], [], [], READY_SECONDS)[0]:
            chunk = os.read(read_fd, 64)
            if not chunk:
                break  # the child ended (or closed the pipe) without an answer
            answer += chunk
    finally:
        os.close(read_fd)
    word, _, rest = answer.decode(errors="replace").strip().partition(" ")
    if word == "ok":
        # The child records its own pid once it holds the lock (it has by now).
        return child.pid, log
    if word == "busy":
        raise RunnerBusy(sweep_id, int(rest) if rest.isdigit() and int(rest) else None)
    try:
        code = child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        code = None
    try:
        with open(log, "rb") as handle:
            handle.seek(start)
            lines = [line for line in handle.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    said = next((line for line in lines if line.startswith("error: ")), lines[-1] if lines else "no output")
    how = f"exited at once (exit code {code})" if code is not None else f"has not started within {READY_SECONDS:g}s"
    raise BackendError(f"the background runner of sweep {sweep_id} (pid {child.pid}) {how}: {said}",
                       hint=f"its log is {log}; `python -m orchestrator sweep status {sweep_id}` shows the sweep")


class Terminated(BaseException):
    """SIGTERM reached a runner (`sweep stop` sends it): a BaseException, like Ctrl-C's
    KeyboardInterrupt, so that no `except Exception` on the way swallows it."""


class Sigterm:
    """While entered, SIGTERM is noted (`received`); inside `armed()` it also raises
    Terminated, once, which `armed()` itself absorbs: the runner is crash-safe, so leaving a
    step anywhere is fine, while what encloses the run (a display, the lock) closes as after
    a normal end."""

    def __init__(self):
        self.received = False
        self._armed = False
        self._previous = None

    def _handle(self, signum, frame) -> None:
        self.received = True
        if self._armed:
            self._armed = False
            raise Terminated

    def __enter__(self) -> Sigterm:
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if self._previous is None else self._previous)

    @contextlib.contextmanager
    def armed(self):
        """Yield whether to run at all (not when SIGTERM came already); a SIGTERM inside ends
        the block quietly."""
        self._armed = not self.received
        try:
            yield self._armed
        except Terminated:
            pass
        finally:
            self._armed = False


@contextlib.contextmanager
def take_over(sweep_id: str, pid: int | None, wait: float):
    """Hold the sweep's runner lock for the block, taking it from a runner of this machine:
    one that holds it is sent SIGTERM (`pid`, as it recorded itself) and waited for, at least
    RUNNER_EXIT_SECONDS even with `wait` 0, so that a stop is not left half done. BackendError
    (exit 1) when the lock is not free within the wait, saying what to do."""
    signalled = False
    try:
        with runner_lock(sweep_id):
            pass
    except OrchestratorError:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)  # the runner is crash-safe: ending it at any point is fine
                signalled = True
            except ProcessLookupError:
                pass
    grace = max(wait, RUNNER_EXIT_SECONDS) if signalled else wait
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(runner_lock(sweep_id, wait_seconds=grace))
        except OrchestratorError:
            if signalled:
                raise BackendError(
                    f"sweep {sweep_id}: its runner (pid {pid}) was sent SIGTERM but has not exited after "
                    f"{grace:g}s, so the jobs in flight were not stopped yet",
                    hint=f"the stop flag is set, so the runner submits nothing more; once it has exited, run "
                    f"`python -m orchestrator sweep stop {sweep_id}` again (or with a longer --wait) to stop the jobs "
                    "in flight and cancel the trials not yet submitted") from None
            raise BackendError(
                f"sweep {sweep_id} is being run by another process on this machine that did not exit within "
                f"{grace:g}s (no runner pid recorded here to signal), so the jobs in flight were not stopped yet",
                hint=f"the stop flag is set, so a runner stops at its next poll; run `python -m orchestrator sweep "
                f"stop {sweep_id} --wait 60` to wait longer, then stop the jobs in flight") from None
        yield
