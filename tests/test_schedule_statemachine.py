"""A sweep compiled to a Step Functions state machine (`schedule.statemachine`): the ASL's
structure, every embedded request against `sweep plan`'s and the contract check, and runs of
it by moto's interpreter (the moto server's `execute_state_machine` configuration)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import moto_shim
import pytest
from schedule_moto import interpreter_on, run_once
from sweep_fakes import ROOT, write

from orchestrator import names, request, spec
from orchestrator import sweep as sweeps
from orchestrator.errors import InputError
from orchestrator.schedule import statemachine as sm
from orchestrator.schedule.compiled import compile_schedule
from orchestrator.spec.models import MAX_NAME

NIGHTLY = ROOT / "configs" / "sweep-nightly.yaml"
RUN = "202612050300"
RUN_TIME = datetime(2026, 12, 5, 3, 0, tzinfo=timezone.utc)

def sent(attempt: dict, run: str = RUN) -> dict:
    """The request an item's attempt sends in run `run`, as the Render loop makes it: its pieces
    joined by the run's label, parsed (a test-side reading, independent of the compiler)."""
    return json.loads(run.join(attempt["pieces"]))


def first_requests(compiled, run: str = RUN) -> list[dict]:
    """The request of each trial's first job, in trial order."""
    return [sent(item["attempts"][0], run) for item in compiled.items]


def all_requests(compiled, run: str = RUN) -> list[dict]:
    return [sent(a, run) for item in compiled.items for a in item["attempts"]]


def renamed(value, old: str, new: str):
    """`value` with every string's `old` replaced by `new`."""
    return json.loads(json.dumps(value).replace(old, new))


@pytest.fixture
def nightly(orch_home):
    loaded = spec.load_sweep(NIGHTLY)
    return loaded, sm.placeholder_plan(loaded)


# --- the ASL ------------------------------------------------------------------------------------


def test_the_map_runs_every_trial_once_at_the_sweeps_concurrency(nightly):
    loaded, plan = nightly
    compiled = compile_schedule(plan)
    trials = compiled.definition["States"]["Trials"]
    assert trials["Type"] == "Map" and trials["MaxConcurrency"] == loaded.concurrency == 3
    assert trials["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    # The trials are the items, fixed at deploy in S3, not taken from the input.
    assert trials["ItemReader"]["Parameters"] == {"Bucket": compiled.items_at[0], "Key": compiled.items_at[1]}
    assert [i["trial"] for i in compiled.items] == [t.trial.trial_id for t in plan.trials]
    # Each trial's first job and its max_retries (2) retries, each with its own request.
    assert [len(i["attempts"]) for i in compiled.items] == [1 + loaded.max_retries] * 3
    states = trials["ItemProcessor"]["States"]
    creates = [s for name, s in states.items() if name.endswith(" Create")]
    assert len(creates) == 1  # one request shape: one create state for every trial
    for state in creates:
        assert state["Resource"] == "arn:${Partition}:states:::aws-sdk:sagemaker:createTrainingJob"
        [retry] = state["Retry"]
        assert retry["ErrorEquals"] == ["SageMaker.ResourceLimitExceededException", "SageMaker.ThrottlingException"]
        assert (retry["IntervalSeconds"], retry["BackoffRate"], retry["MaxDelaySeconds"]) == (2, 2.0, 300)
        # A create still refused after its retries ends its trial, not the run.
        assert state["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": sm.NAMES.not_created}]
    # A describe retries the modelled throttle, then any task error; what is left ends its trial.
    [describe] = [s for name, s in states.items() if name.endswith(" Describe")]
    assert [r["ErrorEquals"] for r in describe["Retry"]] == [["SageMaker.ThrottlingException"], ["States.TaskFailed"]]
    assert describe["Catch"][0]["Next"] == sm.NAMES.poll_failed
    # Every Next names a state of its own state list.
    for group in (compiled.definition["States"], states):
        for state in group.values():
            targets = [state.get("Next"), state.get("Default"), *[c["Next"] for c in state.get("Choices", [])]]
            assert all(t in group for t in targets if t), state


def test_each_item_request_is_sweep_plans_with_the_runs_name(nightly):
    """Rendered for a run, every item's request is the placeholder plan's with the run's label,
    and `sweep plan`'s own (no tick) apart from the job name, the sweep id and the source
    archive's key (the archive holds job.json, which names the job)."""
    loaded, plan = nightly
    compiled = compile_schedule(plan)
    shown = {t.trial.trial_id: t for t in sweeps.plan(loaded).trials}
    tick_plan = sweeps.plan(loaded, tick=RUN_TIME)
    for rendered, trial in zip(first_requests(compiled), plan.trials, strict=True):
        assert rendered == renamed(trial.prepared.request, sm.PLACEHOLDER_LABEL, RUN)
        name = rendered["TrainingJobName"]
        assert name == tick_plan.identity.job_name(trial.trial.trial_id)
        assert names.is_job_name(name) and names.in_sweep(name, tick_plan.sweep_id)
        tags = {t["Key"]: t["Value"] for t in rendered["Tags"]}
        assert tags[names.TAG_SWEEP] == tick_plan.sweep_id and tags[names.TAG_JOB] == name
        assert tags[names.TAG_TRIAL] == trial.trial.trial_id
        # The product's contract check passes the request as it will be sent.
        request.check_contract(trial.trial.spec, rendered, name)
        plain = shown[trial.trial.trial_id]
        expected = renamed(plain.prepared.request, plain.job_name, name)
        expected = renamed(expected, plan.sweep.sweep + "-" + plan.identity.digest + '"',
                           tick_plan.sweep_id + '"')
        ours = json.loads(json.dumps(rendered))
        for channel in (ours, expected):
            code = channel["InputDataConfig"][0]["DataSource"]["S3DataSource"]
            assert code["S3Uri"].endswith(".tar.gz")
            code["S3Uri"] = "<archive>"
        assert ours == expected


def test_job_names_of_the_longest_sweep_name_fit_in_63(tmp_path, orch_home):
    long_name = "n" * MAX_NAME
    path = write(tmp_path, f"sweep: {long_name}\nbase: base.yaml\n"
                 "grid: {training.optimizer.lr: [0.001, 0.0001]}\nschedule: {cron: '0 3 * * *'}\n")
    plan = sm.placeholder_plan(spec.load_sweep(path))
    for rendered in all_requests(compile_schedule(plan)):
        name = rendered["TrainingJobName"]
        assert len(name) <= names.MAX_JOB_NAME and names.is_job_name(name) and RUN in name


def test_strings_with_what_intrinsics_reserve_are_data_not_templates(nightly):
    """`{`, `}`, `'` and `\\` in a request (the JSON of a hyperparameter environment variable)
    travel in the item's pieces, which States.Format takes as arguments, never as its template:
    the Render step's template is the same fixed '{}{}{}' whatever the request holds."""
    _, plan = nightly
    compiled = compile_schedule(plan)
    step = compiled.definition["States"]["Trials"]["ItemProcessor"]["States"]["Render step"]
    assert step["Parameters"]["text.$"].startswith("States.Format('{}{}{}', ")
    pieces = [p for item in compiled.items for a in item["attempts"] for p in a["pieces"]]
    assert any(c in "".join(pieces) for c in "{}")
    assert all(sm.PLACEHOLDER_LABEL not in p for p in pieces)


def test_a_sweep_with_local_trials_is_refused_with_the_backends_reason(tmp_path, orch_home):
    path = write(tmp_path, "sweep: loc\nbase: base.yaml\ngrid: {training.optimizer.lr: [0.001]}\n",
                 (ROOT / "configs" / "local-tiny.yaml").read_text())
    plan = sm.placeholder_plan(spec.load_sweep(path))
    with pytest.raises(InputError, match="local trials cannot run in a cloud schedule: its jobs run on this machine"):
        compile_schedule(plan)


def test_only_the_placeholder_plan_compiles(nightly):
    loaded, _ = nightly
    with pytest.raises(ValueError, match="placeholder"):
        compile_schedule(sweeps.plan(loaded))


# --- runs by moto's interpreter -----------------------------------------------------------------


@pytest.fixture
def interpreter(moto_server, monkeypatch):
    """moto's Step Functions interpreter on, its AWS SDK integration PascalCase (schedule_moto)."""
    off = interpreter_on(moto_server, monkeypatch)
    yield moto_server
    off()


@pytest.fixture
def received(monkeypatch) -> list[dict]:
    """The body of every CreateTrainingJob the moto server received, as sent (the server runs in
    this process): what the state machine asked for, not what moto keeps of it."""
    return moto_shim.record_bodies(monkeypatch, "CreateTrainingJob")


def test_moto_one_run_creates_every_trial_with_its_plan_request(nightly, interpreter, received):
    import boto3

    loaded, plan = nightly
    region = loaded.base_spec.region
    described = run_once(plan, region)
    assert described["status"] == "SUCCEEDED", described
    output = json.loads(described["output"])
    assert output["run"] == RUN
    client = boto3.client("sagemaker", region_name=region)
    tick_plan = sweeps.plan(loaded, tick=RUN_TIME)
    made = {j["TrainingJobName"] for j in client.list_training_jobs()["TrainingJobSummaries"]}
    assert made == {tick_plan.identity.job_name(t.trial.trial_id) for t in plan.trials}
    assert [t["status"] for t in output["trials"]] == ["Completed"] * 3
    # Each request as the interpreter sent it is the plan's, with the run's label for the
    # placeholder, and so `sweep plan`'s apart from the per-run name (test above).
    by_name = {body["TrainingJobName"]: body for body in received}
    assert len(received) == len(by_name) == 3
    for trial in plan.trials:
        expected = renamed(trial.prepared.request, sm.PLACEHOLDER_LABEL, RUN)
        assert by_name[expected["TrainingJobName"]] == expected


def test_moto_a_start_time_shaped_fire_time_gives_its_minute(nightly, interpreter):
    """A run started by hand takes `$$.Execution.StartTime` ("2026-12-05T03:07:59.123Z" on AWS,
    Step Functions developer guide, "Context object"). moto 5.2.5 keeps that value as a
    datetime, not AWS's string, so its interpreter cannot split it: the same string shape is
    given here as the fire time, which the same states split."""
    import boto3

    loaded, plan = nightly
    fallback = compile_schedule(plan).definition["States"]["From start time"]
    assert fallback["Parameters"] == {"time.$": "$$.Execution.StartTime"} and fallback["Next"] == "Split time"
    described = run_once(plan, loaded.base_spec.region, "2026-12-05T03:07:59.123Z")
    assert described["status"] == "SUCCEEDED", described
    assert json.loads(described["output"])["run"] == "202612050307"
    jobs = boto3.client("sagemaker", region_name=loaded.base_spec.region).list_training_jobs()["TrainingJobSummaries"]
    assert len(jobs) == 3 and all("-202612050307-t" in j["TrainingJobName"] for j in jobs)


def test_moto_a_quota_refusal_is_retried(nightly, interpreter, monkeypatch):
    refused = moto_shim.refuse_create_training_job(monkeypatch, "ResourceLimitExceeded",
                                                   "The account-level service limit is exceeded")
    loaded, plan = nightly
    described = run_once(plan, loaded.base_spec.region)
    assert described["status"] == "SUCCEEDED", described
    output = json.loads(described["output"])
    assert refused and refused[0] in {t["job"] for t in output["trials"]}
    assert [t["status"] for t in output["trials"]] == ["Completed"] * 3


# --- the container takes the run's name ---------------------------------------------------------


def test_the_container_makes_the_placeholders_job_file_the_runs(nightly, tmp_path):
    """Every run shares the placeholder's archive; launch.py renames its job.json to the job
    SageMaker runs (the request's job-name hyperparameter): results.json then lands where
    `results` looks for the run's job, tagged with the run's sweep."""
    from entrypoints.launcher import container
    from entrypoints.shared import contract

    loaded, plan = nightly
    assert names.tick_label(sm.PLACEHOLDER_TICK) == sm.PLACEHOLDER_LABEL
    tick = {t.trial.trial_id: t for t in sweeps.plan(loaded, tick=RUN_TIME).trials}
    compiled = compile_schedule(plan)
    for sent_request, trial in zip(first_requests(compiled), plan.trials, strict=True):
        config = tmp_path / trial.trial.trial_id / "input" / "config"
        config.mkdir(parents=True)
        (config / "hyperparameters.json").write_text(json.dumps(sent_request["HyperParameters"]))
        run_name = container.job_name_hyperparameter(config.parent.parent)
        assert run_name == sent_request["TrainingJobName"]
        job = contract.for_run(trial.prepared.job, run_name)
        expected = tick[trial.trial.trial_id].prepared.job
        assert (job["job_name"], job["results_uri"], job["tags"]) == (
            expected["job_name"], expected["results_uri"], expected["tags"])
        assert job["spec"] == trial.prepared.job["spec"]
    # A retry's archive is its own (its job.json names the -rN job): the run's name fits it too.
    by_name = {r["TrainingJobName"]: r for r in all_requests(compiled)}
    for graph in compiled.graphs.values():
        for a in graph[1:]:
            run_name = renamed(a.prepared.job_name, sm.PLACEHOLDER_LABEL, RUN)
            job = contract.for_run(a.prepared.job, run_name)
            assert job["job_name"] == run_name and run_name.endswith(f"-r{a.number}")
            assert f"/{run_name}/" in job["results_uri"] and sm.PLACEHOLDER_LABEL not in json.dumps(job["tags"])
            code = by_name[run_name]["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"]
            assert code == a.prepared.source_uri != plan.trials[0].prepared.source_uri
    # Any other job file, or a name of another shape, is left as it is.
    job = plan.trials[0].prepared.job
    assert contract.for_run(job, None) is job and contract.for_run(job, "other-name") is job
    plain = sweeps.plan(loaded).trials[0].prepared.job
    assert contract.for_run(plain, plain["job_name"].replace("t", "x")) is plain
