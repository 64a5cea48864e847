"""What a batch job bills at most: every attempt in full, plus the instance's start-up and
scale-in around it, at the EC2 on-demand price (AWS Batch bills the instances it starts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import cost

if TYPE_CHECKING:
    from orchestrator import catalog
    from orchestrator.spec import JobSpec

# Per Batch attempt, minutes an instance is billed outside the job's timeout: booting the ECS
# Neuron AMI, pulling the multi-GB training image, and idling until the compute environment
# scales in (Batch scales a MinvCpus 0 environment down after its jobs end). An assumption,
# set high: nothing here has measured it on real inf2.
BATCH_INSTANCE_MINUTES = 15


def attempts(spec: JobSpec) -> int:
    """How many times Batch may run the job: the first attempt and its retries."""
    return 1 + spec.max_retry_attempts


def estimate(spec: JobSpec, target: catalog.Target | None) -> cost.Estimate:
    price = cost.price_of(spec, target)
    if price is None:
        return cost.unpriced(spec)
    hourly = cost.rate(price)
    tries = attempts(spec)
    hours = tries * (spec.max_run_minutes + BATCH_INSTANCE_MINUTES) / 60
    notes = [f"upper bound: {tries} attempt(s) x (max_run_minutes + {BATCH_INSTANCE_MINUTES} min of instance "
             "start-up and scale-in, assumed) at the EC2 on-demand price AWS Batch bills"]
    if spec.instance.spot:
        notes.append("spot usually bills less")
    return cost.Estimate(usd_max=hours * spec.instance.count * hourly.usd_per_hour, hours_max=hours,
                         usd_per_hour=hourly.usd_per_hour, price=price, instance_count=spec.instance.count,
                         spot=spec.instance.spot, note="; ".join(notes), markup=hourly.markup)
