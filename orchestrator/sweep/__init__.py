"""Sweeps: many jobs from one spec, run to completion from a laptop that sleeps and crashes.

One module per step of a sweep's life, each with its contract:

- `expand`: the trials (grid x seeded random draws), each a full job spec, located errors;
- `plan`: every trial doctor-checked and its first job prepared; the budget check;
- `definition`: the sweep saved in the ledger, found again by id, name or file; its flags;
- `history`: what the ledger holds of a sweep's trials, their costs and what comes next;
- `failures`: why a job failed and whether it is retried;
- `runner`: drives the trials to the end (concurrency, backoff, failover, retries, reopen);
- `stop`: `sweep stop`, cancelling and stopping what runs;
- `router`: the backends a sweep's trials run on, each made once, when first needed;
- `process`: the one process per machine that runs a sweep (lock, spawn, SIGTERM).

Names (sweep ids, job names, tags) are `orchestrator.names`'. This package's namespace holds
the names callers use.
"""

from orchestrator.sweep.definition import (
    Definition,
    TrialDef,
    clear_stop,
    completed_elsewhere,
    find_sweep,
    find_sweep_id,
    load_definition,
    record_runner,
    reload_policy,
    request_stop,
    runner_pid,
    runner_state,
    save,
    sweep_ids,
)
from orchestrator.sweep.expand import Trial, expand, identify, sample, shown
from orchestrator.sweep.failures import (
    STOPPED_BEFORE_SUBMISSION,
    STOPPED_IN_FLIGHT,
    STOPPED_LEGACY,
    WAIT_KINDS,
    failure_kind,
    submit_error_kind,
)
from orchestrator.sweep.history import History, TrialView
from orchestrator.sweep.plan import Plan, PlannedTrial, check_budget, plan
from orchestrator.sweep.process import (
    RunnerBusy,
    Sigterm,
    lock_holder,
    log_path,
    runner_lock,
    spawn,
    take_over,
    tell,
)
from orchestrator.sweep.router import Router
from orchestrator.sweep.runner import Runner, SweepProgress
from orchestrator.sweep.stop import StopReport, stop

__all__ = [
    "Definition", "History", "Plan", "PlannedTrial", "Router", "Runner", "RunnerBusy", "STOPPED_LEGACY", "SweepProgress",
    "StopReport", "Trial", "TrialDef", "TrialView", "check_budget", "clear_stop", "failure_kind", "completed_elsewhere",
    "expand", "identify", "load_definition", "lock_holder", "log_path", "plan", "record_runner", "reload_policy",
    "request_stop", "find_sweep_id", "find_sweep", "runner_lock", "runner_pid", "runner_state", "sample", "save", "shown", "stop",
    "submit_error_kind", "sweep_ids", "WAIT_KINDS", "STOPPED_BEFORE_SUBMISSION", "STOPPED_IN_FLIGHT", "Sigterm", "spawn", "take_over", "tell",
]
