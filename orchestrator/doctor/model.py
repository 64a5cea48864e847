"""Doctor rules about the model and the training loop: the architecture (N026, N028), the
patch size (N014), precision on Neuron (N007, N008), local processes (N021, N027) and
checkpoints (N022)."""

from __future__ import annotations

import difflib
import os
import re
from typing import TYPE_CHECKING

from orchestrator import catalog
from orchestrator.doctor.finding import Finding

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

DEPRECATED_ENV = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")


def patch_size(spec: JobSpec) -> int | None:
    """model.patch_size, or the number after `patch` in the arch name; None if neither."""
    if spec.model.patch_size is not None:
        return spec.model.patch_size
    found = re.search(r"patch(\d+)", spec.model.arch)
    return int(found.group(1)) if found else None


def precision(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """N007, N008: fp16 on the Neuron path, and the deprecated bf16 variables."""
    out = []
    facts = target.facts
    on_neuron = spec.training.runtime == "xla" or (
        spec.backend_type.cloud and facts is not None
        and facts.accelerator.startswith(("Trainium", "Inferentia")))
    if spec.training.precision == "fp16" and on_neuron:
        out.append(Finding(
            "N007-fp16-on-neuron", "error",
            "precision fp16 is not a supported training precision on Neuron (no fp16 loss scaling on the XLA path)",
            "use precision: bf16 (torch.autocast), or fp32", "training.precision"))
    # A warning, not an error: the 2.24 end-of-support notice said these stop working, but the
    # Neuron 2.26.0 and 2.27.0 release notes (aws-neuron-sdk release-notes/components/pytorch.rst,
    # release-notes/prev/2.27.0/nx-pytorch.rst) keep XLA_DOWNCAST_BF16=1 working in torch-neuronx
    # 2.5 through 2.9 with a deprecation warning, as a work-around for a bf16 slowdown.
    for name in DEPRECATED_ENV:
        if name in spec.environment:
            out.append(Finding(
                "N008-deprecated-bf16-env", "warning",
                f"{name} is deprecated: torch-neuronx 2.9 still honours it with a deprecation warning, "
                "and PyTorch 2.10 (TorchNeuron) drops it",
                "use precision: bf16 (torch.autocast)", f"environment.{name}"))
    return out


def _arch(spec: JobSpec) -> list[Finding]:
    arch = spec.model.arch
    known = catalog.vit_architectures()
    if arch in catalog.vit_hybrid_architectures() and spec.model.patch_embed == "linear":
        # train.py refuses it at start (vit.build); say so before an instance is paid for.
        return [Finding(
            "N028-hybrid-linear-embed", "error",
            f"{arch} is a hybrid ViT: its patches come from a ResNet/conv stem, which the conv-free "
            "linear patch embedding cannot replace",
            "set model.patch_embed: conv for this architecture, or pick a plain ViT", "model.patch_embed")]
    if arch in known:
        return []
    version, _ = catalog.vit_architectures_source()
    # A warning, not an error: the job installs a timm of the same major version that may be
    # newer than this list, and with 200-odd names of one shape a real new model looks like a
    # typo of an old one. The job fails at its start if its timm lacks the name.
    close = difflib.get_close_matches(arch, sorted(known), n=3, cutoff=0.8)
    fix = (f"did you mean {' or '.join(repr(c) for c in close)}? If not, check the name with "
           if close else "check the name with ")
    return [Finding(
        "N026-model-arch-unknown", "warning",
        f"{arch!r} is not among the {len(known)} ViT models of timm {version}; the job fails at start "
        "if the training image's timm does not have it either",
        fix + "`python -c \"import timm; print(timm.list_models('vit_*'))\"`", "model.arch")]


def model(spec: JobSpec) -> list[Finding]:
    """N028, N026, N014: an architecture the job can build, images its patches divide."""
    out = _arch(spec)
    size = patch_size(spec)
    if size is not None and spec.model.image_size % size:
        lower = spec.model.image_size - spec.model.image_size % size
        out.append(Finding(
            "N014-patch-divisibility", "error",
            f"image_size {spec.model.image_size} is not divisible by the patch size {size}",
            f"set model.image_size to a multiple of {size} (e.g. {lower or size} or {lower + size})",
            "model.image_size"))
    return out


def training(spec: JobSpec) -> list[Finding]:
    """N021, N027, N022: local processes this machine can run together, checkpoints that happen."""
    out = []
    train = spec.training
    here = not spec.backend_type.cloud  # processes of this machine
    if here and train.runtime == "xla":
        processes = (train.workers_per_node or 1) * spec.instance.count
        if processes > 1:
            out.append(Finding(
                "N021-local-xla-multiprocess", "warning",
                f"{processes} local XLA processes: PJRT on CPU is single-process, so each rank trains alone "
                "(world size 1) instead of together",
                "set training.workers_per_node: 1 (and instance.count: 1), or use runtime: native for "
                "multi-process CPU training", "training.workers_per_node"))
    if here:
        processes = spec.instance.count * (train.workers_per_node or 1)
        cpus = os.cpu_count() or 1
        if processes > cpus:
            out.append(Finding(
                "N027-local-oversubscribed", "warning",
                f"{processes} local training processes ({spec.instance.count} host(s) x "
                f"{train.workers_per_node or 1} worker(s)) share this machine's {cpus} CPUs: every step "
                "waits for the slowest, and compiling runs once per process",
                f"keep instance.count x training.workers_per_node at most {cpus} for local runs",
                "instance.count" if spec.instance.count > 1 else "training.workers_per_node"))
    if train.checkpoint_every > train.steps:
        out.append(Finding(
            "N022-checkpoint-never", "warning",
            f"checkpoint_every ({train.checkpoint_every}) is above steps ({train.steps}): no checkpoint is written",
            f"set training.checkpoint_every to at most {train.steps}, or 0 for none", "training.checkpoint_every"))
    return out
