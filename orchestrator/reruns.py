"""Which job name `submit --rerun` takes: the first of `<name>-<hash>`, `-r1`, `-r2`... that is
free everywhere it could be taken.

The local ledger knows only what this machine submitted; another laptop (or a fresh
ORCHESTRATOR_HOME) has submitted the same spec under the same names, and SageMaker holds them
all. So a name is taken when the ledger has it or the backend has a job of that name: the
names containing the spec's hash are listed once (`Backend.job_names`: on SageMaker
ListTrainingJobs NameContains, locally the jobs folder), and the chosen one is checked with
`Backend.exists` (DescribeTrainingJob, which sees a job the listing may not show yet).
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator import names
from orchestrator.spec import JobSpec, spec_hash


def first_free(spec: JobSpec, taken: Callable[[str], bool], *, local: bool = False) -> str:
    """The plain job name of `spec` if not `taken`, else the first free rerun name; with
    `local`, of its run on this machine (`names.local_job_name`)."""
    name, n = (names.local_job_name(spec) if local else names.job_name(spec)), 0
    while taken(name):
        n += 1
        name = names.local_job_name(spec, n) if local else names.rerun_job_name(spec, n)
    return name


def rerun_name(spec: JobSpec, ledger_names: set[str], backend=None, *, local: bool = False) -> str:
    """The name `submit --rerun` uses for `spec` (with `local`, `submit --local --rerun`: the
    local backend's run of a batch spec): free in `ledger_names` and, when `backend` is given,
    in the backend too (see the module docstring). Raises the backend's errors (BackendError
    when it cannot be asked)."""
    if backend is None:
        return first_free(spec, ledger_names.__contains__, local=local)
    listed = set(backend.job_names(spec_hash(spec)[:8]))

    def taken(name: str) -> bool:
        return name in ledger_names or name in listed or backend.exists(name)

    return first_free(spec, taken, local=local)
