"""Commands on one job: submit, status, logs, stop. They parse, call `actions.jobs` (which
backend holds a job, the dry run and the submit, rerun names), print and exit. Only the backend
protocol is used: the backend is the spec's (submit) or the one that owns the job."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import typer

from orchestrator.cli.job_view import print_logs, status_lines, wait
from orchestrator.cli.options import (
    INTERVAL_HELP,
    JOB_ARGUMENT,
    JOB_REGION_OPTION,
    POLL_MAX_S,
    finite_seconds,
)
from orchestrator.cli.output import err, finding_text, out

app = typer.Typer()


@contextmanager
def job_backend(job: str, region: str | None, read_only: bool = False):
    """The backend that owns `job`, for the block that asks it about the job
    (`actions.jobs.held_by`: its notes on stderr, its errors raised). `read_only` (status,
    logs): a ledger this process cannot write is read as it is (noted on stderr), and what the
    backend says is not recorded in it."""
    from orchestrator.actions import jobs as actions
    from orchestrator.ledger import Ledger

    ledger = Ledger(read_only=read_only)
    with actions.held_by(job, region, ledger, err) as backend:
        yield backend
        note_read_only(ledger)


def note_read_only(ledger) -> None:
    """Say so when a read-only command found the ledger not writable (see Ledger's read_only)."""
    from orchestrator.actions.jobs import read_only_note

    note = read_only_note(ledger)
    if note:
        err(note)


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


@app.command()
def submit(
    path: Path = typer.Argument(..., help="Job spec YAML."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what `plan` prints (the exact request); submit "
                                 "nothing."),
    wait_: bool = typer.Option(False, "--wait", help="Show the job's progress until it ends; exit 1 if it fails or "
                               "is stopped."),
    interval: float | None = typer.Option(None, "--interval", min=0.05, max=POLL_MAX_S, callback=finite_seconds, help=INTERVAL_HELP),
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

    from orchestrator import doctor as doctor_rules
    from orchestrator import spec
    from orchestrator.actions import jobs as actions
    from orchestrator.cli.specs import print_plan

    loaded = spec.load(path)
    submission = actions.dry_run(loaded, path, rerun=rerun, local=local, only_shown=dry_run, say=err)
    prepared = submission.prepared
    if dry_run:
        print_plan(loaded, prepared, as_json=False)
        return
    doctor_rules.raise_for(loaded, prepared.findings)  # errors, including a cost above the budget: exit 2
    for finding in prepared.findings:
        err(finding_text(loaded, finding))
    backend = actions.backend_of(submission)
    if quota_check_ and not local:
        from orchestrator.actions import quota_check

        # Before the source upload and CreateTrainingJob: exit 2 when nothing fits.
        quota_check.run(loaded, err, tolerant=True, backend=backend, wanted=prepared.quota_needs)
    if submission.run_here:
        err("runs on this machine: no cloud cost (the bound below is the real job's on AWS Batch)")
        if prepared.job["workers_per_node"] != prepared.target.workers_per_node:
            err(f"note: runtime xla runs one process on this machine's CPU (PJRT): the local run trains 1 worker "
                f"where {loaded.instance.type} runs {prepared.target.workers_per_node}, one per NeuronCore")
    err(prepared.estimate.describe())
    result = actions.schedule(submission, err)
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
    from orchestrator.actions.jobs import ledger_status
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
