"""Neuron-aware checks of a job spec: what SageMaker, AWS Batch or the Neuron stack would refuse,
or do badly.

Contract: `diagnose(spec)` resolves the spec's target once (`catalog.resolve`), estimates its
cost once (`cost.estimate`) and runs every rule on them: the backend's own
(`Backend.rules`, in its folder) and those below, by topic: `instance` (type, hosts, workers,
LNC, spot, volume, preferences), `image`, `environment`, `model`, `budget`, `precompile`,
`keep_alive`. The `Diagnosis` is what `request.prepare` takes on, so nothing is derived twice.
It is pure (no network, no clock); findings come errors first, each with a stable rule id, a
message, a fix and the spec field (`raise_for` turns it into file:line:column); `findings(spec)` is
the list alone. The rules are
listed in docs/USAGE.md, "What the doctor checks".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from orchestrator import catalog, cost
from orchestrator import preferences as choosing
from orchestrator.doctor import (
    budget,
    environment,
    instance,
    keep_alive,
    model,
    precompile,
    undocumented,
)
from orchestrator.doctor.finding import ORDER, Finding, Severity
from orchestrator.errors import Problem, SpecError

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

__all__ = ["Diagnosis", "Finding", "Severity", "diagnose", "errors", "findings", "raise_for"]


class Diagnosis(NamedTuple):
    """What the doctor made of one spec: its resolved target, its cost bound and its findings
    (errors first). `request.prepare` builds the request from it without deriving any of it
    again."""

    spec: JobSpec
    target: catalog.Target
    estimate: cost.Estimate
    findings: list[Finding]
    choices: tuple = ()  # `preferences.choices(spec)`: each instance preference, sized and priced

    def raise_for_errors(self) -> None:
        """`raise_for` on these findings: SpecError, located, when any is an error."""
        raise_for(self.spec, self.findings)


def diagnose(spec: JobSpec) -> Diagnosis:
    """Resolve, estimate and check `spec` once (see the module docstring for the rules)."""
    choices = choosing.choices(spec)
    # The first preference is the spec's own type: its target is the spec's.
    target = choices[0].target if choices else catalog.resolve(spec)
    # With preferences, SageMaker bills whichever it selects: the bound is the dearest's.
    estimate = choosing.dearest(choices).estimate if choices else cost.estimate(spec, target)
    priced = choosing.dearest(choices).spec if choices else spec
    found = _findings(spec, target, estimate, priced) + instance.preference_rules(spec, choices)
    return Diagnosis(spec, target, estimate, sorted(found, key=lambda f: ORDER[f.severity]), tuple(choices))


NOT_THE_BACKENDS_TYPE = budget.NOT_THE_BACKENDS_TYPE


def findings(spec: JobSpec) -> list[Finding]:
    """All findings for `spec`, errors first (`diagnose(spec).findings`)."""
    return diagnose(spec).findings


def _findings(spec: JobSpec, target: catalog.Target, estimate: cost.Estimate, priced: JobSpec) -> list[Finding]:
    """Every rule but the preferences'; `priced`: the spec whose price the estimate is (the dearest
    preference's variant, else `spec`), which the budget rules name."""
    findings = spec.backend_type.rules(spec, target, estimate, priced)
    findings += instance.lnc(spec, target)
    findings += instance.training_plan_region(spec)
    findings += environment.lnc_env(spec, target)
    findings += environment.secret_env(spec)
    findings += model.precision(spec, target)
    findings += model.model(spec)
    findings += model.training(spec)
    findings += precompile.precompile(spec)
    findings += keep_alive.check(spec)
    findings += undocumented.check(spec)
    return sorted(findings, key=lambda f: ORDER[f.severity])


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def raise_for(spec: JobSpec, findings: Iterable[Finding]) -> None:
    """Raise SpecError, each error located in the spec's file, when any finding is an error."""
    bad = errors(findings)
    if not bad:
        return
    problems = []
    for finding in bad:
        file, line, column = spec.locate(finding.path)
        problems.append(Problem(file or "<spec>", line, column, finding.path, f"{finding.message} [{finding.rule}]"))
    fixes = list(dict.fromkeys(f.fix for f in bad))
    raise SpecError(problems, hint="; ".join(fixes))
