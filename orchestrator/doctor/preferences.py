"""Doctor rules about instance preferences (N070-N076): the exclusions botocore's SageMaker model
documents for ResourceConfig.InstancePreferences, and a count for every choice that trains the
same global batch. Each later preference also gets the instance rules the first one gets
(N001-N005), located at its own entry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import backends, preferences
from orchestrator.doctor import instance
from orchestrator.doctor.finding import Finding

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

# Where a rule run on a preference's variant points, and where that is in the preference.
_MOVED = {"instance.type": "type", "instance.count": "count"}


def check(spec: JobSpec, found: list[preferences.Choice]) -> list[Finding]:
    """N070-N076 and the instance rules of each later preference (empty without preferences)."""
    prefs = spec.instance.preferences
    if not prefs:
        return []
    out: list[Finding] = []
    # botocore's ResourceConfig.InstancePreferences: "mutually exclusive with InstanceType,
    # InstanceGroups, InstancePlacementConfig, and EnableManagedSpotTraining, and supports only
    # Flexible Training Plans (FTP) and On-Demand capacity". The spec has no instance groups or
    # placement, and the request sends no InstanceType with preferences (`backends.sagemaker.request`).
    backend = backends.backend_class(spec.backend)
    if backend.preferences is None:
        out.append(Finding(
            "N071-preferences-backend", "error",
            f"instance.preferences are SageMaker's (ResourceConfig.InstancePreferences); the {spec.backend} "
            "backend runs one type",
            "remove instance.preferences and set instance.type", "instance.preferences"))
        return out
    if spec.instance.spot:
        out.append(Finding(
            "N070-preferences-spot", "error",
            "instance.preferences take on-demand or training plan capacity only: SageMaker refuses them with "
            "managed spot training (EnableManagedSpotTraining)",
            "remove instance.spot (and max_wait_minutes), or give one instance.type for spot", "instance.spot"))
    seen: dict[str, int] = {}
    for i, pref in enumerate(prefs):
        if pref.type in seen:
            out.append(Finding(
                "N072-preference-duplicate", "error",
                f"{pref.type} is preference {seen[pref.type] + 1} and {i + 1}: a type may appear once",
                f"remove instance.preferences.{i}", f"instance.preferences.{i}.type"))
        seen.setdefault(pref.type, i)
    counted = [pref.count is not None for pref in prefs]
    if any(counted) and not all(counted):
        missing = counted.index(False)
        out.append(Finding(
            "N073-preference-counts", "error",
            "count is set on some preferences but not on all: SageMaker takes a count on every preference or "
            "on none (InstancePreference.InstanceCount)",
            "set count on every preference, or on none (then each is chosen to train the same global batch)",
            f"instance.preferences.{missing}.count"))
    planned = [i for i, pref in enumerate(prefs) if pref.training_plan_arn]
    if planned and spec.instance.training_plan_arn:
        out.append(Finding(
            "N074-training-plan-both", "error",
            "a preference names a training plan and so does instance.training_plan_arn: per-preference plans are "
            "mutually exclusive with the job-level one (InstancePreference.TrainingPlanArns)",
            "keep one of them", f"instance.preferences.{planned[0]}.training_plan_arn"))
    for i, choice in enumerate(found):
        if i > 0:
            out += _moved(instance.accepted(choice.spec, choice.target), i)
            out += _moved(instance.lnc(choice.spec, choice.target), i)
            if backend.preferences == "sent":
                out += _moved(instance.workers(choice.spec, choice.target), i)
        if choice.why:
            severity = "warning" if prefs[i].count is not None or choice.target.facts is None else "error"
            out.append(Finding(
                "N075-preference-global-batch", severity, choice.why,
                "give each preference a count that runs the same workers, or drop the type"
                if severity == "warning" else
                f"set instance.count so that {choice.type}'s workers per host divide the first choice's workers, "
                "or give every preference its own count",
                f"instance.preferences.{i}.count" if prefs[i].count is not None else f"instance.preferences.{i}.type"))
    return out


def _moved(findings: list[Finding], position: int) -> list[Finding]:
    """Findings of a preference's variant, at that preference's fields."""
    out = []
    for f in findings:
        field = _MOVED.get(f.path)
        path = f"instance.preferences.{position}.{field}" if field else f.path
        out.append(f._replace(message=f"preference {position + 1}: {f.message}", path=path))
    return out
