"""Peak compute of an instance type by training precision: the denominator of MFU.

Facts in `data/peak_flops.json`: dense TFLOPS per chip for each accelerator and precision,
each with the Neuron documentation page it comes from and the date it was read. Per
NeuronCore is the chip's figure over its physical NeuronCores; per instance, times the
catalog's chips. MFU is over the whole instance (every chip of every host the job paid for),
whatever number of workers the job ran.
"""

from __future__ import annotations

import json
from functools import cache
from typing import NamedTuple

from orchestrator import catalog


class Peak(NamedTuple):
    """Dense peak FLOP/s of one instance at one precision, and where the figure comes from."""

    instance_type: str
    precision: str
    per_chip: float
    per_core: float
    per_instance: float
    source: str
    as_of: str


@cache
def _data() -> dict:
    return json.loads((catalog.DATA / "peak_flops.json").read_text())


def peak(instance_type: str | None, precision: str | None) -> Peak | None:
    """The peak of `instance_type` at `precision` (bf16, fp16, fp32); None when either is
    unknown to the catalog."""
    inst = catalog.instance(instance_type) if instance_type else None
    if inst is None or precision is None:
        return None
    data = _data()
    chip = data["accelerators"].get(inst.accelerator)
    tflops = chip["tflops_per_chip"].get(precision) if chip else None
    if tflops is None:
        return None
    per_chip = float(tflops) * 1e12
    return Peak(instance_type=inst.type, precision=precision, per_chip=per_chip,
                per_core=per_chip / chip["neuron_cores_per_chip"], per_instance=per_chip * inst.chips,
                source=chip["source"], as_of=data["as_of"])


def mfu(flops_per_sample: float | None, samples_per_s: float | None, instance_type: str | None,
        count: int | None, precision: str | None) -> float | None:
    """Model FLOPs utilization: `flops_per_sample x samples_per_s` over the peak of `count`
    instances at `precision`; None when any part is unknown."""
    top = peak(instance_type, precision)
    if top is None or not flops_per_sample or not samples_per_s or not count:
        return None
    return flops_per_sample * samples_per_s / (top.per_instance * count)
