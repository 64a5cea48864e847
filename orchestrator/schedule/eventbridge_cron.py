"""A schedule's five-field cron as Amazon EventBridge Scheduler's `cron(...)` expression (for a
schedule kept in AWS; `cron` is when the five fields fire).

Contract:
- `scheduler_expression(schedule)` is the schedule's cron (an @alias expanded) in
  Scheduler's six fields, `cron(minutes hours day-of-month month day-of-week year)`, read in
  the same time zone (`ScheduleExpressionTimezone`, which the template sets to
  `schedule.timezone`): the same fire times. Source: EventBridge Scheduler user guide,
  "Schedule types on EventBridge Scheduler", cron-based schedules.
- Scheduler's day of week counts 1-7 from Sunday (cron's 0-7 from Sunday, 7 also Sunday), so
  the field is written as day names (SUN-SAT), each day listed. One of day-of-month and
  day-of-week must be `?`: a cron restricting both (cron fires on either) has no Scheduler
  expression and is refused (InputError).
"""

from __future__ import annotations

from orchestrator.errors import InputError
from orchestrator.schedule.cron import ALIASES

DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


def scheduler_expression(schedule) -> str:
    """`cron(m h dom mon dow *)` for `schedule.cron` (see the module docstring)."""
    from croniter import croniter

    five = ALIASES.get(schedule.cron, schedule.cron)
    minute, hour, dom, month, dow = five.split()
    days = croniter(five).expanded[4]
    if dow != "*" and dom != "*":
        raise InputError(f"cron {schedule.cron!r} restricts both the day of month and the day of week (cron fires "
                         "on either); EventBridge Scheduler takes one of them only",
                         hint="keep one of the two fields `*`, or make two schedules")
    if dow == "*":
        return f"cron({minute} {hour} {dom} {month.upper()} ? *)"
    names = ",".join(DAY_NAMES[d % 7] for d in sorted({int(d) % 7 for d in days}))
    return f"cron({minute} {hour} ? {month.upper()} {names} *)"
