"""AWS Batch trials in a cloud schedule (`schedule.statemachine`): each trial's SubmitJob as
`sweep plan` shows it, sent through Step Functions' AWS SDK integration (PascalCase) with the
run's job name, waited for by DescribeJobs, failed over along the sweep's chain on a capacity
failure; the state machine role's Batch statements. Runs by moto's interpreter on its Batch
(docker off: a job is SUCCEEDED at once unless a test fails it)."""

from __future__ import annotations

import json

import moto_shim
import pytest
from schedule_moto import batch_use_no_docker, interpreter_on, run_once
from sweep_fakes import ROOT, write

from orchestrator import names, request, spec
from orchestrator import sweep as sweeps
from orchestrator.schedule import attempts, in_aws_stack
from orchestrator.schedule import statemachine as sm
from orchestrator.schedule.compiled import compile_schedule

RUN = "202612050300"
REGION = "us-east-1"
ACCOUNT = "123456789012"
SWEEP = """\
sweep: inf-nightly
base: base.yaml
grid: {training.optimizer.lr: [0.001, 0.0001]}
failover: {instance.type: [inf2.8xlarge]}
max_retries: 1
concurrency: 2
schedule: {cron: "0 3 * * *"}
"""
CAPACITY = ("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity requested for instance "
            "type inf2.xlarge")
USER = "Essential container in task exited"


def submit_shape():
    import botocore.session

    return botocore.session.get_session().get_service_model("batch").operation_model("SubmitJob").input_shape


def camel(value, shape):
    """A PascalCase request (as Step Functions takes it) back in the API's own member names,
    walking botocore's shape (test-side, independent of the compiler's casing)."""
    kind = shape.type_name
    if kind == "structure":
        members = {name[:1].upper() + name[1:]: name for name in shape.members}
        return {members[key]: camel(item, shape.members[members[key]]) for key, item in value.items()}
    if kind == "list":
        return [camel(item, shape.member) for item in value]
    if kind == "map":
        return {key: camel(item, shape.value) for key, item in value.items()}
    return value


def renamed(value, old: str, new: str):
    return json.loads(json.dumps(value).replace(old, new))


@pytest.fixture
def inf(tmp_path, orch_home):
    path = write(tmp_path, SWEEP, (ROOT / "configs" / "vit-inf2-xlarge.yaml").read_text())
    loaded = spec.load_sweep(path)
    return loaded, sm.placeholder_plan(loaded)


def processor(definition: dict) -> dict:
    return definition["States"]["Trials"]["ItemProcessor"]["States"]


def sent(attempt: dict) -> dict:
    """What an item's attempt sends in run RUN, in the API's member names."""
    from test_schedule_statemachine import sent as sent_pascal

    return camel(sent_pascal(attempt, RUN), submit_shape())


# --- the ASL ------------------------------------------------------------------------------------


def test_each_batch_attempt_is_its_submit_job_with_the_runs_name(inf):
    loaded, plan = inf
    compiled = compile_schedule(plan)
    states = processor(compiled.definition)
    [create] = [s for name, s in states.items() if name.endswith(" Create")]
    assert create["Resource"] == "arn:${Partition}:states:::aws-sdk:batch:submitJob"
    assert create["ResultSelector"] == {"id.$": "$.JobId"}
    # Batch's throttle is retried; nothing else (SubmitJob is not idempotent).
    assert [r["ErrorEquals"] for r in create["Retry"]] == [["Batch.TooManyRequestsException"]]
    [describe] = [s for name, s in states.items() if name.endswith(" Describe")]
    assert describe["Resource"] == "arn:${Partition}:states:::aws-sdk:batch:describeJobs"
    assert describe["Parameters"] == {"Jobs.$": "States.Array($.submitted.id)"}
    items = {i["trial"]: i for i in compiled.items}
    shown = {t.trial.trial_id: t for t in sweeps.plan(loaded).trials}
    tick = sweeps.plan(loaded, tick=sm.PLACEHOLDER_TICK.replace(year=2026, month=12, day=5, hour=3))
    for trial in plan.trials:
        graph = compiled.graphs[trial.trial.trial_id]
        item = items[trial.trial.trial_id]
        # The first job on inf2.xlarge; a capacity failure fails over to inf2.8xlarge (-r1), any
        # retryable failure there is the one retry (-r2); a spot or internal failure of the first
        # is its retry on inf2.xlarge (-r1), whose capacity failure fails over (-r2).
        assert [(a.key, a.instance_type, a.number) for a in graph] == [
            ("a0.0", "inf2.xlarge", 0), ("a1.0f", "inf2.8xlarge", 1), ("a0.1r", "inf2.xlarge", 1),
            ("a1.1r", "inf2.8xlarge", 2), ("a1.1f", "inf2.8xlarge", 2)]
        assert [a["at"] for a in item["attempts"]] == [a.key for a in graph]
        for a, attempt in zip(graph, item["attempts"], strict=True):
            body = sent(attempt)
            name = tick.identity.job_name(trial.trial.trial_id, a.number)
            assert body == renamed(a.prepared.request, sm.PLACEHOLDER_LABEL, RUN) and body["jobName"] == name
            request.check_contract(a.prepared.spec, body, name)
            tags = body["tags"]
            assert tags[names.TAG_SWEEP] == tick.sweep_id and tags[names.TAG_JOB] == name
            assert tags.get(names.TAG_ATTEMPT) == (None if a.number == 0 else
                                                   "failover:inf2.xlarge" if a.key.endswith("f") else "retry")
            assert body["jobQueue"] == f"orchestrator-{a.instance_type.replace('.', '-')}"
        # The first job is `sweep plan`'s request apart from the per-run name, the sweep id and
        # the archive (its job.json names the job).
        plain = shown[trial.trial.trial_id]
        body = sent(item["attempts"][0])
        expected = renamed(plain.prepared.request, plain.job_name, body["jobName"])
        expected = renamed(expected, f"{plan.sweep.sweep}-{plan.identity.digest}\\\"", f"{tick.sweep_id}\\\"")
        expected = renamed(expected, plan.identity.sweep_id.replace(sm.PLACEHOLDER_LABEL, RUN), tick.sweep_id)
        expected["tags"][names.TAG_SWEEP] = tick.sweep_id
        for ours in (body, expected):
            for env in ours["containerOverrides"]["environment"]:
                if env["name"] == "ORCHESTRATOR_CODE_URI":
                    assert env["value"].endswith(".tar.gz")
                    env["value"] = "<archive>"
        assert body == expected


def test_the_roles_batch_statements_name_the_queues_and_definitions(inf):
    import parliament

    _, plan = inf
    statements = compile_schedule(plan).template["Resources"]["StateMachineRole"]["Properties"]["Policies"][0][
        "PolicyDocument"]["Statement"]
    by_sid = {s["Sid"]: s for s in statements}
    assert set(by_sid) == {"SubmitBatchJobs", "TagBatchJobs", "DescribeBatchJobs",  # no SageMaker, no PassRole
                           "ReadItems", "WriteResults", "StartChildren", "FollowChildren"}

    def sub(node):
        text = node["Fn::Sub"] if isinstance(node, dict) else node
        return (text.replace("${AWS::Partition}", "aws").replace("${AWS::Region}", REGION)
                .replace("${AWS::AccountId}", ACCOUNT))

    arn = f"arn:aws:batch:{REGION}:{ACCOUNT}"
    assert sorted(map(sub, by_sid["SubmitBatchJobs"]["Resource"])) == sorted([
        f"{arn}:job/*", f"{arn}:job-queue/orchestrator-inf2-xlarge", f"{arn}:job-queue/orchestrator-inf2-8xlarge",
        f"{arn}:job-definition/orchestrator-neuron-1chip", f"{arn}:job-definition/orchestrator-neuron-1chip:*"])
    assert sub(by_sid["TagBatchJobs"]["Resource"]) == f"{arn}:job/*"
    assert by_sid["DescribeBatchJobs"] == {"Sid": "DescribeBatchJobs", "Effect": "Allow",
                                           "Action": "batch:DescribeJobs", "Resource": "*"}
    document = {"Version": "2012-10-17", "Statement": [
        {**s, "Resource": [sub(r) for r in s["Resource"]] if isinstance(s["Resource"], list) else sub(s["Resource"])}
        for s in statements]}
    findings = parliament.analyze_policy_string(json.dumps(document)).findings
    # parliament's table gives states:DescribeExecution the express-execution resource only
    # (see test_schedule_cloud's policy test).
    findings = [f for f in findings if not (f.issue == "RESOURCE_MISMATCH" and [
        d["action"] for d in f.detail] == ["states:DescribeExecution"])]
    assert [(f.issue, f.detail) for f in findings] == []


# --- runs by moto's interpreter on moto's Batch -------------------------------------------------


@pytest.fixture
def batch_stack(moto_server, monkeypatch):
    """The queues and job definition the requests name, in moto's Batch (docker off), and the
    interpreter on. Returns the SubmitJob bodies the server receives, as sent."""
    import boto3

    batch_use_no_docker(moto_server)
    off = interpreter_on(moto_server, monkeypatch)
    batch = boto3.client("batch", region_name=REGION)
    role = boto3.client("iam").create_role(RoleName="batch-service", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    for size in ("xlarge", "8xlarge"):
        env = batch.create_compute_environment(computeEnvironmentName=f"orchestrator-inf2-{size}-ce",
                                               type="UNMANAGED", state="ENABLED", serviceRole=role)
        batch.create_job_queue(jobQueueName=f"orchestrator-inf2-{size}", state="ENABLED", priority=1,
                               computeEnvironmentOrder=[{"order": 1, "computeEnvironment": env["computeEnvironmentArn"]}])
    batch.register_job_definition(jobDefinitionName="orchestrator-neuron-1chip", type="container",
                                  containerProperties={"image": "pytorch-training-neuronx", "vcpus": 4,
                                                       "memory": 14745})
    bodies = moto_shim.record_bodies(monkeypatch, "SubmitJob")
    yield bodies
    off()


def test_moto_one_run_submits_every_batch_trial_as_planned(inf, batch_stack):
    import boto3

    _, plan = inf
    described = run_once(plan, REGION)
    assert described["status"] == "SUCCEEDED", described
    output = json.loads(described["output"])
    assert [(t["status"], t["attempt"]) for t in output["trials"]] == [("SUCCEEDED", 0)] * 2
    expected = {renamed(t.prepared.request, sm.PLACEHOLDER_LABEL, RUN)["jobName"]:
                renamed(t.prepared.request, sm.PLACEHOLDER_LABEL, RUN) for t in plan.trials}
    # Exactly the plan's SubmitJob requests, with the run's names, as boto3 put them on the wire.
    assert {b["jobName"]: b for b in batch_stack} == expected and len(batch_stack) == 2
    batch = boto3.client("batch", region_name=REGION)
    for name, body in expected.items():
        [job] = [j for j in batch.list_jobs(jobQueue=body["jobQueue"], jobStatus="SUCCEEDED")["jobSummaryList"]
                 if j["jobName"] == name]
        tags = batch.list_tags_for_resource(resourceArn=job["jobArn"])["tags"]
        assert tags[names.TAG_JOB] == name and tags[names.TAG_SWEEP].endswith(f"-{RUN}")


def test_moto_a_capacity_failure_fails_over_and_a_user_failure_ends_the_trial(inf, batch_stack, monkeypatch):
    _, plan = inf
    first, second = (renamed(t.prepared.job_name, sm.PLACEHOLDER_LABEL, RUN) for t in plan.trials)
    moto_shim.fail_batch_jobs(monkeypatch, {first: CAPACITY, second: USER})
    described = run_once(plan, REGION)
    assert described["status"] == "SUCCEEDED", described
    by_trial = {t["trial"]: t for t in json.loads(described["output"])["trials"]}
    failed_over = by_trial[plan.trials[0].trial.trial_id]
    assert (failed_over["job"], failed_over["status"], failed_over["attempt"]) == (f"{first}-r1", "SUCCEEDED", 1)
    ended = by_trial[plan.trials[1].trial.trial_id]
    assert (ended["job"], ended["status"], ended["attempt"]) == (second, "FAILED", 0)
    # The failover job is the plan's attempt on the next type: its queue, its tag, its name.
    [again] = [b for b in batch_stack if b["jobName"] == f"{first}-r1"]
    graph = attempts.of_plan(plan)[plan.trials[0].trial.trial_id]  # prepared again: the same requests
    assert again == renamed(graph[1].prepared.request, sm.PLACEHOLDER_LABEL, RUN)
    assert again["jobQueue"] == "orchestrator-inf2-8xlarge"
    assert again["tags"][names.TAG_ATTEMPT] == "failover:inf2.xlarge"
    assert sorted(b["jobName"] for b in batch_stack) == sorted([first, second, f"{first}-r1"])


def test_a_sweep_across_backends_compiles_both_and_grants_both(tmp_path, orch_home):
    """The published inf2-vs-trn1 comparison, scheduled: its SageMaker trial and its Batch
    trials in one machine, each failure read by its backend's reason fields, one role for both."""
    text = (ROOT / "configs" / "sweep-inf2-vs-trn1.yaml").read_text().replace(
        "base: vit-trn1-2xlarge.yaml", "base: base.yaml") + 'schedule: {cron: "0 3 * * 1-5"}\n'
    path = write(tmp_path, text.replace("max_total_cost_usd: 30", "max_total_cost_usd: 60"),
                 (ROOT / "configs" / "vit-trn1-2xlarge.yaml").read_text())
    compiled = compile_schedule(sm.placeholder_plan(spec.load_sweep(path)))
    in_aws_stack.check_budget(compiled)
    states = processor(compiled.definition)
    assert {s["Resource"] for name, s in states.items() if name.endswith(" Create")} == {
        "arn:${Partition}:states:::aws-sdk:sagemaker:createTrainingJob",
        "arn:${Partition}:states:::aws-sdk:batch:submitJob"}
    # Each backend's failure reasons are read at its own paths.
    whys = [s for name, s in states.items() if name.endswith(" Why")]
    paths = {c["And"][0]["Variable"] for w in whys for rule in w["Choices"] for c in rule["Or"]}
    assert paths == {"$.described.raw.FailureReason", "$.described.raw.StatusReason",
                     "$.described.raw.Container.Reason"}
    statements = compiled.template["Resources"]["StateMachineRole"]["Properties"]["Policies"][0][
        "PolicyDocument"]["Statement"]
    assert [s["Sid"] for s in statements] == ["SubmitBatchJobs", "TagBatchJobs", "DescribeBatchJobs", "TrainingJobs",
                                              "PassExecutionRole", "ReadItems", "WriteResults", "StartChildren",
                                              "FollowChildren"]
