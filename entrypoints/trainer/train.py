"""The per-rank training loop: `torchrun ... -m entrypoints.trainer.train --job job.json --stats-dir DIR`.

Runs with cwd = the code directory that holds `entrypoints/`; without torchrun's variables it
is rank 0 of 1 (tests, smoke). Contract: reads the job file (`contract.load_job`) and trains
`training.steps` optimizer steps, leaving the first `warmup_steps` out of the statistics; rank
0 prints `METRICS_TAG` lines every `log_every` steps and one `SUMMARY_TAG` line, and writes
TensorBoard scalars; the first rank of each host writes checkpoints atomically (keeping
`KEEP_CHECKPOINTS`) and every rank resumes from the newest that matches; at the end rank 0
writes `<model_dir>/model.pt` and every rank `<stats-dir>/rank-<rank>.json` (`RankStats`), with
"error" set on an exception or SIGTERM (exit non-zero). `contract.PROGRESS_REPORT_ENV` adds
stats files while training, `contract.PRECOMPILE_STEPS_ENV` runs a few steps that keep
nothing, `STOP_AT_STEP_ENV` SIGKILLs after a step (the resume tests' drill). Why each:
docs/ARCHITECTURE.md, "One host: inside the container".
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from torch import nn

from entrypoints.shared import atomic, contract, nospace
from entrypoints.trainer import data, flops, runtime, vit
from entrypoints.trainer.scalars import Scalars

STOP_AT_STEP_ENV = "ORCHESTRATOR_TEST_STOP_AT_STEP"
CHECKPOINT_PREFIX = "ckpt-"
KEEP_CHECKPOINTS = 2
CHECKPOINT_FORMAT = 1


def process_start_time() -> float:
    """Wall-clock time this process started (Linux: from /proc; elsewhere: module import)."""
    try:
        stat = Path("/proc/self/stat").read_text()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - uptime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED_AT


_IMPORTED_AT = time.time()


@dataclass
class RankStats:
    """What each rank writes to `<stats-dir>/rank-<rank>.json` (launch.py reads it)."""

    rank: int
    world_size: int
    local_rank: int
    runtime: str = ""
    precision: str = ""
    batch_size: int = 0
    steps_done: int = 0
    start_step: int = 0
    resumed_from: int | None = None
    step_times_s: list[float] = field(default_factory=list)
    time_to_first_step_s: float | None = None
    compile_s: float | None = None
    graphs_compiled: int | None = None
    compiler_cache: dict[str, int] = field(default_factory=dict)
    ddp_split_graphs: bool | None = None
    final_loss: float | None = None
    samples_per_s: float | None = None
    flops_per_sample: float | None = None  # the first rank of each host counts it (entrypoints.trainer.flops)
    versions: dict[str, str | None] = field(default_factory=dict)
    error: str | None = None
    warnings: list[str] = field(default_factory=list)  # what the rank survived (no TensorBoard...)


def versions() -> dict[str, str | None]:
    def installed(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    import timm

    return {"python": platform.python_version(), "torch": torch.__version__, "torch_xla": installed("torch-xla"),
            "timm": timm.__version__, "neuronx_cc": installed("neuronx-cc")}


def make_optimizer(params, spec: dict) -> torch.optim.Optimizer:
    name, lr = spec.get("name", "adamw"), float(spec.get("lr", 1e-4))
    weight_decay = float(spec.get("weight_decay", 0.0))
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=float(spec.get("momentum", 0.9)), weight_decay=weight_decay)
    raise ValueError(f"training.optimizer.name must be adam, adamw or sgd, not {name!r}")


def model_fingerprint(spec: dict) -> str:
    """What a checkpoint must match to be resumed: the model and the optimizer kind."""
    ident = {"model": spec["model"], "optimizer": spec["training"]["optimizer"].get("name"),
             "runtime": spec["training"]["runtime"]}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def staging_dir(directory: Path) -> Path:
    """Where files bound for `directory` are written before they are renamed in: a hidden
    sibling (same parent, so the same file system and the rename is atomic).

    SageMaker copies every file that appears in the checkpoint directory (/opt/ml/checkpoints)
    to S3 as it appears (model-checkpoints.html): a temporary file written inside it could
    reach S3 half-written, and its rename would show up there as a delete plus a new object."""
    return directory.parent / f".{directory.name}.partial"


def atomic_save(obj: Any, path: Path, staging: Path | None = None) -> None:
    """torch.save into `path` atomically and durably (`atomic.replacing`).

    The temporary file lies in `staging` (default: beside `path`); only the finished file
    ever appears in `path`'s directory. A staging folder on another file system (the rename
    fails with EXDEV) falls back to a temporary file beside `path`. A write that a full disk
    failed raises `nospace.DiskFull`, naming the path and the free bytes (torch's own error
    does not say why)."""
    try:
        with atomic.replacing(path, staging=staging) as handle:
            try:
                torch.save(obj, handle)
            except Exception as exc:
                # Looked at while the partial file still holds its blocks.
                full = nospace.as_disk_full(exc, path, written=handle.name)
                if full is not None:
                    raise full from exc
                raise
    except OSError as exc:  # the flush, fsync or rename after torch.save
        full = nospace.as_disk_full(exc, path) if nospace.in_chain(exc) else None
        if full is not None:
            raise full from exc
        raise


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"{CHECKPOINT_PREFIX}{step:09d}.pt"


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of finished checkpoint files, newest first (temporary files never match)."""
    found = []
    if directory.is_dir():
        for path in directory.glob(f"{CHECKPOINT_PREFIX}*.pt"):
            digits = path.stem[len(CHECKPOINT_PREFIX):]
            if digits.isdigit():
                found.append((int(digits), path))
    return sorted(found, reverse=True)


def rng_state() -> dict:
    import random

    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import random

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


class Trainer:
    """One rank's model, optimizer, data and loop for a resolved job (see the module docstring).

    `checkpoint_dir=None` disables both checkpoint writing and resuming (smoke runs).
    """

    def __init__(self, job: dict, dist: runtime.Dist, channels: dict[str, Path] | None = None,
                 checkpoint_dir: Path | None = None, log: Callable[[str], None] | None = None,
                 beat: Callable[[RankStats], None] | None = None, beat_s: float = 0.0,
                 scalars: Scalars | None = None) -> None:
        self.job = job
        self.spec = spec = job["spec"]
        self.training = training = spec["training"]
        self.dist = dist
        self.log = log or contract.write_line
        self.steps = int(training["steps"])
        self.warmup = int(training.get("warmup_steps", 0))
        self.batch_size = int(training["batch_size"])
        self.log_every = int(training.get("log_every", 10))
        self.checkpoint_every = int(training.get("checkpoint_every", 0))
        self.checkpoint_dir = checkpoint_dir
        self.fingerprint = model_fingerprint(spec)
        seed = int(training.get("seed", 0))

        self.runtime = runtime.create(training["runtime"], dist, training["precision"])
        self.runtime.setup()
        # Same initial weights on every rank (XLA has no DDP broadcast); per-rank RNG afterwards.
        torch.manual_seed(seed)
        self.module = vit.build(spec["model"]).to(self.runtime.device)
        self.optimizer = make_optimizer(self.module.parameters(), training["optimizer"])
        torch.manual_seed(seed * 1_000_003 + dist.rank)
        self.start_step, self.resumed_from = self._resume()
        self.model = self.runtime.prepare(self.module, compile=bool(training.get("compile", False)))
        self.source = data.create(self.runtime, spec, dist, dict(channels or {}))
        self.loss_fn = nn.CrossEntropyLoss()
        self.first_step_s: float | None = None
        self.last_loss: torch.Tensor | None = None
        # Heartbeats: the first rank of each host reports its progress (launch.py reads it) once
        # the warmup steps are done and then every `beat_s` seconds.
        self.beat = beat if beat is not None and beat_s > 0 and dist.is_node_main else None
        self.beat_s = beat_s
        self.next_beat = math.inf
        # TensorBoard scalars, rank 0 only, at the log lines' cadence (reading the loss syncs).
        self.scalars = scalars if dist.is_main else None

    # --- checkpoints ---------------------------------------------------------------------

    def _load_checkpoint(self, path: Path) -> dict | None:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # truncated, foreign or unsafe to unpickle: fall back to an older one
            self.log(f"checkpoint {path.name} does not load ({type(exc).__name__}: {exc}); skipping it")
            return None
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            self.log(f"checkpoint {path.name} is not ours; skipping it")
            return None
        if state.get("fingerprint") != self.fingerprint:
            self.log(f"checkpoint {path.name} belongs to another model or optimizer; skipping it")
            return None
        return state

    def _resume(self) -> tuple[int, int | None]:
        state, step = None, 0
        if self.checkpoint_dir is not None:
            for candidate, path in list_checkpoints(self.checkpoint_dir):
                state = self._load_checkpoint(path)
                if state is not None:
                    step = candidate
                    break
        agreed = self.runtime.agree_min(step, "resume-step")
        if agreed != step:
            path = checkpoint_path(self.checkpoint_dir, agreed) if self.checkpoint_dir else None
            state = self._load_checkpoint(path) if agreed and path and path.exists() else None
            if agreed and state is None:
                raise RuntimeError(f"the ranks agreed to resume from step {agreed} but this rank "
                                   f"({self.dist.rank}) has no loadable {path}")
        if not agreed:
            return 0, None
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.runtime.load_state_dict(state.get("runtime", {}))
        if state.get("rank") == self.dist.rank:
            set_rng_state(state["rng"])
        else:
            torch.manual_seed(int(self.training.get("seed", 0)) * 1_000_003 + self.dist.rank + agreed)
        self.log(f"resumed from checkpoint step {agreed}")
        return agreed, agreed

    def save_checkpoint(self, step: int) -> None:
        if self.checkpoint_dir is None or not self.dist.is_node_main:
            return
        state = {
            "format": CHECKPOINT_FORMAT,
            "fingerprint": self.fingerprint,
            "step": step,
            "rank": self.dist.rank,
            "model": self.runtime.to_cpu(self.module.state_dict()),
            "optimizer": self.runtime.to_cpu(self.optimizer.state_dict()),
            "runtime": self.runtime.to_cpu(self.runtime.state_dict()),
            "rng": rng_state(),
        }
        atomic_save(state, checkpoint_path(self.checkpoint_dir, step), staging=staging_dir(self.checkpoint_dir))
        # Pruning deletes files SageMaker mirrored: the execution role needs s3:DeleteObject on
        # the checkpoint prefix (infra/stack.yaml), or S3 keeps every checkpoint.
        for _, old in list_checkpoints(self.checkpoint_dir)[KEEP_CHECKPOINTS:]:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()

    # --- the step ------------------------------------------------------------------------

    def batches(self, start_step: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.source.batches(start_step)

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One optimizer step; returns the loss (a device tensor: reading it syncs)."""
        self.optimizer.zero_grad(set_to_none=True)
        with self.runtime.autocast():
            loss = self.loss_fn(self.model(images), labels)
        self.runtime.backward(loss)
        self.runtime.optimizer_step(self.optimizer)
        self.runtime.mark_step()
        return loss.detach()

    # --- the loop ------------------------------------------------------------------------

    def run(self, stats: RankStats, process_start: float) -> RankStats:
        """Train from `start_step` to `steps`, filling `stats`, then log the summary."""
        stats.start_step = self.start_step
        stats.resumed_from = self.resumed_from
        self.run_steps(self.start_step, self.steps, stats, process_start)
        return self.finish(stats)

    def run_steps(self, start: int, stop: int, stats: RankStats, process_start: float) -> None:
        """Steps `start` .. `stop - 1`: the hot loop (timing, log lines, checkpoints)."""
        global_batch = self.batch_size * self.dist.world_size
        stop_at = int(os.environ.get(STOP_AT_STEP_ENV, "0") or 0)
        sync, train_step, times = self.runtime.sync, self.train_step, stats.step_times_s
        warmed = max(1, self.warmup)
        batches = self.batches(start)
        for step in range(start, stop):
            images, labels = next(batches)
            started = time.perf_counter()
            loss = train_step(images, labels)
            sync()
            elapsed = time.perf_counter() - started
            done = step + 1
            stats.steps_done += 1
            self.last_loss = loss
            if self.first_step_s is None:
                self.first_step_s = elapsed
                stats.time_to_first_step_s = time.time() - process_start
            if stats.steps_done > self.warmup:
                times.append(elapsed)
            if self.dist.is_main and (done % self.log_every == 0 or done == self.steps):
                value = float(loss.item())
                self.log(contract.metric_line(contract.METRICS_TAG, step=done, loss=value,
                                              step_time_s=elapsed, samples_per_s=global_batch / elapsed))
                if self.scalars is not None:
                    self.scalars.add(done, loss=value, step_time_s=elapsed, samples_per_s=global_batch / elapsed,
                                     lr=self.optimizer.param_groups[0]["lr"])
            if self.checkpoint_every and (done % self.checkpoint_every == 0 or done == self.steps):
                self.save_checkpoint(done)
            if self.beat is not None and (stats.steps_done == warmed or time.monotonic() >= self.next_beat):
                self.heartbeat(stats)
            if stop_at and done == stop_at:
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)

    def heartbeat(self, stats: RankStats) -> None:
        """Report progress so far through `beat` (the step statistics, the compiler's cache counters)."""
        if self.last_loss is not None:
            stats.final_loss = float(self.last_loss.item())
        stats.compiler_cache = self.runtime.compiler_cache()
        self.beat(stats)
        self.next_beat = time.monotonic() + self.beat_s

    def finish(self, stats: RankStats) -> RankStats:
        """Fill the summary fields of `stats`; rank 0 logs the summary line."""
        times = stats.step_times_s
        if self.last_loss is not None:
            stats.final_loss = float(self.last_loss.item())
        median = _median(times)
        if times:
            stats.samples_per_s = self.batch_size * self.dist.world_size * len(times) / sum(times)
        if self.first_step_s is not None and median is not None:
            stats.compile_s = max(0.0, self.first_step_s - median)
        stats.graphs_compiled = self.runtime.compiled_graphs()
        stats.compiler_cache = self.runtime.compiler_cache()
        stats.ddp_split_graphs = self.runtime.ddp_split_graphs
        if self.dist.is_node_main:
            try:
                stats.flops_per_sample = flops.training_flops_per_sample(self.spec["model"])
            except Exception as exc:  # noqa: BLE001 - MFU goes missing; training is what counts
                self.log(f"WARNING could not count the model's FLOPs: {type(exc).__name__}: {exc}")
        if self.dist.is_main:
            summary = {"step_time_p50_s": median, "samples_per_s": stats.samples_per_s,
                       "time_to_first_step_s": stats.time_to_first_step_s, "compile_s": stats.compile_s}
            self.log(contract.metric_line(contract.SUMMARY_TAG,
                                          **{k: float(v) for k, v in summary.items() if v is not None}))
        return stats

    def save_model(self, model_dir: Path) -> Path | None:
        """Rank 0 writes the final weights to `<model_dir>/model.pt`."""
        if not self.dist.is_main:
            return None
        path = model_dir / "model.pt"
        atomic_save(self.runtime.to_cpu(self.module.state_dict()), path)
        return path

    def close(self) -> None:
        if self.scalars is not None:
            self.scalars.close()
        self.runtime.shutdown()


def write_stats(stats: RankStats, stats_dir: Path, durable: bool = True) -> Path:
    """`<stats_dir>/rank-<rank>.json`, replaced atomically (a heartbeat skips the fsync:
    readers need a whole file, not one that outlives a power cut)."""
    path = stats_dir / f"rank-{stats.rank}.json"
    atomic.write_text(path, json.dumps(asdict(stats)) + "\n", durable=durable)
    return path


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(f"terminated by {signal.Signals(signum).name}")


def main(argv: list[str] | None = None) -> int:
    process_start = process_start_time()
    parser = argparse.ArgumentParser(prog="entrypoints.trainer.train", description="One rank of a training job.")
    parser.add_argument("--job", type=Path, required=True, help="the resolved job file (job.json)")
    parser.add_argument("--stats-dir", type=Path, required=True, help="where rank-<rank>.json goes")
    args = parser.parse_args(argv)

    dist = runtime.Dist.from_env()
    stats = RankStats(rank=dist.rank, world_size=dist.world_size, local_rank=dist.local_rank, versions=versions())
    # torchrun forwards SIGTERM (a stopped or interrupted job): end through the error path below.
    signal.signal(signal.SIGTERM, _terminated)
    trainer = None
    try:
        job = contract.load_job(args.job)
        training = job["spec"]["training"]
        # The precompile pass (contract.PRECOMPILE_STEPS_ENV): a few steps from the start, no
        # checkpoint read or written, no model saved, no heartbeat.
        precompile = int(os.environ.get(contract.PRECOMPILE_STEPS_ENV) or 0)
        if precompile:
            steps = min(int(training["steps"]), precompile)
            training.update(steps=steps, warmup_steps=min(int(training.get("warmup_steps", 0)), steps - 1),
                            checkpoint_every=0)
        stats.runtime, stats.precision = training["runtime"], training["precision"]
        stats.batch_size = int(training["batch_size"])
        sm = contract.Contract.from_env()
        beat_s = float(os.environ.get(contract.PROGRESS_REPORT_ENV, "0") or 0)
        # SM_OUTPUT_DIR/tensorboard: contract.TENSORBOARD_DIR, the request's LocalPath. Only in
        # a container (the toolkit or launch.py set SM_OUTPUT_DIR), never /opt/ml of a laptop,
        # and not in the precompile pass (its steps are not the job's).
        scalars = (Scalars.open(sm.output_dir / "tensorboard", contract.write_line)
                   if dist.is_main and os.environ.get("SM_OUTPUT_DIR") and not precompile else None)
        trainer = Trainer(job, dist, channels=dict(sm.channels),
                          checkpoint_dir=None if precompile else sm.checkpoint_dir,
                          beat=lambda s: write_stats(s, args.stats_dir, durable=False), beat_s=0 if precompile else beat_s,
                          scalars=scalars)
        trainer.run(stats, process_start)
        if not precompile:
            trainer.save_model(sm.model_dir)
    except BaseException as exc:
        stats.error = nospace.describe(exc)
        write_stats(stats, args.stats_dir)
        raise
    finally:
        if trainer is not None:
            trainer.close()
            if trainer.scalars is not None and trainer.scalars.warning:
                stats.warnings.append(trainer.scalars.warning)
    write_stats(stats, args.stats_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
