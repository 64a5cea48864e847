"""Neuron-aware checks of a job spec: what SageMaker or the Neuron stack would refuse, or do badly.

Contract: `diagnose(spec)` resolves the spec's target once (`catalog.resolve`), estimates
its cost once (`cost.estimate`) and runs every rule on them: a `Diagnosis` that
`request.prepare` takes on, so nothing is derived twice. It is pure (no network, no clock;
the catalog's price files are read) and its findings come errors first, then warnings, then
infos, each in rule order. `findings(spec)` is its findings. Every finding has a rule id, a
severity, a message saying what is wrong, a fix saying what to change, and the dotted spec
field it is about (which `raise_for` turns into file:line:column). Errors stop `plan` and
`submit`; warnings and infos are printed.

The rules live in modules by topic: `instance` (type, hosts, workers, LNC, spot, volume),
`image` (image, region, runtime), `environment` (the container environment and tags),
`model` (architecture, patches, precision, the training loop), `budget` (cost), `precompile`
(the neuron_parallel_compile pass), `warm_pool` (keep-alive).

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
- N040-N049: the batch backend (Inferentia2 through AWS Batch), in `batch`: an inf2 type
  (N040), one instance (N041), spot only with retries (N042), no max wait (N043), no LNC or
  volume size (N044), at most 10 attempts (N045), native runtime (N046), checkpoints kept on
  the instance (N047), the job definition's image (N048), no S3 data (N049).
- N031-local-environment-size: a local job's `environment` too large for a process on this
  machine to receive (one variable above Linux's MAX_ARG_STRLEN, or all of them with this
  process's own environment above ARG_MAX): the job would fail to start ("Argument list too long").
- N050-keep-alive-too-long: instance.keep_alive_minutes above 60 (SageMaker's warm pool maximum).
- N051-warm-pool-quota: a warm pool counts against its own service quota (info).
- N052-keep-alive-local: keep_alive_minutes on the local backend is ignored (info).
- N053-warm-pool-spot: a warm pool with managed spot training, which SageMaker does not support.
- N070-N076: instance preferences (`preferences`): not with spot (N070), SageMaker only (N071),
  each type once (N072), counts on all preferences or none (N073), per-preference training
  plans or a job-level one (N074), a count per type that trains the first choice's global
  batch (N075: an error when none can, a warning when given counts change it). Each later
  preference gets N001-N005 (and N015) at its own entry; the cost bound (N016, N017) is the
  dearest preference's.
- N060-precompile-native: training.precompile with runtime native (no XLA graphs: the pass is
  skipped; a warning).
- N061-precompile-local: training.precompile on the local backend, which has no
  neuron_parallel_compile unless this machine has the Neuron tools (the pass is skipped; info).

The local backend runs on this machine: the AWS-only rules (instance acceptance, images,
region, price and budget, EFA, SageMaker limits) are skipped there; the spot rules (N012,
N013) apply to every backend, since the spec's request carries them; model and training
rules still apply, so a local smoke run checks the same spec the cloud job will use.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from orchestrator import catalog, cost
from orchestrator import preferences as choosing
from orchestrator.doctor import (
    budget,
    environment,
    image,
    instance,
    model,
    precompile,
    preferences,
    warm_pool,
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
    found = _findings(spec, target, estimate, priced) + preferences.check(spec, choices)
    return Diagnosis(spec, target, estimate, sorted(found, key=lambda f: ORDER[f.severity]), tuple(choices))


# The rules that refuse an instance type because the spec's backend does not run it (SageMaker
# training; Trainium on SageMaker, as its image needs; AWS Batch's Inferentia2 queues): in a
# sweep across backends, another backend's type (or no backend's).
NOT_THE_BACKENDS_TYPE = frozenset({"N001-instance-not-trainable", "N025-neuron-image-off-trainium",
                                   "N040-batch-instance-type"})


def findings(spec: JobSpec) -> list[Finding]:
    """All findings for `spec`, errors first (`diagnose(spec).findings`)."""
    return diagnose(spec).findings


def _budget(spec: JobSpec, estimate: cost.Estimate, so_far: list[Finding]) -> list[Finding]:
    """The budget rules, without N017 (price unknown) for a type the backend does not run: it
    has no price there, and refreshing prices cannot give it one; N001 or N040 says what to change."""
    refused = any(f.rule in NOT_THE_BACKENDS_TYPE for f in so_far)
    return [f for f in budget.check_budget(spec, estimate) if not (refused and f.rule == "N017-price-unknown")]


def _findings(spec: JobSpec, target: catalog.Target, estimate: cost.Estimate, priced: JobSpec) -> list[Finding]:
    """Every rule but the preferences'; `priced`: the spec whose price the estimate is (the dearest
    preference's variant, else `spec`), which the budget rules name."""
    findings: list[Finding] = []
    if spec.backend == "sagemaker":
        findings += instance.accepted(spec, target)
        findings += image.image_and_region(spec)
        findings += _budget(priced, estimate, findings)
        findings += instance.efa(spec, target)
        findings += environment.sagemaker_limits(spec, target)
        findings += environment.tags(spec)
        findings += image.runtime(spec, target)
        findings += instance.workers(spec, target)
        findings += instance.volume(spec, target)
    if spec.backend == "batch":
        from orchestrator.doctor import batch  # its rules only: the other backends' checks do not load it

        findings += batch.check(spec, target)
        findings += image.image_and_region(spec)
        findings += _budget(spec, estimate, findings)
        findings += instance.workers(spec, target)
    else:
        # The request of every other backend carries the spot settings (the local one ignores
        # them), and building it refuses spot without a max wait: say so where it is checked.
        findings += instance.spot(spec)
    findings += instance.lnc(spec, target)
    findings += environment.lnc_env(spec, target)
    findings += model.precision(spec, target)
    findings += model.model(spec)
    findings += model.training(spec)
    findings += precompile.precompile(spec)
    findings += warm_pool.check(spec)
    if spec.backend == "local":
        findings += environment.local_environment(spec)
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
