"""A sweep's trials: the grid crossed with the seeded random draws, each a full job spec.

Contract:
- `expand(sweep)` turns a `SweepSpec` into trials, in expansion order: every grid
  combination crossed with the random draws (`sample`: the same draws for the same seed).
  Identical trials are merged. A value that fails validation raises SpecError located at the
  sweep file's axis, naming the trial index, the field and the reason; every failing trial
  is listed (`MAX_LISTED_PROBLEMS` at most).
- `identify(sweep)` is the sweep's `names.Identity`, from its name and its trials.
- `shown(value)` is an override value as messages and tables show it (a grid value may be
  100 KB long).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator import names
from orchestrator.errors import InputError, Problem, SpecError
from orchestrator.names import Identity
from orchestrator.spec import JobSpec, RandomSpec, SweepSpec, spec_hash, with_overrides

MAX_LISTED_PROBLEMS = 50


@dataclass(frozen=True)
class Trial:
    """One point of the sweep: its index in expansion order, its overrides and full spec."""

    index: int
    trial_id: str
    overrides: dict[str, Any]
    spec: JobSpec
    spec_hash: str


def _round(value: float, low: float, high: float) -> float:
    """Six significant digits (readable plans, stable hashes), kept inside [low, high]."""
    return min(max(float(f"{value:.6g}"), low), high)


def sample(random_spec: RandomSpec) -> list[dict[str, Any]]:
    """The random draws: `trials` dicts of path -> value, the same for the same seed.

    Each draw takes one uniform number per parameter (parameters in sorted order) and maps
    it onto the distribution itself, so the result depends only on Python's Mersenne
    Twister, not on library sampling routines that change between versions.
    """
    rng = random.Random(random_spec.seed)
    draws = []
    for _ in range(random_spec.trials):
        draw: dict[str, Any] = {}
        for path in sorted(random_spec.params):
            param = random_spec.params[path]
            u = rng.random()
            if param.uniform is not None:
                low, high = param.uniform
                draw[path] = _round(low + u * (high - low), low, high)
            elif param.loguniform is not None:
                low, high = param.loguniform
                draw[path] = _round(math.exp(math.log(low) + u * (math.log(high) - math.log(low))), low, high)
            elif param.int_ is not None:
                low, high = param.int_
                draw[path] = low + min(int(u * (high - low + 1)), high - low)
            else:
                choices = param.choice or []
                draw[path] = choices[min(int(u * len(choices)), len(choices) - 1)]
        draws.append(draw)
    return draws


def points(sweep: SweepSpec) -> Iterator[tuple[dict[str, Any], dict[str, tuple]]]:
    """(overrides, path -> where in the sweep file each value came from), in trial order:
    variants outermost, then the grid's combinations, then the random draws."""
    axes = list(sweep.grid.items())
    draws = sample(sweep.random) if sweep.random else [{}]
    variants = list(enumerate(sweep.variants)) or [(None, {})]
    for number, variant in variants:
        vwhere = {path: ("variants", str(number), path) for path in variant}
        for combo in itertools.product(*[list(enumerate(values)) for _, values in axes]):
            grid = {path: value for (path, _), (_, value) in zip(axes, combo, strict=True)}
            where = {path: ("grid", path, str(i)) for (path, _), (i, _) in zip(axes, combo, strict=True)}
            for draw in draws:
                rwhere = {path: ("random", "params", path) for path in draw}
                yield {**variant, **grid, **draw}, {**vwhere, **where, **rwhere}


def problem_at(sweep: SweepSpec, where: dict[str, tuple], field_path: str, message: str) -> Problem:
    """A problem located at the axis that produced `field_path` (or the nearest one)."""
    chosen = None
    for path, location in where.items():
        if field_path == path or field_path.startswith(path + ".") or path.startswith(field_path + "."):
            chosen = location
            break
    if chosen is None:
        chosen = next(iter(where.values()), ("base",))
    file, line, col = sweep.locate(*chosen)
    return Problem(file or str(sweep.path or "<sweep>"), line, col, field_path, message)


# How much of one override value a message shows (a grid value may be a 100 KB string).
SHOWN_VALUE = 60


def shown(value: Any) -> str:
    """`value` as messages and tables show it: at most SHOWN_VALUE characters."""
    text = str(value)
    return text if len(text) <= SHOWN_VALUE else f"{text[:SHOWN_VALUE - 3]}... ({len(text)} characters)"


def describe_overrides(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k}={shown(v)}" for k, v in overrides.items()) or "base"


def raise_problems(problems: list[Problem], failing: int, what: str, hint: str) -> None:
    """Raise SpecError listing `problems` (at most MAX_LISTED_PROBLEMS), if there are any."""
    if not problems:
        return
    listed = problems[:MAX_LISTED_PROBLEMS]
    if len(problems) > len(listed):
        last = listed[-1]
        listed.append(Problem(last.file, 0, 0, "", f"... and {len(problems) - len(listed)} more problems"))
    raise SpecError(listed, hint=f"{failing} {what}; {hint}")


def expand(sweep: SweepSpec) -> tuple[list[Trial], list[tuple[int, int]]]:
    """The sweep's distinct trials, and (index, same-as-index) for each merged duplicate.

    Raises SpecError listing every trial whose values do not validate.
    """
    base = sweep.base_spec
    trials: list[Trial] = []
    duplicates: list[tuple[int, int]] = []
    seen: dict[str, int] = {}
    ids: dict[str, str] = {}
    problems: list[Problem] = []
    failing = 0
    for index, (overrides, where) in enumerate(points(sweep)):
        try:
            spec = with_overrides(base, overrides)
        except SpecError as exc:
            failing += 1
            for p in exc.problems:
                problems.append(problem_at(sweep, where, p.path,
                                            f"trial {index} ({describe_overrides(overrides)}): {p.message}"))
            continue
        digest = spec_hash(spec)
        if digest in seen:
            duplicates.append((index, seen[digest]))
            continue
        seen[digest] = index
        tid = names.trial_id(digest)
        if tid in ids and ids[tid] != digest:
            raise InputError(f"trials {seen[ids[tid]]} and {index} share the id {tid}",
                             hint="a 32-bit hash collision: change random.seed")
        ids[tid] = digest
        trials.append(Trial(index, tid, dict(overrides), spec, digest))
    raise_problems(problems, failing, "trial(s) do not validate", "fix the values named above")
    return trials, duplicates


def identity(sweep_name: str, trials: list[Trial], tick: datetime | None = None) -> Identity:
    """The identity of sweep `sweep_name` with these trials (`names.sweep_identity`)."""
    return names.sweep_identity(sweep_name, [t.spec_hash for t in trials], tick)


def identify(sweep: SweepSpec, tick: datetime | None = None) -> Identity:
    """The sweep's identity without planning (expands the trials, prepares nothing)."""
    trials, _ = expand(sweep)
    return identity(sweep.sweep, trials, tick)
