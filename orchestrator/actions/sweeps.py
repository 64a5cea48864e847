"""Driving a saved sweep in this process (`drive`), the backends its trials run on, the least
poll between its rounds, and the admission its runner asks before each submit (by quota, and by
a training plan's room). Nothing here prints: notes go to the caller's `say`, event lines to its
`report`, the progress to the display `watch` gives; failures are the project's errors.

Contract:
- `scheduler(loaded, poll, say)`: the laptop's scheduler of a sweep with a schedule; its tick
  sweeps are admitted by the same `sweep.admission.for_sweep` (`schedule.laptop`).
- `drive(definition, ledger, poll, ...)` holds the sweep's runner lock, clears its stop flag,
  records this process as its runner, answers a detached starter (`ready_fd`), admits by quota
  (`runner_admission`), and runs the sweep to its end: `Driven(final progress, terminated)`,
  `terminated` when SIGTERM ended it (`sweep.process.Sigterm`). RunnerBusy when another
  process holds the sweep (the starter told "busy PID"); an OrchestratorError from the runner
  propagates once the events of its last round are reported; Ctrl-C while the sweep runs is
  `Interrupted` (a KeyboardInterrupt), raised once the lock is released.
- `runner_admission(definition, router, say)`: the one admission by quota of every path
  (`sweep.admission.for_sweep`, each quota's line said), wrapped in a `PlanGate` when a trial
  runs on a job-level training plan.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

Say = Callable[[str], None]


def plan_backends(loaded) -> list[str]:
    """Every backend a sweep's variants name (the base spec's first)."""
    return list(dict.fromkeys([loaded.base_spec.backend, *[v["backend"] for v in loaded.variants if "backend" in v]]))


def sweep_backend(definition, ledger):
    """The backends a saved sweep's trials run on (its definition says which, and where), each
    made when first needed (`sweep.Router`)."""
    from orchestrator import sweep as sweeps

    return sweeps.Router.create(definition.backends, region=definition.region, ledger=ledger)


def poll_seconds(poll: float | None, router, names, say: Say) -> float:
    """The seconds between a sweep's status rounds: `poll`, else its backends' default, at
    least the floor of each (`polling`: the account's API rate); a --poll under it is raised,
    said (a default under the floor, a local backend's mixed in, is raised silently)."""
    from orchestrator import polling

    seconds, raised = polling.at_least(poll if poll is not None else router.sweep_poll_s, names, "--poll")
    if raised and poll is not None:
        say(raised)
    return seconds


def scheduler(loaded, poll: float | None, say: Say):
    """The `schedule.Scheduler` of a sweep spec with a schedule (`schedule run`, `schedule
    tick`): every backend its variants name, each made when a tick's runner first needs it,
    and its runners' poll (`poll_seconds`)."""
    from orchestrator import schedule as schedules
    from orchestrator import sweep as sweeps
    from orchestrator.ledger import Ledger

    ledger = Ledger()
    names = plan_backends(loaded)
    router = sweeps.Router.create(names, region=loaded.base_spec.region, ledger=ledger)
    return schedules.Scheduler(loaded, router, ledger,
                               runner_options={"poll_seconds": poll_seconds(poll, router, names, say)})


def plan_gate(definition, quota_admission, say: Say):
    """The runner's admission for a saved sweep: `quota_admission` (or None) wrapped in a
    `sweep.plan_capacity.PlanGate` when a trial runs on a job-level training plan, read online
    (DescribeTrainingPlan, each read said) as the runner needs it; else `quota_admission` unchanged."""
    from orchestrator.capacity import plans
    from orchestrator.sweep import plan_capacity

    fallback: dict[str, str] = {}
    for trial in definition.trials:
        inst = trial.spec.instance
        if inst.training_plan_arn:
            # One trial that waits makes the plan's trials wait: on-demand only where all allow it.
            said = fallback.get(inst.training_plan_arn, inst.plan_full)
            fallback[inst.training_plan_arn] = plan_capacity.ON_DEMAND if (
                said == inst.plan_full == plan_capacity.ON_DEMAND) else plan_capacity.WAIT
    if not fallback:
        return quota_admission
    clients: dict = {}

    def read(arn: str):
        region = plans.region_of(arn) or definition.region
        sm = clients.get(region) or clients.setdefault(region, plans.client(region))
        plan = plans.describe(sm, arn)
        say(f"plan: {plan.name} is {plan.status}, {plan.available} of {plan.total} instance(s) free")
        return plan_capacity.PlanState(arn, plan.status, plan.available)

    return plan_capacity.PlanGate(read, fallback, quota_admission)


def runner_admission(definition, router, say: Say):
    """What the runner of a saved sweep asks before each submit (see the module docstring)."""
    from orchestrator.actions import quota_check

    return plan_gate(definition, quota_check.sweep_admission(definition, router, say), say)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C while the sweep ran (the runner lock released; its jobs in flight keep running)."""


@dataclass(frozen=True)
class Driven:
    """How a driven sweep ended: its last progress, and whether SIGTERM ended it."""

    final: Any
    terminated: bool


def drive(definition, ledger, poll: float | None, *, watch: Callable[[Any], AbstractContextManager],
          report: Say, say: Say, prepared: dict | None = None, ready_fd: int | None = None) -> Driven:
    """Run a saved sweep to the end in this process (see the module docstring). `watch(runner)`:
    the display, a context manager whose value is called with each round's progress; `report`:
    where the events of a round cut short by an error go; `prepared`: the first jobs' requests
    (`Plan.prepared()`), not built again."""
    import contextlib

    from orchestrator import sweep as sweeps
    from orchestrator.errors import OrchestratorError

    backend = sweep_backend(definition, ledger)
    seconds = poll_seconds(poll, backend, definition.backends, say)
    with contextlib.ExitStack() as held:
        try:
            # A detached runner waits a moment: a `sweep run` saving the sweep holds the lock briefly.
            held.enter_context(sweeps.runner_lock(definition.sweep_id, wait_seconds=0.0 if ready_fd is None else 3.0))
        except sweeps.RunnerBusy as exc:
            sweeps.tell(ready_fd, f"busy {exc.pid or 0}")
            raise
        sweeps.clear_stop(ledger, definition.sweep_id)
        sweeps.record_runner(ledger, definition.sweep_id, os.getpid())
        sweeps.tell(ready_fd, "ok")
        runner = sweeps.Runner(definition, backend, ledger, poll_seconds=seconds, prepared=prepared,
                               admission=runner_admission(definition, backend, say))
        with sweeps.Sigterm() as sigterm:
            try:
                with watch(runner) as display:
                    runner.on_progress = display
                    with sigterm.armed() as go:
                        if go:
                            final = runner.run()
            except OrchestratorError:
                for line in runner.unreported:  # the stopping round's events, before its error
                    report(line)
                raise
            except KeyboardInterrupt:
                raise Interrupted from None
        if sigterm.received:
            final = runner.progress(stopped=runner.stop_requested())
    return Driven(final, sigterm.received)
