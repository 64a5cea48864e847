"""The doctor's rules a SageMaker training job needs beyond every backend's: a type SageMaker
trains on (N001), the image's region, the budget, EFA (N018, N019), the environment's limits
in botocore's TrainingEnvironmentMap (N023), the tag characters SageMaker accepts (N029), the
image's runtime, workers, the volume on NVMe types (N030) and spot (`doctor.diagnose` runs the
rest)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from orchestrator import catalog
from orchestrator.doctor import budget, image, instance
from orchestrator.doctor.finding import Finding

if TYPE_CHECKING:
    from orchestrator import cost
    from orchestrator.spec import JobSpec


def check(spec: JobSpec, target: catalog.Target, estimate: cost.Estimate, priced: JobSpec) -> list[Finding]:
    """Every rule above on `spec`; `priced`: the spec whose price the estimate is."""
    findings = instance.accepted(spec, target)
    findings += image.image_and_region(spec)
    findings += budget.within(priced, estimate, findings)
    findings += efa(spec, target)
    findings += sagemaker_limits(spec, target)
    findings += tags(spec)
    findings += image.runtime(spec, target)
    findings += instance.workers(spec, target)
    findings += volume(spec, target)
    return findings + instance.spot(spec)


def efa(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """N018, N019: the EFA variables the orchestrator adds on multi-node EFA instances."""
    if not target.efa:
        return []
    from entrypoints.shared.contract import EFA_ENV

    out = [Finding(
        "N018-efa-env-added", "info",
        f"multi-node {spec.instance.type}: the orchestrator adds "
        f"{', '.join(f'{k}={v}' for k, v in EFA_ENV.items())} (launch.py runs torchrun itself, outside the "
        "training toolkit's own EFA set-up)",
        "nothing to do", "instance.count")]
    for key, value in EFA_ENV.items():
        if key in spec.environment and spec.environment[key] != value:
            out.append(Finding(
                "N019-efa-env-overridden", "warning",
                f"environment sets {key}={spec.environment[key]}; multi-node {spec.instance.type} needs "
                f"{key}={value} for EFA, and your value wins",
                f"remove {key} from environment", f"environment.{key}"))
    return out


def volume(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """N030: instance.volume_gb set on a type with NVMe instance storage, where it is ignored."""
    # botocore's ResourceConfig.VolumeSizeInGB: on types with NVMe instance storage SageMaker
    # provisions no EBS volume and uses the instance storage. Only when the spec asks for another
    # size than the default: the request carries a value either way (the field is required).
    default = type(spec.instance).model_fields["volume_gb"].default
    if target.facts is None or not target.facts.instance_storage or spec.instance.volume_gb == default:
        return []
    return [Finding(
        "N030-volume-ignored", "info",
        f"instance.volume_gb ({spec.instance.volume_gb}) is ignored on {spec.instance.type}: SageMaker uses the "
        "instance's NVMe storage instead of an EBS volume",
        "remove instance.volume_gb", "instance.volume_gb")]


def sagemaker_limits(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """N023: the environment as it is sent (the user's plus the orchestrator's variables, flags
    appended: `target.environment`) against the limits of botocore's TrainingEnvironmentMap."""
    if not spec.environment:
        return []  # the orchestrator's own few short variables: no botocore lookup needed
    out = []
    limits = catalog.environment_limits()
    sent = target.environment
    added = sorted(set(sent) - set(spec.environment))
    if len(sent) > limits.max_variables:
        extra = f" ({len(spec.environment)} of yours, {len(added)} the orchestrator adds: {', '.join(added)})" \
            if added else ""
        out.append(Finding(
            "N023-environment-limits", "error",
            f"the job's environment has {len(sent)} variables{extra}; SageMaker accepts {limits.max_variables}",
            f"keep at most {limits.max_variables - len(added)} variables in environment", "environment"))
    name_ok = re.compile(limits.name_pattern)
    for key, value in sent.items():
        path = f"environment.{key}" if key in spec.environment else "environment"
        if not name_ok.fullmatch(key) or len(key) > limits.max_name:
            out.append(Finding(
                "N023-environment-limits", "error",
                f"environment variable name {key[:40]!r}: SageMaker accepts names matching "
                f"{limits.name_pattern} of at most {limits.max_name} characters",
                "rename it with ASCII letters, digits and underscores, not starting with a digit", path))
        elif len(value) > limits.max_value:
            grown = "" if spec.environment.get(key) == value else " once the orchestrator's additions are in"
            out.append(Finding(
                "N023-environment-limits", "error",
                f"environment {key}: {len(value)} characters{grown}; SageMaker accepts values of at most "
                f"{limits.max_value}",
                "shorten it, or ship the setting inside the job instead", path))
    return out


# A botocore pattern of one repeated character class; \p{X} names a Unicode category (L, Z, N...).
_CLASS = re.compile(r"^\^?\(?\[(?P<body>(?:\\p\{[A-Z]\}|\\.|[^\]\\])*)\]\*\)?\$?$")


_CLASS_ITEM = re.compile(r"\\p\{(?P<category>[A-Z])\}|\\(?P<escaped>.)|(?P<plain>[^\\])")


def pattern_characters(pattern: str):
    """A test of one character against a botocore pattern of the form `([...]*)` (one character
    class, repeated), whose class may hold Unicode categories (backslash-p{X}), which Python's
    `re` does not know. ValueError for a pattern of another shape."""
    import unicodedata

    found = _CLASS.match(pattern)
    if not found:
        raise ValueError(f"not a repeated character class: {pattern!r}")
    categories, chars = set(), set()
    for item in _CLASS_ITEM.finditer(found["body"]):
        if item["category"]:
            categories.add(item["category"])
        else:
            chars.add(item["escaped"] or item["plain"])
    return lambda c: c in chars or unicodedata.category(c)[0] in categories


def tags(spec: JobSpec) -> list[Finding]:
    """N029: tag keys and values against botocore's TagKey/TagValue patterns."""
    if not spec.tags:
        return []
    shapes = catalog.sagemaker_tag_shapes()
    tests = {name: pattern_characters(shapes[name]["pattern"]) for name in ("TagKey", "TagValue")}
    out = []
    for key, value in spec.tags.items():
        for what, text, test in (("key", key, tests["TagKey"]), ("value", value, tests["TagValue"])):
            bad = sorted({c for c in text if not test(c)})
            if bad:
                out.append(Finding(
                    "N029-tag-characters", "error",
                    f"tag {key!r}: its {what} has {', '.join(repr(c) for c in bad)}, which SageMaker refuses in tags "
                    "(it accepts letters, digits, white space and _ . : / = + - @)",
                    f"replace {' and '.join(repr(c) for c in bad)} in the tag's {what}, e.g. with '-'",
                    f"tags.{key}"))
    return out
