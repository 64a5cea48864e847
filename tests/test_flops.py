"""FLOPs per training sample (entrypoints.trainer.flops), the peaks (orchestrator.peak_flops) and the
MFU a results row shows, each against a count by hand."""

from __future__ import annotations

import pytest

from entrypoints.shared import results_schema
from entrypoints.trainer import flops
from orchestrator import catalog, peak_flops
from orchestrator.results import build_row
from orchestrator.results.render import render_table
from orchestrator.results.rows import Collection

BASE = {"arch": "vit_base_patch16_224", "image_size": 224, "patch_embed": "linear"}


def vit_training_flops(*, image: int, patch: int, dim: int, depth: int, classes: int) -> float:
    """By hand, matmuls only (2 FLOPs a multiply-add). Per block over N tokens of width D: qkv
    6ND², attention scores and weighted values 4N²D, projection 2ND², MLP (4D) 16ND²; then the
    patch projection (N-1 patches of 3p² values) and the head on the class token. Backward is
    twice the forward, except the patch projection's: images need no gradient, only its weight."""
    patches = (image // patch) ** 2
    tokens = patches + 1
    block = 24 * tokens * dim**2 + 4 * tokens**2 * dim
    embed = 2 * patches * 3 * patch**2 * dim
    forward = depth * block + embed + 2 * dim * classes
    return 3 * forward - embed


BASE_BY_HAND = vit_training_flops(image=224, patch=16, dim=768, depth=12, classes=1000)


def test_vit_base_at_224_px_counts_as_by_hand():
    counted = flops.training_flops_per_sample(BASE)
    assert BASE_BY_HAND == pytest.approx(105.16e9, rel=1e-3)  # 3 x timm's 17.6 GMACs x 2, less one
    assert counted == pytest.approx(BASE_BY_HAND, rel=0.01)


def test_a_spec_with_overrides_counts_its_own_model():
    spec = {"arch": "vit_tiny_patch16_224", "patch_embed": "conv", "image_size": 32, "num_classes": 5,
            "patch_size": 8, "depth": 2, "embed_dim": 32, "num_heads": 2}
    by_hand = vit_training_flops(image=32, patch=8, dim=32, depth=2, classes=5)
    assert flops.training_flops_per_sample(spec) == pytest.approx(by_hand, rel=0.01)


def test_peaks_are_the_neuron_docs_figures_per_chip_core_and_instance():
    trn1 = peak_flops.peak("ml.trn1.32xlarge", "bf16")
    # The trn1 architecture page: trn1.32xlarge, 16 chips, 3,040 BF16 and 760 FP32 TFLOPS.
    assert (trn1.per_chip, trn1.per_core, trn1.per_instance) == (190e12, 95e12, 3040e12)
    assert peak_flops.peak("ml.trn1.32xlarge", "fp32").per_instance == 760e12
    trn2 = peak_flops.peak("ml.trn2.48xlarge", "bf16")
    assert trn2.per_chip == 667e12 and trn2.per_core == 667e12 / 8 and trn2.per_instance == 16 * 667e12
    assert "trainium2" in trn2.source and trn2.as_of
    assert peak_flops.peak("ml.trn1.2xlarge", "int8") is None
    assert peak_flops.peak("ml.p5.48xlarge", "bf16") is None
    assert peak_flops.peak("ml.trn1.2xlarge", None) is None


def test_every_accelerator_of_the_catalog_has_a_peak_with_its_source():
    for inst in catalog.instances().values():
        for precision in ("bf16", "fp16", "fp32"):
            top = peak_flops.peak(inst.type, precision)
            assert top is not None, (inst.type, precision)
            assert top.source.startswith("https://awsdocs-neuron.readthedocs-hosted.com/")
            assert top.per_core * (inst.neuron_cores // inst.chips) == top.per_chip


def _results(**values) -> results_schema.Results:
    doc = {"schema": results_schema.SCHEMA, "job_name": "j", "status": "completed", "backend": "sagemaker",
           "region": "us-east-1", "instance": {"type": "ml.trn1.32xlarge", "count": 2}, "precision": "bf16",
           "global_batch": 1024, "samples_per_s": 4000.0, "model": BASE,
           "flops_per_sample": flops.training_flops_per_sample(BASE)}
    doc.update(values)
    from pydantic import TypeAdapter

    return TypeAdapter(results_schema.Results).validate_python(doc)


def test_mfu_of_vit_base_at_224_px_matches_the_hand_calculation():
    price = catalog.Price(type="ml.trn1.32xlarge", region="us-east-1", usd_per_hour=20.0, source="test",
                          as_of="2026-01-01", kind="sagemaker-on-demand")
    row = build_row("j", _results(), "s3://b/j/results.json", None, price)
    # 4,000 samples/s x 105.16 GFLOPs over two trn1.32xlarge (32 chips x 190 TFLOPS): 6.9%.
    by_hand = 4000.0 * BASE_BY_HAND / (2 * 16 * 190e12)
    assert row.mfu == pytest.approx(by_hand, rel=0.05)
    assert row.mfu == pytest.approx(0.0692, abs=0.001)
    # TFLOPs a dollar bought: samples per dollar (4,000 x 3,600 / 40 USD) x TFLOP per sample.
    assert row.tflop_per_dollar == pytest.approx(4000.0 * 3600 / 40.0 * BASE_BY_HAND / 1e12, rel=0.01)
    assert "190 TFLOPS per chip" in row.peak_source and "trainium.html" in row.peak_source
    table = render_table(Collection(prefix="s3://b/j", rows=[row]))
    assert "MFU" in table and "6.9%" in table and "TFLOP/USD" in table
    assert "MFU peak: ml.trn1.32xlarge bf16: 190 TFLOPS per chip" in table


def test_mfu_is_blank_without_flops_a_known_instance_or_a_precision():
    for values in ({"flops_per_sample": None}, {"instance": {"type": "ml.unknown.xlarge", "count": 1}},
                   {"precision": None}, {"samples_per_s": None}):
        row = build_row("j", _results(**values), "u", None, None)
        assert row.mfu is None and row.peak_source is None, values
        assert row.tflop_per_dollar is None
    # A local job ran on this machine's CPUs, not on the instance it names: no MFU, no price.
    local = build_row("j", _results(backend="local"), "u", None, None)
    assert local.mfu is None and local.peak_source is None and local.tflop_per_dollar is None
    assert local.flops_per_sample == pytest.approx(BASE_BY_HAND, rel=0.01)
