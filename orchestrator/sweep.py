"""Sweeps: many jobs from one spec, run to completion from a laptop that sleeps and crashes.

Contract:
- `expand(sweep)` turns a `SweepSpec` into trials: every grid combination crossed with the
  seeded random draws, each a full `JobSpec`. Identical trials are merged. A value that fails
  validation raises SpecError located at the sweep file's axis, naming the trial index, the
  field and the reason; every failing trial is listed.
- `plan(sweep)` doctor-checks every trial and every failover variant of it, and prepares
  each trial's first job (the exact request and its cost bound). Any doctor error refuses the
  whole sweep (SpecError listing the failing trials) before anything is submitted.
  `check_budget(plan)` refuses a plan above `budget.max_total_cost_usd`.
- Identity: the sweep id is `<sweep>-<8 hex>`, the hex hashing the sweep name and its trials'
  spec hashes (run policy such as concurrency or budget can change between runs without
  making a new sweep); a scheduled tick appends `-<YYYYMMDDHHMM>` (UTC). A trial id is `t`
  plus 8 hex of the trial's spec hash. A job name is `<sweep id>-<trial>` with `-r<N>` for
  the N-th resubmission; the sweep part is truncated (never the trial part) to keep it within
  63 characters. Every job carries the tags `orchestrator:sweep`, `orchestrator:trial` and
  (from `request`) `orchestrator:spec-hash`.
- `Runner` drives one ledger row per job through planned -> submitting -> submitted ->
  running -> completed | failed | stopped. The sweep's definition (its trials as JSON) is
  kept in the ledger's kv table, so `resume` needs only the sweep id. All decisions are
  derived from the ledger on every step, never from memory, so the runner can be killed at
  any instant and started again: a row left in `submitting` is reconciled by the backend
  (DescribeTrainingJob, ResourceInUse adopted) instead of being created twice, and a failed
  job whose retry row was not yet written gets it on the next step.
- Errors of the runner's own calls (`submit_error_kind`, from `aws.classify`): no usable
  credentials or access denied stop the run at once with the error (`sweep resume` continues
  once it is fixed); throttling, 5xx and network errors wait with jittered exponential
  backoff, at most `max_transient_retries` times in a row at one call site before the run
  stops the same way; a quota reached while other jobs of the sweep run waits without limit.
- Retries: throttling and ResourceLimitExceeded wait with jittered exponential backoff; a
  capacity error fails over to the next instance type of `failover` (a new job `-rN`);
  capacity, spot interruption and internal errors are resubmitted as `-rN` up to
  `max_retries`; user errors (validation, access denied, an algorithm error) never are.
  A retry that would take the sweep's cost bounds above its budget is not submitted.
- At most `concurrency` jobs are in flight, counting jobs of this sweep that another machine
  started (SageMaker: ListTrainingJobs by name, cross-checked by the sweep tag).
- SageMaker is the truth: a runner's first step on SageMaker writes into the ledger every
  attempt of each trial that SageMaker has and the ledger lacks (`adopt_remote`), so a sweep
  run from another machine or a fresh ORCHESTRATOR_HOME goes on from each trial's latest
  attempt.
- `save` writes nothing while another process of this machine holds the sweep's runner lock
  (InputError, exit 2): a refused `sweep run` leaves the saved definition (concurrency,
  budget, file) as it was.
- Stop and resume: `stop` (under the runner lock, with the stop flag set) cancels planned
  trials and asks in-flight jobs to stop; each row's detail says which ("[stopped] by sweep
  stop before submission" / "... while in flight"). Once the flag is cleared again (`sweep
  resume` does it, and so does a plain `sweep run` of the same sweep: both continue a stopped
  sweep), every runner step first reopens what `sweep stop` stopped: a trial cancelled before
  its job was ever created goes back to `planned` under the same name; a trial whose job was
  stopped in flight is resubmitted as the next `-rN` on the same instance type, like a retry
  (it does not use up `max_retries`; the stopped job's cost is spent and stays in the
  sweep's cost bound, and a resubmission that would take that bound above the budget is not
  made: the trial stays stopped and its detail says why, and what to do). Completed and failed trials, and
  jobs stopped by anything other than `sweep stop`, are left alone. Reopening is a ledger
  transition (stopped -> planned) or the same attempt record and `planned` row a retry
  writes, so a runner killed halfway reopens the rest on its next step, under the same names.
  `Runner.has_work()` tells from the ledger alone whether a runner started now would act at
  all (`sweep run --detach` asks it before starting one in the background).
- Budget: each job counts its cost bound until it has ended; then what SageMaker billed (its
  billable seconds, recorded in the ledger) counts instead, so a job stopped while Starting
  counts next to nothing. A retry or resubmission refused by the budget is looked at again on
  every step, so a budget raised in the file (`reload_policy`, which `sweep resume` calls, or
  `sweep run`'s `save`) lets it run.
- A sweep edited into a new id submits its trials again under the new names, even those
  whose exact spec already completed under the old id; the runner says so once (an event
  naming the earlier jobs), see `completed_elsewhere`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import random
import re
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from entrypoints import atomic
from orchestrator import aws, cost, doctor, request
from orchestrator.backends import Backend, DamagedStatus, UnknownJob
from orchestrator.errors import BackendError, InputError, OrchestratorError, Problem, SpecError
from orchestrator.ledger import Entry, Ledger
from orchestrator.paths import home
from orchestrator.spec import JobSpec, RandomSpec, SweepSpec, load_sweep, spec_hash, with_overrides

TAG_SWEEP = "orchestrator:sweep"
TAG_TRIAL = "orchestrator:trial"
# On every resubmission of a trial: "retry", "resumed" (after sweep stop), or
# "failover:<the instance type it failed over from>" (a different configuration: results says so).
TAG_ATTEMPT = "orchestrator:attempt"
TRIAL_HEX = 8
# "-t" + 8 hex, then at most "-r99": the sweep part gets what is left of SageMaker's 63.
_TRIAL_PART = 2 + TRIAL_HEX
_RETRY_PART = 4
MAX_JOB_NAME = 63
MAX_PREFIX = MAX_JOB_NAME - _TRIAL_PART - _RETRY_PART
MAX_LISTED_PROBLEMS = 50
# Waits in a row for a passing error (throttling, 5xx, the network) before a runner gives up.
MAX_TRANSIENT_RETRIES = 8
DEFINITION_SCHEMA = 1

# Error codes, as SageMaker (and botocore) spell them; which errors are permanent and which
# transient is `aws.classify`'s table, these only sort them further.
THROTTLE_CODES = aws.THROTTLE_CODES
QUOTA_CODES = frozenset({"ResourceLimitExceeded"})
CAPACITY_CODES = frozenset({"InsufficientCapacityError", "InsufficientCapacity", "CapacityError",
                            "InsufficientInstanceCapacity"})
USER_CODES = frozenset({"ValidationException", "ValidationError", "AccessDenied", "AccessDeniedException",
                        "UnauthorizedOperation", "ResourceInUse", "NoSuchBucket", "ResourceNotFound"})

# Failure kinds. The ledger's `detail` of a failure the runner decided starts with "[kind] ";
# a failure reported by the backend is classified from its reason text.
RETRYABLE = frozenset({"capacity", "spot", "internal", "lost"})
_REASON_KINDS = (
    ("capacity", re.compile(r"capacity|unable to provision", re.I)),
    ("spot", re.compile(r"spot.{0,40}interrupt|interrupt.{0,40}spot|spotinterruption", re.I)),
    ("internal", re.compile(r"internal ?(server ?)?error|internalfailure|internal failure|"
                            r"serviceunavailable|service unavailable|an internal", re.I)),
)
_KIND_PREFIX = re.compile(r"^\[([a-z]+)\] ")

# Details `stop` leaves on the rows it stops; a runner step reopens these rows (see the
# module docstring). STOPPED_LEGACY is what earlier versions wrote in both cases.
STOPPED_BEFORE_SUBMISSION = "[stopped] by sweep stop before submission"
STOPPED_IN_FLIGHT = "[stopped] by sweep stop while in flight"
STOPPED_LEGACY = "[stopped] by sweep stop"
# The retry suffix has room for two digits ("-r99", see MAX_PREFIX).
MAX_ATTEMPT = 99


# --- trials --------------------------------------------------------------------------------


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


def _points(sweep: SweepSpec) -> Iterator[tuple[dict[str, Any], dict[str, tuple]]]:
    """(overrides, path -> where in the sweep file each value came from), in trial order."""
    axes = list(sweep.grid.items())
    draws = sample(sweep.random) if sweep.random else [{}]
    for combo in itertools.product(*[list(enumerate(values)) for _, values in axes]):
        grid = {path: value for (path, _), (_, value) in zip(axes, combo, strict=True)}
        where = {path: ("grid", path, str(i)) for (path, _), (i, _) in zip(axes, combo, strict=True)}
        for draw in draws:
            rwhere = {path: ("random", "params", path) for path in draw}
            yield {**grid, **draw}, {**where, **rwhere}


def _problem_at(sweep: SweepSpec, where: dict[str, tuple], field_path: str, message: str) -> Problem:
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


def _describe_overrides(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k}={shown(v)}" for k, v in overrides.items()) or "base"


def _raise_problems(problems: list[Problem], failing: int, what: str, hint: str) -> None:
    if not problems:
        return
    shown = problems[:MAX_LISTED_PROBLEMS]
    if len(problems) > len(shown):
        last = shown[-1]
        shown.append(Problem(last.file, 0, 0, "", f"... and {len(problems) - len(shown)} more problems"))
    raise SpecError(shown, hint=f"{failing} {what}; {hint}")


def trial_id_of(digest: str) -> str:
    return "t" + digest[:TRIAL_HEX]


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
    for index, (overrides, where) in enumerate(_points(sweep)):
        try:
            spec = with_overrides(base, overrides)
        except SpecError as exc:
            failing += 1
            for p in exc.problems:
                problems.append(_problem_at(sweep, where, p.path,
                                            f"trial {index} ({_describe_overrides(overrides)}): {p.message}"))
            continue
        digest = spec_hash(spec)
        if digest in seen:
            duplicates.append((index, seen[digest]))
            continue
        seen[digest] = index
        tid = trial_id_of(digest)
        if tid in ids and ids[tid] != digest:
            raise InputError(f"trials {seen[ids[tid]]} and {index} share the id {tid}",
                             hint="a 32-bit hash collision: change random.seed")
        ids[tid] = digest
        trials.append(Trial(index, tid, dict(overrides), spec, digest))
    _raise_problems(problems, failing, "trial(s) do not validate", "fix the values named above")
    return trials, duplicates


# --- identity ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """A sweep's id and the job names derived from it (see the module docstring)."""

    name: str
    digest: str
    tick: str | None = None  # YYYYMMDDHHMM, UTC

    @property
    def suffix(self) -> str:
        return self.digest if self.tick is None else f"{self.digest}-{self.tick}"

    @property
    def sweep_id(self) -> str:
        return f"{self.name}-{self.suffix}"

    @property
    def job_prefix(self) -> str:
        room = MAX_PREFIX - len(self.suffix) - 1
        return f"{self.name[:room].rstrip('-')}-{self.suffix}"

    def job_name(self, trial_id: str, attempt: int = 0) -> str:
        name = f"{self.job_prefix}-{trial_id}"
        return name if attempt == 0 else f"{name}-r{attempt}"

    def tags(self, trial_id: str) -> dict[str, str]:
        return {TAG_SWEEP: self.sweep_id, TAG_TRIAL: trial_id}

    def owns(self, job_name: str) -> bool:
        """Whether `job_name` has the shape of a job of this sweep (any trial, any attempt)."""
        pattern = rf"{re.escape(self.job_prefix)}-t[0-9a-f]{{{TRIAL_HEX}}}(-r\d+)?"
        return re.fullmatch(pattern, job_name) is not None


def tick_label(when: datetime) -> str:
    """A tick's time as it appears in sweep ids: UTC, minute resolution."""
    return when.astimezone(timezone.utc).strftime("%Y%m%d%H%M")


def identity(sweep_name: str, trials: list[Trial], tick: datetime | None = None) -> Identity:
    canonical = json.dumps({"sweep": sweep_name, "trials": [t.spec_hash for t in trials]}, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:8]
    return Identity(sweep_name, digest, tick_label(tick) if tick is not None else None)


def identify(sweep: SweepSpec, tick: datetime | None = None) -> Identity:
    """The sweep's identity without planning (expands the trials, prepares nothing)."""
    trials, _ = expand(sweep)
    return identity(sweep.sweep, trials, tick)


# --- plan ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedTrial:
    trial: Trial
    job_name: str
    prepared: request.Prepared
    chain: tuple[str, ...]  # instance types: the trial's own, then its failover order
    chain_usd: tuple[float, ...] = ()  # the cost bound of a job on each type of `chain`
    max_retries: int = 0

    @property
    def usd_max(self) -> float:
        return self.prepared.estimate.usd_max

    @property
    def worst_usd(self) -> float:
        """The trial's cost bound with every failover and retry (`cost.worst_case`)."""
        return cost.worst_case(list(self.chain_usd or (self.usd_max,)), self.max_retries)


@dataclass
class Plan:
    sweep: SweepSpec
    identity: Identity
    trials: list[PlannedTrial]
    duplicates: list[tuple[int, int]] = field(default_factory=list)
    warnings: dict[str, list[str]] = field(default_factory=dict)  # "rule: message" -> trial ids

    @property
    def sweep_id(self) -> str:
        return self.identity.sweep_id

    @property
    def total_usd(self) -> float:
        return sum(t.usd_max for t in self.trials)

    @property
    def worst_usd(self) -> float:
        """The total if every trial failed over along its whole chain and used every retry."""
        return sum(t.worst_usd for t in self.trials)

    def prepared(self) -> dict[str, request.Prepared]:
        """Job name -> prepared request of each trial's first job (for `Runner(prepared=...)`)."""
        return {t.job_name: t.prepared for t in self.trials}

    def to_json(self) -> dict:
        total = self.total_usd
        return {
            "sweep_id": self.sweep_id,
            "backend": self.sweep.base_spec.backend,
            "region": self.sweep.base_spec.region,
            "concurrency": self.sweep.concurrency,
            "max_retries": self.sweep.max_retries,
            "trials": [{
                "index": t.trial.index, "trial_id": t.trial.trial_id, "job_name": t.job_name,
                "overrides": t.trial.overrides, "instance_type": t.trial.spec.instance.type,
                "instance_count": t.trial.spec.instance.count, "failover": list(t.chain[1:]),
                "usd_max": t.prepared.estimate.to_json()["usd_max"], "spec_hash": t.trial.spec_hash,
                "worst_usd_max": round(t.worst_usd, 4) if math.isfinite(t.worst_usd) else None,
            } for t in self.trials],
            "duplicates": [{"index": a, "same_as": b} for a, b in self.duplicates],
            "warnings": self.warnings,
            "total_usd_max": round(total, 4) if math.isfinite(total) else None,
            "worst_usd_max": round(self.worst_usd, 4) if math.isfinite(self.worst_usd) else None,
            "budget_usd": self.sweep.budget.max_total_cost_usd,
        }


def failover_chain(sweep: SweepSpec, spec: JobSpec) -> tuple[str, ...]:
    own = spec.instance.type
    return (own, *[t for t in sweep.failover.get("instance.type", []) if t != own])


def plan(sweep: SweepSpec, *, tick: datetime | None = None) -> Plan:
    """Expand, doctor-check and prepare every trial (see the module docstring)."""
    trials, duplicates = expand(sweep)
    ident = identity(sweep.sweep, trials, tick)
    where_of = {i: w for i, (_, w) in enumerate(_points(sweep))} if sweep.grid or sweep.random else {}
    planned: list[PlannedTrial] = []
    warnings: dict[str, list[str]] = {}
    problems: list[Problem] = []
    failing = 0
    for trial in trials:
        name = ident.job_name(trial.trial_id)
        where = where_of.get(trial.index, {})
        label = f"trial {trial.index} {trial.trial_id} ({_describe_overrides(trial.overrides)})"
        bad: list[Problem] = []
        try:
            prepared = request.prepare(trial.spec, job_name=name, extra_tags=ident.tags(trial.trial_id))
        except SpecError as exc:
            bad += [_problem_at(sweep, where, p.path, f"{label}: {p.message}") for p in exc.problems]
        except InputError as exc:
            bad.append(_problem_at(sweep, where, "", f"{label}: {exc.message}"))
        else:
            for finding in prepared.findings:
                if finding.severity == "error":
                    bad.append(_problem_at(sweep, where, finding.path,
                                           f"{label}: {finding.message} [{finding.rule}]; fix: {finding.fix}"))
                elif finding.severity == "warning":
                    warnings.setdefault(f"{finding.rule}: {finding.message}", []).append(trial.trial_id)
        chain = failover_chain(sweep, trial.spec)
        chain_usd = [cost.estimate(trial.spec).usd_max]
        for fallback in chain[1:]:
            variant = with_overrides(trial.spec, {"instance.type": fallback})
            chain_usd.append(cost.estimate(variant).usd_max)
            for finding in doctor.errors(doctor.check(variant)):
                file, line, col = sweep.locate("failover", "instance.type", str(
                    sweep.failover["instance.type"].index(fallback)))
                bad.append(Problem(file, line, col, finding.path,
                                   f"{label} failing over to {fallback}: {finding.message} [{finding.rule}]; "
                                   f"fix: {finding.fix}"))
        if bad:
            failing += 1
            problems += bad
            continue
        planned.append(PlannedTrial(trial, name, prepared, chain, tuple(chain_usd), sweep.max_retries))
    _raise_problems(problems, failing, "trial(s) fail the doctor's checks; nothing was submitted",
                    "fix the base spec or the sweep's values")
    return Plan(sweep, ident, planned, duplicates, warnings)


def check_budget(planned: Plan) -> None:
    """Refuse (SpecError at the budget line, exit 2) a plan above budget.max_total_cost_usd."""
    budget = planned.sweep.budget.max_total_cost_usd
    total = planned.total_usd
    if budget is None or total <= budget:
        return
    file, line, col = planned.sweep.locate("budget", "max_total_cost_usd")
    shown = f"{total:.2f} USD" if math.isfinite(total) else "an unknown amount (a price is missing)"
    raise SpecError([Problem(file, line, col, "budget.max_total_cost_usd",
                             f"{len(planned.trials)} trials cost at most {shown}, above the budget of "
                             f"{budget:g} USD")],
                    hint="raise budget.max_total_cost_usd, shrink the grid or random.trials, "
                    "or lower max_run_minutes in the base spec")


# --- the persisted definition --------------------------------------------------------------


@dataclass(frozen=True)
class TrialDef:
    """A trial as the runner keeps it: a `Trial`'s identity and spec, plus its failover chain
    of instance types (the spec's own first), in place of the digest the planner used."""

    index: int
    trial_id: str
    overrides: dict[str, Any]
    spec: JobSpec
    chain: tuple[str, ...]


@dataclass(frozen=True)
class Definition:
    """What the runner needs, as stored in the ledger's kv table under `sweep:<id>`."""

    identity: Identity
    backend: str
    region: str
    concurrency: int
    max_retries: int
    budget_usd: float | None
    trials: tuple[TrialDef, ...]
    file: str | None = None

    @property
    def sweep_id(self) -> str:
        return self.identity.sweep_id

    def to_json(self) -> dict:
        return {
            "schema": DEFINITION_SCHEMA, "name": self.identity.name, "digest": self.identity.digest,
            "tick": self.identity.tick, "backend": self.backend, "region": self.region,
            "concurrency": self.concurrency, "max_retries": self.max_retries, "budget_usd": self.budget_usd,
            "file": self.file,
            "trials": [{"index": t.index, "trial_id": t.trial_id, "overrides": t.overrides,
                        "spec": t.spec.model_dump(mode="json"), "chain": list(t.chain)} for t in self.trials],
        }

    @classmethod
    def from_json(cls, data: dict) -> Definition:
        schema = data.get("schema")
        if schema != DEFINITION_SCHEMA:
            newer = isinstance(schema, int) and schema > DEFINITION_SCHEMA
            hint = ("upgrade this orchestrator to the version that saved the sweep" if newer
                    else "use the orchestrator version that saved the sweep")
            if data.get("file") and not data.get("tick"):
                # `sweep run` writes the definition again (`save`), keeping the rows of the same id;
                # a tick's definition is written only by the schedule, when the tick is due.
                hint += (f", or save it again in this version's format: `python -m orchestrator sweep run "
                         f"{shlex.quote(str(data['file']))}`")
            raise InputError(f"the ledger holds a sweep definition of schema {schema!r}; "
                             f"this orchestrator reads {DEFINITION_SCHEMA}", hint=hint)
        trials = tuple(TrialDef(t["index"], t["trial_id"], t["overrides"], JobSpec.model_validate(t["spec"]),
                                tuple(t["chain"])) for t in data["trials"])
        return cls(Identity(data["name"], data["digest"], data.get("tick")), data["backend"], data["region"],
                   data["concurrency"], data["max_retries"], data.get("budget_usd"), trials, data.get("file"))

    @classmethod
    def of(cls, planned: Plan) -> Definition:
        sweep = planned.sweep
        return cls(planned.identity, sweep.base_spec.backend, sweep.base_spec.region, sweep.concurrency,
                   sweep.max_retries, sweep.budget.max_total_cost_usd,
                   tuple(TrialDef(t.trial.index, t.trial.trial_id, t.trial.overrides, t.trial.spec, t.chain)
                         for t in planned.trials),
                   str(sweep.path.resolve()) if sweep.path else None)


def _key(sweep_id: str, what: str = "") -> str:
    return f"sweep:{sweep_id}" + (f":{what}" if what else "")


def save(planned: Plan, ledger: Ledger) -> Definition:
    """Persist the plan: its definition, then one `planned` row per trial (idempotent: a
    second save of the same sweep keeps existing rows and their states).

    Holds the sweep's runner lock while writing, so nothing is written while another process
    of this machine runs the sweep: InputError (exit 2) "being run by another process", and
    the saved definition stays what that runner was started with. The lock is released on
    return; the caller takes it again to run the sweep.
    """
    definition = Definition.of(planned)
    try:
        with runner_lock(definition.sweep_id):
            ledger.put_value(_key(definition.sweep_id), definition.to_json())
            for t in planned.trials:
                ledger.record_intent(t.job_name, backend=definition.backend, region=definition.region,
                                     spec_hash=t.prepared.spec_hash, request=t.prepared.request,
                                     state="planned", sweep_id=definition.sweep_id,
                                     trial_id=t.trial.trial_id, attempt=0)
    except RunnerBusy as exc:
        sweep_id = definition.sweep_id
        raise RunnerBusy(sweep_id, exc.pid, hint=(
            f"nothing was changed: the running sweep keeps its saved concurrency, budget and file; "
            f"watch it with `python -m orchestrator sweep status {sweep_id}`, or stop it with `python -m orchestrator sweep "
            f"stop {sweep_id}` and run again")) from None
    return definition


def load_definition(ledger: Ledger, sweep_id: str) -> Definition:
    data = ledger.get_value(_key(sweep_id))
    if not isinstance(data, dict):
        known = sweep_ids(ledger)
        raise InputError(f"no sweep {sweep_id!r} in the ledger {ledger.path}",
                         hint=("known sweeps: " + ", ".join(known[-10:])) if known else
                         "start one with `python -m orchestrator sweep run SWEEP.yaml`")
    return Definition.from_json(data)


def reload_policy(ledger: Ledger, definition: Definition) -> tuple[Definition, str | None]:
    """The saved sweep with the run policy (budget, concurrency, max_retries) its file has now,
    as `sweep run FILE` would save it, and a note saying what changed; so `sweep resume` honours
    a budget raised in the file. Nothing changes (and the note says why) when the file is gone,
    no longer loads, or was edited into another sweep (other trials: another id). Writes under
    the runner lock, as `save` does."""
    if not definition.file:
        return definition, None
    path = Path(definition.file)
    try:
        loaded = load_sweep(path)
        tick = (datetime.strptime(definition.identity.tick, "%Y%m%d%H%M").replace(tzinfo=timezone.utc)
                if definition.identity.tick else None)
        now = identify(loaded, tick)
    except (InputError, OSError) as exc:
        why = exc.message.splitlines()[0] if isinstance(exc, InputError) else str(exc)
        return definition, f"note: {path} could not be read again ({why}); resuming with the saved settings"
    if now.sweep_id != definition.sweep_id:
        return definition, (f"note: {path} now describes another sweep ({now.sweep_id}: its trials changed); "
                            f"resuming {definition.sweep_id} with its saved settings (`python -m orchestrator sweep run "
                            f"{shlex.quote(str(path))}` starts the new one)")
    fresh = replace(definition, concurrency=loaded.concurrency, max_retries=loaded.max_retries,
                    budget_usd=loaded.budget.max_total_cost_usd)
    if fresh == definition:
        return definition, None
    changes = [f"{name} {old} -> {new}" for name, old, new in (
        ("budget.max_total_cost_usd", definition.budget_usd, fresh.budget_usd),
        ("concurrency", definition.concurrency, fresh.concurrency),
        ("max_retries", definition.max_retries, fresh.max_retries)) if old != new]
    with runner_lock(definition.sweep_id):
        ledger.put_value(_key(definition.sweep_id), fresh.to_json())
    return fresh, f"note: took {', '.join(changes)} from {path}"


def completed_elsewhere(ledger: Ledger, sweep_id: str, spec_hashes: dict[str, str]) -> dict[str, str]:
    """Trial id -> name of a completed job of another sweep (or none) with the same spec hash,
    for the trials in `spec_hashes` (trial id -> spec hash). Names are not changed by this:
    it only tells the user that an edited sweep repeats finished work."""
    if not spec_hashes:
        return {}
    by_hash: dict[str, str] = {}
    for entry in ledger.entries(states=("completed",)):
        if entry.sweep_id != sweep_id:
            by_hash.setdefault(entry.spec_hash, entry.job_name)
    return {tid: by_hash[digest] for tid, digest in spec_hashes.items() if digest in by_hash}


# A sweep id: <name>-<8 hex digest>, and for a scheduled tick -<YYYYMMDDHHMM> after it.
SWEEP_ID = re.compile(r"(?P<name>.+)-(?P<digest>[0-9a-f]{8})(?:-(?P<tick>[0-9]{12}))?")


def sweep_keys(sweep_id: str) -> set[str]:
    """The names a user may give for a sweep id: the id itself, its sweep name, and for a
    scheduled tick the untimed id."""
    keys = {sweep_id}
    found = SWEEP_ID.fullmatch(sweep_id)
    if found:
        keys.add(found["name"])
        if found["tick"]:
            keys.add(f"{found['name']}-{found['digest']}")
    return keys


def resolve_id(ledger: Ledger, target: str) -> str:
    """The id of the one sweep in the ledger that `target` names: its id, or its sweep name
    (or a schedule's untimed id) when that fits exactly one saved sweep. Raises InputError
    (exit 2) for a name that fits several, listing them, or none, listing the known sweeps."""
    known = sweep_ids(ledger)
    if target in known:
        return target
    matches = [sweep_id for sweep_id in known if target in sweep_keys(sweep_id)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise InputError(f"{target!r} names {len(matches)} sweeps in the ledger: {', '.join(matches[-10:])}",
                         hint="give the sweep id (`python -m orchestrator sweep status` lists them)")
    return load_definition(ledger, target).sweep_id  # the "no sweep" error, with the known ones


def sweep_ids(ledger: Ledger) -> list[str]:
    """Sweep ids with rows in the ledger, oldest first."""
    return list(dict.fromkeys(e.sweep_id for e in ledger.entries() if e.sweep_id))


# --- failures --------------------------------------------------------------------------------


def classify(detail: str | None) -> str:
    """The kind of a failure: capacity, spot, internal, lost (retryable) or user, budget."""
    text = detail or ""
    found = _KIND_PREFIX.match(text)
    if found:
        return found.group(1)
    for kind, pattern in _REASON_KINDS:
        if pattern.search(text):
            return kind
    return "user"


_BUDGET_REFUSAL = re.compile(r"^\[budget\] (.*?); a retry would take the sweep's cost bound to ", re.S)


def budget_refused_reason(detail: str | None) -> str | None:
    """The failure a "[budget]" row's retry was refused after, or None for any other row."""
    found = _BUDGET_REFUSAL.match(detail or "")
    return found.group(1) if found else None


def submit_error_kind(exc: OrchestratorError) -> str:
    """What a failed call of the runner means, from `aws.classify` and the service's code:
    setup (no usable credentials, or access denied: every call fails the same way, so the
    sweep stops with the error), throttled, quota (wait and try again), capacity (fail over),
    user (this request is refused: never retried), transient (5xx, no connection, no answer:
    the job may or may not exist, so try again and reconcile)."""
    if not isinstance(exc, BackendError):
        return "user"
    code = exc.code
    if code in THROTTLE_CODES:
        return "throttled"
    if code in QUOTA_CODES:
        return "quota"
    if code in CAPACITY_CODES:
        return "capacity"
    failure = aws.classify(exc)
    if failure is not None and failure.account_wide:
        return "setup"
    if code in USER_CODES or "already exists" in exc.message:
        return "user"
    if failure is not None:
        return "user" if failure.permanent else "transient"
    status = exc.http_status
    if status is not None and 400 <= status < 500:
        return "user"
    return "transient"


def attempt_tag(info: dict, own_type: str) -> str:
    """The TAG_ATTEMPT value of a resubmission from its attempt record."""
    if info.get("failover"):
        return f"failover:{info.get('from_type') or own_type}"
    return "resumed" if info.get("resumed") else "retry"


# Kinds the runner waits out and tries again (at most `Runner.max_transient_retries` times in a row).
WAIT_KINDS = ("throttled", "quota", "transient")


# --- the runner --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrialView:
    """A trial as the ledger sees it: its latest job."""

    trial: TrialDef
    job_name: str
    attempt: int
    state: str
    detail: str | None
    instance_type: str
    final: bool  # terminal, and no retry will follow


@dataclass(frozen=True)
class Progress:
    sweep_id: str
    total: int
    counts: dict[str, int]
    in_flight: int
    elsewhere: int
    waiting_until: float | None
    waiting_reason: str | None
    events: tuple[str, ...]
    done: bool
    stopped: bool = False
    event_count: int = 0  # events so far in this process; `events` holds the last 20

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0)


def lock_path(sweep_id: str) -> Path:
    folder = home() / "sweeps"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{sweep_id}.lock"


def log_path(sweep_id: str) -> Path:
    return lock_path(sweep_id).with_suffix(".log")


def holder_path(sweep_id: str) -> Path:
    """Where the process holding the sweep's runner lock records its pid."""
    return lock_path(sweep_id).with_suffix(".runner")


def lock_holder(sweep_id: str) -> int | None:
    """The pid the last holder of the sweep's runner lock recorded (None if unreadable)."""
    try:
        pid = json.loads(holder_path(sweep_id).read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else None


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunnerBusy(InputError):
    """Another process of this machine holds the sweep's runner lock; `pid` is its pid when
    it recorded one."""

    def __init__(self, sweep_id: str, pid: int | None, hint: str | None = None):
        who = f" (pid {pid})" if pid else ""
        super().__init__(f"sweep {sweep_id} is being run by another process on this machine{who}",
                         hint=hint or f"watch it with `python -m orchestrator sweep status {sweep_id}`, or stop it "
                                      f"with `python -m orchestrator sweep stop {sweep_id}`")
        self.sweep_id = sweep_id
        self.pid = pid


@contextmanager
def runner_lock(sweep_id: str, *, wait_seconds: float = 0.0):
    """Hold the sweep's runner lock (one runner per sweep on this machine), waiting at most
    `wait_seconds` for it: a `filelock` lock, which the OS drops when the process dies, so a
    killed runner never blocks the next one. The holder records its pid beside the lock
    (`lock_holder`); RunnerBusy names it when the lock is taken."""
    from filelock import FileLock, Timeout

    path = lock_path(sweep_id)
    lock = FileLock(str(path), timeout=wait_seconds, poll_interval=0.2)
    try:
        lock.acquire()
    except Timeout:
        # The holder writes its pid just after it got the lock: give it a moment to.
        deadline = time.monotonic() + 1.0
        pid = lock_holder(sweep_id)
        while not _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
            pid = lock_holder(sweep_id)
        raise RunnerBusy(sweep_id, pid if _alive(pid) else None) from None
    try:
        try:
            atomic.write_text(holder_path(sweep_id), json.dumps({"pid": os.getpid()}) + "\n")
        except OSError:
            pass  # only a message names it
        yield path
    finally:
        lock.release()


class Runner:
    """Drives one sweep to completion. See the module docstring for the protocol.

    `sleep`, `clock` and `rng` are injectable so tests control time and jitter; `prepared`
    may hand over the plan's prepared first jobs (`Plan.prepared()`). `step()` does
    one non-blocking round (refresh, retry, submit); `run()` loops it until every trial is
    final, the sweep is stopped, or `max_steps` is reached.
    """

    def __init__(self, definition: Definition, backend: Backend, ledger: Ledger, *,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None, poll_seconds: float = 30.0, backoff_base: float = 2.0,
                 backoff_cap: float = 300.0, on_progress: Callable[[Progress], None] | None = None,
                 count_elsewhere: bool = True, prepared: dict[str, request.Prepared] | None = None,
                 max_transient_retries: int = MAX_TRANSIENT_RETRIES):
        self.d = definition
        self.ident = definition.identity
        self.backend = backend
        self.ledger = ledger
        self.sleep = sleep
        self.clock = clock
        self.rng = rng or random.Random()
        self.poll_seconds = poll_seconds
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.on_progress = on_progress
        self.count_elsewhere = count_elsewhere
        self._trials = {t.trial_id: t for t in definition.trials}
        # Job name -> its prepared request; `prepared` (from `plan`) spares preparing again.
        self._prepared: dict[str, request.Prepared] = dict(prepared or {})
        self._failures = 0
        self.max_transient_retries = max_transient_retries
        # Call site ("status", "list", "submit") -> backoffs in a row since one of its calls last worked.
        self._streaks: dict[str, int] = {}
        self._not_before = 0.0
        self._waiting_reason: str | None = None
        self._events: list[str] = []
        self._foreign: dict[str, bool] = {}  # job name -> carries this sweep's tag
        self._last_elsewhere = 0
        self._acted = 0
        self._event_count = 0
        self._noted_elsewhere = False
        self._billing_unknown: set[str] = set()  # ended jobs whose backend reports no billable seconds
        self._adopted_remote = False

    # -- ledger views --

    def _rows(self) -> dict[str, list[Entry]]:
        rows: dict[str, list[Entry]] = {}
        for entry in self.ledger.entries(sweep_id=self.d.sweep_id):
            rows.setdefault(entry.trial_id or "", []).append(entry)
        for history in rows.values():
            history.sort(key=lambda e: e.attempt)
        return rows

    def _attempt_info(self, trial: TrialDef, entry: Entry) -> dict:
        if entry.attempt == 0:
            return {"instance_type": trial.chain[0], "failover": False}
        info = self.ledger.get_value(_key(self.d.sweep_id, f"attempt:{entry.job_name}"))
        if not isinstance(info, dict):
            raise OrchestratorError(f"the ledger lost the attempt record of {entry.job_name}")
        return info

    def _next_attempt(self, trial: TrialDef, history: list[Entry], *,
                      reopen_budget: bool = False) -> tuple[str, bool] | str:
        """(instance type, is failover) of the resubmission after the failed latest attempt,
        or the reason there is none. A retry the budget refused ("[budget] ...") is final,
        unless `reopen_budget`: then it is judged by its own failure, for the caller to check
        the budget (raised since, maybe) again."""
        latest = history[-1]
        refused = budget_refused_reason(latest.detail) if reopen_budget else None
        kind = classify(refused if refused is not None else latest.detail)
        if latest.state != "failed":
            return "not failed"
        if kind not in RETRYABLE:
            return f"{kind} error: not retried"
        current = self._attempt_info(trial, latest)["instance_type"]
        if kind == "capacity" and current in trial.chain and trial.chain.index(current) + 1 < len(trial.chain):
            return trial.chain[trial.chain.index(current) + 1], True
        used = 0
        for e in history[1:]:
            info = self._attempt_info(trial, e)
            # Failovers and resubmissions after `sweep stop` are not retries of a failure.
            used += not info["failover"] and not info.get("resumed")
        if used >= self.d.max_retries:
            return f"gave up after {used} retr{'y' if used == 1 else 'ies'} (max_retries {self.d.max_retries})"
        return current, False

    def views(self) -> list[TrialView]:
        """Every trial's latest job, in trial order (no backend calls)."""
        rows = self._rows()
        out = []
        for trial in self.d.trials:
            history = rows.get(trial.trial_id)
            if not history:
                out.append(TrialView(trial, self.ident.job_name(trial.trial_id), 0, "planned", None,
                                     trial.chain[0], False))
                continue
            latest = history[-1]
            final = latest.state in ("completed", "stopped") or (
                latest.state == "failed" and isinstance(self._next_attempt(trial, history), str))
            out.append(TrialView(trial, latest.job_name, latest.attempt, latest.state, latest.detail,
                                 self._attempt_info(trial, latest)["instance_type"], final))
        return out

    # -- one round --

    def _event(self, text: str) -> None:
        stamp = datetime.fromtimestamp(self.clock(), timezone.utc).strftime("%H:%M:%S")
        self._events.append(f"{stamp} {text}")
        del self._events[:-20]
        self._event_count += 1

    def stop_requested(self) -> bool:
        return bool(self.ledger.get_value(_key(self.d.sweep_id, "stop"), False))

    def _attempt_spec(self, trial: TrialDef, entry: Entry) -> JobSpec:
        """The trial's spec on the instance type this attempt runs on."""
        instance_type = self._attempt_info(trial, entry)["instance_type"]
        if instance_type == trial.spec.instance.type:
            return trial.spec
        return with_overrides(trial.spec, {"instance.type": instance_type})

    def _prepare(self, trial: TrialDef, entry: Entry) -> request.Prepared:
        cached = self._prepared.get(entry.job_name)
        if cached is not None:
            return cached
        tags = self.ident.tags(trial.trial_id)
        if entry.attempt > 0:
            tags[TAG_ATTEMPT] = attempt_tag(self._attempt_info(trial, entry), trial.chain[0])
        prepared = request.prepare(self._attempt_spec(trial, entry), job_name=entry.job_name, extra_tags=tags)
        self._prepared[entry.job_name] = prepared
        return prepared

    def _halt(self, exc: OrchestratorError, what: str | None = None) -> None:
        """Stop the run with `exc` (our error of the same kind, exit code kept), saying how to
        continue: nothing the ledger holds is lost, `sweep resume` picks it up."""
        message = f"sweep {self.d.sweep_id} stopped: {what or exc.message}"
        then = (f"`python -m orchestrator sweep resume {self.d.sweep_id}` continues it (jobs already submitted "
                "keep running)")
        hint = f"{exc.hint}; then {then}" if exc.hint else f"once that is fixed, {then}"
        if isinstance(exc, BackendError):
            raise BackendError(message, hint=hint, code=exc.code, http_status=exc.http_status) from exc
        raise InputError(message, hint=hint) from exc

    def _backoff(self, reason: str, site: str = "submit", error: OrchestratorError | None = None,
                 bounded: bool = True) -> None:
        """Wait before the next call (jittered, growing exponentially). A `bounded` wait counts
        against `max_transient_retries` calls in a row at `site`: one more stops the run."""
        if bounded:
            self._streaks[site] = self._streaks.get(site, 0) + 1
            if error is not None and self._streaks[site] > self.max_transient_retries:
                self._halt(error, f"{reason} (gave up after {self.max_transient_retries} retries in a row; the "
                                  "error may pass: throttling, a server error or the network)")
        self._failures += 1
        ceiling = min(self.backoff_cap, self.backoff_base * 2 ** (self._failures - 1))
        delay = self.rng.uniform(ceiling / 2, ceiling)
        self._not_before = self.clock() + delay
        self._waiting_reason = reason
        self._event(f"backing off {delay:.1f}s: {reason}")

    def refresh(self) -> None:
        """Ask the backend about every job of this sweep in flight; record what changed."""
        for history in self._rows().values():
            latest = history[-1]
            if latest.state not in ("submitted", "running"):
                continue
            try:
                status = self.backend.status(latest.job_name)
            except DamagedStatus as exc:
                # The job's own record is unreadable: say so and leave the trial as it is (it may
                # still run); the rest of the sweep goes on.
                self._event(f"{latest.job_name}: {exc.message}")
                continue
            except BackendError as exc:
                if submit_error_kind(exc) in WAIT_KINDS:
                    self._backoff(f"status of {latest.job_name}: {exc.message}", "status", exc)
                    return
                self._halt(exc)
            except UnknownJob as exc:
                # The job the ledger says exists is gone (deleted account data, wrong region):
                # the trial is not lost, it is resubmitted as a retry.
                self.ledger.transition(latest.job_name, "failed", detail=f"[lost] {exc.message}",
                                       expect=("submitted", "running"))
                self._event(f"{latest.job_name}: lost ({exc.message})")
                continue
            self._streaks.pop("status", None)
            # Backends record non-terminal progress in the ledger themselves, each by its own
            # table; the runner only makes sure the row ends where the job ended, and marks
            # a job that is certainly training as running.
            if status.terminal:
                target = status.status
                if status.billable_seconds is not None:
                    self.ledger.put_value(_key(self.d.sweep_id, f"billed:{latest.job_name}"),
                                          int(status.billable_seconds))
            elif status.status == "running" and latest.state == "submitted":
                target = "running"
            else:
                continue
            detail = status.failure_reason if target == "failed" else None
            self.ledger.transition(latest.job_name, target, detail=detail, expect=("submitted", "running"))
            self._event(f"{latest.job_name}: {target}" + (f" ({detail})" if detail else ""))

    def _billed_seconds(self, entry: Entry) -> int | None:
        """The billable seconds of a job that has ended, as SageMaker reported them
        (DescribeTrainingJob BillableTimeInSeconds): recorded in the ledger when the runner saw
        it end, else asked of the backend once (a job `sweep stop` stopped is recorded only
        once it is Stopped). None when unknown (still running, or the backend cannot say)."""
        key = _key(self.d.sweep_id, f"billed:{entry.job_name}")
        known = self.ledger.get_value(key)
        if isinstance(known, int):
            return known
        if entry.state not in ("completed", "failed", "stopped") or self.backend is None \
                or entry.job_name in self._billing_unknown:
            return None
        try:
            status = self.backend.status(entry.job_name)
        except (BackendError, InputError):
            return None
        if not status.terminal or status.billable_seconds is None:
            if status.terminal:
                self._billing_unknown.add(entry.job_name)  # this backend does not report it
            return None
        self.ledger.put_value(key, int(status.billable_seconds))
        return int(status.billable_seconds)

    def _job_cost(self, trial: TrialDef, entry: Entry) -> float:
        """What one job of the sweep counts against its budget: the billable seconds SageMaker
        reports for a job that has ended (a job stopped while Starting bills next to nothing),
        else the job's cost bound."""
        estimate = cost.estimate(self._attempt_spec(trial, entry))
        seconds = self._billed_seconds(entry)
        if seconds is None or estimate.usd_per_hour is None:
            return estimate.usd_max
        return min(estimate.usd_max, seconds / 3600 * estimate.instance_count * estimate.usd_per_hour)

    def _spent_bound(self, rows: dict[str, list[Entry]]) -> float:
        """What every job this sweep has planned so far counts against its budget (`_job_cost`)."""
        total = 0.0
        for trial_id, history in rows.items():
            trial = self._trials.get(trial_id)
            if trial is None:
                continue
            for entry in history:
                total += self._job_cost(trial, entry)
        return total

    def _prepare_attempt(self, trial: TrialDef, name: str, attempt: int, info: dict) -> request.Prepared:
        """Record how attempt `name` of `trial` runs (instance type, failover...) and prepare
        its request. The record comes first: a runner killed after it re-plans the same
        attempt the same way."""
        self.ledger.put_value(_key(self.d.sweep_id, f"attempt:{name}"), info)
        stub = Entry(name, self.d.backend, self.d.region, "", "planned", {}, self.d.sweep_id,
                     trial.trial_id, attempt, None, 0.0, 0.0)
        return self._prepare(trial, stub)

    def _plan_attempt(self, trial: TrialDef, name: str, attempt: int, prepared: request.Prepared) -> None:
        """The attempt's `planned` ledger row: from here on `step` submits it."""
        self.ledger.record_intent(name, backend=self.d.backend, region=self.d.region,
                                  spec_hash=prepared.spec_hash, request=prepared.request, state="planned",
                                  sweep_id=self.d.sweep_id, trial_id=trial.trial_id, attempt=attempt)
        self._acted += 1

    def _retry_spec(self, trial: TrialDef, instance_type: str) -> JobSpec:
        if instance_type == trial.spec.instance.type:
            return trial.spec
        return with_overrides(trial.spec, {"instance.type": instance_type})

    def plan_retries(self) -> None:
        """Write the next attempt's row for each trial whose latest job failed retryably (and
        for one whose retry the budget refused, once the budget allows it)."""
        rows = self._rows()
        spent: float | None = None
        for trial in self.d.trials:
            history = rows.get(trial.trial_id)
            if not history or history[-1].state != "failed":
                continue
            nxt = self._next_attempt(trial, history, reopen_budget=True)
            if isinstance(nxt, str):
                continue
            instance_type, failover = nxt
            latest = history[-1]
            reason = budget_refused_reason(latest.detail)
            reason = latest.detail if reason is None else reason
            if self.d.budget_usd is not None:
                spent = self._spent_bound(rows) if spent is None else spent
                usd = cost.estimate(self._retry_spec(trial, instance_type)).usd_max
                if spent + usd > self.d.budget_usd:
                    refusal = (f"[budget] {reason or 'failed'}; a retry would take the sweep's cost bound to "
                               f"{spent + usd:.2f} USD, above budget.max_total_cost_usd {self.d.budget_usd:g}; "
                               f"{self._raise_budget_hint()}")
                    # Said once: a later step (a raised budget, re-read by `sweep resume`) looks again.
                    if refusal != latest.detail:
                        self.ledger.transition(latest.job_name, "failed", detail=refusal, expect=("failed",))
                        self._event(f"{trial.trial_id}: not retried (budget): {self._raise_budget_hint()}")
                    continue
                spent += usd
            attempt = latest.attempt + 1
            name = self.ident.job_name(trial.trial_id, attempt)
            info = {"instance_type": instance_type, "failover": failover}
            if failover:
                info["from_type"] = self._attempt_info(trial, latest)["instance_type"]
            prepared = self._prepare_attempt(trial, name, attempt, info)
            self._plan_attempt(trial, name, attempt, prepared)
            how = f"failing over to {instance_type}" if failover else "retrying"
            self._event(f"{trial.trial_id}: {how} as {name} after: {reason}")

    def _stopped_before_submission(self, entry: Entry) -> bool | None:
        """Whether `sweep stop` cancelled this row before its job was created (True), or
        stopped a job that existed (False); None when the backend cannot say now."""
        detail = entry.detail or ""
        if detail.startswith(STOPPED_BEFORE_SUBMISSION):
            return True
        if detail.startswith(STOPPED_IN_FLIGHT):
            return False
        # STOPPED_LEGACY was written in both cases: ask the backend whether the job exists.
        try:
            self.backend.status(entry.job_name)
        except UnknownJob:
            return True
        except BackendError as exc:
            self._event(f"{entry.job_name}: not reopened yet ({exc.message})")
            return None
        return False

    def _resubmission_refused(self, trial: TrialDef, latest: Entry, spent: float | None) -> str | None:
        """Why the job `sweep stop` stopped in flight (`latest`) would not be resubmitted, or
        None. `spent` is the sweep's cost bound so far (None: no budget to check). Reads the
        ledger only: no backend calls, no writes."""
        if latest.attempt + 1 > MAX_ATTEMPT:
            return f"job names allow at most {MAX_ATTEMPT} resubmissions"
        if self.d.budget_usd is None or spent is None:
            return None
        # The resubmission runs on the stopped job's instance type: the same spec, the same bound.
        usd = cost.estimate(self._attempt_spec(trial, latest)).usd_max
        if spent + usd <= self.d.budget_usd:
            return None
        return (f"a resubmission would take the sweep's cost bound to {spent + usd:.2f} USD (the stopped "
                f"job's billed cost is spent), above budget.max_total_cost_usd {self.d.budget_usd:g}; "
                f"{self._raise_budget_hint()}")

    def _raise_budget_hint(self) -> str:
        """The next step after a refusal by the budget."""
        where = f"in {self.d.file}" if self.d.file else "in the sweep's file"
        return (f"to run it, raise budget.max_total_cost_usd {where}, then `python -m orchestrator sweep resume "
                f"{self.d.sweep_id}`")

    def reopen_stopped(self) -> None:
        """Reopen the trials `sweep stop` stopped (see the module docstring): back to planned
        when no job was created, else a new `-rN` row on the same instance type."""
        rows = self._rows()
        spent: float | None = None
        for trial in self.d.trials:
            history = rows.get(trial.trial_id)
            if not history:
                continue
            latest = history[-1]
            detail = latest.detail or ""
            if latest.state != "stopped" or not detail.startswith(STOPPED_LEGACY):
                continue
            before = self._stopped_before_submission(latest)
            if before is None:
                continue
            if before:
                if self.ledger.transition(latest.job_name, "planned", detail="resumed after sweep stop",
                                          expect=("stopped",)):
                    self._acted += 1
                    self._event(f"{latest.job_name}: planned again (sweep stop had cancelled it before submission)")
                continue
            attempt = latest.attempt + 1
            name = self.ident.job_name(trial.trial_id, attempt)
            if self.d.budget_usd is not None and spent is None:
                spent = self._spent_bound(rows)
            why = self._resubmission_refused(trial, latest, spent)
            if why is not None:
                # Stays stopped; the detail keeps its prefix, so a later step (a raised budget
                # saved by `sweep run`) looks again. Said once, not on every step.
                refused = f"{STOPPED_IN_FLIGHT}; not resubmitted: {why}"
                if detail != refused and self.ledger.transition(latest.job_name, "stopped", detail=refused,
                                                                expect=("stopped",)):
                    self._event(f"{trial.trial_id}: not resubmitted after sweep stop: {why}")
                continue
            instance_type = self._attempt_info(trial, latest)["instance_type"]
            prepared = self._prepare_attempt(trial, name, attempt,
                                             {"instance_type": instance_type, "failover": False, "resumed": True})
            if spent is not None:
                spent += prepared.estimate.usd_max
            self._plan_attempt(trial, name, attempt, prepared)
            self._event(f"{trial.trial_id}: resubmitting as {name}: sweep stop had stopped {latest.job_name} "
                        "in flight (its cost is spent)")

    def has_work(self) -> bool:
        """Whether a runner started now would act (the stop flag aside, which a runner clears):
        a trial planned, being submitted, in flight or with a retry due, or one `sweep stop`
        stopped that `reopen_stopped` would reopen. False when every trial ended for good,
        including a job stopped by anything but `sweep stop` and one whose resubmission the
        budget refuses. Reads the ledger only: no backend calls, no writes; a row an older
        version stopped counts as work (telling it apart needs the backend)."""
        if not all(view.final for view in self.views()):
            return True
        rows = self._rows()
        spent: float | None = None
        for trial in self.d.trials:
            history = rows[trial.trial_id]  # views() saw a row for every trial
            latest = history[-1]
            detail = latest.detail or ""
            if latest.state == "failed" and budget_refused_reason(detail) is not None:
                nxt = self._next_attempt(trial, history, reopen_budget=True)
                if isinstance(nxt, str):
                    continue
                spent = self._spent_bound(rows) if spent is None else spent
                if self.d.budget_usd is None or \
                        spent + cost.estimate(self._retry_spec(trial, nxt[0])).usd_max <= self.d.budget_usd:
                    return True
                continue
            if latest.state != "stopped" or not detail.startswith(STOPPED_LEGACY):
                continue
            if not detail.startswith(STOPPED_IN_FLIGHT):
                return True  # cancelled before submission (planned again), or a legacy row
            if self.d.budget_usd is not None and spent is None:
                spent = self._spent_bound(rows)
            # The first resubmission made is what counts, so `spent` never grows here.
            if self._resubmission_refused(trial, latest, spent) is None:
                return True
        return False

    def note_completed_elsewhere(self) -> None:
        """Once per runner: an event naming trials about to be submitted whose exact spec
        already completed under another sweep id in this ledger (see `completed_elsewhere`)."""
        if self._noted_elsewhere or self.ident.tick is not None:
            return
        self._noted_elsewhere = True
        fresh = {}
        for trial_id, history in self._rows().items():
            if len(history) == 1 and history[0].state == "planned" and history[0].attempt == 0:
                fresh[trial_id] = history[0].spec_hash
        found = completed_elsewhere(self.ledger, self.d.sweep_id, fresh)
        if found:
            shown = ", ".join(f"{tid} (as {name})" for tid, name in sorted(found.items())[:5])
            more = f" and {len(found) - 5} more" if len(found) > 5 else ""
            self._event(f"note: {len(found)} trial(s) already completed under another sweep id with the same "
                        f"spec: {shown}{more}; they run again under {self.d.sweep_id}")

    def adopt_remote(self) -> None:
        """Once per runner, on SageMaker: write into the ledger each trial's attempts that
        SageMaker has and this ledger lacks or only planned (the sweep was run from another
        machine or another ORCHESTRATOR_HOME), with the state SageMaker reports, so that each
        trial goes on from its latest attempt instead of from the first. A job whose
        `orchestrator:sweep` tag names another sweep is left alone. A transient failure to
        list waits (backoff) and tries again at the next step."""
        lister = getattr(self.backend, "job_names", None)
        if self._adopted_remote or lister is None or getattr(self.backend, "name", "") != "sagemaker":
            return
        try:
            names = lister(self.ident.job_prefix)
        except BackendError as exc:
            if submit_error_kind(exc) not in WAIT_KINDS:
                self._halt(exc)
            self._backoff(f"listing this sweep's jobs in SageMaker: {exc.message}", "list", exc)
            return
        self._streaks.pop("list", None)
        self._adopted_remote = True
        shape = re.compile(rf"{re.escape(self.ident.job_prefix)}-(t[0-9a-f]{{{TRIAL_HEX}}})(?:-r(\d+))?")
        remote: dict[str, dict[int, str]] = {}
        for name in names:
            found = shape.fullmatch(name)
            if found and found.group(1) in self._trials:
                remote.setdefault(found.group(1), {})[int(found.group(2) or 0)] = name
        rows = self._rows()
        for trial_id, attempts in remote.items():
            trial = self._trials[trial_id]
            known = {e.attempt: e for e in rows.get(trial_id, [])}
            previous_type = trial.chain[0]
            for attempt in sorted(attempts):
                name, entry = attempts[attempt], known.get(attempt)
                if entry is not None and entry.state != "planned":
                    previous_type = self._attempt_info(trial, entry)["instance_type"]
                    continue
                try:
                    status = self.backend.status(name)
                except (BackendError, InputError) as exc:
                    self._event(f"{name}: in SageMaker, not adopted yet ({exc.message})")
                    self._adopted_remote = False  # look again next step
                    continue
                if status.tags.get(TAG_SWEEP) != self.d.sweep_id:
                    continue
                instance_type = status.instance_type or previous_type
                if entry is None:
                    kind = status.tags.get(TAG_ATTEMPT, "")
                    info = {"instance_type": instance_type,
                            "failover": kind.startswith("failover:") or (not kind and instance_type != previous_type)}
                    if info["failover"]:
                        info["from_type"] = kind.removeprefix("failover:") if kind else previous_type
                    if kind == "resumed":
                        info["resumed"] = True
                    prepared = self._prepare_attempt(trial, name, attempt, info)
                    self._plan_attempt(trial, name, attempt, prepared)
                previous_type = instance_type
                target = status.status if status.terminal else "submitted"
                detail = status.failure_reason if status.status == "failed" else "adopted: found in SageMaker"
                self.ledger.transition(name, target, detail=detail, expect=("planned",))
                if status.terminal and status.billable_seconds is not None:
                    self.ledger.put_value(_key(self.d.sweep_id, f"billed:{name}"), int(status.billable_seconds))
                self._event(f"{name}: {target} in SageMaker (submitted from another machine or home); adopted")

    def _elsewhere(self, own: set[str]) -> set[str]:
        """Names of this sweep's jobs in progress that this ledger does not count in flight."""
        if not self.count_elsewhere:
            return set()
        # Only SageMaker has jobs another machine may have started; the Backend protocol has
        # no listing, so this asks the backend's own client and translates with its function.
        lister = getattr(self.backend, "sm", None)
        if lister is None:
            return set()
        from botocore.exceptions import BotoCoreError, ClientError

        from orchestrator.backends.sagemaker import translate

        names: set[str] = set()
        args = {"NameContains": self.ident.job_prefix, "StatusEquals": "InProgress", "MaxResults": 100}
        while True:
            try:
                page = lister.list_training_jobs(**args)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc, operation="ListTrainingJobs", region=self.d.region) from exc
            names.update(j["TrainingJobName"] for j in page.get("TrainingJobSummaries", []))
            if not page.get("NextToken"):
                break
            args["NextToken"] = page["NextToken"]
        known = {e.job_name for e in self.ledger.entries(sweep_id=self.d.sweep_id)}
        out = set()
        for name in names - own:
            if not self.ident.owns(name):
                continue
            if name not in known and name not in self._foreign:
                try:
                    tags = self.backend.status(name).tags
                except (BackendError, InputError):
                    continue
                self._foreign[name] = tags.get(TAG_SWEEP) == self.d.sweep_id
            if name in known or self._foreign.get(name):
                out.add(name)
        return out

    def submit_ready(self) -> None:
        """Reconcile rows left in `submitting`, then submit planned rows while there is room."""
        if self.clock() < self._not_before:
            return
        rows = self._rows()
        latest = [rows[t.trial_id][-1] for t in self.d.trials if t.trial_id in rows]
        for entry in latest:
            if entry.state == "submitting" and self.clock() >= self._not_before:
                self._submit(entry, reconcile=True)
        if self.clock() < self._not_before:
            return
        rows = self._rows()
        latest = [rows[t.trial_id][-1] for t in self.d.trials if t.trial_id in rows]
        own = {e.job_name for e in latest if e.state in ("submitting", "submitted", "running")}
        try:
            elsewhere = self._elsewhere(own)
        except BackendError as exc:
            if submit_error_kind(exc) not in WAIT_KINDS:
                self._halt(exc)
            self._backoff(f"listing this sweep's jobs: {exc.message}", "list", exc)
            return
        self._streaks.pop("list", None)
        room = self.d.concurrency - len(own) - len(elsewhere)
        adopted = set()
        for entry in latest:
            if entry.state == "planned" and entry.job_name in elsewhere:
                # Another machine created this very job: adopt it instead of creating it.
                if self.ledger.transition(entry.job_name, "submitted", detail="adopted: submitted elsewhere",
                                          expect=("planned",)):
                    self._event(f"{entry.job_name}: adopted (submitted by another machine)")
                adopted.add(entry.job_name)
        self._last_elsewhere = len(elsewhere - adopted)
        for entry in latest:
            if entry.state != "planned" or entry.job_name in adopted:
                continue
            if room <= 0 or self.clock() < self._not_before or self.stop_requested():
                return
            if self._submit(entry, reconcile=False):
                room -= 1
                self._acted += 1

    def _submit(self, entry: Entry, *, reconcile: bool) -> bool:
        trial = self._trials[entry.trial_id or ""]
        prepared = self._prepare(trial, entry)
        try:
            result = self.backend.submit(prepared)
        except OrchestratorError as exc:
            kind = submit_error_kind(exc)
            if kind == "setup":
                # No credentials, or access denied: every other submit would fail the same way.
                self._halt(exc)
            if kind in WAIT_KINDS:
                # A quota reached while jobs of this sweep run frees up as they end: waiting for
                # them is not a failure that repeats.
                others = [e for e in self.ledger.entries(sweep_id=self.d.sweep_id)
                          if e.state in ("submitted", "running") and e.job_name != entry.job_name]
                self._backoff(f"{entry.job_name}: {exc.message}", "submit", exc,
                              bounded=not (kind == "quota" and others))
                return False
            detail = f"[{kind}] {exc.message}"
            self.ledger.transition(entry.job_name, "failed", detail=detail, expect=("planned", "submitting"))
            self._event(f"{entry.job_name}: {kind} error at submit: {exc.message}")
            return False
        self._failures = 0
        self._streaks.pop("submit", None)
        self._waiting_reason = None
        self.ledger.transition(entry.job_name, "submitted", expect=("planned", "submitting"))
        verb = "submitted" if result.created else "reconciled (it existed)"
        self._event(f"{entry.job_name}: {verb}" + (" after a crash" if reconcile and result.created else ""))
        return True

    def step(self) -> Progress:
        """One round: reopen what `sweep stop` stopped, refresh in-flight jobs, plan retries,
        submit what fits."""
        self._last_elsewhere = 0
        self._acted = 0
        if self.stop_requested():
            return self.progress(stopped=True)
        self.adopt_remote()
        self.reopen_stopped()
        self.note_completed_elsewhere()
        self.refresh()
        self.plan_retries()
        self.submit_ready()
        return self.progress()

    def progress(self, stopped: bool = False) -> Progress:
        views = self.views()
        counts: dict[str, int] = {}
        for view in views:
            counts[view.state] = counts.get(view.state, 0) + 1
        in_flight = sum(1 for v in views if v.state in ("submitting", "submitted", "running"))
        waiting = self._not_before if self._not_before > self.clock() else None
        return Progress(self.d.sweep_id, len(views), counts, in_flight, self._last_elsewhere,
                        waiting, self._waiting_reason if waiting else None, tuple(self._events),
                        done=all(v.final for v in views), stopped=stopped, event_count=self._event_count)

    def run(self, *, max_steps: int | None = None) -> Progress:
        """Step until every trial is final or the sweep is stopped, sleeping between rounds."""
        steps = 0
        while True:
            progress = self.step()
            steps += 1
            if self.on_progress:
                self.on_progress(progress)
            if progress.done or progress.stopped or (max_steps is not None and steps >= max_steps):
                return progress
            wait = self.poll_seconds
            if progress.waiting_until is not None:
                wait = min(wait, max(0.0, progress.waiting_until - self.clock()))
            if self._acted and progress.counts.get("planned", 0) and progress.waiting_until is None \
                    and progress.in_flight + progress.elsewhere < self.d.concurrency:
                wait = 0.0  # a retry was just planned and there is room: submit it at once
            self.sleep(wait)


# --- stop ------------------------------------------------------------------------------------


def request_stop(ledger: Ledger, sweep_id: str) -> None:
    ledger.put_value(_key(sweep_id, "stop"), True)


def clear_stop(ledger: Ledger, sweep_id: str) -> None:
    ledger.put_value(_key(sweep_id, "stop"), False)


def record_runner(ledger: Ledger, sweep_id: str, pid: int) -> None:
    ledger.put_value(_key(sweep_id, "runner"), {"pid": pid, "host": os.uname().nodename})


def runner_pid(ledger: Ledger, sweep_id: str) -> int | None:
    info = ledger.get_value(_key(sweep_id, "runner"))
    if isinstance(info, dict) and info.get("host") == os.uname().nodename and isinstance(info.get("pid"), int):
        return info["pid"]
    return None


@dataclass(frozen=True)
class StopReport:
    stopped_jobs: list[str]
    cancelled: list[str]
    errors: list[str]


def stop(runner: Runner) -> StopReport:
    """Stop the sweep: planned trials become stopped (detail STOPPED_BEFORE_SUBMISSION),
    in-flight jobs are asked to stop (STOPPED_IN_FLIGHT); `sweep resume` reopens both.

    The caller holds the runner lock (so no runner of this machine submits meanwhile) and has
    set the stop flag (so a runner started later does nothing).
    """
    stopped_jobs, cancelled, errors = [], [], []
    for history in runner._rows().values():
        entry = history[-1]
        if entry.state == "planned":
            if runner.ledger.transition(entry.job_name, "stopped", detail=STOPPED_BEFORE_SUBMISSION,
                                        expect=("planned",)):
                cancelled.append(entry.job_name)
            continue
        if entry.state not in ("submitting", "submitted", "running"):
            continue
        try:
            status = runner.backend.status(entry.job_name)
        except UnknownJob:
            # The backend does not know the job. From `submitting`, a create that never reached
            # it: nothing runs, and a resume may create it under this name. A job the ledger
            # saw created but the backend lost is treated as stopped in flight: a resume gives
            # it a new name, never one the backend may still hold.
            never = entry.state == "submitting"
            runner.ledger.transition(entry.job_name, "stopped", detail=(
                f"{STOPPED_BEFORE_SUBMISSION} (never created)" if never else f"{STOPPED_IN_FLIGHT} (job not found)"),
                expect=("submitting", "submitted", "running"))
            cancelled.append(entry.job_name)
            continue
        except DamagedStatus:
            status = None  # its record is unreadable, but the backend may still stop it
        except BackendError as exc:
            errors.append(f"{entry.job_name}: {exc.message}")
            continue
        if status is not None and status.terminal:
            runner.ledger.transition(entry.job_name, status.status, detail=status.failure_reason,
                                     expect=("submitting", "submitted", "running"))
            continue
        try:
            runner.backend.stop(entry.job_name)
        except OrchestratorError as exc:
            errors.append(f"{entry.job_name}: {exc.message}")
            continue
        runner.ledger.transition(entry.job_name, "stopped", detail=STOPPED_IN_FLIGHT,
                                 expect=("submitting", "submitted", "running"))
        stopped_jobs.append(entry.job_name)
    return StopReport(stopped_jobs, cancelled, errors)
