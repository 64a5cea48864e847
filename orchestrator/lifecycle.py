"""Where a job is in its life: one vocabulary for backends, the ledger, sweeps and results.

A job moves through the statuses in the order `Status` lists them. Two views use subsets:

- a backend reports `REPORTED` (pending .. stopped): what the cloud (or this machine) says
  of a job that exists;
- the ledger records `RECORDED` (planned .. stopped): planned and submitting come before
  the job exists (intent first), and the finer backend statuses are recorded as the nearest
  coarser one (`Status.recorded`: pending and starting as submitted, stopping as running).

`Status` is a `str` enum: a member equals its value ("running"), prints as it, and is
stored and sent as it (JSON, SQLite), so the words users and files see never change.
"""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    PLANNED = "planned"  # recorded, not sent (a sweep's queued trial, a refused create)
    SUBMITTING = "submitting"  # intent written; the create may or may not have happened
    SUBMITTED = "submitted"  # the job exists; no training step runs yet
    PENDING = "pending"  # accepted, waiting for capacity
    STARTING = "starting"  # instances launching, image or data downloading
    RUNNING = "running"
    STOPPING = "stopping"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"

    # A member shows as its value in messages and f-strings, on every Python version.
    __str__ = str.__str__
    __format__ = str.__format__

    def is_terminal(self) -> bool:
        """Whether the job has ended: nothing about it changes any more."""
        return self in TERMINAL

    def in_flight(self) -> bool:
        """Whether the ledger row is of a job that may exist and run (submitting to running)."""
        return self in IN_FLIGHT

    def recorded(self) -> Status:
        """The ledger's word for this status (see the module docstring)."""
        return _RECORDED_AS.get(self, self)


TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.STOPPED})
IN_FLIGHT = frozenset({Status.SUBMITTING, Status.SUBMITTED, Status.RUNNING})
REPORTED = (Status.PENDING, Status.STARTING, Status.RUNNING, Status.STOPPING, Status.COMPLETED, Status.FAILED,
            Status.STOPPED)
RECORDED = (Status.PLANNED, Status.SUBMITTING, Status.SUBMITTED, Status.RUNNING, Status.COMPLETED, Status.FAILED,
            Status.STOPPED)
_RECORDED_AS = {Status.PENDING: Status.SUBMITTED, Status.STARTING: Status.SUBMITTED, Status.STOPPING: Status.RUNNING}


def is_terminal(status: str) -> bool:
    """Whether `status` (a Status or its value) is one a job ends in."""
    return status in TERMINAL
