"""A sweep's plan: every trial checked and its first job prepared, before anything runs.

Contract:
- `plan(sweep)` doctor-checks every trial and every failover variant of it, and prepares
  each trial's first job (the exact request and its cost bound). Any doctor error refuses the
  whole sweep (SpecError listing the failing trials) before anything is submitted.
- In a sweep whose trials run on several backends, a trial fails over only to the `failover`
  types its backend runs (a type the doctor refuses for its instance type alone is skipped
  for that trial); a failover type that no trial's backend runs is refused.
- A SageMaker on-demand trial with failover types sends them as one instance preference list
  (`platform_failover`): SageMaker launches on the first with capacity, and the trial's
  client-side chain is its own type alone. Spot trials (which preferences exclude), trials on
  other backends, chains of more than 5 types and preference lists the doctor refuses (a type
  whose count cannot keep the global batch) keep the client-side failover.
- Trials that can share a SageMaker warm pool (`warm_pool.pool_key`) are ordered next to each
  other (`warm_pool.grouped`), so the runner, which submits in plan order, chains them.
- `check_budget(plan)` refuses a plan above `budget.max_total_cost_usd` (SpecError at that
  line); the total counts a warm pool's keep-alive once per chain (`Plan.total_usd`). `Plan.worst_usd` is the total if every trial failed over along its whole chain and
  used every retry (`cost.worst_case`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator import cost, doctor, preferences, request, sourcedir, warm_pool
from orchestrator.errors import InputError, Problem, SpecError
from orchestrator.names import Identity
from orchestrator.spec import JobSpec, SweepSpec, with_overrides
from orchestrator.spec.models import MAX_PREFERENCES
from orchestrator.sweep.expand import (
    Trial,
    describe_overrides,
    expand,
    identity,
    points,
    problem_at,
    raise_problems,
)


@dataclass(frozen=True)
class PlannedTrial:
    """A trial ready to run: its first job's name and prepared request, and its failover chain."""

    trial: Trial
    job_name: str
    prepared: request.Prepared
    chain: tuple[str, ...]  # instance types: the trial's own, then its failover order
    chain_usd: tuple[float, ...] = ()  # the cost bound of a job on each type of `chain`
    max_retries: int = 0
    # The types its request sends as InstancePreferences (`platform_failover`): its own, then
    # the failover SageMaker does within one job; the bound `usd_max` covers the dearest.
    preferences: tuple[str, ...] = ()

    @property
    def failover(self) -> tuple[str, ...]:
        """Every type the trial may fail over to: the client-side chain's, or the request's own list."""
        return self.chain[1:] or self.preferences[1:]

    @property
    def usd_max(self) -> float:
        return self.prepared.estimate.usd_max

    @property
    def worst_usd(self) -> float:
        """The trial's cost bound with every failover and retry (`cost.worst_case`)."""
        return cost.worst_case(list(self.chain_usd or (self.usd_max,)), self.max_retries)


@dataclass
class Plan:
    """A sweep's planned trials, with what planning found: merged duplicates, warnings."""

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
        """Every trial's bound, with the warm-pool keep-alive counted once per chain of trials
        that share a pool (`warm_pool.chained_keep_alive_usd`), not once per trial."""
        runs = sum(t.usd_max - t.prepared.estimate.keep_alive_usd for t in self.trials)
        kept = warm_pool.chained_keep_alive_usd(
            ((warm_pool.pool_key(t.prepared.request), t.prepared.estimate.keep_alive_usd) for t in self.trials),
            self.sweep.concurrency)
        return runs + kept

    @property
    def worst_usd(self) -> float:
        """The total if every trial failed over along its whole chain and used every retry."""
        return sum(t.worst_usd for t in self.trials)

    @property
    def backends(self) -> list[str]:
        """The backends the trials run on, in trial order, each once."""
        return list(dict.fromkeys(t.trial.spec.backend for t in self.trials))

    def prepared(self) -> dict[str, request.Prepared]:
        """Job name -> prepared request of each trial's first job (for `Runner(prepared=...)`)."""
        return {t.job_name: t.prepared for t in self.trials}

    def to_json(self) -> dict:
        total = self.total_usd
        return {
            "sweep_id": self.sweep_id,
            "backend": self.sweep.base_spec.backend,
            "backends": self.backends,
            "region": self.sweep.base_spec.region,
            "concurrency": self.sweep.concurrency,
            "max_retries": self.sweep.max_retries,
            "trials": [{
                "index": t.trial.index, "trial_id": t.trial.trial_id, "job_name": t.job_name,
                "backend": t.trial.spec.backend,
                "overrides": t.trial.overrides, "instance_type": t.trial.spec.instance.type,
                "instance_count": t.trial.spec.instance.count, "failover": list(t.failover),
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
    """The instance types a trial runs on in turn: its own, then the sweep's failover order."""
    own = spec.instance.type
    return (own, *[t for t in sweep.failover.get("instance.type", []) if t != own])


def platform_failover(spec: JobSpec, chain: tuple[str, ...]) -> doctor.Diagnosis | None:
    """The diagnosis of `spec` with its failover `chain` as instance.preferences (botocore's
    ResourceConfig.InstancePreferences: on-demand and training plans only, at most 5 types), or
    None where the failover stays client-side (see the module docstring)."""
    inst = spec.instance
    if (spec.backend_type.preferences != "sent" or inst.spot or inst.preferences or not 1 < len(chain) <= MAX_PREFERENCES
            or not preferences.can_keep_global_batch(spec, chain)):
        return None
    try:
        listed = with_overrides(spec, {"instance.preferences": [{"type": t} for t in chain]})
    except SpecError:
        return None
    diagnosis = doctor.diagnose(listed)
    return None if doctor.errors(diagnosis.findings) else diagnosis


def plan(sweep: SweepSpec, *, tick: datetime | None = None,
         progress: Callable[[int, int], None] | None = None, leave_out: Mapping[str, str] | None = None) -> Plan:
    """Expand, doctor-check and prepare every trial (see the module docstring).
    `progress(done, total)` is called after each trial (the CLI's progress bar). `leave_out`:
    failover type -> why no trial fails over to it (`admission.plan_within_quotas`: its quota
    would refuse the job), each said as a plan warning."""
    with sourcedir.same_sources():  # every trial's archive from one look at the package's files
        return _plan(sweep, tick, progress, dict(leave_out or {}))


def _plan(sweep: SweepSpec, tick: datetime | None, progress: Callable[[int, int], None] | None,
          leave_out: dict[str, str]) -> Plan:
    trials, duplicates = expand(sweep)
    ident = identity(sweep.sweep, trials, tick)
    where_of = {i: w for i, (_, w) in enumerate(points(sweep))} if sweep.grid or sweep.random or sweep.variants else {}
    planned: list[PlannedTrial] = []
    # Trials on several backends: each fails over only to the failover types its backend runs.
    mixed = len({t.spec.backend for t in trials}) > 1
    fits: set[str] = set()
    warnings: dict[str, list[str]] = {}
    problems: list[Problem] = []
    failing = 0
    for done, trial in enumerate(trials, 1):
        if progress is not None:
            progress(done - 1, len(trials))
        name = ident.job_name(trial.trial_id)
        where = where_of.get(trial.index, {})
        label = f"trial {trial.index} {trial.trial_id} ({describe_overrides(trial.overrides)})"
        bad: list[Problem] = []
        chain = failover_chain(sweep, trial.spec)
        for itype in chain[1:]:
            if itype in leave_out:
                warnings.setdefault(f"quota: failover type {itype} left out: {leave_out[itype]}", []).append(
                    trial.trial_id)
        chain = tuple(t for t in chain if t == chain[0] or t not in leave_out)
        source: JobSpec | doctor.Diagnosis = trial.spec
        listed = platform_failover(trial.spec, chain)
        sent: tuple[str, ...] = ()
        if listed is not None:
            sent = chain
            # The trial keeps its identity (id and spec hash: the expanded spec); its job runs the list.
            trial, chain = dataclasses.replace(trial, spec=listed.spec), chain[:1]
            source = listed
        try:
            prepared = request.prepare(source, job_name=name, extra_tags=ident.tags(trial.trial_id),
                                       varied=trial.overrides)
        except SpecError as exc:
            bad += [problem_at(sweep, where, p.path, f"{label}: {p.message}") for p in exc.problems]
        except InputError as exc:
            bad.append(problem_at(sweep, where, "", f"{label}: {exc.message}"))
        else:
            for finding in prepared.findings:
                if finding.severity == "error":
                    bad.append(problem_at(sweep, where, finding.path,
                                           f"{label}: {finding.message} [{finding.rule}]; fix: {finding.fix}"))
                elif finding.severity == "warning":
                    warnings.setdefault(f"{finding.rule}: {finding.message}", []).append(trial.trial_id)
        chain_usd = [] if bad else [prepared.estimate.usd_max]  # a refused trial is not planned
        kept = [chain[0]]
        for fallback in chain[1:]:
            # One diagnosis per variant: its target, cost and findings are derived once.
            variant = doctor.diagnose(with_overrides(trial.spec, {"instance.type": fallback}))
            refused = doctor.errors(variant.findings)
            if mixed and any(f.rule in doctor.NOT_THE_BACKENDS_TYPE for f in refused):
                # In a sweep across backends, a failover type another backend runs is not this
                # trial's, whatever else (its budget) the doctor says of it.
                continue
            fits.add(fallback)
            kept.append(fallback)
            chain_usd.append(variant.estimate.usd_max)
            for finding in refused:
                file, line, col = sweep.locate("failover", "instance.type", str(
                    sweep.failover["instance.type"].index(fallback)))
                bad.append(Problem(file, line, col, finding.path,
                                   f"{label} failing over to {fallback}: {finding.message} [{finding.rule}]; "
                                   f"fix: {finding.fix}"))
        if bad:
            failing += 1
            problems += bad
            continue
        planned.append(PlannedTrial(trial, name, prepared, tuple(kept), tuple(chain_usd), sweep.max_retries, sent))
    for i, fallback in enumerate(sweep.failover.get("instance.type", [])):
        if mixed and fallback not in fits and fallback not in leave_out and trials:
            failing += 1
            file, line, col = sweep.locate("failover", "instance.type", str(i))
            problems.append(Problem(file, line, col, "failover.instance.type",
                                    f"{fallback} is not an instance type of any trial's backend "
                                    f"({', '.join(sorted({t.spec.backend for t in trials}))}): no trial can fail over to it"))
    if progress is not None:
        progress(len(trials), len(trials))
    raise_problems(problems, failing, "trial(s) fail the doctor's checks; nothing was submitted",
                    "fix the base spec or the sweep's values")
    # Trials that can share a warm pool run one after another, so each reuses the last's pool.
    planned = warm_pool.grouped(planned, lambda t: warm_pool.pool_key(t.prepared.request))
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
