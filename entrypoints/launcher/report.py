"""This host's `results.json` (`entrypoints.shared.results_schema`, docs/RESULTS.md): built from the
ranks' stats files and the launcher's figures, written when the launcher starts (status
"running"), at every heartbeat, and at the end.

Each write replaces the whole document atomically: on this host in SM_OUTPUT_DATA_DIR (it
travels in output.tar.gz) and, on node rank 0, at the job's `results_uri` through
`entrypoints.shared.storage`. A heartbeat that cannot be stored is logged, not fatal; a final record
that cannot be stored fails the job, and the local copy is rewritten to say so. Stdlib only;
nothing here imports `orchestrator`.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from entrypoints.launcher import precompile, utilization
from entrypoints.shared import atomic, contract, nospace, results_schema, storage


def _now_iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_rank_stats(stats_dir: Path) -> dict[int, dict]:
    """Global rank -> the stats its rank wrote; unreadable files are skipped."""
    stats = {}
    for path in sorted(stats_dir.glob("rank-*.json")):
        try:
            data = json.loads(path.read_text())
            stats[int(data.get("rank", path.stem.split("-", 1)[1]))] = data
        except (OSError, ValueError):
            continue
    return stats


def warmed(stats_dir: Path, warmup: int) -> bool:
    """Whether this host's first rank has finished its warmup steps (at least one step)."""
    stats = read_rank_stats(stats_dir)
    return bool(stats) and int(stats[min(stats)].get("steps_done") or 0) >= max(1, warmup)


def cache_section(mode: str, uri: str | None) -> dict:
    """results.json's `cache` before any pull or push; the pull and `heartbeat.CachePusher`
    add their figures to it."""
    return {"mode": mode, "uri": uri, "key": None, "hit_entries": 0, "new_entries": 0, "pull_bytes": 0,
            "pull_s": 0.0, "push_bytes": 0, "push_s": 0.0, "pushes": 0, "warnings": [], "persistent_dir": None,
            "local_entries": 0}


def given_setup() -> dict:
    """results.json's `container` when launch.py runs as the program of another driver (the
    SageMaker toolkit, a test): the SM_* variables were given to it."""
    return {"entrypoint": False, "sm_environment": "given", "hostname": None, "requirements": "none"}


def _versions(rank_versions: dict | None) -> dict:
    from importlib import metadata

    def version(*names: str) -> str | None:
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return None

    found = {
        "python": ".".join(map(str, sys.version_info[:3])),
        "torch": version("torch"),
        "torch_xla": version("torch-xla", "torch_xla"),
        "timm": version("timm"),
        "neuronx_cc": version("neuronx-cc", "neuronx_cc"),
    }
    for key, value in (rank_versions or {}).items():
        if key in found and value is not None:
            found[key] = value
    return found


def _unmeasured() -> dict:
    return utilization.absent("not monitored")


def _step_stats(times: list[float]) -> results_schema.StepTime | None:
    if not times:
        return None
    ordered = sorted(times)

    def pct(q: float) -> float:
        # Nearest rank: the smallest time with at least q of the steps at or below it.
        index = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
        return ordered[index]

    return results_schema.StepTime(p50=statistics.median(ordered), p90=pct(0.9), mean=statistics.fmean(ordered),
                                   n=len(ordered))


def build_results(job: dict, ctr: contract.Contract, stats: dict[int, dict], *, status: str,
                  reason: str | None, cache: dict, started: float, ended: float | None,
                  warnings: list[str], now: float | None = None, setup: dict | None = None,
                  utilization: dict | None = None, precompiled: dict | None = None,
                  mlflow: dict | None = None) -> dict:
    """The `orchestrator.results/v1` document (`entrypoints.shared.results_schema`) for this host.

    Step times come from global rank 0 when this host has it, else this host's lowest rank
    (while training runs: from its last progress report). `ended` is None while the job runs
    (status "running"): `ended_at` is null and `heartbeat_at` / `duration_s` are at `now`.
    """
    beat = ended if ended is not None else (now if now is not None else time.time())
    spec = job.get("spec") or {}
    training = spec.get("training") or {}
    model = spec.get("model") or {}
    instance = job.get("instance") or {}
    workers = int(job["workers_per_node"])
    lead = stats[min(stats)] if stats else {}
    world_size = int(lead.get("world_size") or ctr.num_nodes * workers)
    batch = int(lead.get("batch_size") or training.get("batch_size") or 0)
    global_batch = batch * world_size
    step_time = _step_stats([float(t) for t in lead.get("step_times_s") or []])
    record = results_schema.Results(
        schema=results_schema.SCHEMA,
        job_name=job["job_name"],
        spec_hash=job["spec_hash"],
        status=status,
        failure_reason=reason,
        backend=job.get("backend") or spec.get("backend"),
        region=spec.get("region"),
        instance=results_schema.Instance(
            type=instance.get("type") or ctr.instance_type,
            count=ctr.num_nodes,
            neuron_cores=instance.get("neuron_cores"),
            logical_cores=instance.get("logical_cores"),
            workers_per_node=workers,
            cpus=ctr.num_cpus,
            preference=(job.get("selected") or {}).get("preference"),
        ),
        world_size=world_size,
        runtime=lead.get("runtime") or training.get("runtime"),
        compile=bool(training.get("compile", False)),
        precision=lead.get("precision") or training.get("precision"),
        batch_size=batch,
        global_batch=global_batch,
        steps=training.get("steps"),
        warmup_steps=training.get("warmup_steps"),
        steps_done=lead.get("steps_done", 0),
        model=results_schema.Model(arch=model.get("arch"), image_size=model.get("image_size"),
                                   patch_embed=model.get("patch_embed")),
        step_time_s=step_time,
        samples_per_s=(global_batch / step_time.mean) if step_time and step_time.mean > 0 else None,
        time_to_first_step_s=lead.get("time_to_first_step_s"),
        compile_s=lead.get("compile_s"),
        flops_per_sample=lead.get("flops_per_sample"),
        compiler_cache={str(k): int(v) for k, v in (lead.get("compiler_cache") or {}).items()},
        ddp_split_graphs=lead.get("ddp_split_graphs"),
        cache=results_schema.from_values(results_schema.CacheStats, cache),
        container=results_schema.from_values(results_schema.Container, setup or given_setup()),
        final_loss=lead.get("final_loss"),
        utilization=results_schema.from_values(results_schema.Utilization, utilization or _unmeasured()),
        precompile=results_schema.from_values(
            results_schema.Precompile,
            precompiled or precompile.section(bool(training.get("precompile")), reason="has not run (yet)")),
        versions=results_schema.from_values(results_schema.Versions, _versions(lead.get("versions"))),
        started_at=_now_iso(started),
        ended_at=_now_iso(ended) if ended is not None else None,
        heartbeat_at=_now_iso(beat),
        duration_s=round(beat - started, 3),
        tags=dict(job.get("tags") or {}),
        warnings=list(warnings) + [w for w in lead.get("warnings") or [] if w not in warnings],
        varied=dict(job.get("varied") or {}),
        mlflow=results_schema.from_values(results_schema.Mlflow, mlflow) if mlflow else None,
    )
    return results_schema.as_document(record)


def publish_results(uri: str, data: bytes) -> None:
    """Write results to the object `uri` (s3:// or file://) through storage, atomically."""
    prefix, _, name = uri.rstrip("/").rpartition("/")
    storage.open_store(prefix).put_bytes(name, data)


def upload_tensorboard(job: dict, ctr: contract.Contract) -> tuple[int, str | None]:
    """Node rank 0's TensorBoard event files (`<SM_OUTPUT_DIR>/tensorboard`) to the job file's
    `tensorboard_uri`, where the job has one: a Batch job, which has no TensorBoardOutputConfig
    (SageMaker uploads that folder itself). Returns (files uploaded, warning or None); never
    raises: a failed upload loses the curves, not the job."""
    uri = job.get("tensorboard_uri")
    folder = ctr.output_dir / "tensorboard"
    if ctr.node_rank != 0 or not uri or not folder.is_dir():
        return 0, None
    done = 0
    try:
        store = storage.open_store(uri)
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            store.put_file(path.relative_to(folder).as_posix(), path)
            done += 1
    except Exception as exc:  # noqa: BLE001 - the curves are lost, not the job
        return done, f"TensorBoard files not uploaded to {uri}: {type(exc).__name__}: {exc}"
    return done, None


def write_local(path: Path, data: bytes) -> None:
    """Replace a local file atomically. Not durable: the container's disk goes with the
    instance, and a heartbeat a second old is as good as the one before it."""
    atomic.write_bytes(path, data, durable=False)


class Report:
    """This host's results.json over the job (see the module docstring). `cache`, `warnings`
    and `setup` are the launcher's own, read at each write."""

    def __init__(self, job: dict, ctr: contract.Contract, started: float, cache: dict, warnings: list[str],
                 stats_dir: Path, setup: dict, log: Callable[[str], None]) -> None:
        self.job, self.ctr, self.started = job, ctr, started
        self.cache, self.warnings, self.stats_dir, self.setup = cache, warnings, stats_dir, setup
        self.log = log
        self.local = ctr.output_data_dir / results_schema.RESULTS_FILE
        self.publish_failed = False
        # results.json's `utilization` at each write (launch.py sets the monitor's `summary`).
        self.utilization: Callable[[], dict] | None = None
        # results.json's `precompile` once the pass has run or was skipped (launch.py sets it).
        self.precompile: dict | None = None
        # results.json's `mlflow` at each write (launch.py sets it to the run logger's link).
        self.mlflow: Callable[[], dict] | None = None

    def document(self, stats: dict[int, dict], *, status: str, reason: str | None, warnings: list[str],
                 ended: float | None) -> bytes:
        results = build_results(self.job, self.ctr, stats, status=status, reason=reason, cache=self.cache,
                                started=self.started, ended=ended, warnings=warnings, now=time.time(),
                                setup=self.setup, utilization=self.utilization() if self.utilization else None,
                                precompiled=self.precompile, mlflow=self.mlflow() if self.mlflow else None)
        return atomic.json_text(results).encode()

    def running(self) -> None:
        """A heartbeat: status "running", the step figures so far."""
        warnings = self.warnings + [f"compile cache: {w}" for w in self.cache["warnings"]]
        data = self.document(read_rank_stats(self.stats_dir), status="running", reason=None, warnings=warnings,
                             ended=None)
        write_local(self.local, data)
        uri = self.job.get("results_uri")
        if self.ctr.node_rank == 0 and uri:
            try:
                publish_results(uri, data)
            except Exception as exc:  # noqa: BLE001 - the final write decides; say it once
                if not self.publish_failed:
                    self.log(f"WARNING could not write the heartbeat to {uri}: {type(exc).__name__}: {exc}")
                self.publish_failed = True

    def final(self, stats: dict[int, dict], ok: bool, reason: str | None, stopped: bool) -> tuple[bool, str | None]:
        """The final record, both places; (ok, reason) as they stand after it. Its status is
        "completed", "stopped" (the launcher was signalled) or "failed". The local copy always
        ends with the job's final status: when publishing to `results_uri` fails, the job
        fails, and the local copy is rewritten to say so."""
        ended = time.time()

        def document(ok: bool, reason: str | None) -> bytes:
            status = "completed" if ok else "stopped" if stopped else "failed"
            return self.document(stats, status=status, reason=reason, warnings=self.warnings, ended=ended)

        results_uri = self.job.get("results_uri")
        failed = self._store(document(ok, reason))
        if failed is not None:
            message = f"could not write results to {results_uri}: {nospace.describe(failed)}"
            self.log(f"ERROR {message}")
            if ok:  # the local copy still exists; the job says why
                ok, reason = False, message
                write_local(self.local, document(ok, reason))
        elif self.ctr.node_rank == 0 and results_uri:
            self.log(f"results written to {results_uri}")
        self._final = (document, ok, reason)
        return ok, reason

    def amend(self) -> None:
        """The final record again, as it stands now (the MLflow run's id or warning came after
        it): same status, reason and end. Best effort: a record that cannot be stored again
        keeps the one already stored, and says so in the log."""
        if getattr(self, "_final", None) is None:
            return
        document, ok, reason = self._final
        failed = self._store(document(ok, reason))
        if failed is not None:  # the earlier final record stands
            self.log(f"WARNING could not write results again to {self.job.get('results_uri')}: "
                     f"{type(failed).__name__}: {failed}")

    def _store(self, data: bytes) -> Exception | None:
        """`data` as the local copy and (node rank 0) at the job's results_uri; the error that
        kept it from results_uri, if any (the local copy is written either way)."""
        write_local(self.local, data)
        results_uri = self.job.get("results_uri")
        if self.ctr.node_rank != 0 or not results_uri:
            return None
        try:
            publish_results(results_uri, data)
        except Exception as exc:  # noqa: BLE001 - the caller decides what it means for the job
            return exc
        return None
