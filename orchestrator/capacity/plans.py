"""The account's training plans: create one from an offering, list them, describe one, find the
ledger jobs that used each, and check a spec's plan against the job (type, count, window, status).

Contract: every function here takes its SageMaker client; none prints. A plan's status is
SageMaker's TrainingPlanStatus: Pending (bought, not yet paid), Scheduled (paid, before its
window or between two pieces of it), Active, Expired, Failed. "Training jobs associated with
the plan remain in Pending status until the plan becomes Active" (SageMaker developer guide,
training-plan-details-using-api-cli-sdk.html).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.errors import InputError

if TYPE_CHECKING:
    from orchestrator.ledger import Entry
    from orchestrator.spec import JobSpec

# botocore's TrainingPlanName (CreateTrainingPlan, DescribeTrainingPlan).
NAME_PATTERN = r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}"
# A plan can take jobs once Scheduled ("Once the status is Scheduled, you can utilize the
# capacity reserved in the plan"); its instances are free to start them only while Active.
USABLE = ("Scheduled", "Active")
ENDED = ("Expired", "Failed")


@dataclass(frozen=True)
class Plan:
    """One training plan as ListTrainingPlans or DescribeTrainingPlan answers it."""

    arn: str
    name: str
    status: str
    start: dt.datetime | None
    end: dt.datetime | None
    types: tuple[str, ...]
    total: int
    available: int
    in_use: int
    fee: str | None
    currency: str
    targets: tuple[str, ...]
    status_message: str = ""

    @classmethod
    def from_answer(cls, item: dict) -> Plan:
        pieces = item.get("ReservedCapacitySummaries") or []
        return cls(arn=item["TrainingPlanArn"], name=item["TrainingPlanName"], status=item["Status"],
                   start=item.get("StartTime"), end=item.get("EndTime"),
                   types=tuple(dict.fromkeys(p["InstanceType"] for p in pieces if p.get("InstanceType"))),
                   total=int(item.get("TotalInstanceCount") or 0),
                   available=int(item.get("AvailableInstanceCount") or 0),
                   in_use=int(item.get("InUseInstanceCount") or 0), fee=item.get("UpfrontFee"),
                   currency=item.get("CurrencyCode") or "", targets=tuple(item.get("TargetResources") or ()),
                   status_message=item.get("StatusMessage") or "")

    def to_json(self) -> dict:
        def iso(value):
            return value.astimezone(dt.timezone.utc).isoformat() if value else None

        return {"arn": self.arn, "name": self.name, "status": self.status, "start": iso(self.start),
                "end": iso(self.end), "instance_types": list(self.types), "total_instances": self.total,
                "available_instances": self.available, "in_use_instances": self.in_use,
                "upfront_fee": self.fee, "currency": self.currency, "target_resources": list(self.targets)}


def name_of(arn: str) -> str:
    """The plan's name: what its ARN holds after training-plan/ (DescribeTrainingPlan takes the name)."""
    return arn.partition(":training-plan/")[2]


def region_of(arn: str) -> str:
    return arn.split(":")[3] if arn.count(":") >= 5 else ""


def check_name(name: str) -> str:
    """`name` when CreateTrainingPlan accepts it, else InputError (exit 2)."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise InputError(f"--name {name!r} is not a training plan name: letters, digits and single hyphens "
                         "inside, 1 to 64 characters (botocore's TrainingPlanName)", hint="e.g. --name vit-trn1-week49")
    return name


def default_name(spec_name: str, start: dt.datetime | None) -> str:
    """The spec's name and the plan's start day, within TrainingPlanName's 64 characters."""
    day = start.astimezone(dt.timezone.utc).strftime("%Y%m%d") if start else "plan"
    base = spec_name[:64 - len(day) - 1].rstrip("-")
    return f"{base}-{day}"


def call(operation: str, region: str | None, function, **params):
    """`function(**params)`, a botocore error made our BackendError (`cloud_errors.translate`:
    no credentials, access denied, no answer ... each said with its fix)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from orchestrator.backends.cloud_errors import translate

    try:
        return function(**params)
    except (BotoCoreError, ClientError) as exc:
        raise translate(exc, operation=operation, region=region) from None


def _region(client) -> str | None:
    return getattr(getattr(client, "meta", None), "region_name", None)


def create(client, offering_id: str, name: str) -> str:
    """CreateTrainingPlan: reserve the offering; the new plan's ARN. It starts Pending and is
    paid for asynchronously (SageMaker developer guide, "Reserve the best training plan")."""
    answer = call("CreateTrainingPlan", _region(client), client.create_training_plan,
                  TrainingPlanName=check_name(name), TrainingPlanOfferingId=offering_id)
    return answer["TrainingPlanArn"]


def list_plans(client) -> list[Plan]:
    """Every plan of the account in the client's region (ListTrainingPlans, every page), newest first."""
    def every_page() -> list[dict]:
        pages = client.get_paginator("list_training_plans").paginate(SortBy="StartTime", SortOrder="Descending")
        return [item for page in pages for item in page.get("TrainingPlanSummaries") or []]

    return [Plan.from_answer(item) for item in call("ListTrainingPlans", _region(client), every_page)]


def describe(client, arn: str) -> Plan:
    """DescribeTrainingPlan of the plan `arn` names."""
    return Plan.from_answer(call("DescribeTrainingPlan", _region(client), client.describe_training_plan,
                                 TrainingPlanName=name_of(arn)))


def plan_arns_of(request: dict) -> set[str]:
    """The plan ARNs a CreateTrainingJob request names (job-level or on a preference)."""
    resources = request.get("ResourceConfig") or {}
    arns = {resources["TrainingPlanArn"]} if resources.get("TrainingPlanArn") else set()
    for pref in resources.get("InstancePreferences") or []:
        arns.update(pref.get("TrainingPlanArns") or [])
    return arns


def used_by(entries: list[Entry]) -> dict[str, list[str]]:
    """Plan ARN -> the ledger's jobs whose request named it, oldest first."""
    found: dict[str, list[str]] = {}
    for entry in entries:
        for arn in sorted(plan_arns_of(entry.request or {})):
            found.setdefault(arn, []).append(entry.job_name)
    return found


def spec_plans(spec: JobSpec) -> list[tuple[str, str, str, int | None]]:
    """(spec field, plan ARN, instance type, count) for each plan the spec names."""
    from orchestrator import preferences

    out = []
    if spec.instance.training_plan_arn:
        out.append(("instance.training_plan_arn", spec.instance.training_plan_arn, spec.instance.type,
                    spec.instance.count))
    for i, choice in enumerate(preferences.choices(spec)):
        if choice.training_plan_arn:
            out.append((f"instance.preferences.{i}.training_plan_arn", choice.training_plan_arn, choice.type,
                        choice.count))
    return out


def problems(spec: JobSpec, field: str, plan: Plan, type_: str, count: int | None,
             now: dt.datetime) -> list[str]:
    """What keeps the job from running on `plan` (empty: it can): its status, instance type,
    count, the region, and whether max_run_minutes still fits before the plan's end."""
    found = []
    if region_of(plan.arn) and region_of(plan.arn) != spec.region:
        found.append(f"{field}: the plan is in {region_of(plan.arn)}, the job in {spec.region}")
    if plan.status not in USABLE:
        found.append(f"{field}: the plan is {plan.status}"
                     + (f" ({plan.status_message})" if plan.status_message else "")
                     + ("; a job on it waits until it is paid and Scheduled" if plan.status == "Pending" else
                        "; no job can run on it"))
    if "training-job" not in plan.targets:
        found.append(f"{field}: the plan is for {', '.join(plan.targets) or 'no target'}, not training jobs")
    if plan.types and type_ not in plan.types:
        found.append(f"{field}: the plan holds {', '.join(plan.types)}, the job runs on {type_}")
    if count is not None and count > plan.total:
        found.append(f"{field}: the job needs {count} instance(s), the plan holds {plan.total}")
    if plan.end is not None:
        start = max(now, plan.start) if plan.start else now
        left = (plan.end - start).total_seconds() / 60
        if left < spec.max_run_minutes:
            found.append(f"{field}: the plan ends {plan.end.astimezone(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
                         f"{max(left, 0):.0f} min after the job could start; max_run_minutes is {spec.max_run_minutes}")
    return found


def client(region: str):
    """A SageMaker client in `region` (`aws.client`: timeouts, a checked endpoint); tests replace it."""
    from orchestrator import aws

    return aws.client("sagemaker", region)
