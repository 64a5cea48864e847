"""Which job name `submit --rerun` takes: the first of `<name>-<hash>`, `-r1`, `-r2`... that is
free everywhere it could be taken.

The local ledger knows only what this machine submitted; another laptop (or a fresh
ORCHESTRATOR_HOME) has submitted the same spec under the same names, and SageMaker holds them
all. So on SageMaker a name is taken when the ledger has it or SageMaker has a job of that
name: the names containing the spec's hash are listed once (ListTrainingJobs NameContains),
and the chosen one is checked with DescribeTrainingJob, which sees a job the listing may not
show yet. Locally, a name is taken when the ledger or the local jobs folder has it.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator import request
from orchestrator.spec import JobSpec, spec_hash


def first_free(spec: JobSpec, taken: Callable[[str], bool]) -> str:
    """The plain job name of `spec` if not `taken`, else the first free rerun name."""
    name, n = request.job_name(spec), 0
    while taken(name):
        n += 1
        name = request.rerun_job_name(spec, n)
    return name


def rerun_name(spec: JobSpec, ledger_names: set[str], backend=None) -> str:
    """The name `submit --rerun` uses for `spec`: free in `ledger_names` and, when `backend` is
    given, in the backend too (a SageMaker backend: see the module docstring; the local one:
    its jobs folder). Raises the backend's errors (BackendError when SageMaker cannot be asked)."""
    if backend is None:
        return first_free(spec, ledger_names.__contains__)
    if backend.name == "sagemaker":
        listed = set(backend.job_names(spec_hash(spec)[:8]))

        def taken(name: str) -> bool:
            return name in ledger_names or name in listed or backend.exists(name)

        return first_free(spec, taken)
    from orchestrator.paths import home

    jobs = home() / "jobs"
    return first_free(spec, lambda name: name in ledger_names or (jobs / name).exists())
