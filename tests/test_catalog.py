"""The catalog: facts with provenance, the training-type enum from botocore, images, prices."""

from __future__ import annotations

import json

import botocore
import botocore.session
import pytest

from orchestrator import catalog
from orchestrator.errors import InputError


@pytest.fixture(autouse=True)
def _fresh_cache(orch_home):
    catalog.training_instance_types.cache_clear()
    yield
    catalog.training_instance_types.cache_clear()


def test_training_types_come_from_botocore_and_are_cached_per_version(orch_home):
    model = botocore.session.get_session().get_service_model("sagemaker")
    expected = frozenset(model.shape_for("TrainingInstanceType").enum)
    types = catalog.training_instance_types()
    assert types == expected
    assert {"ml.trn1.2xlarge", "ml.trn1.32xlarge", "ml.trn1n.32xlarge", "ml.trn2.48xlarge"} <= types
    assert not any(t.startswith("ml.inf2.") for t in types)  # inf2 is hosting / batch transform only
    cached = orch_home / "cache" / f"sagemaker-training-instance-types-{botocore.__version__}.json"
    assert set(json.loads(cached.read_text())) == set(types)


def test_cached_enum_is_what_later_runs_read(orch_home):
    catalog.training_instance_types()
    cached = next((orch_home / "cache").glob("sagemaker-training-instance-types-*.json"))
    cached.write_text(json.dumps(["ml.trn9.huge"]))
    catalog.training_instance_types.cache_clear()
    assert catalog.training_instance_types() == frozenset({"ml.trn9.huge"})
    cached.write_text("not json")  # a damaged cache is read again from botocore
    catalog.training_instance_types.cache_clear()
    assert "ml.trn1.2xlarge" in catalog.training_instance_types()


def test_instance_facts_carry_provenance_and_logical_cores():
    trn2 = catalog.instance("ml.trn2.48xlarge")
    assert trn2.neuron_cores == 128 and trn2.logical_cores() == 64 and trn2.logical_cores(1) == 128
    assert trn2.lnc_allowed == (1, 2)
    trn1 = catalog.instance("ml.trn1.2xlarge")
    assert trn1.logical_cores() == 2 and not trn1.multi_node and trn1.lnc_allowed == (1,)
    assert trn1.source and trn1.as_of
    assert catalog.instance("ml.p5.48xlarge") is None


def test_images_resolve_by_sdk_and_region():
    image = catalog.image("2.30.0")
    assert image.uri("eu-west-1") == (
        "763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training-neuronx:"
        "2.9.0-neuronx-py312-sdk2.30.0-ubuntu24.04")
    assert catalog.image(None).neuron_sdk == catalog.default_sdk() == "2.30.0"
    with pytest.raises(InputError) as info:
        catalog.image("9.9.9")
    assert "2.25.0" in info.value.hint and "image.uri" in info.value.hint


def test_prices_name_their_source_and_fall_back_to_us_east_1(orch_home):
    price = catalog.price("ml.trn1.32xlarge", "us-east-1")
    assert price.usd_per_hour == 21.50 and "checked" in price.source and price.as_of
    other = catalog.price("ml.trn1.32xlarge", "eu-west-1")
    assert other.usd_per_hour == 21.50 and "us-east-1 price used for eu-west-1" in other.source
    assert catalog.price("ml.trn2.48xlarge", "us-east-1") is None
    (orch_home / "prices.json").write_text(json.dumps({"prices": [
        {"type": "ml.trn1.32xlarge", "region": "us-east-1", "usd_per_hour": 30.0,
         "source": "AWS Price List API (AmazonSageMaker)", "as_of": "2026-11-29", "kind": "sagemaker"}]}))
    refreshed = catalog.price("ml.trn1.32xlarge", "us-east-1")
    assert refreshed.usd_per_hour == 30.0 and refreshed.kind == "sagemaker"
