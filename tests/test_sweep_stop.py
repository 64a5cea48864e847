"""`sweep stop` and what a resume reopens (`sweep.stop`, `sweep.runner`, `sweep.history`): cancelled and
stopped trials, the budget of resubmissions and retries."""

from __future__ import annotations

from collections import Counter

import pytest
from sweep_fakes import (
    SWEEP,
    invoke,
    states,
    sweep_stop,
)

from orchestrator import sweep as sweeps
from orchestrator.ledger import Ledger
from orchestrator.sweep.router import Router


def test_stop_cancels_planned_trials_and_stops_jobs_in_flight(rig):
    make, cloud, _ = rig
    runner = make()
    runner.step()
    report = sweep_stop(runner)
    assert sorted(report.stopped_jobs) == sorted(cloud.jobs) and len(report.cancelled) == 2
    assert set(states(runner).values()) == {"stopped"}
    assert runner.step().stopped and len(cloud.jobs) == 2  # a runner started later submits nothing


def _one_job_stopped_then_resumed(make, cloud, text: str):
    """(runner, job) for a one-trial sweep whose job `sweep stop` stopped in flight, with the
    stop flag cleared again as `sweep resume` does first."""
    runner = make(text)
    runner.step()
    [job] = cloud.jobs
    sweep_stop(runner)
    sweeps.clear_stop(runner.ledger, runner.d.sweep_id)
    return runner, job


def _stopped_midway(make, cloud, text: str = SWEEP):
    """A sweep of 4 trials, concurrency 2, stopped with 1 completed, 2 in flight, 1 planned."""
    runner = make(text)
    runner.step()
    first = sorted(cloud.jobs)[0]
    cloud.finish(first)
    runner.step()
    assert Counter(states(runner).values()) == {"completed": 1, "submitted": 2, "planned": 1}
    report = sweep_stop(runner)
    assert len(report.stopped_jobs) == 2 and len(report.cancelled) == 1
    return runner, first, report


def test_resume_after_stop_reopens_cancelled_trials_and_resubmits_stopped_jobs(rig):
    make, cloud, clock = rig
    runner, first, report = _stopped_midway(make, cloud)
    assert runner.step().stopped and len(cloud.jobs) == 3  # the flag still set: nothing moves
    sweeps.clear_stop(runner.ledger, runner.d.sweep_id)  # what `sweep resume` and `sweep run` do
    progress = runner.step()
    views = {v.trial.trial_id: v for v in runner.views()}
    [cancelled] = report.cancelled
    by_name = {v.job_name: v for v in views.values()}
    # Cancelled before submission: planned again under the same name (attempt 0).
    assert by_name[cancelled].attempt == 0 and by_name[cancelled].status in ("planned", "submitted")
    # Stopped in flight: resubmitted as -r1 of the same trial, on the same instance type.
    for name in report.stopped_jobs:
        trial = runner.ledger.get(name).trial_id
        assert runner.ledger.get(name).status == "stopped"
        assert views[trial].job_name == name + "-r1" and views[trial].status in ("planned", "submitted")
        assert views[trial].instance_type == cloud.instance_of(name)
    assert any("its cost is spent" in e for e in progress.events)
    assert any(f"{cancelled}: planned again" in e for e in progress.events)
    assert by_name[first].status == "completed" and by_name[first].attempt == 0  # left alone
    while not runner.step().done:
        cloud.finish_all()
    assert set(states(runner).values()) == {"completed"} and set(cloud.creates.values()) == {1}
    assert len(cloud.creates) == 6 and cloud.max_in_flight <= 2 and cancelled in cloud.creates
    # A later resume finds nothing to reopen.
    fresh = sweeps.Runner(runner.d, cloud, runner.ledger, sleep=clock.sleep, clock=clock)
    assert fresh.step().done and len(cloud.creates) == 6


def test_a_resubmission_after_stop_does_not_use_up_max_retries(rig):
    make, cloud, _ = rig
    runner, job = _one_job_stopped_then_resumed(make, cloud, "sweep: demo\nbase: base.yaml\nmax_retries: 1\n")
    runner.step()
    cloud.finish(job + "-r1", "failed", "InternalServerError: internal error")
    runner.step()
    runner.step()
    [view] = runner.views()
    assert view.job_name == job + "-r2" and view.status == "submitted"  # the one retry is still there


def test_reopening_killed_halfway_continues_under_the_same_names(rig, monkeypatch):
    make, cloud, clock = rig
    runner, _, report = _stopped_midway(make, cloud)
    sweeps.clear_stop(runner.ledger, runner.d.sweep_id)
    real = Ledger.record_intent

    def killed(self, job_name, **kwargs):
        if job_name.endswith("-r1"):
            raise KeyboardInterrupt  # the process dies after the attempt record, before the row
        return real(self, job_name, **kwargs)

    monkeypatch.setattr(Ledger, "record_intent", killed)
    with pytest.raises(KeyboardInterrupt):
        runner.step()
    monkeypatch.setattr(Ledger, "record_intent", real)
    fresh = sweeps.Runner(runner.d, cloud, runner.ledger, sleep=clock.sleep, clock=clock, poll_seconds=0)
    while not fresh.step().done:
        cloud.finish_all()
    names = {e.job_name for e in runner.ledger.entries(sweep_id=runner.d.sweep_id)}
    assert {n + "-r1" for n in report.stopped_jobs} <= names and len(names) == 6
    assert set(cloud.creates.values()) == {1} and len(cloud.creates) == 6


def test_rows_stopped_by_an_older_version_are_told_apart_by_the_backend(rig):
    make, cloud, _ = rig
    runner, _, report = _stopped_midway(make, cloud)
    for entry in runner.ledger.entries(sweep_id=runner.d.sweep_id, statuses=("stopped",)):
        runner.ledger.transition(entry.job_name, "stopped", detail=sweeps.STOPPED_LEGACY)
    sweeps.clear_stop(runner.ledger, runner.d.sweep_id)
    runner.step()
    names = {e.job_name: e.status for e in runner.ledger.entries(sweep_id=runner.d.sweep_id)}
    [cancelled] = report.cancelled
    assert cancelled + "-r1" not in names and names[cancelled] in ("planned", "submitted")
    assert all(n + "-r1" in names for n in report.stopped_jobs)


def test_a_resubmission_after_stop_above_budget_is_not_made(rig):
    make, cloud, _ = rig
    # One trn1.2xlarge hour is bounded at about 2.02 USD: the stopped job's bound is spent, no room for another.
    runner, job = _one_job_stopped_then_resumed(make, cloud,
                                                "sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 2}\n")
    first = runner.step()
    second = runner.step()
    [view] = runner.views()
    assert view.job_name == job and view.status == "stopped" and view.final and second.done
    assert "not resubmitted" in view.detail and "above budget.max_total_cost_usd 2" in view.detail
    assert sum("not resubmitted" in e for e in second.events) == 1 == sum("not resubmitted" in e for e in first.events)
    assert list(cloud.jobs) == [job]


def test_a_job_stopped_while_starting_counts_what_it_billed_not_its_bound(rig):
    """SageMaker bills a job stopped while Starting next to nothing: the sweep's budget counts
    the billable seconds it reports (DescribeTrainingJob), not the job's max-run bound."""
    make, cloud, _ = rig
    # Each job's bound is about 2.02 USD (an hour of trn1.2xlarge at EC2's price x 1.5): a budget
    # of 3 has room for the resubmission only if the stopped job counts what it billed.
    runner, job = _one_job_stopped_then_resumed(make, cloud,
                                                "sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 3}\n")
    cloud.jobs[job]["billable"] = 0  # Stopped while Starting: nothing billed
    runner.step()
    assert sorted(cloud.jobs) == [job, job + "-r1"]
    assert runner.ledger.get_value(f"sweep:{runner.d.sweep_id}:billed:{job}") == 0
    # A job that ran half its hour counts half its bound.
    cloud.jobs[job + "-r1"].update(status="failed", reason="InternalServerError: boom", billable=1800)
    runner.step()
    assert runner.ledger.get_value(f"sweep:{runner.d.sweep_id}:billed:{job}-r1") == 1800
    [view] = runner.views()
    # 0 + 1.01 + 2.02 > 3: the retry is refused, by what was billed and the retry's bound.
    assert view.status == "failed" and "cost bound to 3.02 USD" in view.detail


def test_a_stopped_job_without_billable_seconds_counts_its_whole_bound(rig):
    make, cloud, _ = rig
    runner, job = _one_job_stopped_then_resumed(make, cloud,
                                                "sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 3}\n")
    runner.step()  # the fake reports no billable seconds: the bound counts, no room
    [view] = runner.views()
    assert view.status == "stopped" and list(cloud.jobs) == [job]


def test_a_budget_refusal_says_what_to_do_and_resume_takes_the_raised_budget(rig, tmp_path, monkeypatch):

    make, cloud, _ = rig
    text = "sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 3}\n"
    runner, job = _one_job_stopped_then_resumed(make, cloud, text)
    runner.step()
    [view] = runner.views()
    assert view.status == "stopped" and "not resubmitted" in view.detail
    sweep_file = tmp_path / "sweep.yaml"
    assert (f"to run it, raise budget.max_total_cost_usd in {sweep_file.resolve()}, then `python -m orchestrator "
            f"sweep resume {runner.d.sweep_id}`") in view.detail
    # The budget raised in the file: `sweep resume` reads it (as `sweep run` would) and resubmits.
    sweep_file.write_text(text.replace(": 3}", ": 10}"))

    def submit_and_finish(prepared, _submit=cloud.submit):
        result = _submit(prepared)
        cloud.finish(prepared.job_name)
        return result

    monkeypatch.setattr(cloud, "submit", submit_and_finish)
    monkeypatch.setattr("orchestrator.actions.sweeps.sweep_backend", lambda definition, ledger: Router.of(cloud, definition.backends))
    done = invoke("sweep", "resume", runner.d.sweep_id, "--poll", "0.1")
    assert done.exit_code == 0, (done.output, done.exception)
    assert f"took budget.max_total_cost_usd 3.0 -> 10.0 from {sweep_file.resolve()}" in done.output
    assert sorted(cloud.jobs) == [job, job + "-r1"] and cloud.jobs[job + "-r1"]["status"] == "completed"
    assert sweeps.load_definition(runner.ledger, runner.d.sweep_id).budget_usd == 10


def test_a_retry_refused_by_the_budget_runs_once_the_budget_is_raised(rig, tmp_path):
    make, cloud, _ = rig
    text = "sweep: demo\nbase: base.yaml\nmax_retries: 1\nbudget: {max_total_cost_usd: 3}\n"
    runner = make(text)
    runner.step()
    [job] = cloud.jobs
    cloud.finish(job, "failed", "InternalServerError: boom")
    runner.step()
    runner.step()
    [view] = runner.views()
    assert view.final and view.detail.startswith("[budget] InternalServerError: boom; a retry would")
    assert "raise budget.max_total_cost_usd" in view.detail and not runner.has_work()
    assert sum("not retried (budget)" in e for e in runner.progress().events) == 1  # said once
    (tmp_path / "sweep.yaml").write_text(text.replace(": 3}", ": 10}"))
    definition, note = sweeps.reload_policy(runner.ledger, runner.d)
    assert definition.budget_usd == 10 and "3.0 -> 10.0" in note
    raised = sweeps.Runner(definition, cloud, runner.ledger, sleep=lambda s: None, poll_seconds=0)
    assert raised.has_work()
    raised.step()
    assert sorted(cloud.jobs) == [job, job + "-r1"]


def test_resume_keeps_the_saved_settings_when_the_file_became_another_sweep(rig, tmp_path):
    make, _, _ = rig
    runner = make("sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 3}\n")
    (tmp_path / "sweep.yaml").write_text("sweep: demo\nbase: base.yaml\ngrid: {training.batch_size: [8, 16]}\n")
    definition, note = sweeps.reload_policy(runner.ledger, runner.d)
    assert definition == runner.d and "now describes another sweep" in note and "sweep run" in note
    (tmp_path / "sweep.yaml").unlink()
    definition, note = sweeps.reload_policy(runner.ledger, runner.d)
    assert definition == runner.d and "could not be read again" in note
