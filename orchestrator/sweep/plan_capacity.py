"""A sweep drawing on a training plan: trials start on the plan only while it is Active and has
free instances for them; a trial the plan has no room for waits, or runs on demand when its
spec says `instance.plan_full: on-demand`.

Contract: `may_start(free, held, per_trial, active)` is the pure rule (how many more trials may
start on the plan). `PlanGate` applies it to a sweep's CreateTrainingJob requests (those with
ResourceConfig.TrainingPlanArn; per-preference plans are SageMaker's to pass over) with
`why_not_job(needs, request, held)` as `sweep.admission.Admission` has it, asking the quota admission
it wraps (`inner`) too. `on_demand(request)` says whether the runner sends this request without
its plan (`without_plan`). The plan is read through `read(arn) -> PlanState` (no AWS here):
at the first request, and again at most every `refresh_s` while it is not Active. `free` is what
the plan said then; this sweep's own trials in flight on it are subtracted as they start (a
resumed sweep's running trials are both in the plan's in-use count and held: counted twice,
which can hold a trial back and never lets one past the plan).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from orchestrator.errors import InputError

WAIT, ON_DEMAND = "wait", "on-demand"
# How often a plan that is not Active yet is read again (DescribeTrainingPlan is one read call).
REFRESH_S = 300.0


def may_start(free: int, held: int, per_trial: int, active: bool) -> int:
    """How many more trials of `per_trial` instances may start on a plan with `free` instances
    while `held` are taken by this sweep's trials in flight: none unless the plan is Active."""
    if not active or per_trial <= 0:
        return 0
    return max(0, free - held) // per_trial


@dataclass(frozen=True)
class PlanState:
    """What the gate needs of a plan: its status and its free instances when read."""

    arn: str
    status: str
    free: int

    @property
    def active(self) -> bool:
        return self.status == "Active"

    @property
    def ended(self) -> bool:
        return self.status in ("Expired", "Failed")


def plan_of(request: dict) -> tuple[str, int] | None:
    """(plan ARN, instances) of a request that runs on a job-level plan, else None."""
    resources = request.get("ResourceConfig") or {}
    arn = resources.get("TrainingPlanArn")
    return (arn, int(resources.get("InstanceCount") or 1)) if arn else None


def without_plan(request: dict) -> dict:
    """The same CreateTrainingJob request on demand: ResourceConfig without TrainingPlanArn."""
    resources = {k: v for k, v in (request.get("ResourceConfig") or {}).items() if k != "TrainingPlanArn"}
    return {**request, "ResourceConfig": resources}


class PlanGate:
    def __init__(self, read: Callable[[str], PlanState], fallback: dict[str, str], inner=None, *,
                 clock: Callable[[], float] = time.time, refresh_s: float = REFRESH_S):
        self.read = read
        self.fallback = dict(fallback)  # plan ARN -> WAIT or ON_DEMAND
        self.inner = inner
        self.clock = clock
        self.refresh_s = refresh_s
        self._states: dict[str, tuple[PlanState, float]] = {}
        self._on_demand: set[str] = set()  # job names this gate sent on demand

    def state(self, arn: str) -> PlanState:
        known = self._states.get(arn)
        if known is None or (not known[0].active and self.clock() - known[1] >= self.refresh_s):
            known = (self.read(arn), self.clock())
            self._states[arn] = known
        return known[0]

    def _held(self, arn: str, in_flight: Iterable[dict]) -> int:
        held = 0
        for other in in_flight:
            found = plan_of(other)
            if found and found[0] == arn and other.get("TrainingJobName") not in self._on_demand:
                held += found[1]
        return held

    def why_not_job(self, needs: list, request: dict, held: Iterable[tuple[list, dict]]) -> str | None:
        """None when the job of `request` (asking `needs` of the quotas) may start now, beside the
        jobs in flight (`held`: their needs and requests), on its plan or on demand where allowed;
        else why it waits. InputError (exit 2) when its plan has ended and the spec allows no
        on-demand run."""
        held = list(held)
        in_flight = [r for _, r in held]
        found = plan_of(request)
        if found is not None:
            arn, count = found
            state = self.state(arn)
            room = may_start(state.free, self._held(arn, in_flight), count, state.active)
            if room == 0:
                if self.fallback.get(arn, WAIT) != ON_DEMAND:
                    if state.ended:
                        raise InputError(f"training plan {arn} is {state.status}: the sweep's trials on it cannot run",
                                         hint="set instance.plan_full: on-demand to run them without the plan, "
                                              "or reserve another plan (`capacity offerings`)")
                    return (f"waiting for training plan capacity: {arn.rpartition('/')[2]} is {state.status}, "
                            f"{max(0, state.free - self._held(arn, in_flight))} of {state.free} free instance(s) "
                            f"left, {count} needed")
                self._on_demand.add(request.get("TrainingJobName", ""))
                return self._inner_why_not(needs, held)
            self._on_demand.discard(request.get("TrainingJobName", ""))
            return None  # the plan's capacity, not the on-demand quota, is what it runs on
        return self._inner_why_not(needs, held)

    def _inner_why_not(self, needs: list, held: list[tuple[list, dict]]) -> str | None:
        """The quota admission, counting only the jobs in flight that run on demand."""
        if self.inner is None:
            return None
        on_demand = [n for n, r in held if plan_of(r) is None or r.get("TrainingJobName") in self._on_demand]
        return self.inner.why_not(needs, on_demand)

    def on_demand(self, request: dict) -> bool:
        """Whether the last `why_not` admitted `request` on demand (the runner sends `without_plan`)."""
        return request.get("TrainingJobName") in self._on_demand


def sends_on_demand(admission, request: dict) -> bool:
    """Whether the runner's admission (a PlanGate or another) sends `request` without its plan."""
    return isinstance(admission, PlanGate) and admission.on_demand(request)
