"""Plan forecasts: beside the cost bound, what the stores say a job will find and cost.

Contract:
- `PriorRuns.read(prefix)` reads the results under a job's output prefix (`Prepared.locations`)
  once: for each spec hash, the latest completed run (results.json, by its end time). No
  backend is asked and no ledger read: it works wherever the prefix can be read.
- `forecast(prepared, prior)` -> `Forecast` (everything it needs of the job, `Prepared` holds):
  - `previous`: the latest completed run of the same spec (same `spec_hash`), if any; then
    `duration_s` is its launcher's duration (cache pull, training and push; on SageMaker the
    provisioning before it is not in it) and `usd` that duration x instance count x the
    estimate's hourly rate (None where the estimate has no price or the job is local);
  - `cache`: the compile cache key that run used, or else the newest key in the spec's cache
    whose manifest matches the spec (runtime, world size and, for xla, the Neuron family),
    with its entries and bytes read from the manifest; None when the cache holds none;
  - `note` says what could not be read (a store error never fails a plan).
- Reading an s3:// prefix calls AWS: callers read one only when asked (`plan --forecast`);
  a file:// prefix (the local store) is read always. `for_trials` applies that per trial of a
  sweep (a variant may set an s3:// URI over a local base): unasked, it reads no s3:// store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from entrypoints.shared.results_schema import Results
from orchestrator import catalog

if TYPE_CHECKING:
    from orchestrator.request import Prepared
    from orchestrator.spec import JobSpec


@dataclass(frozen=True)
class CacheState:
    """What a compile cache holds for a key."""

    uri: str
    key: str
    entries: int
    bytes: int
    compiler: str | None
    updated_at: str | None
    from_previous_run: bool

    def describe(self) -> str:
        how = "the key of its previous run" if self.from_previous_run else "a matching key"
        return (f"compile cache: {self.entries} entries, {self.bytes / 2**20:.1f} MiB under {how} {self.key} "
                f"({self.compiler or 'compiler unknown'}; updated {self.updated_at or '?'})")


CACHE_OFF = "compile cache: off (compile_cache.mode: off): every run compiles"


@dataclass(frozen=True)
class Forecast:
    previous: str | None = None
    duration_s: float | None = None
    usd: float | None = None
    cache: CacheState | None = None
    note: str | None = None
    # Why the results store, or the compile cache, could not be read (then nothing is known of it).
    results_unread: str | None = None
    cache_unread: str | None = None
    cache_off: bool = False  # compile_cache.mode: off (no cache, so no entries to wait for)

    def lines(self) -> list[str]:
        out = []
        if self.previous is not None:
            usd = f", ~{self.usd:.2f} USD" if self.usd is not None else ""
            out.append(f"forecast: ~{self.duration_s:.0f} s{usd}, from the completed run {self.previous} of the "
                       "same spec (launcher time: pull, training, push)")
        elif self.results_unread:
            out.append(f"forecast: could not read the {self.results_unread}, so earlier runs are unknown; the cost "
                       "bound above is all there is")
        else:
            out.append("forecast: no completed run of this spec yet; the cost bound above is all there is")
        if self.cache_off:
            out.append(CACHE_OFF)
        elif self.cache_unread:
            out.append(f"compile cache: could not read the {self.cache_unread}")
        else:
            out.append(self.cache.describe() if self.cache else "compile cache: no entries for this job's key yet "
                       "(the first run compiles)")
        return out

    def to_json(self) -> dict:
        return {"previous_job": self.previous, "duration_s": self.duration_s, "usd": self.usd,
                "cache": None if self.cache is None else dict(self.cache.__dict__), "note": self.note}


@dataclass
class PriorRuns:
    """The latest completed run of each spec hash under one output prefix."""

    prefix: str
    runs: dict[str, tuple[str, Results]] = field(default_factory=dict)
    note: str | None = None
    unread: str | None = None  # the note in words for the forecast line

    @classmethod
    def read(cls, prefix: str, s3_client=None) -> PriorRuns:
        from orchestrator.results.read import ResultsPrefix, UnreadableResults, parse

        prior = cls(prefix)
        try:
            store = ResultsPrefix(prefix, s3_client=s3_client)
            for job in store.jobs():
                try:
                    data = store.get(job)
                    results = parse(data) if data else None
                except UnreadableResults:
                    continue
                if results is None or results.status != "completed" or not results.spec_hash:
                    continue
                known = prior.runs.get(results.spec_hash)
                if known is None or (results.ended_at or "") > (known[1].ended_at or ""):
                    prior.runs[results.spec_hash] = (job, results)
        except Exception as exc:  # noqa: BLE001 - a forecast never fails a plan
            prior.note = f"results under {prefix} not read: {type(exc).__name__}: {exc}"
            prior.unread = f"results store {prefix}: {unread_reason(exc)}"
        return prior


def _matches(fields: dict, spec: JobSpec, target: catalog.Target) -> bool:
    if fields.get("runtime") != spec.training.runtime:
        return False
    if fields.get("world_size") != spec.instance.count * target.workers_per_node:
        return False
    return spec.training.runtime != "xla" or fields.get("target") == target.family


def cache_state(prepared: Prepared, key: str | None, s3_client=None) -> CacheState | None:
    """The cache's entries for `key` (the previous run's), else for the newest matching key."""
    from orchestrator import cache

    spec, target, uri = prepared.spec, prepared.target, prepared.locations.compile_cache
    if uri is None or spec.compile_cache.mode == "off":
        return None
    candidates = [key] if key else []
    if not candidates:
        _, keys = cache.list_keys(uri, s3_client=s3_client)
        candidates = [k.key for k in sorted(keys, key=lambda k: k.updated_at or "", reverse=True) if k.entries]
    for candidate in candidates:
        try:
            detail = cache.show(uri, candidate, s3_client=s3_client)
        except Exception:  # noqa: BLE001 - a missing or damaged manifest: no entries to count
            continue
        if key is None and not _matches(detail.fields, spec, target):
            continue
        return CacheState(uri=uri, key=candidate, entries=len(detail.entries),
                          bytes=sum(size for _, _, size in detail.entries),
                          compiler=detail.fields.get("compiler_version"), updated_at=detail.updated_at,
                          from_previous_run=key is not None)
    return None


def forecast(prepared: Prepared, prior: PriorRuns, s3_client=None) -> Forecast:
    """The forecast of one prepared job (see the module docstring)."""
    found = prior.runs.get(prepared.spec_hash)
    estimate = prepared.estimate
    note = prior.note
    previous = duration = usd = None
    key = None
    if found is not None:
        previous, results = found
        duration = results.duration_s
        key = results.cache.key if results.cache and results.cache.key else None
        if duration is not None and estimate.usd_per_hour is not None:
            usd = duration / 3600 * estimate.instance_count * estimate.usd_per_hour
    cache_unread = None
    try:
        state = cache_state(prepared, key, s3_client)
    except Exception as exc:  # noqa: BLE001 - a forecast never fails a plan
        state = None
        note = "; ".join(filter(None, (note, f"compile cache not read: {type(exc).__name__}: {exc}")))
        cache_unread = f"store {prepared.locations.compile_cache}: {unread_reason(exc)}"
    return Forecast(previous=previous, duration_s=duration, usd=usd, cache=state, note=note,
                    results_unread=prior.unread, cache_unread=cache_unread,
                    cache_off=prepared.spec.compile_cache.mode == "off")


def unread_reason(exc: Exception) -> str:
    """Why a store could not be read, in words, with what to do about missing credentials."""
    text = str(getattr(exc, "message", None) or exc)
    if "Unable to locate credentials" in text or type(exc).__name__ == "NoCredentialsError":
        return (f"{text} (no AWS credentials: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                "or run `aws configure`)")
    return text


def readable(prepared: Prepared, asked: bool) -> bool:
    """Whether a plan reads this job's stores: always for file://, for s3:// when asked."""
    uris = [prepared.locations.output, prepared.locations.compile_cache or ""]
    return asked or all(not uri.startswith("s3://") for uri in uris)


def s3_client_for(spec: JobSpec):
    from orchestrator import aws

    return aws.client("s3", spec.region)


def for_trials(trials, asked: bool) -> dict[str, Forecast]:
    """{job name: Forecast} of the sweep's planned `trials` whose stores may be read (`readable`);
    each output prefix's prior runs are read once, each region's S3 client made once."""
    priors: dict[str, PriorRuns] = {}
    clients: dict[str, object] = {}
    predicted = {}
    for trial in trials:
        prepared, spec = trial.prepared, trial.trial.spec
        if not readable(prepared, asked):
            continue
        if asked and spec.region not in clients:
            clients[spec.region] = s3_client_for(spec)
        s3 = clients.get(spec.region)
        prefix = prepared.locations.output
        if prefix not in priors:
            priors[prefix] = PriorRuns.read(prefix, s3)
        predicted[trial.job_name] = forecast(prepared, priors[prefix], s3)
    return predicted
