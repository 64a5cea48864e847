"""The jobs a trial of a cloud schedule may run in one run, fixed at deploy: its first job, and
the retries and failovers the sweep's policy allows, each with its exact request.

Contract:
- `attempts(plan, planned)` is the trial's attempt graph, as the laptop runner walks it
  (`sweep.history.next_attempt`): from an attempt on chain type i after u retries, a failure
  of kind capacity moves to the next type of the failover chain (i + 1, a failover), or, at
  the chain's end, counts as a retry; spot and internal failures are retries (u + 1) while u <
  `max_retries`; any other failure ends the trial. Attempt n = i + u is named as the runner
  names it (`Identity.job_name(trial, n)`: `-rN`), on the chain's type i, tagged as the runner
  tags it (`TAG_ATTEMPT`: `retry` or `failover:<from type>`), and prepared by the same
  `request.prepare` (its own source archive, whose job.json names it).
- A SageMaker on-demand trial whose failover became an instance preference list has a chain
  of one: SageMaker fails over itself, and only retries are compiled.
- `worst_usd(graphs)` is the most one run can bill: each trial's dearest path through its graph,
  summed (the first attempts, every failover and every retry on the dearest type: at most
  `cost.worst_case`). The machine cannot refuse a retry by the sweep's spend as the laptop's
  runner does, so the budget is checked against this bound at plan and deploy.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.names import TAG_ATTEMPT

# Failure kinds that lead to another attempt (`sweep.failures.RETRYABLE`, less `lost`: a job the
# machine created and then cannot find fails its describe call, not its trial).
FAILOVER_KIND = "capacity"
RETRY_KINDS = ("capacity", "spot", "internal")


@dataclass(frozen=True)
class Attempt:
    """One job a trial may run: its place in the graph and its prepared request."""

    key: str  # "a<i>.<u><via>", unique within the trial: a state-name fragment
    number: int  # i + u, the -rN of its name
    chain_index: int
    retries: int
    prepared: object  # request.Prepared
    on_capacity: str | None = None  # the key of the attempt after a capacity failure
    on_retry: str | None = None  # the key after a spot or internal failure

    @property
    def instance_type(self) -> str:
        return self.prepared.spec.instance.type


def _key(i: int, u: int, via: str) -> str:
    return f"a{i}.{u}{via}"


def attempts(plan, planned) -> list[Attempt]:
    """The trial's attempts, its first job first (see the module docstring)."""
    from orchestrator import request
    from orchestrator.spec import with_overrides

    chain, max_retries = planned.chain, plan.sweep.max_retries
    trial = planned.trial
    found: dict[str, Attempt] = {}
    todo = [(0, 0, "")]
    while todo:
        i, u, via = todo.pop(0)
        key = _key(i, u, via)
        if key in found:
            continue
        if i == 0 and u == 0:
            prepared = planned.prepared
        else:
            spec = trial.spec if chain[i] == trial.spec.instance.type else with_overrides(
                trial.spec, {"instance.type": chain[i]})
            tags = plan.identity.tags(trial.trial_id)
            tags[TAG_ATTEMPT] = f"failover:{chain[i - 1]}" if via == "f" else "retry"
            prepared = request.prepare(spec, job_name=plan.identity.job_name(trial.trial_id, i + u), extra_tags=tags,
                                       varied=trial.overrides)
        retry = (i, u + 1, "r") if u < max_retries else None
        capacity = (i + 1, u, "f") if i + 1 < len(chain) else retry
        found[key] = Attempt(key, i + u, i, u, prepared,
                             on_capacity=_key(*capacity) if capacity else None,
                             on_retry=_key(*retry) if retry else None)
        todo += [step for step in (capacity, retry) if step is not None]
    return list(found.values())


def of_plan(plan) -> dict[str, list[Attempt]]:
    """Trial id -> `attempts` of each trial of `plan` (each retry's request builds its own
    archive: `compiled.compile_schedule` calls this once and keeps the result)."""
    return {t.trial.trial_id: attempts(plan, t) for t in plan.trials}


def worst_usd(graphs: dict[str, list[Attempt]]) -> float:
    """The most one run of the compiled machine can bill (see the module docstring)."""
    total = 0.0
    for graph in graphs.values():
        # An attempt's successors have the next number, so they come after it in the list.
        dearest: dict[str, float] = {}
        for a in reversed(graph):
            after = [dearest[k] for k in (a.on_capacity, a.on_retry) if k is not None]
            dearest[a.key] = a.prepared.estimate.usd_max + max(after, default=0.0)
        total += dearest[graph[0].key]
    return total
