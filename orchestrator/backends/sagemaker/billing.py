"""What a SageMaker training job bills at most: max_run_minutes on every instance, plus the
warm pool kept after it, at SageMaker's on-demand price (or an EC2 price with its markup,
said as unverified)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import cost

if TYPE_CHECKING:
    from orchestrator import catalog
    from orchestrator.spec import JobSpec


def estimate(spec: JobSpec, target: catalog.Target | None) -> cost.Estimate:
    price = cost.price_of(spec, target)
    if price is None:
        return cost.unpriced(spec)
    hourly = cost.rate(price)
    hours, count, spot = spec.max_run_minutes / 60, spec.instance.count, spec.instance.spot
    if hourly.verified:
        notes = ["upper bound: max_run_minutes at SageMaker's on-demand price"]
    else:
        notes = [f"upper bound only if SageMaker charges at most {hourly.markup:g} x this EC2 price; {cost.UNVERIFIED}"]
    if spec.training.precompile:
        notes.append("the precompile pass runs within the job, so within max_run_minutes")
    if spot:
        notes.append("managed spot usually bills less")
    keep = spec.instance.keep_alive_minutes / 60
    if keep:
        notes.append("the warm pool kept after the job is billed too")
    return cost.Estimate(usd_max=(hours + keep) * count * hourly.usd_per_hour, hours_max=hours,
                         usd_per_hour=hourly.usd_per_hour, price=price, instance_count=count, spot=spot,
                         note="; ".join(notes), markup=hourly.markup, keep_alive_hours=keep)
