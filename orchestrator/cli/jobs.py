"""Commands on one job: submit, status, logs, stop. Only the backend protocol is used: the
backend is the spec's (submit) or the one that owns the job (`backends.locate`)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import typer

from orchestrator.cli.follow import print_logs, status_lines, wait
from orchestrator.cli.options import JOB_ARGUMENT, JOB_REGION_OPTION, POLL_MAX_S, finite_seconds
from orchestrator.cli.output import err, finding_text, out

app = typer.Typer()


@contextmanager
def job_backend(job: str, region: str | None, read_only: bool = False):
    """The backend that owns `job` (`backends.locate`: the ledger's, else one that holds it on
    this machine, else the default cloud backend in --region), for the block that asks it
    about the job. A --region that differs from the ledger's is noted on stderr and ignored:
    the job was submitted there.

    In the block, a backend that has no such job (UnknownJob) raises an InputError: for a
    name the ledger knows, saying what the ledger recorded (e.g. a submit that failed, and
    what to do about it); for a name known nowhere, saying where it looked. A backend that
    could not be asked for lack of usable credentials about a name known to neither the
    ledger nor this machine raises an InputError (exit 2) saying so: most often the name is
    mistyped. Without a connection or an answer from the endpoint it stays a BackendError
    (exit 1: a network failure is not bad input), saying the name is not known here.
    `read_only` (status, logs): a ledger this process cannot write is read as it is (noted on
    stderr), and what the backend says is not recorded in it."""
    from orchestrator import aws_errors, backends
    from orchestrator.errors import BackendError, InputError
    from orchestrator.ledger import Ledger
    from orchestrator.paths import home

    ledger = Ledger(read_only=read_only)
    found = backends.locate(job, region=region, ledger=ledger)
    backend, entry = found.backend, found.entry
    if entry is not None and region and region != backend.region:
        err(f"note: --region {region} ignored: the ledger ({ledger.path}) records {job} on {backend.place}")
    jobs = home() / "jobs"
    nowhere = f"it is in neither the ledger ({ledger.path}) nor the local jobs ({jobs})"
    check = (f"check the name (`ls {jobs}` lists the local jobs, `python -m orchestrator sweep status` the sweeps, "
             "`python -m orchestrator results` the jobs with results)")
    try:
        if found.guessed:  # asked here, so that a backend that cannot be asked is reported below, once
            backend = _cloud_holding(job, backend, ledger)
        yield backend
        note_read_only(ledger)
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
    for name in backends.names():
        if name == default.name or not backends.backend_class(name).cloud:
            continue
        try:
            other = backends.create(name, region=default.region, ledger=ledger)
            if other.exists(job):
                return other
        except OrchestratorError:
            continue
    return default


def note_read_only(ledger) -> None:
    """Say so when a read-only command found the ledger not writable (see Ledger's read_only)."""
    if not ledger.writable:
        err(f"note: the ledger {ledger.path} cannot be written here: it was read as it is, and what the backend "
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


def _progress_line(st, progress) -> str:
    """`step      12 of 500 (heartbeat 2026-...Z)`: the job's last word from its results.json; a
    heartbeat of a job that has ended is its last known step (killed before it finished)."""
    steps = f"step      {progress.steps_done if progress.steps_done is not None else '?'}"
    if progress.steps is not None:
        steps += f" of {progress.steps}"
    if progress.record == "absent":
        line = f"{steps} (no results.json at {progress.uri})"
    elif progress.record == "newer":
        line = (f"{steps} (results.json at {progress.uri} is {progress.schema}, written by a newer version of the "
                "orchestrator: upgrade this one to read it)")
    elif progress.record == "running":
        when = f"heartbeat {progress.at}" if progress.at else "heartbeat"
        last = ": its last known step (it ended before writing its final results)" if st.terminal else ""
        line = f"{steps} ({when}{last})"
    else:
        line = f"{steps} (results.json: {progress.record})"
    if progress.newer is not None:
        # Shown is what exists: the store's record is what `results` reads; the job's own later
        # record is named for what it is, never shown as the job's step.
        newer = progress.newer
        of = f" of {newer.steps}" if newer.steps is not None else ""
        line += (f"\n          not stored: the job's own copy says step {newer.steps_done if newer.steps_done is not None else '?'}"
                 f"{of} ({newer.record}) at {newer.uri}; writing it to the store failed")
    return line


def _progress_json(progress) -> dict | None:
    """--json's `progress`; `newer` only where there is one (a local job's unstored record)."""
    if progress is None:
        return None
    import dataclasses

    data = dataclasses.asdict(progress)
    for extra in ("newer", "schema"):
        if data[extra] is None:
            del data[extra]
    return data


# How many names a `submit --rerun` tries to claim before it gives up (each lost to a concurrent one).
RERUN_CLAIMS = 5


def _rerun_name(loaded, backend, dry_run: bool, local: bool = False) -> str:
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
        err(f"note: {backend.place} could not be asked which rerun names are taken ({exc.message}); the name "
            "below is free in this machine's ledger only")
        return reruns.rerun_name(loaded, names, local=local)


def _check_local(loaded, path: Path) -> None:
    """InputError (exit 2) for a `--local` the spec cannot take."""
    from orchestrator import backends
    from orchestrator.errors import InputError

    kind = backends.backend_class(loaded.backend)
    if kind.cloud and not kind.local_run:
        raise InputError(f"{path}: --local runs a backend: batch spec's request on this machine; this spec's backend "
                         f"is {loaded.backend}",
                         hint="to try a SageMaker spec here, copy it with backend: local (see configs/local-tiny.yaml)")


@app.command()
def submit(
    path: Path = typer.Argument(..., help="Job spec YAML."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what `plan` prints (the exact request); submit "
                                 "nothing."),
    wait_: bool = typer.Option(False, "--wait", help="Show the job's progress until it ends; exit 1 if it fails or "
                               "is stopped."),
    interval: float | None = typer.Option(None, "--interval", min=0.05, max=POLL_MAX_S, callback=finite_seconds, help="Seconds between status polls "
                                          "(--wait; default 15 on SageMaker, 30 on Batch, 2 locally; at least 5 on "
                                          "SageMaker and Batch, 0.1 locally: a shorter one is raised, with a note)."),
    rerun: bool = typer.Option(False, "--rerun", help="If this spec was submitted before, submit it again as a "
                               "new job <name>-<hash>-rN (the first N free in the ledger and in SageMaker, which "
                               "knows other machines' jobs; a long name is shortened to fit 63 characters)."),
    local: bool = typer.Option(False, "--local", help="Run a batch spec on this machine first: its exact SubmitJob "
                               "request, through the image's start script and the bootstrap, against the local "
                               "store, as job <name>-<hash>-local (the local backend; no AWS call)."),
    quota_check_: bool = typer.Option(True, "--quota-check/--no-quota-check", help="Read the account's Service "
                                      "Quotas first and exit 2 when any instance type it may run on falls short "
                                      "of its quota (SageMaker checks every preference; Batch)."),
) -> None:
    """Submit a job: doctor, budget and quota checks, then the spec's backend. Prints the job name.

    Submitting the same spec again creates nothing: the job name comes from the spec's hash and
    the ledger (and SageMaker) already know it. `--rerun` makes a new job of the same spec;
    with `--dry-run` it shows the request under the name the real submit would use. `--local`
    runs a `backend: batch` spec's request on this machine (the doctor's checks are the real
    submit's), beside the real job, never as it.
    """
    import shlex

    from orchestrator import backends, request, spec
    from orchestrator import doctor as doctor_rules
    from orchestrator.cli.specs import print_plan
    from orchestrator.errors import BackendError

    loaded = spec.load(path)
    diagnosis = doctor_rules.diagnose(loaded)  # target, cost and findings (the budget check): once
    backend = None
    # A batch spec's request, run by the local backend (a local spec needs no flag).
    run_here = local and backends.backend_class(loaded.backend).local_run
    if local:
        _check_local(loaded, path)
        backend = backends.create("local")
        if not backends.backend_class(loaded.backend).cloud:
            # Said, not silent: the flag changes nothing for a spec that already runs here.
            err(f"note: {path} has backend: local, which runs on this machine anyway; --local changes nothing")
        name = _rerun_name(loaded, backend, dry_run, local=run_here) if rerun else None
        prepared = request.prepare(diagnosis, job_name=name, local=run_here)
    else:
        if rerun:
            # The doctor (and the budget) first: a spec it refuses needs no AWS call to say so.
            diagnosis.raise_for_errors()
            backend = backends.create(loaded.backend, region=loaded.region)
        prepared = request.prepare(diagnosis, job_name=_rerun_name(loaded, backend, dry_run) if rerun else None)
    if dry_run:
        print_plan(loaded, prepared, as_json=False)
        return
    doctor_rules.raise_for(loaded, prepared.findings)  # errors, including a cost above the budget: exit 2
    for finding in prepared.findings:
        err(finding_text(loaded, finding))
    backend = backend or backends.create(loaded.backend, region=loaded.region)
    if quota_check_ and not local:
        from orchestrator.cli import quota_check

        # Before the source upload and CreateTrainingJob: exit 2 when nothing fits.
        quota_check.run(loaded, tolerant=True, backend=backend)
    if run_here:
        err("runs on this machine: no cloud cost (the bound below is the real job's on AWS Batch)")
        if prepared.job["workers_per_node"] != prepared.target.workers_per_node:
            err(f"note: runtime xla runs one process on this machine's CPU (PJRT): the local run trains 1 worker "
                f"where {loaded.instance.type} runs {prepared.target.workers_per_node}, one per NeuronCore")
    err(prepared.estimate.describe())
    backend = backend or backends.create(loaded.backend, region=loaded.region)
    result = backend.submit(prepared)
    claims = 1
    while rerun and not result.created:
        # A concurrent `submit --rerun` of this spec took the name between our choice and our
        # submit (its ledger row or its job came first): never report its job as ours.
        if claims == RERUN_CLAIMS:
            raise BackendError(f"{result.job_name}: {RERUN_CLAIMS} rerun names in a row were taken by concurrent "
                               "submits of this spec", hint="run the command again once the others are done")
        err(f"note: {result.job_name} was taken by a concurrent submit meanwhile; trying the next free name")
        prepared = request.prepare(diagnosis, job_name=_rerun_name(loaded, backend, False, local=run_here),
                                   local=run_here)
        result = backend.submit(prepared)
        claims += 1
    err(f"submitted to {backend.label}" if result.created else
        f"already submitted to {backend.label} earlier; nothing created")
    out(result.job_name)
    # `submit SPEC --wait` finds the same job again by its name; a rerun's name is not the spec's.
    follow_again = (f"python -m orchestrator logs -f {result.job_name}" if rerun else
                    f"python -m orchestrator submit {shlex.quote(str(path))}{' --local' if local else ''} --wait")
    if wait_:
        from orchestrator import polling

        seconds, raised = polling.at_least(interval or backend.wait_interval_s, [backend.name], "--interval")
        if raised and interval is not None:
            err(raised)
        wait(backend, result.job_name, seconds, reattach=follow_again)
    else:
        err(f"next: `python -m orchestrator status {result.job_name}` shows it, `python -m orchestrator logs -f "
            f"{result.job_name}` follows its output to the end" + ("" if rerun else f", `{follow_again}` waits for it"))


@app.command()
def status(
    job: str = JOB_ARGUMENT,
    region: str | None = JOB_REGION_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Show a job's status, secondary status, failure reason and billable seconds.

    Exit 0 whenever the status could be read, also for a failed job.
    """
    import dataclasses

    with job_backend(job, region, read_only=True) as backend:
        st = backend.status(job)
        progress = backend.progress(job)
    if as_json:
        out(json.dumps({**dataclasses.asdict(st), "backend": backend.name, "terminal": st.terminal,
                        "spot_savings": st.spot_savings,
                        "progress": _progress_json(progress)}, indent=2))
        return
    for text in status_lines(st, here=not backend.cloud):
        out(text)
    if progress is not None:
        out(_progress_line(st, progress))


@app.command()
def logs(
    job: str = JOB_ARGUMENT,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the job ends."),
    region: str | None = JOB_REGION_OPTION,
) -> None:
    """Print the job's log lines from every host, each prefixed by its host (algo-N), in time order.

    stdout carries log lines only; a job with no logs (yet) gets a note on stderr, exit 0.
    With -f, the last line (on stderr) is how the job ended, with its failure reason.
    """
    with job_backend(job, region, read_only=True) as backend:
        print_logs(backend, job, follow)


@app.command()
def stop(
    job: str = JOB_ARGUMENT,
    region: str | None = JOB_REGION_OPTION,
) -> None:
    """Ask the backend to stop a job; `status` then shows stopping, and stopped.

    Exit 2 for a job the backend does not know; exit 0, stopping nothing, for a job that has
    already ended or is stopping, and for one the ledger records as ended that was never
    created (a sweep trial cancelled before submission).
    """
    from orchestrator.backends import DamagedStatus, UnknownJob
    from orchestrator.lifecycle import Status

    with job_backend(job, region) as backend:
        try:
            st = backend.status(job)  # an unknown job is an InputError (exit 2): nothing to ask to stop
        except DamagedStatus as exc:
            # The job's own record is unreadable: the backend stops it from its process record
            # alone, or says (DamagedStatus, exit 2) that nothing of it runs.
            backend.stop(job)
            err(f"note: {exc.message}")
            out(f"{job}: stop requested (its supervisor was signalled; its status file cannot tell more)")
            return
        except UnknownJob:
            entry = backend.ledger.get(job)
            if entry is None or not entry.status.is_terminal():
                raise
            # Ended in the ledger and unknown to the backend (a sweep trial cancelled before
            # submission, a submit refused for good): nothing runs under this name.
            out(f"{job}: the ledger records it as {ledger_status(entry)}, and the {backend.name} backend has no "
                "job of this name; nothing to stop")
            return
        if st.terminal:
            out(f"{job} already {st.status}; nothing to stop")
            return
        if st.status == Status.STOPPING:
            out(f"{job} is already stopping; nothing more to do")
            return
        backend.stop(job)
    out(f"{job}: stop requested")
