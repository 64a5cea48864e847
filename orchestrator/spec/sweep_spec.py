"""Sweep specs: the models of a sweep file, and loading one with its base job spec.

A sweep names a base job spec (a path relative to the sweep file) and axes over the base's
dotted field paths: `grid` (every combination), `random` (seeded draws) and `variants` (a list
of linked overrides, each one point: fields that only make sense together, such as `backend`
with `instance.type`; crossed with the grid and the draws). `load_sweep(path)` returns a frozen `SweepSpec` (with the base spec
loaded) or raises SpecError with located problems: unknown paths (with "did you mean"),
paths that may not vary, duplicate or overlapping axes, a variant that sets `backend` without
`instance.type`, zero trials, a bad cron (checked by
`spec.cron_syntax`). Expanding the axes into trials (and checking each trial's
values) is `orchestrator.sweep`'s job.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, model_validator

from orchestrator.errors import Problem, SpecError
from orchestrator.spec.files import UnreadableSpec, close_spec_name, read_spec_file, read_text
from orchestrator.spec.loading import document_kind, job_from_data, validate
from orchestrator.spec.models import (
    INSTANCE_PATTERN,
    MAX_NAME,
    NAME_PATTERN,
    Float,
    Int,
    JobSpec,
    StrictModel,
    cross_field,
)
from orchestrator.spec.source import SourceMap, read_yaml

# Every trial of a sweep runs in one region (the sweep's ledger rows and listings are per
# region). `backend` varies only in `variants`, each with the instance type that fits it.
UNSWEEPABLE = {
    "backend": "an instance type fits one backend: vary backend together with instance.type, as a list of "
               "variants (variants: [{backend: sagemaker, instance.type: ml.trn1.2xlarge}, {backend: batch, "
               "instance.type: inf2.xlarge, role_arn: null}])",
    "region": "all trials of a sweep share one region",
    "infra": "infra outputs are applied when the base spec loads, not per trial",
    "mlflow": "every trial of a sweep logs to one MLflow experiment, as a child of the sweep's parent run",
}
MAX_TRIALS = 10_000


class RandomParam(StrictModel):
    """One randomly sampled axis: exactly one of uniform, loguniform, int, choice."""

    uniform: tuple[Float, Float] | None = Field(None, description="[low, high]: a float drawn uniformly.")
    loguniform: tuple[Float, Float] | None = Field(
        None, description="[low, high], both > 0: a float whose logarithm is drawn uniformly.")
    int_: tuple[Int, Int] | None = Field(None, alias="int", description="[low, high]: an integer, both ends included.")
    choice: list[Any] | None = Field(None, min_length=1, description="One of these values, each equally likely.")

    @model_validator(mode="after")
    def _one_kind(self) -> RandomParam:
        given = [k for k in ("uniform", "loguniform", "int_", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise cross_field("", "give exactly one of uniform, loguniform, int, choice")
        low_high = self.uniform or self.loguniform or self.int_
        if low_high is not None and low_high[0] > low_high[1]:
            raise cross_field(given[0].rstrip("_"), f"low {low_high[0]} is above high {low_high[1]}")
        if self.loguniform is not None and self.loguniform[0] <= 0:
            raise cross_field("loguniform", "loguniform bounds must be above 0")
        return self

    @property
    def kind(self) -> str:
        return next(k.rstrip("_") for k in ("uniform", "loguniform", "int_", "choice") if getattr(self, k) is not None)


class RandomSpec(StrictModel):
    trials: Int = Field(..., ge=1, le=MAX_TRIALS, description="Random trials (per grid point when a grid is given).")
    seed: Int = Field(0, ge=0, le=2**32 - 1, description="Seed of the sampler: same seed, same trials.")
    params: dict[str, RandomParam] = Field(..., min_length=1, description="Dotted field path -> distribution.")


class ScheduleSpec(StrictModel):
    cron: str = Field(..., min_length=1, description="Five-field cron expression (or @daily, @hourly, ...).")
    catchup: Literal["latest", "all", "none"] = Field(
        "latest",
        description="Ticks missed while the machine slept: latest submits only the most recent, all "
        "submits each (at most max_catchup), none skips them.",
    )
    max_catchup: Int = Field(24, ge=1, le=1000, description="catchup: all submits at most this many missed ticks.")
    timezone: str = Field("UTC", min_length=1, description="IANA time zone the cron is read in; tick ids are UTC.")
    # EventBridge Scheduler's FlexibleTimeWindow (Scheduler API reference: Mode OFF|FLEXIBLE,
    # MaximumWindowInMinutes 1-1440): 0 is Mode OFF.
    flexible_window_minutes: Int = Field(
        0, ge=0, le=1440,
        description="Cloud schedule only (schedule deploy): EventBridge Scheduler may start a run up to this many "
        "minutes after its fire time, spreading load; 0 starts it at the fire time. The run keeps the fire time's "
        "label (its job names). Not used by schedule run/tick.")


class SweepBudgetSpec(StrictModel):
    max_total_cost_usd: Float | None = Field(
        None, gt=0, description="Refuse a sweep whose trials' cost bounds add up to more; also caps retries.")


class SweepSpec(StrictModel):
    sweep: str = Field(..., min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN,
                       description="Sweep name: letters, digits and single dashes.")
    base: str = Field(..., min_length=1, description="Base job spec, relative to this file.")
    grid: dict[str, list[Any]] = Field(default_factory=dict,
                                       description="Dotted field path -> values; every combination is a trial.")
    random: RandomSpec | None = Field(None, description="Seeded random trials (crossed with the grid).")
    variants: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Linked overrides: each a mapping of dotted field path -> value applied together (one point, "
        "crossed with the grid and the random draws). The one place `backend` may vary, with instance.type "
        "in the same variant.")
    concurrency: Int = Field(4, ge=1, le=1000, description="Jobs of this sweep in flight at once, on any machine.")
    failover: dict[Literal["instance.type"], list[str]] = Field(
        default_factory=dict,
        description="On a capacity error, retry the trial with the next of these instance types.")
    schedule: ScheduleSpec | None = Field(None, description="Run the sweep on a cron schedule.")
    budget: SweepBudgetSpec = Field(default_factory=SweepBudgetSpec, description="Cost guard for the whole sweep.")
    max_retries: Int = Field(2, ge=0, le=10, description="Resubmissions of a trial after a retryable failure "
                             "(capacity, spot interruption, internal error); user errors are never retried.")

    _source: SourceMap | None = PrivateAttr(default=None)
    _path: Path | None = PrivateAttr(default=None)
    _base: JobSpec | None = PrivateAttr(default=None)

    @property
    def base_spec(self) -> JobSpec:
        """The loaded base job spec (set by `load_sweep`)."""
        if self._base is None:
            raise ValueError("this SweepSpec was not loaded with load_sweep; no base spec")
        return self._base

    @property
    def path(self) -> Path | None:
        return self._path

    def locate(self, *path: str) -> tuple[str, int, int]:
        """(file, line, column) of a path of YAML keys ("grid", "instance.type", "0")."""
        if self._source is None:
            return ("", 0, 0)
        line, col = self._source.find(tuple(path))
        return (self._source.file, line, col)

    def axis_paths(self) -> list[str]:
        """Every varied dotted path: the variants' (first seen first), then the grid's in file
        order, then the random ones."""
        linked = list(dict.fromkeys(path for variant in self.variants for path in variant))
        return linked + list(self.grid) + (sorted(self.random.params) if self.random else [])



def job_field_paths(model: type[BaseModel] = JobSpec, prefix: str = "") -> dict[str, Any]:
    """Dotted path -> annotation of every leaf field of `model` (sub-models are walked)."""
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        dotted = f"{prefix}{name}"
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out.update(job_field_paths(annotation, dotted + "."))
        else:
            out[dotted] = annotation
    return out


def _check_axis_path(dotted: str, where: tuple, smap: SourceMap, *, linked: bool = False) -> Problem | None:
    """None when `dotted` may vary (`linked`: inside a variant, where `backend` may), else the problem."""
    leaves = job_field_paths()
    line, col = smap.find(where, prefer_key=True)
    parts = dotted.split(".")
    if not all(parts):
        return Problem(smap.file, line, col, dotted, f"{dotted!r} is not a field path: it has an empty part; "
                                                     "name a field with dots between its parts, e.g. training.optimizer.lr")
    if dotted in leaves or (len(parts) == 2 and parts[0] in ("tags", "environment") and parts[1]):
        if parts[0] in UNSWEEPABLE and not (linked and dotted == "backend"):
            return Problem(smap.file, line, col, dotted, f"{dotted} cannot vary in a sweep: {UNSWEEPABLE[parts[0]]}")
        return None
    parent = ".".join(parts[:-1])
    siblings = {p.rsplit(".", 1)[-1]: p for p in leaves if (p.rsplit(".", 1)[0] if "." in p else "") == parent}
    if siblings:
        # The parent exists: suggest among its fields, as for an unknown key in a job spec.
        close = [siblings[c] for c in difflib.get_close_matches(parts[-1], list(siblings), n=1, cutoff=0.6)]
    else:
        close = difflib.get_close_matches(dotted, list(leaves), n=1, cutoff=0.6)
    if close:
        hint = f"; did you mean {close[0]!r}?"
    else:
        under = [p for p in leaves if p.startswith(parts[0] + ".")]
        hint = f"; fields under {parts[0]!r}: {', '.join(under)}" if under else ""
    return Problem(smap.file, line, col, dotted, f"{dotted!r} is not a field of the job spec{hint}")


def _sweep_problems(sweep: SweepSpec, smap: SourceMap) -> list[Problem]:
    """The checks pydantic cannot locate well: paths, overlaps, trial count, cron."""
    problems: list[Problem] = _variant_problems(sweep, smap)
    # A variant's paths are one axis: each path once, at its first variant.
    linked: dict[str, tuple] = {}
    for i, variant in enumerate(sweep.variants):
        for path in variant:
            linked.setdefault(path, ("variants", str(i), path))
    axes: list[tuple[str, tuple]] = [*linked.items(), *[(p, ("grid", p)) for p in sweep.grid]]
    if sweep.random:
        axes += [(p, ("random", "params", p)) for p in sweep.random.params]
    bad: set[str] = set()
    for dotted, where in axes:
        found = _check_axis_path(dotted, where, smap, linked=where[0] == "variants")
        if found:
            problems.append(found)
            bad.add(dotted)
    # Overlaps among valid paths only: '' and '.' are reported as not fields, not as each other's duplicate.
    for i, (a, where_a) in enumerate(axes):
        for b, where_b in axes[:i]:
            if a in bad or b in bad:
                continue
            if a == b or a.startswith(b + ".") or b.startswith(a + "."):
                line, col = smap.find(where_a, prefer_key=True)
                first = smap.find(where_b, prefer_key=True)[0]
                problems.append(Problem(smap.file, line, col, a, f"duplicate axis: {a} is also varied by "
                                        f"{'.'.join(where_b[:-1])} {b!r} (line {first})"))
    for dotted, values in sweep.grid.items():
        if not values:
            line, col = smap.find(("grid", dotted))
            problems.append(Problem(smap.file, line, col, f"grid.{dotted}",
                                    "an axis with no values gives zero trials; give at least one value"))
    grid_points = 1
    for values in sweep.grid.values():
        grid_points *= max(len(values), 1)
    total = grid_points * (sweep.random.trials if sweep.random else 1) * max(len(sweep.variants), 1)
    if total > MAX_TRIALS:
        line, col = smap.find(("grid",))
        problems.append(Problem(smap.file, line, col, "grid", f"{total} trials; at most {MAX_TRIALS}"))
    for dotted, values in sweep.failover.items():
        line, col = smap.find(("failover", dotted))
        if not values:
            problems.append(Problem(smap.file, line, col, f"failover.{dotted}", "give at least one fallback"))
        for i, value in enumerate(values):
            if not isinstance(value, str) or not re.fullmatch(INSTANCE_PATTERN, value):
                vline, vcol = smap.find(("failover", dotted, str(i)))
                problems.append(Problem(smap.file, vline, vcol, f"failover.{dotted}",
                                        f"{value!r} is not an instance type like ml.trn1.32xlarge"))
            elif value in values[:i]:
                # A type twice in the order would be tried twice, the second time for nothing.
                vline, vcol = smap.find(("failover", dotted, str(i)))
                problems.append(Problem(smap.file, vline, vcol, f"failover.{dotted}",
                                        f"{value} is already in the failover order (item {values.index(value) + 1}); "
                                        "list each instance type once"))
    if sweep.schedule is not None:
        problems += _schedule_problems(sweep.schedule, smap)
    return problems


def _variant_problems(sweep: SweepSpec, smap: SourceMap) -> list[Problem]:
    """Each variant sets at least one path, no path inside another, and `backend` only with
    `instance.type` (an instance type fits one backend)."""
    problems = []
    for i, variant in enumerate(sweep.variants):
        line, col = smap.find(("variants", str(i)))
        if not variant:
            problems.append(Problem(smap.file, line, col, f"variants.{i}",
                                    "an empty variant is the base spec; give the fields it sets"))
        paths = list(variant)
        for j, a in enumerate(paths):
            for b in paths[:j]:
                if a.startswith(b + ".") or b.startswith(a + "."):
                    aline, acol = smap.find(("variants", str(i), a), prefer_key=True)
                    problems.append(Problem(smap.file, aline, acol, a, f"{a} overlaps {b} in the same variant"))
        if "backend" in variant and "instance.type" not in variant:
            bline, bcol = smap.find(("variants", str(i), "backend"), prefer_key=True)
            problems.append(Problem(smap.file, bline, bcol, "backend",
                                    f"variant {i} sets backend without instance.type: an instance type fits one "
                                    "backend (ml.trn1.* on sagemaker, inf2.* on batch)"))
    return problems


def _schedule_problems(schedule: ScheduleSpec, smap: SourceMap) -> list[Problem]:
    """The cron and time zone, checked by `spec.cron_syntax`."""
    from orchestrator.spec.cron_syntax import cron_problem, timezone_problem

    problems = []
    why = cron_problem(schedule.cron.strip())
    if why:
        line, col = smap.find(("schedule", "cron"))
        problems.append(Problem(smap.file, line, col, "schedule.cron", why))
    why = timezone_problem(schedule.timezone)
    if why:
        line, col = smap.find(("schedule", "timezone"))
        problems.append(Problem(smap.file, line, col, "schedule.timezone", why))
    return problems


def loads_sweep(text: str, filename: str = "<string>", base_dir: Path | None = None) -> SweepSpec:
    """Load a sweep spec from YAML text, and its base job spec from `base_dir / base`."""
    data, smap = read_yaml(text, filename)
    if document_kind(data) == "job":
        raise SpecError([Problem(filename, 1, 1, "", "this is a job spec; a sweep needs base: and grid:/random:/variants:")],
                        hint=f"check it with `python -m orchestrator validate {filename}`, "
                             f"run it with `python -m orchestrator submit {filename}`")
    sweep = validate(SweepSpec, data, smap)
    problems = _sweep_problems(sweep, smap)
    if problems:
        raise SpecError(problems)
    base_path = (base_dir or Path.cwd()) / sweep.base
    line, col = smap.find(("base",))
    try:
        base_text = read_text(base_path)
    except UnreadableSpec as exc:
        close = close_spec_name(base_path, referrer=filename) if exc.missing else None
        where = f"did you mean base: {Path(sweep.base).parent / close}? " if close else ""
        raise SpecError([Problem(filename, line, col, "base", f"base job spec {base_path} {exc}")],
                        hint="; ".join(filter(None, (exc.hint, f"{where}base is a path relative to the sweep file")))) from None
    naming = Problem(filename, line, col, "base", f"the base job spec {base_path} named here does not load; "
                     "its problems follow")
    try:
        base_data, base_map = read_yaml(base_text, str(base_path))
        if document_kind(base_data) == "sweep":
            raise SpecError([Problem(filename, line, col, "base",
                                     f"base {base_path} is itself a sweep spec; base must name a job spec")])
        if not isinstance(base_data, Mapping):
            what = "empty" if base_data is None else f"a YAML {type(base_data).__name__}, not a mapping of fields"
            raise SpecError([Problem(filename, line, col, "base", f"base {base_path} is not a job spec: it is {what}")],
                            hint="base names the job spec the sweep varies (a YAML file with name:, backend:, ...), "
                                 "as a path relative to the sweep file")
        sweep._base = job_from_data(base_data, base_map, base_path.parent)
    except SpecError as exc:
        if exc.problems and exc.problems[0].file == filename:
            raise
        # A problem inside the base file: say first which sweep file, at which line, named it.
        raise SpecError([naming, *exc.problems], hint=exc.hint) from None
    sweep._source = smap
    # Text given without a file name has no path: a crontab line cannot point at "<string>".
    sweep._path = None if filename == "<string>" else Path(filename)
    return sweep


def load_sweep(path: str | Path) -> SweepSpec:
    """Load a sweep spec file and its base job spec. Raises SpecError with located problems."""
    path = Path(path)
    return loads_sweep(read_spec_file(path), str(path), base_dir=path.parent)
