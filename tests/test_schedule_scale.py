"""A cloud schedule at scale (issue 35): trials as the items of a Distributed Map, read from S3,
each in a child execution; the definition's size independent of the trial count; a poll error
ends its trial, not the run (issue 31, item 4). Runs by moto's interpreter (schedule_moto)."""

from __future__ import annotations

import json

import pytest
from moto_shim_scale35 import describe_failing, retries_without_waiting
from schedule_moto import interpreter_on, run_once
from sweep_fakes import ROOT

from orchestrator import spec
from orchestrator.schedule import statemachine as sm
from orchestrator.schedule.compiled import compile_schedule

NIGHTLY = ROOT / "configs" / "sweep-nightly.yaml"


def _sweep(tmp_path, trials: int, concurrency: int, retries: int = 0):
    path = tmp_path / f"big{trials}.yaml"
    path.write_text(f"sweep: big\nbase: {ROOT / 'configs' / 'vit-trn1-2xlarge.yaml'}\n"
                    f"random: {{trials: {trials}, seed: 0, params: {{training.optimizer.lr: "
                    "{loguniform: [1.0e-5, 1.0e-3]}}}\n"
                    f"concurrency: {concurrency}\nmax_retries: {retries}\n"
                    "schedule: {cron: \"0 3 * * *\", catchup: latest, timezone: UTC}\n")
    return sm.placeholder_plan(spec.load_sweep(path))


@pytest.fixture
def interpreter(moto_server, monkeypatch):
    off = interpreter_on(moto_server, monkeypatch)
    yield moto_server
    off()


def test_moto_nightly_runs_each_trial_in_a_child(orch_home, interpreter):
    import boto3

    plan = sm.placeholder_plan(spec.load_sweep(NIGHTLY))
    region = plan.sweep.base_spec.region
    described = run_once(plan, region)
    assert described["status"] == "SUCCEEDED", described
    output = json.loads(described["output"])
    jobs = boto3.client("sagemaker", region_name=region).list_training_jobs()["TrainingJobSummaries"]
    assert len(jobs) == 3, output["trials"][0]["cause"]
