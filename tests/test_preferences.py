"""Instance preferences: the spec, the counts per type, the doctor's exclusions (N070-N075), the
CreateTrainingJob request (checked against botocore's SageMaker model) and what `plan` shows."""

from __future__ import annotations

import json
from pathlib import Path

import botocore.session
import pytest
from botocore.validate import ParamValidator
from cli_harness import run_cli

from orchestrator import doctor, preferences, request, spec
from orchestrator.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "vit-trn-preferences.yaml"
PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/trn1n-reserved"


@pytest.fixture(autouse=True)
def _isolated(orch_home):
    return orch_home


def _text(instance_yaml: str, extra: str = "") -> str:
    """The preferences config with its instance block replaced (and `extra` lines appended)."""
    text = CONFIG.read_text()
    start = text.index("instance:\n")
    end = text.index("image:")
    return text[:start] + instance_yaml.rstrip("\n") + "\n" + text[end:] + extra


def _spec(instance_yaml: str, extra: str = ""):
    return spec.loads(_text(instance_yaml, extra), "job.yaml")


def _findings(loaded, rule: str) -> list[doctor.Finding]:
    return [f for f in doctor.findings(loaded) if f.rule == rule]


def test_preferences_set_the_type_and_count_of_the_first_choice():
    loaded = spec.load(CONFIG)
    assert loaded.instance.type == "ml.trn1.32xlarge"
    assert [p.type for p in loaded.instance.preferences] == [
        "ml.trn1.32xlarge", "ml.trn1n.32xlarge", "ml.trn2.48xlarge"]


def test_counts_train_the_same_global_batch_on_every_choice():
    found = preferences.choices(spec.load(CONFIG))
    # trn1 and trn1n: 32 NeuronCores each, 2 hosts; trn2.48xlarge: 64 logical cores at LNC=2, 1 host.
    assert [(c.type, c.count, c.target.workers_per_node) for c in found] == [
        ("ml.trn1.32xlarge", 2, 32), ("ml.trn1n.32xlarge", 2, 32), ("ml.trn2.48xlarge", 1, 64)]
    assert {c.global_batch() for c in found} == {2 * 32 * 32}
    assert all(c.why == "" for c in found)


def test_request_sends_instance_preferences_and_no_instance_type():
    prepared = request.prepare(spec.load(CONFIG))
    config = prepared.request["ResourceConfig"]
    assert "InstanceType" not in config and "InstanceCount" not in config
    assert config["InstancePreferences"] == [
        {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 2},
        {"InstanceType": "ml.trn1n.32xlarge", "InstanceCount": 2},
        {"InstanceType": "ml.trn2.48xlarge", "InstanceCount": 1}]
    # botocore: mutually exclusive with EnableManagedSpotTraining (left out, not sent false).
    assert "EnableManagedSpotTraining" not in prepared.request
    assert not {"InstanceGroups", "InstancePlacementConfig"} & set(config)
    model = botocore.session.get_session().get_service_model("sagemaker")
    shape = model.operation_model("CreateTrainingJob").input_shape
    report = ParamValidator().validate(prepared.request, shape)
    assert not report.has_errors(), report.generate_report()


def test_job_file_carries_each_choice_for_the_container():
    prepared = request.prepare(spec.load(CONFIG))
    rows = {row["type"]: row for row in prepared.job["preferences"]}
    assert list(rows) == ["ml.trn1.32xlarge", "ml.trn1n.32xlarge", "ml.trn2.48xlarge"]
    trn2 = rows["ml.trn2.48xlarge"]
    assert (trn2["count"], trn2["workers_per_node"], trn2["lnc"], trn2["efa"]) == (1, 64, 2, False)
    assert trn2["environment"]["NEURON_LOGICAL_NC_CONFIG"] == "2"
    assert "--lnc=2" in trn2["environment"]["NEURON_CC_FLAGS"]
    trn1 = rows["ml.trn1.32xlarge"]
    assert (trn1["workers_per_node"], trn1["lnc"], trn1["efa"]) == (32, 1, True)
    assert "NEURON_LOGICAL_NC_CONFIG" not in trn1["environment"]
    assert trn1["environment"]["FI_PROVIDER"] == "efa"


def test_spot_with_preferences_exits_2_naming_the_exclusion(monkeypatch, capsys, tmp_path):
    path = tmp_path / "spot.yaml"
    path.write_text(CONFIG.read_text().replace("  count: 2\n", "  count: 2\n  spot: true\n  max_wait_minutes: 240\n"))
    code, _, err = run_cli(monkeypatch, capsys, "plan", str(path))
    assert code == 2
    assert "N070-preferences-spot" in err and "EnableManagedSpotTraining" in err
    assert f"{path}:" in err  # located in the file


def test_a_count_that_cannot_train_the_same_batch_is_an_error():
    loaded = _spec("instance:\n  preferences:\n    - {type: ml.trn1.32xlarge}\n    - {type: ml.trn2.48xlarge}\n")
    found = preferences.choices(loaded)
    assert found[1].count is None and "does not divide" in found[1].why
    (finding,) = _findings(loaded, "N075-preference-global-batch")
    assert finding.severity == "error" and finding.path == "instance.preferences.1.type"
    with pytest.raises(SpecError) as caught:
        doctor.raise_for(loaded, doctor.findings(loaded))
    lines = _text("instance:\n  preferences:\n    - {type: ml.trn1.32xlarge}\n    - {type: ml.trn2.48xlarge}\n").splitlines()
    assert caught.value.problems[0].line == lines.index("    - {type: ml.trn2.48xlarge}") + 1


def test_given_counts_are_kept_and_a_changed_batch_is_a_warning():
    loaded = _spec("instance:\n  preferences:\n    - {type: ml.trn1.32xlarge, count: 2}\n"
                   "    - {type: ml.trn2.48xlarge, count: 2}\n")
    assert loaded.instance.count == 2
    assert [c.count for c in preferences.choices(loaded)] == [2, 2]
    (finding,) = _findings(loaded, "N075-preference-global-batch")
    assert finding.severity == "warning" and finding.path == "instance.preferences.1.count"
    config = request.prepare(loaded).request["ResourceConfig"]
    assert [p["InstanceCount"] for p in config["InstancePreferences"]] == [2, 2]


def test_counts_on_some_preferences_only_is_an_error():
    loaded = _spec("instance:\n  preferences:\n    - {type: ml.trn1.32xlarge, count: 2}\n"
                   "    - {type: ml.trn1n.32xlarge}\n")
    (finding,) = _findings(loaded, "N073-preference-counts")
    assert finding.path == "instance.preferences.1.count"


def test_a_type_twice_is_an_error():
    loaded = _spec("instance:\n  preferences:\n    - {type: ml.trn1.32xlarge}\n    - {type: ml.trn1.32xlarge}\n")
    (finding,) = _findings(loaded, "N072-preference-duplicate")
    assert finding.path == "instance.preferences.1.type"


def test_a_later_type_sagemaker_does_not_train_on_is_refused_at_its_entry():
    loaded = _spec("instance:\n  preferences:\n    - {type: ml.trn1.32xlarge}\n    - {type: ml.inf2.48xlarge}\n")
    (finding,) = _findings(loaded, "N001-instance-not-trainable")
    assert finding.path == "instance.preferences.1.type" and "preference 2" in finding.message


def test_an_lnc_a_later_type_lacks_is_refused_at_its_entry():
    loaded = _spec("instance:\n  lnc: 2\n  preferences:\n    - {type: ml.trn2.48xlarge}\n    - {type: ml.trn1.32xlarge}\n")
    rules = {f.rule: f for f in doctor.findings(loaded)}
    assert "N005-lnc-unsupported" in rules and "preference 2" in rules["N005-lnc-unsupported"].message


def test_preferences_are_sagemakers_only():
    text = _text("instance:\n  preferences:\n    - {type: inf2.xlarge}\n    - {type: inf2.8xlarge}\n")
    text = text.replace("backend: sagemaker", "backend: batch").replace(
        "role_arn: arn:aws:iam::123456789012:role/orchestrator-training\n", "")
    loaded = spec.loads(text, "job.yaml")
    assert _findings(loaded, "N071-preferences-backend")


def test_training_plans_per_preference_or_for_the_job():
    loaded = _spec(f"instance:\n  count: 2\n  preferences:\n    - {{type: ml.trn1.32xlarge}}\n"
                   f"    - {{type: ml.trn1n.32xlarge, training_plan_arn: '{PLAN}'}}\n")
    config = request.prepare(loaded).request["ResourceConfig"]
    assert config["InstancePreferences"][1]["TrainingPlanArns"] == [PLAN]
    assert "TrainingPlanArns" not in config["InstancePreferences"][0]
    both = _spec(f"instance:\n  count: 2\n  training_plan_arn: '{PLAN}'\n  preferences:\n"
                 f"    - {{type: ml.trn1.32xlarge}}\n    - {{type: ml.trn1n.32xlarge, training_plan_arn: '{PLAN}'}}\n")
    (finding,) = _findings(both, "N074-training-plan-both")
    assert finding.path == "instance.preferences.1.training_plan_arn"
    job_level = _spec(f"instance:\n  type: ml.trn1n.32xlarge\n  count: 2\n  training_plan_arn: '{PLAN}'\n")
    assert request.prepare(job_level).request["ResourceConfig"]["TrainingPlanArn"] == PLAN


def test_more_than_five_preferences_or_a_type_other_than_the_first_is_refused():
    many = "".join(f"    - {{type: ml.trn1.{n}xlarge}}\n" for n in (2, 4, 8, 16, 32, 64))
    with pytest.raises(SpecError):
        _spec("instance:\n  preferences:\n" + many)
    with pytest.raises(SpecError) as caught:
        _spec("instance:\n  type: ml.trn2.48xlarge\n  preferences:\n    - {type: ml.trn1.32xlarge}\n")
    assert "first preference" in str(caught.value)


def test_the_budget_is_checked_against_the_dearest_choice():
    loaded = _spec("instance:\n  count: 2\n  preferences:\n    - {type: ml.trn1.32xlarge}\n"
                   "    - {type: ml.trn1n.32xlarge}\n", "budget: {max_cost_usd: 140}\n")
    found = preferences.choices(loaded)
    assert found[0].estimate.usd_max < 140 < found[1].estimate.usd_max
    diagnosis = doctor.diagnose(loaded)
    assert diagnosis.estimate == found[1].estimate
    (finding,) = [f for f in diagnosis.findings if f.rule == "N016-budget-exceeded"]
    assert finding.severity == "error"


def test_plan_shows_every_preference_with_its_price_and_the_dearest_bound(monkeypatch, capsys, tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(_text("instance:\n  count: 2\n  preferences:\n    - {type: ml.trn1.32xlarge}\n"
                          "    - {type: ml.trn1n.32xlarge}\n"))
    code, out, _ = run_cli(monkeypatch, capsys, "plan", str(path))
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("preference ")]
    assert len(lines) == 2
    assert "2 x ml.trn1.32xlarge" in lines[0] and "21.5000 USD/h" in lines[0] and "at most 129.00 USD" in lines[0]
    assert "2 x ml.trn1n.32xlarge" in lines[1] and "24.7800 USD/h" in lines[1] and "the dearest" in lines[1]
    assert "cost: at most 148.68 USD" in out
    code, out, _ = run_cli(monkeypatch, capsys, "plan", str(path), "--json")
    shown = json.loads(out)
    assert [p["type"] for p in shown["preferences"]] == ["ml.trn1.32xlarge", "ml.trn1n.32xlarge"]
    assert shown["estimate"]["usd_max"] == shown["preferences"][1]["estimate"]["usd_max"]


def test_a_spec_without_preferences_keeps_its_request_and_hash():
    loaded = spec.load(ROOT / "configs" / "vit-trn1-32xlarge.yaml")
    config = request.prepare(loaded).request["ResourceConfig"]
    assert config["InstanceType"] == "ml.trn1.32xlarge" and "InstancePreferences" not in config
    # (the golden requests of the other configs hold that their spec hashes did not change:
    # instance.preferences and instance.training_plan_arn are LATER_FIELDS)
