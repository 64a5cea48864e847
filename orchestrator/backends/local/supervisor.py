"""The local backend's supervisor: one detached process per local job.

`python -m orchestrator.backends.local.supervisor [--detach] JOB_DIR` runs the job that
`LocalBackend.submit` laid out in JOB_DIR (`plan.json`): downloads the input channels (the
source archive among them) into every host's tree, starts the request's container entrypoint
as every host's first process (a session of its own), copies their output into the logs, stops
the hosts as SageMaker stops containers (SIGTERM to the first process only, SIGKILL to all its
processes after the plan's grace period) when the job is stopped, runs past its maximum
runtime, or when one host failed and the others outlive a grace period, uploads
`model.tar.gz` and `output.tar.gz`, and records every step in `status.json` (atomically) and
the ledger. SIGTERM (what `LocalBackend.stop` sends) stops the hosts and ends the job as
stopped.

A full disk never kills it: a log line or status.json it cannot write is skipped (the hosts
are still signalled, reaped and uploaded), and its own log, `supervisor.log` (its stderr),
says which files were refused and why, as soon as and once more when the job ends.

With `--detach` the process forks: the parent writes the supervisor's pid to
`supervisor.pid` and exits at once, so the caller can reap it and return.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from entrypoints.shared import contract, holes
from entrypoints.shared.atomic import write_json, write_text
from orchestrator.backends.local.layout import (
    LOG_DIR,
    MERGED_LOG,
    PID_FILE,
    PLAN_FILE,
    STATUS_FILE,
    STATUS_FORMAT,
    STOP_FILE,
    pack_dir,
    read_json,
)
from orchestrator.ledger import Ledger
from orchestrator.lifecycle import is_terminal
from orchestrator.processes import kill_tree

# After one host fails, the others get this long to notice (their collectives error out)
# before they are stopped: a static rendezvous otherwise waits for its peers for many minutes.
HOST_GRACE_S = 30.0
POLL_S = 0.2
# The container's `python3` is this supervisor's plan's Python: a link in the job's folder,
# first on each host's PATH.
SHIM_DIR = "bin"
# Variables of the caller that must not leak into a host: each host gets its own (SM_*, the
# rendezvous, the cache dir), and compiler settings come from the spec's `environment` only,
# as in a container. A TORCHINDUCTOR_CACHE_DIR exported in the user's shell would otherwise
# replace the job's fresh cache dir (a "cold" job that is warm, foreign entries pushed under
# the job's key), and other TORCHINDUCTOR_* values would change the cache key unseen.
_HOST_OWNED_PREFIXES = ("SM_", "ORCHESTRATOR_MASTER_", "ORCHESTRATOR_CACHE_DIR", "TORCHINDUCTOR_", "TORCHDYNAMO_",
                        "TRITON_CACHE_DIR", "NEURON_CC_FLAGS", "NEURON_COMPILE_CACHE_URL")


class UnreadableInput(Exception):
    """A file of a local data folder (a file:// channel) that could not be read while it was
    copied (made unreadable after submit's check): the job's input, not the platform, failed."""

    @classmethod
    def of(cls, channel: str, store, key: str, exc: Exception) -> UnreadableInput | None:
        """The error for `store.get_file(key)`'s `exc` when it is the source file that could
        not be read (not the copy being written: that is this machine's disk); else None."""
        cause = exc.__cause__
        source = store.path(key) if hasattr(store, "path") else None
        if source is None or not isinstance(cause, OSError) or cause.filename not in (str(source), source):
            return None
        return cls(f"data channel {channel!r}: {source} cannot be read: {cause.strerror or cause}; nothing "
                   f"copied was kept. Make it readable for you (chmod u+r {shlex.quote(str(source))}) or move it "
                   "out of data.source, and submit again")


class Supervisor:
    """Runs one local job from its plan. See the module docstring."""

    def __init__(self, job_dir: Path):
        self.job_dir = job_dir
        self.plan = read_json(job_dir / PLAN_FILE) or {}
        self.status = read_json(job_dir / STATUS_FILE) or {}
        self.stop_requested = threading.Event()
        self.log_lock = threading.Lock()
        self.merged = open(job_dir / LOG_DIR / MERGED_LOG, "ab")
        self._ledger: Ledger | None = None
        self.refused: dict[str, list] = {}  # file -> [writes refused, the first error]

    # --- bookkeeping ---------------------------------------------------------------------

    def update(self, **fields) -> None:
        """Record `fields` in status.json. A status file that cannot be written (made a folder
        by hand, a full disk) is noted in the log and never stops the supervisor: it must still
        signal, reap and upload the hosts it started."""
        self.status.update(fields)
        try:
            write_json(self.job_dir / STATUS_FILE, self.status)
        except (OSError, ValueError) as exc:
            self.refuse(STATUS_FILE, exc)
            self.note(f"could not write {STATUS_FILE}: {exc}")

    def ledger_state(self, state: str, detail: str | None = None) -> None:
        try:
            if self._ledger is None:
                self._ledger = Ledger(Path(self.plan["ledger"]))
            self._ledger.transition(self.plan["job_name"], state, detail=detail,
                                    expect=("planned", "submitting", "submitted", "running"))
        except Exception as exc:  # noqa: BLE001 - the ledger is a record; the job goes on
            self.note(f"could not update the ledger: {exc}")

    def note(self, message: str) -> None:
        """A line of the supervisor's own in the merged log (as SageMaker's status lines)."""
        self.write_merged(f"[local] {message}\n".encode())

    def write_merged(self, data: bytes) -> None:
        with self.log_lock:
            try:
                self.merged.write(data)
                self.merged.flush()
            except (OSError, ValueError) as exc:  # a full disk: the job goes on, supervisor.log says so
                self.refuse(f"{LOG_DIR}/{MERGED_LOG}", exc)

    def refuse(self, name: str, exc: BaseException) -> None:
        """Count a write to `name` that failed; the first one is said in supervisor.log."""
        seen = self.refused.setdefault(name, [0, f"{type(exc).__name__}: {exc}"])
        seen[0] += 1
        if seen[0] == 1:
            say(f"[local] could not write {name}: {seen[1]}")

    def say_refused(self) -> None:
        """Once more at the end (a disk that was full may have room again by then)."""
        for name, (count, first) in sorted(self.refused.items()):
            say(f"[local] {count} write(s) to {name} refused; the first: {first}")

    def on_signal(self, signum, _frame) -> None:
        (self.job_dir / STOP_FILE).touch()
        self.stop_requested.set()

    # --- the job ------------------------------------------------------------------------------

    def run(self) -> int:
        if is_terminal(self.status.get("state")):
            # Counted as orphaned (or ended otherwise) before this process got going: a sweep
            # may already be retrying it as another job, so it must not run now.
            self.note(f"Job already {self.status['state']} before its supervisor started; nothing run")
            return 1
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        self.update(state="starting", secondary="Starting", started=time.time(), pid=os.getpid())
        if (self.job_dir / STOP_FILE).exists():
            self.stop_requested.set()
        state, secondary, reason = "failed", "Failed", None
        try:
            if not self.stop_requested.is_set() and self.plan["channels"]:
                self.update(secondary="Downloading")
                self.note("Downloading the source archive and input data")
                self.download()
            if not self.stop_requested.is_set():
                self.update(state="running", secondary="Training")
                self.ledger_state("running")
                self.note(f"Training on {len(self.plan['hosts'])} host(s): {', '.join(self.plan['hosts'])}")
                state, secondary, reason = self.train()
            else:
                state, secondary = "stopped", "Stopped"
        except UnreadableInput as exc:  # the user's data, not the platform: a ClientError (assumed wording)
            state, secondary, reason = "failed", "Failed", f"ClientError: {exc}"
        except Exception as exc:  # noqa: BLE001 - becomes the job's failure reason
            say(traceback.format_exc())
            state, secondary, reason = "failed", "Failed", f"InternalServerError: local supervisor: {type(exc).__name__}: {exc}"
        if self.stop_requested.is_set() and state != "completed":
            state, secondary, reason = "stopped", "Stopped", None
        self.update(secondary="Uploading")
        try:
            self.upload()
        except Exception as exc:  # noqa: BLE001 - a job whose outputs are lost has failed
            say(traceback.format_exc())
            if state == "completed":
                state, secondary = "failed", "Failed"
                reason = f"ClientError: could not upload outputs to {self.plan['output_prefix']}: {exc}"
        self.note(f"Job {state}" + (f": {reason}" if reason else ""))
        self.update(state=state, secondary=secondary, failure_reason=reason, ended=time.time())
        self.ledger_state(state, reason)
        with contextlib.suppress(OSError):
            self.merged.close()
        self.say_refused()
        return 0

    def download(self) -> None:
        """Every channel into each host's input/data/<channel>, FullyReplicated. A channel whose
        URI names one object (the code channel's source archive) gets that object under its
        name, as an S3Prefix channel of the object's whole key does."""
        try:
            self._download()
        except BaseException:
            # Nothing copied stays behind a failed download: the channels are copies, the
            # user's data is where data.source says.
            for channel in self.plan["channels"]:
                for host in self.plan["hosts"]:
                    shutil.rmtree(Path(self.plan["host"][host]["root"]) / contract.INPUT_DATA / channel,
                                  ignore_errors=True)
            raise

    def _download(self) -> None:
        from entrypoints.shared import storage

        for channel, uri in self.plan["channels"].items():
            first = None
            for host in self.plan["hosts"]:
                target = Path(self.plan["host"][host]["root"]) / contract.INPUT_DATA / channel
                if first is not None:
                    # As the first host's copy (`get_file`): a sparse file's holes stay holes.
                    shutil.copytree(first, target, dirs_exist_ok=True, copy_function=holes.copy_file)
                    continue
                prefix, _, name = uri.rstrip("/").rpartition("/")
                parent = storage.open_store(prefix)
                if name and parent.exists(name):
                    if not parent.get_file(name, target / name):
                        raise FileNotFoundError(f"channel {channel}: {uri} vanished while it was downloaded")
                    count = 1
                else:
                    store = storage.open_store(uri)
                    keys = [info.key for info in store.list(with_etags=False)]
                    for key in keys:
                        try:
                            store.get_file(key, target / key)
                        except storage.StorageError as exc:
                            unreadable = UnreadableInput.of(channel, store, key, exc)
                            if unreadable is None:
                                raise
                            raise unreadable from exc
                    count = len(keys)
                self.note(f"Channel {channel}: {count} files from {uri}")
                first = target

    def python_shim(self) -> Path:
        """A folder whose `python3` and `python` run the plan's Python (the container's own).
        Scripts that exec it, not links: a link to a virtual environment's python would not
        find its pyvenv.cfg; exec keeps the process (the first process stays the first)."""
        shim = self.job_dir / SHIM_DIR
        shim.mkdir(exist_ok=True)
        for name in ("python3", "python"):
            script = shim / name
            if not script.exists():
                script.write_text(f'#!/bin/sh\nexec {shlex.quote(self.plan["python"])} "$@"\n')
                script.chmod(0o755)
        return shim

    def host_env(self, host: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_HOST_OWNED_PREFIXES)}
        env.update(self.plan["host"][host]["env"])
        code = str(Path(self.plan["host"][host]["root"]) / contract.CODE_DIR)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (code, self.plan.get("pythonpath", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"  # as the training image sets it
        env["PATH"] = os.pathsep.join(p for p in (str(self.python_shim()), env.get("PATH", "")) if p)
        return env

    def pump(self, host: str, proc: subprocess.Popen) -> None:
        """Copy a host's output to its own log and, prefixed, to the merged one."""
        assert proc.stdout is not None  # we asked for a pipe
        prefix = f"[{host}] ".encode()
        name = f"{LOG_DIR}/{host}.log"
        try:
            own = open(self.job_dir / name, "ab")
        except OSError as exc:
            self.refuse(name, exc)
            own = None
        try:
            # The pipe is read to its end whatever the logs refuse: a host whose output is not
            # read blocks once the pipe is full.
            for line in iter(proc.stdout.readline, b""):
                if own is not None:
                    try:
                        own.write(line)
                        own.flush()
                    except (OSError, ValueError) as exc:
                        self.refuse(name, exc)
                self.write_merged(prefix + (line if line.endswith(b"\n") else line + b"\n"))
        finally:
            if own is not None:
                with contextlib.suppress(OSError):
                    own.close()

    def train(self) -> tuple[str, str, str | None]:
        """Run every host's launch.py to the end; (state, secondary, failure reason)."""
        procs: dict[str, subprocess.Popen] = {}
        pumps = []
        for host in self.plan["hosts"]:
            # The container's first process: the request's entrypoint, in a session of its own.
            proc = subprocess.Popen(self.plan["entrypoint"], cwd=self.plan["host"][host]["root"],
                                    env=self.host_env(host), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            procs[host] = proc
            thread = threading.Thread(target=self.pump, args=(host, proc), daemon=True)
            thread.start()
            pumps.append(thread)
        self.update(hosts={h: {"pid": p.pid, "pgid": p.pid, "exit_code": None} for h, p in procs.items()})

        max_run = self.plan.get("max_run_s")
        deadline = time.time() + max_run if max_run else None
        failed_order: list[str] = []
        first_failure_at: float | None = None
        term_sent_at: float | None = None
        killed = False
        overtime = False
        while True:
            codes = {h: p.poll() for h, p in procs.items()}
            for host, code in codes.items():
                if code not in (None, 0) and host not in failed_order:
                    failed_order.append(host)
                    first_failure_at = first_failure_at or time.time()
            if all(code is not None for code in codes.values()):
                break
            now = time.time()
            want_stop = self.stop_requested.is_set()
            if deadline is not None and now > deadline and not overtime:
                overtime = True
                self.note(f"MaxRuntimeExceeded: stopping after {max_run} s")
            grace_over = first_failure_at is not None and now - first_failure_at > HOST_GRACE_S
            if (want_stop or overtime or grace_over) and term_sent_at is None:
                term_sent_at = now
                self._signal_hosts(procs, signal.SIGTERM)
            if term_sent_at is not None and not killed and now - term_sent_at > self.plan["stop_grace_s"]:
                killed = True
                self._signal_hosts(procs, signal.SIGKILL)
            time.sleep(POLL_S)
        for thread in pumps:
            thread.join(timeout=10)
        self.update(hosts={h: {"pid": p.pid, "pgid": p.pid, "exit_code": p.returncode} for h, p in procs.items()})

        if self.stop_requested.is_set():
            return "stopped", "Stopped", None
        if overtime and self.plan.get("overtime_reason"):
            return "failed", "Failed", self.plan["overtime_reason"]  # a batch job's attempt timeout
        if overtime:
            return "stopped", "MaxRuntimeExceeded", f"MaxRuntimeExceeded: the job ran longer than {max_run} s"
        if not failed_order:
            return "completed", "Completed", None
        return "failed", "Failed", self._failure_reason(failed_order, procs)

    def _signal_hosts(self, procs: dict[str, subprocess.Popen], signum: int) -> None:
        """As SageMaker stops a container: SIGTERM to its first process only (what it passes on
        is up to it), SIGKILL to every process of the host. Each signal sent is recorded in
        status.json (`stop_signals`)."""
        sent = []
        for host, proc in procs.items():
            if proc.poll() is not None:
                continue
            if signum == signal.SIGKILL:
                kill_tree(proc.pid, signum)  # the first process's group and all its descendants
            else:
                try:
                    os.kill(proc.pid, signum)
                except (ProcessLookupError, PermissionError):
                    continue
            sent.append(host)
        if sent:
            name = signal.Signals(signum).name
            self.note(f"{name} to {', '.join(sent)}" + (" (the first process)" if signum != signal.SIGKILL else
                                                         " (every process)"))
            record = {"signal": name, "hosts": sent, "at": time.time()}
            self.update(stop_signals=[*self.status.get("stop_signals", []), record])

    def _failure_reason(self, failed_order: list[str], procs: dict[str, subprocess.Popen]) -> str:
        """SageMaker's form: "AlgorithmError: <failure file>", from the host that failed first."""
        for host in failed_order:
            failure = Path(self.plan["host"][host]["root"]) / contract.FAILURE_FILE
            try:
                text = failure.read_text(errors="replace").strip()
            except OSError:
                continue
            if text:
                return f"AlgorithmError: {text}"
        host = failed_order[0]
        return f"AlgorithmError: {host}: the container entrypoint exited with code {procs[host].returncode}"

    def upload(self) -> None:
        """model.tar.gz and output.tar.gz from the first host, as SageMaker uploads them
        (nothing for a batch job: its plan has no output prefix)."""
        from entrypoints.shared import storage

        if self.plan["output_prefix"] is None:
            return  # a batch job (batch_task): Batch uploads nothing, launch.py wrote what it keeps
        root = Path(self.plan["host"][self.plan["hosts"][0]]["root"])
        store = storage.open_store(self.plan["output_prefix"])
        with tempfile.TemporaryDirectory(dir=self.job_dir) as tmp:
            for name, source in (("model.tar.gz", contract.MODEL_DIR), ("output.tar.gz", contract.OUTPUT_DATA_DIR)):
                target = Path(tmp) / name
                pack_dir(root / source, target)
                store.put_file(name, target)
        self.note(f"Uploaded model.tar.gz and output.tar.gz to {self.plan['output_prefix']}/")
        board = self.plan.get("tensorboard")
        events = root / board["local"] if board else None
        if events is not None and events.is_dir():
            # SageMaker uploads TensorBoardOutputConfig.LocalPath while the job runs; here, at its end.
            tensorboard = storage.open_store(board["uri"])
            files = [path for path in sorted(events.rglob("*")) if path.is_file() and not path.is_symlink()]
            for path in files:
                tensorboard.put_file(path.relative_to(events).as_posix(), path)
            self.note(f"Uploaded {len(files)} TensorBoard file(s) to {board['uri']}/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Supervise one local training job (LocalBackend).")
    parser.add_argument("--detach", action="store_true", help="fork; the parent exits after writing the pid")
    parser.add_argument("job_dir", type=Path)
    args = parser.parse_args(argv)
    job_dir = args.job_dir.resolve()
    if args.detach:
        pid = os.fork()
        if pid:
            write_text(job_dir / PID_FILE, f"{pid}\n")
            os._exit(0)
    try:
        return Supervisor(job_dir).run()
    except Exception as exc:  # noqa: BLE001 - last resort: status.json must not stay non-terminal
        say(traceback.format_exc())
        try:
            status = read_json(job_dir / STATUS_FILE) or {}
        except ValueError:  # the status file itself was what failed: write a whole one
            status = {}
        if not isinstance(status, dict):
            status = {}
        status.setdefault("format", STATUS_FORMAT)
        status.update(state="failed", secondary="Failed", ended=time.time(),
                      # The cause in the reason itself: on a full disk the log may have stayed empty.
                      failure_reason=f"InternalServerError: the local supervisor crashed: {type(exc).__name__}: "
                                     f"{exc}; see supervisor.log")
        try:
            write_json(job_dir / STATUS_FILE, status)
        except OSError as again:  # a full disk: the next command reads it as orphaned, and why
            say(f"[local] could not write {STATUS_FILE}: {type(again).__name__}: {again}")
        return 1


def say(text: str) -> None:
    """A line in supervisor.log (this process's stderr); a full disk that refuses it is not
    a reason to stop."""
    try:
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
