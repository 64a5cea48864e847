"""`sweep`: many jobs from one spec (`orchestrator.sweep`): plan, run (here or in the
background), resume, status and stop. Driving a sweep, its backends and its admission are
`actions.sweeps`'; this module prints the plan, the progress and the end."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from orchestrator.cli.jobs import note_read_only
from orchestrator.cli.options import POLL_OPTION
from orchestrator.cli.output import (
    err,
    fitted_table,
    fitting,
    grid_text,
    out,
    plain,
    screen_width,
    shared_widths,
    table_text,
)
from orchestrator.lifecycle import Status

app = typer.Typer(name="sweep", no_args_is_help=True, help="Sweeps: grid and random trials over a job spec, "
                  "run with a concurrency cap, retries and crash safety.")


def plan_table(planned) -> str:
    """The table `sweep plan` prints: every trial with its overrides, failover and cost bounds.
    A column that would say the same nothing for every trial is left out (no failover, a worst
    case equal to the bound, no cloud cost), so the job names and overrides get the room."""
    bounds = [(t.usd_max, t.worst_usd) for t in planned.trials]
    costless = all(usd == 0 and worst == 0 for usd, worst in bounds)
    title = (f"sweep {planned.sweep_id}: {len(planned.trials)} trials, concurrency {planned.sweep.concurrency}, "
             f"max_retries {planned.sweep.max_retries}" + ("; no cloud cost" if costless else ""))
    table = fitted_table(plain(title))
    columns = ["#", "job name", "overrides", "instance"]
    if any(t.failover for t in planned.trials):
        columns.append("failover")
    # The cost bound, and beside it the worst case when retries or failover can raise it.
    cost = None if costless else "bound/worst USD" if any(worst != usd for usd, worst in bounds) else "bound USD"
    if cost:
        columns.append(cost)
    # No trial column: a trial's id ends its job name (<sweep id>-<trial id>).
    texts = {t.job_name: overrides_text(t.trial.overrides) for t in planned.trials}
    amounts = ("#", "bound USD", "bound/worst USD")
    mixed = len(planned.backends) > 1
    cells = [{"#": str(t.trial.index), "job name": t.job_name, "overrides": texts[t.job_name],
              # A sweep over backends says which each trial runs on, beside its instance.
              "instance": f"{t.trial.spec.instance.type} x{t.trial.spec.instance.count}"
                          + (f" ({t.trial.spec.backend})" if mixed else ""),
              # In-request failover (InstancePreferences) is said as such: one job, the bound its dearest type's.
              "failover": " ".join(t.chain[1:]) or (" ".join(t.preferences[1:]) + " (in the request)"
                                                    if t.preferences[1:] else "-"), "bound USD": _amount(t.usd_max),
              "bound/worst USD": f"{_amount(t.usd_max)}/{_amount(t.worst_usd)}"} for t in planned.trials]
    # The short columns (index, amounts) hold what they show; the others share the rest of the
    # screen (`shared_widths`), folded, never cut with "…": each trial shows in any width.
    fixed = {c: max([len(c), *(len(row[c]) for row in cells)]) for c in columns if c in amounts}
    wants = {c: max([len(c), *(len(line) for row in cells for line in row[c].splitlines())])
             for c in columns if c not in amounts}
    widths = {**fixed, **shared_widths(wants, screen_width() - sum(fixed.values()) - 3 * (len(columns) - 1),
                                       first=("job name", "overrides"))}
    for column in columns:
        whole = column in amounts
        table.add_column(column, justify="right" if whole else "left", overflow="fold", no_wrap=whole,
                         width=widths[column])
    from orchestrator.names import shown_lines

    for row in cells:
        # Broken at separators to the column's width, so rich never folds a name mid-word.
        table.add_row(*(plain(row[c] if c in amounts else shown_lines(row[c], widths[c])) for c in columns))
    return table_text(table)


def overrides_text(overrides: dict) -> str:
    """A trial's overrides for a table cell: one per line, `key=value`, a field a trial unsets
    (null) as `key unset` rather than Python's `None`; "(base)" when there are none."""
    from orchestrator import sweep as sweeps

    return "\n".join(f"{k} unset" if v is None else f"{k}={sweeps.shown(v)}" for k, v in overrides.items()) or "(base)"


def _amount(value: float) -> str:
    """A cost in a column headed USD."""
    return f"{value:.2f}" if value == value and value != float("inf") else "unknown"


def _usd(value: float) -> str:
    return f"{value:.2f} USD" if value == value and value != float("inf") else "unknown"


def plan_summary(planned) -> list[str]:
    """The lines under the plan's table: total, worst case, prices, duplicates, warnings."""
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
    # One line per price source, naming the instance types (and backend) it prices when there
    # are several: the shipped list checks some types' prices and not others, and a sweep over
    # backends prices SageMaker and EC2 (Batch) apart; two bare "prices:" lines explained nothing.
    priced: dict[tuple, tuple[dict, str]] = {}
    for t in planned.trials:
        estimate = t.prepared.estimate
        if estimate.price is not None:
            types, _ = priced.setdefault((estimate.price.source, estimate.price.as_of), ({}, estimate.note))
            # The priced type: a trial's own, or the dearest of its instance preferences.
            types.setdefault(estimate.price.type, t.trial.spec.backend)
    for (source, as_of), (types, note) in priced.items():
        label = f" for {', '.join(f'{k} ({v})' for k, v in sorted(types.items()))}" if len(priced) > 1 else ""
        lines.append(f"prices{label}: {source}, {as_of}; {note}")
    for index, same in planned.duplicates:
        lines.append(f"note: trial {index} is identical to trial {same}; it runs once")
    for finding, trial_ids in planned.warnings.items():
        lines.append(f"warning: {finding} (trials {', '.join(trial_ids)})")
    return lines


def plan_with_progress(definition):
    """`sweep.plan(definition)` with a progress bar on stderr when it is a terminal (a plan of
    10,000 trials takes seconds); off a terminal, nothing is drawn."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator import sweep as sweeps

    stderr = Console(stderr=True)
    with Progress(TextColumn("planning trials"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=stderr, transient=True, disable=not stderr.is_terminal) as bar:
        task = bar.add_task("plan", total=None)
        return sweeps.plan(definition, progress=lambda done, total: bar.update(task, completed=done, total=total))


@app.command("plan")
def sweep_plan(
    path: Path = typer.Argument(..., help="Sweep spec YAML."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    read_stores: bool = typer.Option(False, "--forecast", help="Also read an s3:// output and compile cache "
                                     "for the forecast (the local store is always read)."),
) -> None:
    """Expand and check every trial; print each with its cost bound, and the total; and a
    forecast from earlier completed runs of the same trials and the compile cache.

    Exit 2 when a trial does not validate or fails the doctor, or when the total is above
    budget.max_total_cost_usd. Submits nothing.
    """
    from orchestrator import forecast, spec
    from orchestrator import sweep as sweeps

    loaded = spec.load_sweep(path)
    _say_if_nothing_varies(loaded)
    planned = plan_with_progress(loaded)
    predicted = forecast.for_trials(planned.trials, read_stores)
    if as_json:
        doc = planned.to_json()
        for trial in doc["trials"]:
            if trial["job_name"] in predicted:
                trial["forecast"] = predicted[trial["job_name"]].to_json()
        out(json.dumps(doc, indent=2))
    else:
        out(plan_table(planned))
        for line in plan_summary(planned) + forecast_lines(predicted, read_stores, len(planned.trials)):
            out(line)
    sweeps.check_budget(planned)


def _say_if_nothing_varies(loaded) -> None:
    """A sweep without grid, random or variants is one trial, its base as it is: taken (its
    retries, failover, budget and schedule are what a sweep adds to one job), and said, since a
    sweep file usually means to vary something (issue 22: it was accepted silently)."""
    if not loaded.grid and loaded.random is None and not loaded.variants:
        err(f"note: sweep {loaded.sweep} varies nothing (no grid:, random: or variants:): it is one trial, its base "
            f"{loaded.base} as it is, run with the sweep's retries, failover, budget and schedule")


def forecast_lines(predicted: dict, read_stores: bool, total: int | None = None) -> list[str]:
    """The plan's forecast: trials with an earlier completed run, their duration and cost,
    and which compile cache keys hold entries."""
    from orchestrator import forecast
    if not predicted:
        return ["forecast: not read (s3:// stores are read with --forecast)"]
    ran = {name: f for name, f in predicted.items() if f.previous is not None}
    lines = []
    if total is not None and len(predicted) < total:
        lines.append(f"forecast: {total - len(predicted)} of {total} trials not read (their s3:// stores are "
                     "read with --forecast)")
    # A store that could not be read is said first, and its trials are not counted as never run.
    unread = sorted({f.results_unread for f in predicted.values() if f.results_unread})
    lines += [f"forecast: could not read the {what}" for what in unread]
    known = {name: f for name, f in predicted.items() if not f.results_unread}
    if ran:
        seconds = sum(f.duration_s or 0 for f in ran.values())
        priced = [f.usd for f in ran.values() if f.usd is not None]
        usd = f", ~{sum(priced):.2f} USD" if priced and len(priced) == len(ran) else ""
        lines.append(f"forecast: {len(ran)} of {len(predicted)} trials ran before with the same spec: ~{seconds:.0f} s "
                     f"of launcher time{usd} for those")
    elif known:
        lines.append(f"forecast: none of the {len(known)} trials whose results were read has a completed run yet"
                     if unread else f"forecast: none of the {len(predicted)} trials has a completed run yet")
    caches = {f.cache.key: f.cache for f in predicted.values() if f.cache is not None}
    for state in caches.values():
        lines.append(state.describe())
    cache_unread = sorted({f.cache_unread for f in predicted.values() if f.cache_unread})
    lines += [f"compile cache: could not read the {what}" for what in cache_unread]
    off = sum(1 for f in predicted.values() if f.cache_off)
    if off:
        lines.append(forecast.CACHE_OFF if off == len(predicted) else
                     f"compile cache: off for {off} of {len(predicted)} trials (compile_cache.mode: off)")
    if off < len(predicted) and not caches and not cache_unread:
        lines.append("compile cache: no entries for these trials' keys yet (the first runs compile)")
    return lines


class SweepDisplay:
    """Progress of a running sweep: a live rich table on a terminal, event lines elsewhere, and
    there a heartbeat line when nothing was printed for `follow.heartbeat_seconds()` (a
    sweep of two-hour jobs must not look dead to a CI log)."""

    def __init__(self, runner, *, clock=None, heartbeat_s: float | None = None):
        import time

        from rich.console import Console

        from orchestrator.follow import heartbeat_seconds

        self.runner = runner
        self.console = Console()
        self.live = None
        self.printed = 0
        self.interactive = self.console.is_terminal
        self.clock = clock or time.monotonic
        self.heartbeat_s = None if self.interactive else (heartbeat_s or heartbeat_seconds())
        self.last_line = self.clock()
        self.rounds = 0

    def __enter__(self):
        if self.interactive:
            from rich.live import Live

            self.live = Live(console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)

    def render(self, progress):
        """The live view of `progress`: counts, one row per trial, the last events."""
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
        mixed = len(self.runner.d.backends) > 1
        for column in ("trial", "job", *(("backend",) if mixed else ()), "instance", "state", "detail"):
            table.add_column(column)
        for view in self.runner.views():
            table.add_row(*map(plain, (view.trial.trial_id, view.job_name, *((view.trial.backend,) if mixed else ()),
                                        view.instance_type, view.status, (view.detail or "")[:80])))
        events = Text("\n".join(progress.events[-5:]), style="dim")
        return Group(Text(head), table, events)

    def __call__(self, progress) -> None:
        if self.live is not None:
            self.live.update(self.render(progress))
            return
        # Every event, once: a log (this, or --detach's) may not summarise.
        fresh = len(progress.new_events)
        for line in progress.new_events:
            out(line)
        first = self.rounds == 0
        self.rounds += 1
        self.printed = progress.event_count
        now = self.clock()
        if fresh > 0:
            self.last_line = now
        elif first or (self.heartbeat_s is not None and now - self.last_line >= self.heartbeat_s):
            # The first round says where the sweep stands even when nothing changed in it (a
            # resume of jobs in flight): a log must not stay empty until the first heartbeat.
            counts = ", ".join(f"{n} {state}" for state, n in sorted(progress.counts.items()))
            reason = progress.waiting_reason or ""
            waiting_for = (f"; {reason}" if reason.startswith("waiting for quota") else
                           f"; backing off: {reason}" if reason else "")
            out(f"sweep {progress.sweep_id}: {counts}; {progress.in_flight} in flight{waiting_for}; "
                + ("following them" if first else "still running"))
            self.last_line = now


def drive(definition, ledger, poll: float | None, prepared: dict | None = None, ready_fd: int | None = None) -> None:
    """Run a saved sweep to the end in this process (`actions.sweeps.drive`), with the progress
    display.

    SIGTERM (what `sweep stop` sends this machine's runner, foreground or detached) ends it
    as a stop the runner noticed itself (`sweep.process.Sigterm`): the display closes, the
    counts are printed, exit 0 when the sweep's stop flag is set, else exit 143 with the
    resume hint. Ctrl-C: exit 130 with the resume hint. `ready_fd` (a detached runner's):
    where to say "ok" once this process holds the sweep, or "busy PID" when another does.
    """
    from orchestrator.actions import sweeps as actions
    from orchestrator.errors import JobFailed

    try:
        driven = actions.drive(definition, ledger, poll, watch=SweepDisplay, report=out, say=err, prepared=prepared,
                               ready_fd=ready_fd)
    except actions.Interrupted:
        err(f"interrupted; continue with `python -m orchestrator sweep resume {definition.sweep_id}` "
            "(jobs already submitted keep running)")
        raise typer.Exit(code=130) from None
    final = driven.final
    counts = ", ".join(f"{n} {state}" for state, n in sorted(final.counts.items()))
    out(f"sweep {definition.sweep_id}: {counts}")
    if driven.terminated and not final.stopped:
        err(f"terminated (SIGTERM); continue with `python -m orchestrator sweep resume {definition.sweep_id}` "
            "(jobs already submitted keep running)")
        raise typer.Exit(code=143)
    if final.stopped:
        # The counts are the runner's last view: the stopping command cancels what had not
        # started after this runner let go of the sweep.
        out(f"stopped (sweep stop); `python -m orchestrator sweep status {definition.sweep_id}` shows what it stopped")
        return
    if final.failed:
        raise JobFailed(f"sweep {definition.sweep_id}: {final.failed} trial(s) failed",
                        hint=f"see `python -m orchestrator sweep status {definition.sweep_id}` for the reasons")


@app.command("run")
def sweep_run(
    path: Path = typer.Argument(..., help="Sweep spec YAML."),
    detach: bool = typer.Option(False, "--detach", help="Run in a background process; log under "
                                "ORCHESTRATOR_HOME/sweeps/."),
    poll: float | None = POLL_OPTION,
) -> None:
    """Plan, check, then submit and follow every trial to the end (idempotent: run it again,
    or `sweep resume`, after a crash). Exit 1 when a trial failed for good."""
    from orchestrator import spec
    from orchestrator import sweep as sweeps
    from orchestrator.actions import sweeps as actions
    from orchestrator.ledger import Ledger
    from orchestrator.sweep import admission

    loaded = spec.load_sweep(path)
    _say_if_nothing_varies(loaded)
    ledger = Ledger()
    # Planned without the failover types whose quota a trial cannot pass (said).
    planned, notes = admission.plan_within_quotas(
        loaded, sweeps.Router.create(actions.plan_backends(loaded), region=loaded.base_spec.region, ledger=ledger))
    for note in notes:
        err(f"quota: {note}")
    sweeps.check_budget(planned)
    definition = sweeps.save(planned, ledger)
    err(f"sweep {definition.sweep_id}: {len(planned.trials)} trials, {plan_summary(planned)[0]}")
    if detach and not sweeps.Runner(definition, None, ledger).has_work():
        # The runner would find nothing to do (every trial ended for good, and nothing `sweep
        # stop` stopped can be reopened): report it here instead of starting it in the background.
        err(f"sweep {definition.sweep_id}: nothing left to run, so no background runner was started")
        detach = False
    if not detach:
        drive(definition, ledger, poll, planned.prepared())
        return
    pid, log = sweeps.spawn(definition.sweep_id, ledger.path.parent, poll)
    out(f"sweep {definition.sweep_id}: running in the background (pid {pid})")
    out(f"log: {log}")
    out(f"follow with `python -m orchestrator sweep status {definition.sweep_id}`; "
         f"stop with `python -m orchestrator sweep stop {definition.sweep_id}`")


@app.command("resume")
def sweep_resume(
    target: str = typer.Argument(..., help="Sweep id, name or YAML."),
    poll: float | None = POLL_OPTION,
    ready_fd: int | None = typer.Option(None, "--ready-fd", hidden=True, help="(internal: sweep run --detach)"),
    retry_failed: bool = typer.Option(False, "--retry-failed",
                                      help="Also run again, as new attempts (-rN), trials that failed for a reason "
                                           "outside the job (store, infrastructure, capacity), within the budget."),
) -> None:
    """Continue a sweep after a crash, a closed laptop, --detach or `sweep stop`: reconcile,
    then run on. Trials that `sweep stop` cancelled before submission are submitted under their
    own names; jobs it stopped in flight are submitted again as new attempts (-rN). With
    --retry-failed, trials that failed for a reason outside the job run again too (a job's
    own error does not)."""
    from orchestrator import sweep as sweeps
    from orchestrator.ledger import Ledger

    ledger = Ledger()
    definition = sweeps.load_definition(ledger, sweeps.find_sweep(ledger, target))
    # A budget (or concurrency, max_retries) changed in the sweep's file counts, as for `sweep run`.
    try:
        definition, note = sweeps.reload_policy(ledger, definition)
    except sweeps.RunnerBusy as exc:
        sweeps.tell(ready_fd, f"busy {exc.pid or 0}")
        raise
    if note:
        err(note)
    if retry_failed:
        with sweeps.runner_lock(definition.sweep_id):
            again = sweeps.Runner(definition, None, ledger).rerun_failed()
        out(f"sweep {definition.sweep_id}: {len(again)} failed trial(s) to run again" + (
            f": {', '.join(again)}" if again else " (none failed outside the job)"))
    drive(definition, ledger, poll, ready_fd=ready_fd)


@app.command("status")
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
        note_read_only(ledger)


def _sweep_status(ledger, target: str | None, refresh: bool, as_json: bool) -> None:
    from orchestrator import sweep as sweeps

    if target is None:
        ids = sweeps.sweep_ids(ledger)
        if not ids:
            out("no sweeps in the ledger")
        for sweep_id in ids:
            counts: dict[str, int] = {}
            for entry in ledger.entries(sweep_id=sweep_id):
                counts[entry.status] = counts.get(entry.status, 0) + 1
            out(f"{sweep_id}: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) + " (jobs)")
        return
    from orchestrator.actions import sweeps as actions

    definition = sweeps.load_definition(ledger, sweeps.find_sweep(ledger, target))
    runner = sweeps.Runner(definition, actions.sweep_backend(definition, ledger) if refresh else None, ledger)
    if refresh:
        runner.refresh()
    views = runner.views()
    holder = sweeps.runner_state(ledger, definition.sweep_id)
    if as_json:
        out(json.dumps({"sweep_id": definition.sweep_id, "runner": holder, "trials": [{
            "trial_id": v.trial.trial_id, "index": v.trial.index, "overrides": v.trial.overrides,
            "job_name": v.job_name, "attempt": v.attempt, "backend": v.trial.backend, "state": v.status, "final": v.final,
            "instance_type": v.instance_type, "detail": v.detail} for v in views]}, indent=2))
        return

    # A sweep on one backend names it in the title; one across backends has a column for it.
    mixed = len(definition.backends) > 1
    columns = ("#", "trial", "job", "try", *(("backend",) if mixed else ()), "instance", "state", "overrides", "detail")
    whole = ("#", "trial", "try", "backend")
    rows = []
    for v in views:
        state = v.status + ("" if v.final or v.status != Status.FAILED else " (retry due)")
        rows.append(dict(zip(columns, map(str, (
            v.trial.index, v.trial.trial_id, v.job_name, v.attempt, *((v.trial.backend,) if mixed else ()),
            v.instance_type, state, overrides_text(v.trial.overrides), v.detail or "")), strict=True)))
    # Every column at least as wide as its longest word (the short ones whole), the rest of the
    # screen to the job and the overrides first; each cell broken at separators
    # (`names.shown_lines`), never mid-word, the gap between columns narrowed to fit 80 columns.
    gap, found = fitting([(c, [r[c] for r in rows], c in whole) for c in columns], first=("job", "overrides"))
    widths = dict(zip(columns, found, strict=True))
    title = f"sweep {definition.sweep_id} ({', '.join(definition.backends)}, {definition.region})"
    from orchestrator.names import shown_lines

    cells = [[shown_lines(row[c], widths[c]).split("\n") for c in columns] for row in rows]
    # rich's own layout at its default gap, written directly (rich measured and wrapped every cell
    # again: most of a 1,000-trial status's time, docs/BENCHMARKS.md); rich for anything else.
    text = grid_text(title, list(columns), widths, cells) if gap == 3 else None
    if text is None:
        table = fitted_table(plain(title), gap=gap)
        for column in columns:
            table.add_column(shown_lines(column, widths[column]), overflow="fold", width=widths[column])
        for lines in cells:
            table.add_row(*(plain("\n".join(cell)) for cell in lines))
        text = table_text(table)
    out(text)
    done = sum(1 for v in views if v.final)
    out(f"{done}/{len(views)} trials final")
    # Wrapped to the terminal's width ($COLUMNS) at spaces and after hyphens, as the tables are.
    import textwrap

    for line in textwrap.wrap(_runner_line(definition.sweep_id, holder, runner.has_work()), width=screen_width(),
                              subsequent_indent="  ", break_long_words=False):
        out(line)


def _runner_line(sweep_id: str, holder: dict, has_work: bool) -> str:
    """Whether a runner holds the sweep (pid, host, alive) and, when none does, how to go on."""
    who = f"pid {holder['pid']} on {holder['host']}" if holder["pid"] is not None else None
    resume = f"`python -m orchestrator sweep resume {sweep_id}` continues it"
    if holder["alive"]:
        return f"runner: {who or 'a process of this machine'}, running"
    if holder["alive"] is None:
        return (f"runner: last {who}, on another host: this machine cannot tell whether it still runs"
                + (f"; if it does not, {resume}" if has_work else ""))
    if not has_work:
        return "runner: none (nothing left to run)"
    ended = f" ({who} has exited)" if who else ""
    return f"runner: none{ended}; jobs already submitted keep running, and {resume}"


@app.command("stop")
def sweep_stop(
    target: str = typer.Argument(..., help="Sweep id, name or YAML."),
    wait: float = typer.Option(15.0, "--wait", min=0.0, help="Seconds to wait for this machine's runner to exit."),
) -> None:
    """Stop a sweep: its runner on this machine exits, in-flight jobs are stopped, trials not
    yet submitted are marked stopped. Exit 1 when a job could not be stopped, or when this
    machine's runner has not exited in time (it was signalled; the stop flag keeps it from
    submitting more)."""
    from orchestrator import sweep as sweeps
    from orchestrator.actions import sweeps as actions
    from orchestrator.errors import BackendError
    from orchestrator.ledger import Ledger

    ledger = Ledger()
    definition = sweeps.load_definition(ledger, sweeps.find_sweep(ledger, target))
    sweep_id = definition.sweep_id
    sweeps.request_stop(ledger, sweep_id)
    with sweeps.take_over(sweep_id, sweeps.runner_pid(ledger, sweep_id), wait):
        runner = sweeps.Runner(definition, actions.sweep_backend(definition, ledger), ledger)
        report = sweeps.stop(runner)
    for name in report.stopped_jobs:
        out(f"stopping {name}")
    if report.stopped_jobs or report.cancelled:
        # Resume reopens what was stopped only within the budget and retry limits.
        then = (f"continue it with `python -m orchestrator sweep resume {sweep_id}`" if runner.has_work() else
                f"a resume would run nothing (budget or retries used up: `python -m orchestrator sweep status "
                f"{sweep_id}` shows why)")
        out(f"sweep {sweep_id}: {len(report.stopped_jobs)} job(s) stopping, "
             f"{len(report.cancelled)} trial(s) cancelled before submission; {then}")
    elif not report.errors:
        out(f"sweep {sweep_id}: nothing in flight, nothing stopped" + (
            f"; trials are left to run: continue them with `python -m orchestrator sweep resume {sweep_id}`"
            if runner.has_work() else ": every trial has ended"))
    if report.errors:
        for line in report.errors:
            err(f"error: {line}")
        raise BackendError(f"{len(report.errors)} job(s) could not be stopped",
                           hint=f"the errors above say why; once that is fixed (or for a passing error), run "
                           f"`python -m orchestrator sweep stop {sweep_id}` again: it stops only what still runs")
