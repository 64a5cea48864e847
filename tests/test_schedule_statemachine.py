"""A sweep compiled to a Step Functions state machine (`schedule.statemachine`): the ASL's
structure, every embedded request against `sweep plan`'s and the contract check, and runs of
it by moto's interpreter (the moto server's `execute_state_machine` configuration)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import moto_shim
import pytest
from schedule_moto import interpreter_on, run_once
from sweep_fakes import ROOT, write

from orchestrator import names, request, spec
from orchestrator import sweep as sweeps
from orchestrator.errors import InputError
from orchestrator.schedule import attempts
from orchestrator.schedule import statemachine as sm
from orchestrator.spec.models import MAX_NAME

NIGHTLY = ROOT / "configs" / "sweep-nightly.yaml"
RUN = "202612050300"
RUN_TIME = datetime(2026, 12, 5, 3, 0, tzinfo=timezone.utc)

_FORMAT = re.compile(r"States\.Format\('((?:[^'\\]|\\.)*)'((?:, \$\.[a-z0-9_.]+)*)\)")


def render(value, run: str, shared: dict | None = None, literals: dict | None = None):
    """A create state's Parameters as Step Functions evaluates them for `$.run` = `run`: each
    `<key>.$` States.Format becomes `<key>` with its arguments filled in (`$.run` the run's
    label, `$.literals.<id>` the attempt's Start state's value), each `<key>.$` `$.shared.<id>`
    the definition's shared value (a test-side reading of the intrinsic and the paths,
    independent of the compiler)."""
    if isinstance(value, list):
        return [render(v, run, shared, literals) for v in value]
    if not isinstance(value, dict):
        return value
    paths = {"$.run": run, **{f"$.shared.{k}": v for k, v in (shared or {}).items()},
             **{f"$.literals.{k}": v for k, v in (literals or {}).items()}}
    out = {}
    for key, item in value.items():
        if key.endswith(".$") and item.startswith("$.shared."):
            out[key[:-2]] = paths[item]
        elif key.endswith(".$"):
            found = _FORMAT.fullmatch(item)
            assert found, item
            template, args = found.group(1), [a for a in found.group(2).split(", ") if a]
            text, i, used = [], 0, 0
            while i < len(template):
                if template[i] == "\\":
                    text.append(template[i + 1])
                    i += 2
                elif template.startswith("{}", i):
                    text.append(paths[args[used]])
                    used += 1
                    i += 2
                else:
                    text.append(template[i])
                    i += 1
            assert used == len(args)
            out[key[:-2]] = "".join(text)
        else:
            out[key] = render(item, run, shared, literals)
    return out


def sent(definition: dict, state: dict, run: str = RUN) -> dict:
    """The request a create state of `definition` sends in run `run` (its attempt's Start state
    holds the literals its templates name)."""
    processor = definition["States"]["Trials"]["ItemProcessor"]["States"]
    [start] = [s for s in processor.values() if s["Type"] == "Pass" and processor.get(s.get("Next")) is state]
    return render(state["Parameters"], run, definition["States"]["Run label"]["Parameters"]["shared"],
                  start.get("Result"))


def create_states(definition: dict, first_only: bool = True) -> list[dict]:
    """The create states of each trial's first job (or of every attempt), in trial order."""
    processor = definition["States"]["Trials"]["ItemProcessor"]["States"]
    return [state for name, state in processor.items()
            if name.endswith(" Create") and (" a0.0 " in name or not first_only)]


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
    definition = sm.compile_plan(plan)
    trials = definition["States"]["Trials"]
    assert trials["Type"] == "Map" and trials["MaxConcurrency"] == loaded.concurrency == 3
    assert trials["ItemProcessor"]["ProcessorConfig"] == {"Mode": "INLINE"}
    # The trials are fixed in the definition, not taken from the input.
    assert definition["States"]["Run label"]["Parameters"]["trials"] == [t.trial.trial_id for t in plan.trials]
    which = trials["ItemProcessor"]["States"]["Which trial"]
    assert [c["StringEquals"] for c in which["Choices"]] == [t.trial.trial_id for t in plan.trials]
    assert len(create_states(definition)) == len(plan.trials) == 3
    # Each trial's first job and its max_retries (2) retries, each with its own request.
    assert len(create_states(definition, first_only=False)) == 3 * (1 + loaded.max_retries)
    for state in create_states(definition, first_only=False):
        assert state["Resource"] == "arn:aws:states:::aws-sdk:sagemaker:createTrainingJob"
        [retry] = state["Retry"]
        assert retry["ErrorEquals"] and all("ResourceLimitExceeded" in e or "Throttling" in e
                                            for e in retry["ErrorEquals"])
        assert (retry["IntervalSeconds"], retry["BackoffRate"], retry["MaxDelaySeconds"]) == (2, 2.0, 300)
        # A create still refused after its retries ends its trial, not the run.
        assert state["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": sm.NOT_CREATED}]
    # Every Next names a state of its own state list.
    for states in (definition["States"], trials["ItemProcessor"]["States"]):
        for state in states.values():
            targets = [state.get("Next"), state.get("Default"), *[c["Next"] for c in state.get("Choices", [])]]
            assert all(t in states for t in targets if t), state


def test_each_embedded_request_is_sweep_plans_with_the_runs_name(nightly):
    """Rendered for a run, every create state's request is the placeholder plan's with the
    run's label, and `sweep plan`'s own (no tick) apart from the job name, the sweep id and the
    source archive's key (the archive holds job.json, which names the job)."""
    loaded, plan = nightly
    definition = sm.compile_plan(plan)
    shown = {t.trial.trial_id: t for t in sweeps.plan(loaded).trials}
    tick_plan = sweeps.plan(loaded, tick=RUN_TIME)
    for state, trial in zip(create_states(definition), plan.trials, strict=True):
        rendered = sent(definition, state)
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
    definition = sm.compile_plan(plan)
    for state in create_states(definition):
        name = sent(definition, state)["TrainingJobName"]
        assert len(name) <= names.MAX_JOB_NAME and names.is_job_name(name) and RUN in name


def test_strings_with_what_intrinsics_reserve_take_those_parts_from_paths():
    """`{`, `}`, `'` and `\\` never appear in a Format template (they would need escapes, which
    moto's interpreter does not read as AWS does): such a string's parts are path arguments."""
    tricky = {"A": f"x{{'{sm.PLACEHOLDER_LABEL}'}}\\y-{sm.PLACEHOLDER_LABEL}", "B": [{"C": sm.PLACEHOLDER_LABEL}],
              "D": "plain", "E": f"plain-{sm.PLACEHOLDER_LABEL}"}
    literals: dict[str, str] = {}
    templated = sm._templated(tricky, literals)
    assert set(templated) == {"A.$", "B", "D", "E.$"} and "C.$" in templated["B"][0]
    assert templated["A.$"] == ("States.Format('{}{}{}{}{}', $.literals.s0, $.run, $.literals.s1, $.run, "
                                "$.literals.s2)")
    assert templated["E.$"] == "States.Format('plain-{}', $.run)"
    assert literals == {"s0": "x{'", "s1": "'}\\y-", "s2": ""}
    assert render(templated, RUN, literals=literals) == renamed(tricky, sm.PLACEHOLDER_LABEL, RUN)


def test_a_sweep_with_local_trials_is_refused(tmp_path, orch_home):
    path = write(tmp_path, "sweep: loc\nbase: base.yaml\ngrid: {training.optimizer.lr: [0.001]}\n",
                 (ROOT / "configs" / "local-tiny.yaml").read_text())
    plan = sm.placeholder_plan(spec.load_sweep(path))
    with pytest.raises(InputError, match="SageMaker and AWS Batch trials only"):
        sm.compile_plan(plan)


def test_only_the_placeholder_plan_compiles(nightly):
    loaded, _ = nightly
    with pytest.raises(ValueError, match="placeholder"):
        sm.compile_plan(sweeps.plan(loaded))


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
    fallback = sm.compile_plan(plan)["States"]["From start time"]
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
    definition = sm.compile_plan(plan)
    for state, trial in zip(create_states(definition), plan.trials, strict=True):
        sent_request = sent(definition, state)
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
    by_name = {sent(definition, state)["TrainingJobName"]: state for state in create_states(definition, False)}
    for graph in attempts.of_plan(plan).values():
        for a in graph[1:]:
            run_name = renamed(a.prepared.job_name, sm.PLACEHOLDER_LABEL, RUN)
            job = contract.for_run(a.prepared.job, run_name)
            assert job["job_name"] == run_name and run_name.endswith(f"-r{a.number}")
            assert f"/{run_name}/" in job["results_uri"] and sm.PLACEHOLDER_LABEL not in json.dumps(job["tags"])
            code = sent(definition, by_name[run_name])["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"]
            assert code == a.prepared.source_uri != plan.trials[0].prepared.source_uri
    # Any other job file, or a name of another shape, is left as it is.
    job = plan.trials[0].prepared.job
    assert contract.for_run(job, None) is job and contract.for_run(job, "other-name") is job
    plain = sweeps.plan(loaded).trials[0].prepared.job
    assert contract.for_run(plain, plain["job_name"].replace("t", "x")) is plain
