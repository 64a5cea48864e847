"""Adding a backend, proven (issue 34, item 5): a stand-in backend that lives only in
tests/stand_in_backend/, offered with the registry's one line, is planned, submitted and
reported through the CLI as the shipped backends are. Nothing in orchestrator/ names it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from cli_harness import run_cli
from stand_in_backend import NAME, TARGET
from stand_in_backend.backend import FINAL_LOSS

from orchestrator.backends import registry

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def stand_in():
    """The stand-in offered for the test's length (the registry's line), withdrawn after."""
    registry.register(NAME, TARGET)
    yield NAME
    registry.unregister(NAME)


def _spec(tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load((ROOT / "configs" / "local-tiny.yaml").read_text())
    data.update({"name": "standin-demo", "backend": NAME, "output": {"uri": (tmp_path / "out").as_uri()}})
    data.update(changes)
    path = tmp_path / "standin.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_backend_registered_from_tests_plans_submits_and_reports_a_job(stand_in, orch_home, tmp_path,
                                                                           monkeypatch, capsys):
    path = _spec(tmp_path)
    code, out, err = run_cli(monkeypatch, capsys, "plan", "--json", str(path))
    assert code == 0, err
    plan = json.loads(out)
    request = plan["request"]
    assert (request["InstanceType"], request["InstanceCount"], request["Steps"]) == ("ml.trn1.2xlarge", 1, 6)
    assert request["ResultsUri"].startswith((tmp_path / "out").as_uri() + "/results/standin-demo-")
    assert plan["estimate"]["usd_max"] == 0.0

    code, out, err = run_cli(monkeypatch, capsys, "submit", str(path))
    job = out.splitlines()[0]
    assert code == 0 and job == request["JobName"] and "submitted to standin" in err, err
    # The service has the job: its record, and the results.json its job wrote where the plan said.
    assert json.loads((orch_home / "stand-in" / f"{job}.json").read_text())["request"] == request
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(path))
    assert code == 0 and "already submitted to standin" in err

    code, out, err = run_cli(monkeypatch, capsys, "status", job)
    assert code == 0 and "status    completed" in out, out + err
    code, out, err = run_cli(monkeypatch, capsys, "logs", job)
    assert code == 0 and f"[stand-in] {job} completed" in out

    code, out, err = run_cli(monkeypatch, capsys, "results", "--prefix", (tmp_path / "out").as_uri(),
                             "--format", "json")
    assert code == 0, err
    row = next(r for r in json.loads(out)["rows"] if r["job"] == job)
    assert (row["status"], row["backend"], row["steps_done"], row["final_loss"]) == ("completed", NAME, 6,
                                                                                      FINAL_LOSS)


def test_the_spec_takes_a_backend_the_registry_offers_and_refuses_one_it_does_not(orch_home, tmp_path,
                                                                                   monkeypatch, capsys):
    path = _spec(tmp_path)
    code, _, err = run_cli(monkeypatch, capsys, "validate", str(path))
    assert code == 2 and "Input should be 'sagemaker', 'batch' or 'local'" in err, err
    registry.register(NAME, TARGET)
    try:
        code, _, err = run_cli(monkeypatch, capsys, "validate", str(path))
        assert code == 0, err
        # The stand-in's own spec check, asked through the interface like any backend's.
        code, _, err = run_cli(monkeypatch, capsys, "validate", str(_spec(tmp_path, output={"uri": "s3://my-bucket/p"})))
        assert code == 2 and "give a file:/// output.uri" in err, err
    finally:
        registry.unregister(NAME)
    assert NAME not in registry.names()


def test_a_shipped_backend_cannot_be_registered_over():
    with pytest.raises(Exception, match="one of this package's"):
        registry.register("local", TARGET)
    registry.unregister("local")  # withdraws nothing shipped
    assert registry.names() == ("sagemaker", "batch", "local")


def test_nothing_in_the_orchestrator_names_the_stand_in():
    """The stand-in touches no file of orchestrator/: its folder and the registry line are all."""
    named = re.compile(rf"\b{NAME}\b|stand_in_backend(?!/)")
    found = [str(p.relative_to(ROOT)) for p in (ROOT / "orchestrator").rglob("*.py") if named.search(p.read_text())]
    assert found == []
