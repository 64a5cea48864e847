"""Cron expressions of sweep schedules: whether one is usable, and when it fires.

Contract:
- Whether an expression or a time zone is usable is `spec.cron_syntax`'s (the spec loader
  checks it there, below this package).
- `next_fires` and `ticks_between` are the schedule's fire times in UTC, read in
  `schedule.timezone`, with cron's rule for the night clocks go back (`_fires`).

It imports nothing of the orchestrator but its errors and the spec's cron syntax.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from orchestrator.errors import InputError
from orchestrator.spec.cron_syntax import ALIASES

if TYPE_CHECKING:
    from orchestrator.spec import ScheduleSpec, SweepSpec

# Walking back through missed ticks stops here (a per-minute cron after a month away).
MAX_SCAN = 100_000


def require_schedule(sweep: SweepSpec) -> ScheduleSpec:
    """The sweep's schedule; InputError located at the sweep's file when it has none."""
    if sweep.schedule is None:
        file, line, _ = sweep.locate()
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        raise InputError(f"{where}sweep {sweep.sweep} has no schedule",
                         hint="add e.g. `schedule: {cron: \"0 3 * * *\", catchup: latest}`")
    return sweep.schedule


# --- when a schedule fires ----------------------------------------------------------------


def _iter(schedule: ScheduleSpec, start: datetime):
    from zoneinfo import ZoneInfo

    from croniter import croniter

    return croniter(schedule.cron.strip(), start.astimezone(ZoneInfo(schedule.timezone)))


def _at_set_times(schedule: ScheduleSpec) -> bool:
    """Whether the schedule fires at set times of day, as cron tells them from the others: its
    minute and hour fields do not start with `*` (cronie's MIN_STAR and HR_STAR flags)."""
    expr = schedule.cron.strip()
    fields = ALIASES.get(expr.lower(), expr).split()
    return len(fields) >= 2 and not fields[0].startswith("*") and not fields[1].startswith("*")


def _repeated_wall_time(tick: datetime, zone) -> bool:
    """Whether `tick` is the second time its local wall-clock time happens that night: in the
    hour clocks go back (fall), a time such as 01:30 comes twice, an hour apart."""
    local = tick.astimezone(zone)
    wall = local.replace(tzinfo=None)
    first = wall.replace(fold=0, tzinfo=zone).utcoffset()
    second = wall.replace(fold=1, tzinfo=zone).utcoffset()
    # In a fold the first offset is the larger (summer time); in a gap (spring) the smaller.
    return first is not None and second is not None and first > second and local.utcoffset() == second


def _fires(schedule: ScheduleSpec, tick: datetime) -> bool:
    """Whether cron runs the schedule at `tick`, one of croniter's times. A schedule at set
    times of day fires once on the night clocks go back, at the first of the two identical
    local times, as cron does (cron(8): "if time was adjusted backward, running the same job
    twice is avoided"; cronie src/cron.c runs only the wildcard jobs in the repeated hour).
    Schedules with `*` in the minute or hour field run by the clock through both hours. In
    spring croniter moves a time the skipped hour holds (02:30) to the first that exists
    (03:00), which is cron's catch-up of a skipped job; that is kept as it is."""
    from zoneinfo import ZoneInfo

    return not (_at_set_times(schedule) and _repeated_wall_time(tick, ZoneInfo(schedule.timezone)))


def next_fires(schedule: ScheduleSpec, now: datetime, count: int) -> list[datetime]:
    """The next `count` tick times strictly after `now`, in UTC."""
    it = _iter(schedule, now)
    found: list[datetime] = []
    while len(found) < count:
        tick = it.get_next(datetime).astimezone(timezone.utc)
        if _fires(schedule, tick):
            found.append(tick)
    return found


def ticks_between(schedule: ScheduleSpec, after: datetime, until: datetime) -> tuple[list[datetime], bool]:
    """Tick times in (after, until], oldest first, and whether the scan hit MAX_SCAN."""
    it = _iter(schedule, until + timedelta(seconds=1))
    found: list[datetime] = []
    while len(found) < MAX_SCAN:
        tick = it.get_prev(datetime).astimezone(timezone.utc)
        if tick <= after or tick > until:
            if tick <= after:
                return found[::-1], False
            continue
        if _fires(schedule, tick):
            found.append(tick)
    return found[::-1], True
