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


def test_the_definition_does_not_grow_with_the_trials(orch_home, tmp_path):
    small, large = compile_schedule(_sweep(tmp_path, 10, 10)), compile_schedule(_sweep(tmp_path, 1000, 100))
    trials = large.definition["States"]["Trials"]
    assert trials["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    assert trials["MaxConcurrency"] == 100 and trials["ItemReader"]["Parameters"] == {
        "Bucket": large.items_at[0], "Key": large.items_at[1]}
    assert len(large.items) == 1000 and {i["trial"] for i in large.items} == {t.trial.trial_id for t in large.plan.trials}
    # Only the comment, the items' key and the results' place differ: the same states.
    assert small.definition["States"]["Trials"]["ItemProcessor"] == trials["ItemProcessor"]
    assert abs(len(small.definition_text) - len(large.definition_text)) < 200
    # 1,000 trials' results pass the execution's 256 KiB output: the Map writes them to S3.
    assert "ResultWriter" in trials and "ResultWriter" not in small.definition["States"]["Trials"]
    # ARNs are the stack's partition's.
    assert "arn:aws:states" not in large.definition_text and "arn:${Partition}:states:::aws-sdk:sagemaker" in large.definition_text
    assert large.template["Resources"]["StateMachine"]["Properties"]["DefinitionSubstitutions"] == {
        "Partition": {"Ref": "AWS::Partition"}}


def test_moto_one_run_of_a_thousand_trials_makes_its_thousand_jobs(orch_home, tmp_path, interpreter):
    import boto3

    compiled = compile_schedule(_sweep(tmp_path, 1000, 100))
    region = compiled.plan.sweep.base_spec.region
    described = run_once(compiled, region, polls=6000)
    assert described["status"] == "SUCCEEDED", described
    client = boto3.client("sagemaker", region_name=region)
    made = [j["TrainingJobName"] for page in client.get_paginator("list_training_jobs").paginate()
            for j in page["TrainingJobSummaries"]]
    wanted = {json.loads(json.dumps(t.prepared.request["TrainingJobName"]).replace(sm.PLACEHOLDER_LABEL,
                                                                                   "202612050300"))
              for t in compiled.plan.trials}
    assert len(made) == 1000 and set(made) == wanted


def test_moto_a_poll_error_ends_its_trial_not_the_run(orch_home, interpreter, monkeypatch):
    """One trial's describe is throttled once (retried: it completes), another's fails for good
    (its trial ends PollFailed with the cause); the third completes."""
    plan = sm.placeholder_plan(spec.load_sweep(NIGHTLY))
    first, second, third = (t.trial.trial_id for t in plan.trials)
    waits = retries_without_waiting(monkeypatch)
    answered = describe_failing(monkeypatch, {first: (1, "ThrottlingException"), second: (None, "InternalFailure")})
    described = run_once(plan, plan.sweep.base_spec.region)
    assert described["status"] == "SUCCEEDED", described
    trials = {t["trial"]: t for t in json.loads(described["output"])["trials"]}
    assert trials[first]["status"] == "Completed" and trials[third]["status"] == "Completed", (answered, trials)
    assert trials[second]["status"] == "PollFailed" and "InternalFailure" in trials[second]["cause"], (answered, trials)
    assert answered[first] == 1 and answered[second] > 1 and waits
