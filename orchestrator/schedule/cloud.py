"""Deploying, listing and removing schedules kept in the cloud (`schedule deploy/list/remove`).

Contract:
- `deploy(compiled, region)` uploads the source archive of every job a run may make (each
  trial's first, retry and failover attempts) to its content-addressed URI (the backend's own
  upload, `ScheduledJobs.upload`), the Map's items and the state machine's definition beside
  them (`put_once`: the ItemReader's object, the template's DefinitionS3Location), then creates or updates the
  schedule's stack (`cloud_stack.template`) through the infra deployer's change sets
  (`infra.deploy.plan_change_set/execute`): the change set is computed first and its changes are
  returned, so a re-deploy of a changed schedule says what changed. The budget is checked
  against a run's worst case before anything is uploaded (`cloud_stack.check_budget`).
- `deployed(region)` lists the schedule stacks (`cloud_stack.STACK_PREFIX`) with their next
  fire time and their state machine's latest execution (state, start) and its trials' jobs when it has ended.
- `remove(stack, region)` deletes the stack and waits for it to go: the schedule, the state
  machine, its roles and queue. Training jobs are never stopped: the state machine may not
  stop them, and they are not resources of the stack.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.errors import BackendError, InputError
from orchestrator.schedule import cloud_stack


@dataclass
class Deployed:
    """One schedule stack and what its state machine did last."""

    stack: str
    status: str
    description: str
    state_machine: str | None = None
    next_fire: str | None = None  # UTC, from the cron and time zone the stack keeps
    last_run: str | None = None  # the latest execution's status
    last_start: str | None = None
    jobs: list[dict] = field(default_factory=list)  # {"trial", "job", "status"} of an ended run


def deploy(compiled, region: str, *, on_event: Callable = lambda event: None,
           sleep: Callable[[float], None] = time.sleep, clients: dict | None = None):
    """Upload the archives, items and definition and deploy the stack; returns (change set
    plan, outputs). `compiled` is `compiled.compile_schedule`'s, built once by the caller."""
    from orchestrator import aws_contract
    from orchestrator.backends import scheduled
    from orchestrator.infra import deploy as infra_deploy
    from orchestrator.infra.cloudformation import make_client
    from orchestrator.infra.template import template_body

    plan = compiled.plan
    cloud_stack.check_budget(compiled)
    aws_contract.check_body("cloudformation", "CreateChangeSet", {
        "StackName": cloud_stack.stack_name(plan), "ChangeSetName": "orchestrator-schedule",
        "TemplateBody": template_body(compiled.template)},
        hint=f"the template names the roles' resources of the {len(plan.trials)} trials; schedule fewer trials per "
             "sweep (split it into several sweeps), or keep this one on the laptop path (`schedule run`)")
    clients = clients or {}
    service_clients = {k: v for k, v in clients.items() if k.endswith("_client")}
    parts: dict = {}
    for graph in compiled.graphs.values():
        for attempt in graph:  # every job a run may make: its first, each retry's and failover's
            backend = attempt.prepared.spec.backend
            if backend not in parts:
                parts[backend] = scheduled.part_of(backend)
            parts[backend].upload(attempt.prepared, region, service_clients)
    s3 = service_clients.get("s3_client") or make_client("s3", region)
    put_once(s3, compiled.items_at, compiled.items_text)
    put_once(s3, compiled.definition_at, compiled.definition_text)
    cfn = clients.get("cloudformation") or make_client("cloudformation", region)
    change = infra_deploy.plan_change_set(cfn, cloud_stack.stack_name(plan), {}, template=compiled.template,
                                          description=f"orchestrator schedule deploy {plan.sweep.sweep}", sleep=sleep)
    outputs = infra_deploy.execute(cfn, change, on_event=on_event, sleep=sleep, poll_s=2.0, main_stack=False)
    return change, outputs


def put_once(s3, where: tuple[str, str], text: str) -> str:
    """Put a content-addressed object (an object of that key always holds these bytes; a
    conditional put makes a second deploy's upload harmless). Returns its s3:// URI."""
    from botocore.exceptions import ClientError

    bucket, key = where
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=text.encode(), IfNoneMatch="*", ContentType="application/json")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("PreconditionFailed", "ConditionalRequestConflict"):
            raise BackendError(f"uploading s3://{bucket}/{key}: {exc}",
                               hint="check the bucket and your s3:PutObject permission on it") from None
    return f"s3://{bucket}/{key}"


def _stacks(cfn) -> list[dict]:
    stacks = []
    for page in cfn.get_paginator("describe_stacks").paginate():
        stacks += [s for s in page["Stacks"] if s["StackName"].startswith(cloud_stack.STACK_PREFIX)]
    return stacks


def deployed(region: str, *, clients: dict | None = None) -> list[Deployed]:
    """The schedule stacks of `region`, with their latest run (see the module docstring)."""
    from datetime import datetime, timezone

    from orchestrator.infra.cloudformation import make_client
    from orchestrator.schedule.cron import next_fires
    from orchestrator.spec import ScheduleSpec

    clients = clients or {}
    cfn = clients.get("cloudformation") or make_client("cloudformation", region)
    sfn = clients.get("stepfunctions") or make_client("stepfunctions", region)
    found = []
    for stack in sorted(_stacks(cfn), key=lambda s: s["StackName"]):
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        item = Deployed(stack["StackName"], stack["StackStatus"], stack.get("Description", ""),
                        outputs.get("StateMachineArn"))
        if outputs.get("Cron"):
            kept = ScheduleSpec(cron=outputs["Cron"], timezone=outputs.get("Timezone") or "UTC")
            item.next_fire = next_fires(kept, datetime.now(timezone.utc), 1)[0].strftime("%Y-%m-%d %H:%M UTC")
        if item.state_machine:
            runs = sfn.list_executions(stateMachineArn=item.state_machine, maxResults=1).get("executions", [])
            if runs:
                latest = runs[0]
                item.last_run, item.last_start = latest["status"], latest["startDate"].isoformat()
                if latest["status"] != "RUNNING":
                    described = sfn.describe_execution(executionArn=latest["executionArn"])
                    trials = json.loads(described.get("output") or "{}").get("trials", [])
                    if isinstance(trials, dict) and "ResultWriterDetails" in trials:
                        s3 = clients.get("s3") or make_client("s3", region)
                        trials = written_results(s3, trials["ResultWriterDetails"])
                    item.jobs = list(trials)
        found.append(item)
    return found


def written_results(s3, details: dict) -> list[dict]:
    """The trials' results a Distributed Map's ResultWriter wrote: its manifest names the result
    files, each a JSON array of child executions whose `Output` is the trial's result (developer
    guide, "ResultWriter (Map)": manifest.json, SUCCEEDED_n.json, FAILED_n.json)."""
    manifest = json.loads(s3.get_object(Bucket=details["Bucket"], Key=details["Key"])["Body"].read())
    found = []
    for kind in ("SUCCEEDED", "FAILED", "PENDING"):
        for entry in manifest.get("ResultFiles", {}).get(kind, []):
            body = s3.get_object(Bucket=manifest.get("DestinationBucket", details["Bucket"]), Key=entry["Key"])
            for child in json.loads(body["Body"].read()):
                output = child.get("Output")
                found.append(json.loads(output) if output else {"status": child.get("Status", kind),
                                                                 "error": child.get("Error")})
    return found


def remove(stack: str, region: str, *, clients: dict | None = None, sleep: Callable[[float], None] = time.sleep,
           timeout_s: float = 900.0, clock: Callable[[], float] = time.monotonic) -> None:
    """Delete a schedule stack and wait until it is gone (BackendError if it fails to)."""
    from orchestrator.infra.cloudformation import describe_stack, make_client, translate

    if not stack.startswith(cloud_stack.STACK_PREFIX):
        raise InputError(f"{stack!r} is not a schedule stack (its name starts with {cloud_stack.STACK_PREFIX!r})",
                         hint="`schedule list` shows them")
    cfn = (clients or {}).get("cloudformation") or make_client("cloudformation", region)
    existing = describe_stack(cfn, stack)
    if existing is None:
        raise InputError(f"no schedule stack {stack!r} in {region}", hint="`schedule list` shows them")
    try:
        cfn.delete_stack(StackName=existing["StackId"])
    except Exception as exc:  # noqa: BLE001 - translated
        raise translate(exc, f"deleting stack {stack}", cfn, stack) from None
    deadline = clock() + timeout_s
    while True:
        current = describe_stack(cfn, existing["StackId"])
        status = None if current is None else current["StackStatus"]
        if status in (None, "DELETE_COMPLETE"):
            return
        if status == "DELETE_FAILED":
            raise BackendError(f"stack {stack} could not be deleted: {current.get('StackStatusReason')}",
                               hint=f"look at its events: aws cloudformation describe-stack-events --stack-name {stack}")
        if clock() >= deadline:
            raise BackendError(f"stack {stack} is still {status} after {timeout_s / 60:.0f} minutes",
                               hint="CloudFormation carries on; run `schedule list` later")
        sleep(2.0)
