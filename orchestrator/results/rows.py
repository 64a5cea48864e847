"""Results rows: one per job, the price-performance arithmetic, the ranking, and which rows
belong to a sweep.

Contract:
- A row's status is the job's (`lifecycle.Status`, its backend's word when the backend was
  asked, else its results.json's), or, for a job without usable results, MISSING,
  UNREADABLE or ERROR with a note saying why.
- A number that is NaN or infinite in a results object shows as blank, and the row keeps its
  status with a note naming the field ("non-finite value in step_time_s.p50").
- Prices: `price_per_hour` is the instance's rate (`cost.rate`: SageMaker's own price, or an
  unverified price times the stated markup) times the instance count. For managed spot with
  known seconds, it is the effective price, `rate x billable / training seconds`. A row priced
  from an unverified price has `price_verified` False. Jobs of a backend that is not `cloud`
  (local) have no price (their rows say so) and take part in no ranking.
- `relative` is the row's samples per dollar over the best completed row's (best = 1.0).
- `mfu` (model FLOPs utilization) is the results' `flops_per_sample` x samples/s over the
  peak of every chip of the job's instances at its precision (`peak_flops`); `tflop_per_dollar`
  is the model TFLOPs a dollar bought (samples per dollar x TFLOP per sample), which compares
  rows of different models and image sizes. Unknown parts leave them None, and so does a job
  of a backend that is not `cloud` (local: it did not run on the instance it names).
- `neuroncore_util` and `host_vcpu` are the results' mean utilization (percent, from
  neuron-monitor); a completed row whose NeuronCores averaged under `IDLE_CORES_PCT` while its
  vCPUs averaged at least `SATURATED_VCPU_PCT` is `input_bound`, with a note: the chips waited
  on the input pipeline (more data-loader workers, or lighter decoding).
  Rows are sorted best first; rows without a ranking follow (`rank`).
- A row belongs to a sweep (an id, a sweep name or a schedule's untimed id) by its results'
  `orchestrator:sweep` tag when there is one; results our launcher tagged `orchestrator:job`
  without it belong to no sweep; anything else by its job name (`names.in_sweep`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from entrypoints.shared.results_schema import Results
from orchestrator import catalog, cost, names, peak_flops
from orchestrator.backends import registry
from orchestrator.backends.job import JobStatus
from orchestrator.lifecycle import Status, is_terminal
from orchestrator.names import TAG_ATTEMPT, TAG_JOB, TAG_SWEEP, TAG_TRIAL

# Statuses of rows that carry no results from a job.
MISSING, UNREADABLE, ERROR = "missing", "unreadable", "error"
# Input-bound: NeuronCores mostly idle while the host's vCPUs are nearly all busy.
IDLE_CORES_PCT = 50.0
SATURATED_VCPU_PCT = 85.0
# What a local (not `cloud`) job's row names in place of an AWS instance type.
LOCAL_INSTANCE = "local CPU"


@dataclass(frozen=True)
class Row:
    """One job in the price-performance table. Fields that are unknown are None.

    `price_per_hour` is for all instances of the job (effective price for managed spot when
    its seconds are known); `cost_usd` is what the job billed (billable seconds x that
    price), when SageMaker says; `relative` is samples per dollar over the best row's.
    """

    job: str
    status: str
    backend: str | None = None
    region: str | None = None
    sweep: str | None = None
    trial: str | None = None
    instance: str | None = None
    count: int | None = None
    cores: int | None = None
    runtime: str | None = None
    precision: str | None = None
    global_batch: int | None = None
    step_time_p50_s: float | None = None
    samples_per_s: float | None = None
    price_per_hour: float | None = None
    price_source: str | None = None
    price_verified: bool | None = None  # False: an unverified price times the markup (cost.rate)
    failover_from: str | None = None  # a sweep job that failed over from this instance type
    spot: bool = False
    spot_savings: float | None = None
    billable_s: int | None = None
    training_s: int | None = None
    # What the backend says of the job's times (epoch seconds): queued from created to started
    # (Batch: waiting for an instance), ran from started to ended.
    started_at: float | None = None
    queue_s: float | None = None
    run_s: float | None = None
    cost_usd: float | None = None
    cost_per_million_samples: float | None = None
    samples_per_dollar: float | None = None
    relative: float | None = None
    flops_per_sample: float | None = None
    mfu: float | None = None
    peak_source: str | None = None  # where the peak FLOPs of `mfu` come from
    tflop_per_dollar: float | None = None
    neuroncore_util: float | None = None  # percent, mean over the job (neuron-monitor)
    host_vcpu: float | None = None  # percent, mean over the job
    input_bound: bool | None = None  # None: not measured
    compile_s: float | None = None
    precompile_s: float | None = None  # the neuron_parallel_compile pass, apart from compile_s
    cache_hit_ratio: float | None = None
    steps_done: int | None = None
    final_loss: float | None = None
    varied: dict[str, Any] = field(default_factory=dict)
    note: str | None = None
    uri: str | None = None
    mlflow_run: str | None = None  # the job's MLflow run id (results.json's `mlflow`)

    @property
    def ok(self) -> bool:
        return self.status not in (MISSING, UNREADABLE, ERROR)

    @property
    def cloud(self) -> bool:
        """Whether the job's backend bills it (`is_cloud`); False: a job of this machine."""
        return is_cloud(self.backend)


@dataclass(frozen=True)
class Collection:
    """What `collect` found: rows (best first), and where it looked."""

    prefix: str
    rows: list[Row]

    @property
    def errors(self) -> list[Row]:
        return [r for r in self.rows if r.status == ERROR]


def is_cloud(backend: str | None) -> bool:
    """Whether jobs of `backend` (as results.json names it; None: an older writer's, a job of
    `registry.DEFAULT`) run in the cloud and are billed. A backend this version does not know
    is taken for a cloud one: priced, if its instance type has a price."""
    name = backend or registry.DEFAULT
    return name not in registry.names() or name in registry.cloud_names()


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def build_row(job: str, results: Results, uri: str, described: JobStatus | None,
              price: catalog.Price | None, note: str | None = None) -> Row:
    """The row for one job from its results, what its backend says of it (`Backend.describe`;
    None when there is nothing to join: a local job, or no such job in the backend) and the
    catalog price of one instance."""
    inst = results.instance
    notes = [note] if note else []
    status = Status(results.status)  # the schema's statuses are lifecycle words
    spot = False
    billable = training = None
    started_at = queue_s = run_s = None
    if described is not None:
        started_at = described.started
        if described.created is not None and described.started is not None:
            queue_s = max(0.0, described.started - described.created)
        if described.started is not None and described.ended is not None:
            run_s = max(0.0, described.ended - described.started)
        status = described.status
        spot = described.spot
        billable = described.billable_seconds
        training = described.training_seconds
        if described.failure_reason and status == Status.FAILED:
            notes.append(str(described.failure_reason))
    elif results.failure_reason:
        notes.append(results.failure_reason)
    if results.status == Status.RUNNING:
        # A heartbeat: the job runs, or it was killed before launch.py wrote its final record.
        of = f" of {results.steps}" if results.steps is not None else ""
        at = f" at {results.heartbeat_at}" if results.heartbeat_at else ""
        ended = ("; the job ended before its final results were written: this is its last known state"
                 if is_terminal(status) else "")
        notes.append(f"heartbeat{at}: step {results.steps_done if results.steps_done is not None else '?'}{of}{ended}")

    price_per_hour = price_source = spot_savings = verified = None
    hourly = None
    if not is_cloud(results.backend):
        price_source = f"{results.backend}: no cloud cost"
        if inst.preference is not None:
            # A local job told that its first preferences had no capacity ran as a later one.
            rate = (f"SageMaker bills {cost.rate(price).describe()} per instance" if price is not None
                    else "no price known")
            notes.append(f"ran as instance preference {inst.preference}, {inst.type} x{inst.count} ({rate}; "
                         "not billed here)")
    elif price is None:
        notes.append(f"no price for {inst.type} in {results.region}; run `python -m orchestrator prices refresh`")
    else:
        hourly = cost.rate(price)
        verified = hourly.verified
        price_per_hour = hourly.usd_per_hour * inst.count
        price_source = (f"{price.source}, {price.as_of}" if verified else
                        f"~ {price.source}, {price.as_of}, x {hourly.markup:g} (assumed SageMaker markup; "
                        f"{cost.UNVERIFIED})")
        if spot:
            if billable is not None and training:
                spot_savings = max(0.0, 1.0 - billable / training)
                price_per_hour *= billable / training
                price_source += f"; spot, {spot_savings:.0%} saved"
            else:
                notes.append("spot savings unknown: on-demand price shown")

    attempt = results.tags.get(TAG_ATTEMPT, "")
    failover_from = attempt.removeprefix("failover:") if attempt.startswith("failover:") else None
    if failover_from:
        batch = f", global batch {results.global_batch}" if results.global_batch is not None else ""
        notes.append(f"failed over from {failover_from}: not its trial's configuration (ran on {inst.type} "
                     f"x{inst.count}{batch}); compare it as a configuration of its own")

    read = {"step_time_s.p50": results.step_time_s.p50 if results.step_time_s else None,
            "samples_per_s": results.samples_per_s, "compile_s": results.compile_s,
            "flops_per_sample": results.flops_per_sample}
    odd = [name for name, value in read.items() if value is not None and not math.isfinite(value)]
    if odd:
        notes.append(f"non-finite value in {', '.join(odd)}")
    sps = _finite(results.samples_per_s)
    samples_per_dollar = cost_per_million = None
    if price_per_hour is not None and sps is not None and sps > 0 and price_per_hour > 0:
        samples_per_dollar = sps * 3600.0 / price_per_hour
        cost_per_million = 1e6 / samples_per_dollar
    flops = _finite(results.flops_per_sample)
    # A job of this machine (the local backend) ran on its CPUs, not on the instance it emulates.
    mfu = peak_flops.mfu(flops, sps, inst.type, inst.count, results.precision) if is_cloud(results.backend) else None
    top = peak_flops.peak(inst.type, results.precision) if mfu is not None else None
    tflop_per_dollar = samples_per_dollar * flops / 1e12 if samples_per_dollar and flops else None
    used = results.utilization
    core_util = _finite(used.neuroncore_util_pct_mean) if used else None
    vcpu = _finite(used.host_vcpu_pct_mean) if used else None
    input_bound = None
    if core_util is not None and vcpu is not None:
        input_bound = core_util < IDLE_CORES_PCT and vcpu >= SATURATED_VCPU_PCT
        if input_bound and status == Status.COMPLETED:
            notes.append(f"input-bound: NeuronCores {core_util:.0f}% busy while vCPUs {vcpu:.0f}% busy; "
                         "add data.num_workers or lighten the input pipeline")
    cost_usd = None
    if hourly is not None and billable is not None:
        cost_usd = billable / 3600.0 * hourly.usd_per_hour * inst.count

    hit_ratio = None
    cache = results.cache
    if cache is not None and cache.hit_entries is not None and cache.new_entries is not None:
        # Entries a warm pool's persistent cache already held are hits that needed no download.
        found = cache.hit_entries + (cache.local_entries or 0)
        total = found + cache.new_entries
        hit_ratio = found / total if total else None

    cloud = is_cloud(results.backend)
    return Row(
        job=job, status=status, backend=results.backend, region=results.region,
        sweep=results.tags.get(TAG_SWEEP), trial=results.tags.get(TAG_TRIAL),
        instance=inst.type if cloud else local_instance(inst.cpus), count=inst.count,
        cores=None if inst.neuron_cores is None or not cloud else inst.neuron_cores * inst.count,
        runtime=results.runtime, precision=results.precision, global_batch=results.global_batch,
        step_time_p50_s=_finite(results.step_time_s.p50) if results.step_time_s else None,
        samples_per_s=sps, price_per_hour=price_per_hour, price_source=price_source, price_verified=verified,
        failover_from=failover_from,
        spot=spot,
        spot_savings=spot_savings, billable_s=billable, training_s=training, started_at=started_at, queue_s=queue_s,
        run_s=run_s, cost_usd=cost_usd,
        cost_per_million_samples=cost_per_million, samples_per_dollar=samples_per_dollar,
        flops_per_sample=flops, mfu=mfu, tflop_per_dollar=tflop_per_dollar,
        peak_source=f"{top.instance_type} {top.precision}: {top.per_chip / 1e12:g} TFLOPS per chip, {top.source}, "
                    f"{top.as_of}" if top else None,
        neuroncore_util=core_util, host_vcpu=vcpu, input_bound=input_bound,
        compile_s=_finite(results.compile_s),
        precompile_s=_finite(results.precompile.seconds) if results.precompile else None, cache_hit_ratio=hit_ratio, steps_done=results.steps_done,
        final_loss=_finite(results.final_loss), varied=dict(results.varied),
        note="; ".join(notes) or None, uri=uri,
        mlflow_run=results.mlflow.run_id if results.mlflow else None,
    )


def local_instance(cpus: int | None) -> str:
    """What a local job's row says it ran on: this machine's CPUs (how many, when known)."""
    return f"{LOCAL_INSTANCE} x{cpus}" if cpus else LOCAL_INSTANCE


def rank(rows: Iterable[Row]) -> list[Row]:
    """Rows with `relative` filled in (best completed row = 1.0), sorted best first; then
    unranked rows with results, fastest first; then rows without results."""
    rows = list(rows)
    best = max((r.samples_per_dollar for r in rows if r.status == Status.COMPLETED and r.samples_per_dollar),
               default=None)
    ranked = [replace(r, relative=(r.samples_per_dollar / best if best and r.samples_per_dollar
                                   and r.status == Status.COMPLETED else None)) for r in rows]
    return sorted(ranked, key=lambda r: (r.relative is None, -(r.relative or 0.0), not r.ok,
                                         -(r.samples_per_s or 0.0), r.job))


def in_sweep(job: str, tags: dict, sweep: str) -> bool:
    """Whether readable results belong to `sweep` (see the module docstring)."""
    tagged = tags.get(TAG_SWEEP)
    if tagged is not None:
        return names.tagged_in_sweep(tagged, sweep)
    if TAG_JOB in tags:
        return False
    return names.in_sweep(job, sweep)
