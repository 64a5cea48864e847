"""The CloudFormation template (`infra/stack.yaml`) and the parameters a deploy gives it.

The template is read from the installed package's copy (`orchestrator/data/stack.yaml`, which
the wheel carries: see setup.py) or, in a checkout, from `infra/stack.yaml` itself.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import InputError

_PACKAGED = Path(__file__).resolve().parents[1] / "data" / "stack.yaml"
_CHECKOUT = Path(__file__).resolve().parents[2] / "infra" / "stack.yaml"
# The shipped template: the installed package's copy, else the checkout's own.
TEMPLATE = _PACKAGED if _PACKAGED.is_file() else _CHECKOUT
DEFAULT_STACK = "orchestrator"
# The template's parameter that `--kms` sets.
KMS_PARAMETER = "UseKms"
# CloudFormation's rule for stack names (CreateStack / CreateChangeSet StackName).
_STACK_NAME = re.compile(r"[A-Za-z][-A-Za-z0-9]*")
STACK_NAME_MAX = 128
# Resource properties that take whole numbers (S3 lifecycle `Days`, `NoncurrentDays`,
# `DaysAfterInitiation`, `NewerNoncurrentVersions`, IAM `MaxSessionDuration`, KMS
# `PendingWindowInDays`, logs `RetentionInDays`, Batch `MaxTimeSeconds`, EBS `VolumeSize`, ...):
# a Number parameter the template passes to one must be an integer, which CloudFormation's own
# Number type does not check (it takes 1.5, and the resource fails).
_INTEGER_PROPERTY = re.compile(r"Days|Seconds|Duration|Versions|Count|Size")


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
RESTORE_TEMPLATE = ("reinstall the orchestrator package to restore the shipped one" if TEMPLATE == _PACKAGED else
                    "`git checkout -- infra/stack.yaml` in the orchestrator's checkout restores the shipped one")


def load_template(path: Path = TEMPLATE) -> dict:
    """The template as plain data, short-form tags expanded. InputError if it cannot be read."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(f"cannot read the CloudFormation template {path}: {exc.strerror or exc}",
                         hint="run the orchestrator from its checkout, where infra/stack.yaml lives, or reinstall "
                              "the package, whose wheel carries the template") from None
    try:
        data = yaml.load(text, Loader=_TemplateLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not a valid template: {exc}",
                         hint=f"fix the YAML where the message points; {RESTORE_TEMPLATE}") from None
    if not isinstance(data, dict) or not isinstance(data.get("Resources"), dict):
        raise InputError(f"{path}: not a CloudFormation template (no Resources mapping)",
                         hint=f"it must be the orchestrator's stack template; {RESTORE_TEMPLATE}")
    return data


def template_body(template: Mapping) -> str:
    """The TemplateBody a deploy sends: the template as compact JSON (no comments, no
    indentation), which CloudFormation reads as it reads the YAML. The YAML with its comments
    is past CreateChangeSet's 51,200-byte TemplateBody limit (data/aws_limits.json); the JSON
    is about 37 KB, a margin for growth that tests/test_aws_contract_infra.py holds."""
    import json

    return json.dumps(template, separators=(",", ":"), ensure_ascii=False)


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
