"""The doctor's rules a SageMaker training job needs beyond every backend's: a type SageMaker
trains on (N001), the image's region, the budget, EFA, the request's limits, tags, the image's
runtime, workers, volume and spot (`doctor.diagnose` runs the rest)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.doctor import budget, environment, image, instance

if TYPE_CHECKING:
    from orchestrator import catalog, cost
    from orchestrator.doctor.finding import Finding
    from orchestrator.spec import JobSpec


def check(spec: JobSpec, target: catalog.Target, estimate: cost.Estimate, priced: JobSpec) -> list[Finding]:
    """Every rule above on `spec`; `priced`: the spec whose price the estimate is."""
    findings = instance.accepted(spec, target)
    findings += image.image_and_region(spec)
    findings += budget.within(priced, estimate, findings)
    findings += instance.efa(spec, target)
    findings += environment.sagemaker_limits(spec, target)
    findings += environment.tags(spec)
    findings += image.runtime(spec, target)
    findings += instance.workers(spec, target)
    findings += instance.volume(spec, target)
    return findings + instance.spot(spec)
