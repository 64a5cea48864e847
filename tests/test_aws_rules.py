"""AWS's rules, not only its shapes (orchestrator/data/aws_rules.json): every rule the product
relies on that no service model states has its source, the code that applies it and a test
that exists; the Batch sizes (container overrides as ECS counts them, the SubmitJob payload,
the combined tags) exit 2 at the spec field; the combinations no page documents warn."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from cli_harness import run_cli

from orchestrator import aws_contract, doctor, spec

ROOT = Path(__file__).resolve().parents[1]
RULES = json.loads((ROOT / "orchestrator" / "data" / "aws_rules.json").read_text())["rules"]
INF2 = ROOT / "configs" / "vit-inf2-xlarge.yaml"


@pytest.fixture(autouse=True)
def _isolated(orch_home):
    return orch_home


def _defined(path: Path) -> set[str]:
    """Every function and class name a Python file defines, at any depth."""
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.ClassDef)}


@pytest.mark.parametrize("rule", RULES, ids=[r["id"] for r in RULES])
def test_every_rule_has_its_source_code_and_test(rule):
    assert rule["rule"] and rule["sentence"]
    assert rule["source"].startswith("https://docs.aws.amazon.com/"), rule["id"]
    if rule.get("assumed"):
        assert rule["sentence"].startswith("assumed"), rule["id"]
    if rule.get("undocumented"):
        assert rule["sentence"].startswith("undocumented"), rule["id"]
    assert rule["applied_by"] and rule["tests"]
    for where in rule["applied_by"]:
        path, name = where.split(":")
        assert name in _defined(ROOT / path), f"{rule['id']}: {where} does not exist"
    for test in rule["tests"]:
        path, name = test.split("::")
        assert name.startswith("test_") and name in _defined(ROOT / path), f"{rule['id']}: {test} does not exist"


def test_every_documented_limit_is_a_rule_and_the_ids_are_unique():
    ids = [r["id"] for r in RULES]
    assert len(ids) == len(set(ids))
    limits = {entry["id"] for entry in aws_contract.limits()}
    assert limits == {r["limit"] for r in RULES if "limit" in r}


def _batch_with(tmp_path: Path, values: int, length: int = 1000) -> Path:
    env = "environment:\n" + "".join(f"  BIG_{i}: \"{'x' * length}\"\n" for i in range(values))
    path = tmp_path / "big.yaml"
    path.write_text(INF2.read_text() + "\n" + env)
    return path


def test_a_batch_spec_with_seven_long_environment_values_exits_2_naming_environment(tmp_path, monkeypatch, capsys):
    """Held out: seven 1,000-character values make the container overrides pass ECS's 8,192
    characters: `plan` and `submit` exit 2 at `environment`, saying how much is over, before any
    call (the job would otherwise go FAILED at start)."""
    from orchestrator import backends

    path = _batch_with(tmp_path, 7)
    code, _, err = run_cli(monkeypatch, capsys, "plan", str(path))
    assert code == 2
    assert f"{path.name}:" in err and ": environment: " in err and "containerOverrides" in err
    assert "at most 8,192 allowed: " in err and " over" in err and "API_RunTask.html" in err
    monkeypatch.setattr(backends, "create", lambda *a, **k: pytest.fail("a backend was made for a refused spec"))
    code, _, err = run_cli(monkeypatch, capsys, "submit", str(path), "--no-quota-check")
    assert code == 2 and "8,192" in err
    # Six fit: the limit is counted, not guessed.
    assert run_cli(monkeypatch, capsys, "plan", str(_batch_with(tmp_path, 4)))[0] == 0


def test_thirty_one_long_values_pass_the_submit_payload_too(tmp_path, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, "plan", str(_batch_with(tmp_path, 31)))
    assert code == 2
    assert "payload (derived from environment)" in err and "at most 30,720 allowed" in err
    assert "service_limits.html" in err


def test_more_than_50_combined_tags_are_refused_naming_tags():
    from orchestrator import provenance

    request = {"jobName": "j", "jobQueue": "q", "jobDefinition": "d",
               "tags": {f"k{i}": "v" for i in range(50)}, "propagateTags": True}
    assert aws_contract.table_violations("batch", "SubmitJob", request) == []
    request["tags"]["aws:cloudformation:stack-name"] = "s"  # aws: tags do not count
    assert aws_contract.table_violations("batch", "SubmitJob", request) == []
    request["tags"]["k50"] = "v"
    [found] = aws_contract.table_violations("batch", "SubmitJob", request)
    assert found.path == "tags" and "51 entries; at most 50 allowed: 1 over" in found.problem
    assert provenance.field(spec.load(INF2), "SubmitJob", request, found.path) == "tags"


def test_an_ordinary_batch_request_fits_every_size():
    from orchestrator import request

    prepared = request.prepare(spec.load(INF2))
    assert aws_contract.table_violations("batch", "SubmitJob", prepared.request) == []


def test_a_batch_job_name_off_its_documented_form_is_refused():
    base = {"jobQueue": "q", "jobDefinition": "d"}
    assert aws_contract.table_violations("batch", "SubmitJob", {**base, "jobName": "a" * 128}) == []
    [long] = aws_contract.table_violations("batch", "SubmitJob", {**base, "jobName": "a" * 129})
    assert "129 characters; at most 128" in long.problem
    [bad] = aws_contract.table_violations("batch", "SubmitJob", {**base, "jobName": "-starts-with-a-hyphen"})
    assert "does not match" in bad.problem


def test_a_cloudformation_parameter_value_over_4096_bytes_is_refused():
    params = {"StackName": "s", "ChangeSetName": "c",
              "Parameters": [{"ParameterKey": "K", "ParameterValue": "é" * 2048}]}
    assert aws_contract.table_violations("cloudformation", "CreateChangeSet", params) == []
    params["Parameters"][0]["ParameterValue"] += "x"
    [found] = aws_contract.table_violations("cloudformation", "CreateChangeSet", params)
    assert found.path == "Parameters[0].ParameterValue" and "4097 bytes" in found.problem


PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/nightly"


@pytest.mark.parametrize("overrides, rule, page", [
    ({"instance.training_plan_arn": PLAN}, "N077-undocumented-plan-preferences", "reserve-capacity-with-training-plans"),
    ({"instance.keep_alive_minutes": 10}, "N078-undocumented-keep-alive-preferences", "train-warm-pools"),
])
def test_undocumented_combinations_warn_naming_the_pages(overrides, rule, page):
    listed = spec.load(ROOT / "configs" / "vit-trn-preferences.yaml")
    found = [f for f in doctor.findings(spec.with_overrides(listed, overrides)) if f.rule == rule]
    assert len(found) == 1 and found[0].severity == "warning"
    assert page in found[0].message and "only a real account can tell" in found[0].message
    assert not [f for f in doctor.findings(listed) if f.rule.startswith(("N077", "N078", "N079"))]
    # Spot with a training plan (one type: spot excludes preferences).
    one = spec.load(ROOT / "configs" / "vit-trn1-2xlarge.yaml")
    spot = spec.with_overrides(one, {"instance.spot": True, "instance.max_wait_minutes": one.max_run_minutes,
                                     "instance.training_plan_arn": PLAN})
    [warned] = [f for f in doctor.findings(spot) if f.rule == "N079-undocumented-spot-plan"]
    assert "model-managed-spot-training" in warned.message and "only a real account can tell" in warned.message
