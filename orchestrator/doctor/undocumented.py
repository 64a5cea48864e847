"""Doctor warnings for combinations the SageMaker documentation leaves undocumented (N077-N079):
the request is sent as it is (the API accepts each setting), but no page says what SageMaker
does with the two together, so only a real account can tell. Each warning names the pages
checked (data/aws_rules.json holds the same list with its test).

- N077: a job-level training plan (instance.training_plan_arn) with preferences of several
  types: a plan reserves one instance type; what a job does when SageMaker selects another type
  of the list is not said.
- N078: keep-alive (a warm pool) with preferences: whether a later job that SageMaker places on
  another type of the list may reuse the pool is not said.
- N079: managed spot with a training plan: neither page says whether spot capacity and a
  plan's reserved capacity combine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.doctor.finding import Finding

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

PREFERENCES_PAGE = "https://docs.aws.amazon.com/sagemaker/latest/dg/train-instance-preferences.html"
PLANS_PAGE = "https://docs.aws.amazon.com/sagemaker/latest/dg/reserve-capacity-with-training-plans.html"
WARM_POOLS_PAGE = "https://docs.aws.amazon.com/sagemaker/latest/dg/train-warm-pools.html"
SPOT_PAGE = "https://docs.aws.amazon.com/sagemaker/latest/dg/model-managed-spot-training.html"
ONLY_AN_ACCOUNT = "only a real account can tell what SageMaker does with it"


def check(spec: JobSpec) -> list[Finding]:
    """N077-N079 for a spec whose backend sends its request to SageMaker (nothing otherwise)."""
    if spec.backend_type.preferences != "sent":
        return []
    inst = spec.instance
    types = {p.type for p in inst.preferences or []}
    out = []
    if inst.training_plan_arn and len(types) > 1:
        out.append(Finding(
            "N077-undocumented-plan-preferences", "warning",
            f"a job-level training plan with preferences of {len(types)} types: a plan reserves one instance "
            f"type, and the pages checked ({PREFERENCES_PAGE}, {PLANS_PAGE}) do not say what the job does when "
            f"SageMaker selects another type of the list; {ONLY_AN_ACCOUNT}",
            "give each preference its own plan (instance.preferences.N.training_plan_arn), or keep one type",
            "instance.training_plan_arn"))
    if inst.keep_alive_minutes and types:
        out.append(Finding(
            "N078-undocumented-keep-alive-preferences", "warning",
            f"keep_alive_minutes with instance preferences: the pages checked ({PREFERENCES_PAGE}, "
            f"{WARM_POOLS_PAGE}) do not say whether a warm pool is kept, or reused by the next job, when SageMaker "
            f"selects a type of the list; {ONLY_AN_ACCOUNT}",
            "set instance.keep_alive_minutes: 0 with preferences, or give one instance.type",
            "instance.keep_alive_minutes"))
    planned = inst.training_plan_arn or any(p.training_plan_arn for p in inst.preferences or [])
    if inst.spot and planned:
        out.append(Finding(
            "N079-undocumented-spot-plan", "warning",
            f"managed spot with a training plan: the pages checked ({SPOT_PAGE}, {PLANS_PAGE}) do not say whether "
            f"spot capacity and a plan's reserved capacity combine; {ONLY_AN_ACCOUNT}",
            "use the plan on-demand (instance.spot: false), or spot without a plan", "instance.spot"))
    return out
