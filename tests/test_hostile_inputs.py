"""Issue 32: inputs that ended in "internal error ... this is a bug" are clear exit-2 messages,
before anything is created or submitted."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cli_harness import run_cli

ROOT = Path(__file__).resolve().parents[1]


def test_a_relative_orchestrator_home_is_refused_before_it_is_created(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCHESTRATOR_HOME", "rel-home")
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "status")
    assert code == 2, (out, err)
    assert "error: ORCHESTRATOR_HOME=rel-home is a relative path; nothing was created" in err
    assert f"ORCHESTRATOR_HOME={tmp_path / 'rel-home'}" in err
    assert not (tmp_path / "rel-home").exists()


@pytest.mark.parametrize("command", [["status", "some-job"], ["sweep", "status"],
                                     ["submit", str(ROOT / "configs" / "local-tiny.yaml")]])
def test_a_ledger_of_another_schema_is_named_and_left_alone(orch_home, monkeypatch, capsys, command):
    ledger = orch_home / "ledger.sqlite3"
    db = sqlite3.connect(ledger)
    db.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT)")
    db.execute("INSERT INTO jobs (name) VALUES ('theirs')")
    db.commit()
    db.close()
    before = ledger.read_bytes()
    code, out, err = run_cli(monkeypatch, capsys, *command)
    assert code == 2, (out, err)
    assert f"error: {ledger} is not a ledger of this orchestrator: its jobs table lacks the column(s)" in err
    assert "internal error" not in err and f"mv {ledger} {ledger}.other" in err
    assert ledger.read_bytes() == before


@pytest.mark.parametrize("value", ["inf", "nan", "1e9"])
def test_poll_must_be_seconds_a_loop_can_sleep(orch_home, monkeypatch, capsys, value):
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "run", str(ROOT / "configs" / "sweep-local.yaml"),
                             "--poll", value)
    assert code == 2 and "internal error" not in err, err
    assert "--poll" in err
    assert not (orch_home / "ledger.sqlite3").exists()  # refused before anything was submitted


def test_a_utf16_spec_gets_a_utf16_hint(tmp_path, orch_home, monkeypatch, capsys):
    path = tmp_path / "job.yaml"
    path.write_bytes((ROOT / "configs" / "local-tiny.yaml").read_text().encode("utf-16"))
    code, out, err = run_cli(monkeypatch, capsys, "validate", str(path))
    assert code == 2 and "is UTF-16 text" in err and "iconv -f utf-16 -t utf-8" in err and "Latin-1" not in err


def test_a_confusable_letter_in_name_is_named(tmp_path, orch_home, monkeypatch, capsys):
    path = tmp_path / "job.yaml"
    text = (ROOT / "configs" / "local-tiny.yaml").read_text()
    import re

    path.write_text(re.sub(r"(?m)^name: .*$", "name: v\u0456t-tiny", text, count=1))
    code, out, err = run_cli(monkeypatch, capsys, "validate", str(path))
    assert code == 2 and "character 2, 'і' (U+0456 CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I)" in err, err


@pytest.mark.parametrize("arn, said", [
    ("arn:aws:ec2:us-east-1:123456789012:capacity-reservation/cr-1", "expected a SageMaker training plan ARN"),
    ("arn:aws:sagemaker:eu-west-1:123456789012:training-plan/p", "N080-training-plan-region"),
])
def test_a_training_plan_arn_of_another_service_or_region_is_refused_in_words(tmp_path, orch_home, monkeypatch,
                                                                             capsys, arn, said):
    import yaml

    doc = yaml.safe_load((ROOT / "configs" / "vit-trn1-32xlarge.yaml").read_text())
    doc["instance"]["training_plan_arn"] = arn
    doc.pop("infra", None)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = run_cli(monkeypatch, capsys, "validate", str(path))
    assert code == 2 and said in err and "^arn" not in err, err
