"""Sweeps across backends: `variants` vary `backend` with `instance.type`, each trial runs on its
own backend (saved in the definition, recorded in the ledger, routed by `sweep.Router`), and
the failure classification knows AWS Batch's reasons."""

from __future__ import annotations

import io
import json
import random

import pytest
from sweep_fakes import Clock, FakeCloud, line_of, load, problems_of, write

from orchestrator import spec
from orchestrator import sweep as sweeps
from orchestrator.backends import JobStatus, UnknownJob
from orchestrator.errors import InputError
from orchestrator.ledger import Ledger

VARIANTS = """\
sweep: mixed
base: base.yaml
variants:
  - {backend: sagemaker, instance.type: ml.trn1.2xlarge}
  - {backend: batch, instance.type: inf2.xlarge, role_arn: null, data.num_workers: 1}
grid:
  training.batch_size: [16, 32]
concurrency: 3
"""


class FakeBatch(FakeCloud):
    """FakeCloud under the batch name, reading a SubmitJob request."""

    name = "batch"
    place = "the fake batch"

    def status(self, job_name: str) -> JobStatus:
        if job_name not in self.jobs:
            raise UnknownJob(f"no job {job_name}")
        job = self.jobs[job_name]
        env = {e["name"]: e["value"] for e in job["request"]["containerOverrides"]["environment"]}
        return JobStatus(job_name, job["status"], failure_reason=job["reason"], tags=dict(job["request"]["tags"]),
                         instance_type=env["SM_CURRENT_INSTANCE_TYPE"])

    def instance_of(self, job_name: str) -> str:
        env = self.jobs[job_name]["request"]["containerOverrides"]["environment"]
        return next(e["value"] for e in env if e["name"] == "SM_CURRENT_INSTANCE_TYPE")


@pytest.fixture
def mixed(tmp_path, orch_home):
    """(runner factory, sagemaker fake, batch fake, clock) for a sweep over both backends."""
    ledger = Ledger()
    clouds = {"sagemaker": FakeCloud(ledger), "batch": FakeBatch(ledger)}
    clock = Clock()

    def make(text: str = VARIANTS, **options) -> sweeps.Runner:
        definition = sweeps.save(sweeps.plan(load(tmp_path, text)), ledger)
        router = sweeps.Router(definition.backends, given=clouds)
        return sweeps.Runner(definition, router, ledger, sleep=clock.sleep, clock=clock, rng=random.Random(0),
                             poll_seconds=5.0, **options)

    return make, clouds["sagemaker"], clouds["batch"], clock


# --- the sweep spec -----------------------------------------------------------------------------


def test_variants_are_linked_points_crossed_with_the_grid(tmp_path):
    trials, _ = sweeps.expand(load(tmp_path, VARIANTS))
    assert [(t.spec.backend, t.spec.instance.type, t.spec.training.batch_size) for t in trials] == [
        ("sagemaker", "ml.trn1.2xlarge", 16), ("sagemaker", "ml.trn1.2xlarge", 32),
        ("batch", "inf2.xlarge", 16), ("batch", "inf2.xlarge", 32)]
    batch = trials[2]
    assert batch.spec.role_arn is None and batch.spec.data.num_workers == 1
    assert batch.overrides == {"backend": "batch", "instance.type": "inf2.xlarge", "role_arn": None,
                               "data.num_workers": 1, "training.batch_size": 16}


def test_backend_varies_only_in_a_variant_with_its_instance_type(tmp_path):
    text = "sweep: s\nbase: base.yaml\ngrid:\n  backend: [sagemaker, batch]\n"
    [problem] = problems_of(tmp_path, text)
    assert problem.path == "backend" and "variants" in problem.message and problem.line == line_of(text, "backend:")
    text = "sweep: s\nbase: base.yaml\nvariants:\n  - {backend: batch, role_arn: null}\n"
    [problem] = problems_of(tmp_path, text)
    assert problem.path == "backend" and "without instance.type" in problem.message and problem.line == 4
    text = "sweep: s\nbase: base.yaml\nvariants:\n  - {region: us-west-2}\n"
    [problem] = problems_of(tmp_path, text)
    assert problem.path == "region" and "one region" in problem.message


def test_a_variant_path_also_on_the_grid_is_a_duplicate_axis(tmp_path):
    text = VARIANTS.replace("training.batch_size: [16, 32]", "instance.type: [ml.trn1.32xlarge]")
    problems = problems_of(tmp_path, text)
    assert any("duplicate axis" in p.message and p.path == "instance.type" for p in problems)
    text = "sweep: s\nbase: base.yaml\nvariants:\n  - {}\n"
    [problem] = problems_of(tmp_path, text)
    assert "empty variant" in problem.message


def test_a_backend_whose_instance_type_does_not_fit_is_refused_naming_the_trial(tmp_path):
    text = VARIANTS.replace("instance.type: inf2.xlarge", "instance.type: ml.trn1.2xlarge")
    problems = problems_of(tmp_path, text)
    assert problems and all("N040-batch-instance-type" in p.message for p in problems)
    assert "trial 2 " in problems[0].message and "backend=batch" in problems[0].message
    assert problems[0].line == line_of(text, "backend: batch")


def test_sweep_plan_cli_exits_2_for_the_misfit(tmp_path, orch_home):
    from sweep_fakes import cli_run

    path = write(tmp_path, VARIANTS.replace("backend: sagemaker, instance.type: ml.trn1.2xlarge",
                                            "backend: sagemaker, instance.type: inf2.xlarge"))
    done = cli_run("sweep", "plan", str(path))
    assert done.returncode == 2, done.stderr
    assert "trial 0" in done.stderr and "N001" in done.stderr


# --- the definition and the ledger ----------------------------------------------------------------


def test_each_trial_backend_is_saved_and_recorded_in_its_intent(mixed):
    make, _, _, _ = mixed
    runner = make()
    saved = runner.ledger.get_value(f"sweep:{runner.d.sweep_id}")
    assert saved["schema"] >= 2  # an earlier version, which would run every trial on one backend, refuses it
    assert [t["backend"] for t in saved["trials"]] == ["sagemaker", "sagemaker", "batch", "batch"]
    assert runner.d.backends == ("sagemaker", "batch")
    rows = {e.job_name: e for e in runner.ledger.entries(sweep_id=runner.d.sweep_id)}
    for trial in runner.d.trials:
        row = rows[runner.ident.job_name(trial.trial_id)]
        assert row.backend == trial.backend
        assert ("jobQueue" in row.request) == (trial.backend == "batch")
    again = sweeps.load_definition(runner.ledger, runner.d.sweep_id)
    assert again.to_json() == saved and [t.backend for t in again.trials] == ["sagemaker"] * 2 + ["batch"] * 2


def test_a_sweep_is_saved_in_the_newest_schema(tmp_path, orch_home):
    # Its trials' specs carry this version's fields: an earlier version must say "newer" (issue 33).
    from sweep_fakes import SWEEP

    from orchestrator.sweep.definition import DEFINITION_SCHEMA

    ledger = Ledger()
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    saved = ledger.get_value(f"sweep:{definition.sweep_id}")
    assert saved["schema"] == DEFINITION_SCHEMA and {t["backend"] for t in saved["trials"]} == {"sagemaker"}


def test_an_old_definition_with_one_backend_is_read_and_runs(tmp_path, orch_home):
    """What earlier versions saved: schema 1, the backend once for the sweep, none per trial."""
    from sweep_fakes import SWEEP

    ledger = Ledger()
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    old = {**definition.to_json(), "schema": 1}
    for trial in old["trials"]:
        del trial["backend"]
    assert old["backend"] == "sagemaker"
    ledger.put_value(f"sweep:{definition.sweep_id}", json.loads(json.dumps(old)))
    again = sweeps.load_definition(ledger, definition.sweep_id)
    assert [t.backend for t in again.trials] == ["sagemaker"] * 4 and again.backends == ("sagemaker",)
    cloud = FakeCloud(ledger)
    runner = sweeps.Runner(again, cloud, ledger, sleep=lambda s: None, poll_seconds=0)
    runner.step()
    assert len(cloud.jobs) == 2  # concurrency 2 of SWEEP


def test_a_definition_whose_trial_contradicts_its_spec_is_damaged(mixed):
    make, _, _, _ = mixed
    runner = make()
    key = f"sweep:{runner.d.sweep_id}"
    saved = runner.ledger.get_value(key)
    saved["trials"][0]["backend"] = "batch"
    runner.ledger.put_value(key, saved)
    with pytest.raises(InputError) as info:
        sweeps.load_definition(runner.ledger, runner.d.sweep_id)
    assert "damaged" in info.value.message and saved["trials"][0]["trial_id"] in info.value.message


# --- the runner -----------------------------------------------------------------------------------


def test_each_trial_is_submitted_refreshed_and_stopped_on_its_own_backend(mixed):
    make, sagemaker, batch, _ = mixed
    runner = make()
    runner.step()
    # Concurrency 3 counts both backends together.
    assert len(sagemaker.jobs) + len(batch.jobs) == 3
    by_trial = {t.trial_id: t for t in runner.d.trials}
    for cloud in (sagemaker, batch):
        for name in cloud.jobs:
            assert by_trial[runner.ident.parse(name)[0]].backend == cloud.name
    assert {batch.instance_of(n) for n in batch.jobs} == {"inf2.xlarge"}
    first_batch = sorted(batch.jobs)[0]
    batch.finish(first_batch)
    runner.step()
    assert runner.ledger.get(first_batch).status == "completed"
    assert len(sagemaker.jobs) + len(batch.jobs) == 4
    report = sweeps.stop(runner)
    assert set(report.stopped_jobs) == {n for c in (sagemaker, batch) for n in c.jobs if n != first_batch}
    assert set(batch.stopped) | set(sagemaker.stopped) == set(report.stopped_jobs)
    assert not set(batch.stopped) & set(sagemaker.jobs)


def test_a_spot_reclaim_on_batch_is_retried_on_batch(mixed):
    make, sagemaker, batch, _ = mixed
    runner = make(VARIANTS.replace("concurrency: 3", "concurrency: 4"))
    runner.step()
    name = sorted(batch.jobs)[0]
    batch.finish(name, "failed", "Host EC2 (instance i-0123456789abcdef0) terminated.")
    runner.step()
    retry = f"{name}-r1"
    assert retry in batch.jobs and retry not in sagemaker.jobs
    row = runner.ledger.get(retry)
    assert row.backend == "batch" and row.request["jobQueue"] == "orchestrator-inf2-xlarge"


def test_a_single_backend_object_serves_only_its_own_trials_of_a_mixed_sweep(tmp_path, orch_home):
    ledger = Ledger()
    definition = sweeps.save(sweeps.plan(load(tmp_path, VARIANTS)), ledger)
    cloud = FakeCloud(ledger)
    runner = sweeps.Runner(definition, cloud, ledger, sleep=lambda s: None, poll_seconds=0)
    assert runner.backends.get("sagemaker") is cloud
    with pytest.raises(InputError, match="batch backend"):
        runner.backends.get("batch")


def test_the_router_makes_each_backend_once_when_first_needed():
    made = []

    class Made:
        shared = True
        sweep_poll_s = 30.0

        def __init__(self, name):
            self.name = name

    def make(name):
        made.append(name)
        return Made(name)

    router = sweeps.Router(["sagemaker", "batch"], make)
    assert made == []
    assert router.get("batch") is router.get("batch") and made == ["batch"]
    assert [b.name for b in router.shared()] == ["sagemaker", "batch"] and made == ["batch", "sagemaker"]
    assert [b.name for b in router.shared(["batch"])] == ["batch"]


def test_sweep_status_shows_each_trial_backend(mixed, monkeypatch):
    from sweep_fakes import invoke

    from orchestrator.cli import sweep as cli

    make, sagemaker, batch, _ = mixed
    runner = make()
    runner.step()
    monkeypatch.setattr("orchestrator.actions.sweeps.sweep_backend", lambda definition, ledger: runner.backends)
    monkeypatch.setenv("COLUMNS", "200")  # the table's columns whole (80 columns fold them: test_cli_sweep)
    done = invoke("sweep", "status", runner.d.sweep_id, "--json")
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert [t["backend"] for t in doc["trials"]] == ["sagemaker", "sagemaker", "batch", "batch"]
    done = invoke("sweep", "status", runner.d.sweep_id)
    assert done.exit_code == 0, done.output
    assert "sagemaker, batch" in done.output
    # Rules between the columns, none at the edges (`cli.output.fitted_table`).
    rows = [[cell.strip() for cell in line.split("│")] for line in done.output.splitlines()
            if line.count("│") >= 8 and ("inf2" in line or "ml.trn1" in line)]
    assert {(row[4], row[5]) for row in rows if row[4]} == {("sagemaker", "ml.trn1.2xlarge"), ("batch", "inf2.xlarge")}
    display = cli.SweepDisplay(runner).render(runner.progress())
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(display)
    live = console.export_text()
    assert "backend" in live and "│ batch " in live and "│ sagemaker " in live


# --- failures -------------------------------------------------------------------------------------


@pytest.mark.parametrize("reason, kind", [
    # A spot reclaim or instance failure (AWS Batch user guide, "Automated job retries": "Host EC2*").
    ("Host EC2 (instance i-0123456789abcdef0) terminated.", "spot"),
    ("Host EC2 (instance i-0abc) terminated.; exit code 143", "spot"),
    # The queue's time limit cancelled a job stuck RUNNABLE ("Jobs stuck in RUNNABLE due to capacity").
    ("Canceled by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", "capacity"),
    ("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity requested for instance type "
     "inf2.xlarge", "capacity"),
    # Misconfiguration: the stack must change, whatever word the message has.
    ("Canceled by JobStateTimeLimit action due to reason: MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT", "user"),
    ("MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE - CE(s) associated with the job queue cannot meet the "
     "capacity requirement of the job.", "user"),
    ("ACTION_REQUIRED - CE(s) associated with the job queue are invalid.", "user"),
    # The image.
    ("Task failed to start; CannotPullContainerError: failed to resolve ref 763104351884.dkr.ecr.us-east-1."
     "amazonaws.com/pytorch-training-neuronx:9.9: not found", "user"),
    ("Task failed to start; CannotPullContainerError: pull access denied for pytorch-training-neuronx", "user"),
    ("Task failed to start; CannotPullContainerError: context deadline exceeded (Client.Timeout exceeded while "
     "awaiting headers)", "internal"),
    ("Task failed to start; DockerTimeoutError: Could not transition to created; timed out after waiting 4m0s",
     "internal"),
    # launch.py's own exit: training failed (its reason is in the log and results.json).
    ("Essential container in task exited; exit code 1", "user"),
    ("Essential container in task exited; OutOfMemoryError: Container killed due to memory usage; exit code 137",
     "user"),
    ("Job attempt duration exceeded timeout; exit code 143", "user"),
])
def test_batch_failure_reasons_are_classified(reason, kind):
    assert sweeps.failure_kind(reason) == kind
    assert (kind in sweeps.failures.RETRYABLE) == (kind in ("spot", "capacity", "internal"))


def test_a_time_limit_cancel_reads_as_failed_not_stopped():
    from orchestrator.backends.batch import BatchBackend

    backend = BatchBackend.__new__(BatchBackend)
    backend._ledger = Ledger()
    d = {"jobName": "j", "status": "FAILED", "isCancelled": True, "attempts": [],
         "statusReason": "Canceled by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"}
    status = backend._job_status(d, tags={})
    assert status.status == "failed" and sweeps.failure_kind(status.failure_reason) == "capacity"
    # TerminateJob of ours, or anyone's cancel, is a stop.
    assert backend._job_status({**d, "statusReason": "cancelled in the console"}, tags={}).status == "stopped"


def test_the_comparison_sweep_plans_both_backends_with_costs():
    from sweep_fakes import ROOT

    planned = sweeps.plan(spec.load_sweep(ROOT / "configs" / "sweep-inf2-vs-trn1.yaml"))
    rows = [(t.trial.spec.backend, t.trial.spec.instance.type) for t in planned.trials]
    assert rows == [("sagemaker", "ml.trn1.2xlarge"), ("batch", "inf2.xlarge"), ("batch", "inf2.8xlarge")]
    reference = spec.load(ROOT / "configs" / "vit-trn1-2xlarge.yaml")
    assert planned.trials[0].trial.spec_hash == spec.spec_hash(reference)  # exactly the reference job
    for t in planned.trials:
        assert t.trial.spec.model == reference.model and t.trial.spec.training == reference.training
        assert 0 < t.usd_max < float("inf")
    assert planned.total_usd == pytest.approx(sum(t.usd_max for t in planned.trials))
    sweeps.check_budget(planned)
    assert planned.trials[0].prepared.request["ResourceConfig"]["InstanceType"] == "ml.trn1.2xlarge"
    assert planned.trials[1].prepared.request["jobQueue"] == "orchestrator-inf2-xlarge"
    assert planned.trials[2].prepared.request["jobDefinition"] == "orchestrator-neuron-1chip"


def test_in_a_sweep_across_backends_each_trial_fails_over_within_its_backend(tmp_path):
    text = VARIANTS + "failover: {instance.type: [ml.trn1.32xlarge, inf2.8xlarge]}\n"
    planned = sweeps.plan(load(tmp_path, text))
    chains = {t.trial.spec.backend: t.chain for t in planned.trials}
    assert chains == {"sagemaker": ("ml.trn1.2xlarge", "ml.trn1.32xlarge"), "batch": ("inf2.xlarge", "inf2.8xlarge")}
    assert all(len(t.chain_usd) == 2 for t in planned.trials)
    saved = sweeps.Definition.of(planned)
    assert {t.backend: t.chain for t in saved.trials} == chains
    # A type no trial's backend runs is refused where it is written.
    text = VARIANTS + "failover: {instance.type: [ml.p4d.24xlarge]}\n"
    problems = problems_of(tmp_path, text)
    assert any(p.path == "failover.instance.type" and "ml.p4d.24xlarge" in p.message
               and p.line == line_of(text, "failover") for p in problems)
    # A sweep on one backend keeps refusing a failover type the doctor refuses.
    from sweep_fakes import SWEEP

    problems = problems_of(tmp_path, SWEEP + "failover: {instance.type: [inf2.xlarge]}\n")
    assert any("failing over to inf2.xlarge" in p.message for p in problems)


def test_another_backends_failover_type_is_skipped_even_when_it_also_breaks_the_budget(tmp_path):
    """QA: the batch trial's budget also refuses ml.trn1n.32xlarge (N016 besides N040); the
    type is still SageMaker's, not this trial's, so it is skipped, not a refusal."""
    text = (VARIANTS.replace("instance.type: ml.trn1.2xlarge}", "instance.type: ml.trn1.2xlarge, budget.max_cost_usd: 1000}")
            .replace("data.num_workers: 1}", "data.num_workers: 1, budget.max_cost_usd: 5}")
            + "failover: {instance.type: [ml.trn1n.32xlarge, inf2.8xlarge]}\n")
    planned = sweeps.plan(load(tmp_path, text))
    chains = {t.trial.spec.backend: t.chain for t in planned.trials}
    assert chains == {"sagemaker": ("ml.trn1.2xlarge", "ml.trn1n.32xlarge"), "batch": ("inf2.xlarge", "inf2.8xlarge")}
    # A failover type of the trial's own backend that breaks its budget is still refused.
    text = text.replace("budget.max_cost_usd: 5}", "budget.max_cost_usd: 2}")
    assert any("failing over to inf2.8xlarge" in p.message and "N016" in p.message for p in problems_of(tmp_path, text))


def test_the_router_poll_interval_needs_no_backend_made():
    router = sweeps.Router.create(["sagemaker", "batch"], region="us-east-1", ledger=None)
    assert router.sweep_poll_s == 30.0 and router._made == {}


def test_plan_json_names_each_trial_backend(tmp_path):
    doc = sweeps.plan(load(tmp_path, VARIANTS)).to_json()
    assert doc["backends"] == ["sagemaker", "batch"]
    assert [t["backend"] for t in doc["trials"]] == ["sagemaker", "sagemaker", "batch", "batch"]


def test_a_scheduled_sweep_across_backends_submits_each_tick_trial_on_its_backend(tmp_path, orch_home):
    from datetime import datetime, timezone

    from orchestrator import schedule as schedules
    from orchestrator.cli import schedule as schedule_cli

    path = write(tmp_path, VARIANTS + 'schedule: {cron: "0 3 * * *"}\n')
    # What `schedule run|tick` builds: a router of every backend the variants name, none made yet.
    scheduler = schedule_cli._scheduler(path, None)
    assert scheduler.backend.names == ("sagemaker", "batch") and scheduler.backend._made == {}
    assert scheduler.runner_options["poll_seconds"] == 30.0
    ledger = Ledger()
    clouds = {"sagemaker": FakeCloud(ledger), "batch": FakeBatch(ledger)}
    clock = Clock()
    clock.now = datetime(2026, 1, 5, 3, 0, 30, tzinfo=timezone.utc).timestamp()
    router = sweeps.Router(["sagemaker", "batch"], given=clouds)
    report = schedules.Scheduler(spec.load_sweep(path), router, ledger, clock=clock, sleep=clock.sleep).evaluate()
    [sweep_id] = report.planned
    assert len(clouds["sagemaker"].jobs) == 2 and len(clouds["batch"].jobs) == 1  # concurrency 3
    assert {ledger.get(n).backend for n in clouds["batch"].jobs} == {"batch"}
    assert all(n.startswith(sweep_id) for c in clouds.values() for n in c.jobs)


def test_a_sweep_of_variants_alone_is_told_from_a_job_spec():
    from orchestrator.spec import loading

    assert loading.document_kind({"base": "base.yaml", "variants": [{"instance.type": "ml.trn1.32xlarge"}]}) == "sweep"
