"""Model FLOPs of one training sample: the numerator of MFU (model FLOPs utilization).

Contract: `training_flops_per_sample(model_spec)` builds the spec's ViT (`vit.build`) on the
meta device (no memory, no weights) and runs one forward pass, a cross-entropy loss and the
backward pass on a meta batch under PyTorch's `torch.utils.flop_counter.FlopCounterMode`; it
returns the counted FLOPs divided by the batch. The counter counts what its formula registry
covers: matrix products (mm, addmm, bmm), convolutions and the attention kernels, as
multiply-adds x 2. Element-wise work (norms, GELU, softmax, the optimizer step) is not
counted: the usual MFU convention (PaLM, Megatron), which also makes the figure independent
of how the compiler fuses. For vit_base_patch16_224 at 224 px that is 3 x 35.1 GFLOPs
(tests/test_flops.py checks it against the hand count 24·N·D² + 4·N²·D per block).

Counted once per host by the first rank, at its end (`entrypoints.trainer.train`), a second or so on
the CPU; nothing here runs on the accelerator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Two samples, so that nothing batch-1-specific (a squeezed dimension) changes the count.
BATCH = 2


def training_flops_per_sample(model_spec: Mapping[str, Any]) -> float:
    """Forward + backward FLOPs of one sample of the spec's model (see the module docstring)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from entrypoints.trainer import vit

    size = int(model_spec.get("image_size", 224))
    with torch.device("meta"):
        model = vit.build(model_spec)
        images = torch.empty(BATCH, 3, size, size)
        labels = torch.zeros(BATCH, dtype=torch.long)
    counter = FlopCounterMode(display=False)
    with counter:
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
    return counter.get_total_flops() / BATCH
