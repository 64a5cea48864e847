"""Admitting a sweep's jobs by what the account allows: the one admission that `sweep run` and
`sweep resume`, `schedule run`/`tick` (each tick sweep) and `schedule deploy` (the cloud
schedule, before anything is uploaded) all go through.

Contract:
- `read(specs, clients, region)`: the quota verdicts of each spec (`quotas.sweep_verdicts`: one
  ListServiceQuotas walk per service, defaults for what it leaves out, one look at the training
  jobs in progress). `clients_of(router, names)`: the quota clients of a sweep's first backend
  that has quotas, or None.
- `admit(labelled, verdicts, region)`: InputError (exit 2) before any submit when a job cannot
  pass SageMaker's quota check (`quotas.require_fit`: every type of a preference list must fit
  its own quota), naming the trial, each short quota, its code and the increase command; else
  the `Admission` the runner asks before each submit.
- `Admission(limits).why_not(needs, held)`: None when a job asking `needs` (`quotas.Need`s, one
  per type it may run on) may be submitted beside the jobs in flight (`held`, their needs), else
  why it waits. It asks each `Limit` in turn: THE PLACE A FURTHER LIMIT PLUGS IN (a training
  plan's capacity is one more `Limit` in the list `limits_from` builds). `QuotaLimit` is the
  account's quotas: what each quota allows (the Service Quotas value less what other jobs held
  when the sweep started; a quota not known is not limited), counted per quota (service and
  name: vCPUs of an EC2 quota never meet instances of a SageMaker one; spot and on-demand are
  different quotas). A job fits only when EVERY need has room, as SageMaker checks every type
  of a list. A job in flight with preferences is counted against every type it may hold (which
  one SageMaker selected is not in the ledger): this can hold a trial back, never admit one
  past a quota.
- Failover types: `failovers_short(plan, verdicts)` names the sweep's failover types that fail
  their quota; the sweep is then planned without them (`sweep.plan(leave_out=...)`), said as a
  plan warning. Chosen over letting trials wait: a quota does not grow while a trial waits (an
  increase is a request to AWS), and one type at 0 in a preference list makes SageMaker reject
  every on-demand trial's request.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from orchestrator import quotas
from orchestrator.errors import InputError

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec


class Limit(Protocol):
    def why_not(self, needs: Sequence[quotas.Need], held: Sequence[Sequence[quotas.Need]]) -> str | None:
        """None when a job asking `needs` fits beside the jobs in flight (`held`); else why it waits."""


class QuotaLimit:
    """The account's Service Quotas, per quota key (`quotas.quota_key`)."""

    def __init__(self, remaining: dict[tuple[str, str], float]):
        self.remaining = dict(remaining)

    @classmethod
    def from_verdicts(cls, verdicts: Iterable[quotas.Verdict]) -> QuotaLimit:
        """Each known quota less what running jobs held when it was read."""
        return cls({quotas.quota_key(v.need): max(0.0, v.quota.value - (v.in_use or 0))
                    for v in verdicts if v.quota is not None})

    def why_not(self, needs: Sequence[quotas.Need], held: Sequence[Sequence[quotas.Need]]) -> str | None:
        taken: Counter = Counter()
        for job in held:
            for need in job:
                taken[quotas.quota_key(need)] += need.amount
        said = []
        for need in needs:
            key = quotas.quota_key(need)
            limit = self.remaining.get(key)
            if limit is not None and taken[key] + need.amount > limit:
                said.append(f"{need.instance_type} needs {need.amount} {need.unit} of \"{need.quota_name}\", "
                            f"{taken[key]} of {limit:g} held by this sweep")
        return "waiting for quota: " + "; ".join(said) if said else None


class Admission:
    """The limits a job must pass before it is submitted (see the module docstring)."""

    def __init__(self, limits: Sequence[Limit]):
        self.limits = list(limits)

    def why_not_job(self, needs: Sequence[quotas.Need], request: dict,
                    held: Iterable[tuple[Sequence[quotas.Need], dict]]) -> str | None:
        """`why_not` as the runner asks it: the job's request and the jobs in flight as (needs,
        request) pairs, so that a wrapper reading requests (`sweep.plan_capacity.PlanGate`) has them."""
        return self.why_not(needs, [n for n, _ in held])

    @classmethod
    def from_verdicts(cls, verdicts: Iterable[quotas.Verdict]) -> Admission:
        return cls(limits_from(list(verdicts)))

    def why_not(self, needs: Sequence[quotas.Need], held: Sequence[Sequence[quotas.Need]]) -> str | None:
        for limit in self.limits:
            why = limit.why_not(needs, held)
            if why is not None:
                return why
        return None


def limits_from(verdicts: list[quotas.Verdict]) -> list[Limit]:
    """Every limit a sweep's jobs are admitted by. A further limit is added here."""
    return [QuotaLimit.from_verdicts(verdicts)]


def clients_of(router, names: Iterable[str]):
    """The quota clients (`Backend.quota_clients`, tried once) of the first of the sweep's
    backends `names` that has quotas, or None (`router`: a `sweep.Router`, or one backend)."""
    from orchestrator.sweep.router import Router

    if not isinstance(router, Router):
        return router.quota_clients(attempts=1)
    for name in names:
        clients = router.get(name).quota_clients(attempts=1)
        if clients is not None:
            return clients
    return None


def read(specs: Sequence[JobSpec], clients) -> list[list[quotas.Verdict]]:
    """The verdicts of each of `specs` (`quotas.sweep_verdicts`); read-only calls."""
    quota_client, sagemaker_client = clients
    return quotas.sweep_verdicts(list(specs), quota_client, sagemaker_client)


def admit(labelled: Sequence[tuple[str, list[quotas.Verdict]]], region: str) -> Admission:
    """InputError (exit 2) naming the first job (its label) that would fail SageMaker's quota
    check; else the Admission of every verdict. `labelled`: (label, verdicts of one job)."""
    for label, verdicts in labelled:
        try:
            quotas.require_fit(verdicts, region)
        except InputError as exc:
            raise InputError(f"{label}: {exc.message}", hint=exc.hint) from None
    return Admission.from_verdicts(v for _, verdicts in labelled for v in verdicts)


def failovers_short(failover_types: Iterable[str], labelled: Sequence[tuple[str, list[quotas.Verdict]]],
                    region: str) -> dict[str, str]:
    """Failover type -> why it is left out: its quota is below what a trial asks of it."""
    wanted = set(failover_types)
    out: dict[str, str] = {}
    for _, verdicts in labelled:
        for verdict in quotas.short(verdicts):
            itype = verdict.need.instance_type
            if itype in wanted and itype not in out:
                said, hint = quotas.shortfall([verdict], region)
                out[itype] = f"{said} (SageMaker would reject every request listing it); {hint}"
    return out


def summary(verdicts: Iterable[quotas.Verdict]) -> list[str]:
    """One line per quota the sweep uses (`Verdict.describe`)."""
    return [v.describe() for v in {quotas.quota_key(v.need): v for v in verdicts}.values()]


# --- the paths: a saved sweep, a sweep to plan, a cloud schedule's every attempt ----------


def _jobs(trials: Iterable) -> list[tuple[str, JobSpec]]:
    """(label, spec) of each trial's first job and of each client-side failover type of its
    chain (`trials`: anything with .trial_id, .spec and .chain: a TrialDef, or a PlannedTrial's)."""
    from orchestrator.spec import with_overrides

    out = []
    for t in trials:
        out.append((f"trial {t.trial_id}", t.spec))
        for itype in t.chain[1:]:
            out.append((f"trial {t.trial_id} failing over to {itype}",
                        with_overrides(t.spec, {"instance.type": itype})))
    return out


def _read_labelled(jobs: list[tuple[str, JobSpec]], clients) -> list[tuple[str, list[quotas.Verdict]]]:
    verdicts = read([spec for _, spec in jobs], clients)
    return [(label, found) for (label, _), found in zip(jobs, verdicts, strict=True)]


def _unread(exc: Exception) -> str:
    from orchestrator import aws

    return f"quotas not read ({aws.describe(exc) or f'{type(exc).__name__}: {exc}'})"


def for_sweep(definition, router) -> tuple[Admission | None, list[str]]:
    """The admission of a saved sweep (`sweep run`/`resume`, each tick sweep of `schedule
    run`/`tick`), read through the quota clients of its backends (`router`: its `sweep.Router`):
    (Admission, one line per quota), or (None, why) when no trial needs a quota, its backends
    have none, or they could not be read (said; its trials are then submitted without it).
    InputError (exit 2) when a trial's first job cannot pass the quota check; a client-side
    failover type that cannot is said (its attempt would wait for quota)."""
    from botocore.exceptions import BotoCoreError, ClientError

    trials = list(definition.trials)
    if not any(quotas.needs(t.spec) for t in trials):
        return None, []
    try:
        clients = clients_of(router, definition.backends)
        if clients is None:
            return None, []
        labelled = _read_labelled(_jobs(trials), clients)
    except quotas.MalformedAnswer as exc:
        return None, [f"not read ({exc.message}); trials are submitted without admission by quota"]
    except (BotoCoreError, ClientError) as exc:
        return None, [f"{_unread(exc)}; trials are submitted without admission by quota"]
    first = [(label, v) for label, v in labelled if " failing over to " not in label]
    admission = admit(first, definition.region)
    lines = summary(v for _, found in labelled for v in found)
    for label, found in labelled:
        if " failing over to " in label and quotas.short(found):
            said, hint = quotas.shortfall(quotas.short(found), definition.region)
            lines.append(f"{label} would wait for quota: {said}; {hint}")
    return admission, lines


def plan_within_quotas(sweep, router, *, tick=None, progress=None):
    """(the sweep's plan, notes): `sweep.plan`, planned again without the failover types whose
    quota a trial cannot pass (each said in the notes and the plan's warnings). The plan as it
    is when the sweep has no failover types, its backends no quotas (`router`: a `sweep.Router`
    of its backends), or they could not be read (said)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from orchestrator.sweep.plan import plan

    planned = plan(sweep, tick=tick, progress=progress)
    failover = sweep.failover.get("instance.type", [])
    if not failover or not any(quotas.needs(t.trial.spec) for t in planned.trials):
        return planned, []
    try:
        clients = clients_of(router, planned.backends)
        if clients is None:
            return planned, []
        labelled = _read_labelled(_jobs(_PlannedView(t) for t in planned.trials), clients)
    except (BotoCoreError, ClientError) as exc:
        return planned, [f"{_unread(exc)}; failover types are kept as planned"]
    short = failovers_short(failover, labelled, sweep.base_spec.region)
    if not short:
        return planned, []
    planned = plan(sweep, tick=tick, leave_out=short)
    return planned, [f"failover type {itype} left out of every trial: {why}" for itype, why in short.items()]


class _PlannedView:
    """A PlannedTrial as `_jobs` reads a trial (its spec carries the preference list it sends)."""

    def __init__(self, planned):
        self.trial_id, self.spec, self.chain = planned.trial.trial_id, planned.trial.spec, planned.chain


def for_attempts(plan, attempts_of_trial: dict, clients) -> list[str]:
    """The admission of a cloud schedule (`schedule deploy`), before anything is uploaded: every
    job a run may make (`attempts_of_trial`: trial id -> its `schedule.attempts.Attempt`s, each
    with .prepared) must pass the quota check; InputError (exit 2) naming the first that cannot
    (trial and job name). Returns one line per quota; [] when `clients` is None or no job needs
    a quota."""
    jobs = []
    for trial_id, graph in attempts_of_trial.items():
        for attempt in graph:
            if attempt.prepared.quota_needs:  # decided when the attempt was prepared
                jobs.append((f"trial {trial_id} ({attempt.prepared.job_name})", attempt.prepared.spec))
    if clients is None or not jobs:
        return []
    labelled = _read_labelled(jobs, clients)
    admit(labelled, plan.sweep.base_spec.region)
    return summary(v for _, found in labelled for v in found)
