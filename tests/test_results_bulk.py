"""results --sweep: a sweep's ended jobs are read in bulk with the listing (SageMaker's Search,
100 jobs a call), not described one by one; jobs the bulk read misses or shows in flight are
described on their own; the rows are the same either way (issue 35)."""

from __future__ import annotations

from types import SimpleNamespace

import boto3
import pytest
from test_results import (
    BUCKET,
    PREFIX,
    _client_error,
    _sweep_job,
    by_job,
    create_job,
    prices,  # noqa: F401  (a fixture)
    put_results,
    results_doc,
)

from orchestrator import results as res
from orchestrator.backends import registry
from orchestrator.backends.sagemaker import SageMakerBackend


def recorded(client) -> list[tuple[str, str | None]]:
    """(operation, TrainingJobName or Key) of every request `client` sends, as sent."""
    sent: list[tuple[str, str | None]] = []

    def record(params, model, **_):
        sent.append((model.name, params.get("TrainingJobName") or params.get("Key")))

    client.meta.events.register("before-parameter-build.*.*", record)
    return sent


def backends_on(sagemaker):
    """`collect`'s backend_for: SageMaker on `sagemaker`, any other backend as `registry` builds it."""
    def backend_for(name: str, region: str):
        if name != "sagemaker":
            return registry.create(name, region=region)
        return SageMakerBackend(sagemaker, boto3.client("s3", region_name=region),
                                boto3.client("logs", region_name=region))

    return backend_for


class NoSearch:
    """A SageMaker client without the sagemaker:Search grant."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        return getattr(self._client, name)

    def search(self, **kwargs):
        raise _client_error("AccessDeniedException", 400, "Search")


@pytest.fixture
def sweep(moto_server, prices):  # noqa: F811  (the fixture)
    """A sweep of six SageMaker jobs: ended with results (one spot, one failed), ended without
    (stopped), in flight with a heartbeat, in flight without results. (sweep id, jobs by role)."""
    s3 = boto3.client("s3", region_name="us-east-1")
    sm = boto3.client("sagemaker", region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    sweep_id, _ = _sweep_job("bulk", "0badcafe")
    jobs = {role: _sweep_job("bulk", "0badcafe", f"t0000000{i}")[1]
            for i, role in enumerate(("spot", "failed", "stopped", "heartbeat", "starting", "done"))}
    create_job(sm, jobs["spot"], spot=True, billable=40, training=100)
    create_job(sm, jobs["failed"], status="Failed", failure="AlgorithmError: loss is NaN")
    create_job(sm, jobs["stopped"], status="Stopped", billable=12)
    create_job(sm, jobs["heartbeat"], status="InProgress")
    create_job(sm, jobs["starting"], status="InProgress")
    create_job(sm, jobs["done"], billable=300, training=300)
    for role in ("spot", "failed", "heartbeat", "done"):
        doc = results_doc(jobs[role], sweep=sweep_id, status={"failed": "failed", "heartbeat": "running"}.get(role,
                                                                                                          "completed"))
        put_results(s3, jobs[role], doc)
    return sweep_id, jobs


def _collect(sweep_id: str, sagemaker, workers: int = 4):
    s3 = boto3.client("s3", region_name="us-east-1")
    s3_sent = recorded(s3)
    collection = res.collect(PREFIX, sweep=sweep_id, region="us-east-1", s3=s3, workers=workers,
                             backend_for=backends_on(sagemaker))
    return collection, s3_sent


def test_a_sweeps_ended_jobs_are_read_in_bulk_and_only_those_in_flight_described(sweep, monkeypatch):
    sweep_id, jobs = sweep
    sm = boto3.client("sagemaker", region_name="us-east-1")
    sent = recorded(sm)
    bulk, s3_sent = _collect(sweep_id, sm)
    described = sorted(job for op, job in sent if op == "DescribeTrainingJob")
    # One listing and one search for the six; a describe for each job still in flight only.
    assert sorted(op for op, _ in sent if op != "DescribeTrainingJob") == ["ListTrainingJobs", "Search"]
    assert described == sorted([jobs["heartbeat"], jobs["starting"]])
    # One GET per results object, nothing else per job.
    assert sorted(key for op, key in s3_sent if op == "GetObject") == sorted(
        f"jobs/results/{jobs[r]}/results.json" for r in ("spot", "failed", "heartbeat", "done"))
    assert [op for op, _ in s3_sent if op != "GetObject"] == ["ListObjectsV2"]

    # The same rows as describing every job on its own (the way before the bulk read).
    monkeypatch.setattr(SageMakerBackend, "describe_all", lambda self, containing: None)
    sent.clear()
    each, _ = _collect(sweep_id, sm)
    assert sorted(job for op, job in sent if op == "DescribeTrainingJob") == sorted(jobs.values())
    assert each.rows == bulk.rows
    rows = by_job(bulk)
    assert rows[jobs["spot"]].spot and rows[jobs["spot"]].billable_s == 40 and rows[jobs["spot"]].spot_savings == 0.6
    assert rows[jobs["failed"]].status == "failed" and "AlgorithmError: loss is NaN" in rows[jobs["failed"]].note
    assert rows[jobs["stopped"]].status == "stopped" and rows[jobs["stopped"]].billable_s == 12
    assert rows[jobs["starting"]].status == "running" and rows[jobs["done"]].training_s == 300


def test_without_the_search_grant_every_job_is_described_and_the_rows_are_the_same(sweep):
    sweep_id, jobs = sweep
    sm = boto3.client("sagemaker", region_name="us-east-1")
    bulk, _ = _collect(sweep_id, sm, workers=1)
    sent = recorded(sm)
    refused, _ = _collect(sweep_id, NoSearch(sm), workers=1)
    assert sorted(job for op, job in sent if op == "DescribeTrainingJob") == sorted(jobs.values())
    assert refused.rows == bulk.rows and not refused.errors


def test_a_job_the_bulk_read_misses_is_described_not_dropped(sweep, monkeypatch):
    """The search index may lag behind a job: one it does not return is asked on its own."""
    sweep_id, jobs = sweep
    real = SageMakerBackend.describe_all

    def lagging(self, containing):
        found = real(self, containing)
        found.pop(jobs["done"])
        found.pop(jobs["stopped"])
        return found

    monkeypatch.setattr(SageMakerBackend, "describe_all", lagging)
    sm = boto3.client("sagemaker", region_name="us-east-1")
    sent = recorded(sm)
    rows = by_job(_collect(sweep_id, sm)[0])
    assert sorted(job for op, job in sent if op == "DescribeTrainingJob") == sorted(
        jobs[r] for r in ("done", "stopped", "heartbeat", "starting"))
    assert set(rows) == set(jobs.values())
    assert rows[jobs["done"]].billable_s == 300 and rows[jobs["stopped"]].status == "stopped"


class Pages:
    """A SageMaker client whose Search answers `pages` in turn, recording what it was asked."""

    meta = SimpleNamespace(region_name="us-east-1")

    def __init__(self, *pages):
        self.pages = list(pages)
        self.asked: list[dict] = []

    def search(self, **kwargs):
        self.asked.append(kwargs)
        return self.pages.pop(0)


def _record(name: str, status: str, **more) -> dict:
    return {"TrainingJob": {"TrainingJobName": name, "TrainingJobStatus": status,
                            "ResourceConfig": {"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1}, **more}}


def test_describe_all_asks_search_for_the_names_100_a_page_and_follows_every_page():
    client = Pages({"Results": [_record("s-1", "Completed", BillableTimeInSeconds=50, TrainingTimeInSeconds=100,
                                        EnableManagedSpotTraining=True),
                                _record("s-2", "Failed", FailureReason="CapacityError: none")], "NextToken": "p2"},
                   {"Results": [_record("s-3", "InProgress", SecondaryStatus="Training"),
                                _record("other", "Completed")]})
    found = SageMakerBackend(client, None, None).describe_all("s-")
    expression = {"Filters": [{"Name": "TrainingJobName", "Operator": "Contains", "Value": "s-"}]}
    first = {"Resource": "TrainingJob", "MaxResults": 100, "SortBy": "LastModifiedTime", "SortOrder": "Descending",
             "SearchExpression": expression}
    assert client.asked == [first, {**first, "NextToken": "p2"}]
    assert sorted(found) == ["s-1", "s-2", "s-3"]  # a record whose name does not contain the needle is not one
    assert (found["s-1"].status, found["s-1"].billable_seconds, found["s-1"].spot) == ("completed", 50, True)
    assert found["s-2"].failure_reason == "CapacityError: none" and found["s-3"].status == "running"
    assert [s.terminal for s in (found["s-1"], found["s-2"], found["s-3"])] == [True, True, False]


def test_a_refresh_reads_a_page_more_than_its_jobs_fill_the_most_recently_modified_first():
    """A sweep's refresh (`statuses`) of 12 jobs in flight reads 2 pages of Search at most, however
    many jobs of the sweep have ended before: the jobs that ended since the last refresh are the
    most recently modified; one past the pages read is described, not lost."""
    names = [f"nightly-1a2b3c4d-t{i:02d}" for i in range(12)]
    page = lambda few, token=None: {"Results": [_record(n, "Completed") for n in few],  # noqa: E731
                                    **({"NextToken": token} if token else {})}
    client = Pages(page(names[:6], "p2"), page(names[6:9] + ["nightly-1a2b3c4d-old"], "p3"), page(names[9:], "p4"))
    ended = SageMakerBackend(client, None, None)._ended_in_bulk(names)
    assert len(client.asked) == 2 and client.asked[0]["SortBy"] == "LastModifiedTime"
    assert client.asked[0]["SearchExpression"]["Filters"][0]["Value"] == "nightly-1a2b3c4d-t"
    assert sorted(ended) == names[:9]  # the old job is not one asked about; the last three are described


def test_the_other_backends_have_no_bulk_read():
    assert registry.create("local").describe_all("x") is None


def test_the_commands_clients_share_one_session_per_region(sweep, monkeypatch):
    """The store's S3 client and every cloud backend's clients come from one boto3 Session: a
    session loads each service's model once (the S3 model was loaded three times)."""
    from orchestrator import aws

    real, made = aws.client, []

    def client(service, region=None, *, config=None, session=None):
        made.append((service, region, id(session) if session is not None else None))
        return real(service, region, config=config, session=session)

    monkeypatch.setattr(aws, "client", client)
    sweep_id, jobs = sweep
    rows = by_job(res.collect(PREFIX, sweep=sweep_id, region="us-east-1"))
    assert set(rows) == set(jobs.values())
    assert sorted(service for service, _, _ in made) == ["batch", "logs", "logs", "s3", "s3", "s3", "sagemaker"]
    assert len({session for _, _, session in made}) == 1 and None not in {s for _, _, s in made}
    assert {region for _, region, _ in made} == {"us-east-1"}
