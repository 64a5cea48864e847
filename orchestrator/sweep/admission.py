"""Admitting a sweep's jobs by quota: a job is submitted only when the instances it needs fit
in the account's quota for a type it may run on, beside what the sweep already has in flight.
A job that does not fit waits (the runner shows "waiting for quota" with the type) instead of
being submitted to fail with ResourceLimitExceeded.

Contract: `Admission(limits)` takes instances per type (`from_verdicts`: the applied Service
Quotas value less what other jobs held when the sweep started; a type without a known quota is
not limited). `why_not(request, in_flight)` is None when `request` (a CreateTrainingJob request)
fits, else the reason it waits. A job with instance preferences fits when one of its types has
room; a job in flight with preferences is counted against its first type, the one SageMaker
tries first (which one it selected is not in the ledger: an approximation that can hold a
trial back, never admit one past a quota on its first type).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def ways(request: dict) -> list[tuple[str, int]]:
    """(instance type, count) for each way a CreateTrainingJob request may run, in order."""
    resources = request.get("ResourceConfig") or {}
    prefs = resources.get("InstancePreferences")
    if prefs:
        return [(p["InstanceType"], int(p.get("InstanceCount") or resources.get("InstanceCount") or 1)) for p in prefs]
    if resources.get("InstanceType"):
        return [(resources["InstanceType"], int(resources.get("InstanceCount") or 1))]
    return []


class Admission:
    def __init__(self, limits: dict[str, float]):
        self.limits = dict(limits)

    @classmethod
    def from_verdicts(cls, verdicts: Iterable) -> Admission:
        """Limits from `quotas.read`'s verdicts: each known quota less what running jobs held."""
        limits: dict[str, float] = {}
        for v in verdicts:
            if v.quota is not None:
                limits[v.need.instance_type] = max(0.0, v.quota.value - (v.in_use or 0))
        return cls(limits)

    def why_not(self, request: dict, in_flight: Iterable[dict]) -> str | None:
        """None when `request` fits beside the `in_flight` requests; else why it waits."""
        held: Counter = Counter()
        for other in in_flight:
            found = ways(other)
            if found:
                held[found[0][0]] += found[0][1]
        said = []
        for itype, count in ways(request):
            limit = self.limits.get(itype)
            if limit is None or held[itype] + count <= limit:
                return None
            said.append(f"{itype} needs {count}, {held[itype]} of {limit:g} held by this sweep")
        return "waiting for quota: " + "; ".join(said) if said else None
