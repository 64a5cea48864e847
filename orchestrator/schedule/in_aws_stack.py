"""The CloudFormation template of a schedule kept in AWS (which `in_aws` deploys): an
EventBridge Scheduler schedule that starts a Step Functions state machine running the sweep,
and their roles.

Contract:
- `template(compiled)` is a template of its own (not infra/stack.yaml, which is near
  CloudFormation's 51,200-byte TemplateBody limit), built from a compiled schedule
  (`compiled.compile_schedule`): pure, the same plan gives the same template.
- The schedule fires on the sweep's cron (`scheduler_expression`) in its time zone
  (`ScheduleExpressionTimezone`: Scheduler handles daylight saving), with the flexible window
  the file asks for (`schedule.flexible_window_minutes`, 0 = Mode OFF), a retry policy, and a
  dead-letter queue for deliveries that still fail. Its target input carries
  `<aws.scheduler.scheduled-time>`, the run's label (`statemachine`).
- The state machine's definition is not in the template (CloudFormation's 51,200-byte
  TemplateBody held a sweep to about 8 trials): DefinitionS3Location names its object,
  content-addressed beside the trials' archives (`compiled`), which the deploy uploads; its
  ARNs' partition is the stack's (DefinitionSubstitutions).
- Least privilege: the scheduler's role may only `states:StartExecution` that state machine
  (and send to its dead-letter queue); the state machine's holds what each backend asks for
  the jobs it may make (`ScheduledJobs.statements`: its create, describe and tag actions on
  the sweep's job names, the roles it passes) and the Distributed Map's own needs (read its
  items, write its results, run its child executions). Both trust their service only for this
  account (aws:SourceAccount, the confused-deputy guard of the IAM user guide).
- `check_budget(compiled)` holds a run's worst case (every retry and failover compiled,
  `attempts.worst_usd`) to the sweep's budget.
- `stack_name(plan)` is `orchestrator-schedule-<sweep>`: one stack per sweep name and region.
  Its outputs keep the cron and time zone as the file has them, for `schedule list`, and
  (`LISTING_OUTPUT`, `listing`) what lists a running run's jobs: the sweep's job prefix with
  the placeholder label, the trial count and, per backend, the places its jobs are listed in
  (`ScheduledJobs.listing_places`, e.g. AWS Batch's queues).
"""

from __future__ import annotations

import json
import math

from orchestrator.backends import scheduled
from orchestrator.schedule.eventbridge_cron import scheduler_expression
from orchestrator.schedule.statemachine import MAP_LABEL, PARTITION, PLACEHOLDER_LABEL

STACK_PREFIX = "orchestrator-schedule-"
# CloudFormation stack names: 128 characters (CreateStack API reference); state machine names
# 80 (CreateStateMachine API reference, name).
MAX_STACK_NAME = 128
MAX_MACHINE_NAME = 80
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
# (`in_aws.check_owner`).
OWNER_OUTPUT = "SweepFile"


def owner(plan) -> str:
    """Which file deploys `plan`: this machine's name and the sweep file's absolute path
    ("" for a sweep that was not read from a file)."""
    import socket

    path = plan.sweep.path
    return f"{socket.gethostname()}:{path.resolve()}" if path is not None else ""


# The stack output `schedule list` reads a running run's jobs by (`listing`, read back by
# `run_jobs.read_listing`). A stack deployed before it was added has none.
LISTING_OUTPUT = "JobListing"
# An output's value is a string of at most 4,096 characters: assumed (the CloudFormation quotas
# page as stored here lists the number of outputs, 60, and an output name's size, 255
# characters, but no value size; 4,096 is its parameter value's and a custom resource
# response's). The listing is refused at compile time above it.
MAX_OUTPUT_VALUE = 4096


def listing(compiled) -> str:
    """The `LISTING_OUTPUT` value: JSON of the run's job prefix (the placeholder label in place
    of the run's), the trial count and each backend's listing places. InputError (exit 2) when
    it would not fit an output value (a sweep whose requests name very many queues)."""
    from orchestrator.errors import InputError

    plan = compiled.plan
    places = {backend: scheduled.part_of(backend).listing_places(requests)
              for backend, requests in sorted(_requests_by_backend(compiled).items())}
    text = json.dumps({"jobs": plan.identity.job_prefix, "trials": len(plan.trials), "places": places},
                      separators=(",", ":"))
    if len(text) > MAX_OUTPUT_VALUE:
        raise InputError(f"sweep {plan.sweep.sweep!r}: what `schedule list` needs to list a run's jobs (the queues "
                         f"of {sum(len(v) for v in places.values())} places) is {len(text):,} characters, above a "
                         f"stack output's {MAX_OUTPUT_VALUE:,}",
                         hint="send the sweep's trials to fewer queues, or keep it on the laptop path (`schedule run`)")
    return text


def machine_name(plan) -> str:
    """The state machine's name, fixed so that its role can name it (a Distributed Map starts
    child executions of its own machine) without a circular reference."""
    return stack_name(plan)[:MAX_MACHINE_NAME]


def job_prefix(plan) -> str:
    """The part of every run's job names that is the sweep's (the run's label follows)."""
    return plan.identity.job_prefix.split(PLACEHOLDER_LABEL)[0]


def _trust(service: str) -> dict:
    return {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole",
        "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}}]}


def _requests_by_backend(compiled) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for graph in compiled.graphs.values():
        for a in graph:
            found.setdefault(a.prepared.spec.backend, []).append(a.prepared.request)
    return found


def _s3_arn(bucket: str, key: str) -> dict:
    return {"Fn::Sub": f"arn:${{AWS::Partition}}:s3:::{bucket}/{key}"}


def machine_statements(compiled) -> list[dict]:
    """The state machine role's statements: each backend's own (`ScheduledJobs.statements`) for
    the jobs it may make, and the Distributed Map's: read its items, write its results, start,
    describe and stop its child executions (developer guide, "IAM policies for running
    Distributed Map states")."""
    plan = compiled.plan
    statements = []
    for backend, requests in sorted(_requests_by_backend(compiled).items()):
        statements += scheduled.part_of(backend).statements(requests, job_prefix(plan))
    name = machine_name(plan)
    statements += [
        {"Sid": "ReadItems", "Effect": "Allow", "Action": "s3:GetObject", "Resource": _s3_arn(*compiled.items_at)},
        {"Sid": "WriteResults", "Effect": "Allow", "Action": ["s3:PutObject", "s3:GetObject"],
         "Resource": _s3_arn(compiled.results_at[0], compiled.results_at[1] + "/*")},
        {"Sid": "StartChildren", "Effect": "Allow", "Action": "states:StartExecution",
         "Resource": scheduled.arn("states", f"stateMachine:{name}")},
        {"Sid": "FollowChildren", "Effect": "Allow", "Action": ["states:DescribeExecution", "states:StopExecution"],
         "Resource": scheduled.arn("states", f"execution:{name}/{MAP_LABEL}:*")},
    ]
    return statements


def flexible_window(schedule) -> dict:
    """Scheduler's FlexibleTimeWindow of the schedule's `flexible_window_minutes` (0: OFF)."""
    minutes = schedule.flexible_window_minutes
    return {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": minutes} if minutes else {"Mode": "OFF"}


def template(compiled) -> dict:
    """The schedule's template (see the module docstring)."""
    plan = compiled.plan
    schedule = plan.sweep.schedule
    sweep_tag = f"{plan.identity.name}-{plan.identity.digest}"
    bucket, key = compiled.definition_at
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
                    "Version": "2012-10-17", "Statement": machine_statements(compiled)}}]}},
            "StateMachine": {"Type": "AWS::StepFunctions::StateMachine", "Properties": {
                "StateMachineType": "STANDARD",
                "StateMachineName": machine_name(plan),
                # The definition's ARNs are written in the stack's partition.
                "DefinitionSubstitutions": {PARTITION[2:-1]: {"Ref": "AWS::Partition"}},
                # Uploaded by the deploy (`in_aws.deploy`): a definition travelling in the template
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
            LISTING_OUTPUT: {"Value": listing(compiled)},
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


def check_budget(compiled) -> None:
    """Refuse (SpecError at the budget line, exit 2) a schedule whose run could bill more than
    budget.max_total_cost_usd with every retry and failover compiled (`attempts.worst_usd`):
    the machine cannot weigh a retry against the sweep's spend as the laptop's runner does."""
    from orchestrator import sweep as sweeps
    from orchestrator.errors import Problem, SpecError

    plan = compiled.plan
    sweeps.check_budget(plan)  # the first attempts alone
    budget = plan.sweep.budget.max_total_cost_usd
    worst = compiled.worst_usd
    if budget is None or worst <= budget:
        return
    file, line, col = plan.sweep.locate("budget", "max_total_cost_usd")
    raise SpecError([Problem(file, line, col, "budget.max_total_cost_usd",
                             f"a cloud run of {len(plan.trials)} trials with every retry and failover the state machine "
                             f"holds (max_retries {plan.sweep.max_retries}) costs at most {worst:.2f} USD, above the "
                             f"budget of {budget:g} USD")],
                    hint=f"raise budget.max_total_cost_usd to {math.ceil(worst)}, or lower max_retries (the laptop "
                    "path, `schedule run`, refuses a retry over budget when it comes instead)")


# `schedule plan` lists this many trials, then counts the rest.
SHOWN_TRIALS = 50


def _shown(statement: dict) -> str:
    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    shown = [r if isinstance(r, str) else r["Fn::Sub"].split("${AWS::AccountId}:", 1)[-1].split(":::", 1)[-1]
             for r in resources]
    return f"{'/'.join(actions)} on {', '.join(shown)}"


def describe(compiled, now) -> list[str]:
    """`schedule plan`'s lines: the schedule, the state machine, the roles, the cost."""
    from orchestrator.schedule import statemachine

    plan = compiled.plan
    schedule = plan.sweep.schedule
    body = compiled.template
    props = props_of(body, "Schedule")
    trials = compiled.definition["States"]["Trials"]
    runs, truncated = runs_per_month(schedule, now)
    worst = compiled.worst_usd
    window = props["FlexibleTimeWindow"]
    polls = sorted({item["poll"] for item in compiled.items})
    lines = [
        f"stack {stack_name(plan)} ({len(json.dumps(body, separators=(',', ':')))} bytes of template; the state "
        f"machine's definition, {len(compiled.definition_text):,} bytes, kept at "
        f"s3://{'/'.join(compiled.definition_at)}; its {len(compiled.items):,} items, "
        f"{len(compiled.items_text):,} bytes, at s3://{'/'.join(compiled.items_at)})",
        f"schedule: {props['ScheduleExpression']} in {props['ScheduleExpressionTimezone']} (cron {schedule.cron!r}), "
        + (f"flexible window: a run starts up to {window['MaximumWindowInMinutes']} min after its fire time"
           if window["Mode"] == "FLEXIBLE" else "flexible window off (a run starts at its fire time)")
        + f", delivery retried {RETRY_MAX_ATTEMPTS} times within {RETRY_MAX_EVENT_AGE_S // 60} min, then to a "
        "dead-letter queue",
        f"state machine: {len(plan.trials):,} trial(s) ({compiled.jobs:,} possible jobs), each in a child execution of "
        f"a Distributed Map, at most {trials['MaxConcurrency']:,} at once"
        + (f" (the sweep asks {plan.sweep.concurrency:,}; a Distributed Map runs at most "
           f"{statemachine.MAX_CONCURRENCY:,})" if trials["MaxConcurrency"] < plan.sweep.concurrency else "")
        + f"; jobs {plan.identity.job_prefix.replace(PLACEHOLDER_LABEL, '<YYYYMMDDHHMM of the fire time>')}-<trial>"
        f"[-rN]; a capacity, spot or internal failure is resubmitted as -rN (max_retries "
        f"{plan.sweep.max_retries}), a capacity failure first to the next failover type; each job's state read "
        f"every {polls[0] if len(polls) == 1 else f'{polls[0]}-{polls[-1]}'} s; "
        "a job whose state cannot be read after its retries ends its trial (PollFailed), not the run",
    ]
    for t in plan.trials[:SHOWN_TRIALS]:
        graph = compiled.graphs[t.trial.trial_id]
        types = list(dict.fromkeys(a.instance_type for a in graph))
        lines.append(f"  {t.trial.trial_id} ({t.trial.spec.backend}) {' -> '.join(types)} x{t.trial.spec.instance.count}: "
                     f"{len(graph)} possible job(s), first at most {t.usd_max:.2f} USD")
    if len(plan.trials) > SHOWN_TRIALS:
        lines.append(f"  ... and {len(plan.trials) - SHOWN_TRIALS:,} more trial(s)")
    statements = props_of(body, "StateMachineRole")["Policies"][0]["PolicyDocument"]["Statement"]
    lines.append("roles: scheduler may states:StartExecution on this state machine and sqs:SendMessage to its queue; "
                 "the state machine may " + "; ".join(_shown(s) for s in statements))
    shown = f"{worst:.2f} USD" if math.isfinite(worst) else "an unknown amount (a price is missing)"
    monthly = f"{worst * runs:.2f} USD" if math.isfinite(worst) else "an unknown amount"
    lines.append(f"cost: at most {shown} a run (first jobs {plan.total_usd:.2f} USD, plus every retry and failover); "
                 f"{runs}{'+' if truncated else ''} runs in the next {MONTH_DAYS} days: at most {monthly} a month")
    return lines


def props_of(body: dict, resource: str) -> dict:
    return body["Resources"][resource]["Properties"]
