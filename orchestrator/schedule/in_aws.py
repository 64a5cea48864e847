"""Deploying, listing and removing schedules kept in AWS (`schedule deploy/list/remove`), as
against one kept by this machine (`laptop`); its stack's template is `in_aws_stack`.

Contract:
- `deploy(compiled, region, confirm=...)` first admits every job a run may make by quota
  (`sweep.admission.for_attempts`: exit 2 before any upload when one cannot pass its quota),
  computes the change set and asks `confirm(change)`; declined, the change set is deleted and
  nothing is uploaded. Then it uploads the source archive of every job a run may make (each
  trial's first, retry and failover attempts) to its content-addressed URI (the backend's own
  upload, `ScheduledJobs.upload`), once per distinct URI (`archives`), the Map's items and the state machine's definition beside
  them (`put_once`: the ItemReader's object, the template's DefinitionS3Location), then creates or updates the
  schedule's stack (`in_aws_stack.template`) through the infra deployer's change sets
  (`infra.deploy.plan_change_set/execute`): the change set is computed first and its changes are
  returned, so a re-deploy of a changed schedule says what changed. The budget is checked
  against a run's worst case before anything is uploaded (`in_aws_stack.check_budget`).
- `deployed(region)` lists the schedule stacks (`in_aws_stack.STACK_PREFIX`) with their next
  fire time and their state machine's latest execution (state, start) and its trials' jobs:
  an ended run's from its results, a running run's from its backends' job listings
  (`run_jobs`: each trial's latest job and its state, and how many trials have no job yet). A
  stack deployed before it recorded its listing output shows no trials of a running run, and
  says why (`note`); one stack's unreadable runs or jobs are its warning (`problem`,
  `jobs_problem`), the others still listed.
- `remove(stack, region)` deletes the stack and waits for it to go: the schedule, the state
  machine, its roles and queue.
- A schedule belongs to the sweep file that deployed it (the stack's `SweepFile` output, host
  and absolute path, `check_owner`): another file with the same sweep name is refused by
  `deploy` and by `remove FILE` (exit 2); `remove STACK` by name removes whichever it is. Training jobs are never stopped: the state machine may not
  stop them, and they are not resources of the stack.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.errors import BackendError, InputError
from orchestrator.schedule import in_aws_stack


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
    jobs: list[dict] = field(default_factory=list)  # {"trial", "job", "status", ...} of an ended or running run
    problem: str | None = None  # why its runs could not be read (its state machine deleted out of band)
    waiting: int | None = None  # a running run's trials with no job yet (None: not read)
    note: str | None = None  # why a running run's trials are not shown
    jobs_problem: str | None = None  # why a running run's jobs could not be read


def deploy(compiled, region: str, *, on_event: Callable = lambda event: None,
           sleep: Callable[[float], None] = time.sleep, clients: dict | None = None,
           confirm: Callable = lambda change: True, on_note: Callable[[str], None] = lambda line: None):
    """Admit by quota, plan the change set, ask `confirm(change)`, then upload the archives,
    items and definition and execute it; returns (change set plan, outputs), outputs None when
    `confirm` said no (the change set is then deleted and nothing is uploaded or changed).
    `compiled` is `compiled.compile_schedule`'s, built once by the caller; `on_note`: the quota
    lines (`sweep.admission.for_attempts`)."""
    from orchestrator import aws_contract
    from orchestrator.backends import scheduled
    from orchestrator.infra import deploy as infra_deploy
    from orchestrator.infra.cloudformation import make_client
    from orchestrator.infra.template import template_body

    plan = compiled.plan
    in_aws_stack.check_budget(compiled)
    aws_contract.check_body("cloudformation", "CreateChangeSet", {
        "StackName": in_aws_stack.stack_name(plan), "ChangeSetName": "orchestrator-schedule",
        "TemplateBody": template_body(compiled.template)},
        hint=f"the template names the roles' resources of the {len(plan.trials)} trials; schedule fewer trials per "
             "sweep (split it into several sweeps), or keep this one on the laptop path (`schedule run`)")
    clients = clients or {}
    for line in _admit(plan, compiled.graphs, region, clients):
        on_note(line)
    cfn = clients.get("cloudformation") or make_client("cloudformation", region)
    check_owner(cfn, plan, region, "deploy")  # before any upload: another file's schedule is never replaced
    change = infra_deploy.plan_change_set(cfn, in_aws_stack.stack_name(plan), {}, template=compiled.template,
                                          description=f"orchestrator schedule deploy {plan.sweep.sweep}", sleep=sleep)
    if not change.nothing_to_do and not confirm(change):
        infra_deploy.discard(cfn, change)
        return change, None
    service_clients = {k: v for k, v in clients.items() if k.endswith("_client")}
    parts: dict = {}
    for prepared in archives(compiled):
        backend = prepared.spec.backend
        if backend not in parts:
            parts[backend] = scheduled.part_of(backend)
        parts[backend].upload(prepared, region, service_clients)
    s3 = service_clients.get("s3_client") or make_client("s3", region)
    put_once(s3, compiled.items_at, compiled.items_text)
    put_once(s3, compiled.definition_at, compiled.definition_text)
    outputs = infra_deploy.execute(cfn, change, on_event=on_event, sleep=sleep, poll_s=2.0, main_stack=False)
    return change, outputs


def archives(compiled) -> list:
    """One prepared attempt per distinct source archive URI of every job a run may make (its
    first, each retry's and failover's): the URI is content-addressed, so trials sharing their
    sources are uploaded (and looked for) once, not once per trial."""
    found: dict = {}
    for graph in compiled.graphs.values():
        for attempt in graph:
            found.setdefault(attempt.prepared.source_uri, attempt.prepared)
    return list(found.values())


def _admit(plan, graphs: dict, region: str, clients: dict) -> list[str]:
    """The quota admission of every job a run may make (`sweep.admission.for_attempts`, the one
    admission of every path): InputError (exit 2) before anything is uploaded when one cannot
    pass its quota; quotas the endpoint refuses to give are said and skipped, as submit's."""
    from botocore.exceptions import BotoCoreError, ClientError

    from orchestrator import aws, quotas
    from orchestrator.sweep import admission

    try:
        found = clients.get("quotas") or quotas.clients(region, attempts=1)
        return admission.for_attempts(plan, graphs, found)
    except (BotoCoreError, ClientError) as exc:
        return [f"quotas not read ({aws.describe(exc) or f'{type(exc).__name__}: {exc}'}); deploying without "
                "the quota check"]


def check_owner(cfn, plan, region: str, action: str) -> None:
    """InputError (exit 2) when the schedule stack of `plan`'s sweep name exists and records
    another sweep file as its owner (`in_aws_stack.OWNER_OUTPUT`): `deploy` would replace that
    file's schedule, `remove` would delete it. A stack that records none (deployed before
    owners were recorded) is taken as this file's."""
    from orchestrator.infra.cloudformation import describe_stack

    name = in_aws_stack.stack_name(plan)
    stack = describe_stack(cfn, name)
    if stack is None:
        return
    recorded = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs") or []}.get(in_aws_stack.OWNER_OUTPUT)
    mine = in_aws_stack.owner(plan)
    if not recorded or recorded == mine:
        return
    sweep = plan.sweep.sweep
    path = plan.sweep.path or "this sweep file"
    if action == "deploy":
        raise InputError(f"stack {name} in {region} holds the schedule of sweep {sweep!r} deployed from {recorded}; "
                         f"{path} has the same sweep name, and deploying it would replace that schedule: nothing "
                         "was deployed",
                         hint=f"give this sweep its own name (e.g. `sweep: {sweep}-2` in {path}) to deploy it beside "
                              f"the other, or remove the other first: `python -m orchestrator schedule remove {name} "
                              f"--region {region}`")
    raise InputError(f"stack {name} in {region} holds the schedule deployed from {recorded}, not from {path}; "
                     "nothing was removed",
                     hint=f"remove it with the file that deployed it, or by its name: `python -m orchestrator "
                          f"schedule remove {name} --region {region}`")


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


def _stacks(cfn, region: str) -> list[dict]:
    """The schedule stacks (by their name's prefix) of DescribeStacks's pages, bounded as every
    paginated read; an AWS error as our error (`infra.cloudformation.translate`)."""
    from orchestrator import aws
    from orchestrator.infra.cloudformation import translate

    stacks = []
    try:
        for page in aws.bounded_pages(cfn.get_paginator("describe_stacks").paginate(), "DescribeStacks"):
            stacks += [s for s in page["Stacks"] if s["StackName"].startswith(in_aws_stack.STACK_PREFIX)]
    except aws.EndlessPages as exc:
        raise BackendError(str(exc), hint="ask again later; an endpoint that is not CloudFormation answers so "
                                          "(check AWS_ENDPOINT_URL)") from None
    except Exception as exc:  # noqa: BLE001 - translated; a bug is raised again by translate
        raise translate(exc, f"listing the schedule stacks in {region}", cfn) from None
    return stacks


def deployed(region: str, *, clients: dict | None = None) -> list[Deployed]:
    """The schedule stacks of `region`, with their latest run (see the module docstring)."""
    from datetime import datetime, timezone

    from botocore.exceptions import BotoCoreError, ClientError

    from orchestrator.infra.cloudformation import make_client
    from orchestrator.schedule.cron import next_fires
    from orchestrator.spec import ScheduleSpec

    clients = clients or {}
    cfn = clients.get("cloudformation") or make_client("cloudformation", region)
    sfn = clients.get("stepfunctions") or make_client("stepfunctions", region)
    found = []
    for stack in sorted(_stacks(cfn, region), key=lambda s: s["StackName"]):
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        item = Deployed(stack["StackName"], stack["StackStatus"], stack.get("Description", ""),
                        outputs.get("StateMachineArn"))
        if outputs.get("Cron"):
            kept = ScheduleSpec(cron=outputs["Cron"], timezone=outputs.get("Timezone") or "UTC")
            item.next_fire = next_fires(kept, datetime.now(timezone.utc), 1)[0].strftime("%Y-%m-%d %H:%M UTC")
        if item.state_machine:
            try:
                latest = _latest_run(sfn, item, lambda: clients.get("s3") or make_client("s3", region))
            except (BotoCoreError, ClientError) as exc:  # one stack's runs unreadable: the others still listed
                item.problem = _runs_problem(exc, item)
                latest = None
            if latest is not None and latest["status"] == "RUNNING":
                _running_trials(sfn, item, latest, outputs,
                                lambda service: clients.get(service) or make_client(service, region))
        found.append(item)
    return found


def _running_trials(sfn, item: Deployed, latest: dict, outputs: dict, client: Callable) -> None:
    """A running run's trials (`run_jobs.trials`) into `item`; a stack without the listing
    output gets a note, an error of the calls a warning (never the listing's end)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from orchestrator import aws
    from orchestrator.schedule import run_jobs, statemachine

    listing = run_jobs.read_listing(outputs)
    if listing is None:
        item.note = (f"its running run's trials are not shown: the stack was deployed before it recorded "
                     f"where its jobs are listed (no {in_aws_stack.LISTING_OUTPUT} output); `python -m orchestrator "
                     "schedule deploy` of its sweep file records it (the schedule is kept)")
        return
    try:
        described = sfn.describe_execution(executionArn=latest["executionArn"])
        label = statemachine.run_label(described.get("input"), latest["startDate"])
        item.jobs, item.waiting = run_jobs.trials(listing, label, latest["startDate"], client)
    except (BotoCoreError, ClientError, aws.EndlessPages) as exc:
        item.jobs, item.waiting = [], None
        said = str(exc) if isinstance(exc, aws.EndlessPages) else _said(exc)
        item.jobs_problem = f"its running run's jobs could not be read: {said}"


def _latest_run(sfn, item: Deployed, s3: Callable) -> dict | None:
    """The latest execution (ListExecutions' summary, None when none), its state in `item` and,
    when it ended, its trials' results."""
    runs = sfn.list_executions(stateMachineArn=item.state_machine, maxResults=1).get("executions", [])
    if not runs:
        return None
    latest = runs[0]
    item.last_run, item.last_start = latest["status"], latest["startDate"].isoformat()
    if latest["status"] != "RUNNING":
        described = sfn.describe_execution(executionArn=latest["executionArn"])
        try:
            output = json.loads(described.get("output") or "{}")
        except ValueError:
            output = {}
        trials = output.get("trials") if isinstance(output, dict) else None
        if isinstance(trials, dict) and "ResultWriterDetails" in trials:
            trials = written_results(s3(), trials["ResultWriterDetails"])
        item.jobs = [t for t in trials if isinstance(t, dict)] if isinstance(trials, list) else []
    return latest


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


def _runs_problem(exc: Exception, item: Deployed) -> str:
    """Why a stack's runs could not be read, in words (no traceback for one damaged stack)."""
    from orchestrator import aws_errors

    if aws_errors.is_not_found(exc) or aws_errors.code_of(exc) == "StateMachineDoesNotExist":
        return (f"its state machine {item.state_machine} no longer exists (deleted outside the stack); "
                f"`python -m orchestrator schedule remove {item.stack}` removes the rest")
    return f"its runs could not be read: {_said(exc)}"


def _said(exc: Exception) -> str:
    """An AWS error in one line: its code and the service's message, or botocore's words."""
    from orchestrator import aws, aws_errors
    from orchestrator.errors import service_message

    failure = aws_errors.classify(exc)
    if failure is not None and failure.kind == "credentials":
        return (f"no usable AWS credentials ({service_message(str(exc))}); configure them (aws configure, AWS_PROFILE "
                "or environment variables), then list again")
    return aws.describe(exc) or (f"{aws_errors.code_of(exc)}: {service_message(aws_errors.message_of(exc))}"
                                 if aws_errors.code_of(exc) else service_message(str(exc)))


def remove(stack: str, region: str, *, clients: dict | None = None, sleep: Callable[[float], None] = time.sleep,
           timeout_s: float = 900.0, clock: Callable[[], float] = time.monotonic,
           confirm: Callable[[], bool] = lambda: True, plan=None) -> bool:
    """Delete a schedule stack, once it is found and `confirm()` agrees, and wait until it is
    gone (BackendError if it fails to). False when `confirm` said no (nothing deleted).
    `plan`: removed by its sweep file, which must own the stack (`check_owner`)."""
    from orchestrator.infra.cloudformation import describe_stack, make_client, translate

    if not stack.startswith(in_aws_stack.STACK_PREFIX):
        raise InputError(f"{stack!r} is not a schedule stack (its name starts with {in_aws_stack.STACK_PREFIX!r})",
                         hint="`schedule list` shows them")
    cfn = (clients or {}).get("cloudformation") or make_client("cloudformation", region)
    existing = describe_stack(cfn, stack)
    if existing is None:
        raise InputError(f"no schedule stack {stack!r} in {region}", hint="`schedule list` shows them")
    if plan is not None:
        check_owner(cfn, plan, region, "remove")
    if not confirm():
        return False
    try:
        cfn.delete_stack(StackName=existing["StackId"])
    except Exception as exc:  # noqa: BLE001 - translated
        raise translate(exc, f"deleting stack {stack}", cfn, stack) from None
    deadline = clock() + timeout_s
    while True:
        current = describe_stack(cfn, existing["StackId"])
        status = None if current is None else current["StackStatus"]
        if status in (None, "DELETE_COMPLETE"):
            return True
        if status == "DELETE_FAILED":
            raise BackendError(f"stack {stack} could not be deleted: {current.get('StackStatusReason')}",
                               hint=f"look at its events: aws cloudformation describe-stack-events --stack-name {stack}")
        if clock() >= deadline:
            raise BackendError(f"stack {stack} is still {status} after {timeout_s / 60:.0f} minutes",
                               hint="CloudFormation carries on; run `schedule list` later")
        sleep(2.0)
