"""Service Quotas before money: how many of each instance type the account may run, what is in
use, and what a job needs, read before anything is paid.

Contract:
- `needs(spec)`: what the spec asks of which quota, offline. SageMaker: per instance type it may
  run on (each preference, or instance.type) the quota "<type> for training job usage" (spot:
  "<type> for spot training job usage"), in instances. Batch: the EC2 quota "Running On-Demand
  Inf instances" (spot: "All Inf Spot Instance Requests"), in vCPUs: the type's vCPUs x count.
  Other backends need none.
- `read(spec, quota_client, sagemaker_client)`: one `Verdict` per need, from Service Quotas'
  ListServiceQuotas (the applied values, matched by quota name; its code comes from the same
  answer), then ListAWSDefaultServiceQuotas for the needs it left out (the default applies
  where no value was applied: 0 for Trainium training on a new account), and, for SageMaker,
  the training jobs in progress (ListTrainingJobs, then DescribeTrainingJob for each one's
  selected type, count and whether it is spot: spot and on-demand jobs hold different quotas).
  Read-only calls that cost nothing. EC2 instances in use (Batch) are not read: unknown.
- `require_fit(verdicts, region)`: InputError (exit 2) when the job needs more than the quota of
  ANY type it could run on (rules table `sagemaker-preferences-every-quota`: SageMaker checks
  every type of a preference list), naming each short quota, its code and how to request an
  increase. A quota that is known and large enough, but taken by running jobs, is not an
  error: the job would wait, which `Verdict.free_now` says.

Sources (data/aws_rules.json): the Service Quotas API reference, ListServiceQuotas ("Lists the
applied quota values ... If the applied quota value is not available for a quota, the quota is
not retrieved") and ListAWSDefaultServiceQuotas ("Lists the default values for the quotas");
SageMaker's quota names in the Service Quotas console ("ml.trn1.32xlarge for training job usage").
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, NamedTuple

from orchestrator.errors import BackendError, InputError, service_message

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

SAGEMAKER = "sagemaker"
EC2 = "ec2"
INF_ON_DEMAND = "Running On-Demand Inf instances"
INF_SPOT = "All Inf Spot Instance Requests"
# In-progress jobs described for what is in use; more are counted as unknown (said so).
MAX_DESCRIBED = 100
# The largest applied quota value taken as real (instances or vCPUs); assumed: no Service Quotas
# page states a maximum, and no account runs a million training instances or vCPUs of one kind.
MAX_PLAUSIBLE_QUOTA = 1_000_000


class MalformedAnswer(BackendError):
    """Service Quotas answered something that is not a quota list (exit 1): a page without
    `Quotas`, a value that is not a finite number in range, pages that never end."""


def quota_value(q: dict) -> float:
    """A ListServiceQuotas entry's Value, checked: a number (not a string, a bool, NaN or
    infinite), at least 0 and at most MAX_PLAUSIBLE_QUOTA. MalformedAnswer otherwise."""
    value = q.get("Value")
    good = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and 0 <= value <= MAX_PLAUSIBLE_QUOTA
    if not good:
        raise MalformedAnswer(f"Service Quotas answered a malformed value for \"{service_message(q.get('QuotaName'), 80)}\" "
                              f"({service_message(q.get('QuotaCode') or '?', 40)}): {service_message(repr(value), 80)}, "
                              f"not a number from 0 to {MAX_PLAUSIBLE_QUOTA:,}; the quota was not used",
                              hint="ask again later; the Service Quotas console shows the applied value")
    return float(value)


class Need(NamedTuple):
    """What one way of running the job asks of one quota."""

    service: str  # the Service Quotas service code: sagemaker, ec2
    quota_name: str
    instance_type: str
    amount: int  # instances (sagemaker) or vCPUs (ec2)
    unit: str  # "instances" or "vCPUs"


class Quota(NamedTuple):
    name: str
    code: str
    value: float
    default: bool = False  # the AWS default (ListAWSDefaultServiceQuotas): no value was applied


def quota_key(need: Need) -> tuple[str, str]:
    """What a need is counted against: its service's quota of that name (vCPUs of an EC2 quota
    never meet instances of a SageMaker one)."""
    return (need.service, need.quota_name)


def spot_of(quota_name: str) -> bool:
    return " for spot training job usage" in quota_name


class Verdict(NamedTuple):
    """A need against its quota (None: not in the applied quotas) and what running jobs use
    of it (None: not known)."""

    need: Need
    quota: Quota | None
    in_use: int | None

    @property
    def fits(self) -> bool | None:
        """Whether the job fits in the quota at all; None when the quota is unknown."""
        return None if self.quota is None else self.need.amount <= self.quota.value

    @property
    def free_now(self) -> bool | None:
        """Whether it fits beside what runs now; None when either is unknown."""
        if self.quota is None or self.in_use is None:
            return None
        return self.need.amount + self.in_use <= self.quota.value

    def describe(self) -> str:
        n = self.need
        head = f"{n.instance_type}: needs {n.amount} {n.unit} of \"{n.quota_name}\""
        if self.quota is None:
            return f"{head}: quota unknown (neither an applied nor a default {n.service} quota of that name)"
        used = "in use unknown" if self.in_use is None else f"{self.in_use} in use"
        state = ("does not fit the quota" if not self.fits else
                 "fits now" if self.free_now else "fits the quota (waits for running jobs)" if self.free_now is False
                 else "fits the quota")
        origin = " (the AWS default: no increase applied)" if self.quota.default else ""
        return f"{head} ({self.quota.code}): quota {self.quota.value:g}{origin}, {used}: {state}"


def needs(spec: JobSpec) -> list[Need]:
    """What `spec` asks of which quota (see the module docstring: each backend says,
    `Backend.quota_needs`); pure."""
    return spec.backend_type.quota_needs(spec)


def clients(region: str, *, attempts: int | None = None):
    """(Service Quotas client, SageMaker client) in `region` (tests replace this). `attempts`:
    how many times each call is tried (default: `aws.retry_config()`'s); submit's own check
    tries once, so a quota read that fails delays no submit."""
    from orchestrator import aws

    config = aws.client_config(retries={"mode": "standard", "total_max_attempts": attempts}) if attempts else None
    return aws.client("service-quotas", region, config=config), aws.client("sagemaker", region, config=config)


def _listed(quota_client, operation: str, service: str, names: set[str]) -> dict[str, Quota]:
    from orchestrator import aws

    found: dict[str, Quota] = {}
    default = operation == "list_aws_default_service_quotas"
    api = "ListAWSDefaultServiceQuotas" if default else "ListServiceQuotas"
    pages = quota_client.get_paginator(operation).paginate(ServiceCode=service)
    try:
        for page in aws.bounded_pages(pages, f"{api} ({service})"):
            if not isinstance(page.get("Quotas"), list):
                raise MalformedAnswer(f"Service Quotas answered {api} ({service}) without a quota list "
                                      f"(not the JSON it documents: {service_message(page.get('message'), 120)})",
                                      hint="ask again later; an endpoint or proxy that is not Service Quotas "
                                           "answers so (check AWS_ENDPOINT_URL)")
            for q in page["Quotas"]:
                if isinstance(q, dict) and q.get("QuotaName") in names and q.get("Value") is not None:
                    found[q["QuotaName"]] = Quota(q["QuotaName"], q.get("QuotaCode") or "?", quota_value(q), default)
    except aws.EndlessPages as exc:
        raise MalformedAnswer(str(exc), hint="ask again later; the quotas were not used") from None
    return found


def applied(quota_client, service: str, names: set[str]) -> dict[str, Quota]:
    """The quotas of `service` whose names are in `names`: the applied value (ListServiceQuotas,
    every page), else the AWS default (ListAWSDefaultServiceQuotas, read only when a name is
    missing): ListServiceQuotas leaves out a quota whose applied value is not available, and
    the default is what AWS then enforces (rules table `service-quotas-applied-or-default`).
    Pages are bounded and values checked (MalformedAnswer)."""
    found = _listed(quota_client, "list_service_quotas", service, names)
    missing = names - set(found)
    if missing:
        found.update(_listed(quota_client, "list_aws_default_service_quotas", service, missing))
    return found


def training_in_use(sagemaker_client) -> Counter | None:
    """Instances that SageMaker training jobs in progress hold, by the quota they count against
    ("<type> for training job usage", or "... for spot training job usage" for a managed-spot
    job: the selected type with instance preferences); None when there are more than
    MAX_DESCRIBED to describe."""
    from orchestrator import aws

    names = []
    pages = sagemaker_client.get_paginator("list_training_jobs").paginate(StatusEquals="InProgress")
    try:
        for page in aws.bounded_pages(pages, "ListTrainingJobs (in progress)"):
            names += [j["TrainingJobName"] for j in page.get("TrainingJobSummaries") or []]
            if len(names) > MAX_DESCRIBED:
                return None  # more than are described: unknown, and no need to read on
    except aws.EndlessPages:
        return None
    if len(names) > MAX_DESCRIBED:
        return None
    used: Counter = Counter()
    for name in names:
        described = sagemaker_client.describe_training_job(TrainingJobName=name)
        resources = described.get("ResourceConfig") or {}
        itype = resources.get("SelectedInstanceType") or resources.get("InstanceType")
        count = resources.get("SelectedInstanceCount") or resources.get("InstanceCount") or 0
        if itype:  # not selected yet: holds nothing so far
            usage = "spot training job usage" if described.get("EnableManagedSpotTraining") else "training job usage"
            used[f"{itype} for {usage}"] += int(count)
    return used


def _verdicts(wanted: list[Need], by_service: dict[str, dict[str, Quota]], used: Counter | None) -> list[Verdict]:
    # In use is read for SageMaker's quotas only (training jobs): an EC2 quota's is unknown.
    return [Verdict(n, by_service[n.service].get(n.quota_name),
                    None if used is None or n.service != SAGEMAKER else used.get(n.quota_name, 0))
            for n in wanted]


def read(spec: JobSpec, quota_client, sagemaker_client=None, *, wanted: tuple | list | None = None) -> list[Verdict]:
    """One verdict per need of `spec` (see the module docstring); `wanted`: its needs when
    already decided (`request.Prepared.quota_needs`), else `needs(spec)`."""
    wanted = needs(spec) if wanted is None else list(wanted)
    if not wanted:
        return []
    by_service: dict[str, dict[str, Quota]] = {}
    for service in dict.fromkeys(n.service for n in wanted):
        by_service[service] = applied(quota_client, service, {n.quota_name for n in wanted if n.service == service})
    training = any(n.service == SAGEMAKER for n in wanted)  # training jobs hold its quotas
    used = training_in_use(sagemaker_client) if training and sagemaker_client else None
    return _verdicts(wanted, by_service, used)


def increase_hint(verdict: Verdict, region: str) -> str:
    """The CLI command and the console page that request a larger quota."""
    n, q = verdict.need, verdict.quota
    code = q.code if q is not None else "QUOTA_CODE"
    return (f"aws service-quotas request-service-quota-increase --service-code {n.service} --quota-code {code} "
            f"--desired-value {n.amount} --region {region}, or the console: "
            f"https://{region}.console.aws.amazon.com/servicequotas/home/services/{n.service}/quotas/{code}")


def short(verdicts: list[Verdict]) -> list[Verdict]:
    """The verdicts whose known quota is below what the job asks of it."""
    return [v for v in verdicts if v.fits is False]


def shortfall(verdicts: list[Verdict], region: str) -> tuple[str, str]:
    """(what is short, how to raise it) for `short(verdicts)`, each quota with its code."""
    said = "; ".join(f"\"{v.need.quota_name}\" ({v.quota.code}) is {v.quota.value:g} {v.need.unit} in {region}"
                     f"{' (the AWS default)' if v.quota.default else ''}, the job needs {v.need.amount}"
                     for v in verdicts)
    return said, "; ".join(increase_hint(v, region) for v in verdicts)


def require_fit(verdicts: list[Verdict], region: str) -> None:
    """InputError (exit 2) when any way of running the job needs more than its known quota:
    SageMaker checks the quota of every type of a preference list and rejects the request if
    any falls short, "even when the types ahead of it would have succeeded" (rules table
    `sagemaker-preferences-every-quota`)."""
    below = short(verdicts)
    if not below:
        return
    said, hints = shortfall(below, region)
    several = len(verdicts) > 1
    raise InputError(
        (f"{len(below)} of the job's {len(verdicts)} instance types fall short of their quota, and SageMaker checks "
         f"every type of a preference list, rejecting the request if any falls short: {said}") if several else
        f"the job does not fit its quota: {said}",
        hint=f"request an increase (new accounts start at 0 for Trainium training): {hints}"
             + ("; or remove the short types from instance.preferences" if several else ""))


def sweep_verdicts(specs: list[JobSpec], quota_client, sagemaker_client) -> list[list[Verdict]]:
    """`read` for each of a sweep's trial specs, with one ListServiceQuotas per service and one
    look at the running training jobs for all of them."""
    wanted = [needs(s) for s in specs]
    flat = [n for found in wanted for n in found]
    if not flat:
        return [[] for _ in specs]
    by_service = {service: applied(quota_client, service, {n.quota_name for n in flat if n.service == service})
                  for service in dict.fromkeys(n.service for n in flat)}
    training = any(n.service == SAGEMAKER for n in flat)  # training jobs hold its quotas
    used = training_in_use(sagemaker_client) if training and sagemaker_client else None
    return [_verdicts(found, by_service, used) for found in wanted]
