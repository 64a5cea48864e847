"""Loading job specs: a file (or text) read, parsed with positions, merged with the `infra:`
outputs file it names, and validated into a frozen `JobSpec` with every problem located.
See the package docstring for the contract.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from orchestrator.errors import Problem, SpecError
from orchestrator.spec.files import UnreadableSpec, close_spec_name, read_spec_file, read_text
from orchestrator.spec.models import REGION_PATTERN, JobSpec
from orchestrator.spec.source import SourceMap, dotted, read_yaml, split_path


def validate(model: type[BaseModel], data: Any, smap: SourceMap) -> BaseModel:
    """Validate plain data against `model`, raising SpecError with located problems."""
    if not isinstance(data, Mapping):
        raise SpecError([Problem(smap.file, 1, 1, "", f"expected a mapping of fields, got {type(data).__name__}")])
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        from orchestrator.spec.problems import fields_absent, problems_from

        problems = problems_from(exc, model, smap)
        if model is JobSpec:
            seen = {p.path for p in problems}
            problems += [Problem(*smap.where(loc), dotted(loc), message)
                         for loc, message in fields_absent(data) if dotted(loc) not in seen]
        raise SpecError(problems) from None
    except RecursionError:
        raise SpecError([Problem(smap.file, 1, 1, "", "the document is nested too deeply")]) from None


INFRA_FIELDS = {
    "role_arn": ("role_arn",),
    "compile_cache_uri": ("compile_cache", "uri"),
    "output_uri": ("output", "uri"),
}
# Keys `infra outputs --write` writes besides INFRA_FIELDS (region is used; the rest is a record).
INFRA_OTHER_KEYS = ("region", "bucket", "stack_name")


# The top-level keys that tell a job spec from a sweep spec (see `document_kind`).
SWEEP_KEYS = {"sweep", "grid", "random", "variants"}
# SweepSpec's fields (a test keeps them equal): a job spec is told from a sweep without building
# the sweep models.
SWEEP_FIELDS = frozenset({"sweep", "base", "grid", "random", "variants", "concurrency", "failover", "schedule",
                          "budget", "max_retries"})


def document_kind(data: Any) -> str | None:
    """"sweep", "job", or None (not clearly either) for a parsed document.

    A sweep has `base:` and any of sweep:, grid:, random:, variants:; a job spec has none of those and a
    field only job specs have. Validating one as the other gives a screen of unknown fields.
    """
    if not isinstance(data, Mapping):
        return None
    keys = {k for k in data if isinstance(k, str)}
    if "base" in keys and keys & SWEEP_KEYS:
        return "sweep"
    if "base" not in keys and not keys & SWEEP_KEYS and keys & (set(JobSpec.model_fields) - SWEEP_FIELDS):
        return "job"
    return None


def _apply_infra(data: dict, base_dir: Path, smap: SourceMap) -> tuple[dict, list[Problem], str | None]:
    """Fill fields the spec leaves out from an infra outputs file (see `infra outputs --write`):
    (the merged data, problems found that validation will not, and a hint for them).

    The filled paths are recorded in `smap.borrowed`, so that a problem with a filled value is
    located in the infra file, at its own line. The problems (the infra file's region is no
    region; the spec's region differs from the stack's) are reported with validation's own,
    not instead of them.
    """
    ref = data.get("infra")
    if not isinstance(ref, str):
        return data, [], None
    path = base_dir / ref
    line, col = smap.find(("infra",))
    hint = "run `python -m orchestrator infra outputs --write <path>` after deploying the stack"
    try:
        text = read_text(path)
    except UnreadableSpec as exc:
        close = close_spec_name(path, referrer=smap.file) if exc.missing else None
        where = f"did you mean infra: {Path(ref).parent / close}? If not, " if close else ""
        raise SpecError([Problem(smap.file, line, col, "infra", f"infra outputs {path} {exc}")],
                        hint="; ".join(filter(None, (exc.hint, where + hint)))) from None
    outputs, infra_map = read_yaml(text, str(path))
    if not isinstance(outputs, Mapping):
        raise SpecError([Problem(smap.file, line, col, "infra", f"{path} is not a mapping of outputs")], hint=hint)
    known = [*INFRA_FIELDS, *INFRA_OTHER_KEYS]
    unknown = [key for key in outputs if key not in known]
    if unknown:
        # A misspelt key would otherwise be skipped, and the field it was meant to fill reported
        # missing in the spec instead.
        problems = []
        for key in unknown:
            key_line, key_col = infra_map.find((key,))
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            problems.append(Problem(str(path), key_line, key_col, str(key),
                                    "unknown key in the infra outputs file"
                                    + (f"; did you mean {close[0]!r}?" if close else "")))
        raise SpecError(problems, hint=f"an infra outputs file holds {', '.join(known)}; {hint}")
    merged = json.loads(json.dumps(data, default=str))
    fills = dict(INFRA_FIELDS)
    from orchestrator.spec.problems import backend_of

    backend = backend_of(merged)
    if backend is not None:
        fills = backend.infra_fields(fills)
    for out_key, target in fills.items():
        value = outputs.get(out_key)
        if value is None:
            continue
        parent = merged
        for part in target[:-1]:
            if not isinstance(parent.get(part, {}), dict):
                break
            parent = parent.setdefault(part, {})
        else:
            if target[-1] not in parent:
                parent[target[-1]] = value
                smap.borrowed[target] = (infra_map, (out_key,))
    stack_region = outputs.get("region")
    if "region" not in merged and isinstance(stack_region, str):
        merged["region"] = stack_region
        smap.borrowed[("region",)] = (infra_map, ("region",))
        return merged, [], None
    if "region" not in outputs:
        return merged, [], None
    if not isinstance(stack_region, str) or not re.fullmatch(REGION_PATTERN, stack_region):
        # Not filled in (the spec names its region), so validation never sees it: said here.
        region_line, region_col = infra_map.find(("region",))
        return merged, [Problem(str(path), region_line, region_col, "region",
                                f"{stack_region!r} is not valid: expected an AWS region such as us-east-1")], (
            f"fix region: in {path} (the region of the stack it describes), or run `python -m orchestrator infra "
            "outputs --write` again")
    if merged.get("region") != stack_region and any(target != ("region",) for target in smap.borrowed):
        # The bucket, the role's grants and the operator policy all live in the stack's region.
        line, col = smap.find(("region",))
        return merged, [Problem(smap.file, line, col, "region",
                                f"region {merged.get('region')} differs from the region of the stack whose "
                                f"outputs {ref} fills in ({stack_region}): its bucket, role grants and image "
                                "access are for that region")], (
            f"remove region: to use {stack_region}, or deploy the stack in {merged.get('region')} and point infra: "
            "at its outputs")
    return merged, [], None


def job_from_data(data: Any, smap: SourceMap, base_dir: Path) -> JobSpec:
    """A parsed job spec document (with its source map) merged with its `infra:` file (a path
    relative to `base_dir`) and validated; SpecError with every problem located."""
    found: list[Problem] = []
    hint = None
    if isinstance(data, dict):
        data, found, hint = _apply_infra(data, base_dir, smap)
    try:
        spec = validate(JobSpec, data, smap)
    except SpecError as exc:
        if not found:
            raise
        raise SpecError(found + exc.problems, hint="; ".join(filter(None, (hint, exc.hint)))) from None
    if found:
        raise SpecError(found, hint=hint)
    spec._source = smap
    return spec


def loads(text: str, filename: str = "<string>", base_dir: Path | None = None) -> JobSpec:
    """Load a job spec from YAML text. See the package docstring for the contract."""
    data, smap = read_yaml(text, filename)
    if document_kind(data) == "sweep":
        # A sweep with a schedule runs on its cron; `sweep run` would run it once, now.
        run = (f"follow its schedule with `python -m orchestrator schedule run {filename}` (or "
               f"`schedule crontab {filename}` for system cron)" if isinstance(data, Mapping) and data.get("schedule")
               else f"run it with `python -m orchestrator sweep run {filename}`")
        raise SpecError([Problem(filename, 1, 1, "", "this is a sweep spec, not a job spec")],
                        hint=f"check it with `python -m orchestrator sweep plan {filename}`, {run}")
    return job_from_data(data, smap, base_dir or Path.cwd())


def load(path: str | Path) -> JobSpec:
    """Load a job spec file. See the package docstring for the contract."""
    path = Path(path)
    return loads(read_spec_file(path), str(path), base_dir=path.parent)


def with_overrides(spec: JobSpec, overrides: Mapping[str, Any]) -> JobSpec:
    """A new spec with dotted-path overrides applied and everything validated again.

    Raises SpecError naming the override path when the result does not validate.
    """
    data = spec.model_dump(mode="json")
    for path, value in overrides.items():
        parent = data
        parts = split_path(path)
        for part in parts[:-1]:
            parent = parent.setdefault(part, {})
        parent[parts[-1]] = value
    smap = spec._source or SourceMap("<overrides>")
    try:
        new = JobSpec.model_validate(data)
    except ValidationError as exc:
        from orchestrator.spec.problems import problems_from

        # The spec file's text at an overridden path is the value replaced, not the offending one.
        raise SpecError(problems_from(exc, JobSpec, _Overridden(smap, [split_path(d) for d in overrides]))) from None
    new._source = smap
    return new


class _Overridden:
    """A spec's source map as seen through overrides: the same locations, but no source text
    for an overridden path (the file's text there is the value the override replaced)."""

    def __init__(self, smap: SourceMap, paths: list[tuple]):
        self.smap = smap
        self.paths = paths

    def _overridden(self, path: tuple) -> bool:
        path = tuple(str(p) for p in path)
        return any(path[:len(p)] == p for p in self.paths)

    def where(self, path: tuple, prefer_key: bool = False) -> tuple[str, int, int]:
        return self.smap.where(path, prefer_key)

    def raw(self, path: tuple) -> str | None:
        return None if self._overridden(path) else self.smap.raw(path)

    def find(self, path: tuple, prefer_key: bool = False) -> tuple[int, int]:
        return self.smap.find(path, prefer_key)

    @property
    def file(self) -> str:
        return self.smap.file


def json_schema() -> dict:
    """The JSON Schema of job specs (for editors), built from the field descriptions."""
    return JobSpec.model_json_schema()
