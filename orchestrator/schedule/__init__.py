"""Cron schedules for sweeps, kept from a laptop (`schedule run`) or from system cron (`schedule tick`).

Modules: `cron` (whether an expression is usable, and when it fires: a leaf the spec loader
uses). A schedule kept by this machine (the laptop, or the host whose system cron runs it):
`laptop` (the laptop's scheduler: due ticks, the catchup policy, submitting and following tick
sweeps), `crontab` (the lines that run `schedule tick` from system cron). A schedule kept in
AWS: `statemachine` (a sweep's plan compiled to a Step Functions definition and its items;
`attempts` and `failure_rules` its retries and failovers, `budget` its poll interval),
`compiled` (the one compiled value a command builds), `eventbridge_cron` (the cron in
EventBridge Scheduler's form), `in_aws_stack` (its stack's template), `in_aws` (deployed,
listed, removed) and `run_jobs` (a running run's trials, from its backends' job listings). Each backend's part of a schedule kept in AWS lives in its own folder
(`backends.scheduled`).

Contract:
- The spec's `schedule.cron` (five fields or an @alias, read in `schedule.timezone`) names
  the ticks. A tick at time T runs the sweep as a sweep of its own, id
  `<sweep>-<8 hex>-<YYYYMMDDHHMM>` (T in UTC, minute resolution), so its job names depend
  only on the sweep's content and T. A tick is therefore submitted at most once: a restart
  finds the tick's rows in the ledger, and a second machine's CreateTrainingJob for the same
  name is answered ResourceInUse, which the backend reconciles instead of retrying under a
  new name.
- Bookkeeping lives in the ledger's kv table under `schedule:<sweep>-<8 hex>`: the last tick
  handled, when the schedule was first evaluated, and the tick sweeps not yet finished. It
  is written after a tick's sweep is saved, so a crash in between re-plans the same tick
  (same ids, nothing twice).
- A schedule does not owe ticks from before it existed. Its first evaluation ever records
  that moment (`since`) and owes only the tick due then: the most recent tick within
  ON_TIME_SECONDS (cron starts `schedule tick` a little after the minute), whatever
  `catchup` says; earlier ticks are neither submitted nor reported as skipped. Later
  evaluations look at the ticks after the last one handled (or, if none was ever due, after
  `since`).
- Missed ticks (the machine slept or was off): `catchup: latest` submits the most recent
  one, `all` each of them (at most `max_catchup`, the most recent), `none` only a tick
  evaluated within ON_TIME_SECONDS of its time; the others are reported as skipped.
- `evaluate()` is one pass (what `schedule tick` runs): submit due ticks, then advance every
  unfinished tick sweep by one runner step. `run()` repeats it, sleeping in slices of at
  most a minute so that a laptop waking from sleep notices missed ticks at once.
"""

from __future__ import annotations

from orchestrator.lazy_exports import by_module, module_getattr

# Public name -> the submodule that defines it. Imported on first use: the spec loader needs
# `cron` alone, and `laptop` imports the sweep runner.
_EXPORTS = by_module({
    "cron": ("MAX_SCAN", "ALIASES", "require_schedule", "next_fires", "ticks_between"),
    "laptop": ("ON_TIME_SECONDS", "MAX_SLEEP_SECONDS", "KEEP_HISTORY", "Due", "due", "TickReport", "schedule_key",
               "Scheduler"),
    "crontab": ("AWS_SETTINGS", "package_root", "aws_settings", "crontab_line", "cron_command", "ensure_log_dir"),
    "statemachine": ("compile_plan", "placeholder_plan"),
})
__all__ = sorted(_EXPORTS)
__getattr__ = module_getattr(__name__, _EXPORTS)
