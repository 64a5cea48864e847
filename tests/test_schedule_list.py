"""`schedule list` of a cloud schedule whose latest run is still RUNNING (issue 35, item 5): each
trial's latest job with its state and, when it failed, its kind and reason, read by list calls
(ListTrainingJobs pages, ListJobs per queue), and the trials with no job yet; a stack deployed
before the listing output existed still lists, and says why no trials are shown.

Against the moto server with its Step Functions interpreter off: an execution stays RUNNING,
and the run's jobs are made by the backends' own APIs with the names the run would give them."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import moto_shim
import pytest
from cli_harness import run_cli
from job_waits import wait_for
from schedule_moto import batch_use_no_docker
from sweep_fakes import ROOT, write

from orchestrator import spec
from orchestrator import sweep as sweeps
from orchestrator.schedule import in_aws, in_aws_stack, run_jobs
from orchestrator.schedule import statemachine as sm
from orchestrator.schedule.compiled import compile_schedule

REGION = "us-east-1"
FIRED = "2026-12-05T03:00:00Z"
TICK = datetime(2026, 12, 5, 3, 0, tzinfo=timezone.utc)
ROLE = "arn:aws:iam::123456789012:role/orchestrator-schedule"
CAPACITY = "CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML instance type."
ALGORITHM = "AlgorithmError: ExecuteUserScriptError:\nCommand \"torchrun train.py\" exit status 1"
SAGEMAKER_SWEEP = """\
sweep: listed
base: base.yaml
grid: {training.optimizer.lr: [0.001, 0.0005, 0.0002, 0.0001, 0.00005]}
max_retries: 1
concurrency: 5
schedule: {cron: "0 3 * * *"}
budget: {max_total_cost_usd: 200}
"""
BATCH_SWEEP = """\
sweep: inf-listed
base: base.yaml
grid: {training.optimizer.lr: [0.001, 0.0001, 0.00001]}
concurrency: 3
schedule: {cron: "0 3 * * *"}
"""
BATCH_CAPACITY = ("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity requested for "
                  "instance type inf2.xlarge")


def _loaded(tmp_path, text: str, base: str):
    loaded = spec.load_sweep(write(tmp_path, text, (ROOT / "configs" / base).read_text()))
    return loaded, sm.placeholder_plan(loaded)


def _stack_with_a_running_run(plan, outputs: dict[str, str]) -> str:
    """A schedule stack of `plan` whose outputs are `outputs` (and its state machine's ARN), its
    state machine started as the scheduler starts it at FIRED: the execution stays RUNNING
    (moto's interpreter is off). Returns the execution's ARN."""
    import boto3

    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(name=in_aws_stack.machine_name(plan), roleArn=ROLE, definition=json.dumps(
        {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}))["stateMachineArn"]
    body = {"Resources": {"DeadLetterQueue": {"Type": "AWS::SQS::Queue"}},
            "Outputs": {key: {"Value": value} for key, value in {**outputs, "StateMachineArn": machine}.items()}}
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=in_aws_stack.stack_name(plan), TemplateBody=json.dumps(body))
    execution = sfn.start_execution(stateMachineArn=machine, input=json.dumps(sm.execution_input(FIRED)))
    assert sfn.describe_execution(executionArn=execution["executionArn"])["status"] == "RUNNING"
    return execution["executionArn"]


def _deployed_outputs(compiled) -> dict[str, str]:
    """The literal outputs the deploy's template gives the stack (the cron, the listing, ...)."""
    return {k: v["Value"] for k, v in compiled.template["Outputs"].items() if isinstance(v["Value"], str)}


def _counting(*services: str) -> tuple[dict, list[str]]:
    """boto3 clients of moto's server that record each operation they call."""
    import boto3

    calls: list[str] = []
    clients = {}
    for service in services:
        client = boto3.client(service, region_name=REGION)
        client.meta.events.register("before-call", lambda model, **_: calls.append(model.name))
        clients[service] = client
    return clients, calls


def test_the_listing_output_names_the_run_prefix_the_trials_and_each_backends_places(tmp_path, orch_home):
    """What the deploy records for listing: the sweep's job prefix with the placeholder label, the
    trial count, and per backend its places (AWS Batch's queues; none for SageMaker)."""
    text = (ROOT / "configs" / "sweep-inf2-vs-trn1.yaml").read_text().replace(
        "base: vit-trn1-2xlarge.yaml", "base: base.yaml") + 'schedule: {cron: "0 3 * * 1-5"}\n'
    path = write(tmp_path, text.replace("max_total_cost_usd: 30", "max_total_cost_usd: 60"),
                 (ROOT / "configs" / "vit-trn1-2xlarge.yaml").read_text())
    compiled = compile_schedule(sm.placeholder_plan(spec.load_sweep(path)))
    value = compiled.template["Outputs"][in_aws_stack.LISTING_OUTPUT]["Value"]
    listing = json.loads(value)
    plan = compiled.plan
    assert listing["jobs"] == plan.identity.job_prefix and listing["jobs"].endswith(sm.PLACEHOLDER_LABEL)
    assert listing["trials"] == len(plan.trials)
    queues = sorted({a.prepared.request["jobQueue"] for g in compiled.graphs.values() for a in g
                     if a.prepared.spec.backend == "batch"})
    assert listing["places"] == {"batch": queues, "sagemaker": []} and queues
    assert run_jobs.read_listing({in_aws_stack.LISTING_OUTPUT: value}) == listing
    assert len(value) <= in_aws_stack.MAX_OUTPUT_VALUE


def test_a_listing_over_an_output_values_size_is_refused(tmp_path, orch_home, monkeypatch):
    """The listing must fit a stack output's value (4,096 characters, assumed: aws_rules.json):
    over it, the schedule is refused when compiled (exit 2), before any call."""
    from orchestrator.errors import InputError

    _, plan = _loaded(tmp_path, SAGEMAKER_SWEEP, "vit-trn1-2xlarge.yaml")
    monkeypatch.setattr(in_aws_stack, "MAX_OUTPUT_VALUE", 40)
    with pytest.raises(InputError) as info:
        compile_schedule(plan)
    assert "above a stack output's 40" in info.value.message and "schedule run" in info.value.hint


def test_the_run_label_is_the_fire_time_else_the_start_time():
    started = datetime(2026, 12, 5, 3, 7, 59, tzinfo=timezone.utc)
    assert sm.run_label(json.dumps(sm.execution_input(FIRED)), started) == "202612050300"
    assert sm.run_label(json.dumps(sm.execution_input("2026-12-05T03:00:00.123Z")), started) == "202612050300"
    assert sm.run_label("{}", started) == sm.run_label(None, started) == "202612050307"


@pytest.fixture
def sagemaker_run(tmp_path, orch_home, moto_server):
    """A RUNNING run of a five-trial SageMaker sweep: trial 0's job Completed; trial 1's first job
    failed for capacity and its retry -r1 InProgress; trial 2's Failed (its algorithm); trial
    3's InProgress; trial 4 has no job yet. Beside them, 150 jobs of another run (another
    label): ListTrainingJobs has pages to turn."""
    import boto3

    loaded, plan = _loaded(tmp_path, SAGEMAKER_SWEEP, "vit-trn1-2xlarge.yaml")
    _stack_with_a_running_run(plan, _deployed_outputs(compile_schedule(plan)))
    tick = sweeps.plan(loaded, tick=TICK)
    sm_client = boto3.client("sagemaker", region_name=REGION)
    request = tick.trials[0].prepared.request

    def make(name: str, status: str, reason: str | None = None) -> None:
        sm_client.create_training_job(**{**request, "TrainingJobName": name})
        record = moto_shim.sagemaker_jobs(REGION)[name]
        record.training_job_status, record.failure_reason = status, reason

    other = sweeps.plan(loaded, tick=datetime(2026, 12, 4, 3, 0, tzinfo=timezone.utc))
    for i in range(150):
        make(f"{other.trials[0].job_name[:50]}-{i}", "Completed")
    jobs = [t.job_name for t in tick.trials]
    make(jobs[0], "Completed")
    make(jobs[1], "Failed", CAPACITY)
    make(f"{jobs[1]}-r1", "InProgress")
    make(jobs[2], "Failed", ALGORITHM)
    make(jobs[3], "InProgress")
    return plan, tick, jobs


def test_moto_schedule_list_shows_a_running_runs_trials_their_states_and_causes(sagemaker_run, monkeypatch, capsys):
    plan, tick, jobs = sagemaker_run
    ids = [t.trial.trial_id for t in tick.trials]
    code, out, err = run_cli(monkeypatch, capsys, "schedule", "list", "--region", REGION)
    assert code == 0 and err == "", (out, err)
    assert "  last run: RUNNING (started " in out
    assert f"  {ids[0]} {jobs[0]}: Completed\n" in out
    assert f"  {ids[1]} {jobs[1]}-r1: InProgress after 1 retry\n" in out  # the latest attempt, not the failed first
    assert f"  {ids[2]} {jobs[2]}: Failed (user failure: AlgorithmError: ExecuteUserScriptError: Command " in out
    assert f"  {ids[3]} {jobs[3]}: InProgress\n" in out
    assert ids[4] not in out and "  1 trial(s) with no job yet (not started, or their create refused" in out
    assert f"{jobs[1]}:" not in out  # the failed first attempt is not the trial's line
    assert "-202612040300-" not in out  # the other run's jobs are not this run's


def test_moto_a_running_run_is_read_by_list_pages_and_one_describe_per_failed_trial(sagemaker_run):
    """The calls are bounded by pages, not by jobs: ListTrainingJobs once per 100 jobs moto
    pages over (it filters after cutting a page), DescribeTrainingJob only for the one trial
    whose latest job failed (the listing has no FailureReason); the kind is the runner's."""
    plan, tick, jobs = sagemaker_run
    clients, calls = _counting("cloudformation", "stepfunctions", "sagemaker")
    [item] = in_aws.deployed(REGION, clients=clients)
    assert item.last_run == "RUNNING" and item.problem is None and item.jobs_problem is None and item.note is None
    assert item.waiting == 1
    by_trial = {j["trial"]: j for j in item.jobs}
    failed = by_trial[tick.trials[2].trial.trial_id]
    assert (failed["job"], failed["status"], failed["kind"]) == (jobs[2], "Failed", "user")
    assert failed["reason"] == " ".join(ALGORITHM.split())  # one line
    pages = math.ceil((150 + 5) / 100)
    assert calls.count("ListTrainingJobs") == pages
    assert calls.count("DescribeTrainingJob") == 1
    assert calls.count("DescribeExecution") == 1 and calls.count("ListExecutions") == 1


def test_moto_failed_jobs_past_the_describe_bound_are_shown_without_their_cause(sagemaker_run, monkeypatch):
    """At most run_jobs.MAX_REASONS failed jobs are described per run (here 0): the others keep
    their state and say their cause was not read, with no kind guessed."""
    plan, tick, jobs = sagemaker_run
    monkeypatch.setattr(run_jobs, "MAX_REASONS", 0)
    clients, calls = _counting("cloudformation", "stepfunctions", "sagemaker")
    [item] = in_aws.deployed(REGION, clients=clients)
    failed = {j["trial"]: j for j in item.jobs}[tick.trials[2].trial.trial_id]
    assert failed["status"] == "Failed" and "kind" not in failed
    assert failed["reason"] == "cause not read: more than 0 failed jobs to describe"
    assert "DescribeTrainingJob" not in calls


def test_moto_a_capacity_failure_is_read_by_the_runners_table(tmp_path, orch_home, moto_server):
    """The latest attempt failed for capacity (the state machine is about to fail it over): its
    kind is the one `sweep.failures.failure_kind` gives the same reason."""
    import boto3

    from orchestrator.sweep.failures import failure_kind

    loaded, plan = _loaded(tmp_path, SAGEMAKER_SWEEP, "vit-trn1-2xlarge.yaml")
    _stack_with_a_running_run(plan, _deployed_outputs(compile_schedule(plan)))
    tick = sweeps.plan(loaded, tick=TICK)
    boto3.client("sagemaker", region_name=REGION).create_training_job(**tick.trials[0].prepared.request)
    record = moto_shim.sagemaker_jobs(REGION)[tick.trials[0].job_name]
    record.training_job_status, record.failure_reason = "Failed", CAPACITY
    [item] = in_aws.deployed(REGION)
    [job] = item.jobs
    assert job["kind"] == failure_kind(CAPACITY) == "capacity" and item.waiting == len(tick.trials) - 1


def test_moto_a_stack_deployed_before_the_listing_output_lists_with_a_note(tmp_path, orch_home, moto_server,
                                                                            monkeypatch, capsys):
    loaded, plan = _loaded(tmp_path, SAGEMAKER_SWEEP, "vit-trn1-2xlarge.yaml")
    outputs = _deployed_outputs(compile_schedule(plan))
    del outputs[in_aws_stack.LISTING_OUTPUT]
    _stack_with_a_running_run(plan, outputs)
    code, out, err = run_cli(monkeypatch, capsys, "schedule", "list", "--region", REGION)
    assert code == 0, (out, err)
    stack = in_aws_stack.stack_name(plan)
    assert f"{stack} CREATE_COMPLETE" in out and "  last run: RUNNING (started " in out
    assert "with no job yet" not in out
    assert (f"note: {stack}: its running run's trials are not shown: the stack was deployed before it recorded "
            f"where its jobs are listed (no {in_aws_stack.LISTING_OUTPUT} output)") in err
    assert "schedule deploy` of its sweep file records it" in err


def test_moto_one_stacks_unreadable_jobs_are_its_warning(tmp_path, orch_home, moto_server, monkeypatch, capsys):
    """A listing naming a queue Batch does not have: that stack's warning, its run line still
    shown, exit 0, no traceback."""
    loaded, plan = _loaded(tmp_path, SAGEMAKER_SWEEP, "vit-trn1-2xlarge.yaml")
    outputs = _deployed_outputs(compile_schedule(plan))
    outputs[in_aws_stack.LISTING_OUTPUT] = json.dumps(
        {"jobs": plan.identity.job_prefix, "trials": 5, "places": {"batch": ["no-such-queue"]}})
    _stack_with_a_running_run(plan, outputs)
    code, out, err = run_cli(monkeypatch, capsys, "schedule", "list", "--region", REGION)
    assert code == 0, (out, err)
    assert "  last run: RUNNING (started " in out and "Traceback" not in err
    stack = in_aws_stack.stack_name(plan)
    assert f"warning: {stack}: its running run's jobs could not be read: " in err and "no-such-queue" in err


@pytest.fixture
def batch_queue(moto_server):
    """The queue and job definition vit-inf2-xlarge's requests name, in moto's Batch (docker off)."""
    import boto3

    batch_use_no_docker(moto_server)
    batch = boto3.client("batch", region_name=REGION)
    role = boto3.client("iam").create_role(RoleName="batch-service", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    env = batch.create_compute_environment(computeEnvironmentName="orchestrator-inf2-xlarge-ce",
                                           type="UNMANAGED", state="ENABLED", serviceRole=role)
    batch.create_job_queue(jobQueueName="orchestrator-inf2-xlarge", state="ENABLED", priority=1,
                           computeEnvironmentOrder=[{"order": 1, "computeEnvironment": env["computeEnvironmentArn"]}])
    batch.register_job_definition(jobDefinitionName="orchestrator-neuron-1chip", type="container",
                                  containerProperties={"image": "pytorch-training-neuronx", "vcpus": 4,
                                                       "memory": 14745})
    return batch


def test_moto_a_running_batch_run_lists_each_queue_once_with_its_reasons(tmp_path, orch_home, batch_queue,
                                                                         monkeypatch, capsys):
    """AWS Batch trials: one ListJobs page per queue the listing names (JOB_NAME filter of the
    run's prefix), the failed job's reason from its summary (no DescribeJobs), its kind the
    runner's; a job of another run in the queue is not this run's."""
    loaded, plan = _loaded(tmp_path, BATCH_SWEEP, "vit-inf2-xlarge.yaml")
    compiled = compile_schedule(plan)
    _stack_with_a_running_run(plan, _deployed_outputs(compiled))
    assert json.loads(_deployed_outputs(compiled)[in_aws_stack.LISTING_OUTPUT])["places"] == {
        "batch": ["orchestrator-inf2-xlarge"]}
    tick = sweeps.plan(loaded, tick=TICK)
    other = sweeps.plan(loaded, tick=datetime(2026, 12, 4, 3, 0, tzinfo=timezone.utc))
    first, second = tick.trials[0].job_name, tick.trials[1].job_name
    moto_shim.fail_batch_jobs(monkeypatch, {first: BATCH_CAPACITY})
    for trial in (tick.trials[0], tick.trials[1], other.trials[2]):
        batch_queue.submit_job(**trial.prepared.request)

    def ended() -> bool:
        found = batch_queue.list_jobs(jobQueue="orchestrator-inf2-xlarge", filters=[
            {"name": "JOB_NAME", "values": ["*"]}])["jobSummaryList"]
        return len(found) == 3 and all(j["status"] in ("SUCCEEDED", "FAILED") for j in found)

    wait_for(ended, 60, "moto's Batch ending the three jobs")
    clients, calls = _counting("cloudformation", "stepfunctions", "batch")
    [item] = in_aws.deployed(REGION, clients=clients)
    assert item.jobs_problem is None, item.jobs_problem
    by_trial = {j["trial"]: j for j in item.jobs}
    assert set(by_trial) == {tick.trials[0].trial.trial_id, tick.trials[1].trial.trial_id}
    failed = by_trial[tick.trials[0].trial.trial_id]
    assert (failed["job"], failed["status"], failed["kind"]) == (first, "FAILED", "capacity")
    assert failed["reason"].startswith(BATCH_CAPACITY)
    assert by_trial[tick.trials[1].trial.trial_id]["status"] == "SUCCEEDED" and item.waiting == 1
    assert calls.count("ListJobs") == 1 and "DescribeJobs" not in calls
    code, out, err = run_cli(monkeypatch, capsys, "schedule", "list", "--region", REGION)
    assert code == 0 and err == "", (out, err)
    assert f"{first}: FAILED (capacity failure: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY" in out
    assert f"{second}: SUCCEEDED\n" in out and "  1 trial(s) with no job yet (not started, or their create refused" in out


def test_moto_credentials_lost_while_listing_a_runs_jobs_are_that_stacks_warning(tmp_path, orch_home, moto_server):
    """Credentials that stop working between the stacks' listing and the jobs' (an expired
    session): the stack is listed with its run line and a warning that says so, no traceback."""
    from botocore.exceptions import NoCredentialsError

    loaded, plan = _loaded(tmp_path, SAGEMAKER_SWEEP, "vit-trn1-2xlarge.yaml")
    _stack_with_a_running_run(plan, _deployed_outputs(compile_schedule(plan)))
    clients, _ = _counting("cloudformation", "stepfunctions", "sagemaker")

    def refuse(**_):
        raise NoCredentialsError()

    clients["sagemaker"].meta.events.register("before-sign", refuse)
    [item] = in_aws.deployed(REGION, clients=clients)
    assert item.last_run == "RUNNING" and item.jobs == [] and item.waiting is None
    assert item.jobs_problem == ("its running run's jobs could not be read: no usable AWS credentials (Unable to "
                                 "locate credentials); configure them (aws configure, AWS_PROFILE or environment "
                                 "variables), then list again")
