"""What AWS accepts of a request, checked on this machine before anything is sent.

Two sources, nothing else:
- botocore's service model of the operation (its input shape and every shape it reaches): every
  string's minimum and maximum length, pattern and enum, every number's range, every list's
  and map's size, walked over the whole request. botocore's own parameter validation checks
  types and minimums only, so a request over a maximum would leave the laptop and be refused.
- `data/aws_limits.json`: documented limits no model holds (CloudFormation's 51,200-byte
  TemplateBody, S3's 1,024-byte key, in a request's s3:// URIs too, ...), each with its source.

`violations(service, operation, params)` lists what AWS would refuse (pure, no AWS call);
`raise_for(spec, violations, field_of)` makes them a SpecError (exit 2) naming, for each, the
spec field it came from, the limit and its source; `check_uris` does the S3-key part alone,
without botocore (the `validate` fast path never imports it). The tests run `violations` on
every call that reaches their moto server (tests/aws_contract_hook.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from orchestrator.errors import InputError, Problem, SpecError

LIMITS_FILE = Path(__file__).with_name("data") / "aws_limits.json"
# A service model's patterns are Java regular expressions, read with the `regex` module; any it
# cannot read are counted in `unreadable_patterns` and not checked. A value must match one
# whole, as the API references print them (^...$) and Java's Pattern.matches reads them.
_UNREADABLE: set[str] = set()


class Violation(NamedTuple):
    """One thing AWS would refuse: where in the request (`path`, dotted, list items [i], map
    values .KEY), what is wrong, and the limit's source."""

    path: str
    problem: str
    source: str

    def render(self) -> str:
        return f"{self.path}: {self.problem} (source: {self.source})"


# --- the documented limits ------------------------------------------------------------------


@lru_cache(maxsize=1)
def limits() -> tuple[dict, ...]:
    """The table of documented limits (`data/aws_limits.json`), each with "id" and "source"."""
    return tuple(json.loads(LIMITS_FILE.read_text())["limits"])


def limit(limit_id: str) -> dict:
    return next(entry for entry in limits() if entry["id"] == limit_id)


def _applies(entry: Mapping, service: str, operation: str) -> bool:
    return entry["service"] in ("*", service) and ("*" in entry["operations"] or operation in entry["operations"])


def s3_key(uri: str) -> str | None:
    """The key of an s3:// URI (what follows the bucket), None for anything else."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        return None
    return uri[len("s3://"):].partition("/")[2]


def s3_key_problem(uri: str) -> str | None:
    """Why S3 would refuse the key of `uri`, or None (also None for a URI that is not s3://)."""
    key = s3_key(uri)
    if key is None:
        return None
    maximum = limit("s3-uri-key")["s3_uri_key_max_bytes"]
    size = len(key.encode("utf-8"))
    if size > maximum:
        return f"its S3 key is {size} bytes of UTF-8; S3 allows at most {maximum}"
    return None


def _leaves(params: Any, path: str = "") -> Iterable[tuple[str, Any]]:
    """(path, value) of every scalar in `params`; list items as [i], map values as .KEY."""
    if isinstance(params, Mapping):
        for key, value in params.items():
            yield from _leaves(value, f"{path}.{key}" if path else str(key))
    elif isinstance(params, list | tuple):
        for index, value in enumerate(params):
            yield from _leaves(value, f"{path}[{index}]")
    else:
        yield path, params


def _generic(path: str) -> str:
    return re.sub(r"\[\d+\]", "[]", path)


WHOLE = "(request)"  # the `param` of a limit on the whole request


def _whole_value(entry: Mapping, params: Mapping) -> list[Violation]:
    """A limit on the whole value at `entry["param"]` (a dotted path, or the whole request),
    serialized as compact JSON, as the services count it."""
    value: Any = params
    if entry["param"] != WHOLE:
        for part in entry["param"].split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return []
    found = []
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for key, unit, size in (("max_json_chars", "characters of JSON", len(text)),
                            ("max_json_bytes", "bytes of JSON", len(text.encode("utf-8")))):
        if key in entry and size > entry[key]:
            found.append(Violation("payload" if entry["param"] == WHOLE else entry["param"], f"{size:,} {unit}; at most {entry[key]:,} allowed: "
                                   f"{size - entry[key]:,} over", entry["source"]))
    if "max_entries" in entry and isinstance(value, Mapping | list):
        counted = [k for k in value if not str(k).lower().startswith(entry.get("ignored_prefix") or "\0")] \
            if isinstance(value, Mapping) else list(value)
        if len(counted) > entry["max_entries"]:
            found.append(Violation(entry["param"], f"{len(counted)} entries; at most {entry['max_entries']} allowed: "
                                   f"{len(counted) - entry['max_entries']} over", entry["source"]))
    return found


def table_violations(service: str, operation: str, params: Mapping) -> list[Violation]:
    """What the documented-limits table refuses in `params`."""
    found = []
    for entry in limits():
        if not _applies(entry, service, operation):
            continue
        if {"max_json_chars", "max_json_bytes", "max_entries"} & set(entry):
            found += _whole_value(entry, params)
            continue
        source = entry["source"]
        for path, value in _leaves(params):
            if "s3_uri_key_max_bytes" in entry:
                problem = s3_key_problem(value)
                if problem:
                    found.append(Violation(path, problem, source))
                continue
            if _generic(path) != entry["param"] or not isinstance(value, str | bytes):
                continue
            data = value.encode("utf-8") if isinstance(value, str) else value
            if "max_bytes" in entry and len(data) > entry["max_bytes"]:
                found.append(Violation(path, f"{len(data)} bytes; at most {entry['max_bytes']} allowed", source))
            if "max_chars" in entry and len(value) > entry["max_chars"]:
                found.append(Violation(path, f"{len(value)} characters; at most {entry['max_chars']} allowed",
                                       source))
            if "pattern" in entry and isinstance(value, str) and not re.search(entry["pattern"], value):
                found.append(Violation(path, f"{value[:60]!r} does not match {entry['pattern']}", source))
            if "forbidden_prefix" in entry and isinstance(value, str) and value.startswith(entry["forbidden_prefix"]):
                found.append(Violation(path, f"{value!r} starts with {entry['forbidden_prefix']}, which is reserved",
                                       source))
    return found


# --- botocore's service model ---------------------------------------------------------------


# The members of a shape the walk reads; the rest (documentation, locations) is not cached.
_KEPT = ("type", "min", "max", "pattern", "enum")


def _input_shapes(service: str, operation: str, side: str = "input") -> dict:
    """{"input": the operation's input shape name (None: no input), "shapes": {name: shape}}
    for every shape reachable from it, constraints only: read from botocore's model once per
    botocore version and kept in ORCHESTRATOR_HOME (`catalog.botocore_cached`), because
    importing botocore's session and loading a large model (SageMaker's) would cost `plan`
    about as much as everything else it does. `side` "output": the same of its answer."""
    from orchestrator import catalog

    name = f"botocore-input-{service}-{operation}" if side == "input" else f"botocore-{side}-{service}-{operation}"
    return catalog.botocore_cached(name, lambda: _reachable(service, operation, side))


def _reachable(service: str, operation: str, side: str = "input") -> dict:
    import botocore.loaders

    model = botocore.loaders.create_loader().load_service_model(service, "service-2")
    every = model["shapes"]
    start = (model["operations"][operation].get(side) or {}).get("shape")
    kept: dict[str, dict] = {}
    todo = [start] if start else []
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        raw = every[name]
        shape = {key: raw[key] for key in _KEPT if key in raw}
        refs = {}
        if raw["type"] == "structure":
            shape["members"] = {member: ref["shape"] for member, ref in raw.get("members", {}).items()}
            refs = shape["members"]
        elif raw["type"] == "list":
            shape["member"] = raw["member"]["shape"]
            refs = {"member": shape["member"]}
        elif raw["type"] == "map":
            shape["key"], shape["value"] = raw["key"]["shape"], raw["value"]["shape"]
            refs = {"key": shape["key"], "value": shape["value"]}
        kept[name] = shape
        todo += [ref for ref in refs.values() if ref not in kept]
    return {"input": start, "shapes": kept}


@cache
def _compiled(pattern: str):
    # The `regex` module reads the Unicode classes (\p{L}, ...) the models' tag patterns use.
    import regex

    try:
        return regex.compile(pattern)
    except regex.error:
        _UNREADABLE.add(pattern)
        return None


def unreadable_patterns() -> frozenset[str]:
    """The model patterns met so far that the regex module cannot read (not checked)."""
    return frozenset(_UNREADABLE)


def model_source(service: str, operation: str, shape_name: str) -> str:
    from orchestrator import catalog

    side = "" if operation.endswith(" output") else " input"
    return f"botocore {catalog.botocore_version()} {service} service model, {operation}{side}, shape {shape_name}"


def model_violations(service: str, operation: str, params: Mapping) -> list[Violation]:
    """What botocore's model of `service`'s `operation` refuses in `params`: lengths, patterns,
    enums, ranges and sizes over the whole request (unknown members are botocore's own
    validation's business and are skipped here)."""
    model = _input_shapes(service, operation)
    found: list[Violation] = []
    if model["input"]:
        _walk(model["shapes"], model["input"], params, "", (service, operation), found)
    return found


def _walk(shapes: Mapping[str, dict], name: str, value: Any, path: str, where: tuple[str, str],
          found: list[Violation]) -> None:
    shape = shapes[name]
    kind = shape["type"]

    def bad(problem: str) -> None:
        found.append(Violation(path or "(request)", problem, model_source(*where, name)))

    if kind == "structure" and isinstance(value, Mapping):
        for member, ref in shape["members"].items():
            if member in value and value[member] is not None:
                _walk(shapes, ref, value[member], f"{path}.{member}" if path else member, where, found)
        return
    if kind == "list" and isinstance(value, list | tuple):
        _size(len(value), shape, "items", bad)
        for index, item in enumerate(value):
            _walk(shapes, shape["member"], item, f"{path}[{index}]", where, found)
        return
    if kind == "map" and isinstance(value, Mapping):
        _size(len(value), shape, "entries", bad)
        for key, item in value.items():
            _walk(shapes, shape["key"], key, f"{path} key {key!r}", where, found)
            _walk(shapes, shape["value"], item, f"{path}.{key}", where, found)
        return
    if kind == "string" and isinstance(value, str):
        _size(len(value), shape, "characters", bad)
        enum = shape.get("enum")
        if enum and value not in enum:
            bad(f"{value[:60]!r} is not one of {', '.join(enum[:12])}{' ...' if len(enum) > 12 else ''}")
        pattern = shape.get("pattern")
        compiled = _compiled(pattern) if pattern else None
        if compiled is not None and not compiled.fullmatch(value):
            bad(f"{value[:60]!r} does not match the pattern {pattern}")
        return
    if kind == "blob" and isinstance(value, str | bytes):
        _size(len(value.encode("utf-8") if isinstance(value, str) else value), shape, "bytes", bad)
        return
    if kind in ("integer", "long", "float", "double") and isinstance(value, int | float) \
            and not isinstance(value, bool):
        if "min" in shape and value < shape["min"]:
            bad(f"{value} is below the minimum {shape['min']}")
        if "max" in shape and value > shape["max"]:
            bad(f"{value} is above the maximum {shape['max']}")


def _size(size: int, meta: Mapping, unit: str, bad: Callable[[str], None]) -> None:
    if "min" in meta and size < meta["min"]:
        bad(f"{size} {unit}; at least {meta['min']} needed")
    if "max" in meta and size > meta["max"]:
        bad(f"{size} {unit}; at most {meta['max']} allowed")


def answer_violations(service: str, operation: str, answer: Mapping) -> list[Violation]:
    """What botocore's model of the operation's output refuses in `answer` (a parsed answer):
    the walk `model_violations` makes of a request, over the output shape. The tests run it on
    the answers they write by hand (botocore's Stubber), so a fake answer is one AWS could give."""
    model = _input_shapes(service, operation, "output")
    found: list[Violation] = []
    if model["input"]:
        _walk(model["shapes"], model["input"], answer, "", (service, f"{operation} output"), found)
    return found


def violations(service: str, operation: str, params: Mapping) -> list[Violation]:
    """Everything AWS would refuse in this request: botocore's model, then the limits table."""
    return model_violations(service, operation, params) + table_violations(service, operation, params)


# --- as the user's error --------------------------------------------------------------------


def raise_for(spec, found: list[Violation], field_of: Callable[[str], str | None], *,
              what: str) -> None:
    """SpecError (exit 2) for `found`, each problem located at the spec field `field_of(path)`
    names (None: the spec as a whole); nothing when `found` is empty. `what` says which
    request ("the CreateTrainingJob request")."""
    if not found:
        return
    problems = []
    cited: set[str] = set()
    for violation in found:
        field = field_of(violation.path) or ""
        file, line, column = spec.locate(field) if field else (spec.locate("name")[0], 0, 0)
        derived = f"{what}'s {violation.path} (derived from {field})" if field else f"{what}: {violation.path}"
        # Each source is quoted once: five paths over one limit must still fit a screen.
        source = "the same source" if violation.source in cited else violation.source
        cited.add(violation.source)
        problems.append(Problem(file or "<spec>", line, column, field,
                                f"{derived}: {violation.problem}; AWS would refuse it (source: {source})"))
    raise SpecError(problems, hint="shorten or change the field named; the limit is AWS's own")


def check_uris(spec, uris: Mapping[str, Iterable[tuple[str, str]]]) -> None:
    """SpecError (exit 2) when an S3 URI derived from a spec field has a key S3 would refuse.
    `uris`: spec field -> (what, uri) pairs derived from it (no botocore here)."""
    found = []
    for field, pairs in uris.items():
        for what, uri in pairs:
            problem = s3_key_problem(uri)
            if problem:
                found.append((field, Violation(what, problem, limit("s3-uri-key")["source"])))
    if found:
        by_path = {violation.path: field for field, violation in found}
        raise_for(spec, [violation for _, violation in found], by_path.get, what="the job")


def check_body(service: str, operation: str, params: Mapping, *, hint: str) -> None:
    """InputError (exit 2) when a request built from no spec (infra deploy's change set) has
    violations: each named with its limit and source."""
    found = violations(service, operation, params)
    if found:
        raise InputError(f"the {operation} request would be refused by AWS:\n"
                         + "\n".join(f"  {violation.render()}" for violation in found), hint=hint)
