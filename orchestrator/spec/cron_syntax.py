"""Whether a sweep schedule's cron expression and time zone are usable, for the spec loader.

Contract: `cron_problem(expr)` says why an expression is unusable (or None): five fields or
one of ALIASES, each field in range (the wrong one named), and at least one fire time within
CRON_HORIZON_YEARS. `timezone_problem(name)` does the same for an IANA time zone. The spec
loader locates both at the sweep file's `schedule:` keys; `schedule.cron` reads the fire times.
"""

from __future__ import annotations

from datetime import datetime, timezone

# The @aliases a schedule may use, and the five fields each stands for.
ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}

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
