"""`sweep stop`: cancel what has not started, ask what runs to stop, and say which is which.

The caller holds the sweep's runner lock (so no runner of this machine submits meanwhile) and
has set the stop flag (so a runner started later does nothing). Each row it stops says how
(`failures.STOPPED_BEFORE_SUBMISSION` / `STOPPED_IN_FLIGHT`), so that a runner reopens it
after `sweep resume` (see `runner`).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.backends import DamagedStatus, UnknownJob
from orchestrator.errors import BackendError, OrchestratorError
from orchestrator.lifecycle import IN_FLIGHT, Status
from orchestrator.sweep.failures import STOPPED_BEFORE_SUBMISSION, STOPPED_IN_FLIGHT
from orchestrator.sweep.history import History


@dataclass(frozen=True)
class StopReport:
    """What `stop` did: jobs asked to stop, trials cancelled before submission, and errors."""

    stopped_jobs: list[str]
    cancelled: list[str]
    errors: list[str]


def stop(sweep: History) -> StopReport:
    """Stop the sweep: planned trials become stopped (detail STOPPED_BEFORE_SUBMISSION),
    in-flight jobs are asked to stop (STOPPED_IN_FLIGHT); `sweep resume` reopens both. See
    the module docstring for what the caller holds."""
    ledger = sweep.ledger
    stopped_jobs, cancelled, errors = [], [], []
    for attempts in sweep.rows().values():
        entry = attempts[-1]
        if entry.status == Status.PLANNED:
            if ledger.transition(entry.job_name, Status.STOPPED, detail=STOPPED_BEFORE_SUBMISSION,
                                 expect=(Status.PLANNED,)):
                cancelled.append(entry.job_name)
            continue
        if not entry.status.in_flight():
            continue
        backend = sweep.backend_of(entry)  # each job on its own trial's backend
        try:
            status = backend.status(entry.job_name)
        except UnknownJob:
            # The backend does not know the job. From `submitting`, a create that never reached
            # it: nothing runs, and a resume may create it under this name. A job the ledger
            # saw created but the backend lost is treated as stopped in flight: a resume gives
            # it a new name, never one the backend may still hold.
            never = entry.status == Status.SUBMITTING
            ledger.transition(entry.job_name, Status.STOPPED, detail=(
                f"{STOPPED_BEFORE_SUBMISSION} (never created)" if never else f"{STOPPED_IN_FLIGHT} (job not found)"),
                expect=tuple(IN_FLIGHT))
            cancelled.append(entry.job_name)
            continue
        except DamagedStatus:
            status = None  # its record is unreadable, but the backend may still stop it
        except BackendError as exc:
            errors.append(f"{entry.job_name}: {exc.message}")
            continue
        if status is not None and status.terminal:
            ledger.transition(entry.job_name, status.status, detail=status.failure_reason, expect=tuple(IN_FLIGHT))
            continue
        try:
            backend.stop(entry.job_name)
        except OrchestratorError as exc:
            errors.append(f"{entry.job_name}: {exc.message}")
            continue
        ledger.transition(entry.job_name, Status.STOPPED, detail=STOPPED_IN_FLIGHT, expect=tuple(IN_FLIGHT))
        stopped_jobs.append(entry.job_name)
    return StopReport(stopped_jobs, cancelled, errors)
