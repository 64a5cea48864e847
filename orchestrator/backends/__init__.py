"""Backends run jobs: `sagemaker` (boto3) and `local` (this machine). Chosen by name.

Every backend implements `Backend`. Clients (boto3) are given to the constructor, so tests
inject at the same point the CLI does. Status names are ours (`STATUSES`); each backend
keeps one table that maps its own states onto them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from orchestrator.errors import InputError

# Our job statuses, in the order a job moves through them.
STATUSES = ("pending", "starting", "running", "stopping", "completed", "failed", "stopped")
TERMINAL_STATUSES = frozenset({"completed", "failed", "stopped"})


@dataclass(frozen=True)
class JobStatus:
    """What a backend knows of one job, in our words."""

    job_name: str
    status: str  # one of STATUSES
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

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def spot_savings(self) -> float | None:
        """Fraction saved by managed spot (1 - billable / training), when known."""
        if not self.spot or not self.training_seconds or self.billable_seconds is None:
            return None
        return max(0.0, 1.0 - self.billable_seconds / self.training_seconds)


@dataclass(frozen=True)
class Progress:
    """The job's last word on its training, from its results.json (`docs/RESULTS.md`): while it
    runs a heartbeat (`record` "running"), at its end the final record. After a SIGKILL the last
    heartbeat stays: the job's last known step."""

    record: str  # the document's status: running | completed | stopped | failed
    steps_done: int | None
    steps: int | None
    at: str | None  # heartbeat_at (UTC)
    uri: str


def progress_of(data: bytes, uri: str) -> Progress | None:
    """The Progress in a results.json object; None when it is not one (a reader of record:
    `orchestrator.results` says why, `status` only shows what it can)."""
    import json

    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("status"), str):
        return None

    def number(key: str) -> int | None:
        value = doc.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    at = doc.get("heartbeat_at") or doc.get("ended_at")
    return Progress(record=doc["status"], steps_done=number("steps_done"), steps=number("steps"),
                    at=at if isinstance(at, str) else None, uri=uri)


class DamagedStatus(InputError):
    """The backend's own record of the job cannot be read (a local job's status.json damaged
    by hand or by a full disk): exit 2 naming the file. `stop` still stops such a job while
    its supervisor runs; sweeps report it per trial instead of giving up on the sweep."""


class UnknownJob(InputError):
    """The backend answered that it has no job of that name (exit 2). Raised by `status`,
    `logs` and `stop`; the CLI adds what the ledger knows of the name."""


@dataclass(frozen=True)
class Submitted:
    """The outcome of a submit: the job's name, and whether this call created it (False when
    an earlier, interrupted submit had created it already and the call reconciled it)."""

    job_name: str
    created: bool
    arn: str | None = None


class Backend(Protocol):
    name: str

    def submit(self, prepared) -> Submitted:
        """Create the job that `prepared` (a `request.Prepared`) describes.

        Writes the ledger intent first, then acts; reconciles an earlier interrupted submit
        of the same job name instead of creating a second job.
        """

    def status(self, job_name: str) -> JobStatus:
        """The job's status; UnknownJob when the backend has no job of that name."""

    def logs(self, job_name: str, follow: bool = False) -> Iterator[str]:
        """Log lines of every host of the job, in time order; with follow, until it ends."""

    def stop(self, job_name: str) -> None: ...

    def progress(self, job_name: str) -> Progress | None:
        """The job's results.json as it stands (None when there is none yet, or it cannot be
        read: this never fails a `status`)."""


def create(name: str, *, region: str | None = None, **clients) -> Backend:
    """The backend called `name`, built lazily (boto3 is imported only for sagemaker).

    sagemaker: `sagemaker_client`, `s3_client` and `logs_client` may be passed in (tests do);
    unless all three are, they are built for `region` with botocore's retry config (adaptive,
    AWS_RETRY_MODE / AWS_MAX_ATTEMPTS honoured). `ledger`, `sleep` and `poll_seconds` pass
    through to `SageMakerBackend`.
    local: `orchestrator.backends.local.LocalBackend(**clients)`; `region` is not used.
    """
    if name == "sagemaker":
        from orchestrator.backends.sagemaker import SageMakerBackend

        return SageMakerBackend.connect(region, **clients)
    if name == "local":
        from orchestrator.backends.local import LocalBackend

        return LocalBackend(**clients)
    raise InputError(f"unknown backend {name!r}", hint="use sagemaker or local")
