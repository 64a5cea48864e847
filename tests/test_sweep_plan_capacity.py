"""Sweeps draw on a training plan (orchestrator.sweep.plan_capacity): trials start on the plan only
while it is Active and has free instances for them; the others wait, or run on demand when the
spec says `instance.plan_full: on-demand`; a sweep never runs more trials on a plan than it holds."""

from __future__ import annotations

import pytest
from sweep_fakes import BASE, rig, states  # noqa: F401 - rig is a fixture

from orchestrator.errors import InputError
from orchestrator.sweep import plan_capacity
from orchestrator.sweep.admission import Admission, QuotaLimit
from orchestrator.sweep.plan_capacity import PlanGate, PlanState, may_start

PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/week-49"
SWEEP = """\
sweep: planned
base: base.yaml
grid:
  training.batch_size: [8, 16, 32, 64, 128]
concurrency: 5
"""


def base(plan_full: str = "wait", count: int = 1) -> str:
    return BASE.replace("instance: {type: ml.trn1.2xlarge, count: 1}",
                        f"instance: {{type: ml.trn1.32xlarge, count: {count}, training_plan_arn: '{PLAN}', "
                        f"plan_full: {plan_full}}}").replace("max_run_minutes: 60", "max_run_minutes: 60\n"
                                                             "budget: {max_cost_usd: 10000}")


class Plans:
    """The plan as DescribeTrainingPlan would say it, read through the gate's `read`."""

    def __init__(self, status: str, free: int):
        self.status, self.free, self.reads = status, free, 0

    def read(self, arn: str) -> PlanState:
        assert arn == PLAN
        self.reads += 1
        return PlanState(arn, self.status, self.free)


def on_plan(cloud) -> list[str]:
    return [name for name, job in cloud.jobs.items() if job["request"]["ResourceConfig"].get("TrainingPlanArn") == PLAN]


def in_flight_on_plan(cloud) -> int:
    return sum(1 for name in on_plan(cloud) if cloud.jobs[name]["status"] in ("pending", "starting", "running"))


def test_may_start_counts_free_instances_less_what_the_sweep_holds():
    assert may_start(free=4, held=0, per_trial=2, active=True) == 2
    assert may_start(free=4, held=2, per_trial=2, active=True) == 1
    assert may_start(free=4, held=3, per_trial=2, active=True) == 0
    assert may_start(free=4, held=5, per_trial=1, active=True) == 0  # never negative
    assert may_start(free=8, held=0, per_trial=1, active=False) == 0  # Scheduled: nothing starts on it


def test_a_sweep_on_a_plan_never_runs_more_trials_than_the_plan_holds(rig):  # noqa: F811
    make, cloud, _ = rig
    plan = Plans("Active", free=2)
    runner = make(SWEEP, base(), admission=PlanGate(plan.read, {PLAN: "wait"}))
    progress = runner.step()
    assert len(cloud.jobs) == 2 and len(on_plan(cloud)) == 2  # concurrency 5, the plan 2
    assert progress.waiting_reason.startswith("waiting for training plan capacity: week-49 is Active, 0 of 2 free")
    assert list(states(runner).values()).count("planned") == 3
    peak = 0
    while not runner.step().done:
        peak = max(peak, in_flight_on_plan(cloud))
        cloud.finish_all()
    assert peak <= 2 and cloud.max_in_flight == 2
    assert set(states(runner).values()) == {"completed"} and len(on_plan(cloud)) == 5
    assert plan.reads == 1  # an Active plan is read once


def test_multi_instance_trials_take_their_count_of_the_plan(rig):  # noqa: F811
    make, cloud, _ = rig
    runner = make(SWEEP, base(count=2), admission=PlanGate(Plans("Active", free=5).read, {PLAN: "wait"}))
    runner.step()
    assert len(on_plan(cloud)) == 2  # 5 free instances hold two trials of 2


def test_before_the_plan_is_active_trials_wait_and_start_once_it_is(rig):  # noqa: F811
    make, cloud, clock = rig
    plan = Plans("Scheduled", free=0)
    now = [1000.0]
    gate = PlanGate(plan.read, {PLAN: "wait"}, clock=lambda: now[0], refresh_s=300)
    runner = make(SWEEP, base(), admission=gate)
    assert "week-49 is Scheduled" in runner.step().waiting_reason and not cloud.jobs
    plan.status, plan.free = "Active", 3
    runner.step()
    assert not cloud.jobs and plan.reads == 1  # not read again before refresh_s
    now[0] += 300
    runner.step()
    assert len(on_plan(cloud)) == 3 and plan.reads == 2


def test_with_plan_full_on_demand_the_trials_beyond_the_plan_run_without_it(rig):  # noqa: F811
    make, cloud, _ = rig
    runner = make(SWEEP, base("on-demand"), admission=PlanGate(Plans("Active", free=2).read, {PLAN: "on-demand"}))
    runner.step()
    assert len(cloud.jobs) == 5
    assert len(on_plan(cloud)) == 2
    on_demand = [job["request"]["ResourceConfig"] for name, job in cloud.jobs.items() if name not in on_plan(cloud)]
    assert len(on_demand) == 3 and all("TrainingPlanArn" not in rc for rc in on_demand)
    assert all(rc["InstanceType"] == "ml.trn1.32xlarge" for rc in on_demand)


def test_on_demand_trials_still_meet_the_quota_admission(rig):  # noqa: F811
    make, cloud, _ = rig
    gate = PlanGate(Plans("Active", free=1).read, {PLAN: "on-demand"}, Admission([QuotaLimit({("sagemaker", "ml.trn1.32xlarge for training job usage"): 2})]))
    runner = make(SWEEP, base("on-demand"), admission=gate)
    progress = runner.step()
    assert len(on_plan(cloud)) == 1 and len(cloud.jobs) == 3  # 1 on the plan, 2 on demand (the quota)
    assert progress.waiting_reason.startswith("waiting for quota: ml.trn1.32xlarge needs 1 instances of") \
        and "2 of 2 held by this sweep" in progress.waiting_reason


def test_an_ended_plan_stops_a_sweep_that_waits_and_not_one_that_may_run_on_demand(rig):  # noqa: F811
    make, cloud, _ = rig
    runner = make(SWEEP, base(), admission=PlanGate(Plans("Expired", free=0).read, {PLAN: "wait"}))
    with pytest.raises(InputError, match="week-49 is Expired"):
        runner.step()
    assert not cloud.jobs
    gate = PlanGate(Plans("Expired", free=0).read, {PLAN: "on-demand"})
    request = {"TrainingJobName": "t-1", "ResourceConfig": {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 1,
                                                            "TrainingPlanArn": PLAN}}
    assert gate.why_not_job([], request, []) is None and plan_capacity.sends_on_demand(gate, request)
    assert plan_capacity.without_plan(request)["ResourceConfig"] == {"InstanceType": "ml.trn1.32xlarge",
                                                                     "InstanceCount": 1}


def test_the_cli_wraps_the_quota_admission_only_for_a_sweep_on_a_plan(rig, monkeypatch):  # noqa: F811
    from orchestrator.actions import sweeps as actions
    from orchestrator.capacity import plans

    make, _, _ = rig
    quota = Admission({})
    plain = make(SWEEP, BASE)
    assert actions.plan_gate(plain.d, quota, print) is quota
    planned = make(SWEEP.replace("sweep: planned", "sweep: planned-2"), base("on-demand"))
    described = []
    monkeypatch.setattr(plans, "client", lambda region: "sm")
    monkeypatch.setattr(plans, "describe", lambda sm, arn: described.append((sm, arn)) or plans.Plan(
        arn, "week-49", "Active", None, None, ("ml.trn1.32xlarge",), 4, 3, 1, None, "USD", ("training-job",)))
    said = []
    gate = actions.plan_gate(planned.d, quota, said.append)
    assert isinstance(gate, PlanGate) and gate.inner is quota and gate.fallback == {PLAN: "on-demand"}
    assert gate.state(PLAN) == PlanState(PLAN, "Active", 3) and described == [("sm", PLAN)]
    assert said == ["plan: week-49 is Active, 3 of 4 instance(s) free"]
