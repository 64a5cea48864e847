"""A spec's identity (`spec.spec_hash`) across versions: it names the job, the ledger's row and
a sweep's trials, so an upgrade that changed it would make `submit` create a second job of a
spec already submitted, and `sweep resume` submit every trial again under new names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import spec
from orchestrator.spec.models import LATER_FIELDS

ROOT = Path(__file__).resolve().parents[1]
# The example configs' hashes as the version before LATER_FIELDS computed them (commit
# 1c954f5); none of them uses a later field, so none may change.
FROZEN = json.loads((ROOT / "tests" / "data" / "spec_hashes.json").read_text())


@pytest.mark.parametrize("config", sorted(FROZEN))
def test_a_spec_keeps_its_hash_when_fields_are_added(config):
    assert spec.spec_hash(spec.load(ROOT / config)) == FROZEN[config], (
        f"{config}'s hash changed: a field added to the job models changes every job's name; "
        "add it to orchestrator.spec.models.LATER_FIELDS")


@pytest.mark.parametrize("config, path, value", [
    ("vit-trn1-2xlarge.yaml", "instance.keep_alive_minutes", 5),
    ("vit-trn1-2xlarge.yaml", "training.precompile", True),
    ("vit-inf2-xlarge.yaml", "batch.stack", "other"),
])
def test_a_later_field_is_part_of_the_identity_once_it_leaves_its_default(config, path, value):
    base = spec.load(ROOT / "configs" / config)
    assert spec.spec_hash(spec.with_overrides(base, {path: value})) != spec.spec_hash(base)
    # Written out at its default, it is the same spec as without it.
    assert spec.spec_hash(spec.with_overrides(base, {path: _value_of(base, path)})) == spec.spec_hash(base)


def _value_of(model, path: str):
    for part in path.split("."):
        model = getattr(model, part)
    return model


def test_every_later_field_is_a_field_of_the_job_models():
    base = spec.load(ROOT / "configs" / "vit-trn1-2xlarge.yaml")
    for path in LATER_FIELDS:
        model = base
        for part in path.split("."):
            assert part in type(model).model_fields, path
            model = getattr(model, part)


def test_a_spec_hashed_again_gives_the_hash_computed_anew():
    """`spec_hash` remembers each frozen spec object's hash (a sweep plan asks twice a trial):
    the memo never answers for another object, not even one at the same address later."""
    import gc

    from orchestrator.spec import identity as models

    root = Path(__file__).resolve().parents[1]
    loaded = spec.load(root / "configs" / "vit-trn1-2xlarge.yaml")
    first = spec.spec_hash(loaded)
    assert spec.spec_hash(loaded) == first and id(loaded) in models._HASHED
    models._HASHED.clear()
    assert spec.spec_hash(loaded) == first  # the same, computed anew
    other = spec.with_overrides(loaded, {"training.steps": 77})
    assert spec.spec_hash(other) != first
    key = id(other)
    del other
    gc.collect()
    assert key not in models._HASHED  # forgotten with its spec
