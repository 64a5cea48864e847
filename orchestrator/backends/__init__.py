"""Backends run jobs: `sagemaker` and `batch` (boto3) and `local` (this machine), chosen by name.

This package's own modules, each one concept, below the backends that implement them:
- `planning.Planning`: what planning a job asks of a backend's class (the spec's checks, the
  doctor's rules, the bill, locations, the request, quotas, preferences, its schedule part).
- `running.Backend`: what running a job asks of a backend (submit, status, logs, stop).
- `job`: the values a backend reports (JobStatus, JobProgress, Submitted) and its errors.
- `registry`: the backends by name (`names`, `backend_class`, `create`, `register`, `locate`).
None of them imports a backend; a backend (`backends/<name>/`, its class, request builder and
rules) is imported when first asked for. The names are re-exported here for the commands,
which ask `backends.create(...)`; the layers below import the module they need (no arrow
climbs to the package). Adding a backend: docs/ARCHITECTURE.md, "Adding a backend".

Clients (boto3) are given to the constructor, so tests inject at the same point the CLI does.
"""

from orchestrator.backends.job import (
    DamagedStatus,
    JobProgress,
    JobStatus,
    Submitted,
    UnknownJob,
    progress_of,
    record_status,
)
from orchestrator.backends.planning import Planning
from orchestrator.backends.registry import (
    DEFAULT,
    Located,
    backend_class,
    cloud_names,
    create,
    locate,
    names,
    register,
    unregister,
)
from orchestrator.backends.running import Backend, RunsHere

__all__ = [
    "DEFAULT", "Backend", "DamagedStatus", "JobProgress", "JobStatus", "Located", "Planning", "RunsHere",
    "Submitted", "UnknownJob", "backend_class", "cloud_names", "create", "locate", "names", "progress_of",
    "record_status", "register", "unregister",
]
