"""A schedule kept in the cloud (`schedule plan/deploy/list/remove`): the template's schedule and
roles, the cron in Scheduler's form, and deploy -> a run as the scheduler starts it -> results ->
remove against the moto server."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone
from types import SimpleNamespace

import moto_shim
import pytest
from schedule_moto import interpreter_on
from sweep_fakes import ROOT, cli_run, write

from orchestrator import names, spec
from orchestrator import sweep as sweeps
from orchestrator.errors import InputError
from orchestrator.schedule import in_aws, in_aws_stack
from orchestrator.schedule import statemachine as sm
from orchestrator.schedule.compiled import compile_schedule
from orchestrator.schedule.eventbridge_cron import scheduler_expression

NIGHTLY = ROOT / "configs" / "sweep-nightly.yaml"


@pytest.fixture
def nightly(orch_home):
    loaded = spec.load_sweep(NIGHTLY)
    return loaded, sm.placeholder_plan(loaded)


# --- the cron in Scheduler's form ---------------------------------------------------------------


@pytest.mark.parametrize("cron, expected", [
    ("0 3 * * *", "cron(0 3 * * ? *)"),
    ("@hourly", "cron(0 * * * ? *)"),
    ("@weekly", "cron(0 0 ? * SUN *)"),
    ("30 2 * * 1-5", "cron(30 2 ? * MON,TUE,WED,THU,FRI *)"),
    ("0 0 * * 7", "cron(0 0 ? * SUN *)"),
    ("*/15 6 1,15 jan *", "cron(*/15 6 1,15 JAN ? *)"),
])
def test_the_cron_in_schedulers_six_fields(cron, expected):
    assert scheduler_expression(SimpleNamespace(cron=cron)) == expected


def test_a_cron_restricting_both_days_is_refused():
    with pytest.raises(InputError, match="both the day of month and the day of week"):
        scheduler_expression(SimpleNamespace(cron="0 3 1 * 1"))


# --- the template -------------------------------------------------------------------------------


def test_the_template_schedules_the_state_machine_with_least_privilege(nightly):
    loaded, plan = nightly
    compiled = compile_schedule(plan)
    body = compiled.template
    resources = body["Resources"]
    schedule = resources["Schedule"]["Properties"]
    assert schedule["ScheduleExpression"] == "cron(0 3 * * ? *)"
    assert schedule["ScheduleExpressionTimezone"] == loaded.schedule.timezone == "UTC"
    target = schedule["Target"]
    assert target["Arn"] == {"Ref": "StateMachine"} and "RetryPolicy" in target and "DeadLetterConfig" in target
    assert json.loads(target["Input"]) == {"scheduled_time": "<aws.scheduler.scheduled-time>"}
    machine = resources["StateMachine"]["Properties"]
    # The definition travels beside the archives, content-addressed, not in the template.
    assert "DefinitionString" not in machine
    text = compiled.definition_text
    location = machine["DefinitionS3Location"]
    assert location == dict(zip(("Bucket", "Key"), compiled.definition_at, strict=True))
    assert location["Key"].endswith(f"/statemachine-{hashlib.sha256(text.encode()).hexdigest()}.json")
    assert location["Bucket"] == plan.trials[0].prepared.source_uri.split("/")[2]
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    [start, dead] = resources["SchedulerRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    assert start["Action"] == "states:StartExecution" and start["Resource"] == {"Ref": "StateMachine"}
    assert dead["Action"] == "sqs:SendMessage"
    [jobs, passrole, items, results, children, follow] = resources["StateMachineRole"]["Properties"][
        "Policies"][0]["PolicyDocument"]["Statement"]
    # The Distributed Map's own needs: its items, its results, its child executions (by name:
    # the machine's own ARN would make the role depend on it).
    assert items == {"Sid": "ReadItems", "Effect": "Allow", "Action": "s3:GetObject",
                     "Resource": {"Fn::Sub": f"arn:${{AWS::Partition}}:s3:::{'/'.join(compiled.items_at)}"}}
    assert results["Action"] == ["s3:PutObject", "s3:GetObject"]
    name = machine["StateMachineName"]
    assert children["Resource"]["Fn::Sub"].endswith(f":stateMachine:{name}")
    assert follow["Resource"]["Fn::Sub"].endswith(f":execution:{name}/Trials:*")
    assert sorted(jobs["Action"]) == ["sagemaker:AddTags", "sagemaker:CreateTrainingJob",
                                      "sagemaker:DescribeTrainingJob"]
    assert jobs["Resource"]["Fn::Sub"].endswith(f":training-job/{plan.identity.name}-{plan.identity.digest}-*")
    assert passrole["Resource"] == [loaded.base_spec.role_arn]
    assert passrole["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    for role in ("SchedulerRole", "StateMachineRole"):
        trust = resources[role]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
        assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    # Every run's job name, retries included, falls under the policy's pattern (lower-cased, as
    # SageMaker's ARNs are).
    tick = sweeps.plan(loaded, tick=datetime(2026, 12, 5, 3, 0, tzinfo=timezone.utc))
    prefix = jobs["Resource"]["Fn::Sub"].rsplit("/", 1)[1].rstrip("*")
    assert all(tick.identity.job_name(t.trial.trial_id, n).lower().startswith(prefix)
               for t in tick.trials for n in range(loaded.max_retries + 1))


def test_plan_shows_the_cost_per_run_and_per_month(nightly, capsys):
    loaded, plan = nightly
    compiled = compile_schedule(plan)
    lines = in_aws_stack.describe(compiled, datetime(2026, 12, 1, tzinfo=timezone.utc))
    [cost] = [line for line in lines if line.startswith("cost:")]
    # A run's bound counts every retry the machine holds: the plan's worst case here (one type,
    # max_retries 2), above its first jobs' total.
    worst = compiled.worst_usd
    assert worst == pytest.approx(plan.worst_usd) and worst > plan.total_usd
    assert f"at most {worst:.2f} USD a run (first jobs {plan.total_usd:.2f} USD" in cost
    assert f"30 runs in the next 30 days: at most {worst * 30:.2f} USD a month" in cost
    assert any("flexible window off" in line for line in lines)
    assert any("3 possible job(s)" in line for line in lines)
    # The real concurrency: a Distributed Map's MaxConcurrency, the sweep's.
    assert any("each in a child execution of a Distributed Map, at most 3 at once" in line for line in lines)


def test_a_run_whose_retries_could_pass_the_budget_is_refused_at_plan(tmp_path, orch_home):
    """The first jobs fit the budget, their compiled retries do not: exit 2 at the budget line."""
    import os

    text = NIGHTLY.read_text().replace("base: vit-trn1-2xlarge.yaml", "base: base.yaml").replace(
        "max_total_cost_usd: 40", "max_total_cost_usd: 30")
    path = write(tmp_path, text, (ROOT / "configs" / "vit-trn1-2xlarge.yaml").read_text())
    done = cli_run("schedule", "plan", str(path), env={**os.environ, "ORCHESTRATOR_HOME": str(orch_home)})
    assert done.returncode == 2, done.stderr
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "max_total_cost_usd" in row)
    assert f"sweep.yaml:{line}:" in done.stderr and "every retry and failover" in done.stderr
    assert "raise budget.max_total_cost_usd to 37, or lower max_retries" in done.stderr
    assert done.stdout == ""


def test_a_run_over_budget_is_refused_at_plan(tmp_path, orch_home):
    import os

    text = NIGHTLY.read_text().replace("base: vit-trn1-2xlarge.yaml", "base: base.yaml").replace(
        "max_total_cost_usd: 40", "max_total_cost_usd: 5")
    path = write(tmp_path, text, (ROOT / "configs" / "vit-trn1-2xlarge.yaml").read_text())
    done = cli_run("schedule", "plan", str(path), env={**os.environ, "ORCHESTRATOR_HOME": str(orch_home)})
    assert done.returncode == 2, done.stderr
    assert "above the budget of 5 USD" in done.stderr and "max_total_cost_usd" in done.stderr
    assert done.stdout == ""  # nothing shown as if it could be deployed


# --- against moto -------------------------------------------------------------------------------


@pytest.fixture
def scheduler_in_cloudformation(monkeypatch):
    """AWS::Scheduler::Schedule in moto's CloudFormation, on its Scheduler backend (moto_shim)."""
    moto_shim.cloudformation_scheduler_schedules(monkeypatch)


@pytest.fixture
def interpreter(moto_server, monkeypatch):
    """moto's Step Functions interpreter on (its clients call the moto server on 127.0.0.1).

    With it on, moto's Step Functions API serves the interpreter's backend, while its
    CloudFormation model of AWS::StepFunctions::StateMachine creates and deletes in the other
    one: the stack's state machine would be invisible to the API. The model is pointed at the
    interpreter's backend here."""
    moto_shim.stepfunctions_api_serves_the_interpreter(monkeypatch)
    off = interpreter_on(moto_server, monkeypatch)
    yield moto_server
    off()


def _quotas(monkeypatch, applied: dict[str, float], defaults: dict[str, float] | None = None, *, moto: bool = True):
    """The deploy's quota clients: a Service Quotas answering as the real one does (applied
    values and defaults apart, tests/quota_fake.py; moto implements no ListServiceQuotas) and,
    with `moto`, moto's SageMaker for the training jobs in progress (else none: in use unknown).
    Returns the fake."""
    import boto3
    from quota_fake import quota, service_quotas

    from orchestrator import quotas

    fake = service_quotas({"sagemaker": [quota(n, f"L-{i:08d}", v) for i, (n, v) in enumerate(applied.items())]},
                          {"sagemaker": [quota(n, f"L-9{i:07d}", v) for i, (n, v) in enumerate((defaults or {}).items())]})
    monkeypatch.setattr(quotas, "clients", lambda region, attempts=None: (
        fake.client, boto3.client("sagemaker", region_name=region) if moto else None))
    return fake


TRN1_2XL = "ml.trn1.2xlarge for training job usage"


def test_moto_deploy_run_results_remove(nightly, interpreter, scheduler_in_cloudformation,
                                        moto_change_set_outputs, tmp_path, monkeypatch, capsys):
    import boto3
    from typer.testing import CliRunner

    from orchestrator.cli import app

    loaded, plan = nightly
    region = loaded.base_spec.region
    bucket = plan.trials[0].prepared.source_uri.split("/")[2]
    boto3.client("s3", region_name=region).create_bucket(Bucket=bucket)

    fake = _quotas(monkeypatch, {TRN1_2XL: 3})
    # The schedule belongs to its file (issue 32): deployed from a copy that is changed below.
    mine = tmp_path / "nightly.yaml"
    mine.write_text(NIGHTLY.read_text().replace("base: vit-trn1-2xlarge.yaml",
                                                f"base: {NIGHTLY.parent}/vit-trn1-2xlarge.yaml"))
    deployed = CliRunner().invoke(app, ["schedule", "deploy", str(mine), "--yes"])
    assert deployed.exit_code == 0, deployed.output
    assert ("ListServiceQuotas", "sagemaker") in fake.calls  # admitted by quota before anything was uploaded
    assert "deployed stack" in deployed.output and "add: Schedule (AWS::Scheduler::Schedule)" in deployed.output
    stack = in_aws_stack.stack_name(plan)

    # The schedule is the file's: expression and time zone.
    [found] = boto3.client("scheduler", region_name=region).list_schedules()["Schedules"]
    schedule = boto3.client("scheduler", region_name=region).get_schedule(Name=found["Name"])
    assert schedule["ScheduleExpression"] == "cron(0 3 * * ? *)" and schedule["ScheduleExpressionTimezone"] == "UTC"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}  # the file asks for none
    # Each trial's archive is where its request says.
    s3 = boto3.client("s3", region_name=region)
    for trial in plan.trials:
        key = trial.prepared.source_uri.split("/", 3)[3]
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == trial.prepared.archive

    # Start the state machine as the scheduler does: its target's input, the fire time filled in.
    sfn = boto3.client("stepfunctions", region_name=region)
    [listed] = in_aws.deployed(region)
    machine = listed.state_machine
    run_input = schedule["Target"]["Input"].replace("<aws.scheduler.scheduled-time>", "2026-12-05T03:00:00Z")
    execution = sfn.start_execution(stateMachineArn=machine, input=run_input)["executionArn"]
    for _ in range(600):
        if sfn.describe_execution(executionArn=execution)["status"] != "RUNNING":
            break
        time.sleep(0.1)
    assert sfn.describe_execution(executionArn=execution)["status"] == "SUCCEEDED"

    tick = sweeps.plan(loaded, tick=datetime(2026, 12, 5, 3, 0, tzinfo=timezone.utc))
    client = boto3.client("sagemaker", region_name=region)
    made = {j["TrainingJobName"] for j in client.list_training_jobs()["TrainingJobSummaries"]}
    assert made == {t.job_name for t in tick.trials}
    for name in made:
        arn = client.describe_training_job(TrainingJobName=name)["TrainingJobArn"]
        tags = {t["Key"]: t["Value"] for t in client.list_tags(ResourceArn=arn)["Tags"]}
        assert tags[names.TAG_SWEEP] == tick.sweep_id and tags[names.TAG_JOB] == name

    listing = CliRunner().invoke(app, ["schedule", "list", "--region", region])
    assert listing.exit_code == 0 and "last run: SUCCEEDED" in listing.output, listing.output
    assert all(name in listing.output for name in made)
    assert "next fire: " in listing.output and " 03:00 UTC" in listing.output

    # A changed sweep (concurrency and cron) re-deploys in place: the same stack, one schedule,
    # the change set saying what changed.
    changed = mine
    changed.write_text(mine.read_text().replace("concurrency: 3", "concurrency: 2")
                       .replace('cron: "0 3 * * *"', 'cron: "30 4 * * 1-5"'))
    again = CliRunner().invoke(app, ["schedule", "deploy", str(changed), "--yes"])
    assert again.exit_code == 0, again.output
    assert "modify: StateMachine" in again.output and "modify: Schedule" in again.output
    assert f"deployed stack {stack} in {region} (update)" in again.output
    [updated] = boto3.client("scheduler", region_name=region).list_schedules()["Schedules"]
    rescheduled = boto3.client("scheduler", region_name=region).get_schedule(Name=updated["Name"])
    assert rescheduled["ScheduleExpression"] == "cron(30 4 ? * MON,TUE,WED,THU,FRI *)"
    [definition] = [json.loads(sfn.describe_state_machine(stateMachineArn=m["stateMachineArn"])["definition"])
                    for m in sfn.list_state_machines()["stateMachines"]]
    assert definition["States"]["Trials"]["MaxConcurrency"] == 2

    # results --sweep from a fresh ORCHESTRATOR_HOME sees the cloud run's jobs.
    fresh = tmp_path / "fresh-home"
    fresh.mkdir()
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(fresh))
    prefix = plan.trials[0].prepared.request["OutputDataConfig"]["S3OutputPath"]
    seen = CliRunner().invoke(app, ["results", "--sweep", tick.sweep_id, "--prefix", prefix, "--region", region,
                                    "--format", "json"])
    assert seen.exit_code == 0 and all(name in seen.output for name in made), seen.output

    def roles() -> list[str]:
        return [r["RoleName"] for r in boto3.client("iam").list_roles()["Roles"]
                if "SchedulerRole" in r["RoleName"] or "StateMachineRole" in r["RoleName"]]

    assert len(roles()) == 2

    removed = CliRunner().invoke(app, ["schedule", "remove", stack, "--region", region, "--yes"])
    assert removed.exit_code == 0, removed.output
    assert boto3.client("scheduler", region_name=region).list_schedules()["Schedules"] == []
    assert sfn.list_state_machines()["stateMachines"] == []
    assert roles() == []
    assert boto3.client("cloudformation", region_name=region).list_stacks(
        StackStatusFilter=["CREATE_COMPLETE", "UPDATE_COMPLETE"])["StackSummaries"] == []
    # The jobs the run started are untouched.
    assert {j["TrainingJobName"] for j in client.list_training_jobs()["TrainingJobSummaries"]} == made


def test_moto_deploy_asks_and_off_a_terminal_deploys_nothing(nightly, interpreter, scheduler_in_cloudformation,
                                                             moto_change_set_outputs, monkeypatch, capsys):
    """`schedule deploy` commits money: it shows the plan, the monthly worst case and the
    stack's changes, then asks, as `infra deploy` does. Off a terminal without --yes: exit 2,
    the change set deleted, no archive uploaded, no stack made. `schedule remove` asks too."""
    import boto3
    from cli_harness import run_cli

    loaded, plan = nightly
    region = loaded.base_spec.region
    bucket = plan.trials[0].prepared.source_uri.split("/")[2]
    s3 = boto3.client("s3", region_name=region)
    s3.create_bucket(Bucket=bucket)
    _quotas(monkeypatch, {TRN1_2XL: 3})
    monkeypatch.setattr("sys.stdin", open("/dev/null"))
    code, out, err = run_cli(monkeypatch, capsys, "schedule", "deploy", str(NIGHTLY))
    assert code == 2 and "pass --yes" in err and "nothing was uploaded or deployed" in err
    assert "a month" in out and "add: StateMachine (AWS::StepFunctions::StateMachine)" in out
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    cfn = boto3.client("cloudformation", region_name=region)
    # The change set is gone and no resource was made (the CREATE change set's empty stack is
    # deleted by `infra.deploy.discard`; moto keeps its REVIEW_IN_PROGRESS shell listed).
    made = [s["StackStatus"] for s in cfn.list_stacks()["StackSummaries"] if s["StackName"] == in_aws_stack.stack_name(plan)]
    assert not [status for status in made if status.endswith("_COMPLETE") and status != "DELETE_COMPLETE"]
    assert boto3.client("stepfunctions", region_name=region).list_state_machines()["stateMachines"] == []
    assert run_cli(monkeypatch, capsys, "schedule", "deploy", str(NIGHTLY), "--yes")[0] == 0
    code, out, err = run_cli(monkeypatch, capsys, "schedule", "remove", str(NIGHTLY))
    assert code == 2 and "nothing was removed" in err and "would be deleted" in out
    assert "CREATE_COMPLETE" in [d.status for d in in_aws.deployed(region)]  # still there (moto also lists the declined shell)


def test_deploy_refuses_a_job_its_quota_cannot_pass_before_any_call(nightly, monkeypatch):
    """The cloud schedule admits through the sweeps' admission: every job a run may make must
    pass its quota (here the default, 0, with no applied value): exit 2 naming the quota and
    its code, before a change set is made or an archive uploaded."""
    from orchestrator.backends import sagemaker
    from orchestrator.infra import deploy as infra_deploy

    _, plan = nightly
    _quotas(monkeypatch, {}, {TRN1_2XL: 0}, moto=False)
    monkeypatch.setattr(sagemaker.SageMakerBackend, "connect", lambda *a, **k: pytest.fail("a client was made"))
    monkeypatch.setattr(infra_deploy, "plan_change_set", lambda *a, **k: pytest.fail("a change set was made"))
    with pytest.raises(InputError) as refused:
        in_aws.deploy(compile_schedule(plan), "us-east-1", clients={"cloudformation": object()})
    assert refused.value.exit_code == 2
    assert f'"{TRN1_2XL}" (L-90000000) is 0' in refused.value.message and "(the AWS default)" in refused.value.message
    assert "request-service-quota-increase --service-code sagemaker --quota-code L-90000000" in refused.value.hint


def test_the_schedules_policies_pass_parliament(nightly):
    """The roles' policies, resolved as CloudFormation would, linted by parliament against its
    bundled IAM database (as tests/test_iam_parliament.py lints the main stack's). A trust
    policy has no Resource, which parliament (reading every document as an identity policy)
    reports as MALFORMED: that finding, and only it, is accepted there."""
    import parliament

    _, plan = nightly
    values = {"AWS::AccountId": "123456789012", "AWS::Region": "us-east-1", "AWS::Partition": "aws",
              "StateMachine": "arn:aws:states:us-east-1:123456789012:stateMachine:orchestrator-schedule-nightly"}
    attrs = {("DeadLetterQueue", "Arn"): "arn:aws:sqs:us-east-1:123456789012:orchestrator-schedule-dlq"}

    def resolve(node):
        if isinstance(node, dict):
            if set(node) == {"Ref"}:
                return values[node["Ref"]]
            if set(node) == {"Fn::GetAtt"}:
                return attrs[tuple(node["Fn::GetAtt"])]
            if set(node) == {"Fn::Sub"}:
                text = node["Fn::Sub"]
                for key, value in values.items():
                    text = text.replace("${" + key + "}", value)
                assert "${" not in text, text
                return text
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    resources = compile_schedule(plan).template["Resources"]
    linted = 0
    for role in ("SchedulerRole", "StateMachineRole"):
        props = resolve(resources[role]["Properties"])
        for document in [p["PolicyDocument"] for p in props["Policies"]]:
            findings = parliament.analyze_policy_string(json.dumps(document)).findings
            # parliament's table gives states:DescribeExecution the express-execution resource
            # only; the Distributed Map's children are standard executions, `execution:` ARNs
            # (developer guide, "IAM policies for running Distributed Map states").
            findings = [f for f in findings if not (f.issue == "RESOURCE_MISMATCH" and [
                d["action"] for d in f.detail] == ["states:DescribeExecution"])]
            assert [(f.issue, f.detail) for f in findings] == [], role
            linted += 1
        trust = parliament.analyze_policy_string(json.dumps(props["AssumeRolePolicyDocument"])).findings
        assert {f.issue for f in trust} <= {"MALFORMED"}, [(f.issue, f.detail) for f in trust]
    assert linted == 2


def _wide(tmp_path, trials: int, max_retries: int):
    lrs = ", ".join(f"{1e-4 * (i + 1):.6f}" for i in range(trials))
    return write(tmp_path, f"sweep: wide\nbase: base.yaml\ngrid: {{training.optimizer.lr: [{lrs}]}}\n"
                 f"max_retries: {max_retries}\nschedule: {{cron: '0 3 * * *'}}\n",
                 (ROOT / "configs" / "vit-trn1-2xlarge.yaml").read_text())


def _count_calls(monkeypatch, operations: tuple[str, ...]) -> dict[str, int]:
    """How many of each of `operations` botocore clients in this process call from now on."""
    from collections import Counter

    import botocore.client

    counted: Counter = Counter({op: 0 for op in operations})
    original = botocore.client.BaseClient._make_api_call

    def counting(self, operation_name, api_params):
        if operation_name in counted:
            counted[operation_name] += 1
        return original(self, operation_name, api_params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", counting)
    return counted


@pytest.mark.parametrize("trials", [1000, pytest.param(10_000, marks=[pytest.mark.slow, pytest.mark.scale])])
def test_moto_a_sweep_of_many_trials_deploys(trials, tmp_path, orch_home, interpreter, scheduler_in_cloudformation,
                                             moto_change_set_outputs, monkeypatch):
    """A thousand trials (concurrency 100) once could not deploy: every trial's states were in
    one definition and one execution's history. Now the definition is the same size whatever the
    count, the trials are an S3 object the Map reads, and the template holds no trial. 10,000
    (the spec's limit) in `make test-scale`; its figures are printed (docs/BENCHMARKS.md)."""
    import boto3

    from orchestrator import aws_contract
    from orchestrator.infra.template import template_body

    path = _wide(tmp_path, trials, 0)
    path.write_text(path.read_text() + "concurrency: 100\n")
    started = time.monotonic()
    plan = sm.placeholder_plan(spec.load_sweep(path))
    planned = time.monotonic()
    compiled = compile_schedule(plan)
    compiled_at = time.monotonic()
    assert len(plan.trials) == trials
    body = template_body(compiled.template)
    assert aws_contract.violations("cloudformation", "CreateChangeSet", {
        "StackName": in_aws_stack.stack_name(plan), "ChangeSetName": "x", "TemplateBody": body}) == []
    assert len(compiled.definition_text) < 51_200
    region = plan.sweep.base_spec.region
    bucket = plan.trials[0].prepared.source_uri.split("/")[2]
    boto3.client("s3", region_name=region).create_bucket(Bucket=bucket)
    _quotas(monkeypatch, {"ml.trn1.2xlarge for training job usage": trials})
    calls = _count_calls(monkeypatch, ("HeadObject", "PutObject"))
    deploy_started = time.monotonic()
    in_aws.deploy(compiled, region, sleep=lambda s: None)
    deployed_at = time.monotonic()
    sfn = boto3.client("stepfunctions", region_name=region)
    [machine] = sfn.list_state_machines()["stateMachines"]
    deployed = sfn.describe_state_machine(stateMachineArn=machine["stateMachineArn"])["definition"]
    assert deployed == sm.substituted(compiled.definition_text)
    assert json.loads(deployed)["States"]["Trials"]["MaxConcurrency"] == 100
    s3 = boto3.client("s3", region_name=region)
    assert s3.get_object(Bucket=bucket, Key=compiled.items_at[1])["Body"].read().decode() == compiled.items_text
    # Every job a run may make has its archive where its request says, each uploaded once.
    uploaded = {o["Key"]: o["Size"] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="jobs/source/") for o in page["Contents"]}
    wanted = {a.prepared.source_uri.split("/", 3)[3] for g in compiled.graphs.values() for a in g}
    assert len(wanted) == trials and wanted <= set(uploaded)
    assert calls["PutObject"] == len(wanted) + 2  # the archives, the items and the definition
    print(json.dumps({"trials": trials, "plan_s": round(planned - started, 1),
                      "compile_s": round(compiled_at - planned, 1), "deploy_s": round(deployed_at - deploy_started, 1),
                      "items_bytes": len(compiled.items_text), "definition_bytes": len(compiled.definition_text),
                      "template_bytes": len(body), "archives": len(wanted),
                      "archive_bytes": sum(uploaded[k] for k in wanted), "s3_calls": dict(calls)}))


def test_an_archive_two_attempts_share_is_uploaded_once():
    """The archive URI is content-addressed: attempts that send the same sources (here two
    trials' first attempts and a retry) are one upload, in the order first met."""
    def attempt(uri):
        return SimpleNamespace(prepared=SimpleNamespace(source_uri=uri))

    compiled = SimpleNamespace(graphs={"t1": [attempt("s3://b/a"), attempt("s3://b/a")],
                                       "t2": [attempt("s3://b/c"), attempt("s3://b/a")]})
    assert [p.source_uri for p in in_aws.archives(compiled)] == ["s3://b/a", "s3://b/c"]


def test_a_trial_step_functions_would_refuse_is_refused_before_any_call(tmp_path, orch_home, monkeypatch):
    """A trial's item (its attempts' requests) is a child execution's input: at most 256 KiB
    (Step Functions quotas). max_retries (at most 10) keeps a trial's item far below it here, so
    the bound is lowered to 3 attempts' worth: exit 2 before an archive is uploaded or a client
    is made."""
    from orchestrator.backends import sagemaker

    def no_client(*args, **kwargs):
        raise AssertionError("no AWS client may be made")

    monkeypatch.setattr(sagemaker.SageMakerBackend, "connect", no_client)
    plan = sm.placeholder_plan(spec.load_sweep(_wide(tmp_path, 2, 10)))
    one = len(json.dumps(plan.trials[0].prepared.request))
    monkeypatch.setattr(sm, "MAX_ITEM_BYTES", 3 * one)
    with pytest.raises(InputError) as refused:
        in_aws.deploy(compile_schedule(plan), "us-east-1")
    assert f"bytes of input for its 11 possible jobs, above Step Functions' {3 * one:,}" in refused.value.message
    assert "lower max_retries" in refused.value.hint


def test_remove_by_file_is_not_refused_for_the_budget(tmp_path, orch_home, moto_server):
    """A schedule is removed whatever its file's budget says now: `remove FILE` reads the stack's
    name from it and asks CloudFormation (here: no such stack, an InputError naming it)."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    text = NIGHTLY.read_text().replace("base: vit-trn1-2xlarge.yaml", "base: base.yaml").replace(
        "max_total_cost_usd: 40", "max_total_cost_usd: 5")
    path = write(tmp_path, text, (ROOT / "configs" / "vit-trn1-2xlarge.yaml").read_text())
    done = CliRunner().invoke(app, ["schedule", "remove", str(path)])
    # The CLI's entry point makes an InputError exit 2; CliRunner hands the exception back.
    assert isinstance(done.exception, InputError), done.output
    assert done.exception.message == "no schedule stack 'orchestrator-schedule-nightly' in us-east-1"


def test_moto_a_schedule_belongs_to_the_file_that_deployed_it(tmp_path, orch_home, interpreter,
                                                              scheduler_in_cloudformation, moto_change_set_outputs,
                                                              monkeypatch, capsys):
    """Issue 32: `schedule deploy collide-b.yaml` silently replaced collide-a.yaml's schedule of
    the same sweep name, and `schedule remove collide-b.yaml` removed A's."""
    import boto3
    from cli_harness import run_cli

    base = (ROOT / "configs" / "vit-trn1-2xlarge.yaml").read_text()
    (tmp_path / "base.yaml").write_text(base)
    files = {}
    for name, cron in (("a", "0 3 * * *"), ("b", "30 5 * * *")):
        files[name] = tmp_path / f"collide-{name}.yaml"
        files[name].write_text(f"sweep: collide\nbase: base.yaml\ngrid: {{training.optimizer.lr: [0.001]}}\n"
                               f"schedule: {{cron: '{cron}'}}\n")
    plan = sm.placeholder_plan(spec.load_sweep(files["a"]))
    region = plan.sweep.base_spec.region
    boto3.client("s3", region_name=region).create_bucket(Bucket=plan.trials[0].prepared.source_uri.split("/")[2])
    _quotas(monkeypatch, {TRN1_2XL: 3})
    in_aws.deploy(compile_schedule(plan), region, sleep=lambda s: None)
    stack = in_aws_stack.stack_name(plan)
    cfn = boto3.client("cloudformation", region_name=region)
    outputs = {o["OutputKey"]: o["OutputValue"] for o in cfn.describe_stacks(StackName=stack)["Stacks"][0]["Outputs"]}
    assert outputs[in_aws_stack.OWNER_OUTPUT].endswith(f":{files['a'].resolve()}")
    # What `schedule list` lists a running run's jobs by, as CloudFormation keeps it.
    assert json.loads(outputs[in_aws_stack.LISTING_OUTPUT]) == {"jobs": plan.identity.job_prefix, "trials": 1,
                                                                "places": {"sagemaker": []}}

    def cron_kept() -> str:
        [found] = boto3.client("scheduler", region_name=region).list_schedules()["Schedules"]
        return boto3.client("scheduler", region_name=region).get_schedule(Name=found["Name"])["ScheduleExpression"]

    code, out, err = run_cli(monkeypatch, capsys, "schedule", "deploy", str(files["b"]))
    assert code == 2, (out, err)
    assert f"stack {stack} in {region} holds the schedule of sweep 'collide' deployed from " in err
    assert f"{files['a'].resolve()}; {files['b']} has the same sweep name" in err and "nothing was deployed" in err
    assert "sweep: collide-2" in err and f"schedule remove {stack}" in err
    assert cron_kept() == "cron(0 3 * * ? *)"  # A's schedule, untouched
    code, out, err = run_cli(monkeypatch, capsys, "schedule", "remove", str(files["b"]))
    assert code == 2 and "nothing was removed" in err, (out, err)
    assert cron_kept() == "cron(0 3 * * ? *)"
    # Its state machine deleted out of band: `schedule list` says so (it was an internal error).
    sfn = boto3.client("stepfunctions", region_name=region)
    [machine] = sfn.list_state_machines()["stateMachines"]
    sfn.delete_state_machine(stateMachineArn=machine["stateMachineArn"])
    code, out, err = run_cli(monkeypatch, capsys, "schedule", "list", "--region", region)
    assert code == 0, err
    assert f"warning: {stack}: its state machine {machine['stateMachineArn']} no longer exists" in err
    assert f"schedule remove {stack}` removes the rest" in err
    code, out, err = run_cli(monkeypatch, capsys, "schedule", "remove", str(files["a"]), "--yes")
    assert code == 0, err
    assert boto3.client("scheduler", region_name=region).list_schedules()["Schedules"] == []
