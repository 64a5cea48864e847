"""Which instance type a local job runs as: with instance preferences, the first this machine is
told has capacity, as SageMaker launches a job on the first preference with capacity
(botocore's ResourceConfig.InstancePreferences).

This machine has no capacity to lack, so it is told: `NO_CAPACITY_ENV` lists, comma-separated,
the types that have none (a test or a demonstration of failover). The selected type is what the
job's hosts find in resourceconfig.json (`current_instance_type`) and what `status` reports,
as DescribeTrainingJob's SelectedInstanceType and SelectedInstanceCount do.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from orchestrator.errors import BackendError

NO_CAPACITY_ENV = "ORCHESTRATOR_LOCAL_NO_CAPACITY"
# The error code SageMaker's capacity failures carry (the sweep's failover reads it).
CAPACITY_CODE = "InsufficientCapacityError"


def lacking(environ: Mapping[str, str] | None = None) -> set[str]:
    """The types `NO_CAPACITY_ENV` says have no capacity here."""
    raw = (os.environ if environ is None else environ).get(NO_CAPACITY_ENV, "")
    return {part.strip() for part in raw.split(",") if part.strip()}


def selected(resources: dict, environ: Mapping[str, str] | None = None) -> tuple[str, int]:
    """(instance type, count) a ResourceConfig runs as here: its InstanceType and InstanceCount,
    or the first of its InstancePreferences not lacking capacity. BackendError (the capacity
    code) when every preference lacks it."""
    prefs = resources.get("InstancePreferences")
    if not prefs:
        return resources["InstanceType"], int(resources["InstanceCount"])
    none = lacking(environ)
    for pref in prefs:
        if pref["InstanceType"] not in none:
            return pref["InstanceType"], int(pref.get("InstanceCount") or resources.get("InstanceCount") or 1)
    types = ", ".join(p["InstanceType"] for p in prefs)
    raise BackendError(f"no capacity for any instance preference ({types}): {NO_CAPACITY_ENV} names them all",
                       hint=f"unset {NO_CAPACITY_ENV} or leave a preference out of it", code=CAPACITY_CODE)
