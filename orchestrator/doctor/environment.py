"""Doctor rules about what the job sends beside its fields: the container environment (the
LNC it sets, N006; SageMaker's limits on it, N023; what a local process can receive, N031)
and the tags (the characters SageMaker accepts, N029)."""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING

from orchestrator import catalog
from orchestrator.doctor.finding import Finding

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec


def lnc_env(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """N006: NEURON_LOGICAL_NC_CONFIG or a compiler -lnc in `environment` that disagrees with
    the job's LNC (runtime and compiler must match)."""
    out = []
    lnc = target.lnc
    runtime_value = spec.environment.get("NEURON_LOGICAL_NC_CONFIG")
    if runtime_value is not None and runtime_value.strip() != str(lnc):
        out.append(Finding(
            "N006-lnc-env-mismatch", "error",
            f"environment sets NEURON_LOGICAL_NC_CONFIG={runtime_value} but the job's LNC is {lnc}; "
            "the runtime and the compiler's -lnc must match",
            "remove NEURON_LOGICAL_NC_CONFIG from environment and set instance.lnc (the orchestrator "
            "sets both the runtime variable and the compiler flag from it)",
            "environment.NEURON_LOGICAL_NC_CONFIG"))
    found = catalog.LNC_FLAG.search(spec.environment.get("NEURON_CC_FLAGS", ""))
    if found and found.group(1) != str(lnc):
        out.append(Finding(
            "N006-lnc-env-mismatch", "error",
            f"NEURON_CC_FLAGS compiles for LNC={found.group(1)} but the job's LNC is {lnc}; "
            "the runtime and the compiler must match",
            "remove the -lnc flag from NEURON_CC_FLAGS and set instance.lnc", "environment.NEURON_CC_FLAGS"))
    return out


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


# What the local job's processes get besides the spec's environment and the caller's own: the
# SM_* variables (SM_TRAINING_ENV repeats the hyperparameters and resource config), torchrun's
# and our own variables, and the command lines. Generous, so a spec that fits here fits there.
LOCAL_ENV_RESERVE = 64 * 1024


def exec_limits() -> tuple[int | None, int | None]:
    """(bytes one environment variable may take, "NAME=value" and its NUL; bytes all of a new
    process's arguments and environment may take) on this machine; None where unknown. Linux
    caps one string at MAX_ARG_STRLEN, 32 pages (linux/binfmts.h), and the whole at ARG_MAX
    (sysconf; a quarter of the stack limit); other systems have ARG_MAX only."""
    try:
        total = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError, AttributeError):
        total = None
    one = None
    if sys.platform.startswith("linux"):
        try:
            one = 32 * os.sysconf("SC_PAGESIZE")
        except (ValueError, OSError):
            one = 32 * 4096
    return one, (total if total and total > 0 else None)


def _env_bytes(items) -> int:
    """What `items` (name, value) take in a new process: "NAME=value" and a NUL each, and a pointer."""
    return sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 + 8 for k, v in items)


def local_environment(spec: JobSpec) -> list[Finding]:
    """N031: the spec's environment must reach the local job's processes, which inherit this
    process's environment too (the error otherwise: E2BIG at start, with no field named)."""
    one, total = exec_limits()
    out = []
    if one is not None:
        for key, value in spec.environment.items():
            size = _env_bytes([(key, value)]) - 8
            if size > one:
                out.append(Finding(
                    "N031-local-environment-size", "error",
                    f"environment {key[:40]}: {size} bytes; one environment variable of a process on this machine "
                    f"holds at most {one} bytes (Linux MAX_ARG_STRLEN), so the local job could not start",
                    "shorten it, or put the value in a file the job reads (a data.source folder) instead",
                    f"environment.{key}"))
    if total is not None and not out:
        own = _env_bytes(spec.environment.items())
        inherited = _env_bytes(os.environ.items())
        if own + inherited + LOCAL_ENV_RESERVE > total:
            out.append(Finding(
                "N031-local-environment-size", "error",
                f"environment: {own} bytes in all; with this process's own environment ({inherited} bytes, which "
                f"the job inherits) that is more than a process on this machine may receive ({total} bytes, "
                "ARG_MAX), so the local job could not start",
                "shorten the environment's values, or unset large variables in the shell that submits",
                "environment"))
    return out
