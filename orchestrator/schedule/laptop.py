"""The laptop's scheduler: a sweep's schedule kept by this machine (`schedule run`, or `schedule
tick` from its system cron), as against one kept in AWS (`in_aws`). Which ticks are due (the
catchup policy), submitting each as a sweep of its own, and following the tick sweeps. See the
package docstring for the contract.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from orchestrator import sweep as sweeps
from orchestrator.schedule import cron
from orchestrator.schedule.cron import next_fires, require_schedule
from orchestrator.sweep import admission

if TYPE_CHECKING:
    from orchestrator.backends.running import Backend
    from orchestrator.ledger import Ledger
    from orchestrator.spec import ScheduleSpec, SweepSpec

ON_TIME_SECONDS = 300
MAX_SLEEP_SECONDS = 60.0
KEEP_HISTORY = 50


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, timezone.utc)


@dataclass(frozen=True)
class Due:
    """What one evaluation found: ticks to submit now (oldest first), ticks passed over."""

    submit: list[datetime]
    skipped: list[datetime]
    newest: datetime | None
    truncated: bool = False


def due(schedule: ScheduleSpec, now: datetime, last: datetime | None, since: datetime | None = None) -> Due:
    """Apply the catchup policy to the ticks after `last`, the last tick handled (see the
    module docstring). With no `last`: after `since`, when the schedule was first evaluated;
    with neither, this is that first evaluation, which owes only the tick due now."""
    first = last is None and since is None
    if last is not None:
        after = last
    elif since is not None:
        after = since
    else:
        after = now - timedelta(seconds=ON_TIME_SECONDS)
    ticks, truncated = cron.ticks_between(schedule, after, now)
    if not ticks:
        return Due([], [], None, truncated)
    newest = ticks[-1]
    on_time = [t for t in ticks if (now - t).total_seconds() <= ON_TIME_SECONDS]
    if first:
        # Every tick found is within ON_TIME_SECONDS; only the newest is due now, the others
        # are from before the schedule existed: not owed, not missed.
        return Due([newest], [], newest, truncated)
    if schedule.catchup == "latest":
        chosen = [newest]
    elif schedule.catchup == "all":
        chosen = ticks[-schedule.max_catchup:]
    else:
        chosen = on_time[-1:]
    return Due(chosen, [t for t in ticks if t not in chosen], newest, truncated)


@dataclass
class TickReport:
    now: datetime
    planned: list[str] = field(default_factory=list)  # sweep ids of ticks submitted in this pass
    skipped: list[datetime] = field(default_factory=list)
    progress: list[sweeps.SweepProgress] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)  # tick sweeps another process is running
    next_fire: datetime | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def active(self) -> int:
        return sum(1 for p in self.progress if not p.done)


def schedule_key(sweep: SweepSpec) -> str:
    return f"schedule:{sweeps.identify(sweep).sweep_id}"


class Scheduler:
    """Keeps one sweep's schedule. See the module docstring.

    `backend` serves every tick sweep (a `sweep.Router` of the backends its trials run on, or
    one backend; one region per sweep); `clock` and
    `sleep` are injectable so tests drive time; `runner_options` go to each `sweeps.Runner`.
    """

    def __init__(self, sweep: SweepSpec, backend: Backend, ledger: Ledger, *,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 runner_options: dict | None = None, on_report: Callable[[TickReport], None] | None = None):
        require_schedule(sweep)
        self.sweep = sweep
        self.schedule = sweep.schedule
        self.backend = backend
        self.ledger = ledger
        self.clock = clock
        self.sleep = sleep
        self.runner_options = dict(runner_options or {})
        self.on_report = on_report
        self.key = schedule_key(sweep)
        # What the scheduler is at, in words, for a user who interrupts it.
        self.doing = "starting"
        self._admissions: dict[str, admission.Admission | None] = {}

    def state(self) -> dict:
        value = self.ledger.get_value(self.key)
        return value if isinstance(value, dict) else {}

    def unfinished(self) -> list[str]:
        """The tick sweeps the schedule still follows (from the ledger)."""
        return [str(sweep_id) for sweep_id in self.state().get("active", [])]

    def _runner(self, sweep_id: str, notes: list[str]) -> sweeps.Runner:
        definition = sweeps.load_definition(self.ledger, sweep_id)
        if sweep_id not in self._admissions:
            # The one admission of every path (`sweep.admission`), read once per tick sweep in
            # this process: InputError (exit 2) before its first submit when a trial cannot
            # pass its quota.
            self._admissions[sweep_id], lines = admission.for_sweep(definition, self.backend)
            notes += [f"{sweep_id}: quota: {line}" for line in lines]
        return sweeps.Runner(definition, self.backend, self.ledger, clock=self.clock, sleep=self.sleep,
                             admission=self._admissions[sweep_id], **self.runner_options)

    def evaluate(self) -> TickReport:
        """One pass: submit due ticks, advance unfinished tick sweeps (see the module docstring)."""
        now = _utc(self.clock())
        report = TickReport(now)
        state = self.state()
        last = datetime.fromisoformat(state["last"]) if state.get("last") else None
        since = datetime.fromisoformat(state["since"]) if state.get("since") else None
        # `since` is written with the first tick's bookkeeping (below), not before: a crash in
        # between makes the next evaluation a first one again, which finds the same tick.
        found = due(self.schedule, now, last, since)
        if found.truncated:
            report.notes.append(f"more than {cron.MAX_SCAN} ticks were missed; only the most recent were considered")
        report.skipped = found.skipped
        active = list(state.get("active", []))
        history = list(state.get("ticks", []))
        for tick in found.submit:
            self.doing = f"submitting the tick of {tick:%Y-%m-%d %H:%M} UTC"
            # Planned without the failover types whose quota a trial cannot pass (said).
            planned, said = admission.plan_within_quotas(self.sweep, self.backend, tick=tick)
            report.notes += said
            sweeps.check_budget(planned)
            sweep_id = planned.sweep_id
            try:
                sweeps.save(planned, self.ledger)
                report.planned.append(sweep_id)
            except sweeps.RunnerBusy:
                # A runner of this machine already runs this very tick (saved before; this
                # bookkeeping was lost): it is not planned twice, and shows as busy below.
                pass
            if sweep_id not in active:
                active.append(sweep_id)
            if sweep_id not in history:
                history.append(sweep_id)
            state.update(last=tick.isoformat(), active=active, ticks=history[-KEEP_HISTORY:])
            state.setdefault("since", now.isoformat())
            self.ledger.put_value(self.key, state)
        if found.newest is not None and (last is None or found.newest > last):
            state["last"] = found.newest.isoformat()
        state.setdefault("since", now.isoformat())
        self.ledger.put_value(self.key, state)
        still = []
        for sweep_id in active:
            self.doing = f"following tick sweep {sweep_id}"
            try:
                with sweeps.runner_lock(sweep_id):
                    progress = self._runner(sweep_id, report.notes).step()
            except sweeps.RunnerBusy:
                report.busy.append(sweep_id)
                still.append(sweep_id)
                continue
            report.progress.append(progress)
            if not progress.done and not progress.stopped:
                still.append(sweep_id)
        state = {**self.state(), "active": still}
        self.ledger.put_value(self.key, state)
        report.next_fire = next_fires(self.schedule, now, 1)[0]
        return report

    def run(self, *, poll_seconds: float = 30.0, max_passes: int | None = None) -> None:
        """Evaluate, then sleep until the next tick (or the next poll while tick sweeps are
        unfinished), in slices of at most MAX_SLEEP_SECONDS; repeat."""
        passes = 0
        while True:
            report = self.evaluate()
            passes += 1
            target = report.next_fire.timestamp()
            if report.active or report.busy:
                target = min(target, self.clock() + poll_seconds)
                self.doing = f"waiting to poll {report.active + len(report.busy)} unfinished tick sweep(s)"
            else:
                self.doing = f"sleeping until the next tick, {report.next_fire:%Y-%m-%d %H:%M} UTC"
            if self.on_report:
                self.on_report(report)
            if max_passes is not None and passes >= max_passes:
                return
            while True:
                remaining = target - self.clock()
                if remaining <= 0:
                    break
                self.sleep(min(remaining, MAX_SLEEP_SECONDS))
