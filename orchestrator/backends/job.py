"""What a backend reports of a job, in our words: its status, its progress, the outcome of a
submit, and the errors of a job the backend does not have or whose record is damaged.

Values only (no backend, no client): the CLI, sweeps, results and `follow` read them, each
backend makes them. `record_status` moves the job's ledger row to what a status implies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.errors import InputError
from orchestrator.lifecycle import Status


@dataclass(frozen=True)
class JobStatus:
    """What a backend knows of one job, in our words."""

    job_name: str
    status: Status  # one of lifecycle.REPORTED
    secondary: str | None = None  # the backend's finer-grained state, e.g. "Downloading"
    failure_reason: str | None = None
    billable_seconds: int | None = None
    training_seconds: int | None = None
    instance_type: str | None = None
    instance_count: int | None = None
    spot: bool = False
    created: float | None = None  # epoch seconds
    started: float | None = None
    ended: float | None = None
    output_uri: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # A SageMaker managed warm pool kept after the job (DescribeTrainingJob's WarmPoolStatus):
    # InUse, Available, Reused or Terminated; the seconds it was kept (billed); the job reusing it.
    warm_pool: str | None = None
    warm_pool_retained_s: int | None = None
    warm_pool_reused_by: str | None = None

    @property
    def terminal(self) -> bool:
        return Status(self.status).is_terminal()

    @property
    def spot_savings(self) -> float | None:
        """Fraction saved by managed spot (1 - billable / training), when known."""
        if not self.spot or not self.training_seconds or self.billable_seconds is None:
            return None
        return max(0.0, 1.0 - self.billable_seconds / self.training_seconds)


@dataclass(frozen=True)
class JobProgress:
    """The job's last word on its training, from its results.json (`docs/RESULTS.md`): while it
    runs a heartbeat (`record` "running"), at its end the final record. After a SIGKILL the last
    heartbeat stays: the job's last known step."""

    record: str  # the document's status: running | completed | stopped | failed (absent: none stored)
    steps_done: int | None
    steps: int | None
    at: str | None  # heartbeat_at (UTC)
    uri: str
    # A later record that never reached `uri` (a local job's own copy, its store unwritable).
    newer: JobProgress | None = None
    # record "newer": the document's schema, a later one than this version reads.
    schema: str | None = None


def progress_of(data: bytes, uri: str) -> JobProgress | None:
    """The JobProgress in a results.json object; None when it is not one (a reader of record:
    `orchestrator.results` says why, `status` only shows what it can)."""
    import json

    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    from entrypoints.shared.results_schema import is_newer

    if is_newer(doc.get("schema")):  # its fields may mean something else now: none is read
        return JobProgress(record="newer", steps_done=None, steps=None, at=None, uri=uri, schema=str(doc["schema"]))
    if not isinstance(doc.get("status"), str):
        return None

    def number(key: str) -> int | None:
        value = doc.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    at = doc.get("heartbeat_at") or doc.get("ended_at")
    return JobProgress(record=doc["status"], steps_done=number("steps_done"), steps=number("steps"),
                    at=at if isinstance(at, str) else None, uri=uri)


class DamagedStatus(InputError):
    """The backend's own record of the job cannot be read (a local job's status.json damaged
    by hand or by a full disk): exit 2 naming the file. `stop` still stops such a job while
    its supervisor runs; sweeps report it per trial instead of giving up on the sweep. `log`:
    the job's log file, which the damaged record does not take away (`logs` shows it)."""

    def __init__(self, message: str, hint: str | None = None, log=None):
        super().__init__(message, hint=hint)
        self.log = log


class UnknownJob(InputError):
    """The backend answered that it has no job of that name (exit 2). Raised by `status`,
    `logs` and `stop`; the CLI adds what the ledger knows of the name. `where`, when the
    backend keeps its jobs somewhere a user can look (a folder), says so: a hint that holds
    also for a name the ledger knows."""

    def __init__(self, message: str, hint: str | None = None, where: str | None = None):
        super().__init__(message, hint=hint)
        self.where = where


@dataclass(frozen=True)
class Submitted:
    """The outcome of a submit: the job's name, and whether this call created it (False when
    an earlier, interrupted submit had created it already and the call reconciled it)."""

    job_name: str
    created: bool
    arn: str | None = None



def record_status(ledger, backend_name: str, status: JobStatus, *, expect: tuple[str, ...]) -> None:
    """Move the job's ledger row to the state `status` implies (`Status.recorded`), when the
    row is this backend's, is in one of the states `expect`, and differs."""
    entry = ledger.get(status.job_name)
    target = Status(status.status).recorded()
    if entry is None or entry.status == target or entry.backend != backend_name:
        return
    ledger.transition(status.job_name, target, detail=status.failure_reason, expect=expect)
