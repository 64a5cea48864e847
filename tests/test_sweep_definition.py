"""A saved sweep (`sweep.definition`): save under the runner lock, resume from the ledger alone,
definitions of another schema, sweep ids and names, failure kinds."""

from __future__ import annotations

import pytest
from sweep_fakes import (
    ROOT,
    SWEEP,
    cli_run,
    load,
    write,
)

from orchestrator import spec
from orchestrator import sweep as sweeps
from orchestrator.errors import InputError
from orchestrator.ledger import Ledger


def test_a_refused_save_leaves_the_saved_definition_unchanged(tmp_path, orch_home):
    ledger = Ledger()
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    saved = ledger.get_value(f"sweep:{definition.sweep_id}")
    other = tmp_path / "elsewhere"
    other.mkdir()
    changed = sweeps.plan(load(other, SWEEP.replace("concurrency: 2", "concurrency: 3")
                               + "budget: {max_total_cost_usd: 90}\n"))
    assert changed.sweep_id == definition.sweep_id
    with sweeps.runner_lock(definition.sweep_id):  # a detached runner holds the sweep
        with pytest.raises(InputError) as info:
            sweeps.save(changed, ledger)
    assert "being run by another process" in info.value.message and "nothing was changed" in info.value.hint
    assert ledger.get_value(f"sweep:{definition.sweep_id}") == saved
    assert sweeps.save(changed, ledger).concurrency == 3  # once the runner is gone, it saves


def test_cli_sweep_run_refused_by_a_running_sweep_saves_nothing(tmp_path, orch_home):
    import os

    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(orch_home))
    ledger = Ledger()
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    saved = ledger.get_value(f"sweep:{definition.sweep_id}")
    other = tmp_path / "elsewhere"
    other.mkdir()
    path = write(other, SWEEP.replace("concurrency: 2", "concurrency: 3") + "budget: {max_total_cost_usd: 90}\n")
    with sweeps.runner_lock(definition.sweep_id):
        done = cli_run("sweep", "run", str(path), env=env)
    assert done.returncode == 2, done.stderr
    assert "being run by another process" in done.stderr and "Traceback" not in done.stderr
    assert ledger.get_value(f"sweep:{definition.sweep_id}") == saved


def test_the_runner_notes_trials_already_completed_under_another_sweep_id(rig):
    make, cloud, _ = rig
    runner = make("sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [16]\n")
    runner.step()
    cloud.finish_all()
    runner.step()
    edited = make("sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [16, 64]\n")
    assert edited.d.sweep_id != runner.d.sweep_id
    progress = edited.step()
    [note] = [e for e in progress.events if "already completed under another sweep id" in e]
    assert f"(as {next(iter(cloud.creates))})" in note and note.count("(as ") == 1
    assert sum("already completed" in e for e in edited.step().events) == 1  # said once


def test_run_resumes_from_the_ledger_alone(rig):
    make, cloud, clock = rig
    runner = make()
    runner.step()
    definition = sweeps.load_definition(runner.ledger, runner.d.sweep_id)
    assert definition.to_json() == runner.d.to_json()
    fresh = sweeps.Runner(definition, cloud, runner.ledger, sleep=clock.sleep, clock=clock, poll_seconds=1)
    cloud.finish_all()
    while not fresh.step().done:
        cloud.finish_all()
    assert len(cloud.creates) == 4 and set(cloud.creates.values()) == {1}


def test_a_definition_of_another_schema_says_how_to_go_on(rig):
    make, _, _ = rig
    runner = make()
    runner.step()
    key = f"sweep:{runner.d.sweep_id}"
    saved = runner.ledger.get_value(key)
    jobs = {v.job_name: v.status for v in runner.views()}
    for schema, advice in ((sweeps.definition.DEFINITION_SCHEMA + 1, "upgrade this orchestrator to the version that saved the sweep"),
                           (None, "use the orchestrator version that saved the sweep")):
        runner.ledger.put_value(key, {**saved, "schema": schema})
        with pytest.raises(InputError) as info:
            sweeps.load_definition(runner.ledger, runner.d.sweep_id)
        assert f"schema {schema!r}" in info.value.message
        assert info.value.hint == (f"{advice}, or save it again in this version's format: "
                                   f"`python -m orchestrator sweep run {saved['file']}`")
    # What the hint says works: the run saves the definition again and keeps the ledger's jobs.
    sweeps.save(sweeps.plan(spec.load_sweep(saved["file"])), runner.ledger)
    again = sweeps.load_definition(runner.ledger, runner.d.sweep_id)
    assert again.to_json() == saved
    assert {v.job_name: v.status for v in sweeps.Runner(again, None, runner.ledger).views()} == jobs
    # A scheduled tick's definition is written by the schedule only: no `sweep run` to offer.
    runner.ledger.put_value(key, {**saved, "schema": sweeps.definition.DEFINITION_SCHEMA + 1, "tick": "202601010300"})
    with pytest.raises(InputError) as info:
        sweeps.load_definition(runner.ledger, runner.d.sweep_id)
    assert info.value.hint == "upgrade this orchestrator to the version that saved the sweep"


def test_unknown_sweep_id_names_the_known_ones(rig):
    make, _, _ = rig
    runner = make()
    with pytest.raises(InputError) as info:
        sweeps.load_definition(runner.ledger, "nope-00000000")
    assert runner.d.sweep_id in info.value.hint


def test_a_sweep_is_found_by_its_id_or_by_a_name_only_one_sweep_has(rig):
    make, _, _ = rig
    runner = make()
    ledger = runner.ledger
    assert sweeps.find_sweep_id(ledger, runner.d.sweep_id) == runner.d.sweep_id
    assert sweeps.find_sweep_id(ledger, "demo") == runner.d.sweep_id
    edited = make(SWEEP.replace("concurrency: 2", "concurrency: 3").replace("[16, 32]", "[16, 48]"))
    assert edited.d.sweep_id != runner.d.sweep_id
    with pytest.raises(InputError) as info:
        sweeps.find_sweep_id(ledger, "demo")
    assert "'demo' names 2 sweeps" in info.value.message
    assert runner.d.sweep_id in info.value.message and edited.d.sweep_id in info.value.message
    assert "give the sweep id" in info.value.hint
    with pytest.raises(InputError) as info:
        sweeps.find_sweep_id(ledger, "dem")
    assert "no sweep 'dem'" in info.value.message and runner.d.sweep_id in info.value.hint


def test_classify_failure_reasons():
    assert sweeps.failure_kind("[capacity] CreateTrainingJob refused") == "capacity"
    assert sweeps.failure_kind("CapacityError: Unable to provision requested ML compute capacity") == "capacity"
    assert sweeps.failure_kind("Job was interrupted by a spot interruption") == "spot"
    assert sweeps.failure_kind("InternalServerError: We encountered an internal error") == "internal"
    assert sweeps.failure_kind("AlgorithmError: see logs") == "user"
    assert sweeps.failure_kind(None) == "user"
