"""How often a trial's child workflow polls its job, so that its worst run fits one execution's
history: pure arithmetic over the trial's attempts.

Contract:
- `poll_seconds(plan, graph)` is POLL_SECONDS (a minute: a Standard workflow pays per state
  transition), or longer when the polls of the trial's longest path of attempts would pass
  HISTORY_EVENTS. Each attempt lasts at most `attempt_seconds`: its max_run_minutes, or its
  max_wait_minutes for a spot job (waiting for spot capacity counts: "the maximum time to wait
  for a spot instance", CreateTrainingJob's StoppingCondition.MaxWaitTimeInSeconds), plus
  TRAINING_PLAN_QUEUE_MINUTES for a job on a training plan (it is pending until its plan's
  capacity starts).
- InputError (exit 2) when even the attempts' own events would not fit.
"""

from __future__ import annotations

import json
import math

from orchestrator.errors import InputError

POLL_SECONDS = 60
# One execution's history holds at most 25,000 events (Step Functions quotas, "Maximum
# execution history size"); a Distributed Map's child has its own. A poll writes at most 11
# events (Wait entered and exited; describe task entered, scheduled, started, succeeded,
# exited; a Read Pass and the Check Choice entered and exited), and 3 more for each retry of its
# describe; an attempt's other states at most 60, its render loop 4 per label it holds; the
# trial's own states 20.
HISTORY_EVENTS = 25_000
EVENTS_PER_POLL = 11
EVENTS_PER_RETRY = 3
RETRIES_PER_ATTEMPT = 14  # a describe's retries that end its trial: 10 throttles + 4 others
EVENTS_PER_ATTEMPT = 60
EVENTS_PER_LABEL = 4
EVENTS_PER_TRIAL = 20
# How long a job on a training plan may wait for its plan to start: assumed (no page bounds the
# wait; a plan may start weeks after it is bought). A job queued longer ends as its service
# says; a run's history stays within bounds because the poll is spaced for this wait.
TRAINING_PLAN_QUEUE_MINUTES = 7 * 24 * 60


def attempt_seconds(spec) -> int:
    """The longest one attempt of `spec` may be followed (see the module docstring)."""
    minutes = spec.max_run_minutes
    if spec.instance.spot and spec.instance.max_wait_minutes:
        minutes = max(minutes, spec.instance.max_wait_minutes)
    planned = spec.instance.training_plan_arn or any(p.training_plan_arn for p in spec.instance.preferences or [])
    if planned:
        minutes += TRAINING_PLAN_QUEUE_MINUTES
    return minutes * 60


def _labels(request: dict, label: str) -> int:
    return json.dumps(request).count(label)


def poll_seconds(plan, graph) -> int:
    """The wait between one trial's describe calls (see the module docstring)."""
    from orchestrator.schedule.statemachine import PLACEHOLDER_LABEL

    longest: dict[str, tuple[int, int]] = {}  # key -> (seconds, fixed events) of its longest path
    for a in reversed(graph):  # an attempt's successors come after it
        after = [longest[k] for k in (a.on_capacity, a.on_retry) if k is not None]
        seconds, events = max(after, default=(0, 0))
        own = EVENTS_PER_ATTEMPT + EVENTS_PER_RETRY * RETRIES_PER_ATTEMPT + EVENTS_PER_LABEL * _labels(
            a.prepared.request, PLACEHOLDER_LABEL)
        longest[a.key] = (seconds + attempt_seconds(a.prepared.spec), events + own)
    run_s, fixed = longest[graph[0].key]
    room = HISTORY_EVENTS - EVENTS_PER_TRIAL - fixed
    if room <= 0:
        raise InputError(f"a trial of sweep {plan.sweep.sweep!r} could make more state transitions than one Step "
                         f"Functions execution's history holds ({HISTORY_EVENTS:,} events: Step Functions quotas)",
                         hint="lower max_retries or the failover chain")
    return max(POLL_SECONDS, math.ceil(EVENTS_PER_POLL * run_s / room))
