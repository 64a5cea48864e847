"""Neuron-aware checks of a job spec: what SageMaker or the Neuron stack would refuse, or do badly.

Contract: `check(spec)` is pure (no network, no clock) and returns findings, errors first,
then warnings, then infos, each in rule order. Every finding has a rule id, a severity, a
message saying what is wrong, a fix saying what to change, and the dotted spec field it is
about (which `raise_for` turns into file:line:column). Errors stop `plan` and `submit`;
warnings and infos are printed.

The rules (ids are stable; tests and docs refer to them):

- N001-instance-not-trainable: SageMaker training does not accept the type (ml.inf2 has its own message).
- N002-instance-facts-unknown: the type trains, but the catalog has no facts for it.
- N003-multi-node-unsupported: count > 1 on an instance without EFA (ml.trn1.2xlarge).
- N004-workers-per-node: workers per host differ from the logical NeuronCores.
- N005-lnc-unsupported: an LNC the instance does not support (LNC=2 on trn1).
- N006-lnc-env-mismatch: NEURON_LOGICAL_NC_CONFIG or a compiler -lnc in `environment` that
  disagrees with instance.lnc (runtime and compiler must match).
- N007-fp16-on-neuron: fp16 on the XLA/Neuron path.
- N008-deprecated-bf16-env: XLA_USE_BF16 / XLA_DOWNCAST_BF16 are deprecated (a warning: they still
  work, with a deprecation warning, through torch-neuronx 2.9).
- N009-xla-after-last-sdk: runtime xla with a Neuron SDK newer than the last XLA training release.
- N010-image-unknown: no catalog image for image.neuron_sdk.
- N011-region-unsupported: no Trainium training image in the region.
- N012-spot-max-wait: spot without max_wait_minutes, or max wait below max_run_minutes.
- N013-max-wait-without-spot: max_wait_minutes set but spot off (ignored).
- N014-patch-divisibility: image_size not divisible by the patch size.
- N015-data-workers-vcpus: DataLoader workers x workers per host above the host's vCPUs.
- N016-budget-exceeded: the cost upper bound is above budget.max_cost_usd.
- N017-price-unknown: no price for the instance (an error when a budget is set); not given
  for a type N001 refuses.
- N018-efa-env-added: multi-node on an EFA instance (trn1.32xlarge, trn1n, trn2): the EFA
  variables will be added (info).
- N019-efa-env-overridden: `environment` sets an EFA variable to another value.
- N020-native-on-neuron: runtime native on a Trainium instance leaves the NeuronCores idle.
- N021-local-xla-multiprocess: local xla with more than one process (PJRT CPU is single-process).
- N022-checkpoint-never: checkpoint_every larger than steps.
- N023-environment-limits: the environment as sent (with the orchestrator's variables and
  flags) has more variables, longer values or other names than SageMaker accepts.
- N024-image-uri-region: a pinned ECR image in another region than the job.
- N025-neuron-image-off-trainium: the Neuron training image on a type SageMaker trains on but
  that has no NeuronCores (GPU or CPU instances).
- N026-model-arch-unknown: model.arch is not in the pinned timm's ViT list (a warning, with a
  did-you-mean: the job's timm may be newer).
- N027-local-oversubscribed: a local job with more training processes than this machine has CPUs.
- N028-hybrid-linear-embed: patch_embed: linear on a hybrid ViT (ResNet/conv stem), which the
  job would refuse at start.
- N029-tag-characters: a tag key or value with characters SageMaker refuses (its pattern is read
  from botocore's service model: letters, digits, white space and `_ . : / = + - @`), which
  CreateTrainingJob would refuse after the source upload.
- N030-volume-ignored: instance.volume_gb set (to other than its default) on a type with NVMe
  instance storage (trn1, trn1n, trn2), where SageMaker ignores it (info).
- N031-local-environment-size: a local job's `environment` too large for a process on this
  machine to receive (one variable above Linux's MAX_ARG_STRLEN, or all of them with this
  process's own environment above ARG_MAX): the job would fail to start ("Argument list too long").

The local backend runs on this machine: the AWS-only rules (instance acceptance, images,
region, price and budget, EFA, SageMaker limits) are skipped there; the spot rules (N012,
N013) apply to every backend, since the spec's request carries them; model and training
rules still apply, so a local smoke run checks the same spec the cloud job will use.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from entrypoints.contract import EFA_ENV
from orchestrator import catalog, cost
from orchestrator.errors import Problem, SpecError
from orchestrator.spec import JobSpec

Severity = Literal["error", "warning", "info"]
_ORDER = {"error": 0, "warning": 1, "info": 2}
DEPRECATED_ENV = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")
# The Neuron compiler's default persistent cache; launch.py pulls the cache tarball here.
NEURON_CACHE_DIR = "/var/tmp/neuron-compile-cache"
LNC_FLAG = re.compile(r"(?:^|\s)(?:-lnc|--lnc|--logical-nc-config)(?:=|\s+)(\d+)")
MODEL_TYPE_FLAG = re.compile(r"(?:^|\s)--model[-_]type(?:=|\s+)(\S+)")
# What the Neuron samples and the SDK's reference request give the compiler for transformer
# models (its default is `generic`); every model the orchestrator trains is a ViT.
TRANSFORMER_FLAG = "--model-type=transformer"
ECR_REGION = re.compile(r"\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com")


@dataclass(frozen=True)
class Finding:
    """One result of a rule: what is wrong (`message`), what to change (`fix`), and where
    (`path`, a dotted spec field)."""

    rule: str
    severity: Severity
    message: str
    fix: str
    path: str

    def to_json(self, spec: JobSpec | None = None) -> dict:
        out = {"rule": self.rule, "severity": self.severity, "message": self.message, "fix": self.fix,
               "path": self.path}
        if spec is not None:
            file, line, column = spec.locate(self.path)
            out.update(file=file, line=line, column=column)
        return out


def type_family(instance_type: str) -> str:
    """`ml.trn1n.32xlarge` -> `trn1n` (the catalog's family groups trn1n with trn1)."""
    parts = instance_type.split(".")
    return parts[1] if len(parts) == 3 else ""


def needs_efa(spec: JobSpec) -> bool:
    """Whether the orchestrator must add `EFA_ENV`: a multi-node SageMaker job on an instance
    with EFA (trn1.32xlarge, trn1n, trn2).

    The SageMaker training toolkit sets the EFA variables itself only inside its own torchrun
    distribution; launch.py (the container's entrypoint) runs torchrun itself, so every EFA
    instance needs them from us."""
    facts = catalog.instance(spec.instance.type)
    return (spec.backend == "sagemaker" and spec.instance.count > 1 and facts is not None
            and facts.efa_gbps > 0)


def job_environment(spec: JobSpec) -> dict[str, str]:
    """The container's environment as the request sends it: spec.environment plus what the
    Neuron stack needs (`request.environment`; N023 checks exactly this).

    - xla on a Trainium instance (SageMaker): NEURON_CC_FLAGS gains `--model-type=transformer`
      unless the user's flags choose a model type, `--cache_dir` (where launch.py pulls the
      compile cache) and, on trn2, `--lnc=<lnc>` to match the runtime's
      NEURON_LOGICAL_NC_CONFIG, which is set too. Flags the user gave are kept first. The
      compile cache key holds these flags (all but `--cache_dir`), so it follows them.
    - multi-node on an EFA instance (trn1.32xlarge, trn1n, trn2; `needs_efa`): the EFA
      variables (`contract.EFA_ENV`); a user value wins (N019 warns about it).
    """
    env = dict(spec.environment)
    facts = catalog.instance(spec.instance.type)
    neuron = (spec.backend == "sagemaker" and spec.training.runtime == "xla" and facts is not None
              and facts.accelerator.startswith("Trainium"))
    if neuron:
        lnc = effective_lnc(spec)
        flags = env.get("NEURON_CC_FLAGS", "").split()
        if not MODEL_TYPE_FLAG.search(" " + " ".join(flags)):
            flags.append(TRANSFORMER_FLAG)
        if spec.compile_cache.mode == "tarball" and not any(f.startswith("--cache_dir") for f in flags):
            flags.append(f"--cache_dir={NEURON_CACHE_DIR}")
        if type_family(spec.instance.type) == "trn2":
            if not LNC_FLAG.search(" " + " ".join(flags)):
                flags.append(f"--lnc={lnc}")
            env.setdefault("NEURON_LOGICAL_NC_CONFIG", str(lnc))
        env["NEURON_CC_FLAGS"] = " ".join(flags)
    if needs_efa(spec):
        for key, value in EFA_ENV.items():
            env.setdefault(key, value)
    return dict(sorted(env.items()))


def effective_lnc(spec: JobSpec) -> int:
    """instance.lnc, or the instance's default LNC (1 when the catalog does not know it)."""
    if spec.instance.lnc is not None:
        return spec.instance.lnc
    facts = catalog.instance(spec.instance.type)
    return facts.lnc_default if facts else 1


def patch_size(spec: JobSpec) -> int | None:
    """model.patch_size, or the number after `patch` in the arch name; None if neither."""
    if spec.model.patch_size is not None:
        return spec.model.patch_size
    found = re.search(r"patch(\d+)", spec.model.arch)
    return int(found.group(1)) if found else None


def check(spec: JobSpec) -> list[Finding]:
    """All findings for `spec`, errors first (see the module docstring for the rules)."""
    findings: list[Finding] = []
    cloud = spec.backend == "sagemaker"
    facts = catalog.instance(spec.instance.type)
    if cloud:
        instance = _instance(spec, facts)
        findings += instance
        findings += _image_and_region(spec)
        # A type SageMaker does not train on has no training price, and refreshing prices
        # cannot give it one: N001 says what to change, N017 would only mislead.
        refused = any(f.rule == "N001-instance-not-trainable" for f in instance)
        findings += [f for f in _cost(spec) if not (refused and f.rule == "N017-price-unknown")]
        findings += _efa(spec)
        findings += _sagemaker_limits(spec)
        findings += _tags(spec)
        findings += _runtime(spec, facts)
        if facts is not None and spec.instance.type in catalog.training_instance_types():
            findings += _workers(spec, facts)
        findings += _volume(spec, facts)
    # The request of every backend carries the spot settings (the local one ignores them),
    # and building it refuses spot without a max wait: say so where the spec is checked.
    findings += _spot(spec)
    findings += _lnc(spec, facts)
    findings += _precision(spec, facts)
    findings += _model(spec)
    findings += _training(spec)
    if spec.backend == "local":
        findings += _local_environment(spec)
    return sorted(findings, key=lambda f: _ORDER[f.severity])


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


# --- rules ---------------------------------------------------------------------------


def _instance(spec: JobSpec, facts: catalog.Instance | None) -> list[Finding]:
    out = []
    itype = spec.instance.type
    trainable = catalog.training_instance_types()
    if itype not in trainable:
        if type_family(itype) == "inf2":
            out.append(Finding(
                "N001-instance-not-trainable", "error",
                f"{itype} is not a SageMaker training instance type: inf2 is offered for hosting and "
                "batch transform only. ml.trn1.2xlarge has the same NeuronCore-v2 and trains",
                "set instance.type: ml.trn1.2xlarge", "instance.type"))
        else:
            neuron = sorted(t for t in trainable if type_family(t).startswith("trn"))
            close = difflib.get_close_matches(itype, sorted(trainable), n=1, cutoff=0.8)
            hint = f"did you mean {close[0]}? " if close else ""
            out.append(Finding(
                "N001-instance-not-trainable", "error",
                f"{itype} is not an instance type SageMaker training accepts (botocore's TrainingInstanceType)",
                f"{hint}Trainium types: {', '.join(neuron)}", "instance.type"))
    elif facts is None:
        out.append(Finding(
            "N002-instance-facts-unknown", "warning",
            f"the catalog has no facts for {itype}: NeuronCores, vCPUs and price are unknown, so "
            "workers per host and data workers are not checked",
            "use a Trainium type (ml.trn1.2xlarge, ml.trn1.32xlarge, ml.trn1n.32xlarge, ml.trn2.48xlarge) "
            "or set training.workers_per_node yourself", "instance.type"))
    if facts is not None and spec.instance.count > 1 and not facts.multi_node:
        out.append(Finding(
            "N003-multi-node-unsupported", "error",
            f"{itype} cannot run multi-node (no EFA); count is {spec.instance.count}",
            "use count: 1, or ml.trn1.32xlarge / ml.trn1n.32xlarge for several nodes", "instance.count"))
    return out


def _workers(spec: JobSpec, facts: catalog.Instance) -> list[Finding]:
    out = []
    lnc = effective_lnc(spec)
    cores = facts.logical_cores(lnc)
    workers = spec.training.workers_per_node
    if workers is not None and workers != cores:
        out.append(Finding(
            "N004-workers-per-node", "error",
            f"workers_per_node is {workers} but {facts.type} has {cores} logical NeuronCores at LNC={lnc}; "
            "the Neuron runtime runs one worker per logical core",
            f"remove training.workers_per_node (default: {cores}) or set it to {cores}",
            "training.workers_per_node"))
    per_host = workers or cores
    wanted = spec.data.num_workers * per_host
    if cores and wanted > facts.vcpus:
        most = facts.vcpus // per_host
        out.append(Finding(
            "N015-data-workers-vcpus", "warning",
            f"{spec.data.num_workers} DataLoader workers x {per_host} workers per host = {wanted} processes "
            f"on {facts.vcpus} vCPUs: data loading will contend with the training processes",
            f"set data.num_workers to at most {most}", "data.num_workers"))
    return out


def _lnc(spec: JobSpec, facts: catalog.Instance | None) -> list[Finding]:
    out = []
    lnc = effective_lnc(spec)
    if facts is not None and spec.instance.lnc is not None and spec.instance.lnc not in facts.lnc_allowed:
        why = " (the compiler fails with NCC_EARG001)" if facts.family == "trn1" else ""
        allowed = ", ".join(str(x) for x in facts.lnc_allowed)
        out.append(Finding(
            "N005-lnc-unsupported", "error",
            f"LNC={spec.instance.lnc} is not supported on {facts.type}{why}",
            f"set instance.lnc to {allowed} or remove it", "instance.lnc"))
    runtime_value = spec.environment.get("NEURON_LOGICAL_NC_CONFIG")
    if runtime_value is not None and runtime_value.strip() != str(lnc):
        out.append(Finding(
            "N006-lnc-env-mismatch", "error",
            f"environment sets NEURON_LOGICAL_NC_CONFIG={runtime_value} but the job's LNC is {lnc}; "
            "the runtime and the compiler's -lnc must match",
            "remove NEURON_LOGICAL_NC_CONFIG from environment and set instance.lnc (the orchestrator "
            "sets both the runtime variable and the compiler flag from it)",
            "environment.NEURON_LOGICAL_NC_CONFIG"))
    flags = spec.environment.get("NEURON_CC_FLAGS", "")
    found = LNC_FLAG.search(flags)
    if found and found.group(1) != str(lnc):
        out.append(Finding(
            "N006-lnc-env-mismatch", "error",
            f"NEURON_CC_FLAGS compiles for LNC={found.group(1)} but the job's LNC is {lnc}; "
            "the runtime and the compiler must match",
            "remove the -lnc flag from NEURON_CC_FLAGS and set instance.lnc", "environment.NEURON_CC_FLAGS"))
    return out


def _precision(spec: JobSpec, facts: catalog.Instance | None) -> list[Finding]:
    out = []
    on_neuron = spec.training.runtime == "xla" or (
        spec.backend == "sagemaker" and facts is not None and facts.accelerator.startswith(("Trainium", "Inferentia")))
    if spec.training.precision == "fp16" and on_neuron:
        out.append(Finding(
            "N007-fp16-on-neuron", "error",
            "precision fp16 is not a supported training precision on Neuron (no fp16 loss scaling on the XLA path)",
            "use precision: bf16 (torch.autocast), or fp32", "training.precision"))
    # A warning, not an error: the 2.24 end-of-support notice said these stop working, but the
    # Neuron 2.26.0 and 2.27.0 release notes (aws-neuron-sdk release-notes/components/pytorch.rst,
    # release-notes/prev/2.27.0/nx-pytorch.rst) keep XLA_DOWNCAST_BF16=1 working in torch-neuronx
    # 2.5 through 2.9 with a deprecation warning, as a work-around for a bf16 slowdown.
    for name in DEPRECATED_ENV:
        if name in spec.environment:
            out.append(Finding(
                "N008-deprecated-bf16-env", "warning",
                f"{name} is deprecated: torch-neuronx 2.9 still honours it with a deprecation warning, "
                "and PyTorch 2.10 (TorchNeuron) drops it",
                "use precision: bf16 (torch.autocast)", f"environment.{name}"))
    return out


def _image_and_region(spec: JobSpec) -> list[Finding]:
    out = []
    regions = catalog.image_regions()
    if spec.image.uri is None:
        version = spec.image.neuron_sdk or catalog.default_sdk()
        last = catalog.last_xla_training_sdk()
        if spec.training.runtime == "xla" and catalog.version_key(version) > catalog.version_key(last):
            out.append(Finding(
                "N009-xla-after-last-sdk", "error",
                f"runtime xla with Neuron SDK {version}: PyTorch/XLA training on Trainium ended with Neuron {last}",
                f"use image.neuron_sdk: \"{last}\" for runtime xla", "image.neuron_sdk"))
        if version not in catalog.images():
            known = ", ".join(sorted(catalog.images(), key=catalog.version_key))
            out.append(Finding(
                "N010-image-unknown", "error",
                f"no PyTorch Neuron training image is known for Neuron SDK {version}",
                f"use one of {known}, or pin an image with image.uri", "image.neuron_sdk"))
    else:
        found = ECR_REGION.search(spec.image.uri)
        if found and found.group(1) != spec.region:
            out.append(Finding(
                "N024-image-uri-region", "warning",
                f"image.uri is in {found.group(1)} but the job runs in {spec.region}; SageMaker pulls the "
                "training image from the job's region",
                f"use the {spec.region} copy of the image", "image.uri"))
    if spec.region not in regions:
        out.append(Finding(
            "N011-region-unsupported", "error",
            f"region {spec.region} has no Trainium training instances or PyTorch Neuron training images in the catalog",
            f"use one of {', '.join(regions)}", "region"))
    return out


def _spot(spec: JobSpec) -> list[Finding]:
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


def _cost(spec: JobSpec) -> list[Finding]:
    est = cost.estimate(spec)
    budget = spec.budget.max_cost_usd
    if not est.known:
        if budget is not None:
            return [Finding(
                "N017-price-unknown", "error",
                f"budget.max_cost_usd is {budget:g} but no price is known for {spec.instance.type} in "
                f"{spec.region}, so the budget cannot be checked",
                "run `python -m orchestrator prices refresh`, or remove budget.max_cost_usd", "budget.max_cost_usd")]
        return [Finding(
            "N017-price-unknown", "warning",
            f"no price is known for {spec.instance.type} in {spec.region}: the plan shows no cost",
            "run `python -m orchestrator prices refresh`", "instance.type")]
    if budget is not None and est.usd_max > budget:
        per_minute = est.usd_max / spec.max_run_minutes
        minutes = int(budget // per_minute)
        shorter = f"set max_run_minutes to at most {minutes}, or " if minutes >= 1 else ""
        return [Finding(
            "N016-budget-exceeded", "error",
            f"the job may cost up to {est.usd_max:.2f} USD ({est.hours_max:g} h x {est.instance_count} x "
            f"{cost.rate(est.price).describe()}), above budget.max_cost_usd {budget:g}"
            + ("" if est.verified else f" ({cost.UNVERIFIED})"),
            f"{shorter}raise budget.max_cost_usd to at least {est.usd_max:.2f}", "budget.max_cost_usd")]
    return []


def _volume(spec: JobSpec, facts: catalog.Instance | None) -> list[Finding]:
    # botocore's ResourceConfig.VolumeSizeInGB: on types with NVMe instance storage SageMaker
    # provisions no EBS volume and uses the instance storage. Only when the spec asks for another
    # size than the default: the request carries a value either way (the field is required).
    default = type(spec.instance).model_fields["volume_gb"].default
    if facts is None or not facts.instance_storage or spec.instance.volume_gb == default:
        return []
    return [Finding(
        "N030-volume-ignored", "info",
        f"instance.volume_gb ({spec.instance.volume_gb}) is ignored on {spec.instance.type}: SageMaker uses the "
        "instance's NVMe storage instead of an EBS volume",
        "remove instance.volume_gb", "instance.volume_gb")]


def _efa(spec: JobSpec) -> list[Finding]:
    if not needs_efa(spec):
        return []
    out = [Finding(
        "N018-efa-env-added", "info",
        f"multi-node {spec.instance.type}: the orchestrator adds "
        f"{', '.join(f'{k}={v}' for k, v in EFA_ENV.items())} (launch.py runs torchrun itself, outside the "
        "training toolkit's own EFA set-up)",
        "nothing to do", "instance.count")]
    for key, value in EFA_ENV.items():
        if key in spec.environment and spec.environment[key] != value:
            out.append(Finding(
                "N019-efa-env-overridden", "warning",
                f"environment sets {key}={spec.environment[key]}; multi-node {spec.instance.type} needs "
                f"{key}={value} for EFA, and your value wins",
                f"remove {key} from environment", f"environment.{key}"))
    return out


def _sagemaker_limits(spec: JobSpec) -> list[Finding]:
    """The environment as it is sent (the user's plus the orchestrator's variables, flags
    appended) against the limits of botocore's TrainingEnvironmentMap."""
    if not spec.environment:
        return []  # the orchestrator's own few short variables: no botocore lookup needed
    out = []
    limits = catalog.environment_limits()
    sent = job_environment(spec)
    added = sorted(set(sent) - set(spec.environment))
    if len(sent) > limits.max_variables:
        extra = f" ({len(spec.environment)} of yours, {len(added)} the orchestrator adds: {', '.join(added)})" \
            if added else ""
        out.append(Finding(
            "N023-environment-limits", "error",
            f"the job's environment has {len(sent)} variables{extra}; SageMaker accepts {limits.max_variables}",
            f"keep at most {limits.max_variables - len(added)} variables in environment", "environment"))
    name_ok = re.compile(limits.name_pattern)
    for key, value in sent.items():
        path = f"environment.{key}" if key in spec.environment else "environment"
        if not name_ok.fullmatch(key) or len(key) > limits.max_name:
            out.append(Finding(
                "N023-environment-limits", "error",
                f"environment variable name {key[:40]!r}: SageMaker accepts names matching "
                f"{limits.name_pattern} of at most {limits.max_name} characters",
                "rename it with ASCII letters, digits and underscores, not starting with a digit", path))
        elif len(value) > limits.max_value:
            grown = "" if spec.environment.get(key) == value else " once the orchestrator's additions are in"
            out.append(Finding(
                "N023-environment-limits", "error",
                f"environment {key}: {len(value)} characters{grown}; SageMaker accepts values of at most "
                f"{limits.max_value}",
                "shorten it, or ship the setting inside the job instead", path))
    return out


# A botocore pattern of one repeated character class; \p{X} names a Unicode category (L, Z, N...).
_CLASS = re.compile(r"^\^?\(?\[(?P<body>(?:\\p\{[A-Z]\}|\\.|[^\]\\])*)\]\*\)?\$?$")
_CLASS_ITEM = re.compile(r"\\p\{(?P<category>[A-Z])\}|\\(?P<escaped>.)|(?P<plain>[^\\])")


def pattern_characters(pattern: str):
    """A test of one character against a botocore pattern of the form `([...]*)` (one character
    class, repeated), whose class may hold Unicode categories (backslash-p{X}), which Python's
    `re` does not know. ValueError for a pattern of another shape."""
    import unicodedata

    found = _CLASS.match(pattern)
    if not found:
        raise ValueError(f"not a repeated character class: {pattern!r}")
    categories, chars = set(), set()
    for item in _CLASS_ITEM.finditer(found["body"]):
        if item["category"]:
            categories.add(item["category"])
        else:
            chars.add(item["escaped"] or item["plain"])
    return lambda c: c in chars or unicodedata.category(c)[0] in categories


def _tags(spec: JobSpec) -> list[Finding]:
    """N029: tag keys and values against botocore's TagKey/TagValue patterns."""
    if not spec.tags:
        return []
    shapes = catalog.sagemaker_tag_shapes()
    tests = {name: pattern_characters(shapes[name]["pattern"]) for name in ("TagKey", "TagValue")}
    out = []
    for key, value in spec.tags.items():
        for what, text, test in (("key", key, tests["TagKey"]), ("value", value, tests["TagValue"])):
            bad = sorted({c for c in text if not test(c)})
            if bad:
                out.append(Finding(
                    "N029-tag-characters", "error",
                    f"tag {key!r}: its {what} has {', '.join(repr(c) for c in bad)}, which SageMaker refuses in tags "
                    "(it accepts letters, digits, white space and _ . : / = + - @)",
                    f"replace {' and '.join(repr(c) for c in bad)} in the tag's {what}, e.g. with '-'",
                    f"tags.{key}"))
    return out


def _runtime(spec: JobSpec, facts: catalog.Instance | None) -> list[Finding]:
    trainium = facts is not None and facts.accelerator.startswith("Trainium")
    neuron_image = spec.image.uri is None or f"/{catalog.image_repository()}:" in spec.image.uri
    # Types SageMaker does not train on at all get N001; this is for the ones it does.
    if neuron_image and not trainium and spec.instance.type in catalog.training_instance_types():
        image = spec.image.uri or (f"{catalog.image_repository()} (the catalog's image for Neuron SDK "
                                   f"{spec.image.neuron_sdk or catalog.default_sdk()})")
        return [Finding(
            "N025-neuron-image-off-trainium", "error",
            f"{spec.instance.type} has no NeuronCores, but the job runs the PyTorch Neuron training image "
            f"{image}, which needs Trainium",
            "use a Trainium type (ml.trn1.2xlarge, ml.trn1.32xlarge, ml.trn1n.32xlarge, ml.trn2.48xlarge)",
            "instance.type")]
    if spec.training.runtime == "native" and trainium:
        return [Finding(
            "N020-native-on-neuron", "warning",
            f"runtime native on {spec.instance.type} runs eager PyTorch on the host CPUs: the "
            "NeuronCores stay idle (the TorchNeuron eager backend is not in the training images)",
            "use runtime: xla", "training.runtime")]
    return []


def _arch(spec: JobSpec) -> list[Finding]:
    arch = spec.model.arch
    known = catalog.vit_architectures()
    if arch in catalog.vit_hybrid_architectures() and spec.model.patch_embed == "linear":
        # train.py refuses it at start (vit.build); say so before an instance is paid for.
        return [Finding(
            "N028-hybrid-linear-embed", "error",
            f"{arch} is a hybrid ViT: its patches come from a ResNet/conv stem, which the conv-free "
            "linear patch embedding cannot replace",
            "set model.patch_embed: conv for this architecture, or pick a plain ViT", "model.patch_embed")]
    if arch in known:
        return []
    version, _ = catalog.vit_architectures_source()
    # A warning, not an error: the job installs a timm of the same major version that may be
    # newer than this list, and with 200-odd names of one shape a real new model looks like a
    # typo of an old one. The job fails at its start if its timm lacks the name.
    close = difflib.get_close_matches(arch, sorted(known), n=3, cutoff=0.8)
    fix = (f"did you mean {' or '.join(repr(c) for c in close)}? If not, check the name with "
           if close else "check the name with ")
    return [Finding(
        "N026-model-arch-unknown", "warning",
        f"{arch!r} is not among the {len(known)} ViT models of timm {version}; the job fails at start "
        "if the training image's timm does not have it either",
        fix + "`python -c \"import timm; print(timm.list_models('vit_*'))\"`", "model.arch")]


def _model(spec: JobSpec) -> list[Finding]:
    out = _arch(spec)
    size = patch_size(spec)
    if size is not None and spec.model.image_size % size:
        lower = spec.model.image_size - spec.model.image_size % size
        out.append(Finding(
            "N014-patch-divisibility", "error",
            f"image_size {spec.model.image_size} is not divisible by the patch size {size}",
            f"set model.image_size to a multiple of {size} (e.g. {lower or size} or {lower + size})",
            "model.image_size"))
    return out


# What the local job's processes get besides the spec's environment and the caller's own: the
# SM_* variables (SM_TRAINING_ENV repeats the hyperparameters and resource config), torchrun's
# and our own variables, and the command lines. Generous, so a spec that fits here fits there.
LOCAL_ENV_RESERVE = 64 * 1024


def exec_limits() -> tuple[int | None, int | None]:
    """(bytes one environment variable may take, "NAME=value" and its NUL; bytes all of a new
    process's arguments and environment may take) on this machine; None where unknown. Linux
    caps one string at MAX_ARG_STRLEN, 32 pages (linux/binfmts.h), and the whole at ARG_MAX
    (sysconf; a quarter of the stack limit); other systems have ARG_MAX only."""
    try:
        total = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError, AttributeError):
        total = None
    one = None
    if sys.platform.startswith("linux"):
        try:
            one = 32 * os.sysconf("SC_PAGESIZE")
        except (ValueError, OSError):
            one = 32 * 4096
    return one, (total if total and total > 0 else None)


def _env_bytes(items) -> int:
    """What `items` (name, value) take in a new process: "NAME=value" and a NUL each, and a pointer."""
    return sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 + 8 for k, v in items)


def _local_environment(spec: JobSpec) -> list[Finding]:
    """N031: the spec's environment must reach the local job's processes, which inherit this
    process's environment too (the error otherwise: E2BIG at start, with no field named)."""
    one, total = exec_limits()
    out = []
    if one is not None:
        for key, value in spec.environment.items():
            size = _env_bytes([(key, value)]) - 8
            if size > one:
                out.append(Finding(
                    "N031-local-environment-size", "error",
                    f"environment {key[:40]}: {size} bytes; one environment variable of a process on this machine "
                    f"holds at most {one} bytes (Linux MAX_ARG_STRLEN), so the local job could not start",
                    "shorten it, or put the value in a file the job reads (a data.source folder) instead",
                    f"environment.{key}"))
    if total is not None and not out:
        own = _env_bytes(spec.environment.items())
        inherited = _env_bytes(os.environ.items())
        if own + inherited + LOCAL_ENV_RESERVE > total:
            out.append(Finding(
                "N031-local-environment-size", "error",
                f"environment: {own} bytes in all; with this process's own environment ({inherited} bytes, which "
                f"the job inherits) that is more than a process on this machine may receive ({total} bytes, "
                "ARG_MAX), so the local job could not start",
                "shorten the environment's values, or unset large variables in the shell that submits",
                "environment"))
    return out


def _training(spec: JobSpec) -> list[Finding]:
    out = []
    train = spec.training
    if spec.backend == "local" and train.runtime == "xla":
        processes = (train.workers_per_node or 1) * spec.instance.count
        if processes > 1:
            out.append(Finding(
                "N021-local-xla-multiprocess", "warning",
                f"{processes} local XLA processes: PJRT on CPU is single-process, so each rank trains alone "
                "(world size 1) instead of together",
                "set training.workers_per_node: 1 (and instance.count: 1), or use runtime: native for "
                "multi-process CPU training", "training.workers_per_node"))
    if spec.backend == "local":
        processes = spec.instance.count * (train.workers_per_node or 1)
        cpus = os.cpu_count() or 1
        if processes > cpus:
            out.append(Finding(
                "N027-local-oversubscribed", "warning",
                f"{processes} local training processes ({spec.instance.count} host(s) x "
                f"{train.workers_per_node or 1} worker(s)) share this machine's {cpus} CPUs: every step "
                "waits for the slowest, and compiling runs once per process",
                f"keep instance.count x training.workers_per_node at most {cpus} for local runs",
                "instance.count" if spec.instance.count > 1 else "training.workers_per_node"))
    if train.checkpoint_every > train.steps:
        out.append(Finding(
            "N022-checkpoint-never", "warning",
            f"checkpoint_every ({train.checkpoint_every}) is above steps ({train.steps}): no checkpoint is written",
            f"set training.checkpoint_every to at most {train.steps}, or 0 for none", "training.checkpoint_every"))
    return out
