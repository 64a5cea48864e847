"""The CloudFormation template of a schedule kept in the cloud: an EventBridge Scheduler
schedule that starts a Step Functions state machine running the sweep, and their roles.

Contract:
- `template(plan)` is a template of its own (not infra/stack.yaml, which is near
  CloudFormation's 51,200-byte TemplateBody limit), built from the placeholder plan
  (`statemachine.placeholder_plan`): pure, the same plan gives the same template.
- The schedule fires on the sweep's cron (`scheduler_cron.scheduler_expression`) in its time
  zone (`ScheduleExpressionTimezone`: Scheduler handles daylight saving), with a flexible
  window of `FLEXIBLE_WINDOW_MINUTES` unless 0, a retry policy, and a dead-letter queue for
  deliveries that still fail. Its target input carries `<aws.scheduler.scheduled-time>`, the
  run's label (`statemachine`).
- Least privilege: the scheduler's role may only `states:StartExecution` that state machine
  (and send to its dead-letter queue); the state machine's may only create, describe and tag
  training jobs named `<sweep job prefix>-*`, and pass only the trials' execution roles,
  to SageMaker only. Both trust their service only for this account (aws:SourceAccount, the
  confused-deputy guard of the IAM user guide).
- `stack_name(plan)` is `orchestrator-schedule-<sweep>`: one stack per sweep name and region.
  Its outputs keep the cron and time zone as the file has them, for `schedule list`.
"""

from __future__ import annotations

import json

from orchestrator.schedule.scheduler_cron import scheduler_expression
from orchestrator.schedule.statemachine import PLACEHOLDER_LABEL, compile_plan, definition_json

STACK_PREFIX = "orchestrator-schedule-"
# CloudFormation stack names: 128 characters (CreateStack API reference).
MAX_STACK_NAME = 128
FLEXIBLE_WINDOW_MINUTES = 0
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
    return sorted({t.prepared.request["RoleArn"] for t in plan.trials})


def template(plan) -> dict:
    """The schedule's template (see the module docstring)."""
    schedule = plan.sweep.schedule
    sweep_tag = f"{plan.identity.name}-{plan.identity.digest}"
    jobs = job_arn_pattern(plan)
    window = ({"Mode": "FLEXIBLE", "MaximumWindowInMinutes": FLEXIBLE_WINDOW_MINUTES} if FLEXIBLE_WINDOW_MINUTES
              else {"Mode": "OFF"})
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": f"orchestrator schedule of sweep {plan.sweep.sweep} ({sweep_tag}): {schedule.cron} "
                       f"{schedule.timezone}",
        "Resources": {
            "DeadLetterQueue": {"Type": "AWS::SQS::Queue",
                                "Properties": {"MessageRetentionPeriod": DLQ_RETENTION_S, "SqsManagedSseEnabled": True}},
            "StateMachineRole": {"Type": "AWS::IAM::Role", "Properties": {
                "AssumeRolePolicyDocument": _trust("states.amazonaws.com"),
                "Policies": [{"PolicyName": "run-sweep", "PolicyDocument": {"Version": "2012-10-17", "Statement": [
                    {"Sid": "TrainingJobs", "Effect": "Allow",
                     "Action": ["sagemaker:CreateTrainingJob", "sagemaker:DescribeTrainingJob", "sagemaker:AddTags"],
                     "Resource": jobs},
                    {"Sid": "PassExecutionRole", "Effect": "Allow", "Action": "iam:PassRole",
                     "Resource": execution_roles(plan),
                     "Condition": {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}},
                ]}}]}},
            "StateMachine": {"Type": "AWS::StepFunctions::StateMachine", "Properties": {
                "StateMachineType": "STANDARD",
                "DefinitionString": definition_json(compile_plan(plan)),
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
                "FlexibleTimeWindow": window,
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


def describe(plan, now) -> list[str]:
    """`schedule plan`'s lines: the schedule, the state machine, the roles, the cost."""
    import math

    schedule = plan.sweep.schedule
    body = template(plan)
    resources = body["Resources"]
    props = resources["Schedule"]["Properties"]
    machine = compile_plan(plan)
    runs, truncated = runs_per_month(schedule, now)
    # Each trial's job is created once per run (the machine resubmits no failed trial and fails
    # over to no other type), so a run's bound is the plan's total, not its retry worst case.
    worst = plan.total_usd
    lines = [
        f"stack {stack_name(plan)} ({len(json.dumps(body, separators=(',', ':')))} bytes of template)",
        f"schedule: {props['ScheduleExpression']} in {props['ScheduleExpressionTimezone']} (cron {schedule.cron!r}), "
        f"flexible window {props['FlexibleTimeWindow']['Mode'].lower()}, delivery retried "
        f"{RETRY_MAX_ATTEMPTS} times within {RETRY_MAX_EVENT_AGE_S // 60} min, then to a dead-letter queue",
        f"state machine: {len(plan.trials)} trial(s), at most {machine['States']['Trials']['MaxConcurrency']} at once; "
        f"jobs {plan.identity.job_prefix.replace(PLACEHOLDER_LABEL, '<YYYYMMDDHHMM of the fire time>')}-<trial>",
    ]
    for t in plan.trials:
        lines.append(f"  {t.trial.trial_id} {t.trial.spec.instance.type} x{t.trial.spec.instance.count}: "
                     f"at most {t.usd_max:.2f} USD")
    lines += [
        "roles: scheduler may states:StartExecution on this state machine and sqs:SendMessage to its queue; "
        "the state machine may sagemaker:CreateTrainingJob/DescribeTrainingJob/AddTags on "
        f"training-job/{job_arn_pattern(plan)['Fn::Sub'].rsplit('/', 1)[1]} and iam:PassRole "
        f"{', '.join(execution_roles(plan))} to SageMaker only",
    ]
    shown = f"{worst:.2f} USD" if math.isfinite(worst) else "an unknown amount (a price is missing)"
    monthly = f"{worst * runs:.2f} USD" if math.isfinite(worst) else "an unknown amount"
    lines.append(f"cost: at most {shown} a run (each trial once: no resubmission or failover in the cloud); "
                 f"{runs}{'+' if truncated else ''} runs in the next {MONTH_DAYS} days: at most {monthly} a month")
    return lines
