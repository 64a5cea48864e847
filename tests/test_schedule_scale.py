"""A cloud schedule at scale (issue 35): trials as the items of a Distributed Map, read from S3,
each in a child execution; the definition's size independent of the trial count; a poll error
ends its trial, not the run (issue 31, item 4). Runs by moto's interpreter (schedule_moto)."""

from __future__ import annotations

import json

import moto_shim
import pytest
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


def _one_run_makes_every_job(tmp_path, trials: int, concurrency: int) -> None:
    import boto3

    compiled = compile_schedule(_sweep(tmp_path, trials, concurrency))
    region = compiled.plan.sweep.base_spec.region
    described = run_once(compiled, region, polls=None)
    assert described["status"] == "SUCCEEDED", described
    client = boto3.client("sagemaker", region_name=region)
    made = [j["TrainingJobName"] for page in client.get_paginator("list_training_jobs").paginate()
            for j in page["TrainingJobSummaries"]]
    wanted = {json.loads(json.dumps(t.prepared.request["TrainingJobName"]).replace(sm.PLACEHOLDER_LABEL,
                                                                                   "202612050300"))
              for t in compiled.plan.trials}
    assert len(made) == trials and set(made) == wanted


def test_moto_one_run_of_ten_trials_makes_its_ten_jobs(orch_home, tmp_path, interpreter):
    """The scheduler's execution of a Distributed Map sweep, end to end, at a size the fast tier
    affords: every item's job is created, once."""
    _one_run_makes_every_job(tmp_path, 10, 5)


@pytest.mark.slow
def test_moto_one_run_of_a_thousand_trials_makes_its_thousand_jobs(orch_home, tmp_path, interpreter):
    """Issue 35's size: 1,000 trials at concurrency 100, one execution as the scheduler starts
    it. moto's interpreter runs the children on threads of its server, in this process; about
    5 minutes on a loaded two-core machine (docs/BENCHMARKS.md), once moto_shim stopped
    re-reading botocore's service model at every task: the slow tier."""
    _one_run_makes_every_job(tmp_path, 1000, 100)


def test_moto_a_poll_error_ends_its_trial_not_the_run(orch_home, interpreter, monkeypatch):
    """One trial's describe is throttled once (retried: it completes), another's fails for good
    (its trial ends PollFailed with the cause); the third completes."""
    plan = sm.placeholder_plan(spec.load_sweep(NIGHTLY))
    first, second, third = (t.trial.trial_id for t in plan.trials)
    waits = moto_shim.stepfunctions_retries_without_waiting(monkeypatch)
    answered = moto_shim.stepfunctions_describe_failing(monkeypatch, {first: (1, "ThrottlingException"), second: (None, "InternalFailure")})
    described = run_once(plan, plan.sweep.base_spec.region)
    assert described["status"] == "SUCCEEDED", described
    trials = {t["trial"]: t for t in json.loads(described["output"])["trials"]}
    assert trials[first]["status"] == "Completed" and trials[third]["status"] == "Completed", (answered, trials)
    assert trials[second]["status"] == "PollFailed" and "InternalFailure" in trials[second]["cause"], (answered, trials)
    assert answered[first] == 1 and answered[second] > 1 and waits


def test_the_history_budget_counts_spot_waits_and_plan_queueing(orch_home, tmp_path):
    """A trial's polls are spaced so that its longest path fits its child's 25,000 events: a spot
    attempt may be followed for its max_wait_minutes, a training-plan job for its plan's queue."""
    from types import SimpleNamespace

    from orchestrator.schedule import budget

    def spec_of(run, spot=False, wait=None, plan=None):
        return SimpleNamespace(max_run_minutes=run, instance=SimpleNamespace(
            spot=spot, max_wait_minutes=wait, training_plan_arn=plan, preferences=None))

    assert budget.attempt_seconds(spec_of(120)) == 120 * 60
    assert budget.attempt_seconds(spec_of(120, spot=True, wait=2880)) == 2880 * 60
    assert budget.attempt_seconds(spec_of(120, plan="arn:aws:sagemaker:us-east-1:1:training-plan/p")) == (
        120 + budget.TRAINING_PLAN_QUEUE_MINUTES) * 60

    def graph_of(spec, attempts_n):
        keys = [f"a{i}" for i in range(attempts_n)]
        return [SimpleNamespace(key=k, on_capacity=None, on_retry=keys[i + 1] if i + 1 < attempts_n else None,
                                prepared=SimpleNamespace(spec=spec, request={"TrainingJobName": sm.PLACEHOLDER_LABEL}))
                for i, k in enumerate(keys)]

    plan = SimpleNamespace(sweep=SimpleNamespace(sweep="s"))
    assert budget.poll_seconds(plan, graph_of(spec_of(120), 3)) == budget.POLL_SECONDS
    # Four 28-day spot waits: 2,419,200 s each; the polls must thin out to fit.
    spot = graph_of(spec_of(120, spot=True, wait=40320), 4)
    poll = budget.poll_seconds(plan, spot)
    fixed = budget.EVENTS_PER_TRIAL + 4 * (budget.EVENTS_PER_ATTEMPT + budget.EVENTS_PER_RETRY
                                           * budget.RETRIES_PER_ATTEMPT + budget.EVENTS_PER_LABEL)
    assert poll > budget.POLL_SECONDS
    assert fixed + budget.EVENTS_PER_POLL * 4 * 40320 * 60 / poll <= budget.HISTORY_EVENTS
    assert fixed + budget.EVENTS_PER_POLL * 4 * 40320 * 60 / (poll - 1) > budget.HISTORY_EVENTS


def test_list_reads_the_results_the_map_wrote_to_s3(moto_server):
    """Above 200 trials the Map writes its results to S3 (ResultWriter); `schedule list` reads
    them back from its manifest (moto's ResultWriter writes an empty manifest, so the files are
    written here in the documented shape), each of 1,000 trials with its state and cause."""
    import boto3

    from orchestrator.cli.schedule import job_line
    from orchestrator.schedule import in_aws

    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="results-bucket")
    kinds = ["none", "capacity", "user", "none"]
    results = [{"Output": json.dumps({"trial": f"t{i}", "job": f"j{i}", "status": "Failed" if i % 4 in (1, 2) else
                                      "Completed", "attempt": i % 3, "kind": kinds[i % 4]}),
                "Status": "SUCCEEDED"} for i in range(999)]
    s3.put_object(Bucket="results-bucket", Key="r/run/SUCCEEDED_0.json", Body=json.dumps(results).encode())
    s3.put_object(Bucket="results-bucket", Key="r/run/FAILED_0.json", Body=json.dumps(
        [{"Status": "FAILED", "Error": "States.Runtime"}]).encode())
    manifest = {"DestinationBucket": "results-bucket", "ResultFiles": {"SUCCEEDED": [{"Key": "r/run/SUCCEEDED_0.json"}],
                                                          "FAILED": [{"Key": "r/run/FAILED_0.json"}], "PENDING": []}}
    s3.put_object(Bucket="results-bucket", Key="r/run/manifest.json", Body=json.dumps(manifest).encode())
    found = in_aws.written_results(s3, {"Bucket": "results-bucket", "Key": "r/run/manifest.json"})
    assert [f.get("trial") for f in found] == [f"t{i}" for i in range(999)] + [None]
    assert found[999] == {"status": "FAILED", "error": "States.Runtime"}
    lines = [job_line(f) for f in found]
    assert lines[0] == "  t0 j0: Completed"
    assert lines[1] == "  t1 j1: Failed after 1 retry (capacity failure)"
    assert lines[2] == "  t2 j2: Failed after 2 retries (user failure)"
    assert lines[999] == "  None (no job): FAILED (States.Runtime)"
