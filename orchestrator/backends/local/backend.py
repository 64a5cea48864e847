"""The local backend: the SageMaker training container, emulated on this machine.

`submit(prepared)` writes the ledger intent, stores the source archive at its locations, lays
out one container tree per host under `ORCHESTRATOR_HOME/jobs/<job>/algo-N/` (`layout`) and
starts a detached supervisor (`supervisor`), which runs, logs, stops and uploads as SageMaker
does; `status`, `logs` and `stop` read and act on that tree. What is emulated and what is not:
docs/ARCHITECTURE.md, "The local backend: what it emulates".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

from filelock import FileLock

from entrypoints.shared import contract
from entrypoints.shared.atomic import write_json
from orchestrator.backends import registry
from orchestrator.backends.job import (
    DamagedStatus,
    JobProgress,
    JobStatus,
    Submitted,
    UnknownJob,
    record_status,
)
from orchestrator.backends.local import batch_task, shown
from orchestrator.backends.local.layout import (
    LOG_DIR,
    MAX_STATUS_BYTES,
    MERGED_LOG,
    PID_FILE,
    RUNNER_MODULE,
    START_GRACE_S,
    STATUS_FILE,
    STATUS_FORMAT,
    STOP_FILE,
    SUPERVISOR_LOG,
    NewerStatus,
    channels_of,
    host_names,
    lay_out,
    parse_status,
    status_format,
)
from orchestrator.errors import BackendError, InputError
from orchestrator.ledger import Ledger
from orchestrator.lifecycle import Status
from orchestrator.paths import home, home_folder, not_a_file, read_regular
from orchestrator.processes import kill_tree, process_alive, runs

_RECORDED_FROM = (Status.PLANNED, Status.SUBMITTING, Status.SUBMITTED, Status.RUNNING)


class SupervisorDidNotStart(BackendError):
    """The supervisor process exited at once: this Python cannot run it (no retry helps)."""


class LocalBackend:
    """Runs jobs on this machine as SageMaker's container would. See the module docstring."""

    name: ClassVar[str] = "local"
    cloud: ClassVar[bool] = False
    shared: ClassVar[bool] = False
    wait_interval_s: ClassVar[float] = registry.WAIT_INTERVAL_S["local"]
    sweep_poll_s: ClassVar[float] = registry.SWEEP_POLL_S["local"]
    region = None
    place = "the local backend"
    label = "local"
    runs_in: ClassVar[str] = "on this machine"
    operation: ClassVar[tuple[str, str] | None] = None  # its request never leaves this machine
    scheduled: ClassVar[str | None] = None
    schedule_refusal: ClassVar[str] = ("its jobs run on this machine, and a cloud schedule runs with this machine "
                                       "off")
    section: ClassVar[str | None] = None
    preferences: ClassVar[str | None] = "emulated"  # the first type with capacity (`capacity`)
    local_run: ClassVar[bool] = False  # its jobs run here anyway

    # --- the spec side (`backends.Backend`) -------------------------------------------------

    @classmethod
    def spec_problems(cls, spec) -> list[tuple[str, str]]:
        return []

    @classmethod
    def missing(cls, data) -> list[tuple[tuple[str, ...], str]]:
        return []

    @classmethod
    def infra_fields(cls, fields: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        return dict(fields)

    @classmethod
    def runs(cls, spec, facts) -> bool:
        return True  # this machine's CPU stands in for any type

    @classmethod
    def rules(cls, spec, target, estimate, priced) -> list:
        from orchestrator.backends.local import rules

        return rules.check(spec)

    @classmethod
    def estimate(cls, spec, target):
        from orchestrator import cost

        return cost.Estimate(usd_max=0.0, hours_max=spec.max_run_minutes / 60, usd_per_hour=None, price=None,
                             instance_count=spec.instance.count, spot=spec.instance.spot,
                             note="local backend: no cloud cost")

    @classmethod
    def locations(cls, spec, job_name: str):
        """Under the spec's prefixes, else in this machine's store (`locations.store`)."""
        from orchestrator import locations

        here = locations.store(job_name)
        return locations.Locations.under(spec.output.uri or here.output, job_name,
                                         spec.compile_cache.uri or here.compile_cache)

    @classmethod
    def job_file(cls, spec, job: dict, where) -> None:
        """Nothing to add: the local supervisor copies what SageMaker would upload."""

    @classmethod
    def build_request(cls, spec, **parts) -> dict:
        from orchestrator.backends.sagemaker import request

        # SageMaker's request, with placeholders for what this machine does not use: the
        # container tree is laid out from it as SageMaker would (`layout`).
        return request.build(spec, **parts)

    @classmethod
    def quota_needs(cls, spec) -> list:
        return []  # this machine has no service quotas

    def quota_clients(self, attempts: int | None = None) -> None:
        return None  # this machine has no service quotas

    @staticmethod
    def run_here(job: dict) -> None:
        """Make the job file `job` (laid out at `locations.store`) one of this machine's: a
        batch spec run here (`submit --local`), run by the local backend (results.json's
        backend), with one worker for runtime xla (torch-xla on PJRT's CPU device runs one
        process; the spec's workers, one per NeuronCore, need the NeuronCores)."""
        job["backend"] = "local"
        if job["spec"]["training"]["runtime"] == "xla":
            job["workers_per_node"] = 1

    def __init__(self, home: Path | None = None, ledger: Ledger | None = None, s3_client=None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
                 poll_seconds: float = 0.5, python: str | None = None):
        self._home = Path(home) if home is not None else None
        self._ledger = ledger
        self._s3 = s3_client
        self.sleep = sleep
        self.clock = clock
        self.poll_seconds = poll_seconds
        self.python = python or sys.executable

    @classmethod
    def create(cls, region: str | None = None, *, pool: int | None = None, **options) -> LocalBackend:
        return cls(**options)  # jobs of this machine have no region, and no clients to pool

    @classmethod
    def holds(cls, job_name: str) -> bool:
        """Whether this machine's jobs folder has the job: its status file, or its supervisor's
        pid file (enough to stop it when the status file is gone)."""
        folder = home_folder("jobs", create=False) / job_name  # a file named jobs is said as such
        return (folder / STATUS_FILE).exists() or (folder / PID_FILE).exists()

    @property
    def home(self) -> Path:
        if self._home is None:
            self._home = home()
        return self._home

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            self._ledger = Ledger(self.home / "ledger.sqlite3")
        return self._ledger

    def job_dir(self, job_name: str) -> Path:
        return home_folder("jobs", create=False, base=self.home) / job_name

    # --- submit ---------------------------------------------------------------------------

    def submit(self, prepared) -> Submitted:
        """Start the job `prepared` describes, once; returns without waiting for it.

        Raises InputError when the job name belongs to another spec or a data channel is
        empty, BackendError when the job cannot be laid out or started.
        """
        name = prepared.job_name
        tags = prepared.job.get("tags") or {}
        job_dir = self.job_dir(name)
        known = self.ledger.get(name)
        if not (job_dir / STATUS_FILE).exists() and (known is None or known.status in ("planned", "submitting")):
            # Read-only, so before the intent: a submit refused for its data leaves no ledger row.
            self._check_folders(prepared)
            self._check_channels(prepared.request)
        entry = self.ledger.record_intent(name, backend=self.name, region=prepared.spec.region,
                                          spec_hash=prepared.spec_hash, request=prepared.request,
                                          sweep_id=tags.get("orchestrator:sweep"),
                                          trial_id=tags.get("orchestrator:trial"),
                                          locations=prepared.locations.to_json())
        if entry.spec_hash != prepared.spec_hash or entry.backend != self.name:
            raise InputError(f"the job name {name} is already in the ledger for another spec "
                             f"({entry.backend}, spec {entry.spec_hash[:8]}, {entry.status})",
                             hint="change the spec's name so the job name differs")
        if (job_dir / STATUS_FILE).exists() or entry.status not in ("planned", "submitting"):
            # It ran (or runs) already: never twice.
            return Submitted(name, created=False)
        if entry.status == "planned":
            self.ledger.transition(name, "submitting", expect=("planned",))
        try:
            self._upload_source(prepared)
        except BackendError as exc:
            # Nothing was laid out or started: back to planned, and a later submit (after the
            # bucket or credentials are fixed) tries again.
            self.ledger.transition(name, "planned", detail=exc.message, expect=("submitting",))
            raise
        job_dir.parent.mkdir(parents=True, exist_ok=True)
        # One submit lays a job out: filelock's lock is the OS's, dropped if this process dies.
        with FileLock(str(job_dir.parent / f".{name}.lock")):
            if (job_dir / STATUS_FILE).exists():
                return Submitted(name, created=False)  # a concurrent submit won the race
            shutil.rmtree(job_dir, ignore_errors=True)  # debris of a submit that died midway
            job_dir.mkdir()
            try:
                # A batch spec's SubmitJob request (`submit --local`) runs as an ECS task would.
                layout = batch_task.lay_out if batch_task.is_batch_request(prepared.request) else lay_out
                layout(prepared, job_dir, ledger=self.ledger.path, python=self.python, now=self.clock())
                self._start_supervisor(job_dir)
            except SupervisorDidNotStart as exc:  # this Python cannot run it: a retry would fail the same way
                shutil.rmtree(job_dir, ignore_errors=True)
                raise BackendError(f"could not start local job {name}: {exc.message}", hint=exc.hint) from exc
            except (OSError, subprocess.SubprocessError, BackendError) as exc:
                shutil.rmtree(job_dir, ignore_errors=True)
                raise BackendError(f"could not start local job {name}: {exc}",
                                   hint="the ledger keeps the intent, so submitting again retries") from exc
        self.ledger.transition(name, "submitted", expect=("submitting", "planned"))
        return Submitted(name, created=True)

    def _store(self, uri: str):
        from entrypoints.shared import storage

        return storage.open_store(uri, s3_client=self._s3)

    def _check_folders(self, prepared) -> None:
        """InputError (exit 2) naming the spec field when a file:// URI the job reads or writes
        (data.source, output.uri, compile_cache.uri) names something that is not a folder, or
        lies below a file: the job could only fail on it later."""
        from orchestrator.paths import unusable

        data = [uri for channel, uri in channels_of(prepared.request).items() if channel != contract.CODE_CHANNEL]
        uris = {"data.source": data,
                "output.uri": [prepared.locations.output],
                "compile_cache.uri": [prepared.locations.compile_cache]}
        for field_name, found in uris.items():
            for uri in found:
                if not uri or not uri.startswith("file://"):
                    continue
                path = Path(uri[len("file://"):])
                why = unusable(path)
                blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
                if why is None and blocker is None:
                    continue
                what = why or (f"{blocker} is a file, not a folder" if blocker == path else
                               f"{blocker}, a folder on its way, is a file")
                raise InputError(f"{field_name} {uri}: {what}",
                                 hint=f"make {field_name} a folder (file:///absolute/folder), or move the file away"
                                      + ("; data.source must hold an ImageFolder tree (class/image files)"
                                         if field_name == "data.source" else ""))

    def _check_channels(self, request: dict) -> None:
        from orchestrator.backends.local.channels import check_channels

        check_channels(request, self._store)

    def _upload_source(self, prepared) -> None:
        """Put the archive at `source_uri` (the code channel) unless that content is there.
        A store that fails (no such bucket, credentials) is a BackendError."""
        from entrypoints.shared.storage import StorageError

        prefix, _, key = prepared.source_uri.rpartition("/")
        try:
            store = self._store(prefix)
            if store.exists(key):
                return
            store.put_bytes(key, prepared.archive)
        except StorageError as exc:
            raise BackendError(f"could not upload the job's source to {prepared.source_uri}: {exc}",
                               hint="check that output.uri's bucket exists and your credentials can write "
                                    "to it, then submit again") from exc

    def _start_supervisor(self, job_dir: Path) -> None:
        """Start the supervisor in its own session; it forks once more and this call reaps the
        intermediate, so the supervisor is nobody's zombie and outlives this process."""
        package_root = str(Path(__file__).resolve().parents[3])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        with open(job_dir / SUPERVISOR_LOG, "ab") as log:
            proc = subprocess.Popen([self.python, "-m", RUNNER_MODULE, "--detach", str(job_dir)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=str(job_dir), env=env, start_new_session=True)
        code = proc.wait(timeout=60)
        if code != 0 or not (job_dir / PID_FILE).exists():
            # The job folder goes with the failure: what the supervisor said goes into the error.
            said = [line for line in (job_dir / SUPERVISOR_LOG).read_text(errors="replace").splitlines()
                    if line.strip()][-3:]
            raise SupervisorDidNotStart(
                f"the local supervisor did not start (exit code {code})" + (": " + " / ".join(said) if said else ""),
                hint=f"{self.python} must import this package and its dependencies: activate the environment "
                     "`make venv` made (it installs this checkout), or run from the checkout with PYTHONPATH "
                     "naming it; then submit again")

    # --- status -----------------------------------------------------------------------------

    def _read_status(self, job_name: str) -> dict:
        """The job's status.json. UnknownJob when there is none; InputError naming the file
        when it is not a status this backend wrote (empty, not JSON, not an object, no known
        state, times that are not numbers): a damaged file, not a job to guess about."""
        path = self.job_dir(job_name) / STATUS_FILE
        try:
            text = read_regular(path, MAX_STATUS_BYTES).decode()  # never a FIFO: it would block
        except FileNotFoundError:
            if (self.job_dir(job_name) / PID_FILE).exists():  # its supervisor started: the file was lost
                self._damaged(job_name, path, "it is missing")
            where = (f"each local job has a folder in {self.home / 'jobs'} (`ls` it for their names); or check "
                     "ORCHESTRATOR_HOME")
            raise UnknownJob(f"no local job named {job_name} under {self.home / 'jobs'}", hint=where,
                             where=where) from None
        except (OSError, ValueError) as exc:  # ValueError: not UTF-8
            data, why = None, (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
        else:
            data, why = (None, "it is larger than a status file can be") if len(text) > MAX_STATUS_BYTES else \
                parse_status(text)
        if why is not None:
            self._damaged(job_name, path, why)
        if status_format(data) > STATUS_FORMAT:
            raise NewerStatus(path, status_format(data))
        return data

    def _damaged(self, job_name: str, path: Path, why: str, stopping: bool = False):
        """Raise DamagedStatus for `path`. The hint offers `stop` unless this is the stop that
        found nothing running (`stopping`)."""
        folder = self.job_dir(job_name)
        if stopping:
            first = (f"the job's state is lost (its log is in {folder / LOG_DIR}) and nothing of it runs: no live "
                     f"supervisor is recorded in {folder / PID_FILE}. Remove its folder")
        else:
            first = (f"the job's state is lost (its log is in {folder / LOG_DIR}). If it still runs, `python -m "
                     f"orchestrator stop {job_name}` stops it; then remove its folder")
        raise DamagedStatus(f"{path}: the local job's status file is damaged: {why}",
                            hint=f"{first} (rm -r {folder}) to forget it. To run it again: `submit --rerun SPEC`, or "
                                 "`sweep resume` for a sweep's trial", log=self.log_file(job_name))

    def _supervisor_pid(self, job_name: str, data: dict) -> int | None:
        if data.get("pid"):
            return int(data["pid"])
        try:
            return int((self.job_dir(job_name) / PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return None

    def status(self, job_name: str) -> JobStatus:
        """The job's state from its status.json; a supervisor that vanished makes it failed.
        Moves the ledger row forward."""
        data = self._read_status(job_name)
        if not Status(data["state"]).is_terminal() and not self._supervisor_alive(job_name, data):
            data = self._read_status(job_name)  # it may have finished between the two reads
            if not Status(data["state"]).is_terminal():
                data = self._mark_orphaned(job_name, data)
        status = self._job_status(job_name, data)
        self._record(status)
        return status

    def statuses(self, job_names):
        """`status` of each job in turn (`running.one_at_a_time`): each is a file on this machine."""
        from orchestrator.backends.running import one_at_a_time

        return one_at_a_time(self, job_names)

    def describe(self, job_name: str) -> JobStatus | None:
        """What `status` would say of the job, read only: an orphaned job reads as `status`
        would mark it, but nothing is written, killed or recorded. None when there is no such job."""
        try:
            data = self._read_status(job_name)
            if not Status(data["state"]).is_terminal() and not self._supervisor_alive(job_name, data):
                data = self._read_status(job_name)  # it may have finished between the two reads
                if not Status(data["state"]).is_terminal():
                    data = self._orphaned(job_name, data)
            return self._job_status(job_name, data)
        except UnknownJob:
            return None

    def _job_status(self, job_name: str, data: dict) -> JobStatus:
        if not Status(data["state"]).is_terminal() and (self.job_dir(job_name) / STOP_FILE).exists():
            data = {**data, "state": "stopping", "secondary": "Stopping"}
        return JobStatus(
            job_name=job_name, status=Status(data["state"]), secondary=data.get("secondary"),
            failure_reason=data.get("failure_reason"), billable_seconds=None,
            training_seconds=int(data["ended"] - data["started"]) if data.get("ended") and data.get("started") else None,
            instance_type=data.get("instance_type"), instance_count=data.get("instance_count"), spot=False,
            created=data.get("created"), started=data.get("started"), ended=data.get("ended"),
            output_uri=shown.written(data.get("output_uri")), tags=dict(data.get("tags") or {}),
        )

    def _supervisor_alive(self, job_name: str, data: dict) -> bool:
        """Whether the job's supervisor runs, or may still be starting.

        A job is laid out (status.json "pending") before its supervisor writes its pid. A
        submitter interrupted in between (a sweep runner stopped by SIGTERM) leaves a
        supervisor that starts on its own a moment later, so a pending job with no pid yet
        counts as alive for START_GRACE_S after it was laid out; then it is orphaned."""
        pid = self._supervisor_pid(job_name, data)
        if pid is None and data.get("state") == "pending":
            return self.clock() - float(data.get("created") or 0) < START_GRACE_S
        return process_alive(pid)

    def _mark_orphaned(self, job_name: str, data: dict) -> dict:
        """The supervisor is gone without a final state: kill what it left, record why."""
        for host in (data.get("hosts") or {}).values():
            kill_tree(host.get("pgid"), signal.SIGKILL)
        data = self._orphaned(job_name, data)
        try:
            write_json(self.job_dir(job_name) / STATUS_FILE, data)
        except OSError:
            # A read (`status`) on a full disk or a read-only home: the orphan is reported as
            # such, and marked by the next command that can write.
            pass
        return data

    def _orphaned(self, job_name: str, data: dict) -> dict:
        """The final state of a job whose supervisor is gone without writing one."""
        stopped = (self.job_dir(job_name) / STOP_FILE).exists()
        pid = self._supervisor_pid(job_name, data)
        return {**data, "state": "stopped" if stopped else "failed",
                "secondary": "Stopped" if stopped else "Failed", "ended": data.get("ended") or self.clock(),
                # Its upload comes just before the final state: none can be counted on, none is shown.
                "output_uri": None,
                # Like an instance lost under a SageMaker job: an internal error, which sweeps retry.
                "failure_reason": None if stopped else f"InternalServerError: the local supervisor (pid {pid}) "
                f"exited without finishing the job{shown.disk_note(self.job_dir(job_name))}; see "
                f"{self.job_dir(job_name) / SUPERVISOR_LOG}"}

    def _record(self, status: JobStatus) -> None:
        entry = self.ledger.get(status.job_name)
        if entry is not None and entry.status in (Status.PLANNED, Status.SUBMITTING) and \
                Status(status.status).recorded() == Status.SUBMITTED:
            return  # the submit that wrote the intent moves it on
        record_status(self.ledger, self.name, status, expect=_RECORDED_FROM)

    def progress(self, job_name: str) -> JobProgress | None:
        """The job's record of results as `results` reads it (see `shown.progress`)."""
        try:
            uri = self._read_status(job_name).get("results_uri")
        except InputError:  # UnknownJob, a damaged status.json: `status` says so itself
            uri = None
        return shown.progress(self.job_dir(job_name) / host_names(1)[0] / contract.OUTPUT_DATA_DIR / "results.json",
                              uri if isinstance(uri, str) else None, self._store)

    # --- logs ---------------------------------------------------------------------------------

    def logs(self, job_name: str, follow: bool = False) -> Iterator[str]:
        """Lines "[algo-N] message" of every host, in the order they were written. With
        follow, polls until the job is terminal and a last read finds nothing new."""
        self._read_status(job_name)  # an unknown job is an error, not an empty log
        path = self.job_dir(job_name) / LOG_DIR / MERGED_LOG
        offset = 0
        pending = b""
        while True:
            terminal = self.status(job_name).terminal if follow else True
            chunk = b""
            kind = not_a_file(path)
            if kind is not None:  # never opened: a FIFO would block for ever
                raise InputError(f"{path}: the job's log is {kind}, not a file; not read",
                                 hint=f"the host logs are in {path.parent} (algo-N.log); move {path.name} away")
            if path.exists():
                with open(path, "rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
                offset += len(chunk)
            data = pending + chunk
            lines = data.split(b"\n")
            pending = lines.pop()
            for line in lines:
                yield line.decode("utf-8", "replace")
            if terminal and not chunk:
                if pending:
                    yield pending.decode("utf-8", "replace")
                return
            if not chunk:
                self.sleep(self.poll_seconds)

    def log_file(self, job_name: str) -> Path:
        """The job's merged log (`logs` reads it; shown as it is when the status file is damaged)."""
        return self.job_dir(job_name) / LOG_DIR / MERGED_LOG

    def has_logs(self, job_name: str) -> bool:
        return True  # `logs` reads a file that appears with the first line: nothing to ask first

    def no_logs(self, job_name: str) -> str:
        return f"no log lines for {job_name}"

    # --- names --------------------------------------------------------------------------------

    def describe_all(self, containing: str) -> None:
        """No bulk read: `describe` reads one job's files (`Backend.describe_all`)."""
        return None

    def job_names(self, containing: str, *, in_flight: bool = False) -> list[str]:
        """Names of the folders in the jobs folder that contain `containing` (with `in_flight`,
        only of jobs whose status file says they have not ended)."""
        try:
            found = sorted(p.name for p in (self.home / "jobs").iterdir() if containing in p.name and p.is_dir())
        except FileNotFoundError:
            return []
        if in_flight:
            found = [name for name in found if self._in_flight(name)]
        return found

    def _in_flight(self, job_name: str) -> bool:
        try:
            st = self.describe(job_name)
        except DamagedStatus:
            return False  # its state is lost: `status` says so
        return st is not None and not st.terminal

    def exists(self, job_name: str) -> bool:
        """Whether the jobs folder has a folder of this name (a job, or what is left of one)."""
        return self.job_dir(job_name).exists()

    # --- stop -------------------------------------------------------------------------------------

    def stop(self, job_name: str) -> None:
        """Ask the job to stop: its supervisor stops every host as SageMaker stops a container
        (SIGTERM to its first process, SIGKILL to all its processes after the grace period),
        uploads outputs and marks it stopped. Returns at once; `status` shows stopping until
        then. A job that has ended is left as it is.

        A job whose status.json is damaged is still stopped while its supervisor runs (found by
        its pid file; it writes a whole final status as it stops); DamagedStatus otherwise."""
        try:
            data = self._read_status(job_name)
        except DamagedStatus as exc:
            # The process record alone: the supervisor's pid file, if that pid is still this
            # job's supervisor (a recycled pid is somebody else's process: never signalled).
            pid = self._supervisor_pid(job_name, {})
            folder = self.job_dir(job_name)
            if not runs(pid, [RUNNER_MODULE], [str(folder), str(folder.resolve())]):
                why = exc.message.partition("damaged: ")[2]
                self._damaged(job_name, self.job_dir(job_name) / STATUS_FILE, why, stopping=True)
            (self.job_dir(job_name) / STOP_FILE).touch()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            return
        if Status(data["state"]).is_terminal():
            return
        job_dir = self.job_dir(job_name)
        (job_dir / STOP_FILE).touch()
        pid = self._supervisor_pid(job_name, data)
        if process_alive(pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        else:
            self._mark_orphaned(job_name, self._read_status(job_name))

