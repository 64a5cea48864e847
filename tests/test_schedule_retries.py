"""A cloud schedule's failed trials (`schedule.attempts`, `schedule.failure_rules`): the state
machine reads why a job failed as the sweep runner does (`sweep.failures.failure_kind`), resubmits
capacity, spot and internal failures as the runner names and tags its retries, up to
max_retries, and ends a trial on any other failure. Runs by moto's interpreter on its SageMaker,
whose jobs a test fails (moto lets an in-process test set a job's status and reason)."""

from __future__ import annotations

import fnmatch
import json

import moto_shim
import pytest
from schedule_moto import interpreter_on, run_once
from sweep_fakes import ROOT, write

from orchestrator import names, spec
from orchestrator.backends.sagemaker.scheduled import SageMakerJobs
from orchestrator.schedule import attempts, failure_rules
from orchestrator.schedule import statemachine as sm
from orchestrator.schedule.compiled import compile_schedule
from orchestrator.sweep import failure_phrases, failures
from orchestrator.sweep.failures import failure_kind as classify

NIGHTLY = ROOT / "configs" / "sweep-nightly.yaml"
RUN = "202612050300"
# Reasons as AWS writes them, each kind's (the ones failures.py documents, and SageMaker's).
REASONS = [
    "CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML instance type.",
    "InsufficientInstanceCapacity: We currently do not have sufficient capacity",
    "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity requested for instance type inf2.xlarge",
    "Canceled by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
    "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT - The job resource requirement (vCPU/memory/GPU) is higher than that can be met by the CE(s) attached to the job queue.",
    "Canceled by JobStateTimeLimit action due to reason: MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
    "ACTION_REQUIRED - CE(s) associated with the job queue are invalid",
    "Host EC2 (instance i-0abc123) terminated.",
    "CannotPullContainerError: pull image manifest has been retried 5 time(s): manifest unknown",
    "CannotPullContainerError: failed to resolve ref: 403 Forbidden",
    "CannotPullContainerError: context deadline exceeded",
    "CannotStartContainerError: Error response from daemon",
    "Task failed to start",
    "Spot interruption: the instance was reclaimed",
    "Training job interrupted: Spot capacity reclaimed",
    "InternalServerError: We encountered an internal error. Please try again.",
    "An internal error occurred",
    "ServiceUnavailable",
    "AlgorithmError: ExecuteUserScriptError: exit code 1",
    "ClientError: Please ensure the S3 bucket exists",
    "Essential container in task exited; exit code 137",
    "OutOfMemoryError: Please use an instance type with more memory, or reduce the size of job data processed",
]


def asl_kind(reason: str, table=failure_rules.KINDS) -> str:
    """The kind the state machine's Choice rules give `reason` as SageMaker's FailureReason,
    read as Step Functions reads them (first matching rule; StringMatches: `*` only, case as
    written; a reason no rule matches goes to the Default, the user's)."""
    path = SageMakerJobs.reason_paths[0]
    rules = failure_rules.rules([path], {kind: kind for kind, _ in table}, table)
    for rule in rules:
        for match in rule["Or"]:
            present, pattern = match["And"]
            assert present == {"Variable": path, "IsPresent": True} and pattern["Variable"] == path
            if fnmatch.fnmatchcase(reason, pattern["StringMatches"].replace("[", "[[]")):
                return rule["Next"]
    return "user"


@pytest.mark.parametrize("reason", REASONS)
def test_the_machine_reads_a_failure_as_the_sweep_runner_does(reason):
    assert asl_kind(reason) == classify(reason)


def regex_kind(reason: str, table) -> str:
    """The kind the runner's regular expressions, made from `table`, give `reason`."""
    return next((kind for kind, pattern in failures.reason_kinds(table) if pattern.search(reason)), "user")


# A table no code knows: both matchers must follow it, so neither can hold phrases of its own.
MADE_UP = (("capacity", ("out of beans", "BeanError")), ("spot", ("Beanstalk*felled",)),
           ("internal", ("bean*counter failure",)))
MADE_UP_READS = {
    "out of beans today": "capacity", "Out of beans": "capacity", "OUT OF BEANS": "capacity",
    "Out Of Beans": "capacity", "BeanError: none left": "capacity", "beanerror": "user",
    "Beanstalk (i-1) felled.": "spot", "beanstalk felled": "user",
    "Bean counter failure": "internal", "BEAN COUNTER FAILURE": "internal", "bean, the counter failure": "internal",
    "nothing of the sort": "user",
}


@pytest.mark.parametrize("reason", sorted(MADE_UP_READS))
def test_both_matchers_are_made_from_the_one_phrase_table(reason):
    """The runner's regular expressions and the machine's Choice rules come from the table they
    are given: a phrase put in it is read the same way by both (lower-case words in each
    spelling AWS writes, identifiers with capitals as written)."""
    assert regex_kind(reason, MADE_UP) == asl_kind(reason, MADE_UP) == MADE_UP_READS[reason]


def test_the_modules_use_the_table_and_no_phrase_of_their_own(orch_home):
    assert [(k, p.pattern) for k, p in failures._REASON_KINDS] == [
        (k, p.pattern) for k, p in failures.reason_kinds(failure_phrases.KINDS)]
    assert failure_rules.KINDS is failure_phrases.KINDS
    compiled = compile_schedule(sm.placeholder_plan(spec.load_sweep(NIGHTLY)))
    states = compiled.definition["States"]["Trials"]["ItemProcessor"]["States"]
    [why] = [s for name, s in states.items() if name.endswith(" Why")]
    assert why["Choices"] == failure_rules.rules(list(SageMakerJobs.reason_paths),
                                                 {kind: f"Kind {kind}" for kind, _ in failure_phrases.KINDS})


@pytest.mark.parametrize("phrase", ["", "*capacity", "capacity*", "spot**interrupt", "a\\*b", "back\\slash"])
def test_a_phrase_step_functions_cannot_match_is_refused(phrase):
    with pytest.raises(ValueError, match="StringMatches"):
        failure_phrases.check(phrase)


def test_every_kind_has_its_state_and_a_retryable_kind_its_route(orch_home):
    compiled = compile_schedule(sm.placeholder_plan(spec.load_sweep(NIGHTLY)))
    states = compiled.definition["States"]["Trials"]["ItemProcessor"]["States"]
    [why] = [s for name, s in states.items() if name.endswith(" Why")]
    assert [r["Next"] for r in why["Choices"]] == [f"Kind {k}" for k, _ in failure_rules.KINDS]
    assert why["Default"] == "Kind user" and states["Kind user"]["Next"] == "Next attempt"
    routes = states["Next attempt"]
    assert routes["Default"] == sm.NAMES.trial_end
    assert [r["Next"] for r in routes["Choices"]] == [f"Go {k}" for k in attempts.RETRY_KINDS]
    # From each attempt but the last, capacity, spot and internal failures lead to the next retry.
    for item in compiled.items:
        assert [a["next"] for a in item["attempts"]] == [dict.fromkeys(attempts.RETRY_KINDS, 1),
                                                         dict.fromkeys(attempts.RETRY_KINDS, 2), {}]


# --- runs by moto's interpreter -----------------------------------------------------------------


@pytest.fixture
def nightly(orch_home):
    loaded = spec.load_sweep(NIGHTLY)
    return loaded, sm.placeholder_plan(loaded)


@pytest.fixture
def sagemaker_fails(moto_server, monkeypatch):
    """moto's SageMaker ends the jobs named in the returned dict Failed with that reason (each
    once); every CreateTrainingJob body the server receives is kept in `sent`."""
    off = interpreter_on(moto_server, monkeypatch)
    reasons: dict[str, str] = {}

    def fail(backend, training_job_name):
        reason = reasons.pop(training_job_name, None)
        if reason is not None:
            job = backend.training_jobs[training_job_name]
            job.training_job_status, job.secondary_status, job.failure_reason = "Failed", "Failed", reason

    moto_shim.after_create_training_job(monkeypatch, fail)
    sent = moto_shim.record_bodies(monkeypatch, "CreateTrainingJob")
    yield reasons, sent
    off()


def test_moto_failures_are_retried_as_the_policy_says(nightly, sagemaker_fails):
    """Trial 0: a capacity failure, retried once (-r1, tagged retry), completes. Trial 1: an
    algorithm error, never retried. Trial 2: internal errors on every attempt, given up after
    max_retries (2): -r2 is its last job."""
    loaded, plan = nightly
    reasons, sent = sagemaker_fails
    job = {t.trial.trial_id: t.prepared.job_name.replace(sm.PLACEHOLDER_LABEL, RUN) for t in plan.trials}
    first, second, third = (t.trial.trial_id for t in plan.trials)
    reasons.update({
        job[first]: "CapacityError: Unable to provision requested ML compute capacity.",
        job[second]: "AlgorithmError: ExecuteUserScriptError: exit code 1",
        job[third]: "InternalServerError: We encountered an internal error.",
        f"{job[third]}-r1": "InternalServerError: We encountered an internal error.",
        f"{job[third]}-r2": "InternalServerError: We encountered an internal error.",
    })
    described = run_once(plan, loaded.base_spec.region)
    assert described["status"] == "SUCCEEDED", described
    ended = {t["trial"]: (t["job"], t["status"], t["attempt"]) for t in json.loads(described["output"])["trials"]}
    assert ended == {first: (f"{job[first]}-r1", "Completed", 1), second: (job[second], "Failed", 0),
                     third: (f"{job[third]}-r2", "Failed", 2)}
    assert sorted(body["TrainingJobName"] for body in sent) == sorted([
        job[first], f"{job[first]}-r1", job[second], job[third], f"{job[third]}-r1", f"{job[third]}-r2"])
    # The parent's history holds the Map run, not the trials' states (each child has its own).
    import boto3

    sfn = boto3.client("stepfunctions", region_name=loaded.base_spec.region)
    events = sum(len(page["events"]) for page in sfn.get_paginator("get_execution_history").paginate(
        executionArn=described["executionArn"]))
    assert events <= 40, events
    # Each retry is the plan's attempt: the runner's -rN name and attempt tag, its own archive.
    graphs = compile_schedule(plan).graphs
    by_name = {body["TrainingJobName"]: body for body in sent}
    for trial_id, n in ((first, 1), (third, 1), (third, 2)):
        attempt = next(a for a in graphs[trial_id] if a.number == n)
        body = by_name[f"{job[trial_id]}-r{n}"]
        assert body == json.loads(json.dumps(attempt.prepared.request).replace(sm.PLACEHOLDER_LABEL, RUN))
        assert {t["Key"]: t["Value"] for t in body["Tags"]}[names.TAG_ATTEMPT] == "retry"


# --- the flexible window ------------------------------------------------------------------------


def test_the_flexible_window_is_the_files_shown_and_sent(tmp_path, orch_home):
    from datetime import datetime, timezone

    from orchestrator.schedule import in_aws_stack

    base = (ROOT / "configs" / "vit-trn1-2xlarge.yaml").read_text()
    path = write(tmp_path, "sweep: w\nbase: base.yaml\ngrid: {training.optimizer.lr: [0.001]}\n"
                 "schedule: {cron: '0 3 * * *', flexible_window_minutes: 45}\n", base)
    plan = sm.placeholder_plan(spec.load_sweep(path))
    compiled = compile_schedule(plan)
    props = compiled.template["Resources"]["Schedule"]["Properties"]
    assert props["FlexibleTimeWindow"] == {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 45}
    lines = in_aws_stack.describe(compiled, datetime(2026, 12, 1, tzinfo=timezone.utc))
    assert any("flexible window: a run starts up to 45 min after its fire time" in line for line in lines)


@pytest.mark.parametrize("value", ["1441", "-1", "ten"])
def test_a_flexible_window_out_of_schedulers_range_is_refused_at_its_line(tmp_path, orch_home, value):
    import os

    from sweep_fakes import cli_run

    base = (ROOT / "configs" / "vit-trn1-2xlarge.yaml").read_text()
    path = write(tmp_path, "sweep: w\nbase: base.yaml\ngrid: {training.optimizer.lr: [0.001]}\n"
                 f"schedule:\n  cron: '0 3 * * *'\n  flexible_window_minutes: {value}\n", base)
    done = cli_run("schedule", "plan", str(path), env={**os.environ, "ORCHESTRATOR_HOME": str(orch_home)})
    assert done.returncode == 2, done.stderr
    assert "sweep.yaml:6:" in done.stderr and "flexible_window_minutes" in done.stderr
    assert done.stdout == ""
