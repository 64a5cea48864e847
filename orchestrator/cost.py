"""Cost estimates for a job spec, from the catalog's prices.

Contract: `estimate(spec)` is pure (no clock, no network) and returns an upper bound, never a
guess at the real bill: (`max_run_minutes` + `instance.keep_alive_minutes`) x instance count
x the on-demand hourly price. A job stops at `max_run_minutes`, so it cannot bill more
instance time than that, plus the warm pool SageMaker keeps after it (spot only makes it
cheaper; waiting for spot capacity is not billed). A sweep counts one keep-alive per chain
of trials sharing a pool, not per trial (`warm_pool.chained_keep_alive_usd`). The price's source and date
travel with every estimate so the user can see how much to trust it.

Unverified prices: a price that is not SageMaker's own (the shipped EC2 prices, lower than
SageMaker's) never makes a budget check pass on its own. Until `prices refresh` has fetched
SageMaker's price, `rate(price)` multiplies it by the stated, conservative markup
(`catalog.sagemaker_markup()`, data/prices.json), and every estimate, budget check and
results cost built on it says so ("unverified"). `rate` is the one place that policy lives.

Batch (inf2 through AWS Batch): the EC2 price is what the job bills (Batch adds no charge).
Each attempt is stopped at max_run_minutes (the job's timeout), and up to 1 + max_retry_attempts
attempts run; each attempt's instance is also billed while it boots, pulls the image and
idles before the compute environment scales in: BATCH_INSTANCE_MINUTES per attempt, an
assumption stated in every such estimate.

An instance type without a known price gives `usd_max = math.inf` (and `usd_per_hour = None`):
a budget can then not be shown to hold, and budget checks refuse rather than pass silently.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from orchestrator import catalog

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec


class Rate(NamedTuple):
    """The hourly price estimates use for one instance: SageMaker's own, or an unverified
    price times the assumed markup."""

    usd_per_hour: float
    price: catalog.Price
    markup: float  # 1.0 for SageMaker's own price

    @property
    def verified(self) -> bool:
        return self.price.verified

    def describe(self) -> str:
        """"1.3438 USD/h (source, as_of)", or for an unverified price how the rate was made."""
        if self.verified:
            return self.price.describe()
        return (f"{self.usd_per_hour:.4f} USD/h = {self.price.usd_per_hour:.4f} USD/h ({self.price.source}, "
                f"{self.price.as_of}) x {self.markup:g}, an assumed SageMaker markup")


# What every line built on an unverified price says, and how to get rid of it.
UNVERIFIED = "unverified price: not SageMaker's own; `python -m orchestrator prices refresh` fetches it"


def rate(price: catalog.Price) -> Rate:
    """The rate of `price` under the unverified-price policy (see the module docstring)."""
    if price.verified:
        return Rate(price.usd_per_hour, price, 1.0)
    factor = catalog.sagemaker_markup().factor
    return Rate(price.usd_per_hour * factor, price, factor)


class Estimate(NamedTuple):
    """An upper bound on what one job costs.

    `hours_max` is the wall-clock bound (max_run_minutes / 60); `usd_max` multiplies it by the
    instance count and `usd_per_hour` (the rate of one instance: `rate(price)`, so an
    unverified price carries the markup). `usd_max` is 0 for the local backend and `math.inf`
    when no price is known.
    """

    usd_max: float
    hours_max: float
    usd_per_hour: float | None
    price: catalog.Price | None
    instance_count: int
    spot: bool
    note: str
    markup: float = 1.0
    keep_alive_hours: float = 0.0  # a warm pool kept after the job (instance.keep_alive_minutes)

    @property
    def keep_alive_usd(self) -> float:
        """What the keep-alive after the job bills at most (included in `usd_max`)."""
        if not self.keep_alive_hours or self.usd_per_hour is None:
            return 0.0
        return self.keep_alive_hours * self.instance_count * self.usd_per_hour

    @property
    def verified(self) -> bool:
        """Whether the bound rests on SageMaker's own price (False: the markup policy applies)."""
        return self.price is not None and self.price.verified

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
        hours = (f"({self.hours_max:g} h + {self.keep_alive_hours:g} h warm pool)" if self.keep_alive_hours
                 else f"{self.hours_max:g} h")
        return (f"cost: at most {self.usd_max:.2f} USD = {hours} x {self.instance_count} "
                f"x {self.price.type} at {rate(self.price).describe()}; {self.note}")

    def to_json(self) -> dict:
        """A JSON-safe dict (an unknown bound is null, not Infinity)."""
        return {
            "usd_max": self.usd_max if self.known else None,
            "hours_max": self.hours_max,
            "keep_alive_hours": self.keep_alive_hours,
            "usd_per_hour": self.usd_per_hour,
            "verified": self.verified,
            "markup": self.markup,
            "instance_count": self.instance_count,
            "spot": self.spot,
            "price": None if self.price is None else {
                "type": self.price.type, "region": self.price.region, "usd_per_hour": self.price.usd_per_hour,
                "source": self.price.source, "as_of": self.price.as_of, "kind": self.price.kind,
            },
            "note": self.note,
            "describe": self.describe(),
        }



def estimate(spec: JobSpec, target: catalog.Target | None = None) -> Estimate:
    """The upper-bound cost of `spec` on its backend (see the module docstring; each backend
    bills in its own way: `Backend.estimate`), at the price of its resolved `target` when given
    (`catalog.resolve`; else the catalog is asked for it)."""
    return spec.backend_type.estimate(spec, target)


def price_of(spec: JobSpec, target: catalog.Target | None) -> catalog.Price | None:
    """The price the bound is at: the target's, else the catalog's for the spec's type and region."""
    return target.price if target is not None else catalog.price(spec.instance.type, spec.region)


def unpriced(spec: JobSpec) -> Estimate:
    """The bound of a spec whose instance has no known price: unbounded, saying how to get one."""
    return Estimate(usd_max=math.inf, hours_max=spec.max_run_minutes / 60, usd_per_hour=None, price=None,
                    instance_count=spec.instance.count, spot=spec.instance.spot,
                    note=f"no price known for {spec.instance.type} in {spec.region}; "
                    "run `python -m orchestrator prices refresh`")


def worst_case(costs: list[float], max_retries: int) -> float:
    """The most a sweep trial can bill under the runner's policy, from the cost bounds of its
    failover chain (its own instance type first): a capacity error moves it once along the
    chain, each to a new job, and up to `max_retries` resubmissions (capacity at the end of
    the chain, spot interruption, internal error) may each run in full on any of them, so at
    worst on the dearest. `math.inf` when a bound is unknown."""
    if not costs:
        return 0.0
    return sum(costs) + max_retries * max(costs)
