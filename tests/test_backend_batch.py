"""The AWS Batch backend against a loopback moto server. moto's docker runner is turned off (its
config endpoint), so jobs go SUCCEEDED at once: the tests drive RUNNABLE, RUNNING and FAILED
themselves through moto's in-process models, and assert on what WE sent and recorded."""

from __future__ import annotations

import json
import time
import urllib.request

import boto3
import moto_shim
import pytest
from aws_calls import Calls
from botocore.config import Config
from job_waits import patience

from entrypoints.launcher import bootstrap
from orchestrator import backends, request, spec
from orchestrator.backends.batch.backend import STOP_REASON, BatchBackend, status_of
from orchestrator.errors import InputError
from orchestrator.ledger import Ledger
from orchestrator.lifecycle import Status

REGION = "us-east-1"
ACCOUNT = "123456789012"
BATCH = """\
name: batch-be
backend: batch
region: us-east-1
instance: {type: inf2.xlarge}
data: {source: synthetic, num_workers: 1}
compile_cache: {uri: s3://orchestrator-example-bucket/cc}
output: {uri: s3://orchestrator-example-bucket/jobs}
max_run_minutes: 30
max_retry_attempts: 1
tags: {team: vision}
"""
QUEUE = "orchestrator-inf2-xlarge"


def _moto_job(job_id: str):
    return moto_shim.batch_jobs(REGION, ACCOUNT)[job_id]


@pytest.fixture
def clients(moto_server, orch_home):
    body = json.dumps({"batch": {"use_docker": False}}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/config", data=body, method="POST"),
                           timeout=patience(10)).read()
    config = Config(retries={"mode": "standard", "max_attempts": 1})
    made = {name: boto3.client(name, region_name=REGION, config=config) for name in ("batch", "s3", "logs", "iam")}
    made["s3"].create_bucket(Bucket="orchestrator-example-bucket")
    # moto needs a service role for a compute environment (AWS does not: it uses its linked role).
    role = made["iam"].create_role(RoleName="batch-service", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    env = made["batch"].create_compute_environment(computeEnvironmentName="orchestrator-inf2-xlarge-ce",
                                                   type="UNMANAGED", state="ENABLED", serviceRole=role)
    made["batch"].create_job_queue(jobQueueName=QUEUE, state="ENABLED", priority=1,
                                   computeEnvironmentOrder=[{"order": 1,
                                                             "computeEnvironment": env["computeEnvironmentArn"]}])
    made["batch"].register_job_definition(
        jobDefinitionName="orchestrator-neuron-1chip", type="container",
        containerProperties={"image": "pytorch-training-neuronx", "vcpus": 4, "memory": 14745,
                             "logConfiguration": {"logDriver": "awslogs",
                                                  "options": {"awslogs-group": "/orchestrator/batch"}}})
    return made


@pytest.fixture
def backend(clients):
    return BatchBackend(clients["batch"], clients["s3"], clients["logs"], ledger=Ledger(), sleep=lambda s: None)


def _prepared(**overrides):
    loaded = spec.loads(BATCH, "job.yaml")
    return request.prepare(spec.with_overrides(loaded, overrides) if overrides else loaded)


def _job_id(clients, name: str) -> str:
    found = clients["batch"].list_jobs(jobQueue=QUEUE, filters=[{"name": "JOB_NAME", "values": [name]}])
    return found["jobSummaryList"][0]["jobId"]


def test_the_backend_is_registered_and_built_by_name(moto_server):
    built = backends.create("batch", region=REGION, ledger=Ledger())
    assert isinstance(built, BatchBackend) and built.label == "batch in us-east-1" and built.cloud


def test_submit_sends_the_prepared_request_once_intent_first(clients, backend):
    calls = Calls(clients["batch"], clients["s3"])
    prepared = _prepared()
    done = backend.submit(prepared)
    assert done.created and done.job_name == prepared.job_name
    assert calls.named("SubmitJob") == [prepared.request]
    key = prepared.source_uri.split("/", 3)[3]
    body = clients["s3"].get_object(Bucket="orchestrator-example-bucket", Key=key)["Body"].read()
    assert body == prepared.archive
    assert backend.ledger.get(prepared.job_name).status == "submitted"
    again = backend.submit(prepared)  # the row is submitted: nothing is sent again
    assert not again.created and len(calls.named("SubmitJob")) == 1


def test_a_submit_killed_after_submitjob_is_adopted_not_duplicated(clients, backend):
    prepared = _prepared()
    clients["batch"].submit_job(**prepared.request)  # the earlier process got this far, then died
    backend.ledger.record_intent(prepared.job_name, backend="batch", region=REGION, spec_hash=prepared.spec_hash,
                                 request=prepared.request)
    calls = Calls(clients["batch"])
    done = backend.submit(prepared)
    assert not done.created and calls.named("SubmitJob") == []
    assert backend.ledger.get(prepared.job_name).status == "submitted"


def test_a_missing_queue_is_an_input_error_naming_infra_deploy(clients, backend):
    prepared = _prepared(**{"batch.job_queue": "nope"})
    with pytest.raises(InputError) as err:
        backend.submit(prepared)
    assert "nope" in err.value.message and "infra deploy" in err.value.hint
    assert backend.ledger.get(prepared.job_name).status == "planned"


def test_an_invalid_compute_environment_is_an_input_error(clients, backend, monkeypatch):
    # moto always answers VALID: make it answer what Batch says of an environment whose
    # instance role or AMI is wrong.
    moto_shim.batch_compute_environments_invalid(monkeypatch, "CLIENT_ERROR - the AMI does not exist")
    with pytest.raises(InputError) as err:
        backend.submit(_prepared())
    assert "INVALID" in err.value.message and "infra deploy" in err.value.hint


def test_status_maps_batch_states_with_the_reason_and_times(clients, backend):
    prepared = _prepared()
    backend.submit(prepared)
    job = _moto_job(_job_id(clients, prepared.job_name))
    for batch_state, ours in (("RUNNABLE", Status.PENDING), ("STARTING", Status.STARTING),
                              ("RUNNING", Status.RUNNING)):
        job.job_stopped = False
        job.status = batch_state
        seen = backend.status(prepared.job_name)
        assert (seen.status, seen.secondary) == (ours, batch_state)
    assert backend.ledger.get(prepared.job_name).status == "running"
    job.status = "FAILED"
    job.job_stopped = True
    job.job_stopped_reason = "Essential container in task exited"
    job.exit_code = 1
    seen = backend.status(prepared.job_name)
    assert seen.status == Status.FAILED and "Essential container in task exited" in seen.failure_reason
    assert seen.tags["team"] == "vision" and seen.instance_type == "inf2.xlarge" and seen.created
    assert seen.output_uri == f"s3://orchestrator-example-bucket/jobs/results/{prepared.job_name}/results.json"
    assert backend.ledger.get(prepared.job_name).status == "failed"


def test_status_table():
    assert status_of("SUCCEEDED") == Status.COMPLETED
    assert status_of("FAILED", stopped=True) == Status.STOPPED
    assert status_of("RUNNING", stopped=True) == Status.STOPPING
    assert status_of("SUBMITTED") == Status.PENDING


def test_stop_is_terminate_job_and_reads_as_stopped(clients, backend):
    prepared = _prepared()
    backend.submit(prepared)
    job_id = _job_id(clients, prepared.job_name)
    job = _moto_job(job_id)
    job.job_stopped = False
    job.status = "RUNNING"
    calls = Calls(clients["batch"])
    backend.stop(prepared.job_name)
    assert calls.named("TerminateJob") == [{"jobId": job_id, "reason": STOP_REASON}]
    job.status = "FAILED"  # what Batch does once the container has exited
    job.job_stopped = True
    assert backend.status(prepared.job_name).status == Status.STOPPED


def test_logs_read_the_attempts_streams_in_the_job_definitions_group(clients, backend):
    prepared = _prepared()
    backend.submit(prepared)
    job = _moto_job(_job_id(clients, prepared.job_name))
    stream = f"orchestrator-neuron-1chip/default/{job.job_id}"
    job.log_stream_name = stream
    job.attempts = [{"container": {"logStreamName": stream, "exitCode": 0}, "startedAt": 1, "stoppedAt": 2}]
    logs = clients["logs"]
    logs.create_log_group(logGroupName="/orchestrator/batch")
    logs.create_log_stream(logGroupName="/orchestrator/batch", logStreamName=stream)
    now = int(time.time() * 1000)
    logs.put_log_events(logGroupName="/orchestrator/batch", logStreamName=stream,
                        logEvents=[{"timestamp": now, "message": "launch: pulling cache"},
                                   {"timestamp": now + 1, "message": "orchestrator-summary samples_per_s=9;"}])
    # moto's DescribeJobs gives no container logConfiguration (Batch's does): the group is then
    # read from the job definition, the fixture's /orchestrator/batch.
    lines = list(backend.logs(prepared.job_name))
    assert lines == ["[attempt 1] launch: pulling cache", "[attempt 1] orchestrator-summary samples_per_s=9;"]


def test_unknown_jobs_are_unknown(backend):
    with pytest.raises(backends.UnknownJob):
        backend.status("never-submitted-12345678")
    assert backend.describe("never-submitted-12345678") is None


def test_progress_reads_results_json_where_the_job_writes_it(clients, backend):
    prepared = _prepared()
    backend.submit(prepared)
    key = f"jobs/results/{prepared.job_name}/results.json"
    clients["s3"].put_object(Bucket="orchestrator-example-bucket", Key=key,
                             Body=json.dumps({"status": "running", "steps_done": 7, "steps": 500}).encode())
    seen = backend.progress(prepared.job_name)
    assert (seen.record, seen.steps_done, seen.steps) == ("running", 7, 500)


def test_job_names_lists_the_queues_jobs(clients, backend):
    prepared = _prepared()
    backend.submit(prepared)
    assert backend.job_names("batch-be") == [prepared.job_name]
    assert backend.exists(prepared.job_name)


def test_job_names_also_lists_the_stacks_other_inf2_queues_but_no_other_stacks(clients, backend):
    """A sweep's failover to inf2.8xlarge, submitted from another machine, is in a queue this
    ledger never named: it is listed because the queue is the same stack's; another stack's
    queue is not asked."""
    env = clients["batch"].describe_job_queues(jobQueues=[QUEUE])["jobQueues"][0]["computeEnvironmentOrder"]
    for queue in ("orchestrator-inf2-8xlarge", "other-inf2-8xlarge"):
        clients["batch"].create_job_queue(jobQueueName=queue, state="ENABLED", priority=1, computeEnvironmentOrder=env)
    backend.submit(_prepared())
    elsewhere = _prepared(**{"instance.type": "inf2.8xlarge", "name": "batch-be-fo"}).request
    clients["batch"].submit_job(**{**elsewhere, "jobQueue": "orchestrator-inf2-8xlarge"})
    clients["batch"].submit_job(**{**elsewhere, "jobName": "batch-be-theirs", "jobQueue": "other-inf2-8xlarge"})
    calls = Calls(clients["batch"])
    assert backend.job_names("batch-be") == sorted([_prepared().job_name, elsewhere["jobName"]])
    assert {p["jobQueue"] for p in calls.named("ListJobs")} == {QUEUE, "orchestrator-inf2-8xlarge"}
    fresh = BatchBackend(clients["batch"], clients["s3"], clients["logs"],
                         ledger=Ledger(backend.ledger.path.with_name("empty.sqlite3")))
    before = len(calls.calls)
    assert fresh.job_names("batch-be") == [] and len(calls.calls) == before  # no batch rows: no call at all


def test_the_bootstrap_environment_names_the_uploaded_archive(clients, backend):
    prepared = _prepared()
    backend.submit(prepared)
    env = {e["name"]: e["value"] for e in prepared.request["containerOverrides"]["environment"]}
    bucket, key = env[bootstrap.CODE_URI_ENV][5:].split("/", 1)
    assert clients["s3"].head_object(Bucket=bucket, Key=key)["ContentLength"] == len(prepared.archive)


def test_results_show_a_batch_row_beside_a_sagemaker_row_each_at_its_own_price(clients, backend):
    from datetime import datetime, timedelta

    from test_results import create_job, results_doc

    from orchestrator import results

    s3 = clients["s3"]
    prepared = _prepared()
    backend.submit(prepared)
    job = _moto_job(_job_id(clients, prepared.job_name))
    created = datetime(2026, 11, 30, 10, 0, 0)
    job.job_created_at = created
    job.job_started_at = created + timedelta(seconds=240)  # four minutes RUNNABLE, waiting for an instance
    job.job_stopped_at = created + timedelta(seconds=240 + 1800)
    job.attempts = [{"container": {"exitCode": 0}, "startedAt": int(job.job_started_at.timestamp() * 1000),
                     "stoppedAt": int(job.job_stopped_at.timestamp() * 1000)}]
    job.status = "SUCCEEDED"
    inf2 = results_doc(prepared.job_name, sps=100.0, type_="inf2.xlarge", backend="batch")
    s3.put_object(Bucket="orchestrator-example-bucket", Key=f"jobs/results/{prepared.job_name}/results.json",
                  Body=json.dumps(inf2).encode())
    trn1 = results_doc("trn1-job", sps=100.0)
    s3.put_object(Bucket="orchestrator-example-bucket", Key="jobs/results/trn1-job/results.json",
                  Body=json.dumps(trn1).encode())
    create_job(boto3.client("sagemaker", region_name=REGION), "trn1-job", billable=900, training=900)

    rows = {r.job: r for r in results.collect("s3://orchestrator-example-bucket/jobs", workers=1).rows}
    batch_row, sm_row = rows[prepared.job_name], rows["trn1-job"]
    assert (batch_row.backend, batch_row.status, batch_row.instance) == ("batch", "completed", "inf2.xlarge")
    assert batch_row.price_per_hour == pytest.approx(0.7582) and batch_row.price_verified
    assert batch_row.samples_per_dollar == pytest.approx(100 * 3600 / 0.7582)
    assert (batch_row.queue_s, batch_row.run_s, batch_row.billable_s) == (240, 1800, 1800)
    assert batch_row.cost_usd == pytest.approx(1800 / 3600 * 0.7582)
    assert sm_row.backend == "sagemaker" and sm_row.price_verified is False  # the EC2 price x the markup
    text = results.render_table(results.Collection("s3://orchestrator-example-bucket/jobs",
                                                   results.rank(rows.values())))
    assert "queue s" in text and "batch" in text and "sagemaker" in text


def test_the_cli_submits_shows_status_and_stops_a_batch_job(clients, tmp_path, monkeypatch, capsys):
    from cli_harness import run_cli

    path = tmp_path / "job.yaml"
    path.write_text(BATCH)
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(path))
    assert code == 0, err
    name = out.strip().splitlines()[-1]
    assert name.startswith("batch-be-") and "submitted to batch in us-east-1" in err
    job = _moto_job(_job_id(clients, name))
    job.job_stopped = False
    job.status = "RUNNING"
    code, out, err = run_cli(monkeypatch, capsys, "status", name)
    assert code == 0, err
    assert "running" in out
    code, out, err = run_cli(monkeypatch, capsys, "stop", name)
    assert code == 0, err
    assert job.stop and job.job_stopped_reason == STOP_REASON  # moto's record of our TerminateJob


def test_the_cli_refuses_a_missing_queue_with_exit_2(clients, tmp_path, monkeypatch, capsys):
    from cli_harness import run_cli

    path = tmp_path / "job.yaml"
    path.write_text(BATCH.replace("instance: {type: inf2.xlarge}", "instance: {type: inf2.48xlarge}"))
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(path))
    assert code == 2 and "orchestrator-inf2-48xlarge" in err and "infra deploy" in err


def test_a_missing_job_definition_is_an_input_error_before_anything_is_sent(clients, backend):
    """QA: SubmitJob's ClientException for a missing job definition read as a backend failure
    (exit 1); it is bad input naming infra deploy, checked before the upload and SubmitJob."""
    calls = Calls(clients["batch"], clients["s3"])
    prepared = _prepared(**{"batch.job_definition": "orchestrator-neuron-9chip"})
    with pytest.raises(InputError) as info:
        backend.submit(prepared)
    assert "no active AWS Batch job definition 'orchestrator-neuron-9chip'" in info.value.message
    assert "infra deploy" in info.value.hint
    assert not calls.named("SubmitJob") and not calls.named("PutObject")
    assert backend.ledger.get(prepared.job_name).status == "planned"


def test_status_of_a_job_refused_for_a_missing_queue_says_what_the_ledger_recorded(clients, tmp_path, monkeypatch,
                                                                                  capsys):
    """QA: the queue named in the ledger does not exist, so ListJobs failed with a
    ClientException (exit 1); the queue holds no job, and status says the submit never created it."""
    from cli_harness import run_cli

    path = tmp_path / "job.yaml"
    path.write_text(BATCH.replace("instance: {type: inf2.xlarge}", "instance: {type: inf2.48xlarge}"))
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(path))
    assert code == 2
    name = _prepared(**{"instance.type": "inf2.48xlarge"}).job_name
    code, out, err = run_cli(monkeypatch, capsys, "status", name)
    assert code == 2 and "planned (never created: no AWS Batch job queue" in err, err
    assert BatchBackend(clients["batch"], clients["s3"], clients["logs"], ledger=Ledger()).job_names("batch-be") == []


def test_status_from_another_machine_finds_a_batch_job(clients, tmp_path, monkeypatch, capsys):
    """QA: with a fresh ORCHESTRATOR_HOME, a name the ledger does not know was looked for in
    SageMaker only; AWS Batch in the same region is asked next."""
    from cli_harness import run_cli

    path = tmp_path / "job.yaml"
    path.write_text(BATCH)
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(path))
    assert code == 0, err
    name = out.strip().splitlines()[-1]
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path / "another-machine"))
    code, out, err = run_cli(monkeypatch, capsys, "status", name)
    assert code == 0, err
    assert name in out and "inf2.xlarge" in out
    code, out, err = run_cli(monkeypatch, capsys, "status", "batch-be-nope")
    assert code == 2 and "SageMaker or AWS Batch" in err
