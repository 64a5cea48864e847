"""What planning a job asks of a backend, of its class (no client, no instance, nothing sent):
the spec side of the backend interface, as SkyPilot's `clouds/cloud.py` is apart from what
runs a job.

The spec's checks ask it what a spec may say (`spec_problems`, `missing`, `infra_fields`,
`section`, `preferences`); the doctor its rules and whether it runs an instance type; cost its
bill (`estimate`); `request.prepare` where the job's objects go (`locations`), the job file and
the exact request (`job_file`, `build_request`, `operation`); the quota check what the job
asks of which quota (`quota_needs`); a cloud schedule its part (`scheduled`). A spec carries
its backend's class, looked up once when it is validated (`JobSpec.backend_type`).
What a running job asks of the backend is `orchestrator.backends.running.Backend`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from orchestrator.backends.running import Backend


class Planning(Protocol):
    """A backend's class as the spec, the doctor, cost, locations, quotas and the request ask it."""

    name: ClassVar[str]  # as job specs and the ledger name it
    # Jobs run in the cloud and are billed: results price them and join the backend's
    # billing (`describe`). False: a job of this machine, no cloud cost.
    cloud: ClassVar[bool]
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
