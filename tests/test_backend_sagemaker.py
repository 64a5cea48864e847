"""The SageMaker backend against a loopback moto server (and botocore's Stubber where moto
lacks an API or cannot produce an error). Assertions are on what WE sent and recorded."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import hashlib
import time
import types
from pathlib import Path

import boto3
import moto_shim
import pytest
from aws_calls import Calls
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from botocore.stub import Stubber

from orchestrator import aws, backends, errors, request, spec
from orchestrator.backends.sagemaker.backend import LOG_GROUP, SageMakerBackend, host_of, status_of, translate
from orchestrator.errors import BackendError, InputError
from orchestrator.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "vit-trn1-2xlarge.yaml"
REGION = "us-east-1"
ACCOUNT = "123456789012"
NOW = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.timezone.utc)


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def clients(moto_server):
    config = Config(retries={"mode": "standard", "max_attempts": 1})
    made = {name: boto3.client(name, region_name=REGION, config=config) for name in ("sagemaker", "s3", "logs")}
    made["s3"].create_bucket(Bucket="orchestrator-example-bucket")
    return made


@pytest.fixture
def calls(clients):
    return Calls(*clients.values())


@pytest.fixture
def ledger(orch_home):
    return Ledger()


@pytest.fixture
def slept():
    return []


@pytest.fixture
def backend(clients, ledger, slept):
    return SageMakerBackend(clients["sagemaker"], clients["s3"], clients["logs"], ledger=ledger,
                            sleep=slept.append, poll_seconds=7)


@pytest.fixture
def prepared():
    loaded = spec.with_overrides(spec.load(CONFIG), {
        "max_retry_attempts": 2,
        "environment": {"MY_FLAG": "1"},
    })
    return request.prepare(loaded)


def moto_job(name: str):
    """moto's in-process record of a training job (the server runs in this process)."""
    return moto_shim.sagemaker_jobs(REGION, ACCOUNT)[name]


def moto_jobs() -> dict:
    return moto_shim.sagemaker_jobs(REGION, ACCOUNT)


def stubbed(service: str):
    client = boto3.client(service, region_name=REGION, config=Config(retries={"mode": "standard", "max_attempts": 1}))
    return client, Stubber(client)


def client_error(code: str, message: str, status: int = 400, operation: str = "CreateTrainingJob") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message},
                        "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": 0}}, operation)


# --- submit ----------------------------------------------------------------------------------


def test_submit_sends_our_request_and_writes_the_ledger(backend, prepared, calls, clients, ledger):
    result = backend.submit(prepared)

    assert result.created and result.job_name == prepared.job_name
    assert result.arn == f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{prepared.job_name}"
    sent = calls.named("CreateTrainingJob")
    assert sent == [prepared.request]
    # The fields moto drops from its own copy are in what we sent.
    assert sent[0]["Environment"]["MY_FLAG"] == "1"
    assert sent[0]["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    assert {"Key": "orchestrator:spec-hash", "Value": prepared.spec_hash} in sent[0]["Tags"]

    entry = ledger.get(prepared.job_name)
    assert (entry.status, entry.backend, entry.region) == ("submitted", "sagemaker", REGION)
    assert entry.spec_hash == prepared.spec_hash
    assert entry.request == prepared.request

    bucket, key = prepared.source_uri[5:].split("/", 1)
    obj = clients["s3"].get_object(Bucket=bucket, Key=key)
    assert obj["Body"].read() == prepared.archive
    assert obj["Metadata"] == {"sha256": prepared.archive_sha256}
    put = calls.named("PutObject")[0]
    assert put["IfNoneMatch"] == "*"
    assert base64.b64decode(put["ChecksumSHA256"]) == hashlib.sha256(prepared.archive).digest()


def test_intent_is_written_before_the_create_call(backend, prepared, clients, ledger):
    seen = []
    clients["sagemaker"].meta.events.register(
        "before-call.sagemaker.CreateTrainingJob",
        lambda **_: seen.append(ledger.get(prepared.job_name)))
    backend.submit(prepared)
    assert seen[0] is not None and seen[0].status == "submitting"
    assert seen[0].request == prepared.request


def test_a_failed_source_upload_leaves_the_job_planned_and_a_later_submit_creates_it(backend, prepared, clients,
                                                                                     calls, ledger):
    bucket = prepared.source_uri[5:].split("/", 1)[0]
    s3 = clients["s3"]
    for obj in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
        s3.delete_object(Bucket=bucket, Key=obj["Key"])
    s3.delete_bucket(Bucket=bucket)
    with pytest.raises(BackendError, match="PutObject|HeadObject"):
        backend.submit(prepared)
    entry = ledger.get(prepared.job_name)
    assert entry.status == "planned" and entry.detail
    assert calls.named("CreateTrainingJob") == []
    s3.create_bucket(Bucket=bucket)
    assert backend.submit(prepared).created
    assert ledger.get(prepared.job_name).status == "submitted"


def test_source_archive_is_uploaded_once_per_content_hash(backend, prepared, calls):
    assert backend.upload_source(prepared) is True
    assert backend.upload_source(prepared) is False
    assert len(calls.named("PutObject")) == 1
    # A second job with different content gets its own key; the first is not rewritten.
    other = request.prepare(spec.with_overrides(prepared.spec, {"training.steps": 600}))
    assert other.source_uri != prepared.source_uri
    backend.submit(other)
    backend.submit(prepared)
    keys = [p["Key"] for p in calls.named("PutObject")]
    assert sorted(keys) == sorted({prepared.source_uri.split("/", 3)[3], other.source_uri.split("/", 3)[3]})


def test_a_source_uri_outside_s3_is_refused_before_any_call(backend, prepared, calls):
    import dataclasses

    where = dataclasses.replace(prepared.locations, source="file:///tmp/jobs/source/0123/sourcedir.tar.gz")
    local = dataclasses.replace(prepared, locations=where)
    with pytest.raises(InputError, match="not an s3://bucket/key URI") as info:
        backend.upload_source(local)
    assert "output: {uri: s3://my-bucket/jobs}" in info.value.hint
    assert calls.named("HeadObject") == calls.named("PutObject") == []


def test_a_concurrent_upload_of_the_same_archive_is_not_an_error(backend, prepared, clients, calls):
    bucket, key = prepared.source_uri[5:].split("/", 1)
    head = clients["s3"].head_object

    def head_then_someone_else_uploads(**kw):
        try:
            return head(**kw)
        finally:  # between our HeadObject (404) and our PutObject
            boto3.client("s3", region_name=REGION).put_object(Bucket=bucket, Key=key, Body=prepared.archive)

    backend.s3 = types.SimpleNamespace(head_object=head_then_someone_else_uploads, put_object=clients["s3"].put_object)
    assert backend.upload_source(prepared) is False
    assert calls.named("PutObject")[0]["IfNoneMatch"] == "*"  # our conditional put was refused, harmlessly


def test_a_head_answered_403_is_maybe_absent_and_the_conditional_put_decides(backend, prepared, clients, calls):
    """Without s3:ListBucket S3 answers a missing key with 403: the upload goes ahead as a
    conditional put (IfNoneMatch), which writes only when the key is absent."""
    forbidden = ClientError({"Error": {"Code": "403", "Message": "Forbidden"},
                             "ResponseMetadata": {"HTTPStatusCode": 403}}, "HeadObject")

    def head_without_list_bucket(**kw):
        raise forbidden

    backend.s3 = types.SimpleNamespace(head_object=head_without_list_bucket, put_object=clients["s3"].put_object)
    assert backend.upload_source(prepared) is True  # it was absent: uploaded
    assert calls.named("PutObject")[0]["IfNoneMatch"] == "*"
    assert backend.upload_source(prepared) is False  # present now: the conditional put is refused, harmlessly

    def put_denied(**kw):
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                           "ResponseMetadata": {"HTTPStatusCode": 403}}, "PutObject")

    backend.s3 = types.SimpleNamespace(head_object=head_without_list_bucket, put_object=put_denied)
    with pytest.raises(BackendError, match="PutObject: access denied") as info:
        backend.upload_source(prepared)
    assert "s3:PutObject" in info.value.hint


def test_resubmitting_a_submitted_job_creates_nothing(backend, prepared, calls):
    assert backend.submit(prepared).created
    again = backend.submit(prepared)
    assert not again.created and again.job_name == prepared.job_name
    assert len(calls.named("CreateTrainingJob")) == 1


def test_crash_after_intent_before_create_creates_exactly_one_job(backend, prepared, clients, calls, ledger):
    def die(**_):
        raise KeyboardInterrupt  # the process is killed: no except clause of ours runs

    clients["sagemaker"].meta.events.register("before-call.sagemaker.CreateTrainingJob", die)
    with pytest.raises(KeyboardInterrupt):
        backend.submit(prepared)
    assert ledger.get(prepared.job_name).status == "submitting"
    assert prepared.job_name not in moto_jobs()

    clients["sagemaker"].meta.events.unregister("before-call.sagemaker.CreateTrainingJob", die)
    result = backend.submit(prepared)
    assert result.created
    assert ledger.get(prepared.job_name).status == "submitted"
    assert len(calls.named("PutObject")) == 1  # the archive from the first run was kept


def test_crash_after_create_is_reconciled_not_duplicated(backend, prepared, clients, calls, ledger):
    def die(**_):
        raise KeyboardInterrupt  # killed after SageMaker accepted the job, before the ledger said so

    clients["sagemaker"].meta.events.register("after-call.sagemaker.CreateTrainingJob", die)
    with pytest.raises(KeyboardInterrupt):
        backend.submit(prepared)
    clients["sagemaker"].meta.events.unregister("after-call.sagemaker.CreateTrainingJob", die)
    assert ledger.get(prepared.job_name).status == "submitting"
    assert prepared.job_name in moto_jobs()

    # The next run (a new process: new ledger handle, new backend) adopts it.
    fresh = SageMakerBackend(clients["sagemaker"], clients["s3"], clients["logs"], ledger=Ledger())
    result = fresh.submit(prepared)
    assert not result.created
    assert result.arn == moto_job(prepared.job_name).arn
    assert len(calls.named("CreateTrainingJob")) == 1
    assert Ledger().get(prepared.job_name).status == "submitted"


def test_a_foreign_job_under_our_name_is_refused(backend, prepared, clients, ledger):
    foreign = copy.deepcopy(prepared.request)
    foreign["Tags"] = [{"Key": "owner", "Value": "someone-else"}]
    clients["sagemaker"].create_training_job(**foreign)
    with pytest.raises(BackendError, match="was not created from this spec") as err:
        backend.submit(prepared)
    assert "change the spec's name" in err.value.hint
    # Nothing of ours exists: the row is back to planned, so it does not look in flight.
    assert ledger.get(prepared.job_name).status == "planned"


def test_resource_in_use_on_create_reconciles_our_own_job(ledger, prepared, clients):
    client, stub = stubbed("sagemaker")
    name = prepared.job_name
    arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name}"
    not_found = {"service_error_code": "ValidationException", "service_message": "Requested resource not found."}
    stub.add_client_error("describe_training_job", **not_found, expected_params={"TrainingJobName": name})
    stub.add_client_error("create_training_job", service_error_code="ResourceInUse",
                          service_message=f"Training job {name} already exists", expected_params=prepared.request)
    stub.add_response("describe_training_job", _described(name, "InProgress", "Starting"),
                      expected_params={"TrainingJobName": name})
    stub.add_response("list_tags", {"Tags": [{"Key": "orchestrator:spec-hash", "Value": prepared.spec_hash}]},
                      expected_params={"ResourceArn": arn})
    with stub:
        result = SageMakerBackend(client, clients["s3"], clients["logs"], ledger=ledger).submit(prepared)
    stub.assert_no_pending_responses()
    assert (result.created, result.arn) == (False, arn)
    assert ledger.get(name).status == "submitted"


def test_a_refused_create_returns_the_row_to_planned_and_a_retry_creates(ledger, prepared, clients, calls):
    client, stub = stubbed("sagemaker")
    name = prepared.job_name
    stub.add_client_error("describe_training_job", service_error_code="ValidationException",
                          service_message="Requested resource not found.")
    stub.add_client_error("create_training_job", service_error_code="ResourceLimitExceeded",
                          service_message="The account-level service limit 'ml.trn1.2xlarge for training job "
                          "usage' is 0 Instances", http_status_code=400)
    with stub, pytest.raises(BackendError) as err:
        SageMakerBackend(client, clients["s3"], clients["logs"], ledger=ledger).submit(prepared)
    assert err.value.code == "ResourceLimitExceeded"
    assert "ml.trn1.2xlarge for training job usage" in err.value.hint and REGION in err.value.hint
    entry = ledger.get(name)
    assert entry.status == "planned" and "quota" in entry.detail

    # After the quota is raised, the same command creates the job.
    result = SageMakerBackend(clients["sagemaker"], clients["s3"], clients["logs"], ledger=ledger).submit(prepared)
    assert result.created
    assert ledger.get(name).status == "submitted"


def test_an_ambiguous_create_failure_keeps_the_intent(ledger, prepared, clients):
    client, stub = stubbed("sagemaker")
    stub.add_client_error("describe_training_job", service_error_code="ValidationException",
                          service_message="Requested resource not found.")
    stub.add_client_error("create_training_job", service_error_code="InternalFailure",
                          service_message="oops", http_status_code=500)
    with stub, pytest.raises(BackendError, match="InternalFailure"):
        SageMakerBackend(client, clients["s3"], clients["logs"], ledger=ledger).submit(prepared)
    # The job may exist: the row stays in submitting, and the next submit asks SageMaker first.
    assert ledger.get(prepared.job_name).status == "submitting"


def test_a_row_planned_ahead_is_submitted_and_keeps_its_sweep_ids(backend, prepared, ledger, calls):
    ledger.record_intent(prepared.job_name, backend="sagemaker", region=REGION, spec_hash=prepared.spec_hash,
                         request=prepared.request, status="planned", sweep_id="instances", trial_id="t3")
    assert backend.submit(prepared).created
    entry = ledger.get(prepared.job_name)
    assert (entry.status, entry.sweep_id, entry.trial_id) == ("submitted", "instances", "t3")
    assert len(calls.named("CreateTrainingJob")) == 1


def test_an_unreachable_service_during_submit_keeps_the_intent(ledger, prepared, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    backend = backends.create("sagemaker", region=REGION, ledger=ledger)
    with pytest.raises(BackendError, match="DescribeTrainingJob: cannot reach the AWS endpoint"):
        backend.submit(prepared)
    assert ledger.get(prepared.job_name).status == "submitting"


def test_a_job_name_reused_by_another_spec_is_refused(backend, prepared, ledger):
    ledger.record_intent(prepared.job_name, backend="sagemaker", region=REGION, spec_hash="0" * 64, request={})
    with pytest.raises(InputError, match="already in the ledger for another spec"):
        backend.submit(prepared)


# --- status ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("primary", "secondary", "ours"), [
    ("InProgress", "Pending", "pending"),
    ("InProgress", "Starting", "starting"),
    ("InProgress", "LaunchingMLInstances", "starting"),
    ("InProgress", "PreparingTrainingStack", "starting"),
    ("InProgress", "Downloading", "starting"),
    ("InProgress", "DownloadingTrainingImage", "starting"),
    ("InProgress", "Interrupted", "starting"),
    ("InProgress", "Restarting", "starting"),
    ("InProgress", "Training", "running"),
    ("InProgress", "Uploading", "running"),
    ("InProgress", None, "running"),
    ("Stopping", "Stopping", "stopping"),
    ("Completed", "Completed", "completed"),
    ("Failed", "Failed", "failed"),
    ("Stopped", "MaxRuntimeExceeded", "stopped"),
    ("Stopped", "Stopped", "stopped"),
])
def test_status_table(primary, secondary, ours):
    assert status_of(primary, secondary) == ours


def test_an_unknown_sagemaker_status_is_reported():
    with pytest.raises(BackendError, match="unknown training job status 'Paused'"):
        status_of("Paused", None)


def test_simulated_transitions_show_in_status_and_the_ledger(backend, prepared, ledger):
    backend.submit(prepared)
    job = moto_job(prepared.job_name)

    job.training_job_status, job.secondary_status = "InProgress", "Downloading"
    got = backend.status(prepared.job_name)
    assert (got.status, got.secondary, got.terminal) == ("starting", "Downloading", False)
    assert ledger.get(prepared.job_name).status == "submitted"

    job.secondary_status = "Training"
    got = backend.status(prepared.job_name)
    assert (got.status, got.secondary) == ("running", "Training")
    assert ledger.get(prepared.job_name).status == "running"

    job.training_job_status, job.secondary_status = "Failed", "Failed"
    job.failure_reason = "AlgorithmError: NEFF is invalid"
    job.billable_time_in_seconds, job.training_time_in_seconds = 312, 340
    got = backend.status(prepared.job_name)
    assert (got.status, got.failure_reason, got.billable_seconds) == ("failed", "AlgorithmError: NEFF is invalid", 312)
    assert got.training_seconds == 340 and got.terminal
    assert (got.instance_type, got.instance_count, got.spot) == ("ml.trn1.2xlarge", 1, False)
    assert got.tags["orchestrator:spec-hash"] == prepared.spec_hash
    assert got.tags["team"] == "vision"
    assert got.output_uri == f"s3://orchestrator-example-bucket/jobs/{prepared.job_name}/output/model.tar.gz"
    entry = ledger.get(prepared.job_name)
    assert (entry.status, entry.detail) == ("failed", "AlgorithmError: NEFF is invalid")

    # A terminal row is not moved back by a later, stale read.
    job.training_job_status, job.secondary_status = "InProgress", "Training"
    backend.status(prepared.job_name)
    assert ledger.get(prepared.job_name).status == "failed"


def test_status_of_spot_job_reports_savings(ledger):
    client, stub = stubbed("sagemaker")
    described = _described("spot-1", "Completed", "Completed")
    described.update(EnableManagedSpotTraining=True, BillableTimeInSeconds=30, TrainingTimeInSeconds=100)
    stub.add_response("describe_training_job", described, {"TrainingJobName": "spot-1"})
    stub.add_response("list_tags", {"Tags": [], "NextToken": "t1"}, {"ResourceArn": described["TrainingJobArn"]})
    stub.add_response("list_tags", {"Tags": [{"Key": "a", "Value": "b"}]},
                      {"ResourceArn": described["TrainingJobArn"], "NextToken": "t1"})
    with stub:
        got = SageMakerBackend(client, None, None, ledger=ledger).status("spot-1")
    assert got.spot and got.spot_savings == pytest.approx(0.7)
    assert got.tags == {"a": "b"}  # both pages read
    assert got.created == NOW.timestamp() and got.ended == NOW.timestamp() + 600


def test_status_of_an_unknown_job_is_an_input_error(backend):
    with pytest.raises(InputError, match="no SageMaker training job named nope in us-east-1") as err:
        backend.status("nope")
    assert err.value.exit_code == 2
    assert "--region" in err.value.hint


# --- logs --------------------------------------------------------------------------------------


def _seed_logs(logs, job: str, hosts: dict[str, list[tuple[int, str]]], group_exists: bool = False) -> None:
    if not group_exists:
        logs.create_log_group(logGroupName=LOG_GROUP)
    for host, events in hosts.items():
        stream = f"{job}/{host}-1700000000"
        try:
            logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceAlreadyExistsException":
                raise
        logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream,
                            logEvents=[{"timestamp": ts, "message": msg} for ts, msg in events])


def _recent_ms() -> int:
    # CloudWatch (and moto) drop events older than 14 days: seed relative to now.
    return int(time.time() * 1000) - 60_000


def test_logs_merge_every_host_in_time_order(backend, prepared, clients):
    backend.submit(prepared)
    t = _recent_ms()
    _seed_logs(clients["logs"], prepared.job_name, {
        "algo-1": [(t, "rank 0 compile"), (t + 20, "step 10 loss=6.9"), (t + 40, "step 20 loss=6.5\n")],
        "algo-2": [(t + 10, "rank 2 compile"), (t + 30, "step 10 loss=6.9")],
    })
    # Another job whose name shares a prefix must not leak in.
    _seed_logs(clients["logs"], prepared.job_name + "0", {"algo-1": [(t + 5, "not ours")]}, group_exists=True)

    lines = list(backend.logs(prepared.job_name))
    assert lines == [
        "[algo-1] rank 0 compile",
        "[algo-2] rank 2 compile",
        "[algo-1] step 10 loss=6.9",
        "[algo-2] step 10 loss=6.9",
        "[algo-1] step 20 loss=6.5",
    ]


def test_logs_before_the_job_logged_anything_are_empty(backend, prepared):
    backend.submit(prepared)
    assert list(backend.logs(prepared.job_name)) == []


def test_has_logs_and_the_note_without_them_follow_the_log_streams(backend, prepared, clients):
    backend.submit(prepared)
    assert not backend.has_logs(prepared.job_name)
    assert backend.no_logs(prepared.job_name) == f"no log streams for {prepared.job_name} in {LOG_GROUP}"
    _seed_logs(clients["logs"], prepared.job_name, {"algo-1": [(_recent_ms(), "starting")]})
    assert backend.has_logs(prepared.job_name)
    assert backend.no_logs(prepared.job_name) == f"no log events for {prepared.job_name} in {LOG_GROUP}"


def test_describe_reads_without_tags_or_ledger_and_says_none_for_an_unknown_job(ledger):
    client, stub = stubbed("sagemaker")
    described = _described("d-1", "InProgress", "Downloading")
    described.update(BillableTimeInSeconds=5)
    stub.add_response("describe_training_job", described, {"TrainingJobName": "d-1"})
    stub.add_client_error("describe_training_job", "ValidationException", "Requested resource not found")
    ledger.record_intent("d-1", backend="sagemaker", region=REGION, spec_hash="0" * 64, request={},
                         status="submitted")
    with stub:  # no ListTags: the stub would fail on an unexpected call
        backend = SageMakerBackend(client, None, None, ledger=ledger)
        got = backend.describe("d-1")
        assert backend.describe("d-2") is None
    assert got.status == "starting" and got.billable_seconds == 5 and got.tags == {}
    assert ledger.get("d-1").status == "submitted"  # nothing recorded


def test_job_names_in_flight_asks_for_jobs_in_progress_only(ledger):
    client, stub = stubbed("sagemaker")
    stub.add_response("list_training_jobs", {"TrainingJobSummaries": [], "NextToken": "n"},
                      {"NameContains": "demo", "MaxResults": 100, "StatusEquals": "InProgress"})
    stub.add_response("list_training_jobs", {"TrainingJobSummaries": [_summary("demo-1")]},
                      {"NameContains": "demo", "MaxResults": 100, "StatusEquals": "InProgress", "NextToken": "n"})
    stub.add_response("list_training_jobs", {"TrainingJobSummaries": [_summary("demo-1"), _summary("demo-2")]},
                      {"NameContains": "demo", "MaxResults": 100})
    with stub:
        backend = SageMakerBackend(client, None, None, ledger=ledger)
        assert backend.job_names("demo", in_flight=True) == ["demo-1"]
        assert backend.job_names("demo") == ["demo-1", "demo-2"]


def _summary(name: str) -> dict:
    return {"TrainingJobName": name, "TrainingJobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name}",
            "CreationTime": NOW, "TrainingJobStatus": "InProgress"}


def test_logs_of_an_unknown_job_is_an_input_error(backend):
    with pytest.raises(InputError, match="no SageMaker training job named ghost"):
        list(backend.logs("ghost"))


def test_logs_follow_polls_until_terminal_and_quiet(backend, prepared, clients, slept):
    backend.submit(prepared)
    job = moto_job(prepared.job_name)
    job.training_job_status, job.secondary_status = "InProgress", "Training"
    t = _recent_ms()
    _seed_logs(clients["logs"], prepared.job_name, {"algo-1": [(t, "first")]})

    def sleep(seconds):
        slept.append(seconds)
        if len(slept) == 1:  # while we wait, the job logs more (a new host too) and then ends
            _seed_logs(clients["logs"], prepared.job_name,
                       {"algo-1": [(t + 50, "third")], "algo-2": [(t + 40, "second")]}, group_exists=True)
            job.training_job_status, job.secondary_status = "Completed", "Completed"

    backend.sleep = sleep
    lines = list(backend.logs(prepared.job_name, follow=True))
    assert lines == ["[algo-1] first", "[algo-2] second", "[algo-1] third"]
    # poll, see the end, one last quiet read, stop
    assert slept == [7, 7]


def test_logs_pages_through_streams_and_events():
    logs, stub = stubbed("logs")
    sm, sm_stub = stubbed("sagemaker")
    sm_stub.add_response("describe_training_job", _described("j", "Completed", "Completed"), {"TrainingJobName": "j"})
    group = {"logGroupName": LOG_GROUP}
    stub.add_response("describe_log_streams", {"logStreams": [{"logStreamName": "j/algo-1-1"}], "nextToken": "n1"},
                      {**group, "logStreamNamePrefix": "j/"})
    stub.add_response("describe_log_streams", {"logStreams": [{"logStreamName": "j/algo-2-1"}]},
                      {**group, "logStreamNamePrefix": "j/", "nextToken": "n1"})
    s1 = {**group, "logStreamName": "j/algo-1-1", "startFromHead": True}
    s2 = {**group, "logStreamName": "j/algo-2-1", "startFromHead": True}
    # heapq.merge pulls the first event of each stream before the rest.
    stub.add_response("get_log_events", {"events": [{"timestamp": 1, "message": "a1"}], "nextForwardToken": "f1"}, s1)
    stub.add_response("get_log_events", {"events": [{"timestamp": 2, "message": "b1"}], "nextForwardToken": "g1"}, s2)
    stub.add_response("get_log_events", {"events": [{"timestamp": 3, "message": "a2"}], "nextForwardToken": "f2"},
                      {**s1, "nextToken": "f1"})
    stub.add_response("get_log_events", {"events": [], "nextForwardToken": "g1"}, {**s2, "nextToken": "g1"})
    stub.add_response("get_log_events", {"events": [], "nextForwardToken": "f2"}, {**s1, "nextToken": "f2"})
    with stub, sm_stub:
        lines = list(SageMakerBackend(sm, None, logs, ledger=None).logs("j"))
    assert lines == ["[algo-1] a1", "[algo-2] b1", "[algo-1] a2"]
    stub.assert_no_pending_responses()


def test_host_of_stream_names():
    assert host_of("job-1/algo-1-1700000000", "job-1") == "algo-1"
    assert host_of("job-1/algo-12-1700000000", "job-1") == "algo-12"
    assert host_of("job-1/algo-1", "job-1") == "algo-1"


# --- stop ----------------------------------------------------------------------------------------


def test_stop_calls_stop_training_job(ledger):
    client, stub = stubbed("sagemaker")
    stub.add_response("stop_training_job", {}, {"TrainingJobName": "job-1"})
    with stub:
        SageMakerBackend(client, None, None, ledger=ledger).stop("job-1")
    stub.assert_no_pending_responses()


def test_stop_of_a_finished_job_shows_sagemakers_reason(ledger):
    client, stub = stubbed("sagemaker")
    stub.add_client_error("stop_training_job", service_error_code="ValidationException",
                          service_message="The request was rejected because the training job is in status Completed.")
    with stub, pytest.raises(BackendError, match="in status Completed") as err:
        SageMakerBackend(client, None, None, ledger=ledger).stop("job-1")
    assert err.value.exit_code == 1


def test_stop_of_an_unknown_job_is_an_input_error(ledger):
    client, stub = stubbed("sagemaker")
    stub.add_client_error("stop_training_job", service_error_code="ResourceNotFound",
                          service_message="Requested resource not found.")
    with stub, pytest.raises(InputError, match="no SageMaker training job named job-9"):
        SageMakerBackend(client, None, None, ledger=ledger).stop("job-9")


# --- error translation -------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "message", "status", "wanted"), [
    ("AccessDeniedException", "User: arn:aws:iam::1:user/x is not authorized to perform: sagemaker:CreateTrainingJob",
     400, ["access denied", "sagemaker:CreateTrainingJob", "iam:PassRole", "`python -m orchestrator infra policy`"]),
    ("ResourceLimitExceeded", "The account-level service limit", 400,
     ["service quota", "ml.trn1.32xlarge for training job usage", "us-west-2", "Service Quotas"]),
    ("ResourceInUse", "already exists", 400, ["already exists", "unique per account and region"]),
    ("ValidationException", "1 validation error detected: Value 'x' at 'roleArn'", 400,
     ["1 validation error detected: Value 'x' at 'roleArn'", "`python -m orchestrator plan SPEC`"]),
    ("ThrottlingException", "Rate exceeded", 400, ["still throttled", "AWS_MAX_ATTEMPTS"]),
    ("ExpiredTokenException", "The security token included in the request is expired", 400,
     ["AWS rejected the credentials in us-west-2: ExpiredTokenException", "aws sso login"]),
    ("ServiceUnavailable", "try later", 503, ["failed in us-west-2: ServiceUnavailable", "rerunning is safe"]),
])
def test_client_errors_become_errors_with_hints(code, message, status, wanted):
    err = translate(client_error(code, message, status), operation="CreateTrainingJob", job_name="j",
                    region="us-west-2", instance_type="ml.trn1.32xlarge")
    assert isinstance(err, BackendError) and err.exit_code == 1
    text = f"{err.message}\n{err.hint}"
    for piece in wanted:
        assert piece in text


def test_access_denied_names_the_action_of_each_operation():
    err = translate(client_error("AccessDenied", "denied", 403, "GetLogEvents"), operation="GetLogEvents")
    assert "logs:GetLogEvents" in err.hint
    err = translate(client_error("403", "Forbidden", 403, "HeadObject"), operation="HeadObject")
    assert "s3:GetObject" in err.hint and "s3:ListBucket" in err.hint


def test_transport_errors_become_backend_errors():
    err = translate(NoCredentialsError(), operation="CreateTrainingJob")
    assert isinstance(err, BackendError) and "credentials" in err.message and "AWS_PROFILE" in err.hint
    err = translate(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), operation="ListTags")
    assert "cannot reach" in err.message and "AWS_ENDPOINT_URL" in err.hint


MOTO_500_PAGE = (
    "<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n<h1>Internal Server Error</h1>\n"
    "<p>The server encountered an internal error and was unable to complete your request. Either the server is\n"
    "overloaded or there is an error in the application.</p>\n" + "<p>" + "stack frame &lt;x&gt; " * 60 + "</p>\n")


def test_an_html_error_page_becomes_one_short_line():
    err = translate(client_error("500", MOTO_500_PAGE, 500, "DescribeTrainingJob"), operation="DescribeTrainingJob",
                    job_name="j", region=REGION)
    assert isinstance(err, BackendError) and err.exit_code == 1
    assert err.message.startswith("DescribeTrainingJob j failed in us-east-1: 500: 500 Internal Server Error: "
                                  "Internal Server Error The server encountered an internal error and was unable")
    assert "\n" not in err.message and not any(tag in err.message for tag in ("<p>", "<h1>", "<title>", "<html"))
    assert "stack frame <x> stack frame <x>" in err.message  # entities decoded
    assert "  " not in err.message and err.message.endswith("...")
    assert len(err.message) <= len("DescribeTrainingJob j failed in us-east-1: 500: ") + errors.MAX_SERVICE_MESSAGE


def test_service_text_is_kept_when_short_and_cut_when_long():
    assert errors.service_message("Value 'x' at 'roleArn' must be < 5\n  and > 2") == \
        "Value 'x' at 'roleArn' must be < 5 and > 2"  # not HTML: kept, whitespace collapsed
    long = errors.service_message("word " * 200)
    assert len(long) == errors.MAX_SERVICE_MESSAGE and long.startswith("word word") and long.endswith("...")


def test_an_html_500_from_the_endpoint_is_a_short_backend_error(ledger, monkeypatch):
    """The page as botocore parses it off the wire (JSON protocol: the raw body becomes the message)."""
    from botocore.awsrequest import AWSResponse

    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    built = backends.create("sagemaker", region=REGION, ledger=ledger)
    built.sm.meta.events.register("before-send.sagemaker.DescribeTrainingJob", lambda request, **_: AWSResponse(
        request.url, 500, {"Content-Type": "text/html"}, _Raw(MOTO_500_PAGE.encode())))
    with pytest.raises(BackendError) as err:
        built.status("job-1")
    assert "500 Internal Server Error: Internal Server Error The server encountered" in err.value.message
    assert "\n" not in err.value.message and "<p>" not in err.value.message and len(err.value.message) < 400
    assert err.value.http_status == 500


def test_an_unreachable_endpoint_is_a_clean_backend_error(ledger, monkeypatch):
    # A closed loopback port: the connection is refused at once.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    backend = backends.create("sagemaker", region=REGION, ledger=ledger)
    with pytest.raises(BackendError, match="cannot reach the AWS endpoint"):
        backend.status("job-1")


# --- clients and retries -----------------------------------------------------------------------


def test_factory_builds_clients_with_adaptive_retries(orch_home):
    backend = backends.create("sagemaker", region="eu-west-1")
    assert backend.region == "eu-west-1"
    for client in (backend.sm, backend.s3, backend.logs_client):
        assert client.meta.region_name == "eu-west-1"
        assert client.meta.config.retries == {"mode": "adaptive",
                                         "total_max_attempts": aws.DEFAULT_MAX_ATTEMPTS}


def test_factory_honours_the_users_retry_settings(orch_home, monkeypatch):
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "4")
    backend = backends.create("sagemaker", region=REGION)
    assert backend.sm.meta.config.retries == {"mode": "standard", "total_max_attempts": 4}
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "lots")
    with pytest.raises(InputError, match="AWS_MAX_ATTEMPTS"):
        backends.create("sagemaker", region=REGION)


def test_factory_passes_injected_clients_through(clients, ledger):
    backend = backends.create("sagemaker", region=REGION, sagemaker_client=clients["sagemaker"],
                              s3_client=clients["s3"], logs_client=clients["logs"], ledger=ledger)
    assert backend.sm is clients["sagemaker"] and backend.ledger is ledger


def test_factory_knows_local_and_refuses_others(orch_home):
    assert backends.create("local").name == "local"
    with pytest.raises(InputError, match="unknown backend 'k8s'"):
        backends.create("k8s")


def _throttle(times: int, seen: list):
    from botocore.awsrequest import AWSResponse

    def handler(request, **_):
        seen.append(request.url)
        if len(seen) <= times:
            body = b'{"__type": "ThrottlingException", "message": "Rate exceeded"}'
            return AWSResponse(request.url, 400, {"x-amzn-ErrorType": "ThrottlingException"}, _Raw(body))
        return None

    return handler


class _Raw:
    def __init__(self, body: bytes):
        self.body = body

    def stream(self, *_, **__):
        yield self.body


def test_throttling_is_retried_by_botocore(backend, prepared, ledger, monkeypatch):
    backend.submit(prepared)
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "4")
    monkeypatch.setattr("botocore.endpoint.time.sleep", lambda _: None)  # backoff without waiting
    built = backends.create("sagemaker", region=REGION, ledger=ledger)
    seen: list = []
    built.sm.meta.events.register("before-send.sagemaker.DescribeTrainingJob", _throttle(2, seen))
    assert built.status(prepared.job_name).status == "completed"
    assert len(seen) == 3

    always: list = []
    built.sm.meta.events.unregister("before-send.sagemaker.DescribeTrainingJob")
    built.sm.meta.events.register("before-send.sagemaker.DescribeTrainingJob", _throttle(99, always))
    with pytest.raises(BackendError, match="still throttled after 4 attempts") as err:
        built.status(prepared.job_name)
    assert err.value.code == "ThrottlingException"
    assert len(always) == 4


# --- helpers -----------------------------------------------------------------------------------


def _described(name: str, primary: str, secondary: str) -> dict:
    return {
        "TrainingJobName": name,
        "TrainingJobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name}",
        "TrainingJobStatus": primary,
        "SecondaryStatus": secondary,
        "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "img"},
        "ResourceConfig": {"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "ModelArtifacts": {"S3ModelArtifacts": f"s3://b/jobs/{name}/output/model.tar.gz"},
        "CreationTime": NOW,
        "TrainingEndTime": NOW + dt.timedelta(seconds=600),
    }


def test_an_unknown_job_is_unknown_job():
    missing = ClientError({"Error": {"Code": "ValidationException", "Message": "Requested resource not found"}},
                          "DescribeTrainingJob")
    error = translate(missing, operation="DescribeTrainingJob", job_name="x")
    assert isinstance(error, backends.UnknownJob) and error.exit_code == 2
