"""The command line. The only module that prints or exits.

Exit codes: 0 ok, 2 bad input (spec, flags, files), 1 backend or job failure. Errors are
printed as one clear message (with a hint); `--debug` shows the traceback instead.
Heavy imports (boto3, torch, matplotlib) happen inside the commands that need them, so
`validate`, `doctor`, `plan` and `schema` start fast and never import torch.
"""

from __future__ import annotations

import errno
import inspect
import json
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path

import typer

from orchestrator.errors import OrchestratorError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Train Vision Transformers on AWS Trainium through Amazon SageMaker.")
_state = {"debug": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors.")) -> None:
    _state["debug"] = debug


def _out(text: str = "") -> None:
    typer.echo(text)


def _err(text: str) -> None:
    typer.echo(text, err=True)


def _plain(value):
    """`value` as a rich Text shown verbatim. Every piece of data that goes into a rich Table,
    status line or live display passes through here: rich reads a plain str as markup, so a
    `[/opt/ml/code]` in a failure reason would raise MarkupError and a `[user]` would vanish."""
    from rich.text import Text

    return Text("" if value is None else str(value))


@app.command()
def schema() -> None:
    """Print the job spec's JSON Schema (for editors)."""
    from orchestrator import spec

    _out(json.dumps(spec.json_schema(), indent=2))


@app.command()
def validate(path: Path = typer.Argument(..., help="Job spec YAML.")) -> None:
    """Check a job spec: fields, types, cross-field and Neuron rules. Exit 2 with locations if wrong."""
    from orchestrator import doctor as doctor_rules
    from orchestrator import spec

    loaded = spec.load(path)
    findings = doctor_rules.check(loaded)
    for finding in findings:
        if finding.severity != "error":
            _err(_finding_text(loaded, finding))
    doctor_rules.raise_for(loaded, findings)
    _out(f"{path}: ok ({loaded.name}, {loaded.backend}, {loaded.instance.type} x{loaded.instance.count})")


# --- arguments checked before any call -----------------------------------------------------
# A malformed job name or region would otherwise reach AWS (botocore's "Parameter validation
# failed", a DNS lookup of a made-up endpoint) or a path on disk; refuse it here, exit 2.

_JOB_NAME_RULE = "1-63 letters, digits and dashes, starting and ending with a letter or digit (SageMaker's rule)"


def _check_job_arg(value: str | None, argument: str) -> str | None:
    """`value` if it is a valid SageMaker training job name; InputError naming `argument` if not."""
    from orchestrator.errors import InputError
    from orchestrator.request import JOB_NAME_PATTERN, MAX_JOB_NAME

    if value is None:
        return None
    if not value or len(value) > MAX_JOB_NAME or not JOB_NAME_PATTERN.match(value):
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise InputError(f"{argument} {shown!r} is not a job name: a job name is {_JOB_NAME_RULE}",
                         hint="use the job name `submit` printed (a sweep's jobs: `python -m orchestrator sweep status "
                              "ID`)")
    return value


def _job_argument(value: str) -> str:
    return _check_job_arg(value, "JOB")


def _job_option(value: str | None) -> str | None:
    return _check_job_arg(value, "--job")


def _check_region(value):
    """A --region value (None, one, or a list of them) if each looks like an AWS region name."""
    from orchestrator.errors import InputError
    from orchestrator.spec import REGION_PATTERN

    for region in [value] if isinstance(value, str) else (value or []):
        if not re.fullmatch(REGION_PATTERN, region):
            raise InputError(f"--region {region!r} is not an AWS region name",
                             hint="e.g. us-east-1, eu-west-1, us-gov-west-1 or cn-north-1")
    return value


# The region of every command that calls AWS without one named (backends.sagemaker.default_region).
_REGION_DEFAULTS = ("AWS_REGION, else AWS_DEFAULT_REGION, else the region of your AWS config profile "
                    "(AWS_PROFILE), else us-east-1")


def _finding_text(loaded, finding) -> str:
    file, line, column = loaded.locate(finding.path)
    where = f"{file}:{line}:{column}" if line else (file or "<spec>")
    return f"{finding.severity}: {finding.rule} {where} {finding.path}: {finding.message}\n  fix: {finding.fix}"


@app.command()
def doctor(path: Path = typer.Argument(..., help="Job spec YAML.")) -> None:
    """Run the Neuron-aware rules on a job spec. Exit 2 when any finding is an error."""
    from orchestrator import doctor as doctor_rules
    from orchestrator import spec

    loaded = spec.load(path)
    findings = doctor_rules.check(loaded)
    for finding in findings:
        _out(_finding_text(loaded, finding))
    bad = doctor_rules.errors(findings)
    _out(f"{path}: {len(bad)} error(s), {len(findings) - len(bad)} other finding(s)")
    if bad:
        raise typer.Exit(code=2)


@app.command()
def plan(
    path: Path = typer.Argument(..., help="Job spec YAML."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: request, estimate, findings."),
) -> None:
    """Show the exact CreateTrainingJob request that submit sends, and its cost bound."""
    from orchestrator import request, spec

    loaded = spec.load(path)
    _print_plan(loaded, request.prepare(loaded), as_json)


def _print_plan(loaded, prepared, as_json: bool) -> None:
    """What `plan` prints for a prepared request; exit 2 (raised) on doctor errors."""
    from orchestrator import doctor as doctor_rules

    doctor_rules.raise_for(loaded, prepared.findings)
    for finding in prepared.findings:
        _err(_finding_text(loaded, finding))
    if as_json:
        _out(json.dumps({
            "request": prepared.request,
            "estimate": prepared.estimate.to_json(),
            "findings": [f.to_json(loaded) for f in prepared.findings],
            "source_uri": prepared.source_uri,
            "archive_sha256": prepared.archive_sha256,
        }, indent=2))
        return
    _out(json.dumps(prepared.request, indent=2))
    _out(f"source archive: {prepared.source_uri} ({len(prepared.archive)} bytes, sha256 {prepared.archive_sha256})")
    _out(prepared.estimate.describe())


@app.command()
def smoke(
    path: Path = typer.Argument(..., help="Job spec YAML."),
    steps: int = typer.Option(5, "--steps", help="Training steps to run (the first 2 may compile)."),
) -> None:
    """Run a few steps of the spec's model here (XLA on PJRT_DEVICE=CPU) and fail, exit 1,
    if graphs are still compiled after warmup (dynamic shapes)."""
    from orchestrator import smoke as smoke_check
    from orchestrator import spec

    loaded = spec.load(path)
    result = smoke_check.run(loaded, steps, on_progress=_out)
    _out(f"{path}: ok: {result.message}")


# --- jobs: submit, status, logs, stop -------------------------------------------------------

_JOB_REGION_OPTION = typer.Option(None, "--region", callback=_check_region, help="Region of a job the ledger "
                                  f"does not know (default: {_REGION_DEFAULTS}). A job the ledger knows is looked "
                                  "up where the ledger recorded it; a different --region is noted and ignored.")
_JOB_ARGUMENT = typer.Argument(..., callback=_job_argument, help="Job name (as printed by submit).")


@contextmanager
def _job_backend(job: str, region: str | None, read_only: bool = False):
    """The backend that owns `job`, for the block that asks it about the job: the one the
    ledger recorded, in the ledger's region (a different --region is noted on stderr and
    ignored: the job was submitted there); else the local backend when the local jobs folder
    has the job; else SageMaker in --region (default: `_REGION_DEFAULTS`), since a job
    submitted from another machine is in neither.

    In the block, a backend that has no such job (UnknownJob) raises an InputError: for a
    name the ledger knows, saying what the ledger recorded (e.g. a submit that failed, and
    what to do about it); for a name known nowhere, saying where it looked. A SageMaker that
    could not be asked for lack of usable credentials about a name known to neither the
    ledger nor the local jobs raises an InputError (exit 2) saying so: most often the name is
    mistyped. Without a connection or an answer from the endpoint it stays a BackendError
    (exit 1: a network failure is not bad input), saying the name is not known here.
    `read_only` (status, logs): a ledger this process cannot write is read as it is (noted on
    stderr), and what the backend says is not recorded in it."""
    from orchestrator import aws, backends
    from orchestrator.backends.sagemaker import could_not_ask, default_region
    from orchestrator.errors import BackendError, InputError
    from orchestrator.ledger import Ledger
    from orchestrator.paths import home

    ledger = Ledger(read_only=read_only)
    entry = ledger.get(job)
    jobs = home() / "jobs"
    if entry is not None:
        if region and (entry.backend != "sagemaker" or region != entry.region):
            where = f"SageMaker in {entry.region}" if entry.backend == "sagemaker" else f"the {entry.backend} backend"
            _err(f"note: --region {region} ignored: the ledger ({ledger.path}) records {job} on {where}")
        backend = backends.create(entry.backend, region=entry.region, ledger=ledger)
    elif (jobs / job / "status.json").exists() or (jobs / job / "supervisor.pid").exists():
        # A local job whose ledger row is gone (its status file may be gone too: its process
        # record is enough to stop it).
        backend = backends.create("local", ledger=ledger)
    else:
        region = default_region(region)
        backend = backends.create("sagemaker", region=region, ledger=ledger)
    nowhere = f"it is in neither the ledger ({ledger.path}) nor the local jobs ({jobs})"
    check = (f"check the name (`ls {jobs}` lists the local jobs, `python -m orchestrator sweep status` the sweeps, "
             "`python -m orchestrator results` the jobs with results)")
    try:
        yield backend
        _note_read_only(ledger)
    except backends.UnknownJob as exc:
        if entry is None:
            if backend.name != "sagemaker":
                raise
            raise InputError(f"no job {job}: {nowhere}, and {exc.message}",
                             hint=f"{check}; if it is a SageMaker job in another region, pass --region") from exc
        raise InputError(f"{exc.message}; the ledger records {job} ({entry.backend}, {entry.region}) as "
                         f"{_ledger_state(entry)}", hint=_ledger_hint(entry, exc.hint)) from exc
    except BackendError as exc:
        if entry is not None or backend.name != "sagemaker" or not could_not_ask(exc):
            raise
        failure = aws.classify(exc)
        if failure is None or failure.kind != "credentials":
            # No connection or no answer: a failure of the network or the endpoint (exit 1),
            # whatever the name; say too that it is not known here.
            raise BackendError(f"{exc.message}; {job} is in neither the ledger ({ledger.path}) nor the local "
                               f"jobs ({jobs}), so only SageMaker in {region} could say whether it exists",
                               hint=exc.hint) from exc
        raise InputError(
            f"no job {job}: {nowhere}, and SageMaker could not be asked in {region}: {exc.message}",
            hint=f"{check}; if it is a SageMaker job, "
                 + (exc.hint or "configure AWS credentials (aws configure, AWS_PROFILE)")) from exc


def _note_read_only(ledger) -> None:
    """Say so when a read-only command found the ledger not writable (see Ledger's read_only)."""
    if not ledger.writable:
        _err(f"note: the ledger {ledger.path} cannot be written here: it was read as it is, and what the backend "
             "said now is not recorded in it")


def _ledger_state(entry) -> str:
    """A ledger row's state, and why when the ledger says: "failed: [permanent] ...",
    "planned (never created: ...)", or "planned (not submitted yet)" for a row that waits
    for its submit (a sweep's queued trial)."""
    if entry.state in ("planned", "submitting"):
        if entry.detail:
            return f"{entry.state} (never created: {entry.detail})"
        if entry.state == "planned":
            return "planned (not submitted yet)"
        return "submitting (its submit has not finished, or was interrupted)"
    return f"{entry.state}: {entry.detail}" if entry.detail else entry.state


def _ledger_hint(entry, backend_hint: str | None) -> str | None:
    """What to do about a job the ledger knows and its backend does not: the name is right,
    so never "check the name" for a job that was never created."""
    sweep = (f"`python -m orchestrator sweep status {entry.sweep_id}` shows its trial" if entry.sweep_id else None)
    if entry.state not in ("planned", "submitting"):
        return sweep or backend_hint
    if entry.sweep_id:
        if entry.state == "planned" and not entry.detail:
            return f"{sweep}; the sweep's runner submits it in its turn"
        return (f"{sweep}; fix what kept it from being created, then `python -m orchestrator sweep resume "
                f"{entry.sweep_id}` submits it again")
    if entry.detail:
        return "the job was never created: fix that, then submit its spec again (`python -m orchestrator submit SPEC`)"
    if entry.state == "planned":
        return "submit its spec (`python -m orchestrator submit SPEC`) to create the job"
    # A submit still running, or one killed before it created the job (or a local job whose
    # folder was removed since: the local backend's hint says where the folders are).
    again = ("if its submit was interrupted, submit its spec again (`python -m orchestrator submit SPEC`): that "
             "creates the job, or finds it if it exists")
    return f"{backend_hint}; {again}" if entry.backend == "local" and backend_hint else again


def _status_lines(st) -> list[str]:
    lines = [f"job       {st.job_name}",
             f"status    {st.status}" + (f" ({st.secondary})" if st.secondary else "")]
    if st.failure_reason:
        lines.append(f"failure   {st.failure_reason}")
    if st.billable_seconds is not None:
        savings = f" (spot saved {st.spot_savings:.0%})" if st.spot_savings is not None else ""
        lines.append(f"billable  {st.billable_seconds} s{savings}")
    if st.instance_type:
        lines.append(f"instance  {st.instance_type} x{st.instance_count or 1}{' spot' if st.spot else ''}")
    if st.output_uri:
        lines.append(f"output    {st.output_uri}")
    return lines


def _progress_line(st, progress) -> str:
    """`step      12 of 500 (heartbeat 2026-...Z)`: the job's last word from its results.json; a
    heartbeat of a job that has ended is its last known step (killed before it finished)."""
    steps = f"step      {progress.steps_done if progress.steps_done is not None else '?'}"
    if progress.steps is not None:
        steps += f" of {progress.steps}"
    if progress.record == "running":
        when = f"heartbeat {progress.at}" if progress.at else "heartbeat"
        last = ": its last known step (it ended before writing its final results)" if st.terminal else ""
        return f"{steps} ({when}{last})"
    return f"{steps} (results.json: {progress.record})"


def _clock_text(elapsed: float) -> str:
    seconds = int(elapsed)
    return f"{seconds // 60:d}m{seconds % 60:02d}s"


def _wait(backend, job_name: str, interval: float, reattach: str | None = None, *, sleep=None, clock=None,
          interactive: bool | None = None):
    """Follow the job until it ends (`waiting.follow`), showing status, secondary status and
    elapsed time; through network outages (it says so, and keeps waiting); with a heartbeat
    line every `waiting.heartbeat_seconds()` when stderr is not a terminal. Raise JobFailed
    when the job failed or stopped. `reattach` is the command that follows the job again."""
    import time

    from rich.console import Console

    from orchestrator import waiting
    from orchestrator.errors import JobFailed

    console = Console(stderr=True, highlight=False)
    interactive = console.is_terminal if interactive is None else interactive
    heartbeat = None if interactive else waiting.heartbeat_seconds()
    again = reattach or f"python -m orchestrator status {job_name}"

    def text_of(st) -> str:
        return f"{job_name}: {st.status}" + (f" ({st.secondary})" if st.secondary else "")

    try:
        with console.status(_plain(f"{job_name}: waiting")) as line:
            def on_status(st, elapsed: float, why: str) -> None:
                line.update(_plain(f"{text_of(st)}  {int(elapsed) // 3600}:{int(elapsed) // 60 % 60:02d}:"
                                   f"{int(elapsed) % 60:02d}"))
                still = "; still waiting" if why == "heartbeat" else ""
                console.print(f"[{_clock_text(elapsed)}] {text_of(st)}{still}", markup=False, soft_wrap=True)

            def on_unreachable(message: str, elapsed: float, retry_in: float) -> None:
                console.print(f"[{_clock_text(elapsed)}] {job_name}: status unknown: {message}. The job keeps running "
                              f"in SageMaker; still waiting, next try in {retry_in:.0f} s (Ctrl-C stops waiting; "
                              f"`{again}` follows it again)", markup=False, soft_wrap=True)

            st = waiting.follow(lambda: backend.status(job_name), interval=interval, on_status=on_status,
                                on_unreachable=on_unreachable, heartbeat_s=heartbeat,
                                sleep=sleep or time.sleep, clock=clock or time.monotonic)
    except KeyboardInterrupt:
        # Ctrl-C ends the waiting, not the job: say so, and how to get back to it.
        _err(f"stopped waiting; {job_name} keeps running. `python -m orchestrator status {job_name}` shows it, "
             f"`python -m orchestrator stop {job_name}` stops it")
        raise typer.Exit(code=130) from None
    for text in _status_lines(st):
        _out(text)
    if st.status != "completed":
        reason = f": {st.failure_reason}" if st.failure_reason else ""
        raise JobFailed(f"job {job_name} {st.status}{reason}",
                        hint=f"`python -m orchestrator logs {job_name}` shows its output")
    return st


def _rerun_name(loaded, backend, dry_run: bool) -> str:
    """The name `--rerun` submits under (`reruns.rerun_name`): free in the ledger (read only
    when there is one, so that a dry run writes nothing) and in the backend, SageMaker being
    the truth for jobs other machines submitted. A dry run that cannot ask SageMaker says so
    and uses the ledger alone."""
    from orchestrator import reruns
    from orchestrator.backends.sagemaker import could_not_ask
    from orchestrator.errors import BackendError
    from orchestrator.ledger import Ledger
    from orchestrator.paths import home

    names = {e.job_name for e in Ledger().entries()} if (home() / "ledger.sqlite3").exists() else set()
    try:
        return reruns.rerun_name(loaded, names, backend)
    except BackendError as exc:
        if not dry_run or not could_not_ask(exc):
            raise
        _err(f"note: SageMaker could not be asked which rerun names are taken ({exc.message}); the name below is "
             "free in this machine's ledger only")
        return reruns.rerun_name(loaded, names)


@app.command()
def submit(
    path: Path = typer.Argument(..., help="Job spec YAML."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what `plan` prints (the exact request); submit "
                                 "nothing."),
    wait: bool = typer.Option(False, "--wait", help="Show the job's progress until it ends; exit 1 if it fails or "
                              "is stopped."),
    interval: float | None = typer.Option(None, "--interval", min=0.05, help="Seconds between status polls "
                                          "(--wait; default 15 on SageMaker, 2 locally)."),
    rerun: bool = typer.Option(False, "--rerun", help="If this spec was submitted before, submit it again as a "
                               "new job <name>-<hash>-rN (the first N free in the ledger and in SageMaker, which "
                               "knows other machines' jobs; a long name is shortened to fit 63 characters)."),
) -> None:
    """Submit a job: doctor and budget checks, then the spec's backend. Prints the job name.

    Submitting the same spec again creates nothing: the job name comes from the spec's hash and
    the ledger (and SageMaker) already know it. `--rerun` makes a new job of the same spec;
    with `--dry-run` it shows the request under the name the real submit would use.
    """
    from orchestrator import backends, request, spec
    from orchestrator import doctor as doctor_rules

    loaded = spec.load(path)
    diagnosis = doctor_rules.diagnose(loaded)  # target, cost and findings (the budget check): once
    backend = None
    if rerun:
        # The doctor (and the budget) first: a spec it refuses needs no AWS call to say so.
        diagnosis.raise_for_errors()
        backend = backends.create(loaded.backend, region=loaded.region)
    prepared = request.prepare(diagnosis, job_name=_rerun_name(loaded, backend, dry_run) if rerun else None)
    if dry_run:
        _print_plan(loaded, prepared, as_json=False)
        return
    doctor_rules.raise_for(loaded, prepared.findings)  # errors, including a cost above the budget: exit 2
    for finding in prepared.findings:
        _err(_finding_text(loaded, finding))
    _err(prepared.estimate.describe())
    backend = backend or backends.create(loaded.backend, region=loaded.region)
    result = backend.submit(prepared)
    where = f"{loaded.backend} in {loaded.region}" if loaded.backend == "sagemaker" else loaded.backend
    _err(f"submitted to {where}" if result.created else f"already submitted to {where} earlier; nothing created")
    _out(result.job_name)
    import shlex

    # `submit SPEC --wait` finds the same job again by its name; a rerun's name is not the spec's.
    follow_again = (f"python -m orchestrator logs -f {result.job_name}" if rerun else
                    f"python -m orchestrator submit {shlex.quote(str(path))} --wait")
    if wait:
        _wait(backend, result.job_name, interval or (15.0 if loaded.backend == "sagemaker" else 2.0),
              reattach=follow_again)
    else:
        _err(f"next: `python -m orchestrator status {result.job_name}` shows it, `python -m orchestrator logs -f "
             f"{result.job_name}` follows its output to the end"
             + ("" if rerun else f", `{follow_again}` waits for it"))


@app.command()
def status(
    job: str = _JOB_ARGUMENT,
    region: str | None = _JOB_REGION_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Show a job's status, secondary status, failure reason and billable seconds.

    Exit 0 whenever the status could be read, also for a failed job.
    """
    import dataclasses

    with _job_backend(job, region, read_only=True) as backend:
        st = backend.status(job)
        progress = backend.progress(job)
    if as_json:
        _out(json.dumps({**dataclasses.asdict(st), "backend": backend.name, "terminal": st.terminal,
                         "spot_savings": st.spot_savings,
                         "progress": dataclasses.asdict(progress) if progress else None}, indent=2))
        return
    for text in _status_lines(st):
        _out(text)
    if progress is not None:
        _out(_progress_line(st, progress))


@app.command()
def logs(
    job: str = _JOB_ARGUMENT,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the job ends."),
    region: str | None = _JOB_REGION_OPTION,
) -> None:
    """Print the job's log lines from every host, each prefixed by its host (algo-N), in time order.

    stdout carries log lines only; a job with no logs (yet) gets a note on stderr, exit 0.
    With -f, the last line (on stderr) is how the job ended, with its failure reason.
    """
    with _job_backend(job, region, read_only=True) as backend:
        _print_logs(backend, job, follow)


def _print_logs(backend, job: str, follow: bool) -> None:
    noted = None
    if follow:
        # Following a job that has not logged yet can be silent for minutes: say why up front.
        st = backend.status(job)
        if not st.terminal and not _has_logs(backend, job):
            noted = st.status
            _err(_no_logs_note(backend, job, st) + "; waiting for them (Ctrl-C stops)")
    shown = 0
    try:
        for text in backend.logs(job, follow=follow):
            _out(text)
            shown += 1
    except KeyboardInterrupt:
        raise typer.Exit(code=130) from None
    st = backend.status(job) if follow or not shown else None
    if not shown and st.status != noted:
        _err(_no_logs_note(backend, job, st))
    elif follow and shown:
        # The stream ends when the job does: say how it ended (a failure is otherwise silent).
        _err(f"{job} ended: {st.status}" + (f": {st.failure_reason}" if st.failure_reason else ""))


def _has_logs(backend, job: str) -> bool:
    """Whether the job has written any log yet: a CloudWatch stream on SageMaker; locally,
    logs() reads a file and yields nothing when there is none, so assume it may."""
    return bool(backend.log_streams(job)) if backend.name == "sagemaker" else True


def _no_logs_note(backend, job: str, st) -> str:
    yet = "" if st.terminal else " yet"
    state = st.status + (f": {st.failure_reason}" if st.failure_reason else "")
    if backend.name == "sagemaker":
        from orchestrator.backends.sagemaker import LOG_GROUP

        what = "no log events" if backend.log_streams(job) else "no log streams"
        return f"note: {what} for {job} in {LOG_GROUP}{yet} (the job is {state})"
    return f"note: no log lines for {job}{yet} (the job is {state})"


@app.command()
def stop(
    job: str = _JOB_ARGUMENT,
    region: str | None = _JOB_REGION_OPTION,
) -> None:
    """Ask the backend to stop a job; `status` then shows stopping, and stopped.

    Exit 2 for a job the backend does not know; exit 0, stopping nothing, for a job that has
    already ended or is stopping, and for one the ledger records as ended that was never
    created (a sweep trial cancelled before submission).
    """
    from orchestrator.backends import DamagedStatus, UnknownJob
    from orchestrator.ledger import TERMINAL

    with _job_backend(job, region) as backend:
        try:
            st = backend.status(job)  # an unknown job is an InputError (exit 2): nothing to ask to stop
        except DamagedStatus as exc:
            # The job's own record is unreadable: the backend stops it from its process record
            # alone, or says (DamagedStatus, exit 2) that nothing of it runs.
            backend.stop(job)
            _err(f"note: {exc.message}")
            _out(f"{job}: stop requested (its supervisor was signalled; its status file cannot tell more)")
            return
        except UnknownJob:
            entry = backend.ledger.get(job)
            if entry is None or entry.state not in TERMINAL:
                raise
            # Ended in the ledger and unknown to the backend (a sweep trial cancelled before
            # submission, a submit refused for good): nothing runs under this name.
            _out(f"{job}: the ledger records it as {_ledger_state(entry)}, and the {backend.name} backend has no "
                 "job of this name; nothing to stop")
            return
        if st.terminal:
            _out(f"{job} already {st.status}; nothing to stop")
            return
        if st.status == "stopping":
            _out(f"{job} is already stopping; nothing more to do")
            return
        backend.stop(job)
    _out(f"{job}: stop requested")


# --- infra: the bucket and the execution role (infra/stack.yaml) -------------------------

infra_app = typer.Typer(no_args_is_help=True, help="Deploy and read the AWS set-up: bucket, execution role, "
                        "operator policy (infra/stack.yaml).")
app.add_typer(infra_app, name="infra")

_STACK_OPTION = typer.Option("orchestrator", "--stack-name", help="CloudFormation stack name.")
_REGION_OPTION = typer.Option(None, "--region", callback=_check_region,
                              help=f"AWS region (default: {_REGION_DEFAULTS}).")


@infra_app.command("deploy")
def infra_deploy(
    stack_name: str = _STACK_OPTION,
    region: str | None = _REGION_OPTION,
    kms: bool | None = typer.Option(None, "--kms/--no-kms", help="Encrypt the bucket with a KMS key the stack "
                                    "creates (SSE-KMS) instead of SSE-S3. Unset: keep the deployed choice."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Execute the change set without asking."),
    param: list[str] = typer.Option([], "--param", help="Template parameter NAME=VALUE (repeatable), e.g. "
                                    "CompileCacheNoncurrentDays=14, BucketName=my-bucket."),
) -> None:
    """Create or update the stack through a change set, shown before it runs."""
    from orchestrator import infra
    from orchestrator.errors import InputError

    params = infra.parse_parameters(param, kms=kms)
    cfn = infra.make_client("cloudformation", region)
    plan = infra.prepare(cfn, stack_name, params)
    if plan.nothing_to_do:
        _out(f"stack {stack_name}: nothing to do (the deployed stack already matches the template and parameters)")
        return
    _out(f"change set {plan.change_set_name} ({plan.kind} stack {stack_name}"
         f"{' in ' + plan.region if plan.region else ''}):")
    for change in plan.changes:
        replace = f"  replacement: {change.replacement}" if change.replacement else ""
        _out(f"  {change.action:<8} {change.logical_id:<24} {change.resource_type}{replace}")
    if not plan.changes:
        _out("  no resource changes (parameters or outputs only)")
    for key, value in sorted(plan.parameters.items()):
        _out(f"  parameter {key}={value}")
    if not yes:
        try:
            go = typer.confirm("Execute this change set?", default=False)
        except typer.Abort:
            # No terminal to answer (CI) or Ctrl-C: leave nothing half-made behind.
            infra.discard(cfn, plan)
            raise InputError("no answer to the confirmation; the change set was deleted, nothing changed",
                             hint="pass --yes to deploy without asking") from None
        if not go:
            infra.discard(cfn, plan)
            _out("not executed; the change set was deleted")
            return

    def progress(event) -> None:
        when = event.timestamp.strftime("%H:%M:%S") if event.timestamp else "--:--:--"
        reason = f"  {event.reason}" if event.reason else ""
        _out(f"  {when} {event.status:<28} {event.logical_id} ({event.resource_type}){reason}")

    def waiting(status: str, elapsed_s: float) -> None:
        _out(f"  ... stack {stack_name} is {status}, {elapsed_s:.0f} s since the change set was executed")

    _out(f"executing change set {plan.change_set_name}; waiting for stack {stack_name}")
    try:
        outputs = infra.execute(cfn, plan, on_event=progress, on_wait=waiting)
    except KeyboardInterrupt:
        # Ctrl-C ends the waiting, not the deployment: CloudFormation goes on with the change set.
        _err(f"interrupted (Ctrl-C) while waiting for stack {stack_name}; CloudFormation goes on executing change set "
             f"{plan.change_set_name}. `python -m orchestrator infra outputs --stack-name {stack_name}` shows the "
             "outputs once it is done (or says it is not done yet)")
        raise typer.Exit(code=130) from None
    _out(f"stack {stack_name}: deployed")
    _print_infra_outputs(outputs)
    _out("next: python -m orchestrator infra outputs --write configs/infra.yaml  (then `infra: infra.yaml` in a "
         "job spec)")
    _out(f"next: attach the operator policy to whoever submits jobs: aws iam attach-user-policy --user-name YOUR_USER "
         f"--policy-arn {outputs.operator_policy_arn}  (a CI role: aws iam attach-role-policy --role-name ROLE ...)")


def _print_infra_outputs(outputs) -> None:
    rows = [("role_arn", outputs.role_arn), ("bucket", outputs.bucket),
            ("compile_cache_uri", outputs.compile_cache_uri), ("output_uri", outputs.output_uri),
            ("data_uri", outputs.data_uri), ("operator_policy_arn", outputs.operator_policy_arn),
            ("kms_key_arn", outputs.kms_key_arn), ("region", outputs.region)]
    for key, value in rows:
        if value:
            _out(f"  {key:<20} {value}")


@infra_app.command("outputs")
def infra_outputs(
    stack_name: str = _STACK_OPTION,
    region: str | None = _REGION_OPTION,
    write: Path | None = typer.Option(None, "--write", help="Also write them as YAML for a job spec's `infra:` key "
                                      "(a new file, or one an earlier --write made)."),
    force: bool = typer.Option(False, "--force", help="With --write: replace an existing file that is not an "
                               "outputs file."),
) -> None:
    """Print the stack's outputs (role ARN, bucket, suggested URIs)."""
    from orchestrator import infra

    if write is not None:
        infra.check_outputs_target(write, force)  # before any call: a refused target changes nothing
    outputs = infra.read_outputs(infra.make_client("cloudformation", region), stack_name)
    _out(f"stack {stack_name}:")
    _print_infra_outputs(outputs)
    if write is not None:
        infra.write_outputs_file(outputs, write)
        _out(f"wrote {write}; a job spec takes role_arn and the URIs from it with `infra: <path relative to the spec>`")


@infra_app.command("policy")
def infra_policy(stack_name: str = _STACK_OPTION, region: str | None = _REGION_OPTION) -> None:
    """Print the operator (laptop/CI) IAM policy JSON, filled in from the deployed stack."""
    from orchestrator import infra
    from orchestrator.errors import InputError

    infra.check_stack_name(stack_name)  # before the fallback below turns a bad name into placeholders
    cfn = infra.make_client("cloudformation", region)
    try:
        outputs = infra.read_outputs(cfn, stack_name)
    except InputError as exc:
        outputs = None
        _err(f"note: {exc.message}; printing the policy with <PLACEHOLDERS> to fill in")
    _out(json.dumps(infra.operator_policy(outputs, stack_name=stack_name, region=cfn.meta.region_name), indent=2))
    if outputs is not None:
        _err(f"note: the stack already created this policy as {outputs.operator_policy_arn}; attach that to the "
             "user or CI role instead of copying it")


# --- results: the price-performance table -------------------------------------------------

def _results_prefix(prefix: str | None, spec_path: Path | None, region: str | None) -> tuple[str, str | None]:
    """(results prefix, region): --prefix, else the spec's output.uri, else the local store."""
    from orchestrator import results as res
    from orchestrator.errors import InputError

    if prefix is not None and spec_path is not None:
        raise InputError("--prefix and --spec both say where results live; give one",
                         hint="keep --prefix s3://bucket/jobs (the jobs' output.uri) or --spec job.yaml (its output.uri "
                              "and region), not both")
    if prefix is not None:
        return res.check_prefix(prefix, "--prefix"), region
    if spec_path is not None:
        from orchestrator import request, spec

        loaded = spec.load(spec_path)
        return request.output_uri(loaded), region or loaded.region
    local = res.local_store_uri()
    if not res.has_results(local):
        raise InputError(f"no --prefix given, and the local store ({local}) holds no results",
                         hint="for SageMaker jobs pass --prefix with the jobs' output.uri (s3://bucket/jobs) "
                              "or --spec with their job spec")
    return local, region


@app.command()
def results(
    sweep: str | None = typer.Option(None, "--sweep", help="Only this sweep's jobs: a sweep id or a sweep name "
                                     "(tag orchestrator:sweep, or named <sweep>-...)."),
    job: str | None = typer.Option(None, "--job", callback=_job_option, help="Only this job (exit 2 when it "
                                   "has no results object under the prefix)."),
    prefix: str | None = typer.Option(None, "--prefix", help="The jobs' output.uri (s3://bucket/jobs or "
                                      "file:///...). Default: --spec's, else the local store."),
    spec_path: Path | None = typer.Option(None, "--spec", help="A job spec whose output.uri and region to use."),
    fmt: str = typer.Option("table", "--format", help="table, csv or json."),
    plot: Path | None = typer.Option(None, "--plot", help="Also write a PNG: samples per dollar and samples/s."),
    region: str | None = typer.Option(None, "--region", callback=_check_region, help="Region of the S3 "
                                      "prefix, of jobs whose results name none, and where a sweep's SageMaker jobs "
                                      f"are listed (--spec: the spec's; default: {_REGION_DEFAULTS})."),
    workers: int = typer.Option(16, "--workers", min=1, max=128, help="Parallel reads."),
) -> None:
    """Price-performance table from the jobs' results.json objects, SageMaker and prices.

    Needs no ledger: works from any machine that can read the results prefix. Exit 1 when a
    job's results could not be fetched even after retries (its row says why).
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator import results as res
    from orchestrator.errors import InputError

    renderers = {"table": None, "csv": res.render_csv, "json": res.render_json}
    if fmt not in renderers:
        raise InputError(f"--format {fmt!r}: use table, csv or json",
                         hint="table (the default) is for reading; --format csv or --format json for other tools")
    if plot is not None:
        from orchestrator.paths import check_write_target

        check_write_target(plot, "--plot")  # before reading anything: a device or FIFO is never replaced
    where, region = _results_prefix(prefix, spec_path, region)
    stderr = Console(stderr=True)
    with Progress(TextColumn("reading results"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=stderr, transient=True, disable=not stderr.is_terminal) as bar:
        task = bar.add_task("results", total=None)
        collection = res.collect(where, job=job, sweep=sweep, region=region, workers=workers,
                                 progress=lambda done, total: bar.update(task, completed=done, total=total))
    if not collection.rows:
        what = f" for sweep {sweep}" if sweep else ""
        raise InputError(f"no results{what} under {where}",
                         hint="check --sweep / --prefix (results live at <output.uri>/results/<job>/results.json)")
    if fmt == "table":
        _out(res.render_table(collection, color=sys.stdout.isatty()).rstrip("\n"))
    else:
        _out(renderers[fmt](collection).rstrip("\n"))
    if plot is not None:
        data = res.render_plot(collection)
        from entrypoints.atomic import write_bytes
        from orchestrator.paths import write_hint

        try:
            write_bytes(plot, data)  # a failed write leaves no truncated PNG behind
        except OSError as exc:
            raise InputError(f"--plot {plot}: cannot write: {exc.strerror or exc}",
                             hint="the results above are complete; for the plot, " + write_hint(
                                 exc, "run again with --plot a file in a folder you can write, e.g. --plot "
                                      "results.png")) from None
        _err(f"wrote {plot} ({len(data)} bytes)")
    if collection.retries:
        _err(f"note: {collection.retries} throttled or failed request(s) were retried")
    if collection.errors:
        _err(f"error: {len(collection.errors)} job(s) could not be read; their rows say why")
        raise typer.Exit(code=1)


# --- prices: refresh from the AWS Price List API -------------------------------------------

prices_app = typer.Typer(no_args_is_help=True, help="Instance prices: refresh them from the AWS Price List API.")
app.add_typer(prices_app, name="prices")


@prices_app.command("refresh")
def prices_refresh(
    region: list[str] = typer.Option([], "--region", callback=_check_region, help="Region to price "
                                     f"(repeatable; default: {_REGION_DEFAULTS})."),
    types: list[str] = typer.Option([], "--types", help="Instance types (repeatable or comma-separated; "
                                    "default: the catalog's training types)."),
) -> None:
    """Fetch SageMaker training prices and write $ORCHESTRATOR_HOME/prices.json (atomic, merged)."""
    from orchestrator import prices
    from orchestrator.backends.sagemaker import default_region
    from orchestrator.errors import BackendError

    wanted = [t.strip() for item in types for t in item.split(",") if t.strip()] or prices.default_types()
    regions = region or [default_region()]
    prices.check(wanted, regions)
    refresh = prices.fetch(prices.client(), wanted, regions)
    for found in refresh.found:
        _out(f"{found.type:<20} {found.region:<14} {found.usd_per_hour:>10.4f} USD/h  (SKU {found.sku})")
    for type_, where in refresh.missing:
        _err(f"warning: no SageMaker training price for {type_} in {where}; its price is unchanged")
    for note in refresh.notes:
        _err(f"note: {note}")
    if not refresh.found:
        raise BackendError("the Price List API returned no training price for any type asked; nothing written",
                           hint="check --types and --region")
    path = prices.write(refresh)
    _out(f"wrote {path} ({len(refresh.found)} price(s), source {prices.SOURCE}, as of {refresh.as_of})")


# --- sweep: many jobs from one spec ----------------------------------------------------------

sweep_app = typer.Typer(no_args_is_help=True, help="Sweeps: grid and random trials over a job spec, "
                        "run with a concurrency cap, retries and crash safety.")
app.add_typer(sweep_app, name="sweep")
_POLL_OPTION = typer.Option(None, "--poll", min=0.0, help="Seconds between status polls "
                            "(default: 30 on SageMaker, 2 locally).")


def _sweep_backend(definition, ledger):
    from orchestrator import backends

    return backends.create(definition.backend, region=definition.region, ledger=ledger)


def _sweep_id_of(target: str, ledger) -> str:
    """The id of the saved sweep `target` names: a sweep id, a sweep name (or a schedule's
    untimed id) that one saved sweep has, or its YAML file, which names the sweep `sweep run`
    saved from it or, for a schedule, its tick sweep. InputError (exit 2) for a file that does
    not exist, a file whose sweep was never saved (or that was edited since), and a file or
    name that fits several sweeps (listing them)."""
    import shlex

    from orchestrator import spec
    from orchestrator import sweep as sweeps
    from orchestrator.errors import InputError, SpecError
    from orchestrator.paths import is_file, unusable

    if not (target.endswith((".yaml", ".yml")) or is_file(target)):
        return sweeps.resolve_id(ledger, target)
    try:
        loaded = spec.load_sweep(target)
    except SpecError as exc:
        if unusable(target) is not None or Path(target).exists():
            raise
        # No such file: the path is wrong, or a sweep id or name was meant.
        other = "give a sweep id or name instead (`python -m orchestrator sweep status` lists the sweeps)"
        hint = (f"{exc.hint} Or {other}" if exc.hint and exc.hint.endswith(("?", ".")) else
                "; or ".join(filter(None, (exc.hint, other))))
        raise SpecError(exc.problems, hint=hint) from None
    ident = sweeps.identify(loaded)
    known = sweeps.sweep_ids(ledger)
    if not any(ident.sweep_id in sweeps.sweep_keys(sweep_id) for sweep_id in known):
        same = [sweep_id for sweep_id in known if ident.name in sweeps.sweep_keys(sweep_id)]
        hint = (f"sweeps named {ident.name} in the ledger: {', '.join(same[-10:])}; give one of these ids "
                "instead of the file" if same else
                f"start it with `python -m orchestrator sweep run {shlex.quote(target)}` (a scheduled sweep: `python -m orchestrator "
                f"schedule tick {shlex.quote(target)}`)")
        raise InputError(f"{target}: no saved sweep {ident.sweep_id} in the ledger {ledger.path}: this file, as "
                         "it is now, was never run (it may have been edited since it ran)", hint=hint)
    # One sweep, or a schedule's ticks (<id>-<time>): one is the answer, several are listed.
    try:
        return sweeps.resolve_id(ledger, ident.sweep_id)
    except InputError as exc:
        raise InputError(f"{target}: {exc.message}", hint=exc.hint) from None


def _plan_table(planned) -> str:
    import shutil

    from rich.console import Console
    from rich.table import Table

    from orchestrator import sweep as sweeps

    table = Table(title=_plain(f"sweep {planned.sweep_id}: {len(planned.trials)} trials, "
                               f"concurrency {planned.sweep.concurrency}, max_retries {planned.sweep.max_retries}"))
    for column in ("#", "trial", "job name", "overrides", "instance", "failover", "cost bound", "worst case"):
        # Folded, never cut with "…": the table must show what each trial is in any width.
        table.add_column(column, justify="right" if column in ("#", "cost bound", "worst case") else "left",
                         overflow="fold" if column in ("job name", "overrides", "instance", "failover") else "ellipsis")
    for t in planned.trials:
        overrides = ", ".join(f"{k}={sweeps.shown(v)}" for k, v in t.trial.overrides.items()) or "(base)"
        table.add_row(*map(_plain, (
            t.trial.index, t.trial.trial_id, t.job_name, overrides,
            f"{t.trial.spec.instance.type} x{t.trial.spec.instance.count}", " ".join(t.chain[1:]) or "-",
            _usd(t.usd_max), _usd(t.worst_usd))))
    console = Console(width=max(100, shutil.get_terminal_size((160, 24)).columns), force_terminal=False)
    with console.capture() as captured:
        console.print(table)
    return captured.get().rstrip("\n")


def _usd(value: float) -> str:
    return f"{value:.2f} USD" if value == value and value != float("inf") else "unknown"


def _plan_summary(planned) -> list[str]:
    total = planned.total_usd
    budget = planned.sweep.budget.max_total_cost_usd
    lines = [f"total: at most {total:.2f} USD" if total != float("inf") else "total: unknown (a price is missing)"]
    if budget is not None:
        lines[-1] += f" (budget {budget:g} USD)"
    worst = planned.worst_usd
    if worst != total:
        retries = planned.sweep.max_retries
        line = (f"worst case: {_usd(worst)} if trials fail over ({', '.join(planned.sweep.failover.get('instance.type', [])) or 'no failover'}) "
                f"and use their {retries} retr{'y' if retries == 1 else 'ies'}, each job running to max_run_minutes")
        if budget is not None:
            line += f"; a retry or failover that would take the sweep past {budget:g} USD is not submitted"
        lines.append(line)
    first = planned.trials[0].prepared.estimate if planned.trials else None
    if first is not None and first.price is not None:
        lines.append(f"prices: {first.price.source}, {first.price.as_of}; {first.note}")
    for index, same in planned.duplicates:
        lines.append(f"note: trial {index} is identical to trial {same}; it runs once")
    for finding, trial_ids in planned.warnings.items():
        lines.append(f"warning: {finding} (trials {', '.join(trial_ids)})")
    return lines


@sweep_app.command("plan")
def sweep_plan(
    path: Path = typer.Argument(..., help="Sweep spec YAML."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Expand and check every trial; print each with its cost bound, and the total.

    Exit 2 when a trial does not validate or fails the doctor, or when the total is above
    budget.max_total_cost_usd. Submits nothing.
    """
    from orchestrator import spec
    from orchestrator import sweep as sweeps

    planned = sweeps.plan(spec.load_sweep(path))
    if as_json:
        _out(json.dumps(planned.to_json(), indent=2))
    else:
        _out(_plan_table(planned))
        for line in _plan_summary(planned):
            _out(line)
    sweeps.check_budget(planned)


class _SweepDisplay:
    """Progress of a running sweep: a live rich table on a terminal, event lines elsewhere, and
    there a heartbeat line when nothing was printed for `waiting.heartbeat_seconds()` (a
    sweep of two-hour jobs must not look dead to a CI log)."""

    def __init__(self, runner, *, clock=None, heartbeat_s: float | None = None):
        import time

        from rich.console import Console

        from orchestrator import waiting

        self.runner = runner
        self.console = Console()
        self.live = None
        self.printed = 0
        self.interactive = self.console.is_terminal
        self.clock = clock or time.monotonic
        self.heartbeat_s = None if self.interactive else (heartbeat_s or waiting.heartbeat_seconds())
        self.last_line = self.clock()

    def __enter__(self):
        if self.interactive:
            from rich.live import Live

            self.live = Live(console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)

    def _render(self, progress):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        counts = "  ".join(f"{state} {n}" for state, n in sorted(progress.counts.items()))
        head = f"sweep {progress.sweep_id}: {progress.total} trials  {counts}  in flight {progress.in_flight}"
        if progress.elsewhere:
            head += f" (+{progress.elsewhere} from elsewhere)"
        if progress.waiting_reason:
            head += f"\nbacking off: {progress.waiting_reason}"
        table = Table(show_edge=False)
        for column in ("trial", "job", "instance", "state", "detail"):
            table.add_column(column)
        for view in self.runner.views():
            table.add_row(*map(_plain, (view.trial.trial_id, view.job_name, view.instance_type, view.state,
                                        (view.detail or "")[:80])))
        events = Text("\n".join(progress.events[-5:]), style="dim")
        return Group(Text(head), table, events)

    def __call__(self, progress) -> None:
        if self.live is not None:
            self.live.update(self._render(progress))
            return
        fresh = min(progress.event_count - self.printed, len(progress.events))
        for line in progress.events[len(progress.events) - fresh:] if fresh > 0 else ():
            _out(line)
        self.printed = progress.event_count
        now = self.clock()
        if fresh > 0:
            self.last_line = now
        elif self.heartbeat_s is not None and now - self.last_line >= self.heartbeat_s:
            counts = ", ".join(f"{n} {state}" for state, n in sorted(progress.counts.items()))
            waiting_for = f"; backing off: {progress.waiting_reason}" if progress.waiting_reason else ""
            _out(f"sweep {progress.sweep_id}: {counts}; {progress.in_flight} in flight{waiting_for}; still running")
            self.last_line = now


class _Terminated(BaseException):
    """SIGTERM reached a runner (`sweep stop` sends it): a BaseException, like Ctrl-C's
    KeyboardInterrupt, so that no `except Exception` on the way swallows it."""


def _tell(ready_fd: int | None, answer: str) -> None:
    """Answer the `sweep run --detach` that started this runner (see `_spawn_runner`)."""
    if ready_fd is None:
        return
    try:
        os.write(ready_fd, f"{answer}\n".encode())
        os.close(ready_fd)
    except OSError:
        pass  # the starter is gone: nobody to tell


def _drive(definition, ledger, poll: float | None, prepared: dict | None = None, ready_fd: int | None = None) -> None:
    """Run a saved sweep to the end in this process, with the progress display.

    SIGTERM (what `sweep stop` sends this machine's runner, foreground or detached) ends it
    as a stop the runner noticed itself: the display closes, the counts are printed, exit 0
    when the sweep's stop flag is set, else exit 143 with the resume hint. Ctrl-C: exit 130
    with the resume hint. `ready_fd` (a detached runner's): where to say "ok" once this
    process holds the sweep, or "busy PID" when another does.
    """
    import contextlib
    import signal

    from orchestrator import sweep as sweeps
    from orchestrator.errors import JobFailed

    backend = _sweep_backend(definition, ledger)
    poll_seconds = poll if poll is not None else (2.0 if definition.backend == "local" else 30.0)
    sigterm = {"armed": False, "received": False}

    def on_sigterm(signum, frame):
        sigterm["received"] = True
        if sigterm["armed"]:
            # Raised once, and only inside the run: the runner is crash-safe, so leaving a step
            # anywhere is fine, while the display and the lock must close as after a normal end.
            sigterm["armed"] = False
            raise _Terminated

    with contextlib.ExitStack() as held:
        try:
            # A detached runner waits a moment: a `sweep run` saving the sweep holds the lock briefly.
            held.enter_context(sweeps.runner_lock(definition.sweep_id, wait_seconds=0.0 if ready_fd is None else 3.0))
        except sweeps.RunnerBusy as exc:
            _tell(ready_fd, f"busy {exc.pid or 0}")
            raise
        sweeps.clear_stop(ledger, definition.sweep_id)
        sweeps.record_runner(ledger, definition.sweep_id, os.getpid())
        _tell(ready_fd, "ok")
        runner = sweeps.Runner(definition, backend, ledger, poll_seconds=poll_seconds, prepared=prepared)
        previous = signal.signal(signal.SIGTERM, on_sigterm)
        try:
            with _SweepDisplay(runner) as display:
                runner.on_progress = display
                try:
                    sigterm["armed"] = not sigterm["received"]
                    if sigterm["armed"]:
                        final = runner.run()
                except _Terminated:
                    pass
                finally:
                    sigterm["armed"] = False
        except KeyboardInterrupt:
            _err(f"interrupted; continue with `python -m orchestrator sweep resume {definition.sweep_id}` "
                 "(jobs already submitted keep running)")
            raise typer.Exit(code=130) from None
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        if sigterm["received"]:
            final = runner.progress(stopped=runner.stop_requested())
    counts = ", ".join(f"{n} {state}" for state, n in sorted(final.counts.items()))
    _out(f"sweep {definition.sweep_id}: {counts}")
    if sigterm["received"] and not final.stopped:
        _err(f"terminated (SIGTERM); continue with `python -m orchestrator sweep resume {definition.sweep_id}` "
             "(jobs already submitted keep running)")
        raise typer.Exit(code=143)
    if final.stopped:
        # The counts are the runner's last view: the stopping command cancels what had not
        # started after this runner let go of the sweep.
        _out(f"stopped (sweep stop); `python -m orchestrator sweep status {definition.sweep_id}` shows what it stopped")
        return
    if final.failed:
        raise JobFailed(f"sweep {definition.sweep_id}: {final.failed} trial(s) failed",
                        hint=f"see `python -m orchestrator sweep status {definition.sweep_id}` for the reasons")


# How long `sweep run --detach` waits for its background runner to say it holds the sweep.
_READY_SECONDS = 120.0


def _spawn_runner(sweep_id: str, ledger, poll: float | None) -> tuple[int, Path]:
    """Start `sweep resume ID` as a detached process logging under ORCHESTRATOR_HOME/sweeps,
    and return once it holds the sweep's runner lock: (its pid, its log). RunnerBusy (exit 2,
    naming the holder's pid) while another process of this machine runs the sweep, also when
    one took it between the check here and the child's start (two `--detach` at once);
    BackendError (exit 1, with its last log line) when the child ended without starting."""
    import select
    import subprocess

    from orchestrator import sweep as sweeps
    from orchestrator.errors import BackendError

    with sweeps.runner_lock(sweep_id):
        pass
    log = sweeps.log_path(sweep_id)
    from orchestrator.paths import check_write_target

    check_write_target(log, "the sweep's log")  # a FIFO there would block the open below
    read_fd, write_fd = os.pipe()
    command = [sys.executable, "-m", "orchestrator", "sweep", "resume", sweep_id, "--ready-fd", str(write_fd)]
    if poll is not None:
        command += ["--poll", str(poll)]
    env = dict(os.environ, ORCHESTRATOR_HOME=str(ledger.path.parent))
    try:
        with open(log, "ab") as handle:
            start = handle.tell()
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True, pass_fds=(write_fd,))
    finally:
        os.close(write_fd)
    answer = b""
    try:
        while b"\n" not in answer and select.select([read_fd], [], [], _READY_SECONDS)[0]:
            chunk = os.read(read_fd, 64)
            if not chunk:
                break  # the child ended (or closed the pipe) without an answer
            answer += chunk
    finally:
        os.close(read_fd)
    word, _, rest = answer.decode(errors="replace").strip().partition(" ")
    if word == "ok":
        # The child records its own pid once it holds the lock (it has by now).
        return child.pid, log
    if word == "busy":
        raise sweeps.RunnerBusy(sweep_id, int(rest) if rest.isdigit() and int(rest) else None)
    try:
        code = child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        code = None
    try:
        with open(log, "rb") as handle:
            handle.seek(start)
            lines = [line for line in handle.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    said = next((line for line in lines if line.startswith("error: ")), lines[-1] if lines else "no output")
    how = f"exited at once (exit code {code})" if code is not None else f"has not started within {_READY_SECONDS:g}s"
    raise BackendError(f"the background runner of sweep {sweep_id} (pid {child.pid}) {how}: {said}",
                       hint=f"its log is {log}; `python -m orchestrator sweep status {sweep_id}` shows the sweep")


@sweep_app.command("run")
def sweep_run(
    path: Path = typer.Argument(..., help="Sweep spec YAML."),
    detach: bool = typer.Option(False, "--detach", help="Run in a background process; log under "
                                "ORCHESTRATOR_HOME/sweeps/."),
    poll: float | None = _POLL_OPTION,
) -> None:
    """Plan, check, then submit and follow every trial to the end (idempotent: run it again,
    or `sweep resume`, after a crash). Exit 1 when a trial failed for good."""
    from orchestrator import spec
    from orchestrator import sweep as sweeps
    from orchestrator.ledger import Ledger

    planned = sweeps.plan(spec.load_sweep(path))
    sweeps.check_budget(planned)
    ledger = Ledger()
    definition = sweeps.save(planned, ledger)
    _err(f"sweep {definition.sweep_id}: {len(planned.trials)} trials, {_plan_summary(planned)[0]}")
    if detach and not sweeps.Runner(definition, None, ledger).has_work():
        # The runner would find nothing to do (every trial ended for good, and nothing `sweep
        # stop` stopped can be reopened): report it here instead of starting it in the background.
        _err(f"sweep {definition.sweep_id}: nothing left to run, so no background runner was started")
        detach = False
    if not detach:
        _drive(definition, ledger, poll, planned.prepared())
        return
    pid, log = _spawn_runner(definition.sweep_id, ledger, poll)
    _out(f"sweep {definition.sweep_id}: running in the background (pid {pid})")
    _out(f"log: {log}")
    _out(f"follow with `python -m orchestrator sweep status {definition.sweep_id}`; "
         f"stop with `python -m orchestrator sweep stop {definition.sweep_id}`")


@sweep_app.command("resume")
def sweep_resume(
    target: str = typer.Argument(..., help="Sweep id, name or YAML."),
    poll: float | None = _POLL_OPTION,
    ready_fd: int | None = typer.Option(None, "--ready-fd", hidden=True, help="(internal: sweep run --detach)"),
) -> None:
    """Continue a sweep after a crash, a closed laptop, --detach or `sweep stop`: reconcile,
    then run on. Trials that `sweep stop` cancelled before submission are submitted under their
    own names; jobs it stopped in flight are submitted again as new attempts (-rN)."""
    from orchestrator import sweep as sweeps
    from orchestrator.ledger import Ledger

    ledger = Ledger()
    definition = sweeps.load_definition(ledger, _sweep_id_of(target, ledger))
    # A budget (or concurrency, max_retries) changed in the sweep's file counts, as for `sweep run`.
    try:
        definition, note = sweeps.reload_policy(ledger, definition)
    except sweeps.RunnerBusy as exc:
        _tell(ready_fd, f"busy {exc.pid or 0}")
        raise
    if note:
        _err(note)
    _drive(definition, ledger, poll, ready_fd=ready_fd)


@sweep_app.command("status")
def sweep_status(
    target: str | None = typer.Argument(None, help="Sweep id, name or YAML; none: list the sweeps."),
    refresh: bool = typer.Option(True, "--refresh/--no-refresh", help="Ask the backend about jobs in flight."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """A table of the sweep's trials: latest job, attempt, instance, state, and why it failed."""
    from orchestrator.ledger import Ledger

    ledger = Ledger(read_only=True)
    try:
        _sweep_status(ledger, target, refresh, as_json)
    finally:
        _note_read_only(ledger)


def _sweep_status(ledger, target: str | None, refresh: bool, as_json: bool) -> None:
    from orchestrator import sweep as sweeps

    if target is None:
        ids = sweeps.sweep_ids(ledger)
        if not ids:
            _out("no sweeps in the ledger")
        for sweep_id in ids:
            counts: dict[str, int] = {}
            for entry in ledger.entries(sweep_id=sweep_id):
                counts[entry.state] = counts.get(entry.state, 0) + 1
            _out(f"{sweep_id}: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) + " (jobs)")
        return
    definition = sweeps.load_definition(ledger, _sweep_id_of(target, ledger))
    runner = sweeps.Runner(definition, _sweep_backend(definition, ledger) if refresh else None, ledger)
    if refresh:
        runner.refresh()
    views = runner.views()
    if as_json:
        _out(json.dumps({"sweep_id": definition.sweep_id, "trials": [{
            "trial_id": v.trial.trial_id, "index": v.trial.index, "overrides": v.trial.overrides,
            "job_name": v.job_name, "attempt": v.attempt, "state": v.state, "final": v.final,
            "instance_type": v.instance_type, "detail": v.detail} for v in views]}, indent=2))
        return
    import shutil

    from rich.console import Console
    from rich.table import Table

    table = Table(title=_plain(f"sweep {definition.sweep_id} ({definition.backend}, {definition.region})"))
    for column in ("#", "trial", "job", "try", "instance", "state", "overrides", "detail"):
        # Folded, never cut with "…": the table must show what each trial is in any width.
        table.add_column(column, overflow="fold" if column in ("job", "overrides", "detail") else "ellipsis")
    for v in views:
        state = v.state + ("" if v.final or v.state not in ("failed",) else " (retry due)")
        table.add_row(*map(_plain, (
            v.trial.index, v.trial.trial_id, v.job_name, v.attempt, v.instance_type, state,
            ", ".join(f"{k}={sweeps.shown(val)}" for k, val in v.trial.overrides.items()) or "(base)", v.detail)))
    console = Console(width=max(120, shutil.get_terminal_size((160, 24)).columns), force_terminal=False)
    with console.capture() as captured:
        console.print(table)
    _out(captured.get().rstrip("\n"))
    done = sum(1 for v in views if v.final)
    _out(f"{done}/{len(views)} trials final")


# How long `sweep stop` waits for a runner it signalled to exit, whatever --wait says.
_RUNNER_EXIT_SECONDS = 5.0


@sweep_app.command("stop")
def sweep_stop(
    target: str = typer.Argument(..., help="Sweep id, name or YAML."),
    wait: float = typer.Option(15.0, "--wait", min=0.0, help="Seconds to wait for this machine's runner to exit."),
) -> None:
    """Stop a sweep: its runner on this machine exits, in-flight jobs are stopped, trials not
    yet submitted are marked stopped. Exit 1 when a job could not be stopped, or when this
    machine's runner has not exited in time (it was signalled; the stop flag keeps it from
    submitting more)."""
    import contextlib
    import os
    import signal

    from orchestrator import sweep as sweeps
    from orchestrator.errors import BackendError
    from orchestrator.ledger import Ledger

    ledger = Ledger()
    definition = sweeps.load_definition(ledger, _sweep_id_of(target, ledger))
    sweep_id = definition.sweep_id
    sweeps.request_stop(ledger, sweep_id)
    pid = sweeps.runner_pid(ledger, sweep_id)
    signalled = False
    try:
        with sweeps.runner_lock(sweep_id):
            pass
    except OrchestratorError:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)  # the runner is crash-safe: ending it at any point is fine
                signalled = True
            except ProcessLookupError:
                pass
    # A signalled runner needs a moment to close its display and let go of the lock: waited
    # for even with --wait 0, so that a stop is not left half done.
    grace = max(wait, _RUNNER_EXIT_SECONDS) if signalled else wait
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(sweeps.runner_lock(sweep_id, wait_seconds=grace))
        except OrchestratorError:
            if signalled:
                raise BackendError(
                    f"sweep {sweep_id}: its runner (pid {pid}) was sent SIGTERM but has not exited after "
                    f"{grace:g}s, so the jobs in flight were not stopped yet",
                    hint=f"the stop flag is set, so the runner submits nothing more; once it has exited, run "
                    f"`python -m orchestrator sweep stop {sweep_id}` again (or with a longer --wait) to stop the jobs in "
                    "flight and cancel the trials not yet submitted") from None
            raise BackendError(
                f"sweep {sweep_id} is being run by another process on this machine that did not exit within "
                f"{grace:g}s (no runner pid recorded here to signal), so the jobs in flight were not stopped yet",
                hint=f"the stop flag is set, so a runner stops at its next poll; run `python -m orchestrator sweep stop "
                f"{sweep_id} --wait 60` to wait longer, then stop the jobs in flight") from None
        runner = sweeps.Runner(definition, _sweep_backend(definition, ledger), ledger)
        report = sweeps.stop(runner)
    for name in report.stopped_jobs:
        _out(f"stopping {name}")
    if report.stopped_jobs or report.cancelled:
        # Resume reopens what was stopped only within the budget and retry limits.
        then = (f"continue it with `python -m orchestrator sweep resume {sweep_id}`" if runner.has_work() else
                f"a resume would run nothing (budget or retries used up: `python -m orchestrator sweep status "
                f"{sweep_id}` shows why)")
        _out(f"sweep {sweep_id}: {len(report.stopped_jobs)} job(s) stopping, "
             f"{len(report.cancelled)} trial(s) cancelled before submission; {then}")
    elif not report.errors:
        _out(f"sweep {sweep_id}: nothing in flight, nothing stopped" + (
            f"; trials are left to run: continue them with `python -m orchestrator sweep resume {sweep_id}`"
            if runner.has_work() else ": every trial has ended"))
    if report.errors:
        for line in report.errors:
            _err(f"error: {line}")
        raise BackendError(f"{len(report.errors)} job(s) could not be stopped",
                           hint=f"the errors above say why; once that is fixed (or for a passing error), run "
                           f"`python -m orchestrator sweep stop {sweep_id}` again: it stops only what still runs")


# --- schedule: sweeps on a cron schedule ---------------------------------------------------------

schedule_app = typer.Typer(no_args_is_help=True, help="Run a sweep on its cron schedule, from this machine "
                           "or from system cron.")
app.add_typer(schedule_app, name="schedule")


def _scheduler(path: Path, poll: float | None):
    from orchestrator import backends, spec
    from orchestrator import schedule as schedules
    from orchestrator.ledger import Ledger

    loaded = spec.load_sweep(path)
    ledger = Ledger()
    backend = backends.create(loaded.base_spec.backend, region=loaded.base_spec.region, ledger=ledger)
    default = 2.0 if loaded.base_spec.backend == "local" else 30.0
    return schedules.Scheduler(loaded, backend, ledger,
                               runner_options={"poll_seconds": poll if poll is not None else default})


def _print_tick(report) -> None:
    stamp = report.now.strftime("%Y-%m-%d %H:%M:%S UTC")
    for sweep_id in report.planned:
        _out(f"{stamp} tick planned: sweep {sweep_id}")
    if report.skipped:
        _out(f"{stamp} skipped {len(report.skipped)} missed tick(s) (catchup policy): "
             + ", ".join(t.strftime("%Y-%m-%d %H:%M") for t in report.skipped[-5:]))
    for progress in report.progress:
        for line in progress.events:
            _out(f"{stamp} {progress.sweep_id}: {line}")
        counts = ", ".join(f"{n} {state}" for state, n in sorted(progress.counts.items()))
        _out(f"{stamp} {progress.sweep_id}: {counts}" + (" (done)" if progress.done else ""))
    for sweep_id in report.busy:
        _out(f"{stamp} {sweep_id}: another process is running it")
    for note in report.notes:
        _err(f"note: {note}")
    _out(f"{stamp} next tick: {report.next_fire.strftime('%Y-%m-%d %H:%M UTC')}")


@schedule_app.command("run")
def schedule_run(
    path: Path = typer.Argument(..., help="Sweep spec YAML with a schedule."),
    poll: float | None = _POLL_OPTION,
) -> None:
    """Keep the schedule from this machine: sleep until each tick, submit it, follow its jobs.
    Safe to restart and to run on two machines at once (a tick is submitted once)."""
    scheduler = _scheduler(path, poll)
    scheduler.on_report = _print_tick
    try:
        scheduler.run(poll_seconds=scheduler.runner_options["poll_seconds"])
    except KeyboardInterrupt:
        # Ctrl-C: say what was cut short and how to go on (every step is crash-safe: a tick
        # interrupted mid-submit is finished by the next run, never submitted twice).
        _err(f"interrupted (Ctrl-C) while {scheduler.doing}")
        _err(f"the schedule is not kept until it runs again: `python -m orchestrator schedule run {path}` continues it "
             f"(ticks missed meanwhile follow catchup: {scheduler.schedule.catchup}), or `python -m orchestrator "
             f"schedule crontab {path}` prints the line for system cron")
        unfinished = scheduler.unfinished()
        if unfinished:
            _err(f"unfinished tick sweeps: {', '.join(unfinished)}; their submitted jobs keep running, and "
                 f"`python -m orchestrator sweep resume {unfinished[-1]}` follows one now")
        raise typer.Exit(code=130) from None


@schedule_app.command("tick")
def schedule_tick(
    path: Path = typer.Argument(..., help="Sweep spec YAML with a schedule."),
    follow: bool = typer.Option(True, "--follow/--no-follow", help="Hand each unfinished tick sweep to a "
                                "background `sweep resume` that drives it to the end."),
    poll: float | None = _POLL_OPTION,
) -> None:
    """Evaluate the schedule once: submit due ticks, advance unfinished ones (for system cron).

    System cron calls this only at tick times, so a tick sweep with more trials than its
    concurrency (or with retries to come) is followed by a detached runner, as `sweep run
    --detach` starts one."""
    scheduler = _scheduler(path, poll)
    report = scheduler.evaluate()
    _print_tick(report)
    if not follow:
        return
    from orchestrator import sweep as sweeps

    for progress in report.progress:
        if progress.done or progress.stopped:
            continue
        try:
            pid, log = _spawn_runner(progress.sweep_id, scheduler.ledger, poll)
        except sweeps.RunnerBusy as exc:
            # Another tick (or a `sweep resume`) follows it already.
            _out(f"{progress.sweep_id}: already followed by another process" + (f" (pid {exc.pid})" if exc.pid else ""))
            continue
        _out(f"{progress.sweep_id}: followed in the background (pid {pid}, log {log})")


@schedule_app.command("next")
def schedule_next(
    path: Path = typer.Argument(..., help="Sweep spec YAML with a schedule."),
    count: int = typer.Option(5, "-n", "--count", min=1, max=1000, help="How many fire times."),
) -> None:
    """Print the next fire times (UTC, and the schedule's time zone when it differs)."""
    from datetime import datetime, timezone
    from zoneinfo import ZoneInfo

    from orchestrator import schedule as schedules
    from orchestrator import spec

    loaded = spec.load_sweep(path)
    schedule = schedules.require_schedule(loaded)
    zone = ZoneInfo(schedule.timezone)
    for when in schedules.next_fires(schedule, datetime.now(timezone.utc), count):
        local = "" if schedule.timezone == "UTC" else f"  ({when.astimezone(zone):%Y-%m-%d %H:%M %Z})"
        _out(f"{when:%Y-%m-%d %H:%M} UTC{local}")


@schedule_app.command("crontab")
def schedule_crontab(path: Path = typer.Argument(..., help="Sweep spec YAML with a schedule.")) -> None:
    """Print the crontab entry that runs `schedule tick` for this sweep (add it with `crontab -e`)."""
    from orchestrator import schedule as schedules
    from orchestrator import spec

    loaded = spec.load_sweep(path)
    schedules.ensure_log_dir()
    _out(schedules.crontab_line(loaded))


# --- cache: compile caches in a store ---------------------------------------------------------

cache_app = typer.Typer(no_args_is_help=True, help="Compile caches in a store: list keys, show a manifest, "
                        "prune unreferenced archives and old keys.")
app.add_typer(cache_app, name="cache")
_CACHE_URI = typer.Argument(None, help="Store URI: s3://bucket/prefix or file:///abs/path (default: "
                            "file://$ORCHESTRATOR_HOME/store/compile-cache).")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


@cache_app.command("ls")
def cache_ls(uri: str | None = _CACHE_URI) -> None:
    """List cache keys with their entry counts and sizes."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator import cache

    stderr = Console(stderr=True)
    with Progress(TextColumn("reading manifests"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=stderr, transient=True, disable=not stderr.is_terminal) as bar:
        task = bar.add_task("manifests", total=None)
        root, keys = cache.list_keys(uri, progress=lambda done, total: bar.update(task, completed=done, total=total))
    if uri is None:
        # The default is this machine's store; SageMaker jobs' caches are in S3.
        _err(f"note: this is the local store ({root}); for the compile caches of SageMaker jobs give their S3 "
             "URI: `python -m orchestrator cache ls s3://BUCKET/compile-cache` (a job spec's compile_cache.uri; "
             "`python -m orchestrator infra outputs` prints the stack's)")
    if not keys:
        _out(f"no compile caches under {root}")
        return
    _out(f"{'KEY':<48} {'ENTRIES':>7} {'ENTRY SIZE':>11} {'ARCHIVES':>8} {'STORED':>10}  UPDATED")
    for key in keys:
        _out(f"{key.key:<48} {key.entries:>7} {_size(key.entry_bytes):>11} {key.archives:>8} "
             f"{_size(key.archive_bytes):>10}  {key.updated_at or '-'}")
        if key.problem:
            _err(f"warning: {key.key}: {key.problem}")


@cache_app.command("show")
def cache_show(args: list[str] = typer.Argument(..., metavar="[URI] KEY", help="Store URI (default: the "
                                                "local store, as for `cache ls`) and a key as `cache ls` shows it.")) -> None:
    """Show one key's manifest: key fields, entries and the archives beside it."""
    from orchestrator import cache
    from orchestrator.errors import InputError

    if len(args) > 2:
        raise InputError(f"cache show takes [URI] KEY, got {len(args)} arguments",
                         hint="e.g. `python -m orchestrator cache show s3://bucket/compile-cache KEY`; "
                              "`python -m orchestrator cache ls [URI]` lists the keys")
    uri, key = (None, args[0]) if len(args) == 1 else (args[0], args[1])
    detail = cache.show(uri, key)
    _out(f"key: {detail.key}")
    _out(f"manifest: {detail.manifest_uri}")
    for name, value in detail.fields.items():
        _out(f"  {name}: {value}")
    _out(f"updated: {detail.updated_at or '-'}")
    _out(f"{'ENTRY':<72} {'SIZE':>10}  ARCHIVE")
    for name, archive, size in detail.entries:
        _out(f"{name:<72} {_size(size):>10}  {archive}")
    referenced = sum(1 for _, _, used in detail.archives if used)
    stored = sum(size for _, size, _ in detail.archives)
    _out(f"{len(detail.entries)} entries; {len(detail.archives)} archives ({_size(stored)}), "
         f"{len(detail.archives) - referenced} not referenced")
    for warning in detail.warnings:
        _err(f"warning: {warning}")


@cache_app.command("prune")
def cache_prune(
    uri: str | None = _CACHE_URI,
    key: str | None = typer.Option(None, "--key", help="Delete this whole key."),
    older_than: float | None = typer.Option(None, "--older-than", min=0.0,
                                            help="Delete whole keys not updated for this many days."),
    grace_hours: float = typer.Option(1.0, "--grace-hours", min=0.0, help="Never delete archives younger "
                                      "than this: they may belong to a push in flight."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be deleted; delete nothing."),
) -> None:
    """Delete archives no manifest names (past the grace period), and whole keys when asked."""
    from orchestrator import cache

    report = cache.prune(uri, key=key, older_than_days=older_than, grace_s=grace_hours * 3600, dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    for action in report.deleted:
        _out(f"{verb} {action.uri} ({_size(action.bytes)}): {action.reason}")
    for note in report.skipped:
        _err(f"warning: {note}")
    young = f"; kept {report.kept_young} archive(s) younger than the grace period" if report.kept_young else ""
    _out(f"{verb} {len(report.deleted)} object(s), {_size(report.bytes)} under {report.store_uri}{young}")
    if report.deleted and report.store_uri.startswith("s3://"):
        _err(f"note: on a versioned bucket (the stack's is) S3 keeps what is deleted as noncurrent versions: the "
             f"{_size(report.bytes)} {'would be' if dry_run else 'are'} freed when they expire (the stack's lifecycle "
             "rule, CompileCacheNoncurrentDays: 30 days unless deployed otherwise), not at once")


_LIST_ITEM = re.compile(r"^(?:[-*]|\d+[.)])\s")


def reflowed(doc: str) -> str:
    """A docstring as help text: each paragraph's wrapped lines joined into one, list items kept
    one per line. Typer's rich help keeps every newline of a docstring, so lines wrapped at the
    source's width would show as ragged breaks in any other terminal width."""
    paragraphs = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            line = line.strip()
            if lines and not _LIST_ITEM.match(line):
                lines[-1] += " " + line
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def _reflow_help(*apps: typer.Typer) -> None:
    for sub in apps:
        for info in sub.registered_commands:
            if info.help is None and info.callback is not None and info.callback.__doc__:
                info.help = reflowed(info.callback.__doc__)


_reflow_help(app, infra_app, prices_app, sweep_app, schedule_app, cache_app)


# OSErrors no command turned into one of ours: those about the path given (exit 2) and
# what to do about each.
_PATH_ERRNOS = {
    errno.ENAMETOOLONG: "a name in the path is longer than the file system allows (255 bytes a name): use a "
                        "shorter one",
    errno.ELOOP: "the path goes round a loop of symbolic links: fix the links or give another path",
    errno.ENOTDIR: "a part of the path that should be a folder is a file: check the path",
    errno.EISDIR: "the path is a folder where a file was expected: check the path",
    errno.ENOENT: "check the path",
    errno.EACCES: "give a path you can read and write, or change its permissions",
    errno.EPERM: "give a path you can read and write, or change its permissions",
    errno.EROFS: "the file system is read-only: give a path on a writable one (ORCHESTRATOR_HOME for local state)",
}
_OTHER_ERRNOS = {
    errno.ENOSPC: "the disk is full: free some space there (or point ORCHESTRATOR_HOME at another disk) and run "
                  "the command again",
    errno.EDQUOT: "your disk quota is used up: free some space and run the command again",
    errno.EIO: "the disk reported an I/O error: check it, then run the command again",
}


def _last_resort(exc: BaseException) -> int:
    """Print an error that no command turned into ours (an OSError about a path, or a bug) as
    one message and a hint, never a traceback; return the exit code (2 for a bad path)."""
    if isinstance(exc, OSError) and exc.errno in _PATH_ERRNOS | _OTHER_ERRNOS:
        where = f"{exc.filename}: " if exc.filename else ""
        _err(f"error: {where}{exc.strerror or exc}")
        _err(f"hint: {(_PATH_ERRNOS | _OTHER_ERRNOS)[exc.errno]}")
        return 2 if exc.errno in _PATH_ERRNOS else 1
    _err(f"error: internal error: {type(exc).__name__}: {exc}")
    _err("hint: this is a bug in the orchestrator: run the command again with --debug before it "
         "(`python -m orchestrator --debug ...`) to see the traceback, and report it")
    return 1


def main() -> None:
    """Run the CLI, turning our errors into one message and an exit code.

    Usage errors (unknown command, missing argument) are typer's own: exit 2. With --debug
    the traceback comes first, then the hint, and the exit code is the error's own. Any
    other exception (an OSError no command translated, a bug) is one message too: exit 2 for
    an OSError about the path given (a name too long, not a folder...), else 1.
    """
    from orchestrator import aws

    aws.set_notifier(_err)
    try:
        app()
    except OrchestratorError as exc:
        if _state["debug"]:
            import traceback

            traceback.print_exc(file=sys.stderr)
            if exc.hint:
                _err(f"hint: {exc.hint}")
            sys.exit(exc.exit_code)
        _err(f"error: {exc.message}")
        if exc.hint:
            _err(f"hint: {exc.hint}")
        sys.exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - the last resort: no traceback without --debug
        if _state["debug"]:
            raise
        sys.exit(_last_resort(exc))
