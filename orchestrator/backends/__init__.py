"""Backends run jobs: `sagemaker` and `batch` (boto3) and `local` (this machine), chosen by name.

Every backend implements `Backend`, the whole of what the spec, the doctor, `request.prepare`,
cost, the catalog, the CLI, sweeps, reruns and results ask of one; none of them looks at a
backend's name or reaches past the protocol. Each backend is a folder (`backends/<name>/`)
holding its class, its request builder and its rules; adding one is a folder and one entry
in `_CLASSES` (docs/ARCHITECTURE.md, "Adding a backend"). This module imports no backend: the
registry names them, and a backend is imported when first asked for.

Clients (boto3) are given to the constructor, so tests inject at the same point the CLI
does. Statuses are `lifecycle.Status`; each backend keeps one table that maps its own states
onto them, and records what it sees in the ledger (`record_status`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from orchestrator.errors import InputError
from orchestrator.lifecycle import Status

# name -> "module:class". The order is the order `locate` asks them whether they hold a job.
_CLASSES = {
    "sagemaker": "orchestrator.backends.sagemaker.backend:SageMakerBackend",
    "batch": "orchestrator.backends.batch.backend:BatchBackend",
    "local": "orchestrator.backends.local.backend:LocalBackend",
}
# Where a job that neither the ledger nor this machine knows is looked for: a job submitted
# from another machine is in the cloud.
DEFAULT = "sagemaker"


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


class Backend(Protocol):
    """What every backend does. Class attributes say how it is used."""

    name: ClassVar[str]  # as job specs and the ledger name it
    # Jobs run in the cloud and are billed: results price them and join the backend's
    # billing (`describe`). False: a job of this machine, no cloud cost.
    cloud: ClassVar[bool]
    # Other machines submit to it too, so its own job list is the truth: sweeps adopt the
    # attempts it has and count its in-flight jobs against their concurrency (`job_names`).
    shared: ClassVar[bool]
    runs_in: ClassVar[str]  # where its jobs run, for "the job keeps running ...": "in SageMaker"
    wait_interval_s: ClassVar[float]  # default seconds between polls of `submit --wait`
    sweep_poll_s: ClassVar[float]  # default seconds between a sweep runner's rounds

    region: str | None  # None for a backend that has no regions
    ledger: object  # the `Ledger` it records intents and statuses in

    # The spec side, asked of the class (no client, no instance) before anything runs.
    operation: ClassVar[tuple[str, str] | None]  # (AWS service, operation) its request is; None: never sent
    # Its part of a cloud schedule ("module:class" of a `backends.scheduled.ScheduledJobs`), or
    # None with `schedule_refusal` saying why its trials cannot run in one.
    scheduled: ClassVar[str | None]
    section: ClassVar[str | None]  # the spec section only this backend reads ("batch"), if any
    # instance.preferences: "sent" (the service selects among them), "emulated" (this machine
    # plays the selection), None (the backend refuses them).
    preferences: ClassVar[str | None]
    # `submit --local` can run this backend's request on this machine (the local backend plays
    # the service's container: AWS Batch's ECS task).
    local_run: ClassVar[bool]

    @classmethod
    def spec_problems(cls, spec) -> list[tuple[str, str]]:
        """(field, message) for each setting of a valid-looking spec this backend cannot take
        (JobSpec's cross-field check)."""

    @classmethod
    def missing(cls, data) -> list[tuple[tuple[str, ...], str]]:
        """(path, message) for each field this backend needs that the raw spec data leaves out."""

    @classmethod
    def infra_fields(cls, fields: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        """Which `infra:` outputs fill which spec fields for this backend (from the defaults)."""

    @classmethod
    def runs(cls, spec, facts) -> bool:
        """Whether the backend runs the spec's instance type (`facts`: its catalog row)."""

    @classmethod
    def rules(cls, spec, target, estimate, priced) -> list:
        """The doctor's findings only this backend has (`doctor.diagnose` adds the rest)."""

    @classmethod
    def estimate(cls, spec, target):
        """The spec's cost bound on this backend (`cost.Estimate`) at the target's price."""

    @classmethod
    def locations(cls, spec, job_name: str):
        """Where the job's objects go (`locations.Locations`), made once when it is prepared."""

    @classmethod
    def job_file(cls, spec, job: dict, where) -> None:
        """Add what this backend's container needs to the job file `job` (in place)."""

    @classmethod
    def build_request(cls, spec, *, job_name: str, where, job: dict, hyperparameters: dict[str, str], target,
                      choices: tuple) -> dict:
        """The exact request the backend sends for the job at its locations `where` (pure)."""

    @classmethod
    def quota_needs(cls, spec) -> list:
        """What the job asks of which service quota (`quotas.Need`); [] when none applies."""

    @classmethod
    def create(cls, region: str | None = None, **options) -> Backend:
        """The backend as `backends.create` builds it (clients made for `region` unless given)."""

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

    def exists(self, job_name: str) -> bool:
        """Whether the backend has a job of this name."""

    def quota_clients(self, attempts: int | None = None) -> tuple | None:
        """(Service Quotas client, SageMaker client) in the backend's region, for the quota check
        before a submit (`orchestrator.quotas`); None for a backend without service quotas."""


def names() -> tuple[str, ...]:
    """The backends' names, as job specs give them."""
    return tuple(_CLASSES)


def backend_class(name: str) -> type:
    """The class of backend `name` (its module imported now); InputError for an unknown name."""
    if name not in _CLASSES:
        raise InputError(f"unknown backend {name!r}", hint=f"use {' or '.join(_CLASSES)}")
    module, _, attribute = _CLASSES[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def create(name: str, *, region: str | None = None, **options) -> Backend:
    """The backend called `name`, built by its class's `create` (boto3 is imported only for a
    cloud backend). `options` (clients, `ledger`, `sleep`, `poll_seconds`...) pass through:
    sagemaker builds the clients not given for `region`, with botocore's retry config; local
    does not use `region`."""
    return backend_class(name).create(region, **options)


@dataclass(frozen=True)
class Located:
    """Which backend has a job, as `locate` found it."""

    backend: Backend
    entry: object | None  # the job's ledger `Entry`, None when the ledger does not know it
    # Neither the ledger nor this machine knows the job: it is looked for in DEFAULT's backend
    # in the command's region, which may not have it either.
    guessed: bool = False


def locate(job_name: str, *, region: str | None, ledger) -> Located:
    """The backend that owns `job_name`: the one the ledger recorded, in the ledger's region;
    else one that holds the job on this machine (a local job whose ledger row is gone); else
    DEFAULT's in `region` (default: `region.default_region`), since a job submitted from
    another machine is in neither."""
    entry = ledger.get(job_name)
    if entry is not None:
        return Located(create(entry.backend, region=entry.region, ledger=ledger), entry)
    for name in _CLASSES:
        if backend_class(name).holds(job_name):
            return Located(create(name, ledger=ledger), None)
    from orchestrator.region import default_region

    return Located(create(DEFAULT, region=default_region(region), ledger=ledger), None, guessed=True)


def record_status(ledger, backend_name: str, status: JobStatus, *, expect: tuple[str, ...]) -> None:
    """Move the job's ledger row to the state `status` implies (`Status.recorded`), when the
    row is this backend's, is in one of the states `expect`, and differs."""
    entry = ledger.get(status.job_name)
    target = Status(status.status).recorded()
    if entry is None or entry.status == target or entry.backend != backend_name:
        return
    ledger.transition(status.job_name, target, detail=status.failure_reason, expect=expect)
