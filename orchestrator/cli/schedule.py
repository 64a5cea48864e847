"""`schedule`: run a sweep on its cron schedule, from this machine or from system cron."""

from __future__ import annotations

from pathlib import Path

import typer

from orchestrator.cli.options import POLL_OPTION
from orchestrator.cli.output import err, out

app = typer.Typer(name="schedule", no_args_is_help=True, help="Run a sweep on its cron schedule, from this machine "
                  "or from system cron (run, tick, crontab), or from AWS with the laptop closed (plan).")


def _scheduler(path: Path, poll: float | None):
    from orchestrator import spec
    from orchestrator.actions import sweeps as actions

    return actions.scheduler(spec.load_sweep(path), poll, err)


def _print_tick(report) -> None:
    stamp = report.now.strftime("%Y-%m-%d %H:%M:%S UTC")
    for sweep_id in report.planned:
        out(f"{stamp} tick planned: sweep {sweep_id}")
    if report.skipped:
        out(f"{stamp} skipped {len(report.skipped)} missed tick(s) (catchup policy): "
             + ", ".join(t.strftime("%Y-%m-%d %H:%M") for t in report.skipped[-5:]))
    for progress in report.progress:
        for line in progress.new_events:  # every event of the tick, none left out
            out(f"{stamp} {progress.sweep_id}: {line}")
        counts = ", ".join(f"{n} {state}" for state, n in sorted(progress.counts.items()))
        out(f"{stamp} {progress.sweep_id}: {counts}" + (" (done)" if progress.done else ""))
    for sweep_id in report.busy:
        out(f"{stamp} {sweep_id}: another process is running it")
    for note in report.notes:
        err(f"note: {note}")
    out(f"{stamp} next tick: {report.next_fire.strftime('%Y-%m-%d %H:%M UTC')}")


@app.command("run")
def schedule_run(
    path: Path = typer.Argument(..., help="Sweep spec YAML with a schedule."),
    poll: float | None = POLL_OPTION,
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
        err(f"interrupted (Ctrl-C) while {scheduler.doing}")
        err(f"the schedule is not kept until it runs again: `python -m orchestrator schedule run {path}` continues it "
             f"(ticks missed meanwhile follow catchup: {scheduler.schedule.catchup}), or `python -m orchestrator "
             f"schedule crontab {path}` prints the line for system cron")
        unfinished = scheduler.unfinished()
        if unfinished:
            err(f"unfinished tick sweeps: {', '.join(unfinished)}; their submitted jobs keep running, and "
                 f"`python -m orchestrator sweep resume {unfinished[-1]}` follows one now")
        raise typer.Exit(code=130) from None


@app.command("tick")
def schedule_tick(
    path: Path = typer.Argument(..., help="Sweep spec YAML with a schedule."),
    follow: bool = typer.Option(True, "--follow/--no-follow", help="Hand each unfinished tick sweep to a "
                                "background `sweep resume` that drives it to the end."),
    poll: float | None = POLL_OPTION,
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
            pid, log = sweeps.spawn(progress.sweep_id, scheduler.ledger.path.parent, poll)
        except sweeps.RunnerBusy as exc:
            # Another tick (or a `sweep resume`) follows it already.
            out(f"{progress.sweep_id}: already followed by another process" + (f" (pid {exc.pid})" if exc.pid else ""))
            continue
        out(f"{progress.sweep_id}: followed in the background (pid {pid}, log {log})")


@app.command("next")
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
        out(f"{when:%Y-%m-%d %H:%M} UTC{local}")


@app.command("crontab")
def schedule_crontab(path: Path = typer.Argument(..., help="Sweep spec YAML with a schedule.")) -> None:
    """Print the crontab entry that runs `schedule tick` for this sweep (add it with `crontab -e`)."""
    from orchestrator import schedule as schedules
    from orchestrator import spec

    loaded = spec.load_sweep(path)
    schedules.ensure_log_dir()
    out(schedules.crontab_line(loaded))


# --- the schedule kept in AWS (EventBridge Scheduler + Step Functions) -----------------------


def _cloud_plan(path: Path):
    from orchestrator import schedule as schedules
    from orchestrator import spec
    from orchestrator.schedule import statemachine

    loaded = spec.load_sweep(path)
    schedules.require_schedule(loaded)
    return statemachine.placeholder_plan(loaded)


def _compiled(path: Path):
    """The sweep's schedule, compiled once for the whole command. The trials, their retries and
    their bounds are fixed in the state machine: a run that could pass the budget is refused
    here (not when removing: a schedule is removed whatever it costs)."""
    from orchestrator.schedule import in_aws_stack
    from orchestrator.schedule.compiled import compile_schedule

    compiled = compile_schedule(_cloud_plan(path))
    in_aws_stack.check_budget(compiled)
    return compiled


@app.command("plan")
def schedule_plan(path: Path = typer.Argument(..., help="Sweep spec YAML with a schedule.")) -> None:
    """Show what `schedule deploy` would make: the EventBridge schedule, the Step Functions state
    machine (each trial's jobs, retries and failovers), the roles, and the worst-case cost per
    run and per month. Calls no AWS API. Exit 2 when a trial fails the doctor or a run with
    every retry would pass budget.max_total_cost_usd."""
    from datetime import datetime, timezone

    from orchestrator.schedule import in_aws_stack

    compiled = _compiled(path)
    for line in in_aws_stack.describe(compiled, datetime.now(timezone.utc)):
        out(line)


YES_OPTION = typer.Option(False, "--yes", "-y", help="Go ahead without asking (for scripts).")


def _ask(question: str, yes: bool, refused: str) -> bool:
    """True when the user (or --yes) agrees. No terminal to answer (a script without --yes) or
    Ctrl-C: InputError (exit 2) saying `refused`, as `infra deploy` does."""
    from orchestrator.errors import InputError

    if yes:
        return True
    try:
        return typer.confirm(question, default=False)
    except typer.Abort:
        raise InputError(f"no answer to the confirmation; {refused}", hint="pass --yes to go ahead without asking") from None


@app.command("deploy")
def schedule_deploy(path: Path = typer.Argument(..., help="Sweep spec YAML with a schedule."),
                    yes: bool = YES_OPTION) -> None:
    """Deploy the schedule to AWS (EventBridge Scheduler starting a Step Functions state machine):
    it then runs with this machine off. Shows the plan, the monthly worst case and the stack's
    changes, then asks (as `infra deploy` does; --yes for scripts; off a terminal without
    --yes: exit 2, nothing deployed). A re-deploy of a changed sweep updates it in place. Exit 2
    when a run would pass the sweep's budget, or a job it may make cannot pass its quota."""
    from datetime import datetime, timezone

    from orchestrator.schedule import in_aws, in_aws_stack

    compiled = _compiled(path)
    for line in in_aws_stack.describe(compiled, datetime.now(timezone.utc)):
        out(line)
    region = compiled.plan.sweep.base_spec.region

    def confirm(change) -> bool:
        out(f"stack {change.stack_name} in {region} ({change.kind.lower()}) would change:")
        for c in change.changes:
            out(f"  {c.action.lower()}: {c.logical_id} ({c.resource_type})"
                + (f", replacement {c.replacement}" if c.replacement else ""))
        if not change.changes:
            out("  no resource changes (parameters or outputs only)")
        return _ask("Deploy this schedule? It starts paid jobs on its cron until removed", yes,
                    "the change set was deleted, nothing was uploaded or deployed")

    change, outputs = in_aws.deploy(compiled, region, confirm=confirm, on_note=lambda line: err(f"quota: {line}"),
                                   on_event=lambda e: out(f"  {e.logical_id} {e.resource_type}: {e.status}"
                                                          + (f" ({e.reason})" if e.reason else "")))
    if change.nothing_to_do:
        out(f"stack {change.stack_name} is already this schedule: nothing changed")
    elif outputs is None:
        out("not deployed; the change set was deleted")
    else:
        out(f"deployed stack {change.stack_name} in {region} ({change.kind.lower()})")


@app.command("list")
def schedule_list(region: str = typer.Option(None, "--region", help="AWS region (default: the profile's).")) -> None:
    """The schedules deployed to AWS: each stack, its state, its latest run and that run's jobs
    (a running run's: each trial's latest job, its state and why it failed, and the trials
    with no job yet)."""
    from orchestrator.region import default_region
    from orchestrator.schedule import in_aws

    where = default_region(region)
    found = in_aws.deployed(where)
    if not found:
        out(f"no schedules deployed in {where}")
    for item in found:
        out(f"{item.stack} {item.status}: {item.description}")
        if item.next_fire:
            out(f"  next fire: {item.next_fire}")
        if item.problem:
            err(f"warning: {item.stack}: {item.problem}")
            continue
        out(f"  last run: {item.last_run} (started {item.last_start})" if item.last_run else "  no run yet")
        for job in item.jobs:
            out(job_line(job))
        if item.waiting is not None:
            out(f"  {item.waiting} trial(s) with no job yet (not started, or their create refused: NotCreated once "
                "the run ends)" if item.waiting else "  every trial has a job")
        if item.note:
            err(f"note: {item.stack}: {item.note}")
        if item.jobs_problem:
            err(f"warning: {item.stack}: {item.jobs_problem}")


def job_line(job: dict) -> str:
    """One trial of a run as `schedule list` shows it: its job, state, retries and cause (the
    failure kind the state machine read from the job's reason, or the error that ended it; of a
    running run's failed job, its kind and reason as listed)."""
    kind = job.get("kind")
    reason = job.get("reason")
    return (f"  {job.get('trial')} {job.get('job') or '(no job)'}: {job.get('status')}"
            + (f" after {job['attempt']} retr{'y' if job['attempt'] == 1 else 'ies'}" if job.get("attempt") else "")
            + (f" ({kind} failure{f': {reason}' if reason else ''})" if kind and kind != "none"
               else f" ({reason})" if reason else "")
            + (f" ({job['error']})" if job.get("error") else ""))


@app.command("remove")
def schedule_remove(
    target: str = typer.Argument(..., help="Sweep spec YAML with a schedule, or a stack name `schedule list` shows."),
    region: str = typer.Option(None, "--region", help="AWS region (default: the sweep's, or the profile's)."),
    yes: bool = YES_OPTION,
) -> None:
    """Remove a deployed schedule: its schedule, state machine, roles and queue, after asking
    (--yes for scripts; off a terminal without --yes: exit 2, nothing removed). Jobs it started
    keep running (they are not the stack's). Given a file, only the schedule that file deployed
    (exit 2 when another file with the same sweep name owns it); given a stack name, that stack."""
    from orchestrator.region import default_region
    from orchestrator.schedule import in_aws, in_aws_stack

    planned = None
    if target.endswith((".yaml", ".yml")):
        planned = _cloud_plan(Path(target))
        stack, where = in_aws_stack.stack_name(planned), region or planned.sweep.base_spec.region
    else:
        stack, where = target, default_region(region)
    def confirm() -> bool:
        out(f"stack {stack} in {where}: its schedule, state machine, roles and queue would be deleted (jobs it "
            "started keep running)")
        return _ask(f"Remove schedule stack {stack}?", yes, "nothing was removed")

    if not in_aws.remove(stack, where, confirm=confirm, plan=planned):
        out("not removed")
        return
    out(f"removed stack {stack} from {where}")
