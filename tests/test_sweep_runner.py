"""The sweep runner on an in-memory cloud (`sweep.runner`): concurrency, backoff, errors of its own calls,
failover and retries. `FakeCloud` (sweep_fakes.py) behaves like SageMaker where it matters, so every
decision can be scripted and counted."""

from __future__ import annotations

import pytest
from cli_harness import run_cli
from sweep_fakes import (
    SWEEP,
    refusal,
    states,
    sweep_stop,
    write,
)

from orchestrator import sweep as sweeps
from orchestrator.backends import DamagedStatus
from orchestrator.errors import BackendError

# --- the runner, on an in-memory cloud ---------------------------------------------------------


def test_runner_caps_concurrency_and_completes_every_trial(rig):
    make, cloud, clock = rig
    runner = make()
    runner.step()
    assert len(cloud.jobs) == 2 and set(states(runner).values()) == {"submitted", "planned"}
    runner.step()
    assert len(cloud.jobs) == 2  # nothing finished: no room
    first = sorted(cloud.jobs)[0]
    cloud.jobs[first]["status"] = "running"
    runner.step()
    assert states(runner)[first] == "running" and len(cloud.jobs) == 2
    cloud.finish(first)
    runner.step()
    assert states(runner)[first] == "completed" and len(cloud.jobs) == 3
    while not runner.step().done:
        cloud.finish_all()
    assert cloud.max_in_flight == 2
    assert set(cloud.creates.values()) == {1} and len(cloud.creates) == 4
    assert set(states(runner).values()) == {"completed"}


def test_throttling_and_quota_back_off_with_growing_jittered_waits(rig):
    make, cloud, clock = rig
    runner = make(SWEEP.replace("concurrency: 2", "concurrency: 4"), backoff_base=2.0, backoff_cap=60.0)
    cloud.refuse = [refusal("ThrottlingException"), refusal("ResourceLimitExceeded"),
                    refusal("ThrottlingException")]
    progress = runner.step()
    assert progress.waiting_reason and "ThrottlingException" in progress.waiting_reason
    assert cloud.jobs == {} and set(states(runner).values()) == {"planned"}
    waits = []
    while len(cloud.jobs) < 4:
        before = clock.now
        progress = runner.step()
        if progress.waiting_until:
            waits.append(progress.waiting_until - before)
            clock.sleep(progress.waiting_until - clock.now)
    # Ceilings 2, 4, 8 s; each wait is drawn from [ceiling/2, ceiling].
    assert 1.0 <= waits[0] <= 2.0 and 2.0 <= waits[1] <= 4.0 and 4.0 <= waits[2] <= 8.0
    assert cloud.submit_calls == 4 + 3 and set(cloud.creates.values()) == {1}


def _from_botocore(cause: Exception) -> BackendError:
    """Our error for `cause` as the sagemaker backend raises it (translated, `from` it)."""
    from orchestrator.backends.sagemaker.backend import translate

    try:
        raise translate(cause, operation="CreateTrainingJob", region="us-east-1") from cause
    except BackendError as error:
        return error


def _client_error(code: str, status: int):
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "CreateTrainingJob")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cause", ["no credentials", "expired token", "access denied"])
def test_a_permanent_error_stops_the_sweep_at_once_with_its_message(rig, cause):
    # QA: a SageMaker sweep without credentials retried forever (waits growing to 275 s), while
    # `submit` of the same spec exited at once.
    from botocore.exceptions import NoCredentialsError

    make, cloud, clock = rig
    runner = make()
    error = _from_botocore({"no credentials": NoCredentialsError(),
                            "expired token": _client_error("ExpiredTokenException", 400),
                            "access denied": _client_error("AccessDeniedException", 400)}[cause])
    cloud.refuse = [error] * 10
    with pytest.raises(BackendError) as info:
        runner.run()
    assert info.value.message == f"sweep {runner.d.sweep_id} stopped: {error.message}"
    assert info.value.hint.startswith(error.hint)
    assert info.value.hint.endswith(f"then `python -m orchestrator sweep resume {runner.d.sweep_id}` continues it "
                                    "(jobs already submitted keep running)")
    assert cloud.submit_calls == 1 and clock.sleeps == []  # no second try, no wait
    assert "failed" not in states(runner).values()  # no trial is blamed for the account's setup


def test_a_request_the_service_refuses_fails_its_trial_only(rig):
    make, cloud, _ = rig
    runner = make()
    cloud.refuse = [_from_botocore(_client_error("ValidationException", 400))]
    final = runner.run(max_steps=3)
    assert list(states(runner).values()).count("failed") == 1 and len(cloud.jobs) == 2
    assert not final.done  # the others go on


@pytest.mark.timeout(60)
def test_transient_errors_are_retried_a_bounded_number_of_times(rig):
    from botocore.exceptions import EndpointConnectionError

    make, cloud, clock = rig
    runner = make(max_transient_retries=3)
    error = _from_botocore(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"))
    assert sweeps.submit_error_kind(error) == "transient"
    cloud.refuse = [error] * 50
    with pytest.raises(BackendError) as info:
        runner.run()
    assert cloud.submit_calls == 4  # the first try and 3 retries
    assert len([s for s in clock.sleeps if s > 0]) >= 3
    assert "gave up after 3 retries in a row" in info.value.message and error.message in info.value.message
    assert f"sweep resume {runner.d.sweep_id}" in info.value.hint
    # Throttling and 5xx the same way.
    for code, status in (("ThrottlingException", 400), ("InternalServerError", 500)):
        cloud.refuse = [_from_botocore(_client_error(code, status))] * 50
        cloud.submit_calls = 0
        runner = make(max_transient_retries=2)
        with pytest.raises(BackendError, match="gave up after 2 retries in a row"):
            runner.run()
        assert cloud.submit_calls == 3


@pytest.mark.timeout(60)
def test_a_quota_reached_while_the_sweeps_jobs_run_waits_for_them_without_limit(rig):
    make, cloud, clock = rig
    runner = make(SWEEP.replace("concurrency: 2", "concurrency: 4"), max_transient_retries=2)
    runner.step()  # the first is created; then the refusals start
    cloud.refuse = [refusal("ResourceLimitExceeded")] * 10
    runner.run(max_steps=8)
    assert len(cloud.jobs) >= 1 and cloud.submit_calls > 3  # past the bound of 2, still waiting
    # With nothing of the sweep in flight, a quota of 0 is no wait for a job to end: bounded.
    cloud.jobs.clear()
    for entry in runner.ledger.entries(sweep_id=runner.d.sweep_id):
        if entry.status == "submitted":
            runner.ledger.transition(entry.job_name, "planned", expect=("submitted",))
    cloud.refuse = [refusal("ResourceLimitExceeded")] * 10
    runner = make(SWEEP.replace("concurrency: 2", "concurrency: 4"), max_transient_retries=2)
    with pytest.raises(BackendError, match="gave up after 2 retries in a row"):
        runner.run()


@pytest.mark.timeout(120)
def test_cli_sweep_run_without_credentials_exits_1_at_once(tmp_path, orch_home, monkeypatch, capsys):

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # never reached: nothing to sign with
    path = write(tmp_path, SWEEP)
    code, _, err = run_cli(monkeypatch, capsys, "sweep", "run", str(path), "--poll", "0.1")
    assert code == 1 and "Traceback" not in err
    assert "stopped: ListTrainingJobs: no usable AWS credentials" in err
    assert "sweep resume demo-" in err and "backing off" not in err


def test_capacity_at_submit_fails_over_to_the_next_type(rig):
    make, cloud, _ = rig
    text = "sweep: demo\nbase: base.yaml\nfailover: {instance.type: [ml.trn1n.32xlarge, ml.trn1.32xlarge]}\n"
    runner = make(text)
    cloud.refuse = [refusal("InsufficientCapacityError")]
    runner.step()
    [view] = runner.views()
    assert view.status == "failed" and not view.final and view.detail.startswith("[capacity]")
    runner.step()
    [view] = runner.views()
    assert view.attempt == 1 and view.job_name.endswith("-r1") and view.status == "submitted"
    assert cloud.instance_of(view.job_name) == "ml.trn1n.32xlarge"
    tags = {t["Key"]: t["Value"] for t in cloud.jobs[view.job_name]["request"]["Tags"]}
    assert tags["orchestrator:trial"] == view.trial.trial_id
    assert tags["orchestrator:spec-hash"] != view.trial.trial_id[1:]  # the failover spec differs
    # Marked, so results can tell it ran another configuration than its trial.
    assert tags["orchestrator:attempt"] == "failover:ml.trn1.2xlarge"


def test_retries_are_tagged_as_retries(rig):
    make, cloud, _ = rig
    runner = make("sweep: demo\nbase: base.yaml\nmax_retries: 1\n")
    runner.step()
    [first] = cloud.jobs
    assert "orchestrator:attempt" not in {t["Key"] for t in cloud.jobs[first]["request"]["Tags"]}
    cloud.finish(first, "failed", "InternalServerError: try again")
    runner.step()
    tags = {t["Key"]: t["Value"] for t in cloud.jobs[first + "-r1"]["request"]["Tags"]}
    assert tags["orchestrator:attempt"] == "retry"


def test_capacity_failures_walk_the_failover_list_then_use_retries(rig):
    make, cloud, _ = rig
    text = ("sweep: demo\nbase: base.yaml\nfailover: {instance.type: [ml.trn1n.32xlarge]}\nmax_retries: 1\n")
    runner = make(text)
    reason = "CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML instance type."
    seen = []
    for _ in range(6):
        runner.step()
        [view] = runner.views()
        if view.status == "submitted":
            seen.append((view.job_name, cloud.instance_of(view.job_name)))
            cloud.finish(view.job_name, "failed", reason)
    [view] = runner.views()
    assert [instance for _, instance in seen] == ["ml.trn1.2xlarge", "ml.trn1n.32xlarge", "ml.trn1n.32xlarge"]
    assert [name.rsplit("-", 1)[-1] for name, _ in seen][1:] == ["r1", "r2"]
    assert view.final and view.status == "failed" and view.attempt == 2


@pytest.mark.parametrize("reason, retried", [
    ("Spot instance interruption: the capacity was reclaimed", True),
    ("InternalServerError: We encountered an internal error. Please try again.", True),
    ("AlgorithmError: ExecuteUserScriptError: RuntimeError: boom", False),
    ("ClientError: Please ensure the S3 path exists", False),
])
def test_job_failures_are_retried_only_when_retryable(rig, reason, retried):
    make, cloud, _ = rig
    runner = make("sweep: demo\nbase: base.yaml\nmax_retries: 2\n")
    runner.step()
    [first] = cloud.jobs
    cloud.finish(first, "failed", reason)
    runner.step()
    [view] = runner.views()
    if retried:
        assert view.job_name == first + "-r1" and view.status == "submitted"
        assert cloud.instance_of(view.job_name) == "ml.trn1.2xlarge"
    else:
        assert view.job_name == first and view.final and view.status == "failed" and len(cloud.jobs) == 1


def test_retries_stop_at_max_retries(rig):
    make, cloud, _ = rig
    runner = make("sweep: demo\nbase: base.yaml\nmax_retries: 2\n")
    for _ in range(10):
        runner.step()
        for name, job in cloud.jobs.items():
            if job["status"] == "pending":
                cloud.finish(name, "failed", "InternalServerError: internal error")
    [view] = runner.views()
    assert len(cloud.jobs) == 3 and view.attempt == 2 and view.final
    assert runner.progress().done


def test_user_errors_at_submit_are_never_retried(rig):
    make, cloud, clock = rig
    runner = make("sweep: demo\nbase: base.yaml\n")
    cloud.refuse = [refusal("ValidationException")]
    final = runner.run(max_steps=5)
    [view] = runner.views()
    assert final.done and view.status == "failed" and view.detail.startswith("[user]")
    assert cloud.submit_calls == 1 and cloud.jobs == {}


def test_a_job_the_backend_lost_is_retried_but_a_damaged_status_is_not_taken_for_lost(rig, monkeypatch):
    make, cloud, _ = rig
    runner = make()
    runner.step()
    damaged, healthy = sorted(cloud.jobs)
    real_status, stops = cloud.status, []
    real_stop = cloud.stop

    def status(name):
        if name == damaged:
            raise DamagedStatus(f"{name}: status.json is damaged", hint="remove the job's folder")
        return real_status(name)

    monkeypatch.setattr(cloud, "status", status)
    monkeypatch.setattr(cloud, "stop", lambda name: (stops.append(name), real_stop(name)))
    # QA: one damaged local status file made every poll, `sweep status` and `sweep stop` exit 2.
    # The runner reports it, leaves that trial as it is (never resubmitted) and goes on.
    cloud.jobs[healthy]["status"] = "completed"
    progress = runner.step()
    assert any(f"{damaged}: status.json is damaged" in e for e in progress.events)
    assert states(runner)[damaged] == "submitted" and states(runner)[healthy] == "completed"
    assert len(cloud.creates) == 3  # the freed slot went to the next trial, nothing was resubmitted
    # sweep stop still stops it (the backend can, while its supervisor runs) and the others.
    report = sweep_stop(runner)
    assert damaged in report.stopped_jobs and damaged in stops and report.errors == []
    # The backend answering that it has no such job is what makes a trial lost (and retried).
    monkeypatch.setattr(cloud, "status", real_status)
    lost = make("sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [16]\n")
    lost.step()
    [job] = [name for name in cloud.jobs if name.startswith(lost.d.sweep_id)]
    del cloud.jobs[job]
    lost.step()
    assert lost.ledger.get(job).status == "failed" and lost.ledger.get(job).detail.startswith("[lost]")


def test_a_lost_answer_leaves_submitting_and_is_reconciled_not_duplicated(rig):
    make, cloud, clock = rig
    runner = make("sweep: demo\nbase: base.yaml\n")
    cloud.refuse = [refusal("InternalFailure", status=503)]
    runner.step()
    [view] = runner.views()
    assert view.status == "submitting"  # a 5xx: the job may exist; never planned again blindly
    runner.step()
    assert cloud.submit_calls == 1  # backing off
    clock.sleep(10)
    runner.step()
    assert sum(cloud.creates.values()) == 1 and runner.views()[0].status == "submitted"


def test_budget_caps_retries(rig):
    make, cloud, _ = rig
    # One trn1.2xlarge hour is bounded at about 2.02 USD: room for the first job, not for a retry.
    runner = make("sweep: demo\nbase: base.yaml\nmax_retries: 3\nbudget: {max_total_cost_usd: 3}\n")
    runner.step()
    [first] = cloud.jobs
    cloud.finish(first, "failed", "InternalServerError: internal error")
    runner.step()
    [view] = runner.views()
    assert view.final and view.detail.startswith("[budget]") and len(cloud.jobs) == 1


@pytest.mark.timeout(60)
def test_a_runner_waits_every_backoff_it_announces_and_rides_out_five_silent_minutes(rig):
    """QA: with a silent endpoint and --poll 1 the runner printed `backing off 61.6s`, `87.6s`,
    `146.3s` five seconds apart and gave up after 46 s: each round asked again after --poll,
    whatever it had announced. Here every status call fails for five minutes at --poll 1."""
    import re

    from botocore.exceptions import EndpointConnectionError

    make, cloud, clock = rig
    runner = make(poll_seconds=1.0)
    runner.step()
    assert len(cloud.jobs) == 2  # two jobs in flight, whose status the runner asks
    silent = _from_botocore(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"))
    outage_ends = clock.now + 300.0
    asked: list[float] = []
    status = cloud.status

    def silent_status(job_name):
        asked.append(clock.now)
        if clock.now < outage_ends:
            raise silent
        return status(job_name)

    cloud.status = silent_status
    announced: list[tuple[float, float]] = []
    seen = 0
    while not any(t >= outage_ends for t in asked) and clock.now < outage_ends + 600:
        progress = runner.step()
        for event in progress.events[len(progress.events) - (progress.event_count - seen):]:
            found = re.search(r"backing off ([\d.]+)s", event)
            if found:
                announced.append((clock.now, float(found.group(1))))
        seen = progress.event_count
        clock.sleep(1.0)  # --poll 1
    failed_calls = [t for t in asked if t < outage_ends]
    assert len(announced) == len(failed_calls) >= 5
    # The call after each announcement came no sooner than the announced wait.
    for (at, wait), next_call in zip(announced, asked[1:], strict=False):
        assert next_call >= at + wait, (at, wait, next_call)
    assert any(t >= outage_ends for t in asked)  # it asked again once the endpoint answered
    while not runner.step().done:
        cloud.finish_all()
    assert set(states(runner).values()) == {"completed"}


class _SilentFor:
    """Wraps a FakeCloud so that every call to it, from the first one at or after `start`, fails
    as a network error would (the endpoint answers nothing) for `seconds` of the fake clock; it
    records the time of each call and, as a shared backend, lists this sweep's jobs (adoption)."""

    shared = True

    def __init__(self, cloud, clock, error, seconds):
        self.cloud, self.clock, self.error, self.seconds = cloud, clock, error, seconds
        self.name, self.place = cloud.name, cloud.place
        self.silent_from: float | None = None
        self.calls: list[tuple[float, str]] = []

    def _call(self, what):
        self.calls.append((self.clock.now, what))
        if self.silent_from is not None and self.clock.now < self.silent_from + self.seconds:
            raise self.error

    def submit(self, prepared):
        self._call("submit")
        return self.cloud.submit(prepared)

    def status(self, job_name):
        self._call("status")
        return self.cloud.status(job_name)

    def job_names(self, prefix, in_flight=False):
        self._call("list")
        return [n for n, j in self.cloud.jobs.items() if n.startswith(prefix)
                and (not in_flight or j["status"] in ("pending", "starting", "running"))]

    def stop(self, job_name):
        return self.cloud.stop(job_name)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("silent_from", ["start", "mid-run"])
def test_a_backoff_announced_is_waited_and_a_five_minute_silent_endpoint_is_ridden_out(rig, silent_from):
    # QA: with `--poll 1` and a silent endpoint the runner announced `backing off 61.6s`, `87.6s`,
    # `146.3s` five seconds apart and gave up after 46 s: rounds and adoption called again at
    # every poll, whatever the backoff said.
    from botocore.exceptions import EndpointConnectionError

    make, cloud, clock = rig
    error = _from_botocore(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"))
    silent = _SilentFor(cloud, clock, error, seconds=300.0)
    made = make(poll_seconds=1.0)  # the default bound of transient retries, `--poll 1`
    announced: list[tuple[float, float]] = []  # (when announced, until when)

    def watch(progress):
        if progress.waiting_until is not None and (not announced or announced[-1][1] != progress.waiting_until):
            announced.append((clock.now, progress.waiting_until))
        if silent.silent_from is not None and clock.now > silent.silent_from + 300:
            cloud.finish_all()  # the endpoint is back: the jobs it had end
        assert len(clock.sleeps) < 5000

    runner = sweeps.Runner(made.d, silent, made.ledger, sleep=clock.sleep, clock=clock, rng=made.rng,
                           poll_seconds=1.0, on_progress=watch)
    if silent_from == "mid-run":
        runner.run(max_steps=1)  # adoption and the first two submits answer
        assert len(cloud.jobs) == 2
    silent.silent_from = clock.now
    assert runner.run().done
    # No call was made while an announced backoff ran.
    for when, what in silent.calls:
        for said, until in announced:
            assert not said < when < until, f"{what} at +{when - said:.1f}s inside a backoff until +{until - said:.1f}s"
    assert any(until - said > 60 for said, until in announced)  # the backoff grew past a minute
    assert set(states(runner).values()) == {"completed"} and set(cloud.creates.values()) == {1}
