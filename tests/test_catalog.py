"""The catalog: facts with provenance, the training-type enum from botocore, images, prices."""

from __future__ import annotations

import json

import botocore
import botocore.session
import pytest

from entrypoints.shared import contract
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


def _types_cache(orch_home):
    return orch_home / "cache" / f"sagemaker-training-instance-types-{botocore.__version__}.json"


@pytest.mark.parametrize("contents", ["[1, 2]", '{"a": 1}', "[]", '["ml.trn1.2xlarge", 3]', '"ml.trn1.2xlarge"',
                                      "null", "[\"\"]", "\x00\xff not text"])
def test_a_types_cache_of_the_wrong_shape_is_rebuilt_from_botocore(orch_home, contents):
    model = botocore.session.get_session().get_service_model("sagemaker")
    expected = frozenset(model.shape_for("TrainingInstanceType").enum)
    cached = _types_cache(orch_home)
    cached.parent.mkdir(parents=True)
    cached.write_text(contents)
    assert catalog.training_instance_types() == expected
    assert json.loads(cached.read_text()) == sorted(expected)  # rewritten, whole
    assert [p.name for p in cached.parent.iterdir()] == [cached.name]  # no temp file left behind


def test_doctor_hint_lists_trainium_types_after_a_damaged_cache(orch_home):
    from pathlib import Path

    from orchestrator import doctor, spec

    cached = _types_cache(orch_home)
    cached.parent.mkdir(parents=True)
    cached.write_text('{"a": 1}')  # read as the keys once: "Trainium types: ;"
    configs = Path(__file__).resolve().parents[1] / "configs"
    text = (configs / "vit-trn1-2xlarge.yaml").read_text().replace("ml.trn1.2xlarge", "ml.trn1.3xlarge")
    loaded = spec.loads(text, "vit.yaml", base_dir=configs)
    found = [f for f in doctor.findings(loaded) if f.path == "instance.type"]
    assert any("Trainium types: ml.trn1.2xlarge, ml.trn1.32xlarge" in f"{f.message} {f.fix}" for f in found), found


PRICES_ROW = {"type": "ml.trn1.32xlarge", "region": "us-east-1", "usd_per_hour": 30.0,
              "source": "AWS Price List API (AmazonSageMaker)", "as_of": "2026-11-29", "kind": "sagemaker"}


def _row(**changes):
    row = dict(PRICES_ROW, **changes)
    return {k: v for k, v in row.items() if v is not ...}


@pytest.mark.parametrize(("contents", "what"), [
    ('{"bad', ":1:2: not valid JSON"),
    ("", ":1:1: not valid JSON"),
    (b"\x80\x81 garbage", ": not valid JSON: not UTF-8 text"),
    ("[]", ": expected a JSON object with a 'prices' list, got a list"),
    ('{"prices": 5}', ": prices: expected a list of price rows, got the number 5"),
    ("{}", ": missing 'prices'"),
    ({"prices": [5]}, ": prices[0]: expected an object, got the number 5"),
    ({"prices": [PRICES_ROW, _row(region=...)]}, ": prices[1]: missing 'region'"),
    ({"prices": [_row(type=7)]}, ": prices[0].type: expected a non-empty string, got the number 7"),
    ({"prices": [_row(region="")]}, ": prices[0].region: expected a non-empty string, got the string ''"),
    ({"prices": [_row(source=None)]}, ": prices[0].source: expected a string, got null"),
    ({"prices": [_row(usd_per_hour="30")]}, ": prices[0].usd_per_hour: expected a positive number, got the string '30'"),
    ({"prices": [_row(usd_per_hour=True)]}, ": prices[0].usd_per_hour: expected a positive number, got true"),
    ({"prices": [_row(usd_per_hour=-1)]}, ": prices[0].usd_per_hour: expected a positive number, got the number -1"),
    ('{"prices": [{"type": "ml.trn1.32xlarge", "region": "us-east-1", "usd_per_hour": NaN, "source": "",'
     ' "as_of": "", "kind": ""}]}', ": prices[0].usd_per_hour: expected a positive number, got the number nan"),
])
def test_a_refreshed_prices_file_of_the_wrong_shape_is_an_input_error_naming_it(orch_home, contents, what):
    path = orch_home / "prices.json"
    if isinstance(contents, dict):
        contents = json.dumps(contents)
    data = contents if isinstance(contents, bytes) else contents.encode()
    path.write_bytes(data)
    with pytest.raises(InputError) as info:
        catalog.price("ml.trn1.32xlarge", "us-east-1")
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"{path}{what}"), info.value.message
    assert f"delete {path}" in info.value.hint and "orchestrator prices refresh" in info.value.hint
    assert path.read_bytes() == data  # the user's file, untouched


def test_extra_keys_in_a_refreshed_price_row_are_ignored(orch_home):
    (orch_home / "prices.json").write_text(json.dumps({"prices": [dict(PRICES_ROW, sku="AAAA")]}))
    assert catalog.price("ml.trn1.32xlarge", "us-east-1").usd_per_hour == 30.0
    assert catalog.price("ml.trn1.32xlarge", "eu-west-1").usd_per_hour == 30.0


def test_cli_validate_with_a_corrupt_prices_file_exits_2_naming_it(orch_home, monkeypatch, capsys):
    from pathlib import Path

    from tests.cli_harness import run_cli

    path = orch_home / "prices.json"
    path.write_text('{"prices": 5}')
    spec_path = Path(__file__).resolve().parents[1] / "configs" / "vit-trn1-2xlarge.yaml"
    code, out, err = run_cli(monkeypatch, capsys, "validate", str(spec_path))
    assert code == 2
    assert f"error: {path}: prices: expected a list of price rows" in err
    assert "Traceback" not in err
    assert path.read_text() == '{"prices": 5}'


@pytest.mark.timeout(60)
def test_a_prices_override_or_type_cache_that_is_a_fifo_is_never_opened(orch_home):
    import os

    os.mkfifo(orch_home / "prices.json")  # reading it would block for ever
    with pytest.raises(InputError, match="cannot read the prices file: is a FIFO \\(named pipe\\), not a regular file"):
        catalog.read_price_file(orch_home / "prices.json", hint="delete it")
    cache = orch_home / "cache" / f"sagemaker-training-instance-types-{botocore.__version__}.json"
    cache.parent.mkdir(exist_ok=True)
    cache.unlink(missing_ok=True)
    os.mkfifo(cache)
    catalog.training_instance_types.cache_clear()  # read the cache file again
    assert "ml.trn1.2xlarge" in catalog.training_instance_types()  # from botocore instead


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name, read", [("sagemaker-tag-shapes", lambda: catalog.sagemaker_tag_shapes()["TagKey"]),
                                        ("sagemaker-training-environment-limits",
                                         lambda: catalog.environment_limits().max_variables)])
def test_every_botocore_cache_that_is_a_fifo_is_never_opened(orch_home, name, read):
    import os

    cache = orch_home / "cache" / f"{name}-{botocore.__version__}.json"
    cache.parent.mkdir(exist_ok=True)
    os.mkfifo(cache)  # reading it would block for ever
    catalog.sagemaker_tag_shapes.cache_clear()
    catalog.environment_limits.cache_clear()
    assert read()  # from botocore instead


def test_botocore_service_model_is_loaded_once_however_many_caches_miss(orch_home, monkeypatch):
    # A first run (an empty ORCHESTRATOR_HOME) misses all three caches; the model costs a few
    # hundred milliseconds to load, so it is loaded once for all of them.
    calls = []
    real = botocore.session.Session.get_service_model
    monkeypatch.setattr(botocore.session.Session, "get_service_model",
                        lambda self, *args, **kwargs: calls.append(args) or real(self, *args, **kwargs))
    for cached in (catalog._sagemaker_model, catalog.training_instance_types, catalog.sagemaker_tag_shapes,
                   catalog.environment_limits):
        cached.cache_clear()
    assert "ml.trn1.2xlarge" in catalog.training_instance_types()
    assert catalog.sagemaker_tag_shapes()["TagKey"]["max"] == 128
    assert catalog.environment_limits().max_variables > 0
    assert calls == [("sagemaker",)]
    assert len(list((orch_home / "cache").glob("sagemaker-*.json"))) == 3


REQ_BASE = """\
name: req-test
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {type: ml.trn1.2xlarge}
image: {neuron_sdk: "2.30.0"}
compile_cache: {uri: s3://orchestrator-example-bucket/cc}
output: {uri: s3://orchestrator-example-bucket/jobs}
max_run_minutes: 60
tags: {team: vision}
"""


def _spec(**overrides):
    from orchestrator import spec

    loaded = spec.loads(REQ_BASE, "job.yaml")
    return spec.with_overrides(loaded, overrides) if overrides else loaded


def _environment(s) -> dict[str, str]:
    return catalog.resolve(s).environment


# --- the job's environment (catalog.resolve), as the request sends it -------------------


def test_trn2_sets_runtime_and_compiler_lnc_together():
    env = _environment(_spec(**{"instance.type": "ml.trn2.48xlarge"}))
    assert env["NEURON_LOGICAL_NC_CONFIG"] == "2"
    assert env["NEURON_CC_FLAGS"].split() == ["--model-type=transformer", f"--cache_dir={catalog.NEURON_CACHE_DIR}",
                                              "--lnc=2"]
    env = _environment(_spec(**{"instance.type": "ml.trn2.48xlarge", "instance.lnc": 1}))
    assert env["NEURON_LOGICAL_NC_CONFIG"] == "1" and "--lnc=1" in env["NEURON_CC_FLAGS"]


def test_trn1_gets_the_transformer_model_type_and_the_cache_dir():
    # --model-type=transformer as the Neuron samples and the SDK's reference request set it for
    # transformer models (the compiler's default is generic): every model here is a ViT.
    env = _environment(_spec())
    assert env == {"NEURON_CC_FLAGS": f"--model-type=transformer --cache_dir={catalog.NEURON_CACHE_DIR}"}
    env = _environment(_spec(**{"compile_cache.mode": "off", "compile_cache.uri": None}))
    assert env == {"NEURON_CC_FLAGS": "--model-type=transformer"}
    # Not for the compiler-less paths: native runtime, local jobs.
    assert "NEURON_CC_FLAGS" not in _environment(_spec(**{"training.runtime": "native"}))


@pytest.mark.parametrize("flags", ["--model-type=generic", "-O1 --model_type generic"])
def test_a_model_type_in_the_spec_wins(flags):
    s = _spec(environment={"NEURON_CC_FLAGS": flags})
    sent = _environment(s)["NEURON_CC_FLAGS"]
    assert sent.startswith(flags) and "transformer" not in sent


def test_user_flags_are_kept_first():
    s = _spec(**{"instance.type": "ml.trn2.48xlarge"}, environment={"NEURON_CC_FLAGS": "-O1"})
    assert _environment(s)["NEURON_CC_FLAGS"].split()[:2] == ["-O1", "--model-type=transformer"]


def test_efa_variables_for_multi_node_jobs_on_efa_instances_only():
    two_trn1n = _spec(**{"instance.type": "ml.trn1n.32xlarge", "instance.count": 2})
    env = _environment(two_trn1n)
    for key, value in contract.EFA_ENV.items():
        assert env[key] == value
    for itype in ("ml.trn2.48xlarge", "ml.trn1.32xlarge"):
        assert set(contract.EFA_ENV) <= set(_environment(_spec(**{"instance.type": itype,
                                                                         "instance.count": 2})))
    for quiet in ({"instance.type": "ml.trn1n.32xlarge"}, {"instance.type": "ml.trn1.32xlarge"}):
        assert not set(contract.EFA_ENV) & set(_environment(_spec(**quiet)))
