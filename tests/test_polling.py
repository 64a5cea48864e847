"""A poll has a floor per backend (`orchestrator.polling`): a sweep at `--poll 0.1` does not ask
SageMaker about each job ten times a second, `submit --wait --interval 0.05` waits at least the
floor, and each says so when it raises what was asked (issue 22: `--poll` has a sane floor)."""

from __future__ import annotations

import itertools

import pytest
from cli_harness import run_cli
from sweep_fakes import ROOT, SWEEP, Clock, rig  # noqa: F401 - rig is a fixture

from orchestrator import polling
from orchestrator import sweep as sweeps
from orchestrator.sweep.router import Router


def test_the_floor_is_the_cloud_one_for_any_cloud_backend_and_the_local_one_otherwise(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert polling.floor(["local"]) == polling.LOCAL_FLOOR_S == 0.1
    assert polling.floor(["sagemaker"]) == polling.floor(["batch", "local"]) == polling.CLOUD_FLOOR_S == 5.0
    assert polling.at_least(30.0, ["sagemaker"], "--poll") == (30.0, None)
    assert polling.at_least(0.1, ["local"], "--poll") == (0.1, None)
    raised, note = polling.at_least(0.1, ["local", "sagemaker"], "--poll")
    assert raised == 5.0
    assert note == ("note: --poll 0.1 raised to 5 s, the least for local/sagemaker jobs (each round asks sagemaker "
                    "about every job in flight, within the account's API rate)")
    # An endpoint on this machine (moto, LocalStack) has no account rate to spare.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5000")
    assert polling.floor(["sagemaker", "batch"]) == 0.1
    # A service's own endpoint on this machine, the other service's AWS's own (no endpoint set).
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER", "http://127.0.0.1:5000")
    assert polling.floor(["sagemaker"]) == 0.1 and polling.floor(["batch"]) == 5.0


def test_a_sweep_at_poll_0_1_asks_sagemaker_at_most_once_per_job_every_floor(rig, monkeypatch, capsys):  # noqa: F811
    from orchestrator.cli import sweep as cli

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    make, cloud, clock = rig
    runner = make(SWEEP)
    asked = []
    real_status = cloud.status

    def status(name):
        asked.append(clock.now)
        if clock.now - start >= 60:  # every job ends a minute in
            cloud.finish(name)
        return real_status(name)

    cloud.status = status
    monkeypatch.setattr("orchestrator.actions.sweeps.sweep_backend", lambda definition, ledger: Router.of(cloud, definition.backends))
    real_runner = sweeps.Runner
    monkeypatch.setattr(sweeps, "Runner", lambda *a, **kw: real_runner(*a, sleep=clock.sleep, clock=clock, **kw))
    start = clock.now
    cli.drive(runner.d, runner.ledger, poll=0.1)
    err = capsys.readouterr().err
    assert "note: --poll 0.1 raised to 5 s, the least for sagemaker jobs" in err
    assert min(clock.sleeps) >= 0 and max(clock.sleeps) == 5.0
    # Four trials, two at a time, each ending a minute in: without the floor, ~1,200 rounds.
    rounds = len(set(asked))
    assert 0 < rounds <= 2 * (60 / 5 + 2), rounds
    assert all(later - earlier >= 5.0 for earlier, later in itertools.pairwise(sorted(set(asked))))


def test_follow_at_the_floor_asks_once_per_floor(monkeypatch):
    """`submit --wait` follows at the raised interval: one Describe per five seconds."""
    from orchestrator.backends import JobStatus
    from orchestrator.cli import job_view

    clock = Clock()
    asked = []

    class Job:
        name, runs_in, cloud = "sagemaker", "in SageMaker", True

        def status(self, job_name):
            asked.append(clock.now)
            return JobStatus(job_name, "completed" if len(asked) > 12 else "running")

    seconds, _ = polling.at_least(0.05, ["sagemaker"], "--interval")
    job_view.wait(Job(), "j", seconds, sleep=clock.sleep, clock=clock, interactive=False)
    assert len(asked) == 13 and asked[-1] - asked[0] == 60.0


def test_submit_wait_raises_a_short_interval_to_the_floor_and_says_so(moto_server, orch_home, monkeypatch, capsys):
    """Through the CLI: what `submit --wait --interval 0.05` hands to the wait, and what it says.
    The moto endpoint stands in for AWS's own here (its loopback exemption is set aside)."""
    import boto3

    from orchestrator.cli import jobs

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="orchestrator-example-bucket")
    monkeypatch.setattr(polling, "_on_this_machine", lambda name: name == "local")
    used = []
    monkeypatch.setattr(jobs, "wait", lambda backend, job, interval, **kw: used.append(interval))
    code, _, err = run_cli(monkeypatch, capsys, "submit", str(ROOT / "configs" / "vit-trn1-2xlarge.yaml"), "--wait",
                           "--interval", "0.05")
    assert code == 0, err
    assert used == [5.0]
    assert "note: --interval 0.05 raised to 5 s, the least for sagemaker jobs" in err


@pytest.mark.parametrize("command", [["sweep", "run", "x.yaml"], ["submit", "x.yaml"]])
def test_help_says_the_floor(monkeypatch, capsys, command):
    code, out, _ = run_cli(monkeypatch, capsys, *command, "--help")
    assert code == 0
    text = " ".join(out.replace("\u2502", " ").split())
    assert "at least 5" in text and "a shorter one is raised, with a note" in text


def test_logs_follow_on_a_cloud_backend_asks_no_more_often_than_the_floor():
    """`logs -f` has no interval option: its cloud backends' own poll is at least the floor."""
    import inspect

    from orchestrator.backends.cloud import CloudBackend
    from orchestrator.backends.local import LocalBackend

    assert inspect.signature(CloudBackend.__init__).parameters["poll_seconds"].default >= polling.CLOUD_FLOOR_S
    assert inspect.signature(LocalBackend.__init__).parameters["poll_seconds"].default >= polling.LOCAL_FLOOR_S


def test_the_poll_defaults_are_stated_once_for_the_backends_and_the_help():
    """Each backend's default poll (`submit --wait`'s interval, a sweep's round) is polling's,
    and the help of --interval and --poll shows those values, read from the same table."""
    import inspect

    from orchestrator.backends import registry
    from orchestrator.backends.registry import backend_class
    from orchestrator.cli import jobs, options

    interval_help = inspect.signature(jobs.submit).parameters["interval"].default.help
    said = {"sagemaker": "on SageMaker", "batch": "on Batch", "local": "locally"}
    for name, where in said.items():
        backend = backend_class(name)
        assert backend.wait_interval_s == registry.WAIT_INTERVAL_S[name]
        assert backend.sweep_poll_s == registry.SWEEP_POLL_S[name]
        assert f"{backend.wait_interval_s:g} {where}" in interval_help
        assert f"{backend.sweep_poll_s:g} {where}" in options.POLL_OPTION.help
    assert f"at least {polling.CLOUD_FLOOR_S:g} on SageMaker and Batch, {polling.LOCAL_FLOOR_S:g} locally" \
        in interval_help
