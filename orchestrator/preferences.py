"""Instance preferences: the types SageMaker may choose from, in priority order, each with the
count that trains the same global batch as the first.

Contract: `choices(spec)` is pure (the catalog's files are read) and empty for a spec without
`instance.preferences`. Each `Choice` is the spec as if that type alone had been asked for
(`variant`: type and count replaced, so the catalog, the doctor's rules and the cost estimate
read it unchanged), its target and its cost bound.

Counts (botocore's InstancePreference.InstanceCount: on every preference or on none, "when each
instance type needs a different number of instances to deliver equivalent compute"): the
global batch is workers per host x hosts x training.batch_size, and the per-worker batch is
the spec's, so a later type gets count = first's workers x first's count / its workers when
that divides; otherwise `Choice.count` is None and `Choice.why` says why (the doctor's N075).
Counts given on the preferences are kept as given (N075 warns when they change the batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from orchestrator import catalog, cost

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec


class Choice(NamedTuple):
    """One preference as SageMaker may select it."""

    type: str
    count: int | None  # None: no count trains the first choice's global batch (`why`)
    training_plan_arn: str | None  # its own plan; the job-level one is instance.training_plan_arn
    spec: JobSpec  # `variant(spec, type, count)`
    target: catalog.Target
    estimate: cost.Estimate
    why: str = ""  # why `count` is None, or why the given count changes the global batch

    def global_batch(self) -> int:
        return self.target.workers_per_node * (self.count or 0) * self.spec.training.batch_size


def variant(spec: JobSpec, type_: str, count: int) -> JobSpec:
    """`spec` with one instance type and count and no preferences (the source map is kept, so
    findings on it are still located in the spec's file)."""
    inst = spec.instance.model_copy(update={"type": type_, "count": count, "preferences": None})
    return spec.model_copy(update={"instance": inst})


def choices(spec: JobSpec) -> list[Choice]:
    """Every preference of `spec` with its count, target and cost bound (see the module docstring).
    Each type's target is resolved once (twice only when its count differs from the one it was
    first resolved at, which changes EFA)."""
    prefs = spec.instance.preferences
    if not prefs:
        return []
    out: list[Choice] = []
    first_workers = 0
    for position, pref in enumerate(prefs):
        base = spec.instance.count if position == 0 else (pref.count or spec.instance.count)
        probe_spec = variant(spec, pref.type, base)
        probe = catalog.resolve(probe_spec)
        count, why = (base if position == 0 else pref.count), ""
        first = out[0].target if out else probe
        if position == 0:
            first_workers = probe.workers_per_node * base
        elif probe.facts is None or first.facts is None:
            count = count or base
            unknown = pref.type if probe.facts is None else prefs[0].type
            why = "" if pref.count else (f"the catalog has no NeuronCore count for {unknown}, so {count} "
                                         "instance(s) are assumed to train the same batch")
        elif count is not None:
            if probe.workers_per_node * count != first_workers:
                why = (f"{count} x {pref.type} run {probe.workers_per_node * count} workers where the first choice "
                       f"runs {first_workers}: the global batch changes with the type chosen")
        elif first_workers % probe.workers_per_node:
            why = (f"{pref.type} runs {probe.workers_per_node} workers per host, which does not divide the first "
                   f"choice's {first_workers} workers ({first.workers_per_node} x {spec.instance.count} x "
                   f"{prefs[0].type}): no count trains the same global batch")
        else:
            count = first_workers // probe.workers_per_node
        sized, target = probe_spec, probe
        if count is not None and count != base:
            sized = variant(spec, pref.type, count)
            target = catalog.resolve(sized)
        out.append(Choice(pref.type, count, pref.training_plan_arn, sized, target, cost.estimate(sized, target), why))
    return out


def can_keep_global_batch(spec: JobSpec, types: tuple[str, ...] | list[str]) -> bool:
    """Whether `choices` would find a count for every one of `types` after the first (each
    type's workers per host divide the first's workers), from the catalog's facts alone: a
    cheap test before diagnosing a preference list (a sweep's failover chain)."""
    if spec.training.workers_per_node is not None:
        return True  # every type runs the workers the spec names
    facts = [catalog.instance(t) for t in types]
    if any(f is None or f.neuron_cores == 0 for f in facts):
        return False
    workers = [max(1, f.logical_cores(spec.instance.lnc)) for f in facts]
    return all(workers[0] * spec.instance.count % w == 0 for w in workers[1:])


def dearest(found: list[Choice]) -> Choice:
    """The choice with the highest cost bound (an unknown bound is the highest)."""
    return max(found, key=lambda c: c.estimate.usd_max)


def table(found: list[Choice]) -> list[dict]:
    """What the container needs of each choice (the job file's "preferences"): launch.py picks
    the row of the type SageMaker selected and takes its workers, LNC, EFA and environment
    from it (entrypoints/ cannot import the catalog)."""
    rows = []
    for choice in found:
        facts = choice.target.facts
        rows.append({
            "type": choice.type,
            "count": choice.count,
            "family": facts.family if facts else choice.target.family,
            "neuron_cores": facts.neuron_cores if facts else 0,
            "logical_cores": choice.target.logical_cores,
            "lnc": choice.target.lnc,
            "vcpus": facts.vcpus if facts else 0,
            "workers_per_node": choice.target.workers_per_node,
            "efa": choice.target.efa,
            "environment": dict(choice.target.environment),
            "usd_per_hour": choice.estimate.usd_per_hour,
        })
    return rows


def describe(found: list[Choice]) -> list[str]:
    """One line per choice for `plan`: its count, workers, price and cost bound; the dearest marked."""
    if not found:
        return []
    top = dearest(found)
    lines = []
    for i, choice in enumerate(found, 1):
        est = choice.estimate
        price = (cost.rate(est.price).describe() if est.price is not None else "price unknown")
        bound = f"at most {est.usd_max:.2f} USD" if est.known else "cost unknown"
        plan = f", training plan {choice.training_plan_arn}" if choice.training_plan_arn else ""
        mark = " (the dearest: the bound below)" if choice is top and len(found) > 1 else ""
        lines.append(f"preference {i}: {choice.count or '?'} x {choice.type}, {choice.target.workers_per_node} workers "
                     f"per host (global batch {choice.global_batch()}), {price}{plan}: {bound}{mark}")
    return lines


def to_json(found: list[Choice]) -> list[dict]:
    """The choices as `plan --json` shows them."""
    return [{"type": c.type, "count": c.count, "workers_per_node": c.target.workers_per_node,
             "global_batch": c.global_batch(), "training_plan_arn": c.training_plan_arn,
             "estimate": c.estimate.to_json()} for c in found]
