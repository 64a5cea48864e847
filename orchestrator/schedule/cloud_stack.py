"""The CloudFormation template of a schedule kept in the cloud: an EventBridge Scheduler
schedule that starts a Step Functions state machine running the sweep, and their roles.

Contract:
- `template(plan)` is a template of its own (not infra/stack.yaml, which is near
  CloudFormation's 51,200-byte TemplateBody limit), built from the placeholder plan
  (`statemachine.placeholder_plan`): pure, the same plan gives the same template.
- The schedule fires on the sweep's cron (`scheduler_expression`) in its time zone
  (`ScheduleExpressionTimezone`: Scheduler handles daylight saving), with the flexible window
  the file asks for (`schedule.flexible_window_minutes`, 0 = Mode OFF), a retry policy, and a
  dead-letter queue for deliveries that still fail. Its target input carries
  `<aws.scheduler.scheduled-time>`, the run's label (`statemachine`).
- The state machine's definition is not in the template (CloudFormation's 51,200-byte
  TemplateBody held a sweep to about 8 trials): DefinitionS3Location names its object,
  content-addressed beside the trials' archives (`definition_key`), which the deploy uploads.
- Least privilege: the scheduler's role may only `states:StartExecution` that state machine
  (and send to its dead-letter queue); the state machine's may only create, describe and tag
  training jobs named `<sweep job prefix>-*` and pass only the trials' execution roles, to
  SageMaker only (SageMaker trials), and submit to the attempts' queues with their job
  definitions, tag those jobs and describe jobs (Batch trials). Both trust their service only
  for this account (aws:SourceAccount, the confused-deputy guard of the IAM user guide).
- `check_budget(plan)` holds a run's worst case (every retry and failover compiled,
  `attempts.worst_usd`) to the sweep's budget.
- `stack_name(plan)` is `orchestrator-schedule-<sweep>`: one stack per sweep name and region.
  Its outputs keep the cron and time zone as the file has them, for `schedule list`.
"""

from __future__ import annotations

import hashlib
import json
import math

from orchestrator.schedule import attempts, statemachine
from orchestrator.schedule.scheduler_cron import scheduler_expression
from orchestrator.schedule.statemachine import PLACEHOLDER_LABEL, check_size, compile_plan, service

STACK_PREFIX = "orchestrator-schedule-"
# CloudFormation stack names: 128 characters (CreateStack API reference).
MAX_STACK_NAME = 128
# A delivery Scheduler cannot make is retried for up to an hour, then sent to the queue
# (Scheduler API reference, RetryPolicy: 60-86400 s, 0-185 attempts).
RETRY_MAX_EVENT_AGE_S = 3600
RETRY_MAX_ATTEMPTS = 10
# 14 days, SQS's longest retention (SQS API reference, MessageRetentionPeriod).
DLQ_RETENTION_S = 1_209_600


def stack_name(plan) -> str:
    """One stack per sweep name: a re-deploy of a changed sweep (other trials, other cron)
    updates the schedule in place instead of adding a second one that also fires."""
    return f"{STACK_PREFIX}{plan.sweep.sweep}"[:MAX_STACK_NAME]


# The stack output naming the sweep file that deployed it ("host:/absolute/path"): a schedule
# belongs to its file, so that another file with the same `sweep:` name never replaces it
# (`cloud.check_owner`).
OWNER_OUTPUT = "SweepFile"


def owner(plan) -> str:
    """Which file deploys `plan`: this machine's name and the sweep file's absolute path
    ("" for a sweep that was not read from a file)."""
    import socket

    path = plan.sweep.path
    return f"{socket.gethostname()}:{path.resolve()}" if path is not None else ""


def job_arn_pattern(plan) -> dict:
    """The training jobs of any run of this sweep. SageMaker writes names in ARNs in lower case."""
    prefix = plan.identity.job_prefix.lower()
    # The placeholder tick is the run's part; the rest of the prefix is the sweep's.
    fixed = prefix.split(PLACEHOLDER_LABEL)[0]
    return {"Fn::Sub": f"arn:${{AWS::Partition}}:sagemaker:${{AWS::Region}}:${{AWS::AccountId}}:training-job/{fixed}*"}


def _trust(service: str) -> dict:
    return {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole",
        "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}}]}


def execution_roles(plan) -> list[str]:
    return sorted({t.prepared.request["RoleArn"] for t in plan.trials if service(t.trial.spec) == "sagemaker"})


def _batch_arn(kind: str, name: str) -> dict | str:
    """The ARN of a job queue or job definition a request names (a name, name:revision or ARN)."""
    if name.startswith("arn:"):
        return name
    return {"Fn::Sub": f"arn:${{AWS::Partition}}:batch:${{AWS::Region}}:${{AWS::AccountId}}:{kind}/{name}"}


def batch_resources(plan) -> tuple[list, list]:
    """(queue ARNs, job definition ARNs) of every attempt's SubmitJob. A definition named
    without a revision runs its latest active one: both the name and name:* are granted
    (Service Authorization Reference, AWS Batch: the job-definition resource is
    job-definition/<name>:<revision>)."""
    queues, definitions = set(), set()
    for graph in attempts.of_plan(plan).values():
        for a in graph:
            if service(a.prepared.spec) != "batch":
                continue
            queues.add(a.prepared.request["jobQueue"])
            name = a.prepared.request["jobDefinition"]
            definitions.update({name, f"{name}:*"} if ":" not in name.rsplit("/", 1)[-1] else {name})
    return ([_batch_arn("job-queue", q) for q in sorted(queues)],
            [_batch_arn("job-definition", d) for d in sorted(definitions)])


def _machine_statements(plan) -> list[dict]:
    """The state machine role's statements: only what the compiled trials call."""
    statements = []
    if any(service(t.trial.spec) == "sagemaker" for t in plan.trials):
        statements += [
            {"Sid": "TrainingJobs", "Effect": "Allow",
             "Action": ["sagemaker:CreateTrainingJob", "sagemaker:DescribeTrainingJob", "sagemaker:AddTags"],
             "Resource": job_arn_pattern(plan)},
            {"Sid": "PassExecutionRole", "Effect": "Allow", "Action": "iam:PassRole",
             "Resource": execution_roles(plan),
             "Condition": {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}},
        ]
    if any(service(t.trial.spec) == "batch" for t in plan.trials):
        queues, definitions = batch_resources(plan)
        # SubmitJob's resource types are job, job-definition and job-queue; a submit with tags
        # also needs batch:TagResource on the job; DescribeJobs has no resource-level permission
        # (Service Authorization Reference, "Actions defined by AWS Batch"). SubmitJob passes no
        # role: the job definition carries it.
        statements += [
            {"Sid": "SubmitBatchJobs", "Effect": "Allow", "Action": "batch:SubmitJob",
             "Resource": [{"Fn::Sub": "arn:${AWS::Partition}:batch:${AWS::Region}:${AWS::AccountId}:job/*"},
                          *queues, *definitions]},
            {"Sid": "TagBatchJobs", "Effect": "Allow", "Action": "batch:TagResource",
             "Resource": {"Fn::Sub": "arn:${AWS::Partition}:batch:${AWS::Region}:${AWS::AccountId}:job/*"}},
            {"Sid": "DescribeBatchJobs", "Effect": "Allow", "Action": "batch:DescribeJobs", "Resource": "*"},
        ]
    return statements


def flexible_window(schedule) -> dict:
    """Scheduler's FlexibleTimeWindow of the schedule's `flexible_window_minutes` (0: OFF)."""
    minutes = schedule.flexible_window_minutes
    return {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": minutes} if minutes else {"Mode": "OFF"}


def definition_key(plan, text: str) -> tuple[str, str]:
    """(bucket, key) of the definition's object: content-addressed, next to the first trial's
    source archive (`<output>/source/...`), where the deploy uploads it."""
    bucket, key = plan.trials[0].prepared.source_uri.removeprefix("s3://").split("/", 1)
    folder = key.rsplit("/", 1)[0]
    return bucket, f"{folder}/statemachine-{hashlib.sha256(text.encode()).hexdigest()}.json"


def template(plan) -> dict:
    """The schedule's template (see the module docstring)."""
    schedule = plan.sweep.schedule
    sweep_tag = f"{plan.identity.name}-{plan.identity.digest}"
    bucket, key = definition_key(plan, check_size(plan, compile_plan(plan)))
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": f"orchestrator schedule of sweep {plan.sweep.sweep} ({sweep_tag}): {schedule.cron} "
                       f"{schedule.timezone}",
        "Resources": {
            "DeadLetterQueue": {"Type": "AWS::SQS::Queue",
                                "Properties": {"MessageRetentionPeriod": DLQ_RETENTION_S, "SqsManagedSseEnabled": True}},
            "StateMachineRole": {"Type": "AWS::IAM::Role", "Properties": {
                "AssumeRolePolicyDocument": _trust("states.amazonaws.com"),
                "Policies": [{"PolicyName": "run-sweep", "PolicyDocument": {
                    "Version": "2012-10-17", "Statement": _machine_statements(plan)}}]}},
            "StateMachine": {"Type": "AWS::StepFunctions::StateMachine", "Properties": {
                "StateMachineType": "STANDARD",
                # Uploaded by the deploy (`cloud.deploy`): a definition travelling in the template
                # would hold it to CloudFormation's 51,200-byte TemplateBody.
                "DefinitionS3Location": {"Bucket": bucket, "Key": key},
                "RoleArn": {"Fn::GetAtt": ["StateMachineRole", "Arn"]},
                "Tags": [{"Key": "orchestrator:sweep", "Value": sweep_tag}]}},
            "SchedulerRole": {"Type": "AWS::IAM::Role", "Properties": {
                "AssumeRolePolicyDocument": _trust("scheduler.amazonaws.com"),
                "Policies": [{"PolicyName": "start-sweep", "PolicyDocument": {"Version": "2012-10-17", "Statement": [
                    {"Sid": "Start", "Effect": "Allow", "Action": "states:StartExecution",
                     "Resource": {"Ref": "StateMachine"}},
                    {"Sid": "DeadLetter", "Effect": "Allow", "Action": "sqs:SendMessage",
                     "Resource": {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}},
                ]}}]}},
            "Schedule": {"Type": "AWS::Scheduler::Schedule", "Properties": {
                "Description": f"sweep {plan.sweep.sweep}",
                "ScheduleExpression": scheduler_expression(schedule),
                "ScheduleExpressionTimezone": schedule.timezone,
                "FlexibleTimeWindow": flexible_window(schedule),
                "State": "ENABLED",
                "Target": {
                    "Arn": {"Ref": "StateMachine"},
                    "RoleArn": {"Fn::GetAtt": ["SchedulerRole", "Arn"]},
                    "Input": json.dumps({"scheduled_time": "<aws.scheduler.scheduled-time>"}),
                    "RetryPolicy": {"MaximumEventAgeInSeconds": RETRY_MAX_EVENT_AGE_S,
                                    "MaximumRetryAttempts": RETRY_MAX_ATTEMPTS},
                    "DeadLetterConfig": {"Arn": {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}},
                }}},
        },
        "Outputs": {
            "StateMachineArn": {"Value": {"Ref": "StateMachine"}},
            "ScheduleName": {"Value": {"Ref": "Schedule"}},
            "DeadLetterQueueUrl": {"Value": {"Ref": "DeadLetterQueue"}},
            "Cron": {"Value": schedule.cron},
            "Timezone": {"Value": schedule.timezone},
            "SweepId": {"Value": sweep_tag},
            **({OWNER_OUTPUT: {"Value": owner(plan)}} if owner(plan) else {}),
        },
    }


# --- what a deploy would make, in words --------------------------------------------------------

MONTH_DAYS = 30


def runs_per_month(schedule, now) -> tuple[int, bool]:
    """The schedule's fires in the MONTH_DAYS after `now`, and whether the count hit the scan cap."""
    from datetime import timedelta

    from orchestrator.schedule.cron import ticks_between

    ticks, truncated = ticks_between(schedule, now, now + timedelta(days=MONTH_DAYS))
    return len(ticks), truncated


def check_budget(plan) -> None:
    """Refuse (SpecError at the budget line, exit 2) a schedule whose run could bill more than
    budget.max_total_cost_usd with every retry and failover compiled (`attempts.worst_usd`):
    the machine cannot weigh a retry against the sweep's spend as the laptop's runner does."""
    from orchestrator import sweep as sweeps
    from orchestrator.errors import Problem, SpecError

    sweeps.check_budget(plan)  # the first attempts alone
    budget = plan.sweep.budget.max_total_cost_usd
    worst = attempts.worst_usd(plan)
    if budget is None or worst <= budget:
        return
    file, line, col = plan.sweep.locate("budget", "max_total_cost_usd")
    raise SpecError([Problem(file, line, col, "budget.max_total_cost_usd",
                             f"a cloud run of {len(plan.trials)} trials with every retry and failover the state machine "
                             f"holds (max_retries {plan.sweep.max_retries}) costs at most {worst:.2f} USD, above the "
                             f"budget of {budget:g} USD")],
                    hint=f"raise budget.max_total_cost_usd to {math.ceil(worst)}, or lower max_retries (the laptop "
                    "path, `schedule run`, refuses a retry over budget when it comes instead)")


def describe(plan, now) -> list[str]:
    """`schedule plan`'s lines: the schedule, the state machine, the roles, the cost."""
    schedule = plan.sweep.schedule
    body = template(plan)
    resources = body["Resources"]
    props = resources["Schedule"]["Properties"]
    machine = compile_plan(plan)
    graphs = attempts.of_plan(plan)
    runs, truncated = runs_per_month(schedule, now)
    worst = attempts.worst_usd(plan)
    window = props["FlexibleTimeWindow"]
    lines = [
        f"stack {stack_name(plan)} ({len(json.dumps(body, separators=(',', ':')))} bytes of template; the state "
        f"machine's definition, {len(check_size(plan, machine))} bytes, kept at "
        f"s3://{'/'.join(props_of(body, 'StateMachine')['DefinitionS3Location'].values())})",
        f"schedule: {props['ScheduleExpression']} in {props['ScheduleExpressionTimezone']} (cron {schedule.cron!r}), "
        + (f"flexible window: a run starts up to {window['MaximumWindowInMinutes']} min after its fire time"
           if window["Mode"] == "FLEXIBLE" else "flexible window off (a run starts at its fire time)")
        + f", delivery retried {RETRY_MAX_ATTEMPTS} times within {RETRY_MAX_EVENT_AGE_S // 60} min, then to a "
        "dead-letter queue",
        f"state machine: {len(plan.trials)} trial(s), at most {machine['States']['Trials']['MaxConcurrency']} at once; "
        f"jobs {plan.identity.job_prefix.replace(PLACEHOLDER_LABEL, '<YYYYMMDDHHMM of the fire time>')}-<trial>"
        f"[-rN]; a capacity, spot or internal failure is resubmitted as -rN (max_retries "
        f"{plan.sweep.max_retries}), a capacity failure first to the next failover type; each job's state read "
        f"every {statemachine.poll_seconds(plan)} s",
    ]
    for t in plan.trials:
        graph = graphs[t.trial.trial_id]
        types = list(dict.fromkeys(a.instance_type for a in graph))
        lines.append(f"  {t.trial.trial_id} ({t.trial.spec.backend}) {' -> '.join(types)} x{t.trial.spec.instance.count}: "
                     f"{len(graph)} possible job(s), first at most {t.usd_max:.2f} USD")
    roles = ["roles: scheduler may states:StartExecution on this state machine and sqs:SendMessage to its queue"]
    if execution_roles(plan):
        roles.append("the state machine may sagemaker:CreateTrainingJob/DescribeTrainingJob/AddTags on "
                     f"training-job/{job_arn_pattern(plan)['Fn::Sub'].rsplit('/', 1)[1]} and iam:PassRole "
                     f"{', '.join(execution_roles(plan))} to SageMaker only")
    queues, definitions = batch_resources(plan)
    if queues:
        def shown_arn(arn):
            return arn if isinstance(arn, str) else arn["Fn::Sub"].split("${AWS::AccountId}:", 1)[1]

        roles.append(f"the state machine may batch:SubmitJob to {', '.join(map(shown_arn, queues))} with "
                     f"{', '.join(map(shown_arn, definitions))}, batch:TagResource on its jobs, batch:DescribeJobs")
    lines.append("; ".join(roles))
    shown = f"{worst:.2f} USD" if math.isfinite(worst) else "an unknown amount (a price is missing)"
    monthly = f"{worst * runs:.2f} USD" if math.isfinite(worst) else "an unknown amount"
    lines.append(f"cost: at most {shown} a run (first jobs {plan.total_usd:.2f} USD, plus every retry and failover); "
                 f"{runs}{'+' if truncated else ''} runs in the next {MONTH_DAYS} days: at most {monthly} a month")
    return lines


def props_of(body: dict, resource: str) -> dict:
    return body["Resources"][resource]["Properties"]
