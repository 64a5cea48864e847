"""Doctor rules about the instance type and the hosts: whether SageMaker trains on the type
(N001, N002), hosts (N003), workers and LNC (N004, N005, N015), managed spot (N012, N013),
and instance preferences (N070-N076: the exclusions botocore's
SageMaker model documents for ResourceConfig.InstancePreferences, a count for every choice that
trains the same global batch, and the rules above for each later preference, at its entry)."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from orchestrator import catalog, preferences
from orchestrator.doctor.finding import Finding

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

NEURON_TYPES_HINT = "ml.trn1.2xlarge, ml.trn1.32xlarge, ml.trn1n.32xlarge, ml.trn2.48xlarge"


def accepted(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """N001, N002, N003: a type SageMaker training accepts, that the catalog knows, on as many
    hosts as it can run."""
    out = []
    itype = spec.instance.type
    trainable = catalog.training_instance_types()
    if itype not in trainable:
        if target.family == "inf2":
            out.append(Finding(
                "N001-instance-not-trainable", "error",
                f"{itype} is not a SageMaker training instance type: inf2 is offered for hosting and "
                "batch transform only. ml.trn1.2xlarge has the same NeuronCore-v2 and trains; inf2 trains "
                "through AWS Batch",
                "set instance.type: ml.trn1.2xlarge, or backend: batch with instance.type: inf2.xlarge",
                "instance.type"))
        else:
            neuron = sorted(t for t in trainable if catalog.type_family(t).startswith("trn"))
            close = difflib.get_close_matches(itype, sorted(trainable), n=1, cutoff=0.8)
            hint = f"did you mean {close[0]}? " if close else ""
            out.append(Finding(
                "N001-instance-not-trainable", "error",
                f"{itype} is not an instance type SageMaker training accepts (botocore's TrainingInstanceType)",
                f"{hint}Trainium types: {', '.join(neuron)}", "instance.type"))
    elif target.facts is None:
        out.append(Finding(
            "N002-instance-facts-unknown", "warning",
            f"the catalog has no facts for {itype}: NeuronCores, vCPUs and price are unknown, so "
            "workers per host and data workers are not checked",
            f"use a Trainium type ({NEURON_TYPES_HINT}) or set training.workers_per_node yourself", "instance.type"))
    facts = target.facts
    if facts is not None and spec.instance.count > 1 and not facts.multi_node:
        out.append(Finding(
            "N003-multi-node-unsupported", "error",
            f"{itype} cannot run multi-node (no EFA); count is {spec.instance.count}",
            "use count: 1, or ml.trn1.32xlarge / ml.trn1n.32xlarge for several nodes", "instance.count"))
    return out


def workers(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """N004, N015: one worker per logical NeuronCore, and DataLoader workers the vCPUs can feed.
    For a type the catalog knows and the spec's backend runs (SageMaker trains on it, or Batch)."""
    facts = target.facts
    if facts is None:
        return []
    if not spec.backend_type.runs(spec, facts):
        return []
    out = []
    lnc = target.lnc
    cores = target.logical_cores
    given = spec.training.workers_per_node
    if given is not None and given != cores:
        out.append(Finding(
            "N004-workers-per-node", "error",
            f"workers_per_node is {given} but {facts.type} has {cores} logical NeuronCores at LNC={lnc}; "
            "the Neuron runtime runs one worker per logical core",
            f"remove training.workers_per_node (default: {cores}) or set it to {cores}",
            "training.workers_per_node"))
    per_host = given or cores
    wanted = spec.data.num_workers * per_host
    if cores and wanted > facts.vcpus:
        most = facts.vcpus // per_host
        out.append(Finding(
            "N015-data-workers-vcpus", "warning",
            f"{spec.data.num_workers} DataLoader workers x {per_host} workers per host = {wanted} processes "
            f"on {facts.vcpus} vCPUs: data loading will contend with the training processes",
            f"set data.num_workers to at most {most}", "data.num_workers"))
    return out


def lnc(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """N005: an LNC the instance supports (LNC=2 fails to compile on trn1)."""
    facts = target.facts
    if facts is None or spec.instance.lnc is None or spec.instance.lnc in facts.lnc_allowed:
        return []
    why = " (the compiler fails with NCC_EARG001)" if facts.family == "trn1" else ""
    allowed = ", ".join(str(x) for x in facts.lnc_allowed)
    return [Finding(
        "N005-lnc-unsupported", "error",
        f"LNC={spec.instance.lnc} is not supported on {facts.type}{why}",
        f"set instance.lnc to {allowed} or remove it", "instance.lnc")]


def training_plan_region(spec: JobSpec) -> list[Finding]:
    """N080: a training plan is reserved capacity in one region (its ARN's fourth field); a job
    in another region cannot run on it. Issue 32: an ARN of eu-west-1 was accepted for a
    us-east-1 job."""
    arns = [("instance.training_plan_arn", spec.instance.training_plan_arn)]
    arns += [(f"instance.preferences.{i}.training_plan_arn", p.training_plan_arn)
             for i, p in enumerate(spec.instance.preferences or [])]
    out = []
    for path, arn in arns:
        region = arn.split(":")[3] if arn and arn.count(":") >= 5 else None
        if region and region != spec.region:
            out.append(Finding(
                "N080-training-plan-region", "error",
                f"the training plan {arn} is in {region}, the job in {spec.region}: a plan's capacity is in its "
                "own region", f"use a training plan of {spec.region}, or set region: {region}", path))
    return out


def spot(spec: JobSpec) -> list[Finding]:
    """N012, N013: managed spot needs a max wait that covers the run; a max wait needs spot."""
    inst = spec.instance
    if inst.spot and inst.max_wait_minutes is None:
        return [Finding(
            "N012-spot-max-wait", "error",
            "managed spot training needs max_wait_minutes (how long to wait for capacity plus run)",
            f"set instance.max_wait_minutes to at least max_run_minutes ({spec.max_run_minutes})",
            "instance.max_wait_minutes")]
    if inst.spot and inst.max_wait_minutes < spec.max_run_minutes:
        return [Finding(
            "N012-spot-max-wait", "error",
            f"max_wait_minutes ({inst.max_wait_minutes}) is below max_run_minutes ({spec.max_run_minutes}); "
            "SageMaker requires the wait to cover the run",
            f"set instance.max_wait_minutes to at least {spec.max_run_minutes}", "instance.max_wait_minutes")]
    if not inst.spot and inst.max_wait_minutes is not None:
        return [Finding(
            "N013-max-wait-without-spot", "warning",
            "max_wait_minutes is ignored without spot: true",
            "set instance.spot: true, or remove max_wait_minutes", "instance.max_wait_minutes")]
    return []


# Where a rule run on a preference's variant points, and where that is in the preference.
_MOVED = {"instance.type": "type", "instance.count": "count"}


def preference_rules(spec: JobSpec, found: list[preferences.Choice]) -> list[Finding]:
    """N070-N076 and the instance rules of each later preference (empty without preferences)."""
    prefs = spec.instance.preferences
    if not prefs:
        return []
    out: list[Finding] = []
    # botocore's ResourceConfig.InstancePreferences: "mutually exclusive with InstanceType,
    # InstanceGroups, InstancePlacementConfig, and EnableManagedSpotTraining, and supports only
    # Flexible Training Plans (FTP) and On-Demand capacity". The spec has no instance groups or
    # placement, and the request sends no InstanceType with preferences (`backends.sagemaker.request`).
    backend = spec.backend_type
    if backend.preferences is None:
        out.append(Finding(
            "N071-preferences-backend", "error",
            f"instance.preferences are SageMaker's (ResourceConfig.InstancePreferences); the {spec.backend} "
            "backend runs one type",
            "remove instance.preferences and set instance.type", "instance.preferences"))
        return out
    if spec.instance.spot:
        out.append(Finding(
            "N070-preferences-spot", "error",
            "instance.preferences take on-demand or training plan capacity only: SageMaker refuses them with "
            "managed spot training (EnableManagedSpotTraining)",
            "remove instance.spot (and max_wait_minutes), or give one instance.type for spot", "instance.spot"))
    seen: dict[str, int] = {}
    for i, pref in enumerate(prefs):
        if pref.type in seen:
            out.append(Finding(
                "N072-preference-duplicate", "error",
                f"{pref.type} is preference {seen[pref.type] + 1} and {i + 1}: a type may appear once",
                f"remove instance.preferences.{i}", f"instance.preferences.{i}.type"))
        seen.setdefault(pref.type, i)
    counted = [pref.count is not None for pref in prefs]
    if any(counted) and not all(counted):
        missing = counted.index(False)
        out.append(Finding(
            "N073-preference-counts", "error",
            "count is set on some preferences but not on all: SageMaker takes a count on every preference or "
            "on none (InstancePreference.InstanceCount)",
            "set count on every preference, or on none (then each is chosen to train the same global batch)",
            f"instance.preferences.{missing}.count"))
    planned = [i for i, pref in enumerate(prefs) if pref.training_plan_arn]
    if planned and spec.instance.training_plan_arn:
        out.append(Finding(
            "N074-training-plan-both", "error",
            "a preference names a training plan and so does instance.training_plan_arn: per-preference plans are "
            "mutually exclusive with the job-level one (InstancePreference.TrainingPlanArns)",
            "keep one of them", f"instance.preferences.{planned[0]}.training_plan_arn"))
    for i, choice in enumerate(found):
        if i > 0:
            out += _moved(accepted(choice.spec, choice.target), i)
            out += _moved(lnc(choice.spec, choice.target), i)
            if backend.preferences == "sent":
                out += _moved(workers(choice.spec, choice.target), i)
        if choice.why:
            severity = "warning" if prefs[i].count is not None or choice.target.facts is None else "error"
            out.append(Finding(
                "N075-preference-global-batch", severity, choice.why,
                "give each preference a count that runs the same workers, or drop the type"
                if severity == "warning" else
                f"set instance.count so that {choice.type}'s workers per host divide the first choice's workers, "
                "or give every preference its own count",
                f"instance.preferences.{i}.count" if prefs[i].count is not None else f"instance.preferences.{i}.type"))
    return out


def _moved(findings: list[Finding], position: int) -> list[Finding]:
    """Findings of a preference's variant, at that preference's fields."""
    out = []
    for f in findings:
        field = _MOVED.get(f.path)
        path = f"instance.preferences.{position}.{field}" if field else f.path
        out.append(f._replace(message=f"preference {position + 1}: {f.message}", path=path))
    return out
