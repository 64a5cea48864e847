"""Rules about `training.precompile` (N060-N069): where the neuron_parallel_compile pass does not apply.

The pass itself is the container's (entrypoints/launcher/precompile.py); it runs within the job, so
the cost bound (max_run_minutes) already covers it, and `cost.estimate` says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.doctor.finding import Finding

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

PATH = "training.precompile"


def precompile(spec: JobSpec) -> list[Finding]:
    """N060 (runtime native) and N061 (local backend)."""
    if not spec.training.precompile:
        return []
    found = []
    if spec.training.runtime != "xla":
        found.append(Finding(
            "N060-precompile-native", "warning",
            f"precompile: neuron_parallel_compile extracts torch-xla graphs; runtime {spec.training.runtime} has "
            "none, so the job skips the pass (results.json says so)",
            "use runtime: xla on Neuron, or drop training.precompile", PATH))
    if not spec.backend_type.cloud:
        found.append(Finding(
            "N061-precompile-local", "info",
            "precompile: the local backend has no neuron_parallel_compile unless this machine has the Neuron "
            "tools on PATH; without them the job skips the pass and trains as usual (results.json says why)",
            "nothing to change: the pass runs on SageMaker, in the Neuron training image", PATH))
    return found
