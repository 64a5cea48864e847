"""A sweep over SageMaker and AWS Batch trials against one loopback moto server: planned,
submitted, refreshed and retried each on its own backend, then continued from a second
ORCHESTRATOR_HOME, which adopts each trial's attempts from both backends. moto's Batch docker
runner is off (its jobs finish at once); the tests set the states they need through moto's
models, and assert on the requests we sent and the ledger rows we wrote."""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter

import boto3
import moto_shim
import pytest
from aws_calls import Calls
from botocore.config import Config
from job_waits import patience
from sweep_fakes import load, moto_backend, set_moto_status

from orchestrator import sweep as sweeps
from orchestrator.backends.batch import BatchBackend
from orchestrator.ledger import Ledger
from orchestrator.names import TAG_ATTEMPT, TAG_SWEEP

REGION = "us-east-1"
ACCOUNT = "123456789012"
MIXED = """\
sweep: mixed
base: base.yaml
variants:
  - {backend: sagemaker, instance.type: ml.trn1.2xlarge}
  - {backend: batch, instance.type: inf2.xlarge, role_arn: null, data.num_workers: 1}
concurrency: 2
max_retries: 1
"""
RECLAIMED = "Host EC2 (instance i-0123456789abcdef0) terminated."


@pytest.fixture
def batch_setup(moto_server, bucket):
    """moto's Batch without docker, with the queue and job definition an inf2.xlarge job names."""
    body = json.dumps({"batch": {"use_docker": False}}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/config", data=body, method="POST"),
                           timeout=patience(10)).read()
    batch = boto3.client("batch", region_name=REGION)
    iam = boto3.client("iam", region_name=REGION)
    # moto needs a service role for a compute environment (AWS does not: it uses its linked role).
    role = iam.create_role(RoleName="batch-service", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    env = batch.create_compute_environment(computeEnvironmentName="orchestrator-inf2-xlarge-ce", type="UNMANAGED",
                                           state="ENABLED", serviceRole=role)
    batch.create_job_queue(jobQueueName="orchestrator-inf2-xlarge", state="ENABLED", priority=1,
                           computeEnvironmentOrder=[{"order": 1, "computeEnvironment": env["computeEnvironmentArn"]}])
    batch.register_job_definition(jobDefinitionName="orchestrator-neuron-1chip", type="container",
                                  containerProperties={"image": "pytorch-training-neuronx", "vcpus": 4,
                                                       "memory": 14745})


def _backends(ledger: Ledger, creates: Counter):
    """(router, sagemaker client, batch client) of one machine: the real backends on moto."""
    sagemaker, sm = moto_backend(ledger, creates)
    config = Config(retries={"mode": "standard", "max_attempts": 1})
    batch_client = boto3.client("batch", region_name=REGION, config=config)
    batch = BatchBackend(batch_client, boto3.client("s3", region_name=REGION),
                         boto3.client("logs", region_name=REGION), ledger=ledger, sleep=lambda s: None)
    return sweeps.Router(["sagemaker", "batch"], given={"sagemaker": sagemaker, "batch": batch}), sm, batch_client


def _moto_batch_job(name: str):
    """moto's model of the Batch job `name`, once its (docker-less) run has ended."""
    jobs = [j for j in moto_shim.batch_jobs(REGION, ACCOUNT).values() if j.job_name == name]
    assert len(jobs) == 1, name
    for _ in range(200):  # moto's thread ends the job at once; wait for it before overriding its state
        if jobs[0].job_stopped:
            break
        time.sleep(0.05)
    return jobs[0]


def test_moto_a_mixed_sweep_runs_each_trial_on_its_backend_and_a_fresh_home_adopts_both(
        tmp_path, orch_home, batch_setup, monkeypatch):
    planned = sweeps.plan(load(tmp_path, MIXED))
    by_backend = {t.trial.spec.backend: t for t in planned.trials}
    assert set(by_backend) == {"sagemaker", "batch"}
    trn1, inf2 = by_backend["sagemaker"], by_backend["batch"]

    # --- laptop A: submit both, refresh, retry the reclaimed Batch trial on Batch ----------------
    creates: Counter = Counter()
    ledger_a = Ledger()
    router_a, sm_a, batch_a = _backends(ledger_a, creates)
    calls = Calls(sm_a._client, batch_a)
    runner_a = sweeps.Runner(sweeps.save(planned, ledger_a), router_a, ledger_a, sleep=lambda s: None,
                             poll_seconds=0)
    runner_a.step()
    assert calls.named("CreateTrainingJob") == [trn1.prepared.request]
    assert calls.named("SubmitJob") == [inf2.prepared.request]
    rows = {e.job_name: e for e in ledger_a.entries(sweep_id=runner_a.d.sweep_id)}
    assert {n: (e.backend, e.status) for n, e in rows.items()} == {
        trn1.job_name: ("sagemaker", "submitted"), inf2.job_name: ("batch", "submitted")}
    assert rows[inf2.job_name].request == inf2.prepared.request

    set_moto_status(trn1.job_name, "InProgress")
    job = _moto_batch_job(inf2.job_name)
    job.status, job.job_stopped_reason = "FAILED", RECLAIMED
    runner_a.step()
    retry = inf2.job_name + "-r1"
    assert ledger_a.get(trn1.job_name).status == "running"
    assert (ledger_a.get(inf2.job_name).status, ledger_a.get(inf2.job_name).detail) == ("failed", RECLAIMED)
    [first, again] = calls.named("SubmitJob")
    assert again["jobName"] == retry and again["jobQueue"] == "orchestrator-inf2-xlarge"
    assert again["tags"][TAG_ATTEMPT] == "retry" and again["tags"][TAG_SWEEP] == runner_a.d.sweep_id
    assert {k: v for k, v in again.items() if k not in ("jobName", "tags", "containerOverrides")} == \
        {k: v for k, v in first.items() if k not in ("jobName", "tags", "containerOverrides")}
    assert ledger_a.get(retry).backend == "batch" and ledger_a.get(retry).status == "submitted"
    assert len(calls.named("CreateTrainingJob")) == 1  # nothing went to SageMaker for the Batch trial
    assert _moto_batch_job(retry).status == "SUCCEEDED"

    # --- laptop B: a fresh ORCHESTRATOR_HOME runs the same sweep --------------------------------
    home_b = tmp_path / "home-b"
    home_b.mkdir()
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(home_b))
    ledger_b = Ledger()
    assert ledger_b.path != ledger_a.path
    router_b, sm_b, batch_b = _backends(ledger_b, creates)
    calls_b = Calls(sm_b._client, batch_b)
    runner_b = sweeps.Runner(sweeps.save(planned, ledger_b), router_b, ledger_b, sleep=lambda s: None,
                             poll_seconds=0)
    progress = runner_b.step()
    assert calls_b.named("CreateTrainingJob") == [] and calls_b.named("SubmitJob") == []
    rows = {e.job_name: e for e in ledger_b.entries(sweep_id=runner_b.d.sweep_id)}
    assert {n: (e.backend, e.attempt, e.status) for n, e in rows.items()} == {
        trn1.job_name: ("sagemaker", 0, "running"),
        inf2.job_name: ("batch", 0, "failed"),
        retry: ("batch", 1, "completed")}
    assert rows[inf2.job_name].detail == RECLAIMED
    assert rows[retry].request["jobQueue"] == "orchestrator-inf2-xlarge"
    assert sum("adopted" in line for line in progress.events) == 3
    # Each backend was asked for the sweep's jobs; SageMaker's list holds no Batch job and back.
    assert any(p.get("NameContains") == planned.identity.job_prefix for p in calls_b.named("ListTrainingJobs"))
    assert calls_b.named("ListJobs")

    set_moto_status(trn1.job_name, "Completed")
    final = runner_b.run(max_steps=5)
    assert final.done and final.counts == {"completed": 2}
    assert {v.job_name: (v.trial.backend, v.status) for v in runner_b.views()} == {
        trn1.job_name: ("sagemaker", "completed"), retry: ("batch", "completed")}
    assert calls_b.named("CreateTrainingJob") == [] and calls_b.named("SubmitJob") == []
    assert dict(creates) == {trn1.job_name: 1}


def test_moto_stop_stops_each_job_on_its_backend(tmp_path, orch_home, batch_setup):
    planned = sweeps.plan(load(tmp_path, MIXED))
    creates: Counter = Counter()
    ledger = Ledger()
    router, sm, batch = _backends(ledger, creates)
    router.get("sagemaker").stop = lambda name: set_moto_status(name, "Stopped")  # moto has no StopTrainingJob
    runner = sweeps.Runner(sweeps.save(planned, ledger), router, ledger, sleep=lambda s: None, poll_seconds=0)
    runner.step()
    names = {t.trial.spec.backend: t.job_name for t in planned.trials}
    set_moto_status(names["sagemaker"], "InProgress")
    job = _moto_batch_job(names["batch"])
    job.status, job.job_stopped = "RUNNING", False
    calls = Calls(batch)
    sweeps.request_stop(ledger, runner.d.sweep_id)
    report = sweeps.stop(runner)
    assert sorted(report.stopped_jobs) == sorted(names.values()) and not report.errors
    assert [p["jobId"] for p in calls.named("TerminateJob")] == [job.job_id]
    assert {ledger.get(n).status for n in names.values()} == {"stopped"}


@pytest.mark.slow  # two `sweep run` processes: about 20 s on 2 shared cores
def test_moto_cli_sweep_run_across_backends_and_again_from_a_fresh_home(tmp_path, orch_home, batch_setup):
    """`sweep run` in a new process builds both backends by name (the real clients, on moto):
    each trial completes on its own backend; `sweep run` of the same file from another
    ORCHESTRATOR_HOME adopts both jobs and creates none."""
    import os

    from sweep_fakes import ROOT, cli_run, write

    path = write(tmp_path, MIXED)
    planned = sweeps.plan(load(tmp_path, MIXED))
    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(orch_home))
    done = cli_run("sweep", "run", str(path), "--poll", "0.1", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"sweep {planned.sweep_id}: 2 completed" in done.stdout
    rows = {e.job_name: (e.backend, e.status) for e in Ledger(orch_home / "ledger.sqlite3").entries()}
    assert rows == {t.job_name: (t.trial.spec.backend, "completed") for t in planned.trials}
    sm = boto3.client("sagemaker", region_name=REGION)
    batch = boto3.client("batch", region_name=REGION)
    trained = [j["TrainingJobName"] for j in sm.list_training_jobs()["TrainingJobSummaries"]]
    queued = [j["jobName"] for j in batch.list_jobs(jobQueue="orchestrator-inf2-xlarge",
                                                    jobStatus="SUCCEEDED")["jobSummaryList"]]
    by_backend = {t.trial.spec.backend: t.job_name for t in planned.trials}
    assert (trained, queued) == ([by_backend["sagemaker"]], [by_backend["batch"]])

    home_b = tmp_path / "home-b"
    home_b.mkdir()
    again = cli_run("sweep", "run", str(path), "--poll", "0.1", env=dict(env, ORCHESTRATOR_HOME=str(home_b)))
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"sweep {planned.sweep_id}: 2 completed" in again.stdout
    assert again.stdout.count("adopted") == 2
    rows_b = {e.job_name: (e.backend, e.status) for e in Ledger(home_b / "ledger.sqlite3").entries()}
    assert rows_b == rows
    assert [j["TrainingJobName"] for j in sm.list_training_jobs()["TrainingJobSummaries"]] == trained
    assert [j["jobName"] for j in batch.list_jobs(jobQueue="orchestrator-inf2-xlarge",
                                                  jobStatus="SUCCEEDED")["jobSummaryList"]] == queued
