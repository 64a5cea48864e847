"""Doctor rules: each one fires on the spec it is about and stays quiet on a good one."""

from __future__ import annotations

import json
import os
import sys

import botocore.session
import pytest
from cli_harness import run_cli as _cli

from entrypoints.shared.contract import EFA_ENV
from orchestrator import catalog, doctor, spec
from orchestrator.backends.local import rules as local_rules
from orchestrator.backends.sagemaker import rules as sagemaker_rules
from orchestrator.errors import SpecError

GOOD = """\
name: doc-test
backend: sagemaker
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {type: ml.trn1.2xlarge, count: 1}
image: {neuron_sdk: "2.30.0"}
model: {arch: vit_base_patch16_224, image_size: 224}
training: {runtime: xla, precision: bf16, steps: 500}
data: {source: synthetic, num_workers: 4}
compile_cache: {uri: s3://orchestrator-example-bucket/cc}
output: {uri: s3://orchestrator-example-bucket/jobs}
max_run_minutes: 120
budget: {max_cost_usd: 25}
"""
LOCAL = "name: doc-local\nbackend: local\n"


@pytest.fixture(autouse=True)
def _isolated_prices(orch_home):
    return orch_home


def _spec(base: str = GOOD, **overrides):
    loaded = spec.loads(base, "job.yaml")
    return spec.with_overrides(loaded, overrides) if overrides else loaded


def _rules(s) -> dict[str, doctor.Finding]:
    return {f.rule: f for f in doctor.findings(s)}


def _fires(s, rule: str, severity: str = "error") -> doctor.Finding:
    found = [f for f in doctor.findings(s) if f.rule == rule]
    assert found, f"{rule} did not fire; got {[f.rule for f in doctor.findings(s)]}"
    assert found[0].severity == severity
    assert found[0].message and found[0].fix and found[0].path
    return found[0]


def test_good_spec_has_no_findings():
    assert doctor.findings(_spec()) == []


# --- N001 / N002: what SageMaker training accepts ---------------------------------------


def test_inf2_gets_its_own_message_naming_trn1():
    f = _fires(_spec(**{"instance.type": "ml.inf2.xlarge"}), "N001-instance-not-trainable")
    assert "not a SageMaker training instance type" in f.message
    assert "hosting" in f.message and "batch transform" in f.message
    assert "ml.trn1.2xlarge" in f.message and "NeuronCore-v2" in f.message
    assert f.fix == "set instance.type: ml.trn1.2xlarge, or backend: batch with instance.type: inf2.xlarge"
    assert f.path == "instance.type"


def test_unknown_type_suggests_the_nearest_and_lists_trainium():
    f = _fires(_spec(**{"instance.type": "ml.trn1.4xlarge"}), "N001-instance-not-trainable")
    assert "did you mean ml.trn1.2xlarge?" in f.fix
    for t in ("ml.trn1.32xlarge", "ml.trn1n.32xlarge", "ml.trn2.48xlarge"):
        assert t in f.fix


@pytest.mark.parametrize("budget", [25, None])
def test_a_type_that_does_not_train_gets_no_price_finding(budget):
    # Refreshing prices cannot price a type SageMaker does not train on: N001 alone says what to do.
    for itype in ("ml.trn1.4xlarge", "ml.inf2.xlarge"):
        s = _spec(**{"instance.type": itype, "budget.max_cost_usd": budget})
        rules = _rules(s)
        assert "N001-instance-not-trainable" in rules and "N017-price-unknown" not in rules
        with pytest.raises(SpecError) as info:
            doctor.raise_for(s, doctor.findings(s))
        assert "prices refresh" not in info.value.hint


def test_trainable_types_follow_botocore_not_a_copy(monkeypatch):
    assert "N001-instance-not-trainable" not in _rules(_spec())
    monkeypatch.setattr(catalog, "training_instance_types", lambda: frozenset({"ml.trn1.32xlarge"}))
    _fires(_spec(), "N001-instance-not-trainable")


def test_type_in_botocore_but_not_in_catalog_is_a_warning():
    s = _spec(**{"instance.type": "ml.p4d.24xlarge", "budget.max_cost_usd": None})
    f = _fires(s, "N002-instance-facts-unknown", "warning")
    assert "N001-instance-not-trainable" not in _rules(s)
    assert f.path == "instance.type"
    assert "N002-instance-facts-unknown" not in _rules(_spec())


# --- N003 / N004 / N005 / N006: hosts, cores, LNC -------------------------------------


def test_multi_node_on_trn1_2xlarge():
    f = _fires(_spec(**{"instance.count": 2, "budget.max_cost_usd": None}), "N003-multi-node-unsupported")
    assert f.path == "instance.count" and "EFA" in f.message
    assert "N003-multi-node-unsupported" not in _rules(
        _spec(**{"instance.type": "ml.trn1.32xlarge", "instance.count": 2, "budget.max_cost_usd": None}))


def test_workers_per_node_must_match_logical_cores():
    f = _fires(_spec(**{"training.workers_per_node": 4}), "N004-workers-per-node")
    assert f.path == "training.workers_per_node" and "set it to 2" in f.fix
    assert "N004-workers-per-node" not in _rules(_spec(**{"training.workers_per_node": 2}))


def test_workers_per_node_follows_trn2_lnc():
    trn2 = {"instance.type": "ml.trn2.48xlarge", "budget.max_cost_usd": None, "data.num_workers": 1}
    # LNC=2 (default): 64 logical cores; LNC=1: 128.
    _fires(_spec(**trn2, **{"training.workers_per_node": 128}), "N004-workers-per-node")
    assert "N004-workers-per-node" not in _rules(_spec(**trn2, **{"training.workers_per_node": 64}))
    assert "N004-workers-per-node" not in _rules(
        _spec(**trn2, **{"instance.lnc": 1, "training.workers_per_node": 128}))


def test_workers_per_node_is_free_on_the_local_backend():
    assert "N004-workers-per-node" not in _rules(_spec(LOCAL, **{"training.workers_per_node": 3,
                                                                 "training.runtime": "native"}))


def test_lnc_2_on_trn1_is_refused():
    f = _fires(_spec(**{"instance.lnc": 2}), "N005-lnc-unsupported")
    assert "NCC_EARG001" in f.message and f.path == "instance.lnc"
    assert "N005-lnc-unsupported" not in _rules(_spec(**{"instance.lnc": 1}))
    assert "N005-lnc-unsupported" not in _rules(
        _spec(**{"instance.type": "ml.trn2.48xlarge", "instance.lnc": 1, "budget.max_cost_usd": None}))


def test_lnc_env_must_match_instance_lnc():
    trn2 = {"instance.type": "ml.trn2.48xlarge", "budget.max_cost_usd": None, "data.num_workers": 1}
    f = _fires(_spec(**trn2, environment={"NEURON_LOGICAL_NC_CONFIG": "1"}), "N006-lnc-env-mismatch")
    assert f.path == "environment.NEURON_LOGICAL_NC_CONFIG"
    assert "N006-lnc-env-mismatch" not in _rules(_spec(**trn2, environment={"NEURON_LOGICAL_NC_CONFIG": "2"}))
    f = _fires(_spec(**trn2, environment={"NEURON_CC_FLAGS": "--model-type=transformer --lnc=1"}),
               "N006-lnc-env-mismatch")
    assert f.path == "environment.NEURON_CC_FLAGS"
    assert "N006-lnc-env-mismatch" not in _rules(_spec(**trn2, environment={"NEURON_CC_FLAGS": "-lnc 2"}))


# --- N007 / N008: precision ---------------------------------------------------------


def test_fp16_on_xla_is_an_error_everywhere():
    f = _fires(_spec(**{"training.precision": "fp16"}), "N007-fp16-on-neuron")
    assert "bf16" in f.fix and f.path == "training.precision"
    _fires(_spec(LOCAL, **{"training.precision": "fp16"}), "N007-fp16-on-neuron")
    assert "N007-fp16-on-neuron" not in _rules(
        _spec(LOCAL, **{"training.precision": "fp16", "training.runtime": "native"}))


@pytest.mark.parametrize("name", ["XLA_USE_BF16", "XLA_DOWNCAST_BF16"])
def test_deprecated_bf16_variables(name):
    # A warning: the Neuron 2.26/2.27 release notes keep them working through torch-neuronx 2.9.
    f = _fires(_spec(environment={name: "1"}), "N008-deprecated-bf16-env", "warning")
    assert f.fix == "use precision: bf16 (torch.autocast)"
    assert f.path == f"environment.{name}"
    assert doctor.errors(doctor.findings(_spec(environment={name: "1"}))) == []
    _fires(_spec(LOCAL, environment={name: "1"}), "N008-deprecated-bf16-env", "warning")
    assert "N008-deprecated-bf16-env" not in _rules(_spec(environment={"XLA_FLAGS": "--xla_dump_to=/tmp"}))


# --- N009 / N010 / N011 / N024: images and regions -----------------------------------


def test_xla_after_the_last_xla_sdk():
    last = catalog.last_xla_training_sdk()
    f = _fires(_spec(**{"image.neuron_sdk": "2.31.0"}), "N009-xla-after-last-sdk")
    assert last in f.message and f.path == "image.neuron_sdk"
    assert "N009-xla-after-last-sdk" not in _rules(_spec(**{"image.neuron_sdk": last}))
    assert "N009-xla-after-last-sdk" not in _rules(
        _spec(**{"image.neuron_sdk": "2.31.0", "training.runtime": "native"}))


def test_unknown_image_version():
    f = _fires(_spec(**{"image.neuron_sdk": "2.24.0"}), "N010-image-unknown")
    assert "2.30.0" in f.fix and "image.uri" in f.fix
    pinned = _spec(**{"image.neuron_sdk": None,
                      "image.uri": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training-neuronx:custom"})
    assert "N010-image-unknown" not in _rules(pinned)
    assert "N024-image-uri-region" not in _rules(pinned)


def test_region_without_trainium():
    f = _fires(_spec(region="ap-east-1"), "N011-region-unsupported")
    assert f.path == "region" and "us-east-1" in f.fix
    assert "N011-region-unsupported" not in _rules(_spec(region="us-west-2"))


def test_pinned_image_in_another_region_warns():
    s = _spec(**{"image.neuron_sdk": None,
                 "image.uri": "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training-neuronx:custom"})
    f = _fires(s, "N024-image-uri-region", "warning")
    assert "us-west-2" in f.message and f.path == "image.uri"


# --- N012 / N013: spot -------------------------------------------------------------


def test_spot_needs_a_max_wait_covering_the_run():
    f = _fires(_spec(**{"instance.spot": True}), "N012-spot-max-wait")
    assert f.path == "instance.max_wait_minutes"
    f = _fires(_spec(**{"instance.spot": True, "instance.max_wait_minutes": 60}), "N012-spot-max-wait")
    assert "120" in f.fix
    assert "N012-spot-max-wait" not in _rules(_spec(**{"instance.spot": True, "instance.max_wait_minutes": 120}))


def test_max_wait_without_spot_is_ignored_with_a_warning():
    _fires(_spec(**{"instance.max_wait_minutes": 200}), "N013-max-wait-without-spot", "warning")


# --- N014: model --------------------------------------------------------------------


def test_image_size_must_divide_by_patch_size():
    f = _fires(_spec(**{"model.image_size": 100}), "N014-patch-divisibility")
    assert "96" in f.fix and "112" in f.fix and f.path == "model.image_size"
    _fires(_spec(LOCAL, **{"model.image_size": 100}), "N014-patch-divisibility")
    assert "N014-patch-divisibility" not in _rules(_spec(**{"model.image_size": 100, "model.patch_size": 10}))
    assert "N014-patch-divisibility" not in _rules(_spec(**{"model.image_size": 64}))


# --- N015: data workers ------------------------------------------------------------


def test_data_workers_exceeding_vcpus():
    # trn1.2xlarge: 8 vCPUs, 2 workers per host.
    f = _fires(_spec(**{"data.num_workers": 8}), "N015-data-workers-vcpus", "warning")
    assert f.fix == "set data.num_workers to at most 4" and f.path == "data.num_workers"
    assert "N015-data-workers-vcpus" not in _rules(_spec(**{"data.num_workers": 4}))


# --- N016 / N017: budget -----------------------------------------------------------


def test_budget_exceeded():
    f = _fires(_spec(**{"budget.max_cost_usd": 1.0}), "N016-budget-exceeded")
    # 120 min x 1.34375 USD/h x 1.5 (the markup of an unverified EC2 price) = 4.03 USD; 1 USD buys 29 minutes.
    assert "4.03" in f.message and "at most 29" in f.fix and "4.03" in f.fix
    assert f.path == "budget.max_cost_usd"
    assert "N016-budget-exceeded" not in _rules(_spec(**{"budget.max_cost_usd": 4.1}))
    assert "N016-budget-exceeded" not in _rules(_spec(LOCAL, **{"budget.max_cost_usd": 0.01}))


def test_an_unverified_price_never_lets_a_budget_pass_on_ec2s_price(orch_home):
    """2 h of trn1.2xlarge at EC2's 1.34375 USD/h is 2.69 USD, under a 3 USD budget; SageMaker
    charges more, so the check uses the stated markup (4.03 USD) and refuses, saying why."""
    f = _fires(_spec(**{"budget.max_cost_usd": 3.0}), "N016-budget-exceeded")
    assert "x 1.5, an assumed SageMaker markup" in f.message and "unverified price" in f.message
    assert "prices refresh" in f.message
    # SageMaker's own price, once `prices refresh` fetched it, is used as it is.
    rows = [{"type": "ml.trn1.2xlarge", "region": "us-east-1", "usd_per_hour": 1.4, "source": "AWS Price List API",
             "as_of": "2026-12-01", "kind": "sagemaker-on-demand"}]
    (orch_home / "prices.json").write_text(json.dumps({"prices": rows}))
    assert "N016-budget-exceeded" not in _rules(_spec(**{"budget.max_cost_usd": 3.0}))
    f = _fires(_spec(**{"budget.max_cost_usd": 2.0}), "N016-budget-exceeded")
    assert "2.80" in f.message and "unverified" not in f.message


def test_unknown_price_refuses_a_budget_and_warns_without_one(orch_home):
    trn2 = {"instance.type": "ml.trn2.48xlarge", "data.num_workers": 1}
    f = _fires(_spec(**trn2), "N017-price-unknown", "error")
    assert "`python -m orchestrator prices refresh`" in f.fix
    f = _fires(_spec(**trn2, **{"budget.max_cost_usd": None}), "N017-price-unknown", "warning")
    assert f.fix == "run `python -m orchestrator prices refresh`"
    rows = [{"type": "ml.trn2.48xlarge", "region": "us-east-1", "usd_per_hour": 10.0, "source": "test",
             "as_of": "2026-09-01", "kind": "sagemaker-training"}]
    (orch_home / "prices.json").write_text(json.dumps({"prices": rows}))
    assert doctor.findings(_spec(**trn2)) == []


# --- N018 / N019: EFA --------------------------------------------------------------


def test_efa_variables_announced_for_multi_node_jobs_on_efa_instances():
    f = _fires(_spec(**{"instance.type": "ml.trn1n.32xlarge", "instance.count": 2, "budget.max_cost_usd": None}),
               "N018-efa-env-added", "info")
    for key in EFA_ENV:
        assert key in f.message
    _fires(_spec(**{"instance.type": "ml.trn2.48xlarge", "instance.count": 2, "budget.max_cost_usd": None,
                    "data.num_workers": 1}), "N018-efa-env-added", "info")
    # trn1.32xlarge too: the toolkit's own EFA set-up belongs to its torchrun distribution,
    # which our launch.py does not use.
    _fires(_spec(**{"instance.type": "ml.trn1.32xlarge", "instance.count": 2, "budget.max_cost_usd": None}),
           "N018-efa-env-added", "info")
    for quiet in ({"instance.type": "ml.trn1n.32xlarge"}, {"instance.type": "ml.trn1.32xlarge"}):
        assert "N018-efa-env-added" not in _rules(_spec(**quiet, **{"budget.max_cost_usd": None}))


def test_user_efa_value_that_differs_warns():
    s = _spec(**{"instance.type": "ml.trn1n.32xlarge", "instance.count": 2, "budget.max_cost_usd": None},
              environment={"FI_PROVIDER": "tcp"})
    f = _fires(s, "N019-efa-env-overridden", "warning")
    assert f.path == "environment.FI_PROVIDER"


# --- N020 .. N023 --------------------------------------------------------------------


def test_native_runtime_on_trainium_warns():
    _fires(_spec(**{"training.runtime": "native"}), "N020-native-on-neuron", "warning")
    assert "N020-native-on-neuron" not in _rules(_spec(LOCAL, **{"training.runtime": "native"}))


def test_local_xla_with_several_processes_warns():
    f = _fires(_spec(LOCAL, **{"training.workers_per_node": 2}), "N021-local-xla-multiprocess", "warning")
    assert "single-process" in f.message
    assert "N021-local-xla-multiprocess" not in _rules(
        _spec(LOCAL, **{"training.workers_per_node": 2, "training.runtime": "native"}))
    assert "N021-local-xla-multiprocess" not in _rules(_spec(LOCAL))


def test_checkpoint_interval_longer_than_the_run():
    _fires(_spec(**{"training.checkpoint_every": 600}), "N022-checkpoint-never", "warning")
    assert "N022-checkpoint-never" not in _rules(_spec(**{"training.checkpoint_every": 100}))


def test_tags_sagemaker_refuses_are_caught_before_anything_is_uploaded():
    """`a,b#c` passed validate, doctor and plan, and CreateTrainingJob refused it after the
    source upload: N029 checks keys and values against botocore's TagKey/TagValue patterns."""
    f = _fires(_spec(tags={"team": "a,b#c"}), "N029-tag-characters")
    assert "',' and '#'" in f.fix or ("','" in f.message and "'#'" in f.message)
    assert f.path == "tags.team" and "value" in f.message
    f = _fires(_spec(tags={"cost center": "x", "owner#": "me"}), "N029-tag-characters")
    assert f.path == "tags.owner#" and "key" in f.message
    # Letters of any script, digits, white space and _ . : / = + - @ are fine.
    assert "N029-tag-characters" not in _rules(_spec(tags={"équipe": "vision 2", "a_b.c:d/e=f+g-h@i": "ok"}))
    # A local job never reaches SageMaker.
    assert "N029-tag-characters" not in _rules(_spec(LOCAL, tags={"team": "a,b#c"}))


def test_the_tag_pattern_comes_from_botocore_and_is_understood(orch_home):
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    shapes = catalog.sagemaker_tag_shapes()
    assert shapes["TagKey"]["pattern"] == model.shape_for("TagKey").metadata["pattern"]
    allowed = sagemaker_rules.pattern_characters(shapes["TagValue"]["pattern"])
    assert [allowed(c) for c in "aé9 _.:/=+-@"] == [True] * 12
    assert [allowed(c) for c in ",#$%&*!?\""] == [False] * 9
    with pytest.raises(ValueError):
        sagemaker_rules.pattern_characters("^[a-z]+(-[a-z]+)*$")


def test_sagemaker_environment_limits():
    f = _fires(_spec(environment={"BIG": "x" * 600}), "N023-environment-limits")
    assert f.path == "environment.BIG"
    assert "N023-environment-limits" not in _rules(_spec(LOCAL, environment={"BIG": "x" * 600}))


def test_environment_limits_are_botocores():
    shape = botocore.session.get_session().get_service_model("sagemaker").shape_for("TrainingEnvironmentMap")
    limits = catalog.environment_limits()
    assert (limits.max_variables, limits.max_name, limits.max_value, limits.name_pattern) == (
        shape.metadata["max"], shape.key.metadata["max"], shape.value.metadata["max"], shape.key.metadata["pattern"])


def test_environment_limits_count_the_variables_as_sent():
    # The request adds NEURON_CC_FLAGS on trn1 (xla): 99 of the user's fit, 100 do not.
    limit = catalog.environment_limits().max_variables
    fits = {f"VAR_{i}": "1" for i in range(limit - 1)}
    assert len(catalog.resolve(_spec(environment=fits)).environment) == limit
    assert "N023-environment-limits" not in _rules(_spec(environment=fits))
    over = {**fits, "ONE_MORE": "1"}
    f = _fires(_spec(environment=over), "N023-environment-limits")
    assert f.path == "environment" and "NEURON_CC_FLAGS" in f.message and f"{limit + 1} variables" in f.message
    # Multi-node trn1n: the EFA variables count too.
    two = {"instance.type": "ml.trn1n.32xlarge", "instance.count": 2}
    assert "N023-environment-limits" in _rules(_spec(environment=fits, **two))


def test_environment_limits_check_values_after_the_flags_are_appended():
    # 500 characters of the user's own flags fit; with --model-type and --cache_dir appended
    # the value SageMaker receives does not.
    flags = "-O1 " + "x" * 496
    f = _fires(_spec(environment={"NEURON_CC_FLAGS": flags}), "N023-environment-limits")
    assert f.path == "environment.NEURON_CC_FLAGS" and "once the orchestrator's additions are in" in f.message
    assert "N023-environment-limits" not in _rules(_spec(environment={"NEURON_CC_FLAGS": "-O1 " + "x" * 400}))


def test_environment_names_follow_sagemakers_pattern():
    # The spec accepts any identifier Python calls alphanumeric; SageMaker only ASCII ones.
    f = _fires(_spec(environment={"CAFÉ_MODE": "1"}), "N023-environment-limits")
    assert f.path == "environment.CAFÉ_MODE" and "[a-zA-Z_][a-zA-Z0-9_]*" in f.message


def test_volume_size_set_on_an_instance_storage_type_is_noted():
    f = _fires(_spec(**{"instance.volume_gb": 500}), "N030-volume-ignored", "info")
    assert f.path == "instance.volume_gb" and "NVMe" in f.message
    for itype in ("ml.trn1.32xlarge", "ml.trn1n.32xlarge", "ml.trn2.48xlarge"):
        assert "N030-volume-ignored" in _rules(_spec(**{"instance.type": itype, "instance.volume_gb": 500}))
    assert "N030-volume-ignored" not in _rules(_spec())  # the default travels (the field is required)
    assert "N030-volume-ignored" not in _rules(_spec(LOCAL, **{"instance.volume_gb": 500}))
    assert all(not catalog.instance(t).instance_storage for t in catalog.instances() if ".inf2." in t)


# --- backends, ordering, raising -------------------------------------------------------


def test_local_backend_skips_aws_only_rules():
    s = _spec(LOCAL, **{"instance.type": "ml.inf2.xlarge", "instance.spot": True, "instance.max_wait_minutes": 180,
                        "region": "ap-east-1", "image.neuron_sdk": "2.24.0", "budget.max_cost_usd": 0.01})
    assert doctor.findings(s) == []


def test_spot_rules_apply_to_local_specs_too():
    # The request of a local job carries the spot settings as well, and cannot be built
    # without a max wait: the doctor says so, located, before plan or submit gets there.
    f = _fires(_spec(LOCAL, **{"instance.spot": True}), "N012-spot-max-wait")
    assert f.path == "instance.max_wait_minutes" and "at least max_run_minutes" in f.fix


def test_errors_come_first():
    s = _spec(**{"training.checkpoint_every": 600, "model.image_size": 100, "data.num_workers": 8})
    severities = [f.severity for f in doctor.findings(s)]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)
    assert severities[0] == "error" and "warning" in severities
    assert [f.rule for f in doctor.errors(doctor.findings(s))] == ["N014-patch-divisibility"]


def test_raise_for_locates_each_error_in_the_file():
    text = GOOD.replace("image_size: 224", "image_size: 100").replace("precision: bf16", "precision: fp16")
    s = _spec(text)
    findings = doctor.findings(s)
    with pytest.raises(SpecError) as info:
        doctor.raise_for(s, findings)
    err = info.value
    assert err.exit_code == 2
    by_path = {p.path: p for p in err.problems}
    lines = text.splitlines()
    image = by_path["model.image_size"]
    assert image.file == "job.yaml" and "image_size: 100" in lines[image.line - 1]
    assert lines[image.line - 1][image.column - 1:].startswith("100")
    precision = by_path["training.precision"]
    assert "precision: fp16" in lines[precision.line - 1]
    assert "N014-patch-divisibility" in image.message
    for f in doctor.errors(findings):
        assert f.fix in err.hint


def test_raise_for_ignores_warnings_and_infos():
    s = _spec(**{"training.checkpoint_every": 600})
    doctor.raise_for(s, doctor.findings(s))


# --- `orchestrator doctor` ---------------------------------------------------------


def test_cli_doctor_prints_located_findings_and_exits_2(tmp_path, monkeypatch, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("type: ml.trn1.2xlarge", "type: ml.inf2.xlarge")
                    .replace("training: {", "training: {checkpoint_every: 900, "))
    code, out, _ = _cli(monkeypatch, capsys, "doctor", str(path))
    assert code == 2
    line = next(row for row in out.splitlines() if "N001-instance-not-trainable" in row)
    assert line.startswith("error: ") and f"{path}:5:" in line and "instance.type" in line
    assert "fix: set instance.type: ml.trn1.2xlarge" in out
    assert "warning: N022-checkpoint-never" in out
    assert out.index("error:") < out.index("warning:")


def test_cli_doctor_exits_0_with_only_warnings(tmp_path, monkeypatch, capsys):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD.replace("num_workers: 4", "num_workers: 8"))
    code, out, _ = _cli(monkeypatch, capsys, "doctor", str(path))
    assert code == 0
    assert "warning: N015-data-workers-vcpus" in out and "0 error(s)" in out


# --- N025: the Neuron image off Trainium ---------------------------------------------


def test_neuron_image_on_an_instance_without_neuron_cores_is_an_error():
    for itype in ("ml.p4d.24xlarge", "ml.m5.large"):
        f = _fires(_spec(**{"instance.type": itype, "budget.max_cost_usd": None}), "N025-neuron-image-off-trainium")
        assert itype in f.message and "pytorch-training-neuronx" in f.message and f.path == "instance.type"
    pinned = _spec(**{"instance.type": "ml.p4d.24xlarge", "budget.max_cost_usd": None,
                      "image.neuron_sdk": None,
                      "image.uri": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training-neuronx:x"})
    _fires(pinned, "N025-neuron-image-off-trainium")
    # A GPU image on a GPU instance is the user's choice; Trainium with the Neuron image is the norm;
    # a type SageMaker does not train on at all is N001's.
    gpu = _spec(**{"instance.type": "ml.p4d.24xlarge", "budget.max_cost_usd": None, "training.runtime": "native", "image.neuron_sdk": None,
                   "image.uri": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-gpu"})
    assert "N025-neuron-image-off-trainium" not in _rules(gpu)
    assert "N025-neuron-image-off-trainium" not in _rules(_spec())
    inf2 = _rules(_spec(**{"instance.type": "ml.inf2.xlarge", "budget.max_cost_usd": None}))
    assert "N001-instance-not-trainable" in inf2 and "N025-neuron-image-off-trainium" not in inf2


# --- N026: the model architecture ----------------------------------------------------


def test_a_misspelt_architecture_warns_with_the_right_name():
    # A warning: a newer timm in the job may have a name this list lacks.
    f = _fires(_spec(**{"model.arch": "vit_base_patch16_244"}), "N026-model-arch-unknown", "warning")
    assert "'vit_base_patch16_224'" in f.fix and f.path == "model.arch"


def test_an_architecture_far_from_any_known_one_is_a_warning():
    f = _fires(_spec(**{"model.arch": "vit_huge_nonexistent"}), "N026-model-arch-unknown", "warning")
    assert "timm" in f.message
    assert "N026-model-arch-unknown" not in _rules(_spec(**{"model.arch": "vit_large_patch16_224"}))


def test_the_architecture_list_is_the_installed_timms():
    timm = pytest.importorskip("timm")
    import torch
    from timm.layers import PatchEmbed

    version, _ = catalog.vit_architectures_source()
    assert version == timm.__version__, "regenerate orchestrator/data/timm_vit.json for the pinned timm"
    assert catalog.vit_architectures() == frozenset(timm.list_models("vit_*"))
    # Which of them bring their own (hybrid) patch embedding: build each on the meta device.
    hybrids = set()
    for arch in sorted(catalog.vit_architectures()):
        with torch.device("meta"):
            model = timm.create_model(arch, pretrained=False)
        if type(getattr(model, "patch_embed", None)) is not PatchEmbed:
            hybrids.add(arch)
    assert catalog.vit_hybrid_architectures() == hybrids


def test_a_hybrid_vit_with_the_linear_patch_embed_is_an_error():
    f = _fires(_spec(**{"model.arch": "vit_small_r26_s32_224"}), "N028-hybrid-linear-embed")
    assert f.path == "model.patch_embed" and "patch_embed: conv" in f.fix
    assert "N028-hybrid-linear-embed" not in _rules(_spec(**{"model.arch": "vit_small_r26_s32_224",
                                                             "model.patch_embed": "conv"}))


# --- N027: local processes over this machine's CPUs ----------------------------------


def test_more_local_processes_than_cpus_warns(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    f = _fires(_spec(LOCAL, **{"instance.count": 2, "training.workers_per_node": 3}), "N027-local-oversubscribed",
               "warning")
    assert "6 local training processes" in f.message and "4 CPUs" in f.message and f.path == "instance.count"
    assert "N027-local-oversubscribed" not in _rules(_spec(LOCAL, **{"training.workers_per_node": 4}))
    # SageMaker hosts are sized by the catalog (N004, N015), not by this machine.
    assert "N027-local-oversubscribed" not in _rules(_spec(**{"instance.count": 1}))


# --- N031: a local job's environment must fit a new process on this machine --------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MAX_ARG_STRLEN is Linux's")
def test_validate_refuses_a_local_environment_value_no_process_can_take(tmp_path, monkeypatch, capsys):
    # QA: a 600 KB environment value passed `validate`, then failed at submit as
    # "InternalServerError ... Argument list too long" with no field named.
    path = tmp_path / "job.yaml"
    path.write_text(LOCAL + f"environment:\n  BIG: {'x' * 600_000}\n  SMALL: ok\n")
    code, out, err = _cli(monkeypatch, capsys, "validate", str(path))
    assert code == 2 and out == "" and "Traceback" not in err
    one, _ = local_rules.exec_limits()
    assert err.startswith(f"error: {path}:4:8: environment.BIG: environment BIG: 600005 bytes; one environment variable "
                          f"of a process on this machine holds at most {one} bytes (Linux MAX_ARG_STRLEN)")
    assert "[N031-local-environment-size]" in err and "hint: shorten it" in err
    # Just below the limit is fine.
    assert "N031-local-environment-size" not in _rules(_spec(LOCAL, environment={"BIG": "x" * (one - 5)}))
    assert "N031-local-environment-size" in _rules(_spec(LOCAL, environment={"BIG": "x" * (one - 4)}))


def test_a_local_environment_too_large_with_the_callers_own_is_refused_at_environment(monkeypatch):
    monkeypatch.setattr(local_rules, "exec_limits", lambda: (None, 200_000))
    monkeypatch.setattr(os, "environ", {"PATH": "/bin", "HUGE": "y" * 100_000})
    f = _fires(_spec(LOCAL, environment={f"V{i}": "x" * 1000 for i in range(40)}), "N031-local-environment-size")
    assert f.path == "environment" and "this process's own environment (100" in f.message
    assert "N031-local-environment-size" not in _rules(_spec(LOCAL, environment={"V": "x" * 1000}))


def test_a_sagemaker_environment_value_is_refused_at_validate_too():
    # The same spec on SageMaker meets SageMaker's own limit (N023), not this machine's.
    rules = _rules(_spec(environment={"BIG": "x" * 600_000}))
    assert "N023-environment-limits" in rules and "N031-local-environment-size" not in rules
