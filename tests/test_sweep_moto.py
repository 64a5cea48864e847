"""Sweeps on the real SageMaker backend against the moto server: a create whose answer is lost, jobs
started by another machine, and two machines running one sweep."""

from __future__ import annotations

import random
from collections import Counter

import moto_shim
import pytest
from sweep_fakes import (
    ROOT,
    SWEEP,
    Clock,
    cli_run,
    load,
    moto_backend,
    set_moto_status,
    states,
)

from orchestrator import sweep as sweeps
from orchestrator.ledger import Ledger

# --- the real SageMaker backend on the moto server --------------------------------------------


def test_moto_lost_create_answer_is_reconciled_by_describe(tmp_path, orch_home, bucket):
    ledger = Ledger()
    creates: Counter = Counter()
    backend, sm = moto_backend(ledger, creates)
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    clock = Clock()
    runner = sweeps.Runner(definition, backend, ledger, sleep=clock.sleep, clock=clock, poll_seconds=1,
                           rng=random.Random(1))
    sm.lose_next_answer = True
    runner.step()
    lost = [v for v in runner.views() if v.status == "submitting"]
    assert len(lost) == 1
    final = runner.run(max_steps=20)
    assert final.done and set(states(runner).values()) == {"completed"}
    assert set(creates.values()) == {1} and len(creates) == 4
    assert any(f"{lost[0].job_name}: reconciled" in line for line in final.events)


def test_moto_quota_and_user_errors_are_told_apart_through_the_backend(tmp_path, orch_home, bucket):
    """The backend's translated errors keep botocore's code: ResourceLimitExceeded and
    throttling wait and succeed, a ValidationException fails the trial for good."""
    ledger = Ledger()
    creates: Counter = Counter()
    backend, sm = moto_backend(ledger, creates)
    text = "sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [16, 32]\nconcurrency: 1\n"
    definition = sweeps.save(sweeps.plan(load(tmp_path, text)), ledger)
    clock = Clock()
    runner = sweeps.Runner(definition, backend, ledger, sleep=clock.sleep, clock=clock, poll_seconds=1,
                           rng=random.Random(2))
    sm.refuse = ["ResourceLimitExceeded", "ThrottlingException"]
    runner.step()
    assert runner.progress().waiting_reason and "service quota" in runner.progress().waiting_reason
    while len(creates) < 1:
        runner.run(max_steps=1)
        clock.sleep(5)
    first = next(iter(creates))
    assert states(runner)[first] in ("submitted", "completed")
    sm.refuse = ["ValidationException"]
    final = runner.run(max_steps=10)
    assert final.done and len(creates) == 1
    [failed] = [v for v in runner.views() if v.status == "failed"]
    assert failed.detail.startswith("[user]") and "ValidationException" in failed.detail


def test_moto_jobs_started_elsewhere_count_against_concurrency(tmp_path, orch_home, bucket):
    """Another machine runs two of this sweep's trials: with concurrency 2 this runner waits,
    adopts those two instead of creating them, and submits the rest as they finish."""
    other, mine = Ledger(tmp_path / "other.sqlite3"), Ledger()
    creates: Counter = Counter()
    planned = sweeps.plan(load(tmp_path, SWEEP))
    theirs, _ = moto_backend(other, creates)
    other_runner = sweeps.Runner(sweeps.save(planned, other), theirs, other, sleep=lambda s: None, poll_seconds=0)
    other_runner.submit_ready()
    started = sorted(creates)
    assert len(started) == 2
    for name in started:
        set_moto_status(name, "InProgress")
    ours, _ = moto_backend(mine, creates)
    runner = sweeps.Runner(sweeps.save(planned, mine), ours, mine, sleep=lambda s: None, poll_seconds=0)
    progress = runner.step()
    assert progress.elsewhere == 0 and progress.in_flight == 2  # adopted: now in this ledger too
    # Adopted from SageMaker at the runner's first step, then refreshed: they are training.
    assert sorted(creates) == started and {states(runner)[n] for n in started} == {"running"}
    assert sum("adopted" in line for line in progress.events) == 2
    runner.step()
    assert sorted(creates) == started  # still no room
    for name in started:
        set_moto_status(name, "Completed")
    final = runner.run(max_steps=10)
    assert final.done and len(creates) == 4 and set(creates.values()) == {1}


def test_moto_foreign_jobs_need_the_sweep_tag_to_count(tmp_path, orch_home, bucket):
    ledger = Ledger()
    creates: Counter = Counter()
    backend, _ = moto_backend(ledger, creates)
    planned = sweeps.plan(load(tmp_path, SWEEP))
    definition = sweeps.save(planned, ledger)
    import boto3

    sm = boto3.client("sagemaker", region_name="us-east-1")
    request = dict(planned.trials[0].prepared.request)
    for suffix, tagged in (("t00000000", True), ("t11111111", False)):
        name = f"{planned.identity.job_prefix}-{suffix}"
        tags = [t for t in request["Tags"] if tagged or t["Key"] != "orchestrator:sweep"]
        sm.create_training_job(**{**request, "TrainingJobName": name, "Tags": tags})
        set_moto_status(name, "InProgress")
    runner = sweeps.Runner(definition, backend, ledger, sleep=lambda s: None, poll_seconds=0)
    progress = runner.step()
    assert progress.elsewhere == 1 and progress.in_flight == 1  # 2 - 1 counted from elsewhere


def test_moto_two_machines_run_one_sweep_and_create_each_job_once(tmp_path, orch_home, bucket):
    creates: Counter = Counter()
    planned = sweeps.plan(load(tmp_path, SWEEP.replace("concurrency: 2", "concurrency: 4")))
    runners = []
    for name in ("laptop-a", "laptop-b"):
        ledger = Ledger(tmp_path / f"{name}.sqlite3")
        backend, _ = moto_backend(ledger, creates)
        runners.append(sweeps.Runner(sweeps.save(planned, ledger), backend, ledger, sleep=lambda s: None,
                                     poll_seconds=0, count_elsewhere=False))
    runners[0].submit_ready()
    runners[1].submit_ready()  # every create answered ResourceInUse, adopted by tag
    for runner in runners:
        assert runner.run(max_steps=10).done
        assert set(states(runner).values()) == {"completed"}
    assert len(creates) == 4 and set(creates.values()) == {1}


def test_moto_a_fresh_home_continues_each_trial_from_its_latest_attempt_in_sagemaker(tmp_path, orch_home, bucket):
    """Laptop A stopped both jobs of a sweep, resumed it (-r1), and one -r1 failed and was
    retried (-r2): every trial completed. Laptop B, with a fresh ledger, runs the same sweep:
    it finds each trial's attempts in SageMaker and reports both completed, creating nothing
    (before, it adopted attempt 0 only and reported them stopped)."""
    creates: Counter = Counter()
    text = "sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [16, 32]\nmax_retries: 2\n"
    planned = sweeps.plan(load(tmp_path, text))
    ledger_a = Ledger(tmp_path / "laptop-a.sqlite3")
    backend_a, _ = moto_backend(ledger_a, creates)
    backend_a.stop = lambda name: set_moto_status(name, "Stopped")  # moto has no StopTrainingJob
    runner_a = sweeps.Runner(sweeps.save(planned, ledger_a), backend_a, ledger_a, sleep=lambda s: None,
                             poll_seconds=0, count_elsewhere=False)
    runner_a.submit_ready()
    firsts = sorted(creates)
    for name in firsts:
        set_moto_status(name, "InProgress")
    sweeps.request_stop(ledger_a, runner_a.d.sweep_id)
    assert len(sweeps.stop(runner_a).stopped_jobs) == 2
    sweeps.clear_stop(ledger_a, runner_a.d.sweep_id)
    runner_a.step()  # both resubmitted as -r1 (moto completes them at once)
    failing = firsts[1] + "-r1"
    fake = moto_shim.sagemaker_jobs("us-east-1")[failing]
    fake.training_job_status, fake.failure_reason = "Failed", "InternalServerError: try again"
    assert runner_a.run(max_steps=10).done
    assert {v.job_name: v.status for v in runner_a.views()} == {firsts[0] + "-r1": "completed",
                                                              firsts[1] + "-r2": "completed"}
    made = dict(creates)

    ledger_b = Ledger(tmp_path / "laptop-b.sqlite3")
    backend_b, _ = moto_backend(ledger_b, creates)
    runner_b = sweeps.Runner(sweeps.save(planned, ledger_b), backend_b, ledger_b, sleep=lambda s: None,
                             poll_seconds=0)
    final = runner_b.run(max_steps=5)
    assert final.done and final.counts == {"completed": 2}
    assert {v.job_name: (v.status, v.attempt) for v in runner_b.views()} == {
        firsts[0] + "-r1": ("completed", 1), firsts[1] + "-r2": ("completed", 2)}
    assert dict(creates) == made  # nothing created twice
    rows = {e.job_name: e.status for e in ledger_b.entries(sweep_id=runner_b.d.sweep_id)}
    assert rows == {firsts[0]: "stopped", firsts[1]: "stopped", firsts[0] + "-r1": "completed",
                    firsts[1] + "-r1": "failed", firsts[1] + "-r2": "completed"}
    assert not runner_b.has_work()


@pytest.mark.parametrize("command", ["resume", "run"])
def test_moto_cli_resume_continues_a_stopped_sweep(tmp_path, orch_home, bucket, command):
    """The QA case: a sweep stopped with jobs in flight and trials not yet submitted; `sweep
    resume` (a new process, the real backend), or `sweep run` of its file, submits the
    cancelled trials under their names and the stopped ones as -r1, and ends with every
    trial completed."""
    import os

    ledger = Ledger()
    creates: Counter = Counter()
    backend, _ = moto_backend(ledger, creates)
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    runner = sweeps.Runner(definition, backend, ledger, sleep=lambda s: None, poll_seconds=0,
                           count_elsewhere=False)
    runner.submit_ready()
    for name in creates:
        set_moto_status(name, "InProgress")
    backend.stop = lambda name: set_moto_status(name, "Stopped")  # moto has no StopTrainingJob
    sweeps.request_stop(ledger, definition.sweep_id)
    report = sweeps.stop(runner)
    assert len(report.stopped_jobs) == 2 and len(report.cancelled) == 2
    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(orch_home))
    target = definition.sweep_id if command == "resume" else str(tmp_path / "sweep.yaml")
    done = cli_run("sweep", command, target, "--poll", "0.1", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"sweep {definition.sweep_id}: 4 completed" in done.stdout
    for name in report.stopped_jobs:
        assert f"resubmitting as {name}-r1" in done.stdout
    states_now = {e.job_name: e.status for e in ledger.entries(sweep_id=definition.sweep_id)}
    assert {n: states_now[n] for n in report.stopped_jobs} == {n: "stopped" for n in report.stopped_jobs}
    assert all(states_now[n] == "completed" for n in report.cancelled)
    assert all(states_now[n + "-r1"] == "completed" for n in report.stopped_jobs)


def test_moto_rounds_ask_about_jobs_in_flight_not_the_whole_sweep(tmp_path, orch_home, bucket):
    """Issue 33, item 4: jobs held in flight for many rounds. Each round describes the jobs in
    flight (one DescribeTrainingJob each) and nothing else: the sweep's jobs are listed once
    per runner (not once per round, which grew with the square of the sweep), and no job's
    tags are asked: the ledger holds the request that set them (issue 35, item 5)."""
    from aws_calls import Calls

    ledger = Ledger()
    creates: Counter = Counter()
    backend, sm = moto_backend(ledger, creates)
    calls = Calls(sm._client)
    text = "sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [8, 16, 32, 64]\nconcurrency: 2\n"
    definition = sweeps.save(sweeps.plan(load(tmp_path, text)), ledger)
    runner = sweeps.Runner(definition, backend, ledger, sleep=lambda s: None, poll_seconds=0)
    held, rounds = 5, 0
    age: Counter = Counter()
    while not runner.step().done:
        rounds += 1
        for name in list(creates):
            age[name] += 1
            set_moto_status(name, "InProgress" if age[name] <= held else "Completed")
        assert rounds < 40
    assert len(creates) == 4 and set(states(runner).values()) == {"completed"}
    assert rounds >= 2 * held  # two waves of two jobs, each held `held` rounds
    assert len(calls.named("ListTrainingJobs")) <= 2  # adopt_remote's and the one for concurrency
    assert calls.named("ListTags") == []  # the ledger's requests hold each job's tags
    # One describe per submit (is the name free?) and one per job per round in flight.
    assert len(calls.named("DescribeTrainingJob")) <= 4 + 4 * (held + 1)
