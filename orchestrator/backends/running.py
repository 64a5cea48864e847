"""What running a job asks of a backend, of its instance (clients made, a ledger given): submit,
status (of one job, or of many at once: `statuses`) and describe, progress, logs, stop, the job
list and the quota clients; the job side of the backend interface, as SkyPilot's
`backends/backend.py` and torchx's `schedulers/api.py`.

A `Backend` is also its class's `Planning` (`orchestrator.backends.planning`). Statuses are
`lifecycle.Status`; each backend keeps one table that maps its own states onto them, and
records what it sees in the ledger (`job.record_status`). The values it returns are in
`orchestrator.backends.job`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, ClassVar, Protocol

from orchestrator.backends.planning import Planning
from orchestrator.errors import OrchestratorError

if TYPE_CHECKING:
    from orchestrator.backends.job import JobProgress, JobStatus, Submitted


class Backend(Planning, Protocol):
    """What every backend does with a job. Class attributes say how it is used."""

    # Other machines submit to it too, so its own job list is the truth: sweeps adopt the
    # attempts it has and count its in-flight jobs against their concurrency (`job_names`).
    shared: ClassVar[bool]
    runs_in: ClassVar[str]  # where its jobs run, for "the job keeps running ...": "in SageMaker"
    wait_interval_s: ClassVar[float]  # default seconds between polls of `submit --wait`
    sweep_poll_s: ClassVar[float]  # default seconds between a sweep runner's rounds

    region: str | None  # None for a backend that has no regions
    ledger: object  # the `Ledger` it records intents and statuses in

    @classmethod
    def holds(cls, job_name: str) -> bool:
        """Whether this machine alone can tell that the backend has the job (no call made);
        False when only asking the backend could tell."""

    @property
    def place(self) -> str:
        """Where its jobs are, for messages: "SageMaker in us-east-1", "the local backend"."""

    @property
    def label(self) -> str:
        """The backend as `submit` names it: "sagemaker in us-east-1", "local"."""

    def submit(self, prepared) -> Submitted:
        """Create the job that `prepared` (a `request.Prepared`) describes.

        Writes the ledger intent first, then acts; reconciles an earlier interrupted submit
        of the same job name instead of creating a second job.
        """

    def status(self, job_name: str) -> JobStatus:
        """The job's status, with its tags; moves its ledger row forward. UnknownJob when the
        backend has no job of that name."""

    def statuses(self, job_names: Iterable[str]) -> dict[str, JobStatus | OrchestratorError]:
        """`status` of each job, asked together: name -> its JobStatus, or the error `status`
        would have raised for it (UnknownJob, DamagedStatus, BackendError, OtherAccount...),
        returned per job, never raised. Once a call fails other than for its job alone (not
        UnknownJob or DamagedStatus: the network, throttling, access), it asks nothing more: the
        jobs not asked are left out of the answer. Ledger rows move as `status` moves them, on
        the calling thread. `one_at_a_time` below is the hook made of `status` (the local
        backend's); `statuses(backend, names)` asks a backend written before the hook that way."""

    def describe(self, job_name: str) -> JobStatus | None:
        """The job's status as the backend reports it, read only (no tags, nothing recorded);
        None when the backend has no job of that name."""

    def progress(self, job_name: str) -> JobProgress | None:
        """The job's results.json as it stands (None when there is none yet, or it cannot be
        read: this never fails a `status`)."""

    def logs(self, job_name: str, follow: bool = False) -> Iterator[str]:
        """Log lines of every host of the job, in time order; with follow, until it ends."""

    def has_logs(self, job_name: str) -> bool:
        """Whether the job may have logged anything yet (False only when the backend knows
        there is nothing to read)."""

    def no_logs(self, job_name: str) -> str:
        """What there is instead of the job's logs, for a note: "no log lines for J"."""

    def stop(self, job_name: str) -> None:
        """Ask the backend to stop the job; it returns at once."""

    def job_names(self, containing: str, *, in_flight: bool = False) -> list[str]:
        """Names of the backend's jobs that contain `containing` (only those still in progress
        with `in_flight`), whoever submitted them."""

    def describe_all(self, containing: str) -> dict[str, JobStatus] | None:
        """`describe` of every job whose name contains `containing`, read in bulk (many jobs a
        call), by job name; None when the backend has no bulk read (ask `describe` per job). A
        job may be missing or older than `describe` would say: trust an ended one only."""

    def exists(self, job_name: str) -> bool:
        """Whether the backend has a job of this name."""

    def quota_clients(self, attempts: int | None = None) -> tuple | None:
        """The two clients the quota check before a submit reads (`orchestrator.quotas`), in
        the backend's region: (Service Quotas client, SageMaker client) for every cloud backend,
        Batch's too. Service Quotas answers each need's quota (SageMaker's, or EC2's vCPUs for
        Batch); the SageMaker client counts the training jobs in progress against a SageMaker
        quota, so for Batch, whose needs are EC2's, it is made and never called. None for a
        backend without service quotas."""


class RunsHere(Protocol):
    """The backend that runs on this machine a request another backend would send (`submit
    --local`: the local backend plays AWS Batch's container): `request.prepare(local=...)`."""

    @staticmethod
    def run_here(job: dict) -> None:
        """Make the job file `job` (laid out at `locations.store`) one of this machine's."""


def statuses(backend, job_names: Iterable[str]) -> dict[str, JobStatus | OrchestratorError]:
    """`backend.statuses(job_names)` when the backend has the hook, else `one_at_a_time`."""
    ask = getattr(backend, "statuses", None)
    return ask(job_names) if ask is not None else one_at_a_time(backend, job_names)


def one_at_a_time(backend, job_names: Iterable[str]) -> dict[str, JobStatus | OrchestratorError]:
    """`Backend.statuses` made of `status`: each job in turn, its error (any OrchestratorError)
    returned in its place, until an error that is not the job's alone."""
    from orchestrator.backends.job import DamagedStatus, UnknownJob

    answers: dict[str, JobStatus | OrchestratorError] = {}
    for name in job_names:
        try:
            answers[name] = backend.status(name)
        except OrchestratorError as exc:
            answers[name] = exc
            if not isinstance(exc, (UnknownJob, DamagedStatus)):
                break
    return answers
