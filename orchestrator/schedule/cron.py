"""Cron expressions of sweep schedules: whether one is usable, and when it fires.

Contract:
- `cron_problem(expr)` says why an expression is unusable (or None): five fields or one of
  ALIASES, each field in range (the wrong one named), and at least one fire time within
  CRON_HORIZON_YEARS. `timezone_problem(name)` does the same for an IANA time zone. The spec
  loader locates both at the sweep file's `schedule:` keys.
- `next_fires` and `ticks_between` are the schedule's fire times in UTC, read in
  `schedule.timezone`, with cron's rule for the night clocks go back (`_fires`).

This module is a leaf: it imports nothing of the orchestrator but its errors, so the spec
loader may use it without loading the scheduler.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from orchestrator.errors import InputError

if TYPE_CHECKING:
    from orchestrator.spec import ScheduleSpec, SweepSpec

# Walking back through missed ticks stops here (a per-minute cron after a month away).
MAX_SCAN = 100_000
# The @aliases a schedule may use, and the five fields each stands for.
ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}


# --- whether an expression is usable ------------------------------------------------------

# The five cron fields, in order, with what each accepts.
CRON_FIELDS = (("minute", "0-59"), ("hour", "0-23"), ("day of month", "1-31"),
               ("month", "1-12 or jan-dec"), ("day of week", "0-7 or sun-sat"))
# A cron with no fire time this many years ahead never fires (Feb 29 recurs within 8 years).
CRON_HORIZON_YEARS = 8
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def cron_problem(expr: str) -> str | None:
    """Why a cron expression is unusable, or None. Only `@` aliases and five fields are taken."""
    from croniter import croniter

    fields = expr.split()
    if expr.startswith("@"):
        if expr in ALIASES:
            return None
        return f"cannot parse cron {expr!r}: unknown alias; use one of {', '.join(ALIASES)}"
    if len(fields) != 5:
        return (f"cannot parse cron {expr!r}: expected five fields: minute hour day-of-month month "
                "day-of-week, e.g. \"0 3 * * 1\"")
    if not croniter.is_valid(expr):
        # Try each field alone among stars, to name the one that is wrong.
        bad = [i for i in range(5) if not croniter.is_valid(" ".join(f if j == i else "*" for j, f in enumerate(fields)))]
        if not bad:
            return f"cannot parse cron {expr!r}: a field is out of range or malformed"
        named = "; ".join(f"the {CRON_FIELDS[i][0]} field {fields[i]!r} is out of range or malformed "
                          f"({CRON_FIELDS[i][0]}: {CRON_FIELDS[i][1]})" for i in bad)
        return f"cannot parse cron {expr!r}: {named}"
    try:
        croniter(expr, datetime.now(timezone.utc),
                 max_years_between_matches=CRON_HORIZON_YEARS).get_next(datetime)
    except (ValueError, ArithmeticError, LookupError, TypeError):  # CroniterBadDateError is a ValueError
        return f"this cron never fires ({_never_why(expr)}?)"
    return None


def _never_why(expr: str) -> str:
    """A guess at why a valid cron never fires: a day of month that its months lack."""
    from croniter import croniter

    try:
        _, _, days, months, weekdays = croniter(expr).expanded[:5]
    except (ValueError, TypeError):
        return f"no time matches in the next {CRON_HORIZON_YEARS} years"
    months = list(range(1, 13)) if months == ["*"] else months
    if (weekdays == ["*"] and days != ["*"] and all(isinstance(d, int) for d in days)
            and all(isinstance(m, int) and 1 <= m <= 12 for m in months)
            and min(days) > max(_MONTH_DAYS[m - 1] for m in months)):
        day_text = f"day {days[0]} never occurs" if len(days) == 1 else \
            f"days {', '.join(map(str, days))} never occur"
        return f"{day_text} in {' or '.join(_MONTHS[m - 1] for m in months)}"
    return f"no time matches in the next {CRON_HORIZON_YEARS} years"


def timezone_problem(name: str) -> str | None:
    """Why `name` is not a time zone a schedule can be read in (an IANA name), or None."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {name!r}; use an IANA name like Europe/Paris"
    return None


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
