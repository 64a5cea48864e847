"""The AWS set-up as code: deploy `infra/stack.yaml`, read its outputs, print the operator policy.

Contract:
- `check_stack_name(name)` applies CloudFormation's rule for stack names (a letter, then
  letters, digits and hyphens, at most 128 characters) and raises InputError naming
  `--stack-name`; `prepare`, `read_outputs`, `stack_status` and `operator_policy` call it
  before any AWS call, so an empty name never reaches DescribeStacks (which would list
  every stack).
- `parse_parameters(pairs, kms)` checks `--param K=V` flags against the template's
  Parameters (name, AllowedValues, AllowedPattern, Number bounds, and whole numbers for a
  Number the template passes to an integer property such as a lifecycle rule's `...Days`)
  and raises InputError (exit 2) naming the flag.
- `prepare(cfn, stack, params)` creates a change set (CREATE for a new stack, UPDATE for an
  existing one), waits until CloudFormation has computed it and returns a `ChangeSetPlan`
  with its changes, so the caller can show them before anything happens. When CloudFormation
  finds nothing to change ("No updates are to be performed", or a change set that "didn't
  contain changes"), the change set is deleted and the plan comes back with `nothing_to_do`.
  `execute(cfn, plan, on_event=..., on_wait=...)` runs it, reports each new stack event (and,
  while none comes, the stack's status every `heartbeat_s`), and returns the stack's
  outputs; a rollback or failure raises BackendError naming each failed resource with its
  ResourceStatusReason. It follows the stack by the StackId of the change set, never by
  name. When ExecuteChangeSet fails for a CREATE change set, the change set and the empty
  REVIEW_IN_PROGRESS stack are deleted, so the next deploy starts clean; a stack still in
  REVIEW_IN_PROGRESS `review_timeout_s` after the execute (the change set did not run) is
  a BackendError saying how to clean up. `discard(cfn, plan)` drops a change set the user
  declined.
- `read_outputs(cfn, stack)` maps the stack's outputs onto `StackOutputs`;
  `write_outputs_file(outputs, path)` writes the file a job spec's `infra:` key reads (keys as
  in `orchestrator.spec.INFRA_FIELDS`, plus region, bucket and stack_name), atomically.
- `operator_policy(outputs)` is the operator's managed policy document, taken from the
  template (one source of truth) with the stack's values filled in, or with <PLACEHOLDERS>
  when `outputs` is None.

CloudFormation `ValidationError`s (template or parameter problems) become InputError; every
other ClientError or botocore failure becomes BackendError with a hint. The cloudformation
client is always passed in.
"""

from __future__ import annotations

import difflib
import math
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import BackendError, InputError, OrchestratorError
from orchestrator.paths import write_atomic

TEMPLATE = Path(__file__).resolve().parents[1] / "infra" / "stack.yaml"
DEFAULT_STACK = "orchestrator"
# A stack of roles without fixed names needs CAPABILITY_IAM (named ones would need NAMED_IAM).
CAPABILITIES = ["CAPABILITY_IAM"]
# The template's parameter that `--kms` sets.
KMS_PARAMETER = "UseKms"
# Output keys of infra/stack.yaml.
OUTPUT_KEYS = {
    "RoleArn": "role_arn",
    "BucketName": "bucket",
    "CompileCacheUri": "compile_cache_uri",
    "OutputUri": "output_uri",
    "DataUri": "data_uri",
    "OperatorPolicyArn": "operator_policy_arn",
    "KmsKeyArn": "kms_key_arn",
}
REQUIRED_OUTPUTS = ("RoleArn", "BucketName", "CompileCacheUri", "OutputUri", "OperatorPolicyArn")
OPERATOR_POLICY_RESOURCE = "OperatorPolicy"

SUCCESS_STATES = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "IMPORT_COMPLETE"})
FAILURE_STATES = frozenset({
    "CREATE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "UPDATE_FAILED",
    "UPDATE_ROLLBACK_COMPLETE", "UPDATE_ROLLBACK_FAILED", "DELETE_COMPLETE", "DELETE_FAILED",
    "IMPORT_ROLLBACK_COMPLETE", "IMPORT_ROLLBACK_FAILED",
})
# Statuses from which a stack can take an UPDATE change set.
UPDATABLE_STATES = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE",
                              "IMPORT_ROLLBACK_COMPLETE"})
# CloudFormation's words for "this change set changes nothing".
_NO_CHANGES = ("didn't contain changes", "No updates are to be performed")
# Reasons that are consequences of another resource's failure, not causes.
_CANCELLED = ("Resource creation cancelled", "Resource update cancelled")
# CloudFormation's rule for stack names (CreateStack / CreateChangeSet StackName).
_STACK_NAME = re.compile(r"[A-Za-z][-A-Za-z0-9]*")
STACK_NAME_MAX = 128
# Resource properties that take whole numbers (S3 lifecycle `Days`, `NoncurrentDays`,
# `DaysAfterInitiation`, `NewerNoncurrentVersions`, IAM `MaxSessionDuration`, KMS
# `PendingWindowInDays`, ...): a Number parameter the template passes to one must be an integer,
# which CloudFormation's own Number type does not check (it takes 1.5, and the resource fails).
_INTEGER_PROPERTY = re.compile(r"Days|Seconds|Duration|Versions|Count")


# --- the template -----------------------------------------------------------------------


class _TemplateLoader(yaml.SafeLoader):
    """SafeLoader that reads CloudFormation's short-form tags (!Ref, !Sub, !GetAtt, ...) into
    their long form ({"Ref": ...}, {"Fn::Sub": ...}, ...), as CloudFormation itself does."""


def _construct_tag(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> dict:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if tag_suffix == "Ref":
        return {"Ref": value}
    if tag_suffix == "Condition":
        return {"Condition": value}
    if tag_suffix == "GetAtt" and isinstance(value, str):
        resource, _, attribute = value.partition(".")
        return {"Fn::GetAtt": [resource, attribute]}
    return {f"Fn::{tag_suffix}": value}


_TemplateLoader.add_multi_constructor("!", _construct_tag)

# How to undo edits to the shipped template, for hints.
_RESTORE_TEMPLATE = "`git checkout -- infra/stack.yaml` in the orchestrator's checkout restores the shipped one"


def load_template(path: Path = TEMPLATE) -> dict:
    """The template as plain data, short-form tags expanded. InputError if it cannot be read."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(f"cannot read the CloudFormation template {path}: {exc.strerror or exc}",
                         hint="run the orchestrator from its checkout, where infra/stack.yaml lives") from None
    try:
        data = yaml.load(text, Loader=_TemplateLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not a valid template: {exc}",
                         hint=f"fix the YAML where the message points; {_RESTORE_TEMPLATE}") from None
    if not isinstance(data, dict) or not isinstance(data.get("Resources"), dict):
        raise InputError(f"{path}: not a CloudFormation template (no Resources mapping)",
                         hint=f"it must be the orchestrator's stack template; {_RESTORE_TEMPLATE}")
    return data


# --- parameters -------------------------------------------------------------------------


def check_stack_name(stack_name: str) -> str:
    """`stack_name` if CloudFormation would take it as a stack name; InputError otherwise."""
    if not isinstance(stack_name, str) or not _STACK_NAME.fullmatch(stack_name) or len(stack_name) > STACK_NAME_MAX:
        shown = stack_name if isinstance(stack_name, str) and len(stack_name) <= 40 else f"{str(stack_name)[:40]}..."
        raise InputError(f"--stack-name {shown!r}: not a CloudFormation stack name; it must start with a letter, "
                         f"contain only letters, digits and hyphens (^[A-Za-z][-A-Za-z0-9]*$) and be at most "
                         f"{STACK_NAME_MAX} characters",
                         hint=f"e.g. --stack-name {DEFAULT_STACK} (the default)")
    return stack_name


def integer_parameters(template: Mapping) -> set[str]:
    """Names of the template's Number parameters that some resource property taking whole
    numbers refers to (directly or through Fn::If and the like)."""
    declared = template.get("Parameters") or {}
    numbers = {name for name, spec in declared.items() if isinstance(spec, Mapping) and spec.get("Type") == "Number"}
    found: set[str] = set()

    def walk(node: Any, prop: str | None) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, prop)
        elif isinstance(node, dict):
            ref = node.get("Ref") if len(node) == 1 else None
            if isinstance(ref, str) and ref in numbers and prop and _INTEGER_PROPERTY.search(prop):
                found.add(ref)
            for key, value in node.items():
                # An intrinsic function stands for the value of the property around it.
                walk(value, prop if key == "Ref" or key.startswith("Fn::") else key)

    walk(template.get("Resources") or {}, None)
    return found


def parse_parameters(pairs: Iterable[str], kms: bool | None = None, template: Mapping | None = None) -> dict[str, str]:
    """`K=V` flags (and `--kms/--no-kms`) -> {name: value}, each checked against the template.

    Raises InputError for a malformed flag, an unknown name (with "did you mean"), a value the
    template's constraints refuse, a name given twice, or `--kms` contradicting UseKms=.
    """
    template = template if template is not None else load_template()
    declared: Mapping[str, Mapping] = template.get("Parameters") or {}
    integers = integer_parameters(template)
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"--param {pair!r}: expected NAME=VALUE",
                             hint=f"parameters: {', '.join(declared)}")
        if key not in declared:
            close = difflib.get_close_matches(key, list(declared), n=1, cutoff=0.6)
            raise InputError(f"--param {key}: the template has no parameter {key!r}"
                             + (f"; did you mean {close[0]!r}?" if close else ""),
                             hint=f"parameters: {', '.join(declared)}")
        if key in values:
            raise InputError(f"--param {key} is given twice", hint=f"keep one --param {key}=VALUE")
        problem = _check_value(declared[key], value, integer=key in integers)
        if problem:
            raise InputError(f"--param {key}={value}: {problem}",
                             hint=str(declared[key].get("Description", "")).strip() or None)
        values[key] = value
    if kms is not None:
        wanted = "true" if kms else "false"
        if values.get(KMS_PARAMETER, wanted) != wanted:
            raise InputError(f"--{'' if kms else 'no-'}kms contradicts --param {KMS_PARAMETER}={values[KMS_PARAMETER]}",
                             hint=f"drop --param {KMS_PARAMETER}={values[KMS_PARAMETER]}: --{'' if kms else 'no-'}kms sets "
                                  f"{KMS_PARAMETER}={wanted}")
        values[KMS_PARAMETER] = wanted
    return values


def _check_value(declared: Mapping, value: str, integer: bool = False) -> str | None:
    """Why CloudFormation (or, for an `integer` one, the resource it feeds) would refuse
    `value` for this parameter, or None."""
    constraint = declared.get("ConstraintDescription")
    why = f" ({constraint})" if constraint else ""
    allowed = declared.get("AllowedValues")
    if allowed is not None and value not in [str(a) for a in allowed]:
        return f"must be one of {', '.join(str(a) for a in allowed)}"
    if declared.get("Type") == "Number":
        try:
            number = float(value)
        except ValueError:
            return f"must be a number{why}"
        if not math.isfinite(number):
            return f"must be a finite number{why}"
        if integer and not re.fullmatch(r"-?[0-9]+", value):
            return f"must be a whole number (the template passes it to a property that takes integers){why}"
        if "MinValue" in declared and number < float(declared["MinValue"]):
            return f"must be at least {declared['MinValue']}{why}"
        if "MaxValue" in declared and number > float(declared["MaxValue"]):
            return f"must be at most {declared['MaxValue']}{why}"
    pattern = declared.get("AllowedPattern")
    if pattern is not None and not re.fullmatch(str(pattern), value):
        return f"does not match {pattern}{why}"
    if "MinLength" in declared and len(value) < int(declared["MinLength"]):
        return f"must be at least {declared['MinLength']} characters{why}"
    if "MaxLength" in declared and len(value) > int(declared["MaxLength"]):
        return f"must be at most {declared['MaxLength']} characters{why}"
    return None


# --- deploy -----------------------------------------------------------------------------


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


@dataclass(frozen=True)
class StackOutputs:
    """What the stack made, in the orchestrator's words."""

    stack_name: str
    region: str | None
    role_arn: str
    bucket: str
    compile_cache_uri: str
    output_uri: str
    operator_policy_arn: str
    data_uri: str | None = None
    kms_key_arn: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def infra_file(self) -> dict[str, str]:
        """The mapping `infra outputs --write` stores and a job spec's `infra:` reads."""
        data = {
            "role_arn": self.role_arn,
            "compile_cache_uri": self.compile_cache_uri,
            "output_uri": self.output_uri,
            "bucket": self.bucket,
            "stack_name": self.stack_name,
        }
        if self.region:
            data["region"] = self.region
        return data


def stack_status(cfn, stack_name: str) -> str | None:
    """The stack's status, or None when no stack of that name exists."""
    stack = _describe_stack(cfn, check_stack_name(stack_name))
    return None if stack is None else stack["StackStatus"]


def prepare(cfn, stack_name: str, parameters: Mapping[str, str], *, template_path: Path = TEMPLATE,
            sleep: Callable[[float], None] = time.sleep, poll_s: float = 2.0, timeout_s: float = 600.0,
            clock: Callable[[], float] = time.monotonic) -> ChangeSetPlan:
    """Create a change set for `stack_name` and wait until CloudFormation has computed it.

    An existing stack gets an UPDATE change set in which the parameters not given keep their
    previous values; a new one (or one left in REVIEW_IN_PROGRESS) gets a CREATE change set.
    """
    check_stack_name(stack_name)
    template = load_template(template_path)
    body = Path(template_path).read_text()
    existing = _describe_stack(cfn, stack_name)
    status = existing["StackStatus"] if existing else None
    if status is None or status == "REVIEW_IN_PROGRESS":
        kind = "CREATE"
    elif status in UPDATABLE_STATES:
        kind = "UPDATE"
    elif status == "ROLLBACK_COMPLETE":
        raise BackendError(f"stack {stack_name} is in ROLLBACK_COMPLETE: its first deploy failed and it cannot be "
                           "updated",
                           hint=f"delete it, then deploy again: aws cloudformation delete-stack --stack-name "
                                f"{stack_name}{_region_flag(cfn)}")
    elif status.endswith("_IN_PROGRESS"):
        raise BackendError(f"stack {stack_name} is busy ({status})",
                           hint="wait until the running operation ends, then deploy again")
    else:
        raise BackendError(f"stack {stack_name} is in {status} and cannot take a change set",
                           hint=f"look at its events: aws cloudformation describe-stack-events --stack-name "
                                f"{stack_name}{_region_flag(cfn)}")
    previous = {p["ParameterKey"] for p in (existing or {}).get("Parameters", [])} if kind == "UPDATE" else set()
    cfn_params = []
    for key in template.get("Parameters") or {}:
        if key in parameters:
            cfn_params.append({"ParameterKey": key, "ParameterValue": str(parameters[key])})
        elif key in previous:
            cfn_params.append({"ParameterKey": key, "UsePreviousValue": True})
    # Change set names are unique per stack; two deploys in one second must not collide.
    name = f"orchestrator-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
    try:
        created = cfn.create_change_set(
            StackName=stack_name, ChangeSetName=name, ChangeSetType=kind, TemplateBody=body,
            Parameters=cfn_params, Capabilities=CAPABILITIES,
            Description="orchestrator infra deploy",
        )
    except Exception as exc:  # noqa: BLE001 - translated below, re-raised if not AWS's
        if _is_no_changes(exc):
            return ChangeSetPlan(stack_name, _region(cfn), kind, name, None, None, dict(parameters), nothing_to_do=True)
        raise _translate(exc, f"creating a change set for stack {stack_name}", cfn, stack_name) from None
    plan = ChangeSetPlan(stack_name, _region(cfn), kind, name, created.get("Id"), created.get("StackId"),
                         dict(parameters))
    described = _wait_change_set(cfn, plan, sleep, poll_s, timeout_s, clock)
    if described["Status"] == "FAILED":
        reason = described.get("StatusReason") or "no reason given"
        if any(marker in reason for marker in _NO_CHANGES):
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
        if plan.kind == "CREATE" and not keep_stack and _status(_describe_stack(cfn, target)) == "REVIEW_IN_PROGRESS":
            cfn.delete_stack(StackName=target)
    except Exception as exc:  # noqa: BLE001
        raise _translate(exc, f"deleting change set {plan.change_set_name} of stack {plan.stack_name}", cfn,
                         plan.stack_name) from None


def execute(cfn, plan: ChangeSetPlan, *, on_event: Callable[[StackEvent], None] = lambda event: None,
            on_wait: Callable[[str, float], None] = lambda status, elapsed_s: None,
            sleep: Callable[[float], None] = time.sleep, poll_s: float = 5.0, timeout_s: float = 3600.0,
            review_timeout_s: float = 60.0, heartbeat_s: float = 30.0,
            clock: Callable[[], float] = time.monotonic) -> StackOutputs:
    """Execute a prepared change set and wait for the stack to settle, reporting new events.

    The stack is followed by the StackId the change set came with (by name only when
    CloudFormation gave none). Each new stack event goes to `on_event`, oldest first; when a
    poll brings none, `on_wait(status, seconds since the execute)` is called, at the first
    such poll and then at most every `heartbeat_s`, so a caller can show the wait.

    Returns the stack's outputs. Raises BackendError naming every failed resource and its
    ResourceStatusReason when the stack rolls back or fails; when ExecuteChangeSet itself
    fails (after deleting a CREATE change set and its empty stack, so a retry starts clean);
    when the stack is still REVIEW_IN_PROGRESS after review_timeout_s (the change set did not
    run); and when it is still in progress after timeout_s (the deployment goes on in
    CloudFormation).
    """
    if plan.nothing_to_do:
        return read_outputs(cfn, plan.stack_name)
    target = plan.stack_id or plan.stack_name
    seen = {e["EventId"] for e in _events(cfn, target, stop_at=set(), limit_pages=1)}
    try:
        cfn.execute_change_set(StackName=plan.stack_name, ChangeSetName=plan.change_set_id or plan.change_set_name)
    except Exception as exc:  # noqa: BLE001
        error = _translate(exc, f"executing change set {plan.change_set_name} on stack {plan.stack_name}", cfn,
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
        stack = _describe_stack(cfn, target)
        status = _status(stack) or "DELETE_COMPLETE"
        if status in SUCCESS_STATES:
            return _outputs_of(cfn, stack, plan.stack_name)
        if status in FAILURE_STATES:
            raise _deploy_failed(cfn, plan, status, (stack or {}).get("StackStatusReason"), failed)
        now = clock()
        if status == "REVIEW_IN_PROGRESS" and now - started >= review_timeout_s:
            raise BackendError(
                f"change set {plan.change_set_name} was not executed: stack {plan.stack_name} is still "
                f"REVIEW_IN_PROGRESS {now - started:.0f} s after ExecuteChangeSet",
                hint="delete the change set and the empty stack, then deploy again: aws cloudformation delete-stack "
                     f"--stack-name {target}{_region_flag(cfn)}")
        if now >= deadline:
            raise BackendError(
                f"stack {plan.stack_name} is still {status} after {timeout_s / 60:.0f} minutes",
                hint="CloudFormation carries on without us; watch it with aws cloudformation describe-stack-events "
                     f"--stack-name {plan.stack_name}{_region_flag(cfn)}, then run `python -m orchestrator infra outputs`")
        if new:
            last_wait_report = now
        elif last_wait_report is None or now - last_wait_report >= heartbeat_s:
            last_wait_report = now
            on_wait(status, now - started)
        sleep(poll_s)


def _after_failed_execute(cfn, plan: ChangeSetPlan, error: Exception) -> Exception:
    """`error`, after deleting a CREATE change set that could not be executed and the empty
    stack that holds it, its hint saying what was cleaned up (or what is left to clean)."""
    if plan.kind != "CREATE" or not isinstance(error, OrchestratorError):
        return error
    target = plan.stack_id or plan.stack_name
    try:
        if _status(_describe_stack(cfn, target)) != "REVIEW_IN_PROGRESS":
            return error  # the stack moved on: something did run; leave it to the events
        discard(cfn, plan)
    except OrchestratorError as cleanup:
        left = (f"the change set and the empty stack it made are left behind ({cleanup.message}); delete them with "
                f"aws cloudformation delete-stack --stack-name {target}{_region_flag(cfn)}, then deploy again")
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
                f"delete-stack --stack-name {plan.stack_name}{_region_flag(cfn)}")
    elif status == "UPDATE_ROLLBACK_COMPLETE":
        hint = "the stack is back at its previous version; fix the cause above and deploy again"
    else:
        hint = (f"look at the events: aws cloudformation describe-stack-events --stack-name "
                f"{plan.stack_name}{_region_flag(cfn)}")
    return BackendError("\n".join(lines), hint=hint)


def _wait_change_set(cfn, plan: ChangeSetPlan, sleep, poll_s: float, timeout_s: float, clock) -> dict:
    deadline = clock() + timeout_s
    while True:
        try:
            described = cfn.describe_change_set(StackName=plan.stack_name,
                                                ChangeSetName=plan.change_set_id or plan.change_set_name)
        except Exception as exc:  # noqa: BLE001
            raise _translate(exc, f"reading change set {plan.change_set_name}", cfn, plan.stack_name) from None
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
            raise _translate(exc, f"reading change set {plan.change_set_name}", cfn, plan.stack_name) from None


def _events(cfn, stack_name: str, stop_at: set, limit_pages: int = 100) -> list[dict]:
    """Stack events newer than any id in stop_at, newest first (CloudFormation's order)."""
    collected: list[dict] = []
    kwargs: dict[str, Any] = {"StackName": stack_name}
    for _ in range(limit_pages):
        try:
            page = cfn.describe_stack_events(**kwargs)
        except Exception as exc:  # noqa: BLE001
            if _is_missing_stack(exc):
                return collected
            raise _translate(exc, f"reading events of stack {stack_name}", cfn, stack_name) from None
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


# --- outputs ----------------------------------------------------------------------------


def read_outputs(cfn, stack_name: str) -> StackOutputs:
    """The stack's outputs. InputError when no such stack exists (wrong name or region);
    BackendError when it exists but has not (or not successfully) finished deploying."""
    stack = _describe_stack(cfn, check_stack_name(stack_name))
    if stack is None:
        raise InputError(f"no stack {stack_name!r} in region {_region(cfn) or '(default)'}",
                         hint="deploy it first with `python -m orchestrator infra deploy`, or pass the --stack-name and "
                              "--region it was deployed with")
    return _outputs_of(cfn, stack, stack_name)


def _outputs_of(cfn, stack: Mapping, stack_name: str) -> StackOutputs:
    """A DescribeStacks entry's outputs as StackOutputs; BackendError when some are missing."""
    raw = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs") or []}
    missing = [key for key in REQUIRED_OUTPUTS if key not in raw]
    if missing:
        raise BackendError(f"stack {stack_name} ({stack['StackStatus']}) has no output {', '.join(missing)}",
                           hint="is it the orchestrator's stack, deployed to completion? `python -m orchestrator infra "
                                "deploy` creates or updates it")
    known = {key: raw[key] for key in OUTPUT_KEYS if key in raw}
    return StackOutputs(
        stack_name=stack_name,
        region=_region(cfn),
        extra={k: v for k, v in raw.items() if k not in OUTPUT_KEYS},
        **{OUTPUT_KEYS[key]: value for key, value in known.items()},
    )


def check_outputs_target(path: Path, force: bool = False) -> None:
    """InputError (exit 2) unless `--write path` may be written: a new path, or an outputs
    file an earlier `--write` made (its keys all among the infra file's), or any regular file
    with `force`. Never a device, FIFO, socket or folder, forced or not."""
    from orchestrator import spec
    from orchestrator.paths import check_write_target

    check_write_target(path, "--write")
    if force or not Path(path).is_file():
        return
    allowed = set(spec.INFRA_FIELDS) | set(spec.INFRA_OTHER_KEYS)
    try:
        with open(path, "rb") as handle:
            data = yaml.safe_load(handle.read(1 << 20))
    except (OSError, ValueError, yaml.YAMLError):
        data = ...  # unreadable as YAML: not an outputs file either
    if data is None or (isinstance(data, dict) and data and set(map(str, data)) <= allowed):
        return
    what = (f"its keys are {', '.join(sorted(map(str, data))[:6])}" if isinstance(data, dict)
            else "it is not a YAML mapping of outputs")
    raise InputError(f"--write {path}: exists and is not an infra outputs file ({what}); it was left as it is",
                     hint="write the outputs to another file (e.g. --write configs/infra.yaml and `infra: infra.yaml` "
                          "in the job spec), or pass --force to replace this one")


def write_outputs_file(outputs: StackOutputs, path: Path) -> Path:
    """Write the `infra:` file for job specs, atomically (a temp file, then replace)."""
    path = Path(path)
    header = (f"# Written by `python -m orchestrator infra outputs --write` from stack {outputs.stack_name}"
              f"{' in ' + outputs.region if outputs.region else ''}.\n"
              "# A job spec's `infra:` key points here; keys: see orchestrator/spec.py INFRA_FIELDS.\n")
    text = header + yaml.safe_dump(outputs.infra_file(), sort_keys=False, default_flow_style=False)
    try:
        write_atomic(path, text)
    except OSError as exc:
        from orchestrator.paths import write_hint

        raise InputError(f"cannot write {path}: {exc.strerror or exc}", hint=write_hint(
            exc, "pass --write a file in a folder you can write, e.g. --write configs/infra.yaml")) from None
    return path


# --- the operator policy ----------------------------------------------------------------


_NO_VALUE = object()


def operator_policy(outputs: StackOutputs | None, *, stack_name: str = DEFAULT_STACK, region: str | None = None,
                    template_path: Path = TEMPLATE) -> dict:
    """The operator's managed policy document from the template, its references filled in
    from `outputs`, or with <PLACEHOLDERS> (account, region, bucket, role) when None."""
    if outputs is None:
        check_stack_name(stack_name)
    template = load_template(template_path)
    resource = (template.get("Resources") or {}).get(OPERATOR_POLICY_RESOURCE) or {}
    document = (resource.get("Properties") or {}).get("PolicyDocument")
    if not isinstance(document, dict):
        raise InputError(f"{template_path}: no {OPERATOR_POLICY_RESOURCE} policy document in the template",
                         hint=f"the policy is Properties.PolicyDocument of the AWS::IAM::ManagedPolicy resource "
                              f"{OPERATOR_POLICY_RESOURCE}; {_RESTORE_TEMPLATE}")
    if outputs is not None:
        partition, account = _arn_parts(outputs.role_arn)
        context = {
            "AWS::Partition": partition, "AWS::AccountId": account,
            "AWS::Region": outputs.region or region or "<REGION>", "AWS::StackName": outputs.stack_name,
            "Bucket": outputs.bucket, "Bucket.Arn": f"arn:{partition}:s3:::{outputs.bucket}",
            "ExecutionRole.Arn": outputs.role_arn,
        }
        if outputs.kms_key_arn:
            context["EncryptionKey.Arn"] = outputs.kms_key_arn
        conditions = {"UseKmsKey": outputs.kms_key_arn is not None}
    else:
        context = {
            "AWS::Partition": "aws", "AWS::AccountId": "<ACCOUNT_ID>", "AWS::Region": region or "<REGION>",
            "AWS::StackName": stack_name, "Bucket": "<BUCKET>", "Bucket.Arn": "arn:aws:s3:::<BUCKET>",
            "ExecutionRole.Arn": "arn:aws:iam::<ACCOUNT_ID>:role/<EXECUTION_ROLE>",
            "EncryptionKey.Arn": "arn:aws:kms:<REGION>:<ACCOUNT_ID>:key/<KEY_ID>",
        }
        conditions = {"UseKmsKey": False}
    return resolve(document, context, conditions)


def resolve(node: Any, context: Mapping[str, str], conditions: Mapping[str, bool]) -> Any:
    """Evaluate the intrinsic functions of a template fragment (Ref, Fn::GetAtt, Fn::Sub,
    Fn::If, Fn::Join) against known values. A reference not in `context` raises InputError:
    the template and this resolver have drifted apart."""
    value = _resolve(node, context, conditions)
    return None if value is _NO_VALUE else value


def _resolve(node: Any, context: Mapping[str, str], conditions: Mapping[str, bool]) -> Any:
    if isinstance(node, list):
        items = [_resolve(item, context, conditions) for item in node]
        return [item for item in items if item is not _NO_VALUE]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        (key, arg), = node.items()
        if key == "Ref":
            return _NO_VALUE if arg == "AWS::NoValue" else _lookup(context, arg)
        if key == "Fn::GetAtt":
            return _lookup(context, ".".join(arg) if isinstance(arg, list) else arg)
        if key == "Fn::Sub":
            text, extra = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
            local = {**context, **{k: _resolve(v, context, conditions) for k, v in extra.items()}}
            return re.sub(r"\$\{([^}]+)\}",
                          lambda m: "${" + m.group(1)[1:] + "}" if m.group(1).startswith("!")
                          else str(_lookup(local, m.group(1).strip())), text)
        if key == "Fn::If":
            name, when_true, when_false = arg
            if name not in conditions:
                raise InputError(f"the template's condition {name!r} is unknown to orchestrator/infra.py",
                                 hint=f"use a condition it evaluates ({', '.join(sorted(conditions)) or 'none'}), "
                                      "or teach operator_policy() in orchestrator/infra.py this one")
            return _resolve(when_true if conditions[name] else when_false, context, conditions)
        if key == "Fn::Join":
            sep, parts = arg
            return sep.join(str(p) for p in _resolve(parts, context, conditions))
    out = {}
    for key, value in node.items():
        resolved = _resolve(value, context, conditions)
        if resolved is not _NO_VALUE:
            out[key] = resolved
    return out


def _lookup(context: Mapping[str, str], name: str) -> str:
    if name not in context:
        raise InputError(f"the template refers to {name!r}, which orchestrator/infra.py cannot fill in",
                         hint=f"refer to a name it fills in ({', '.join(sorted(context))}), "
                              "or add this one to operator_policy()'s context in orchestrator/infra.py")
    return context[name]


def _arn_parts(arn: str) -> tuple[str, str]:
    parts = arn.split(":")
    if len(parts) < 6 or not parts[4]:
        raise BackendError(f"the stack's RoleArn output {arn!r} is not an IAM role ARN")
    return parts[1], parts[4]


# --- AWS edge ---------------------------------------------------------------------------


def make_client(service: str, region: str | None):
    """A boto3 client for `region`, default as every command that calls AWS takes it
    (`region.default_region`: AWS_REGION, AWS_DEFAULT_REGION, the AWS config
    profile's region, us-east-1), built by `aws.client` (timeouts, retries, a checked
    endpoint). InputError for an unreadable AWS configuration or a malformed endpoint."""
    from orchestrator import aws
    from orchestrator.region import default_region

    return aws.client(service, default_region(region))


def _describe_stack(cfn, stack_name: str) -> dict | None:
    try:
        stacks = cfn.describe_stacks(StackName=stack_name).get("Stacks", [])
    except Exception as exc:  # noqa: BLE001
        if _is_missing_stack(exc):
            return None
        raise _translate(exc, f"reading stack {stack_name}", cfn, stack_name) from None
    return stacks[0] if stacks else None


def _status(stack: Mapping | None) -> str | None:
    return None if stack is None else stack["StackStatus"]


def _error_code(exc: BaseException) -> tuple[str, str] | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict) or "Error" not in response:
        return None
    error = response["Error"]
    return str(error.get("Code", "")), str(error.get("Message", ""))


def _is_missing_stack(exc: BaseException) -> bool:
    code = _error_code(exc)
    return code is not None and code[0] == "ValidationError" and "does not exist" in code[1]


def _is_no_changes(exc: BaseException) -> bool:
    code = _error_code(exc)
    return code is not None and code[0] == "ValidationError" and any(m in code[1] for m in _NO_CHANGES)


def _translate(exc: BaseException, doing: str, cfn, stack_name: str | None = None,
               execution: bool = False) -> Exception:
    """ClientError / BotoCoreError -> our error; anything else is a bug and is re-raised."""
    from botocore.exceptions import BotoCoreError, NoCredentialsError

    from orchestrator import aws

    code = _error_code(exc)
    if code is not None:
        name, message = code
        if name == "ValidationError" and not execution:
            return InputError(f"{doing}: CloudFormation refused the template or parameters: {message}",
                              hint="fix infra/stack.yaml or the --param values; cfn-lint infra/stack.yaml checks the "
                                   "template")
        if name in ("AccessDenied", "AccessDeniedException", "InsufficientCapabilitiesException"):
            return BackendError(f"{doing}: {name}: {message}",
                                hint="deploying creates IAM roles, a bucket and (with --kms) a KMS key: run it with "
                                     "administrator credentials; the operator policy is for running jobs")
        return BackendError(f"{doing}: {name}: {message}",
                            hint=f"check the stack with aws cloudformation describe-stack-events --stack-name "
                                 f"{stack_name or DEFAULT_STACK}{_region_flag(cfn)}")
    if isinstance(exc, NoCredentialsError):
        return BackendError(f"{doing}: no AWS credentials found",
                            hint="configure credentials (aws configure, AWS_PROFILE or environment variables)")
    silent = aws.describe(exc)
    if silent is not None:
        return BackendError(f"{doing}: {silent}; {aws.tries_said(exc)}", hint=aws.NO_ANSWER_HINT)
    if isinstance(exc, BotoCoreError):
        return BackendError(f"{doing}: {exc}")
    raise exc


def _region(cfn) -> str | None:
    meta = getattr(cfn, "meta", None)
    return getattr(meta, "region_name", None)


def _region_flag(cfn) -> str:
    region = _region(cfn)
    return f" --region {region}" if region else ""
