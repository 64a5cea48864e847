"""The operator's managed policy: the template's OperatorPolicy document with the stack's
values filled in (one source of truth), or <PLACEHOLDERS> before any stack exists."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.errors import BackendError, InputError
from orchestrator.infra.outputs import StackOutputs
from orchestrator.infra.template import (
    DEFAULT_STACK,
    RESTORE_TEMPLATE,
    TEMPLATE,
    check_stack_name,
    load_template,
)

OPERATOR_POLICY_RESOURCE = "OperatorPolicy"
MLFLOW_POLICY_RESOURCE = "ExecutionRoleMlflowPolicy"

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
                              f"{OPERATOR_POLICY_RESOURCE}; {RESTORE_TEMPLATE}")
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
    return evaluate(document, context, conditions)


def mlflow_policy(arn: str, template_path: Path = TEMPLATE) -> dict:
    """The execution role's MLflow grant (the template's ExecutionRoleMlflowPolicy, which the
    stack adds when its MlflowResourceArn parameter is set) for the MLflow App or tracking server
    `arn`: for a role of one's own (a spec's role_arn not from the stack). InputError for an
    ARN that is not one."""
    from orchestrator.spec.models import mlflow_arn_region

    if mlflow_arn_region(arn) is None:
        raise InputError(f"--mlflow {arn!r} is not a SageMaker MLflow App or tracking server ARN",
                         hint="e.g. --mlflow arn:aws:sagemaker:us-east-1:123456789012:mlflow-app/app-ABC123")
    template = load_template(template_path)
    resource = (template.get("Resources") or {}).get(MLFLOW_POLICY_RESOURCE) or {}
    document = (resource.get("Properties") or {}).get("PolicyDocument")
    if not isinstance(document, dict):
        raise InputError(f"{template_path}: no {MLFLOW_POLICY_RESOURCE} policy document in the template",
                         hint=RESTORE_TEMPLATE)
    return evaluate(document, {"MlflowResourceArn": arn}, {})


def evaluate(node: Any, context: Mapping[str, str], conditions: Mapping[str, bool]) -> Any:
    """Evaluate the intrinsic functions of a template fragment (Ref, Fn::GetAtt, Fn::Sub,
    Fn::If, Fn::Join) against known values. A reference not in `context` raises InputError:
    the template and this evaluator have drifted apart."""
    value = _evaluate(node, context, conditions)
    return None if value is _NO_VALUE else value


def _evaluate(node: Any, context: Mapping[str, str], conditions: Mapping[str, bool]) -> Any:
    if isinstance(node, list):
        items = [_evaluate(item, context, conditions) for item in node]
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
            local = {**context, **{k: _evaluate(v, context, conditions) for k, v in extra.items()}}
            return re.sub(r"\$\{([^}]+)\}",
                          lambda m: "${" + m.group(1)[1:] + "}" if m.group(1).startswith("!")
                          else str(_lookup(local, m.group(1).strip())), text)
        if key == "Fn::If":
            name, when_true, when_false = arg
            if name not in conditions:
                raise InputError(f"the template's condition {name!r} is unknown to orchestrator/infra/policy.py",
                                 hint=f"use a condition it evaluates ({', '.join(sorted(conditions)) or 'none'}), "
                                      "or teach operator_policy() in orchestrator/infra/policy.py this one")
            return _evaluate(when_true if conditions[name] else when_false, context, conditions)
        if key == "Fn::Join":
            sep, parts = arg
            return sep.join(str(p) for p in _evaluate(parts, context, conditions))
    out = {}
    for key, value in node.items():
        resolved = _evaluate(value, context, conditions)
        if resolved is not _NO_VALUE:
            out[key] = resolved
    return out


def _lookup(context: Mapping[str, str], name: str) -> str:
    if name not in context:
        raise InputError(f"the template refers to {name!r}, which orchestrator/infra/policy.py cannot fill in",
                         hint=f"refer to a name it fills in ({', '.join(sorted(context))}), "
                              "or add this one to operator_policy()'s context in orchestrator/infra/policy.py")
    return context[name]


def _arn_parts(arn: str) -> tuple[str, str]:
    parts = arn.split(":")
    if len(parts) < 6 or not parts[4]:
        raise BackendError(f"the stack's RoleArn output {arn!r} is not an IAM role ARN")
    return parts[1], parts[4]
