"""One job: which backend holds it (`held_by`), submitting it (`dry_run`, then `schedule`, as
torchx's runner has them) and the names `--rerun` claims. Nothing here prints: notes go to the
caller's `say`, results are returned, failures are the project's errors (orchestrator/errors.py).

Contract:
- `held_by(job, region, ledger, say)`: a context manager yielding the backend that owns `job`
  (`backends.locate`); an UnknownJob or a backend that could not be asked, raised in the block,
  becomes the InputError or BackendError its docstring names.
- `dry_run(loaded, path, ...)`: the `Submission` (diagnosis, prepared request, backend, where it
  runs) that `schedule(submission, say)` then submits, claiming the next rerun name (at most
  RERUN_CLAIMS) when a concurrent `--rerun` took the one chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Say = Callable[[str], None]

# How many names a `submit --rerun` tries to claim before it gives up (each lost to a concurrent one).
RERUN_CLAIMS = 5


@contextmanager
def held_by(job: str, region: str | None, ledger, say: Say) -> Iterator[Any]:
    """The backend that owns `job` (`backends.locate`: the ledger's, else one that holds it on
    this machine, else the default cloud backend in --region), for the block that asks it
    about the job. A --region that differs from the ledger's is noted (`say`) and ignored:
    the job was submitted there.

    In the block, a backend that has no such job (UnknownJob) raises an InputError: for a
    name the ledger knows, saying what the ledger recorded (e.g. a submit that failed, and
    what to do about it); for a name known nowhere, saying where it looked. A backend that
    could not be asked for lack of usable credentials about a name known to neither the
    ledger nor this machine raises an InputError (exit 2) saying so: most often the name is
    mistyped. Without a connection or an answer from the endpoint it stays a BackendError
    (exit 1: a network failure is not bad input), saying the name is not known here."""
    from orchestrator import aws_errors, backends
    from orchestrator.errors import BackendError, InputError
    from orchestrator.paths import home

    found = backends.locate(job, region=region, ledger=ledger)
    backend, entry = found.backend, found.entry
    if entry is not None and region and region != backend.region:
        say(f"note: --region {region} ignored: the ledger ({ledger.path}) records {job} on {backend.place}")
    jobs = home() / "jobs"
    nowhere = f"it is in neither the ledger ({ledger.path}) nor the local jobs ({jobs})"
    check = (f"check the name (`ls {jobs}` lists the local jobs, `python -m orchestrator sweep status` the sweeps, "
             "`python -m orchestrator results` the jobs with results)")
    try:
        if found.guessed:  # asked here, so that a backend that cannot be asked is reported below, once
            backend = _cloud_holding(job, backend, ledger)
        yield backend
    except backends.UnknownJob as exc:
        if entry is None:
            if not found.guessed:
                raise
            raise InputError(f"no job {job}: {nowhere}, and {exc.message}",
                             hint=f"{check}; if it is a SageMaker or AWS Batch job in another region, pass --region"
                             ) from exc
        raise InputError(f"{exc.message}; the ledger records {job} ({entry.backend}, {entry.region}) as "
                         f"{ledger_status(entry)}", hint=_ledger_hint(entry, exc)) from exc
    except BackendError as exc:
        if not found.guessed or not aws_errors.never_asked(exc):
            raise
        if aws_errors.kind_of(exc) != "credentials":
            # No connection or no answer: a failure of the network or the endpoint (exit 1),
            # whatever the name; say too that it is not known here.
            raise BackendError(f"{exc.message}; {job} is in neither the ledger ({ledger.path}) nor the local "
                               f"jobs ({jobs}), so only {backend.place} could say whether it exists",
                               hint=exc.hint) from exc
        raise InputError(
            f"no job {job}: {nowhere}, and {backend.place} could not be asked: {exc.message}",
            hint=f"{check}; if it is a SageMaker job, "
                 + (exc.hint or "configure AWS credentials (aws configure, AWS_PROFILE)")) from exc


def _cloud_holding(job: str, default, ledger):
    """For a name neither the ledger nor this machine knows (a job submitted from another
    machine): the default cloud backend when it has the job, else another cloud backend in the
    same region that has it (an AWS Batch job), else the default, whose answer the caller
    reports. The default's errors propagate (the caller reports a backend it could not ask);
    another backend that cannot be asked is passed over."""
    from orchestrator import backends
    from orchestrator.errors import OrchestratorError

    if default.exists(job):
        return default
    for name in backends.cloud_names():
        if name == default.name:
            continue
        try:
            other = backends.create(name, region=default.region, ledger=ledger)
            if other.exists(job):
                return other
        except OrchestratorError:
            continue
    return default


def read_only_note(ledger) -> str | None:
    """The note for a read-only command that found the ledger not writable (see Ledger's
    read_only), else None."""
    if ledger.writable:
        return None
    return (f"note: the ledger {ledger.path} cannot be written here: it was read as it is, and what the backend "
            "said now is not recorded in it")


def ledger_status(entry) -> str:
    """A ledger row's status, and why when the ledger says: "failed: [permanent] ...",
    "planned (never created: ...)", or "planned (not submitted yet)" for a row that waits
    for its submit (a sweep's queued trial)."""
    if entry.status in ("planned", "submitting"):
        if entry.detail:
            return f"{entry.status} (never created: {entry.detail})"
        if entry.status == "planned":
            return "planned (not submitted yet)"
        return "submitting (its submit has not finished, or was interrupted)"
    return f"{entry.status}: {entry.detail}" if entry.detail else str(entry.status)


def _ledger_hint(entry, unknown) -> str | None:
    """What to do about a job the ledger knows and its backend does not (`unknown`, the
    backend's UnknownJob): the name is right, so never "check the name" for a job that was
    never created."""
    sweep = (f"`python -m orchestrator sweep status {entry.sweep_id}` shows its trial" if entry.sweep_id else None)
    if entry.status not in ("planned", "submitting"):
        return sweep or unknown.hint
    if entry.sweep_id:
        if entry.status == "planned" and not entry.detail:
            return f"{sweep}; the sweep's runner submits it in its turn"
        return (f"{sweep}; fix what kept it from being created, then `python -m orchestrator sweep resume "
                f"{entry.sweep_id}` submits it again")
    if entry.detail:
        return "the job was never created: fix that, then submit its spec again (`python -m orchestrator submit SPEC`)"
    if entry.status == "planned":
        return "submit its spec (`python -m orchestrator submit SPEC`) to create the job"
    # A submit still running, or one killed before it created the job (or a local job whose
    # folder was removed since: the backend says where its jobs are).
    again = ("if its submit was interrupted, submit its spec again (`python -m orchestrator submit SPEC`): that "
             "creates the job, or finds it if it exists")
    return f"{unknown.where}; {again}" if unknown.where else again


def rerun_name(loaded, backend, dry_run: bool, say: Say, local: bool = False) -> str:
    """The name `--rerun` submits under (`reruns.rerun_name`): free in the ledger (read only
    when there is one, so that a dry run writes nothing) and in the backend, which knows the
    jobs other machines submitted. A dry run that cannot ask the backend says so and uses the
    ledger alone."""
    from orchestrator import aws_errors, reruns
    from orchestrator.errors import BackendError
    from orchestrator.ledger import Ledger
    from orchestrator.paths import home

    names = {e.job_name for e in Ledger().entries()} if (home() / "ledger.sqlite3").exists() else set()
    try:
        return reruns.rerun_name(loaded, names, backend, local=local)
    except BackendError as exc:
        if not dry_run or not aws_errors.never_asked(exc):
            raise
        say(f"note: {backend.place} could not be asked which rerun names are taken ({exc.message}); the name "
            "below is free in this machine's ledger only")
        return reruns.rerun_name(loaded, names, local=local)


def check_local(loaded, path: Path) -> None:
    """InputError (exit 2) for a `--local` the spec cannot take."""
    from orchestrator.errors import InputError

    kind = loaded.backend_type
    if kind.cloud and not kind.local_run:
        raise InputError(f"{path}: --local runs a backend: batch spec's request on this machine; this spec's backend "
                         f"is {loaded.backend}",
                         hint="to try a SageMaker spec here, copy it with backend: local (see configs/local-tiny.yaml)")


@dataclass
class Submission:
    """A job as `dry_run` prepared it: what `schedule` submits. `backend` is None until the
    submit needs one (a plain dry run asks no backend); `run_here`: a batch spec's request run
    by the local backend (`--local`)."""

    loaded: Any
    diagnosis: Any
    prepared: Any
    backend: Any
    rerun: bool
    local: bool
    run_here: bool


def dry_run(loaded, path: Path, *, rerun: bool, local: bool, only_shown: bool, say: Say) -> Submission:
    """The doctor's diagnosis (target, cost and findings: the budget check, once) and the
    prepared request, under the name `--rerun` would take; `--local` checked (InputError).
    `only_shown` (`submit --dry-run`): a rerun name the backend cannot be asked about is the
    ledger's (said)."""
    from orchestrator import backends, request
    from orchestrator import doctor as doctor_rules

    diagnosis = doctor_rules.diagnose(loaded)
    backend = None
    # A batch spec's request, run by the local backend (a local spec needs no flag).
    run_here = local and loaded.backend_type.local_run
    if local:
        check_local(loaded, path)
        backend = backends.create("local")
        if not loaded.backend_type.cloud:
            # Said, not silent: the flag changes nothing for a spec that already runs here.
            say(f"note: {path} has backend: local, which runs on this machine anyway; --local changes nothing")
        name = rerun_name(loaded, backend, only_shown, say, local=run_here) if rerun else None
        prepared = request.prepare(diagnosis, job_name=name, local=backend if run_here else None)
    else:
        if rerun:
            # The doctor (and the budget) first: a spec it refuses needs no AWS call to say so.
            diagnosis.raise_for_errors()
            backend = backends.create(loaded.backend, region=loaded.region)
        prepared = request.prepare(diagnosis, job_name=rerun_name(loaded, backend, only_shown, say) if rerun else None)
    return Submission(loaded, diagnosis, prepared, backend, rerun, local, run_here)


def backend_of(submission: Submission):
    """The backend the submission goes to (made now when the dry run needed none)."""
    from orchestrator import backends

    if submission.backend is None:
        submission.backend = backends.create(submission.loaded.backend, region=submission.loaded.region)
    return submission.backend


def schedule(submission: Submission, say: Say):
    """Submit the prepared request; the backend's SubmitResult. A `--rerun` whose name a
    concurrent `submit --rerun` of this spec took between our choice and our submit (its
    ledger row or its job came first) claims the next free name, said, at most RERUN_CLAIMS
    times (then BackendError): another's job is never reported as ours."""
    from orchestrator import request
    from orchestrator.errors import BackendError

    backend = backend_of(submission)
    result = backend.submit(submission.prepared)
    claims = 1
    while submission.rerun and not result.created:
        if claims == RERUN_CLAIMS:
            raise BackendError(f"{result.job_name}: {RERUN_CLAIMS} rerun names in a row were taken by concurrent "
                               "submits of this spec", hint="run the command again once the others are done")
        say(f"note: {result.job_name} was taken by a concurrent submit meanwhile; trying the next free name")
        submission.prepared = request.prepare(
            submission.diagnosis, job_name=rerun_name(submission.loaded, backend, False, say, local=submission.run_here),
            local=backend if submission.run_here else None)
        result = backend.submit(submission.prepared)
        claims += 1
    return result
