"""Cost estimates for a job spec, from the catalog's prices.

Contract: `estimate(spec)` is pure (no clock, no network) and returns an upper bound, never a
guess at the real bill: `max_run_minutes` x instance count x the on-demand hourly price. A
job stops at `max_run_minutes`, so it cannot bill more instance time than that (spot only
makes it cheaper; waiting for spot capacity is not billed). The price's source and date
travel with every estimate so the user can see how much to trust it.

An instance type without a known price gives `usd_max = math.inf` (and `usd_per_hour = None`):
a budget can then not be shown to hold, and budget checks refuse rather than pass silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator import catalog
from orchestrator.spec import JobSpec


@dataclass(frozen=True)
class Estimate:
    """An upper bound on what one job costs.

    `hours_max` is the wall-clock bound (max_run_minutes / 60); `usd_max` multiplies it by the
    instance count and `usd_per_hour` (the price of one instance). `usd_max` is 0 for the
    local backend and `math.inf` when no price is known.
    """

    usd_max: float
    hours_max: float
    usd_per_hour: float | None
    price: catalog.Price | None
    instance_count: int
    spot: bool
    note: str

    @property
    def known(self) -> bool:
        """Whether `usd_max` is a finite number the budget can be compared with."""
        return math.isfinite(self.usd_max)

    @property
    def instance_hours(self) -> float:
        return self.hours_max * self.instance_count

    def describe(self) -> str:
        """One line: the bound, how it was computed, and where the price came from."""
        if self.price is None and self.usd_per_hour is None and self.usd_max == 0:
            return f"cost: 0 USD ({self.note})"
        if not self.known:
            return f"cost: unknown ({self.note})"
        return (f"cost: at most {self.usd_max:.2f} USD = {self.hours_max:g} h x {self.instance_count} "
                f"x {self.price.type} at {self.price.describe()}; {self.note}")

    def to_json(self) -> dict:
        """A JSON-safe dict (an unknown bound is null, not Infinity)."""
        return {
            "usd_max": self.usd_max if self.known else None,
            "hours_max": self.hours_max,
            "usd_per_hour": self.usd_per_hour,
            "instance_count": self.instance_count,
            "spot": self.spot,
            "price": None if self.price is None else {
                "type": self.price.type, "region": self.price.region, "usd_per_hour": self.price.usd_per_hour,
                "source": self.price.source, "as_of": self.price.as_of, "kind": self.price.kind,
            },
            "note": self.note,
            "describe": self.describe(),
        }


def estimate(spec: JobSpec) -> Estimate:
    """The upper-bound cost of `spec` (see the module docstring)."""
    hours = spec.max_run_minutes / 60
    count = spec.instance.count
    spot = spec.instance.spot
    if spec.backend == "local":
        return Estimate(usd_max=0.0, hours_max=hours, usd_per_hour=None, price=None, instance_count=count,
                        spot=spot, note="local backend: no cloud cost")
    price = catalog.price(spec.instance.type, spec.region)
    if price is None:
        return Estimate(usd_max=math.inf, hours_max=hours, usd_per_hour=None, price=None, instance_count=count,
                        spot=spot, note=f"no price known for {spec.instance.type} in {spec.region}; "
                        "run `python -m orchestrator prices refresh`")
    notes = ["on-demand upper bound" + ("; managed spot usually bills less" if spot else "")]
    if price.kind.startswith("ec2"):
        notes.append("EC2 price: SageMaker ml.* prices are higher")
    return Estimate(usd_max=hours * count * price.usd_per_hour, hours_max=hours, usd_per_hour=price.usd_per_hour,
                    price=price, instance_count=count, spot=spot, note="; ".join(notes))
