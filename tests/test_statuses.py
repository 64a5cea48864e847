"""`Backend.statuses`: the status of many jobs asked at once (issue 35, item 5). A sweep's
refresh asks each backend once about all of its jobs in flight; SageMaker reads the tags of
the jobs its ledger holds from their recorded requests (no ListTags) and describes them on a
few threads; AWS Batch finds a queue's jobs with one ListJobs listing and DescribeJobs of 100
ids a call. Each job's error stays its own; the ledger is used only on the calling thread."""

from __future__ import annotations

import os
import random
import threading
from collections import Counter

import boto3
import pytest
from aws_calls import Calls
from botocore.exceptions import ClientError
from sweep_fakes import Clock, FakeCloud, load, moto_backend
from test_backend_batch import QUEUE, _prepared, clients  # noqa: F401 - `clients` is a fixture

from orchestrator import sweep as sweeps
from orchestrator.backends import JobStatus, UnknownJob
from orchestrator.backends.batch.backend import BatchBackend
from orchestrator.backends.running import statuses
from orchestrator.backends.sagemaker import SageMakerBackend
from orchestrator.backends.sagemaker import backend as sagemaker_backend
from orchestrator.errors import BackendError
from orchestrator.ledger import Ledger
from orchestrator.names import TAG_JOB, TAG_SWEEP, TAG_TRIAL
from orchestrator.sweep.definition import key

GRID = "sweep: many\nbase: base.yaml\ngrid:\n  training.batch_size: [8, 16, 24, 32, 40, 48]\nconcurrency: 6\n"


def _fresh_sagemaker(ledger: Ledger, client=None) -> SageMakerBackend:
    """A backend as a new CLI process makes it: its own clients, nothing cached."""
    return SageMakerBackend(client or boto3.client("sagemaker", region_name="us-east-1"),
                            boto3.client("s3", region_name="us-east-1"),
                            boto3.client("logs", region_name="us-east-1"), ledger=ledger)


@pytest.fixture
def submitted(tmp_path, orch_home, bucket):
    """(ledger, definition, job names): six SageMaker jobs of a sweep submitted to moto."""
    ledger = Ledger()
    backend, _ = moto_backend(ledger, Counter())
    definition = sweeps.save(sweeps.plan(load(tmp_path, GRID)), ledger)
    runner = sweeps.Runner(definition, backend, ledger, sleep=lambda s: None, poll_seconds=0)
    runner.submit_ready()
    names = [e.job_name for e in ledger.entries(sweep_id=definition.sweep_id)]
    assert len(names) == 6 and {ledger.get(n).status for n in names} == {"submitted"}
    return ledger, definition, names


def test_a_fresh_process_refresh_asks_one_describe_per_job_and_no_listtags(submitted):
    ledger, definition, names = submitted
    backend = _fresh_sagemaker(ledger)
    calls = Calls(backend.client)
    runner = sweeps.Runner(definition, backend, ledger, sleep=lambda s: None, poll_seconds=0)
    runner.refresh()
    assert sorted(p["TrainingJobName"] for p in calls.named("DescribeTrainingJob")) == sorted(names)
    assert calls.named("ListTags") == []
    assert [c for c, _ in calls.calls if c not in ("DescribeTrainingJob",)] == []
    # moto completes a job at once: every row ended, as the one-by-one refresh ended it.
    assert {ledger.get(n).status for n in names} == {"completed"}


def test_tags_from_the_ledger_are_the_ones_sagemaker_holds(submitted):
    ledger, definition, names = submitted
    backend = _fresh_sagemaker(ledger)
    answers = backend.statuses(names)
    truth = boto3.client("sagemaker", region_name="us-east-1")
    for name in names:
        arn = truth.describe_training_job(TrainingJobName=name)["TrainingJobArn"]
        held = {t["Key"]: t["Value"] for t in truth.list_tags(ResourceArn=arn)["Tags"]}
        assert answers[name].tags == held
        assert answers[name].tags[TAG_JOB] == name and answers[name].tags[TAG_SWEEP] == definition.sweep_id
        assert TAG_TRIAL in answers[name].tags


def test_a_job_the_ledger_does_not_hold_is_asked_its_tags(submitted):
    ledger, _, names = submitted
    truth = boto3.client("sagemaker", region_name="us-east-1")
    request = dict(ledger.get(names[0]).request, TrainingJobName="outsider-1",
                   Tags=[{"Key": "team", "Value": "elsewhere"}])
    arn = truth.create_training_job(**request)["TrainingJobArn"]
    backend = _fresh_sagemaker(ledger)
    calls = Calls(backend.client)
    answers = backend.statuses([*names, "outsider-1"])
    assert calls.named("ListTags") == [{"ResourceArn": arn}]
    assert answers["outsider-1"].tags == {"team": "elsewhere"}
    assert ledger.get("outsider-1") is None  # nothing recorded of a job the ledger never had


def test_one_unknown_job_is_its_own_answer(submitted):
    ledger, _, names = submitted
    answers = _fresh_sagemaker(ledger).statuses([names[0], "nope-1", *names[1:]])
    assert isinstance(answers["nope-1"], UnknownJob) and "nope-1" in answers["nope-1"].message
    assert all(isinstance(answers[n], JobStatus) and answers[n].job_name == n for n in names)
    assert {ledger.get(n).status for n in names} == {"completed"}


class _Throttled:
    """A sagemaker client whose DescribeTrainingJob of one name is throttled."""

    def __init__(self, client, name: str):
        self._client = client
        self.name = name
        self.asked: list[str] = []

    def __getattr__(self, attr):
        return getattr(self._client, attr)

    def describe_training_job(self, **args):
        self.asked.append(args["TrainingJobName"])
        if args["TrainingJobName"] == self.name:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "DescribeTrainingJob")
        return self._client.describe_training_job(**args)


def test_a_failed_call_stops_the_asking_and_leaves_the_rest_out(submitted, monkeypatch):
    ledger, _, names = submitted
    monkeypatch.setattr(sagemaker_backend, "DESCRIBE_THREADS", 1)  # in order, so the test knows which
    client = _Throttled(boto3.client("sagemaker", region_name="us-east-1"), names[1])
    answers = _fresh_sagemaker(ledger, client).statuses(names)
    assert client.asked == names[:2]
    assert isinstance(answers[names[0]], JobStatus)
    assert isinstance(answers[names[1]], BackendError) and "Rate exceeded" in answers[names[1]].message
    assert set(answers) == set(names[:2])
    assert ledger.get(names[0]).status == "completed" and ledger.get(names[2]).status == "submitted"


def test_describes_run_on_worker_threads_and_the_ledger_stays_on_the_callers(submitted, monkeypatch):
    ledger, _, names = submitted
    main = threading.get_ident()
    used: set[int] = set()
    for method in ("get", "transition", "put_value", "entries"):
        real = getattr(Ledger, method)

        def watched(self, *args, _real=real, **kwargs):
            used.add(threading.get_ident())
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(Ledger, method, watched)
    backend = _fresh_sagemaker(ledger)
    callers: set[int] = set()
    backend.client.meta.events.register("provide-client-params.sagemaker.DescribeTrainingJob",
                                        lambda **_: callers.add(threading.get_ident()))
    answers = backend.statuses(names)
    assert all(isinstance(a, JobStatus) for a in answers.values())
    assert used == {main}
    assert callers and main not in callers and len(callers) <= sagemaker_backend.DESCRIBE_THREADS


# --- AWS Batch ---------------------------------------------------------------------------------


GRID_12 = ("sweep: dozen\nbase: base.yaml\ngrid:\n  training.batch_size: [8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96]"
           "\nconcurrency: 12\n")


@pytest.fixture
def dozen(tmp_path, orch_home, bucket):
    """(ledger, definition, job names): twelve SageMaker jobs of a sweep submitted to moto (ended
    at once there): enough for `statuses` to read the ended ones with Search."""
    ledger = Ledger()
    backend, _ = moto_backend(ledger, Counter())
    definition = sweeps.save(sweeps.plan(load(tmp_path, GRID_12)), ledger)
    sweeps.Runner(definition, backend, ledger, sleep=lambda s: None, poll_seconds=0).submit_ready()
    names = [e.job_name for e in ledger.entries(sweep_id=definition.sweep_id)]
    assert len(names) == sagemaker_backend.SEARCH_AT_LEAST + 2
    return ledger, definition, names


def test_a_sweeps_ended_jobs_are_read_with_one_search_and_none_described(dozen, tmp_path, monkeypatch):
    ledger, definition, names = dozen
    backend = _fresh_sagemaker(ledger)
    calls = Calls(backend.client)
    bulk = backend.statuses(names)
    assert [c for c, _ in calls.calls] == ["Search"]
    (search,) = calls.named("Search")
    assert search["SearchExpression"]["Filters"] == [
        {"Name": "TrainingJobName", "Operator": "Contains", "Value": os.path.commonprefix(names)}]
    assert {ledger.get(n).status for n in names} == {"completed"}
    # What the bulk read says of each job is what describing it says (tags from the ledger).
    monkeypatch.setattr(sagemaker_backend, "SEARCH_AT_LEAST", 10 ** 6)
    one_by_one = _fresh_sagemaker(ledger).statuses(names)
    assert bulk == one_by_one and all(isinstance(bulk[n], JobStatus) for n in names)


class _SearchAnswers:
    """A sagemaker client whose Search is refused, or shows the named jobs still in progress."""

    def __init__(self, client, refuse: bool = False, running: tuple[str, ...] = ()):
        self._client, self.refuse, self.running = client, refuse, running
        self.searches = 0

    def __getattr__(self, attr):
        return getattr(self._client, attr)

    def search(self, **args):
        self.searches += 1
        if self.refuse:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not authorized: sagemaker:Search"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "Search")
        page = self._client.search(**args)
        for result in page.get("Results", []):
            if result["TrainingJob"]["TrainingJobName"] in self.running:
                result["TrainingJob"]["TrainingJobStatus"] = "InProgress"
                result["TrainingJob"]["SecondaryStatus"] = "Training"
        return page


def test_search_refused_every_job_is_described_and_search_not_asked_again(dozen):
    ledger, _, names = dozen
    client = _SearchAnswers(boto3.client("sagemaker", region_name="us-east-1"), refuse=True)
    backend = _fresh_sagemaker(ledger, client)
    calls = Calls(client._client)
    answers = backend.statuses(names)
    assert all(isinstance(answers[n], JobStatus) and answers[n].status == "completed" for n in names)
    assert sorted(p["TrainingJobName"] for p in calls.named("DescribeTrainingJob")) == sorted(names)
    backend.statuses(names)
    assert client.searches == 1


def test_a_job_search_shows_in_flight_is_described_not_trusted(dozen):
    ledger, _, names = dozen
    client = _SearchAnswers(boto3.client("sagemaker", region_name="us-east-1"), running=tuple(names[:3]))
    backend = _fresh_sagemaker(ledger, client)
    calls = Calls(client._client)
    answers = backend.statuses(names)
    assert sorted(p["TrainingJobName"] for p in calls.named("DescribeTrainingJob")) == sorted(names[:3])
    assert {answers[n].status for n in names} == {"completed"}  # as DescribeTrainingJob says


def _batch_jobs(clients, ledger: Ledger, count: int, stem: str = "bulk", queue: str = QUEUE) -> list[str]:  # noqa: F811
    """`count` jobs submitted to `queue` (straight to AWS Batch) and recorded submitted."""
    prepared = _prepared()
    names = []
    for i in range(count):
        name = f"{stem}-{i:03d}"
        request = dict(prepared.request, jobName=name, jobQueue=queue, tags={**prepared.request["tags"], TAG_JOB: name})
        ledger.record_intent(name, backend="batch", region="us-east-1", spec_hash=prepared.spec_hash,
                             request=request)
        ledger.transition(name, "submitting", expect=("planned",))
        clients["batch"].submit_job(**request)
        ledger.transition(name, "submitted", expect=("submitting",))
        names.append(name)
    return names


def _fresh_batch(clients, ledger: Ledger) -> BatchBackend:  # noqa: F811
    return BatchBackend(boto3.client("batch", region_name="us-east-1"), clients["s3"], clients["logs"],
                        ledger=ledger, sleep=lambda s: None)


def test_batch_jobs_of_one_queue_are_found_with_one_listing_and_100_ids_a_describe(clients):  # noqa: F811
    ledger = Ledger()
    names = _batch_jobs(clients, ledger, 130)
    backend = _fresh_batch(clients, ledger)
    calls = Calls(backend.client)
    answers = backend.statuses(names)
    assert [c for c, _ in calls.calls] == ["ListJobs", "DescribeJobs", "DescribeJobs"]  # ceil(130 / 100)
    [listing] = calls.named("ListJobs")
    assert listing == {"jobQueue": QUEUE, "filters": [{"name": "JOB_NAME", "values": ["bulk-*"]}]}
    assert [len(p["jobs"]) for p in calls.named("DescribeJobs")] == [100, 30]
    assert all(isinstance(answers[n], JobStatus) and answers[n].tags[TAG_JOB] == n for n in names)


def test_batch_keeps_finds_rule_the_newest_job_of_the_name_with_our_tag(clients):  # noqa: F811
    ledger = Ledger()
    names = _batch_jobs(clients, ledger, 3)
    ours = {j["jobName"]: j["jobId"] for j in clients["batch"].list_jobs(
        jobQueue=QUEUE, filters=[{"name": "JOB_NAME", "values": ["bulk-*"]}])["jobSummaryList"]}
    request = dict(ledger.get(names[1]).request)
    request["tags"] = {k: v for k, v in request["tags"].items() if k != TAG_JOB}
    clients["batch"].submit_job(**request)  # a newer job of the same name, not the orchestrator's
    clients["batch"].submit_job(**dict(request, jobName="bulk-other"))  # shares the prefix, not asked
    backend = _fresh_batch(clients, ledger)
    calls = Calls(backend.client)
    found = backend._find_in(QUEUE, names)
    assert {n: found[n]["jobId"] for n in names} == {n: ours[n] for n in names}
    described = [i for p in calls.named("DescribeJobs") for i in p["jobs"]]
    assert len(described) == 4 and ours[names[0]] in described  # bulk-other's id is not asked about


def test_batch_an_unknown_name_is_its_own_answer_and_names_without_a_prefix_are_listed_each(clients):  # noqa: F811
    ledger = Ledger()
    [first] = _batch_jobs(clients, ledger, 1, stem="alpha")
    [second] = _batch_jobs(clients, ledger, 1, stem="beta")
    ledger.record_intent("gamma-000", backend="batch", region="us-east-1", spec_hash="0" * 64,
                         request={"jobQueue": QUEUE, "jobName": "gamma-000"})
    backend = _fresh_batch(clients, ledger)
    calls = Calls(backend.client)
    answers = backend.statuses([first, "gamma-000", second])
    assert [p["filters"][0]["values"] for p in calls.named("ListJobs")] == [[first], ["gamma-000"], [second]]
    assert isinstance(answers["gamma-000"], UnknownJob)
    assert isinstance(answers[first], JobStatus) and isinstance(answers[second], JobStatus)


class _Paged:
    """A batch client whose ListJobs answers one job a page (AWS pages at 100 with a filter)."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, attr):
        return getattr(self._client, attr)

    def list_jobs(self, **args):
        token = int(args.pop("nextToken", 0))
        jobs = self._client.list_jobs(**args)["jobSummaryList"]
        page = {"jobSummaryList": jobs[token:token + 1]}
        if token + 1 < len(jobs):
            page["nextToken"] = str(token + 1)
        return page


def test_batch_a_prefix_listing_longer_than_one_listing_per_name_is_given_up(clients):  # noqa: F811
    ledger = Ledger()
    names = _batch_jobs(clients, ledger, 5)
    backend = _fresh_batch(clients, ledger)
    backend.client = _Paged(backend.client)
    calls = Calls(backend.client._client)
    answers = backend.statuses(names[:2])  # five jobs share the prefix: five pages, more than two
    listed = [p["filters"][0]["values"][0] for p in calls.named("ListJobs")]
    assert listed == ["bulk-00*", "bulk-00*", names[0], names[1]]
    assert all(isinstance(answers[n], JobStatus) for n in names[:2]) and set(answers) == set(names[:2])


# --- the runner ----------------------------------------------------------------------------------


class ManyAtOnce(FakeCloud):
    """The fake cloud with the hook: each call's names recorded; `fail` scripts a job's error."""

    def __init__(self, ledger: Ledger):
        super().__init__(ledger)
        self.asked: list[list[str]] = []
        self.fail: dict[str, Exception] = {}

    def statuses(self, job_names):
        names = list(job_names)
        self.asked.append(names)
        return {n: self.fail[n] if n in self.fail else self.status(n) for n in names}


@pytest.fixture
def many(tmp_path, orch_home):
    ledger = Ledger()
    cloud = ManyAtOnce(ledger)
    clock = Clock()
    text = "sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [8, 16, 24]\nconcurrency: 3\n"
    definition = sweeps.save(sweeps.plan(load(tmp_path, text)), ledger)
    runner = sweeps.Runner(definition, cloud, ledger, sleep=clock.sleep, clock=clock, rng=random.Random(0),
                           poll_seconds=5.0)
    runner.step()
    assert len(cloud.jobs) == 3
    cloud.asked.clear()
    return runner, cloud, ledger, sorted(cloud.jobs)


def test_a_refresh_asks_the_backend_once_about_every_job_in_flight(many):
    runner, cloud, ledger, names = many
    runner.refresh()
    assert [sorted(a) for a in cloud.asked] == [names]


def test_an_unknown_job_is_lost_alone_and_the_others_move_on(many):
    runner, cloud, ledger, names = many
    cloud.fail[names[1]] = UnknownJob(f"no job {names[1]}")
    cloud.finish(names[0])
    cloud.jobs[names[0]]["billable"] = 120
    runner.refresh()
    assert ledger.get(names[1]).status == "failed" and ledger.get(names[1]).detail.startswith("[lost]")
    assert ledger.get(names[0]).status == "completed"
    assert ledger.get_value(key(runner.d.sweep_id, f"billed:{names[0]}")) == 120
    assert ledger.get(names[2]).status == "submitted"


def test_a_passing_error_backs_off_and_the_jobs_answered_after_it_are_still_recorded(many):
    runner, cloud, ledger, names = many
    order = [v.job_name for v in runner.views()]
    cloud.fail[order[0]] = BackendError("DescribeTrainingJob: ThrottlingException", code="ThrottlingException",
                                        http_status=400)
    cloud.fail[order[1]] = UnknownJob(f"no job {order[1]}")
    cloud.finish(order[2])
    cloud.jobs[order[2]]["billable"] = 60
    runner.refresh()
    assert runner.backing_off()
    # The job answered after the error ends as before (its billed seconds kept); the one whose
    # answer was an error waits for the next round instead of being marked lost.
    assert ledger.get(order[2]).status == "completed"
    assert ledger.get_value(key(runner.d.sweep_id, f"billed:{order[2]}")) == 60
    assert ledger.get(order[1]).status == "submitted" and ledger.get(order[0]).status == "submitted"


def test_a_backend_without_the_hook_is_asked_one_job_at_a_time_until_an_error_not_of_the_job(orch_home):
    cloud = FakeCloud(Ledger())
    cloud.jobs = {n: {"status": "running", "reason": None, "request": {"Tags": [],
                                                                         "ResourceConfig": {"InstanceType": "x"}}}
                  for n in ("a", "c")}
    asked = []
    real = cloud.status

    def status(name):
        asked.append(name)
        if name == "d":
            raise BackendError("network down")
        return real(name)

    cloud.status = status
    answers = statuses(cloud, ["a", "b", "c", "d", "e"])
    assert asked == ["a", "b", "c", "d"]
    assert isinstance(answers["b"], UnknownJob) and isinstance(answers["d"], BackendError)
    assert set(answers) == {"a", "b", "c", "d"}


class _ThrottledQueue:
    """A batch client whose ListJobs of one queue is throttled."""

    def __init__(self, client, queue: str):
        self._client = client
        self.queue = queue
        self.listed: list[str] = []

    def __getattr__(self, attr):
        return getattr(self._client, attr)

    def list_jobs(self, **args):
        self.listed.append(args["jobQueue"])
        if args["jobQueue"] == self.queue:
            raise ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "Too Many Requests"},
                               "ResponseMetadata": {"HTTPStatusCode": 429}}, "ListJobs")
        return self._client.list_jobs(**args)


def test_batch_a_failed_listing_is_its_queues_jobs_answer_and_ends_the_asking(clients):  # noqa: F811
    ledger = Ledger()
    names = _batch_jobs(clients, ledger, 2)
    queue = clients["batch"].describe_job_queues(jobQueues=[QUEUE])["jobQueues"][0]
    clients["batch"].create_job_queue(jobQueueName="second-queue", state="ENABLED", priority=1,
                                      computeEnvironmentOrder=queue["computeEnvironmentOrder"])
    [elsewhere] = _batch_jobs(clients, ledger, 1, stem="other", queue="second-queue")
    backend = _fresh_batch(clients, ledger)
    backend.client = _ThrottledQueue(backend.client, QUEUE)
    answers = backend.statuses([*names, elsewhere])
    assert backend.client.listed == [QUEUE]  # the second queue is not asked after the failure
    assert set(answers) == set(names)
    assert all(isinstance(answers[n], BackendError) and "Too Many Requests" in answers[n].message for n in names)
