"""Deploying the stack: a change set computed and shown first, then executed and followed
through its events until the stack settles, with every failure named and explained."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator import aws_contract
from orchestrator.errors import BackendError, InputError, OrchestratorError
from orchestrator.infra.cloudformation import (
    NO_CHANGES,
    describe_stack,
    is_missing_stack,
    is_no_changes,
    region_flag,
    region_of,
    translate,
)
from orchestrator.infra.outputs import StackOutputs, outputs_of, read_outputs
from orchestrator.infra.template import (
    RESTORE_TEMPLATE,
    TEMPLATE,
    check_stack_name,
    load_template,
    template_body,
)

# A stack of roles without fixed names needs CAPABILITY_IAM (named ones would need NAMED_IAM).
CAPABILITIES = ["CAPABILITY_IAM"]
DESCRIPTION = "orchestrator infra deploy"

SUCCESS_STATES = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "IMPORT_COMPLETE"})
FAILURE_STATES = frozenset({
    "CREATE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "UPDATE_FAILED",
    "UPDATE_ROLLBACK_COMPLETE", "UPDATE_ROLLBACK_FAILED", "DELETE_COMPLETE", "DELETE_FAILED",
    "IMPORT_ROLLBACK_COMPLETE", "IMPORT_ROLLBACK_FAILED",
})
# Statuses from which a stack can take an UPDATE change set.
UPDATABLE_STATES = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE",
                              "IMPORT_ROLLBACK_COMPLETE"})
# Reasons that are consequences of another resource's failure, not causes.
_CANCELLED = ("Resource creation cancelled", "Resource update cancelled")


@dataclass(frozen=True)
class Change:
    """One resource change of a change set."""

    action: str  # Add | Modify | Remove | Import | Dynamic
    logical_id: str
    resource_type: str
    replacement: str | None = None  # True | False | Conditional (Modify only)
    physical_id: str | None = None


@dataclass(frozen=True)
class ChangeSetPlan:
    """A computed change set: what executing it would do."""

    stack_name: str
    region: str | None
    kind: str  # CREATE | UPDATE
    change_set_name: str
    change_set_id: str | None
    stack_id: str | None
    parameters: dict[str, str]
    changes: tuple[Change, ...] = ()
    nothing_to_do: bool = False


@dataclass(frozen=True)
class StackEvent:
    """One CloudFormation stack event, as progress to show."""

    timestamp: datetime | None
    logical_id: str
    resource_type: str
    status: str
    reason: str | None = None



def stack_status(cfn, stack_name: str) -> str | None:
    """The stack's status, or None when no stack of that name exists."""
    stack = describe_stack(cfn, check_stack_name(stack_name))
    return None if stack is None else stack["StackStatus"]


def plan_change_set(cfn, stack_name: str, parameters: Mapping[str, str], *, template_path: Path = TEMPLATE,
            template: Mapping | None = None, description: str = DESCRIPTION,
            sleep: Callable[[float], None] = time.sleep, poll_s: float = 2.0, timeout_s: float = 600.0,
            clock: Callable[[], float] = time.monotonic) -> ChangeSetPlan:
    """Create a change set for `stack_name` and wait until CloudFormation has computed it.

    An existing stack gets an UPDATE change set in which the parameters not given keep their
    previous values; a new one (or one left in REVIEW_IN_PROGRESS) gets a CREATE change set.
    `template` (a template built in code, e.g. a cloud schedule's) replaces `template_path`.
    When CloudFormation finds nothing to change, the change set is deleted and the plan comes
    back with `nothing_to_do`.
    """
    check_stack_name(stack_name)
    template = load_template(template_path) if template is None else template
    body = template_body(template)
    # Change set names are unique per stack; two deploys in one second must not collide.
    name = f"orchestrator-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
    # What CloudFormation would refuse (the body's size above all) stops here, before any call.
    aws_contract.check_body("cloudformation", "CreateChangeSet", {
        "StackName": stack_name, "ChangeSetName": name, "TemplateBody": body, "Capabilities": CAPABILITIES,
        "Parameters": [{"ParameterKey": key, "ParameterValue": str(value)} for key, value in parameters.items()],
        "Description": description}, hint=f"shorten the template or the --param values; {RESTORE_TEMPLATE}")
    existing = describe_stack(cfn, stack_name)
    status = existing["StackStatus"] if existing else None
    if status is None or status == "REVIEW_IN_PROGRESS":
        kind = "CREATE"
    elif status in UPDATABLE_STATES:
        kind = "UPDATE"
    elif status == "ROLLBACK_COMPLETE":
        raise BackendError(f"stack {stack_name} is in ROLLBACK_COMPLETE: its first deploy failed and it cannot be "
                           "updated",
                           hint=f"delete it, then deploy again: aws cloudformation delete-stack --stack-name "
                                f"{stack_name}{region_flag(cfn)}")
    elif status.endswith("_IN_PROGRESS"):
        raise BackendError(f"stack {stack_name} is busy ({status})",
                           hint="wait until the running operation ends, then deploy again")
    else:
        raise BackendError(f"stack {stack_name} is in {status} and cannot take a change set",
                           hint=f"look at its events: aws cloudformation describe-stack-events --stack-name "
                                f"{stack_name}{region_flag(cfn)}")
    previous = {p["ParameterKey"] for p in (existing or {}).get("Parameters", [])} if kind == "UPDATE" else set()
    cfn_params = []
    for key in template.get("Parameters") or {}:
        if key in parameters:
            cfn_params.append({"ParameterKey": key, "ParameterValue": str(parameters[key])})
        elif key in previous:
            cfn_params.append({"ParameterKey": key, "UsePreviousValue": True})
    try:
        created = cfn.create_change_set(
            StackName=stack_name, ChangeSetName=name, ChangeSetType=kind, TemplateBody=body,
            Parameters=cfn_params, Capabilities=CAPABILITIES,
            Description=description,
        )
    except Exception as exc:  # noqa: BLE001 - translated below, re-raised if not AWS's
        if is_no_changes(exc):
            return ChangeSetPlan(stack_name, region_of(cfn), kind, name, None, None, dict(parameters), nothing_to_do=True)
        raise translate(exc, f"creating a change set for stack {stack_name}", cfn, stack_name) from None
    plan = ChangeSetPlan(stack_name, region_of(cfn), kind, name, created.get("Id"), created.get("StackId"),
                         dict(parameters))
    described = _wait_change_set(cfn, plan, sleep, poll_s, timeout_s, clock)
    if described["Status"] == "FAILED":
        reason = described.get("StatusReason") or "no reason given"
        if any(marker in reason for marker in NO_CHANGES):
            discard(cfn, plan, keep_stack=True)
            return ChangeSetPlan(stack_name, plan.region, kind, name, None, plan.stack_id, dict(parameters),
                                 nothing_to_do=True)
        discard(cfn, plan)
        raise InputError(f"CloudFormation could not compute the change set for stack {stack_name}: {reason}",
                         hint="fix the template or the --param values and deploy again")
    # A computed change set without resource changes still updates outputs or parameters;
    # "nothing to do" is CloudFormation's own verdict above, not an empty list.
    changes = tuple(_changes(cfn, plan, described))
    return ChangeSetPlan(stack_name, plan.region, kind, name, plan.change_set_id, plan.stack_id,
                         dict(parameters), changes)


def discard(cfn, plan: ChangeSetPlan, keep_stack: bool = False) -> None:
    """Delete a change set that will not run; for a CREATE one, also the empty stack
    (REVIEW_IN_PROGRESS) that CloudFormation made to hold it, unless keep_stack. The stack is
    addressed by the change set's StackId when known, so only the one it made is deleted."""
    target = plan.stack_id or plan.stack_name
    try:
        cfn.delete_change_set(StackName=plan.stack_name, ChangeSetName=plan.change_set_id or plan.change_set_name)
        if plan.kind == "CREATE" and not keep_stack and (describe_stack(cfn, target) or {}).get("StackStatus") == "REVIEW_IN_PROGRESS":
            cfn.delete_stack(StackName=target)
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, f"deleting change set {plan.change_set_name} of stack {plan.stack_name}", cfn,
                         plan.stack_name) from None


def execute(cfn, plan: ChangeSetPlan, *, on_event: Callable[[StackEvent], None] = lambda event: None,
            on_wait: Callable[[str, float], None] = lambda status, elapsed_s: None,
            sleep: Callable[[float], None] = time.sleep, poll_s: float = 5.0, timeout_s: float = 3600.0,
            review_timeout_s: float = 60.0, heartbeat_s: float = 30.0,
            clock: Callable[[], float] = time.monotonic, main_stack: bool = True) -> StackOutputs | dict[str, str]:
    """Execute a prepared change set and wait for the stack to settle, reporting new events.

    The stack is followed by the StackId the change set came with (by name only when
    CloudFormation gave none). Each new stack event goes to `on_event`, oldest first; when a
    poll brings none, `on_wait(status, seconds since the execute)` is called, at the first
    such poll and then at most every `heartbeat_s`, so a caller can show the wait.

    Returns the stack's outputs (`StackOutputs`; for a stack other than the main one,
    `main_stack=False`, its outputs as a dict of key -> value). Raises BackendError naming every failed resource and its
    ResourceStatusReason when the stack rolls back or fails; when ExecuteChangeSet itself
    fails (after deleting a CREATE change set and its empty stack, so a retry starts clean);
    when the stack is still REVIEW_IN_PROGRESS after review_timeout_s (the change set did not
    run); and when it is still in progress after timeout_s (the deployment goes on in
    CloudFormation).
    """
    if plan.nothing_to_do:
        return read_outputs(cfn, plan.stack_name) if main_stack else _raw_outputs(describe_stack(cfn, plan.stack_name))
    target = plan.stack_id or plan.stack_name
    seen = {e["EventId"] for e in _events(cfn, target, stop_at=set(), limit_pages=1)}
    try:
        cfn.execute_change_set(StackName=plan.stack_name, ChangeSetName=plan.change_set_id or plan.change_set_name)
    except Exception as exc:  # noqa: BLE001
        error = translate(exc, f"executing change set {plan.change_set_name} on stack {plan.stack_name}", cfn,
                           plan.stack_name, execution=True)
        raise _after_failed_execute(cfn, plan, error) from None
    started = clock()
    deadline = started + timeout_s
    failed: list[StackEvent] = []
    last_wait_report: float | None = None
    while True:
        new = _events(cfn, target, stop_at=seen)
        for raw in reversed(new):
            seen.add(raw["EventId"])
            event = _event(raw)
            if event.status.endswith("_FAILED") and event.resource_type != "AWS::CloudFormation::Stack":
                failed.append(event)
            on_event(event)
        stack = describe_stack(cfn, target)
        status = stack["StackStatus"] if stack is not None else "DELETE_COMPLETE"
        if status in SUCCESS_STATES:
            return outputs_of(cfn, stack, plan.stack_name) if main_stack else _raw_outputs(stack)
        if status in FAILURE_STATES:
            raise _deploy_failed(cfn, plan, status, (stack or {}).get("StackStatusReason"), failed)
        now = clock()
        if status == "REVIEW_IN_PROGRESS" and now - started >= review_timeout_s:
            raise BackendError(
                f"change set {plan.change_set_name} was not executed: stack {plan.stack_name} is still "
                f"REVIEW_IN_PROGRESS {now - started:.0f} s after ExecuteChangeSet",
                hint="delete the change set and the empty stack, then deploy again: aws cloudformation delete-stack "
                     f"--stack-name {target}{region_flag(cfn)}")
        if now >= deadline:
            raise BackendError(
                f"stack {plan.stack_name} is still {status} after {timeout_s / 60:.0f} minutes",
                hint="CloudFormation carries on without us; watch it with aws cloudformation describe-stack-events "
                     f"--stack-name {plan.stack_name}{region_flag(cfn)}, then run `python -m orchestrator infra outputs`")
        if new:
            last_wait_report = now
        elif last_wait_report is None or now - last_wait_report >= heartbeat_s:
            last_wait_report = now
            on_wait(status, now - started)
        sleep(poll_s)


def _raw_outputs(stack: Mapping | None) -> dict[str, str]:
    return {o["OutputKey"]: o["OutputValue"] for o in (stack or {}).get("Outputs", [])}


def _after_failed_execute(cfn, plan: ChangeSetPlan, error: Exception) -> Exception:
    """`error`, after deleting a CREATE change set that could not be executed and the empty
    stack that holds it, its hint saying what was cleaned up (or what is left to clean)."""
    if plan.kind != "CREATE" or not isinstance(error, OrchestratorError):
        return error
    target = plan.stack_id or plan.stack_name
    try:
        if (describe_stack(cfn, target) or {}).get("StackStatus") != "REVIEW_IN_PROGRESS":
            return error  # the stack moved on: something did run; leave it to the events
        discard(cfn, plan)
    except OrchestratorError as cleanup:
        left = (f"the change set and the empty stack it made are left behind ({cleanup.message}); delete them with "
                f"aws cloudformation delete-stack --stack-name {target}{region_flag(cfn)}, then deploy again")
        return type(error)(error.message, hint="; ".join(h for h in (error.hint, left) if h))
    done = "nothing was created: the change set and its empty stack were deleted; fix the cause and deploy again"
    # The generic "look at the stack's events" hint points at a stack that is gone now.
    kept = error.hint if error.hint and "describe-stack-events" not in error.hint else None
    return type(error)(error.message, hint="; ".join(h for h in (done, kept) if h))


def _deploy_failed(cfn, plan: ChangeSetPlan, status: str, reason: str | None, failed: list[StackEvent]) -> BackendError:
    causes = [e for e in failed if not (e.reason or "").startswith(_CANCELLED)]
    consequences = [e for e in failed if e not in causes]
    lines = [f"deploying stack {plan.stack_name} failed: {status}" + (f" ({reason})" if reason else "")]
    for event in causes + consequences:
        lines.append(f"  {event.logical_id} ({event.resource_type}) {event.status}: {event.reason or 'no reason given'}")
    if status == "ROLLBACK_COMPLETE" or (plan.kind == "CREATE" and "ROLLBACK" in status):
        hint = ("the first deploy rolled back; delete the stack before deploying again: aws cloudformation "
                f"delete-stack --stack-name {plan.stack_name}{region_flag(cfn)}")
    elif status == "UPDATE_ROLLBACK_COMPLETE":
        hint = "the stack is back at its previous version; fix the cause above and deploy again"
    else:
        hint = (f"look at the events: aws cloudformation describe-stack-events --stack-name "
                f"{plan.stack_name}{region_flag(cfn)}")
    return BackendError("\n".join(lines), hint=hint)


def _wait_change_set(cfn, plan: ChangeSetPlan, sleep, poll_s: float, timeout_s: float, clock) -> dict:
    deadline = clock() + timeout_s
    while True:
        try:
            described = cfn.describe_change_set(StackName=plan.stack_name,
                                                ChangeSetName=plan.change_set_id or plan.change_set_name)
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, f"reading change set {plan.change_set_name}", cfn, plan.stack_name) from None
        if described["Status"] in ("CREATE_COMPLETE", "FAILED"):
            return described
        if clock() >= deadline:
            raise BackendError(f"change set {plan.change_set_name} is still {described['Status']} after "
                               f"{timeout_s:.0f} s", hint="try again later; CloudFormation may be throttling")
        sleep(poll_s)


def _changes(cfn, plan: ChangeSetPlan, first_page: dict) -> Iterable[Change]:
    page = first_page
    while True:
        for item in page.get("Changes", []):
            rc = item.get("ResourceChange") or {}
            yield Change(
                action=rc.get("Action", "?"),
                logical_id=rc.get("LogicalResourceId", "?"),
                resource_type=rc.get("ResourceType", "?"),
                replacement=rc.get("Replacement") if rc.get("Action") == "Modify" else None,
                physical_id=rc.get("PhysicalResourceId"),
            )
        token = page.get("NextToken")
        if not token:
            return
        try:
            page = cfn.describe_change_set(StackName=plan.stack_name,
                                           ChangeSetName=plan.change_set_id or plan.change_set_name, NextToken=token)
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, f"reading change set {plan.change_set_name}", cfn, plan.stack_name) from None


def _events(cfn, stack_name: str, stop_at: set, limit_pages: int = 100) -> list[dict]:
    """Stack events newer than any id in stop_at, newest first (CloudFormation's order)."""
    collected: list[dict] = []
    kwargs: dict[str, Any] = {"StackName": stack_name}
    for _ in range(limit_pages):
        try:
            page = cfn.describe_stack_events(**kwargs)
        except Exception as exc:  # noqa: BLE001
            if is_missing_stack(exc):
                return collected
            raise translate(exc, f"reading events of stack {stack_name}", cfn, stack_name) from None
        for raw in page.get("StackEvents", []):
            if raw["EventId"] in stop_at:
                return collected
            collected.append(raw)
        if not page.get("NextToken"):
            break
        kwargs["NextToken"] = page["NextToken"]
    return collected


def _event(raw: Mapping) -> StackEvent:
    return StackEvent(
        timestamp=raw.get("Timestamp"),
        logical_id=raw.get("LogicalResourceId", "?"),
        resource_type=raw.get("ResourceType", "?"),
        status=raw.get("ResourceStatus", "?"),
        reason=raw.get("ResourceStatusReason"),
    )
