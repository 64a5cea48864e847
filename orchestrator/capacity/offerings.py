"""Training plan offerings for a spec: what to ask SearchTrainingPlanOfferings, and its answers
ranked cheapest first beside the job's on-demand bound.

Contract: `searches(spec)` is pure (botocore's model and the catalog are read, no AWS call):
one `Search` per instance type the spec may run on (its type, or each preference with the
count that trains the same global batch) that a plan can hold, and one `Skipped` with the
reason for each other type; a skipped type is never sent. `search(client, ...)` asks once per
`Search` and returns every `Offering`, cheapest first. Which types a plan can hold is botocore's
enum of SearchTrainingPlanOfferings' InstanceType (ReservedCapacityInstanceType), not a copy.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator import catalog, cost, preferences
from orchestrator.errors import InputError

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

OPERATION = "SearchTrainingPlanOfferings"
# botocore's SageMakerResourceName: a plan for training jobs "can only be used to schedule and
# run training jobs" (API reference, TrainingPlanOffering.TargetResources).
TARGET = "training-job"
# Minutes a plan's window must hold besides max_run_minutes: instances are provisioned, the
# image pulled and the code unpacked inside the reserved window before training starts.
# No AWS page gives this figure: assumed (docs/USAGE.md, "Capacity you can reserve").
STARTUP_MINUTES = 30


def plan_instance_types() -> frozenset[str]:
    """The instance types a training plan can hold: botocore's enum of
    SearchTrainingPlanOfferings' InstanceType, cached per botocore version (`catalog.botocore_cached`)."""
    return frozenset(catalog.botocore_cached("botocore-plan-instance-types", _enum_from_model))


def _enum_from_model() -> list[str]:
    import botocore.loaders

    model = botocore.loaders.create_loader().load_service_model("sagemaker", "service-2")
    request = model["operations"][OPERATION]["input"]["shape"]
    shape = model["shapes"][request]["members"]["InstanceType"]["shape"]
    return list(model["shapes"][shape]["enum"])


@dataclass(frozen=True)
class Search:
    """One SearchTrainingPlanOfferings request: a type, its count, and the job's bound on it."""

    type: str
    count: int
    duration_hours: int
    estimate: cost.Estimate  # the same job on demand on this type

    def request(self, start_after: dt.datetime | None = None, end_before: dt.datetime | None = None) -> dict:
        params: dict = {"InstanceType": self.type, "InstanceCount": self.count,
                        "DurationHours": self.duration_hours, "TargetResources": [TARGET]}
        if start_after is not None:
            params["StartTimeAfter"] = start_after
        if end_before is not None:
            params["EndTimeBefore"] = end_before
        return params


@dataclass(frozen=True)
class Skipped:
    type: str
    reason: str


def duration_hours(spec: JobSpec) -> int:
    """Whole hours covering max_run_minutes, the warm pool kept after it, and STARTUP_MINUTES."""
    minutes = spec.max_run_minutes + spec.instance.keep_alive_minutes + STARTUP_MINUTES
    return max(1, math.ceil(minutes / 60))


def searches(spec: JobSpec) -> tuple[list[Search], list[Skipped]]:
    """The searches for `spec`'s instance types that a plan can hold, and the types skipped
    (with why). InputError (exit 2) for a spec that runs on no SageMaker training job."""
    # A plan is SageMaker's capacity for training jobs: asked of the backend, which request it sends.
    sent = spec.backend_type.operation
    if sent is None or sent[1] != "CreateTrainingJob":
        raise InputError(f"training plans reserve SageMaker capacity; this spec runs on the {spec.backend} backend",
                         hint="use a spec with backend: sagemaker")
    if spec.instance.spot:
        raise InputError("a spot job does not run on a training plan (instance.spot is true)",
                         hint="set instance.spot: false to search for plans")
    allowed = plan_instance_types()
    hours = duration_hours(spec)
    found = preferences.choices(spec)
    ways = [(c.type, c.count, c.estimate, c.why) for c in found] if found else \
        [(spec.instance.type, spec.instance.count, cost.estimate(spec, catalog.resolve(spec)), "")]
    out: list[Search] = []
    skipped: list[Skipped] = []
    for type_, count, estimate, why in ways:
        if type_ not in allowed:
            neuron = sorted(t for t in allowed if t.startswith(("ml.trn", "ml.inf")))
            skipped.append(Skipped(type_, "a training plan cannot hold it: botocore's "
                                   f"{OPERATION} InstanceType values do not include it (the Neuron types they "
                                   f"include: {', '.join(neuron) or 'none'})"))
        elif count is None:
            skipped.append(Skipped(type_, why or "no instance count trains the job's global batch"))
        else:
            out.append(Search(type_, count, hours, estimate))
    return out, skipped


@dataclass(frozen=True)
class Offering:
    """One offering as SearchTrainingPlanOfferings answered it, with the search it answers."""

    offering_id: str
    type: str
    count: int
    zones: tuple[str, ...]
    start: dt.datetime | None
    end: dt.datetime | None
    duration_minutes: int
    fee: float | None  # UpfrontFee, a decimal string in the answer; None when absent or unreadable
    currency: str
    search: Search

    @property
    def hours(self) -> float:
        return self.duration_minutes / 60

    def on_demand_same_window(self) -> float | None:
        """What the offering's instances would bill on demand for the offering's whole duration."""
        rate = self.search.estimate.usd_per_hour
        return None if rate is None else rate * self.count * self.hours

    def to_json(self) -> dict:
        est = self.search.estimate
        return {"offering_id": self.offering_id, "instance_type": self.type, "instance_count": self.count,
                "availability_zones": list(self.zones), "start": _iso(self.start), "end": _iso(self.end),
                "duration_minutes": self.duration_minutes, "upfront_fee": self.fee, "currency": self.currency,
                "on_demand_bound_usd": est.usd_max if est.known else None,
                "on_demand_usd_per_hour": est.usd_per_hour,
                "on_demand_same_window_usd": self.on_demand_same_window(),
                "searched": {"instance_count": self.search.count, "duration_hours": self.search.duration_hours}}


def _iso(value: dt.datetime | None) -> str | None:
    return value.astimezone(dt.timezone.utc).isoformat() if value is not None else None


def _fee(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def parse(answer: dict, searched: Search) -> list[Offering]:
    """The offerings of one SearchTrainingPlanOfferings answer. An offering's capacity may come
    in up to five reserved-capacity pieces: its count is theirs summed, its window from the
    first start to the last end."""
    found = []
    for item in answer.get("TrainingPlanOfferings") or []:
        if TARGET not in (item.get("TargetResources") or []):
            continue  # not for training jobs: a job could not use it
        pieces = item.get("ReservedCapacityOfferings") or []
        starts = [p["StartTime"] for p in pieces if p.get("StartTime")]
        ends = [p["EndTime"] for p in pieces if p.get("EndTime")]
        minutes = int(item.get("DurationHours") or 0) * 60 + int(item.get("DurationMinutes") or 0)
        found.append(Offering(
            offering_id=item["TrainingPlanOfferingId"],
            type=pieces[0]["InstanceType"] if pieces else searched.type,
            count=sum(int(p.get("InstanceCount") or 0) for p in pieces) or searched.count,
            zones=tuple(sorted({p["AvailabilityZone"] for p in pieces if p.get("AvailabilityZone")})),
            start=min(starts) if starts else None, end=max(ends) if ends else None,
            duration_minutes=minutes, fee=_fee(item.get("UpfrontFee")),
            currency=item.get("CurrencyCode") or "", search=searched))
    return found


def ranked(found: list[Offering]) -> list[Offering]:
    """Cheapest first: by currency, then fee (an offering without a readable fee last), then start."""
    far = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
    return sorted(found, key=lambda o: (o.fee is None, o.currency, o.fee or 0.0, o.start or far, o.offering_id))


def search(client, wanted: list[Search], start_after: dt.datetime | None = None,
           end_before: dt.datetime | None = None) -> list[Offering]:
    """Ask SearchTrainingPlanOfferings once per search (read-only) and rank every answer."""
    from orchestrator.capacity.plans import call

    region = getattr(getattr(client, "meta", None), "region_name", None)
    found: list[Offering] = []
    for one in wanted:
        answer = call(OPERATION, region, client.search_training_plan_offerings, **one.request(start_after, end_before))
        found += parse(answer, one)
    return ranked(found)


def find(found: list[Offering], offering_id: str) -> Offering:
    """The offering `offering_id` among `found`, or InputError (exit 2)."""
    for offering in found:
        if offering.offering_id == offering_id:
            return offering
    listed = ", ".join(o.offering_id for o in found[:5]) or "none"
    raise InputError(f"offering {offering_id!r} is not among the offerings SageMaker lists for this spec now "
                     f"(listed: {listed})",
                     hint="offerings change as capacity is sold: run `capacity offerings SPEC` again and pick one")
