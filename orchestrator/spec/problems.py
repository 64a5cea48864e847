"""Located errors: pydantic's validation errors as problems at a file, line, column and field,
in words (what a pattern means, how YAML read an unquoted value, did-you-mean for unknown keys).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from orchestrator.errors import Problem
from orchestrator.spec.models import (
    ARCH_PATTERN,
    DATA_PATTERN,
    INSTANCE_PATTERN,
    NAME_PATTERN,
    REGION_PATTERN,
    ROLE_PATTERN,
    SDK_PATTERN,
    TRAINING_PLAN_PATTERN,
    URI_PATTERN,
    uri_reason,
)
from orchestrator.spec.source import SourceMap, dotted, split_path


def _foreign(value) -> str | None:
    """The first character of `value` outside printable ASCII, named (a Cyrillic "а" looks like
    the Latin "a" it replaced), or None."""
    import unicodedata

    if not isinstance(value, str):
        return None
    for i, char in enumerate(value):
        if not (" " <= char < "\x7f"):
            name = unicodedata.name(char, "") or "a control character"
            return f"character {i + 1}, {char!r} (U+{ord(char):04X} {name}), is not ASCII"
    return None


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str] | None:
    """Field names of the sub-model that `loc` points into, for "did you mean"."""
    current: Any = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        info = current.model_fields.get(str(part))
        if info is None:
            return None
        current = info.annotation
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return None


# What each pattern means, in words: pydantic's own message quotes the regex.
PATTERN_HINTS = {
    NAME_PATTERN: "letters, digits and single dashes (no spaces or underscores), starting and ending "
                  "with a letter or digit",
    URI_PATTERN: "s3://BUCKET/PREFIX (bucket: 3-63 lowercase letters, digits, dots, dashes) or "
                 "file:///ABSOLUTE/PATH",
    ROLE_PATTERN: "an IAM role ARN such as arn:aws:iam::123456789012:role/NAME",
    REGION_PATTERN: "an AWS region such as us-east-1",
    INSTANCE_PATTERN: "a SageMaker instance type such as ml.trn1.2xlarge (batch: an EC2 type such as inf2.xlarge)",
    ARCH_PATTERN: "a timm ViT architecture such as vit_base_patch16_224",
    SDK_PATTERN: "a Neuron SDK version such as 2.30.0",
    TRAINING_PLAN_PATTERN: "a SageMaker training plan ARN such as "
                           "arn:aws:sagemaker:us-east-1:123456789012:training-plan/NAME",
    DATA_PATTERN: "synthetic, s3://BUCKET/PREFIX (bucket: 3-63 lowercase letters, digits, dots, dashes; "
                  "the prefix may be left out) or file:///ABSOLUTE/PATH",
}


def problems_from(exc: ValidationError, model: type[BaseModel], smap: SourceMap) -> list[Problem]:
    """Turn pydantic's errors into located problems with readable reasons."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(str(p) for p in err["loc"])
        kind = err["type"]
        message = err["msg"]
        prefer_key = False
        if kind == "cross_field":
            # One error may carry several (see `models.cross_fields`): each is located at its own field.
            for field_path, each in err["ctx"].get("all", ((err["ctx"]["field"], err["ctx"]["message"]),)):
                at = loc + (split_path(field_path) if isinstance(field_path, str) else tuple(field_path))
                problems.append(Problem(*smap.where(at, prefer_key=not isinstance(field_path, str)), dotted(at), each))
            continue
        elif kind == "extra_forbidden":
            prefer_key = True
            known = _fields_at(model, loc[:-1]) or []
            close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
            message = f"unknown field {loc[-1]!r}"
            message += f"; did you mean {close[0]!r}?" if close else (
                f"; expected one of: {', '.join(known)}" if known else "")
        elif kind == "missing":
            message = "required field is missing"
        elif kind == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") in PATTERN_HINTS:
            pattern = err["ctx"]["pattern"]
            why = uri_reason(err.get("input")) if pattern in (URI_PATTERN, DATA_PATTERN) else None
            foreign = _foreign(err.get("input"))
            message = (f"{err.get('input')!r} is not valid: {why or f'expected {PATTERN_HINTS[pattern]}'}"
                       + (f"; {foreign}" if foreign else ""))
        elif kind == "model_type" or kind == "dict_type":
            message = f"expected a mapping, got {type(err.get('input')).__name__}"
            if loc == ("schedule",) and isinstance(err.get("input"), str):
                message += f'; write schedule: {{cron: "{err["input"]}"}}'
        elif kind == "bool_not_number":
            raw = smap.raw(loc)
            message = f"expected a number, got a boolean ({raw})" if raw else "expected a number, got a boolean"
        elif kind in ("int_type", "float_type", "bool_type"):
            message = _strict_hint(kind, err.get("input"), smap.raw(loc)) or message
        elif kind == "int_out_of_range":
            raw = smap.raw(loc) or str(err.get("input"))
            shown = raw if len(raw) <= 30 else f"{raw[:12]}...{raw[-6:]} ({len(raw)} digits)"
            message = f"{shown} is out of range: a number here is at most {err['ctx']['limit']}"
        elif kind == "finite_number":
            message = f"must be a finite number, got {smap.raw(loc) or err.get('input')}"
        elif kind in ("literal_error", "string_type", "enum"):
            message = _unquoted_hint(err, smap.raw(loc), _field_pattern(model, loc)) or message
        file, line, col = smap.where(loc, prefer_key=prefer_key)
        problems.append(Problem(file, line, col, dotted(loc), message))
    return problems



def _strict_hint(kind: str, value: Any, raw: str | None) -> str | None:
    """For a number or yes/no field given something else: what was given, and what to write.
    Numbers and booleans are strict: the text '30' is not 30, the text "yes" is not true."""
    wanted = {"int_type": "an integer", "float_type": "a number", "bool_type": "true or false"}[kind]
    if isinstance(value, str) and len(value) > 40:
        return f"expected {wanted}, got text of {len(value)} characters ({value[:20]!r}...)"
    if isinstance(value, str):
        plain = {"true": "true", "yes": "true", "on": "true", "false": "false", "no": "false", "off": "false"}
        if kind == "bool_type":
            fix = f"; write {plain[value.lower()]} without quotes" if value.lower() in plain else ""
        else:
            fix = f"; write {value.strip()} without quotes" if re.fullmatch(r"\s*[-+]?[0-9][0-9_.eE+-]*\s*", value) \
                else ""
        return f"expected {wanted}, got the text {value!r}{fix}"
    if isinstance(value, float) and kind == "int_type":
        return f"expected {wanted}, got {raw or value}"
    if kind == "bool_type" and not isinstance(value, bool):
        return f"expected {wanted}, got {raw or value!r}"
    return None


def _field_pattern(model: type[BaseModel], loc: tuple) -> str | None:
    """The regex a text field at `loc` must match, if it has one (for quoting hints)."""
    current: Any = model
    for i, part in enumerate(loc):
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return None
        if i == len(loc) - 1:
            return next((m.pattern for m in field.metadata if getattr(m, "pattern", None)), None)
        candidates = [field.annotation, *getattr(field.annotation, "__args__", ())]
        current = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return None


def _unquoted_hint(err: dict, raw: str | None, pattern: str | None = None) -> str | None:
    """For a text field given a boolean or a number: how YAML read it and how to write it.

    YAML 1.1 reads unquoted yes/no/on/off/true/false as booleans and 2.30 as the number 2.3,
    so `mode: off` reaches the model as False; the user meant the word. Quoting is suggested
    only where the quoted text would pass the field's pattern; otherwise the pattern's own
    description says what to write (`neuron_sdk: 2.30` needs "2.30.0").
    """
    value = err.get("input")
    expected = err.get("ctx", {}).get("expected")
    if isinstance(value, bool):
        got = f"got {str(value).lower()}"
        if raw is None:
            return f"{got}; if you meant a word, write it in quotes"
        why = f"{got} (YAML reads unquoted {raw} as a boolean)"
        if expected is None or f"'{raw}'" in expected:
            return f'{why}; write "{raw}" in quotes'
        return f"{why}; expected {expected}"
    if isinstance(value, (int, float)) and expected is None:
        got = f"expected text, got the number {value}"
        if raw is not None and raw != str(value):
            got += f" (YAML read {raw} as a number)"
        text = raw if raw is not None else str(value)
        if pattern is not None and not re.search(pattern, text):
            return f"{got}; write it in quotes, as {PATTERN_HINTS.get(pattern, f'text matching {pattern}')}"
        return f'{got}; write "{text}" in quotes'
    return None



def fields_absent(data: Mapping) -> list[tuple[tuple[str, ...], str]]:
    """The fields the spec's backend needs that `data` leaves out altogether, read from the raw
    data (`Backend.missing`): pydantic runs JobSpec's cross-field checks only when every field
    is valid, so with another problem in the file these would otherwise surface one round later."""
    backend = backend_of(data)
    return backend.missing(data) if backend is not None else []


def backend_of(data: Mapping):
    """The class of the backend the raw spec data names (default sagemaker), None for a name
    the registry does not know (the model reports it): what the loader asks of the backend
    before the spec is a model (`Planning.missing`, `Planning.infra_fields`)."""
    from orchestrator.backends import registry

    name = data.get("backend", "sagemaker")
    return registry.backend_class(name) if isinstance(name, str) and name in registry.names() else None
