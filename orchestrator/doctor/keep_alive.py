"""Doctor rules about SageMaker managed warm pools (`instance.keep_alive_minutes`): N050-N053.

Source: the SageMaker developer guide, "SageMaker AI Managed Warm Pools"
(docs.aws.amazon.com/sagemaker/latest/dg/train-warm-pools.html): `KeepAlivePeriodInSeconds`
is at most 3,600 s (botocore's model allows 21,600; the service documents 3,600), warm pools
cannot be used with spot instances, and they count against their own per-type service quota
("<type> for training warm pool usage", train-warm-pools-resource-limits.html).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.doctor.finding import Finding

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

MAX_KEEP_ALIVE_MINUTES = 60
PATH = "instance.keep_alive_minutes"


def check(spec: JobSpec) -> list[Finding]:
    """N050-N053 for a spec with a keep-alive (nothing for keep_alive_minutes: 0)."""
    minutes = spec.instance.keep_alive_minutes
    if minutes <= 0:
        return []
    if not spec.backend_type.cloud:
        return [Finding(
            "N052-keep-alive-local", "info",
            f"keep_alive_minutes {minutes} is ignored by the local backend: a local job keeps no instance "
            "(the request still carries it, for the same spec on SageMaker)",
            "nothing to do; it takes effect with backend: sagemaker", PATH)]
    out = []
    if minutes > MAX_KEEP_ALIVE_MINUTES:
        out.append(Finding(
            "N050-keep-alive-too-long", "error",
            f"keep_alive_minutes is {minutes}: SageMaker keeps a warm pool at most {MAX_KEEP_ALIVE_MINUTES} "
            "minutes after a job (KeepAlivePeriodInSeconds <= 3600)",
            f"set instance.keep_alive_minutes to at most {MAX_KEEP_ALIVE_MINUTES}", PATH))
    if spec.instance.spot:
        out.append(Finding(
            "N053-warm-pool-spot", "error",
            "SageMaker managed warm pools cannot be used with managed spot training (spot: true)",
            "set instance.keep_alive_minutes: 0, or spot: false", PATH))
    out.append(Finding(
        "N051-warm-pool-quota", "info",
        f"warm pools have their own service quota, \"{spec.instance.type} for training warm pool usage\" "
        f"(per account and region; often 0): without {spec.instance.count} of it the job runs but no pool is "
        "kept, and the next job starts cold",
        "check it in Service Quotas (Amazon SageMaker) and request an increase if needed", PATH))
    return out
