"""Doctor rules about cost: the job's cost bound against its budget (N016) and a price to
bound it with (N017). This is the one place a job's budget is checked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import cost
from orchestrator.doctor.finding import Finding

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec


def check_budget(spec: JobSpec, estimate: cost.Estimate) -> list[Finding]:
    """N017 when no price bounds the job (an error when a budget is set), N016 when the bound
    is above budget.max_cost_usd."""
    budget = spec.budget.max_cost_usd
    if not estimate.known:
        if budget is not None:
            return [Finding(
                "N017-price-unknown", "error",
                f"budget.max_cost_usd is {budget:g} but no price is known for {spec.instance.type} in "
                f"{spec.region}, so the budget cannot be checked",
                "run `python -m orchestrator prices refresh`, or remove budget.max_cost_usd", "budget.max_cost_usd")]
        return [Finding(
            "N017-price-unknown", "warning",
            f"no price is known for {spec.instance.type} in {spec.region}: the plan shows no cost",
            "run `python -m orchestrator prices refresh`", "instance.type")]
    if budget is not None and estimate.usd_max > budget:
        per_minute = estimate.usd_max / spec.max_run_minutes
        minutes = int(budget // per_minute)
        shorter = f"set max_run_minutes to at most {minutes}, or " if minutes >= 1 else ""
        return [Finding(
            "N016-budget-exceeded", "error",
            f"the job may cost up to {estimate.usd_max:.2f} USD ({estimate.hours_max:g} h x {estimate.instance_count} x "
            f"{cost.rate(estimate.price).describe()}), above budget.max_cost_usd {budget:g}"
            + ("" if estimate.verified else f" ({cost.UNVERIFIED})"),
            f"{shorter}raise budget.max_cost_usd to at least {estimate.usd_max:.2f}", "budget.max_cost_usd")]
    return []


# The rules that refuse an instance type because the spec's backend does not run it (SageMaker
# training; Trainium on SageMaker, as its image needs; AWS Batch's Inferentia2 queues): in a
# sweep across backends, another backend's type (or no backend's).
NOT_THE_BACKENDS_TYPE = frozenset({"N001-instance-not-trainable", "N025-neuron-image-off-trainium",
                                   "N040-batch-instance-type"})


def within(spec: JobSpec, estimate: cost.Estimate, so_far: list[Finding]) -> list[Finding]:
    """The budget rules, without N017 (price unknown) for a type the backend does not run: it
    has no price there, and refreshing prices cannot give it one; N001 or N040 says what to change."""
    refused = any(f.rule in NOT_THE_BACKENDS_TYPE for f in so_far)
    return [f for f in check_budget(spec, estimate) if not (refused and f.rule == "N017-price-unknown")]
