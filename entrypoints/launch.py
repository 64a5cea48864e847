"""The per-host driver of a training job: the container's first process.

One process per host. On SageMaker (and under the local backend) it runs as the container's
entrypoint, `python3 launch.py --container` (`contract.container_entrypoint`), so that it
receives SageMaker's SIGTERM; it then first does what the image's start script and the training
toolkit would have done (`entrypoints.container`: the SM_* variables, the host name,
requirements, reaping orphans). Without `--container` it expects the SM_* variables from
whoever started it. Contract, in order:

1. Read the container contract once (`contract.Contract.from_env()`) and the resolved job
   file (`job.json` next to this script or in the code directory, or `--job PATH`), and
   write `results.json` with status "running" (below, 6.): a record exists from the start.
2. Build the runtime environment: the job's `environment` (EFA variables included by the
   request; added here too for multi-node jobs on EFA instances when missing), plus the per-host
   compile cache directory: the one the job's settings name (`--cache_dir` in
   `NEURON_CC_FLAGS` for runtime xla, which SageMaker requests set to FACTS.md's
   /var/tmp/neuron-compile-cache; `TORCHINDUCTOR_CACHE_DIR` for native), else a fresh
   temporary one (`TRITON_CACHE_DIR` below it for native). In a fresh container either is
   empty, so a warm start can only come from the pulled cache. Native ranks
   also get `TORCHINDUCTOR_COMPILE_THREADS` = CPUs // workers (see `with_compile_threads`).
3. Pull the compile cache (mode tarball) and finish before any rank starts.
4. Run `torchrun` (nproc = workers per node; nnodes and node rank from SM_HOSTS and
   SM_CURRENT_HOST; master address from the contract, port `contract.MASTER_PORT` unless
   ORCHESTRATOR_MASTER_PORT is set), streaming its output line by line. Each rank writes
   `<stats dir>/rank-<global rank>.json` at its end; the first rank of the host also while it
   trains (`contract.PROGRESS_REPORT_ENV`).
5. While torchrun runs (`entrypoints.heartbeat`): push the new complete cache entries right
   after the warmup steps, then every `compile_cache.push_interval_s` seconds when there are
   new ones, and rewrite results.json (status "running", the step figures so far) every
   `HEARTBEAT_S` seconds (or push interval, if shorter). A SIGKILL at any moment loses at most
   one interval of compiling and of progress.
6. Whether training succeeded or not: push what is still new, build `results.json`
   (schema `orchestrator.results/v1`, docs/RESULTS.md) from the rank stats, write it to
   SM_OUTPUT_DATA_DIR and, on node rank 0, atomically to `job["results_uri"]` (if that
   fails, the job fails and the local copy is rewritten with status "failed").
7. On any failure, write a short reason (which rank, last error) to the contract's failure
   file (/opt/ml/output/failure) and exit non-zero.

A stop signal (SIGTERM, SIGINT) is forwarded to torchrun, which stops its workers; if torchrun
still runs after half the grace period (`STOP_GRACE_ENV`, default SageMaker's 120 s), its tree is
killed. Then 6. and 7. run as after any failure, with status "stopped".

A corrupted or hostile cache archive never stops the job: the pull reports it as a warning
(in the log and in `results.json` under cache.warnings) and training runs cold.

Runs as `python launch.py` from the unpacked source archive (where `entrypoints/` sits
beside it) and as `python -m entrypoints.launch`. Stdlib only (boto3 lazily through
`entrypoints.storage`; torch only inside `compile_cache.key_for`, for its version); never
imports `orchestrator`. `ORCHESTRATOR_TRAIN_MODULE` names another per-rank module (tests).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from datetime import datetime, timezone
from pathlib import Path

_HERE = Path(__file__).resolve().parent
# The code directory is the one holding the `entrypoints` package: the archive root when this
# file is the archive's launch.py, the package's parent when run as `-m entrypoints.launch`.
CODE_DIR = next((d for d in (_HERE, _HERE.parent) if (d / "entrypoints" / "__init__.py").is_file()), _HERE)
if str(CODE_DIR) not in sys.path[:1]:
    sys.path.insert(0, str(CODE_DIR))

from entrypoints import atomic, compile_cache, container, contract, heartbeat, results_schema, storage  # noqa: E402

TRAIN_MODULE = "entrypoints.train"
# Tests (and benchmarks of the launcher alone) name another per-rank module here.
TRAIN_MODULE_ENV = "ORCHESTRATOR_TRAIN_MODULE"
MASTER_PORT_ENV = "ORCHESTRATOR_MASTER_PORT"
# Where this host's compile cache lives (default: a fresh temporary directory).
CACHE_DIR_ENV = "ORCHESTRATOR_CACHE_DIR"
# SageMaker shows at most 1024 characters of FailureReason.
MAX_REASON = 1024
# While training runs, results.json is rewritten this often (or every push interval, if shorter).
HEARTBEAT_S = 30.0
# SageMaker's grace between its SIGTERM and its SIGKILL; the local backend passes its own.
STOP_GRACE_S = 120.0
STOP_GRACE_ENV = "ORCHESTRATOR_STOP_GRACE_S"
DEFAULT_PUSH_INTERVAL_S = 60
# Instance types with EFA, whose multi-node jobs need the EFA variables from us: the training
# toolkit sets them only inside its own torchrun distribution, and we run torchrun ourselves.
# (The catalog's efa_gbps > 0 rows; a test keeps the two equal. launch.py reads no catalog.)
EFA_INSTANCE_TYPES = ("ml.trn1.32xlarge", "ml.trn1n.32xlarge", "ml.trn2.48xlarge")
_ERROR_LINE = re.compile(r"(Error|Exception|error:|Killed|Traceback)")
# A Python exception line ("ValueError: ...", "torch.OutOfMemoryError: ...", "No module named x").
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b|.*\bNo module named )")
# torchrun's glog-style log lines ("E1129 22:21:34.382000 ...") and its root-cause summary.
_GLOG_LINE = re.compile(r"^[EWIF]\d{4} \d\d:\d\d:\d\d")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")


def _log(message: str) -> None:
    print(f"[launch] {message}", flush=True)


def _now_iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def find_job_file(explicit: str | None) -> Path:
    """`--job` if given, else job.json next to this script or in the code directory."""
    if explicit:
        return Path(explicit)
    for candidate in (_HERE / contract.JOB_FILE, CODE_DIR / contract.JOB_FILE):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no {contract.JOB_FILE} beside {_HERE} or in {CODE_DIR}; pass --job PATH")


def _flag_value(flags: str, name: str) -> str | None:
    """The value of `--name=value` or `--name value` in a compiler flag string."""
    match = re.search(rf"(?:^|\s){re.escape(name)}(?:=|\s+)(\S+)", flags)
    return match.group(1) if match else None


def runtime_environment(job: dict, ctr: contract.Contract, base: dict[str, str]) -> dict[str, str]:
    """The environment every rank sees, before the compile cache directory is added.

    `base` (the launcher's own environment) overlaid with the job's `environment`, and the
    EFA variables for multi-node jobs on EFA instances (setdefault: the request normally carries
    them already, and a user's explicit value wins).
    """
    env = dict(base)
    env.update({k: str(v) for k, v in (job.get("environment") or {}).items()})
    instance_type = (job.get("instance") or {}).get("type") or ctr.instance_type
    if ctr.num_nodes > 1 and instance_type in EFA_INSTANCE_TYPES:
        for key, value in contract.EFA_ENV.items():
            env.setdefault(key, value)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def cache_directory(runtime: str, env: dict[str, str]) -> tuple[Path, bool]:
    """(directory, created_here): the user's cache dir if the job set one, else a fresh one.

    A user-set dir is NEURON_CC_FLAGS' --cache_dir (xla) or TORCHINDUCTOR_CACHE_DIR (native).
    """
    if runtime == "xla":
        user = _flag_value(env.get("NEURON_CC_FLAGS", ""), "--cache_dir")
    else:
        user = env.get("TORCHINDUCTOR_CACHE_DIR")
    if user:
        return Path(user), False
    if env.get(CACHE_DIR_ENV):
        return Path(env[CACHE_DIR_ENV]), False
    return Path(tempfile.mkdtemp(prefix="orchestrator-compile-cache-")), True


def cache_target(runtime: str, job: dict, env: dict[str, str]) -> str:
    """What compiled code runs on, for the cache key: the Neuron family (trn1, trn2) for xla;
    for native, `cuda` on GPU hosts, else `cpu-<machine>` (inductor's CPU code is per ISA)."""
    if runtime == "xla":
        return (job.get("instance") or {}).get("family") or "unknown"
    if int(env.get("SM_NUM_GPUS", "0") or 0) > 0:
        return "cuda"
    return f"cpu-{platform.machine() or 'unknown'}"


def with_cache_dir(runtime: str, env: dict[str, str], cache_dir: Path) -> dict[str, str]:
    """`env` pointing the compiler of `runtime` at `cache_dir` (user settings untouched)."""
    env = dict(env)
    if runtime == "xla":
        flags = env.get("NEURON_CC_FLAGS", "")
        if _flag_value(flags, "--cache_dir") is None:
            env["NEURON_CC_FLAGS"] = f"{flags} --cache_dir={cache_dir}".strip()
    else:
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir))
        env.setdefault("TRITON_CACHE_DIR", str(Path(env["TORCHINDUCTOR_CACHE_DIR"]) / "triton"))
    return env


def with_compile_threads(runtime: str, env: dict[str, str], cpus: int, workers: int) -> dict[str, str]:
    """`env` with inductor's compile pool sized to this rank's share of the host (native).

    Inductor starts, in every rank, a pool of as many compile processes as the host has CPUs
    (each importing torch): W ranks on one host make W such pools. `cpus // workers` per rank
    uses the host once; on small hosts that is faster cold and warm. A user's value wins. Not
    part of the cache key: inductor leaves compile_threads out of its own keys, and the
    artifacts do not depend on it.
    """
    env = dict(env)
    if runtime == "native":
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(1, cpus // max(1, workers))))
    return env


def torchrun_command(job: dict, ctr: contract.Contract, env: dict[str, str], job_file: Path,
                     stats_dir: Path, train_module: str) -> list[str]:
    """The torchrun command line for this host (static rendezvous at the first host)."""
    port = env.get(MASTER_PORT_ENV) or str(contract.MASTER_PORT)
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(ctr.num_nodes),
        "--node_rank", str(ctr.node_rank),
        "--nproc_per_node", str(int(job["workers_per_node"])),
        "--master_addr", ctr.master_addr,
        "--master_port", port,
        "-m", train_module,
        "--job", str(job_file),
        "--stats-dir", str(stats_dir),
    ]


class _Stop:
    """SIGTERM/SIGINT (SageMaker's stop, the local backend's stop): remembered, and passed on
    to torchrun when it runs; the launcher itself goes on to push the cache and report.

    SageMaker kills the container `grace_s` (120) after its SIGTERM: torchrun gets half of it
    to stop its workers (it waits for them up to 30 s), then its whole tree is killed, so the
    last push and the final results.json fit in the other half."""

    def __init__(self, grace_s: float | None = None) -> None:
        self.signum: int | None = None
        self.child: subprocess.Popen | None = None
        if grace_s is None:
            grace_s = float(os.environ.get(STOP_GRACE_ENV) or STOP_GRACE_S)
        self.torchrun_deadline_s = grace_s / 2
        self.deadline: threading.Timer | None = None

    def __enter__(self) -> _Stop:
        signal.signal(signal.SIGTERM, self.handle)
        signal.signal(signal.SIGINT, self.handle)
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    def handle(self, signum: int, _frame=None) -> None:
        self.signum = signum
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)
            if self.deadline is None:
                self.deadline = threading.Timer(self.torchrun_deadline_s, self._kill_late_child)
                self.deadline.daemon = True
                self.deadline.start()

    def _kill_late_child(self) -> None:
        child = self.child
        if child is not None and child.poll() is None:
            _log(f"torchrun still runs {self.torchrun_deadline_s:g} s after the stop signal: killing it and its workers")
            container.kill_tree(child.pid)


def run_torchrun(command: list[str], env: dict[str, str], cwd: Path, stop: _Stop) -> tuple[int, list[str]]:
    """Run torchrun, streaming its output line by line; (exit code, last lines of output)."""
    tail: deque[str] = deque(maxlen=400)
    proc = subprocess.Popen(command, env=env, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1)
    stop.child = proc
    if stop.signum is not None:
        stop.handle(stop.signum)  # the signal came while it started
    assert proc.stdout is not None  # we asked for a pipe
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        tail.append(line.rstrip("\n"))
    return proc.wait(), list(tail)


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


def failure_reason(stats: dict[int, dict], tail: list[str], returncode: int | None,
                   signalled: int | None) -> str:
    """A short reason: the first rank's own error (its stats file), else the last error line
    a worker printed before torchrun's own failure report, with the root-cause rank torchrun
    names; torchrun's report and its log lines are never the reason."""
    if signalled is not None:
        return f"stopped: the launcher received {signal.Signals(signalled).name}"
    errors = [(rank, s["error"]) for rank, s in sorted(stats.items()) if s.get("error")]
    if errors:
        rank, error = errors[0]
        more = f" (and {len(errors) - 1} more ranks)" if len(errors) > 1 else ""
        return f"rank {rank}: {error}{more}"
    report = next((i for i, line in enumerate(tail) if "ChildFailedError" in line), len(tail))
    before = report
    for i in range(report - 1, -1, -1):
        if tail[i].startswith("Traceback (most recent call last)"):
            before = i  # torchrun's own traceback, which ends in ChildFailedError
            break
    root_rank = next((m.group(1) for line in tail[report:] if (m := _ROOT_RANK.match(line))), None)
    candidates = [line.strip() for line in tail[:before] if line.strip() and not _GLOG_LINE.match(line)]
    line = next((c for c in reversed(candidates) if _EXCEPTION_LINE.search(c)), None) or next(
        (c for c in reversed(candidates) if _ERROR_LINE.search(c)), None)
    who = f"rank {root_rank} (torchrun exited with code {returncode})" if root_rank is not None else (
        f"torchrun exited with code {returncode}")
    return f"{who}: {line}" if line else who


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
                  warnings: list[str], now: float | None = None, setup: dict | None = None) -> dict:
    """The `orchestrator.results/v1` document (`entrypoints.results_schema`) for this host.

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
        backend=spec.get("backend"),
        region=spec.get("region"),
        instance=results_schema.Instance(
            type=instance.get("type") or ctr.instance_type,
            count=ctr.num_nodes,
            neuron_cores=instance.get("neuron_cores"),
            logical_cores=instance.get("logical_cores"),
            workers_per_node=workers,
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
        compiler_cache={str(k): int(v) for k, v in (lead.get("compiler_cache") or {}).items()},
        ddp_split_graphs=lead.get("ddp_split_graphs"),
        cache=results_schema.from_values(results_schema.CacheStats, cache),
        container=results_schema.from_values(results_schema.Container, setup or _given_setup()),
        final_loss=lead.get("final_loss"),
        versions=results_schema.from_values(results_schema.Versions, _versions(lead.get("versions"))),
        started_at=_now_iso(started),
        ended_at=_now_iso(ended) if ended is not None else None,
        heartbeat_at=_now_iso(beat),
        duration_s=round(beat - started, 3),
        tags=dict(job.get("tags") or {}),
        warnings=list(warnings),
    )
    return results_schema.as_document(record)


def _given_setup() -> dict:
    """results.json's `container` when launch.py runs as the program of another driver (the
    SageMaker toolkit, a test): the SM_* variables were given to it."""
    return {"entrypoint": False, "sm_environment": "given", "hostname": None, "requirements": "none"}


def _write_atomic(path: Path, data: bytes) -> None:
    # Not durable: the container's disk goes with the instance, and a heartbeat a second old
    # is as good as the one before it.
    atomic.write_bytes(path, data, durable=False)


def publish_results(uri: str, data: bytes) -> None:
    """Write results to the object `uri` (s3:// or file://) through storage, atomically."""
    prefix, _, name = uri.rstrip("/").rpartition("/")
    storage.open_store(prefix).put_bytes(name, data)


def _cache_section(mode: str, uri: str | None) -> dict:
    return {"mode": mode, "uri": uri, "key": None, "hit_entries": 0, "new_entries": 0, "pull_bytes": 0,
            "pull_s": 0.0, "push_bytes": 0, "push_s": 0.0, "pushes": 0, "warnings": []}


class _Report:
    """This host's results.json: written when the launcher starts (status "running"), at every
    heartbeat, and finally by `_finish`; each write atomic, locally and (node rank 0) at the
    job's `results_uri`. A heartbeat that cannot be stored is logged, not fatal."""

    def __init__(self, job: dict, ctr: contract.Contract, started: float, cache: dict, warnings: list[str],
                 stats_dir: Path, setup: dict) -> None:
        self.job, self.ctr, self.started = job, ctr, started
        self.cache, self.warnings, self.stats_dir, self.setup = cache, warnings, stats_dir, setup
        self.publish_failed = False

    def running(self) -> None:
        stats = read_rank_stats(self.stats_dir)
        warnings = self.warnings + [f"compile cache: {w}" for w in self.cache["warnings"]]
        results = build_results(self.job, self.ctr, stats, status="running", reason=None, cache=self.cache,
                                started=self.started, ended=None, warnings=warnings, now=time.time(),
                                setup=self.setup)
        data = (json.dumps(results, indent=2, sort_keys=True) + "\n").encode()
        _write_atomic(self.ctr.output_data_dir / results_schema.RESULTS_FILE, data)
        uri = self.job.get("results_uri")
        if self.ctr.node_rank == 0 and uri:
            try:
                publish_results(uri, data)
            except Exception as exc:  # noqa: BLE001 - the final write decides; say it once
                if not self.publish_failed:
                    _log(f"WARNING could not write the heartbeat to {uri}: {type(exc).__name__}: {exc}")
                self.publish_failed = True


def _warmed(stats_dir: Path, warmup: int) -> bool:
    """Whether this host's first rank has finished its warmup steps (at least one step)."""
    stats = read_rank_stats(stats_dir)
    return bool(stats) and int(stats[min(stats)].get("steps_done") or 0) >= max(1, warmup)


def run(args: argparse.Namespace) -> int:
    """The whole per-host job; returns the exit code (see the module docstring)."""
    with _Stop() as stop:
        return _run(args, stop)


def _run(args: argparse.Namespace, stop: _Stop) -> int:
    started = time.time()
    # As the container's entrypoint, the SM_* variables are ours to set before anything reads them.
    setup = container.adopt_sm_environment(_log) if args.container else None
    ctr = contract.Contract.from_env()
    warnings: list[str] = []
    job_file = find_job_file(args.job)
    job = contract.load_job(job_file)
    spec = job.get("spec") or {}
    training = spec.get("training") or {}
    runtime = training.get("runtime", "xla")
    cache_spec = job.get("compile_cache") or {}
    cache_uri = cache_spec.get("uri")
    mode = cache_spec.get("mode", "off") if cache_uri else "off"
    push_interval = float(cache_spec.get("push_interval_s") or DEFAULT_PUSH_INTERVAL_S)
    beat_s = min(HEARTBEAT_S, push_interval)
    cache = _cache_section(mode, cache_uri)
    train_module = args.train_module or os.environ.get(TRAIN_MODULE_ENV) or TRAIN_MODULE
    _log(f"job {job['job_name']} host {ctr.current_host} ({ctr.node_rank + 1}/{ctr.num_nodes}), "
         f"runtime {runtime}, {job['workers_per_node']} workers per node")
    stats_dir = ctr.output_data_dir / "ranks"
    shutil.rmtree(stats_dir, ignore_errors=True)
    stats_dir.mkdir(parents=True, exist_ok=True)
    record = setup.record() if setup is not None else _given_setup()
    report = _Report(job, ctr, started, cache, warnings, stats_dir, record)
    report.running()  # a record exists from the start, whatever happens next
    launch_error = None
    if setup is not None:
        try:
            container.prepare(setup, ctr, _log)
        except Exception as exc:  # noqa: BLE001 - reported as the job's failure reason
            launch_error = f"container set-up failed: {type(exc).__name__}: {exc}"
        record.update(setup.record())
        warnings.extend(setup.warnings)

    env = runtime_environment(job, ctr, dict(os.environ))
    cache_dir, cache_dir_is_ours = cache_directory(runtime, env)
    key = None
    world_size = ctr.num_nodes * int(job["workers_per_node"])
    if mode == "tarball":
        # The key is computed from the environment the compiler sees, minus what launch adds
        # below (the cache dir path, the compile pool size): they change no compiled artifact.
        try:
            key = compile_cache.key_for(runtime, cache_target(runtime, job, env), world_size, env)
            cache["key"] = key.digest()
        except Exception as exc:  # noqa: BLE001 - without a key the job runs cold, not never
            cache["warnings"].append(f"no cache key, running cold: {type(exc).__name__}: {exc}")
    env = with_cache_dir(runtime, env, cache_dir)
    env = with_compile_threads(runtime, env, ctr.num_cpus, int(job["workers_per_node"]))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CODE_DIR), env.get("PYTHONPATH", "")) if p)
    env[contract.PROGRESS_REPORT_ENV] = f"{beat_s:g}"
    _log(f"compile cache dir {cache_dir} (mode {mode})")

    if key is not None and launch_error is None:
        try:
            pulled = compile_cache.pull(cache_uri, key, cache_dir)
            cache.update(hit_entries=pulled.hit_entries, pull_bytes=pulled.bytes, pull_s=round(pulled.seconds, 3))
            cache["warnings"].extend(pulled.warnings)
        except Exception as exc:  # noqa: BLE001 - a broken cache must never stop training
            cache["warnings"].append(f"cache pull failed, running cold: {type(exc).__name__}: {exc}")
        _log(f"compile cache pulled: {cache['hit_entries']} entries, {cache['pull_bytes']} bytes "
             f"in {cache['pull_s']:.2f}s")
    for warning in cache["warnings"]:
        _log(f"WARNING compile cache: {warning}")

    pusher = heartbeat.CachePusher(cache_uri, key, cache_dir, cache, _log) if key is not None else None
    returncode: int | None = None
    tail: list[str] = []
    if stop.signum is None and launch_error is None:
        if setup is not None:
            env.update(setup.env)
        command = torchrun_command(job, ctr, env, job_file, stats_dir, train_module)
        _log("starting: " + " ".join(command[1:]))
        beats = heartbeat.Heartbeat(warmed=lambda: _warmed(stats_dir, int(training.get("warmup_steps") or 0)),
                                    pusher=pusher, on_beat=report.running, push_interval_s=push_interval,
                                    beat_s=beat_s, log=_log)
        # As PID 1 (or a subreaper), orphaned workers' children are ours to reap.
        reaper = container.Reaper(lambda: {stop.child.pid} if stop.child is not None else set()) if setup else None
        beats.start()
        if reaper is not None:
            reaper.start()
        try:
            returncode, tail = run_torchrun(command, env, CODE_DIR, stop)
        except Exception as exc:  # noqa: BLE001 - reported as the job's failure reason
            launch_error = f"could not run torchrun: {type(exc).__name__}: {exc}"
        finally:
            beats.stop()
            if reaper is not None:
                reaper.stop()
        _log(f"torchrun exited with code {returncode}")

    if pusher is not None:
        try:
            pusher.push("at the end")
        except Exception as exc:  # noqa: BLE001 - a failed push loses the cache, not the job
            cache["warnings"].append(f"cache push failed: {type(exc).__name__}: {exc}")
            _log(f"WARNING compile cache: {cache['warnings'][-1]}")
        _log(f"compile cache: {cache['new_entries']} new entries pushed in all ({cache['pushes']} pushes, "
             f"{cache['push_bytes']} bytes, {cache['push_s']:.2f}s)")
    if cache_dir_is_ours:
        shutil.rmtree(cache_dir, ignore_errors=True)

    stats = read_rank_stats(stats_dir)
    ok = launch_error is None and returncode == 0 and stop.signum is None
    reason = None
    if not ok:
        reason = launch_error or failure_reason(stats, tail, returncode, stop.signum)
    elif not stats:
        warnings.append("no rank wrote its stats; step figures are missing")
    warnings.extend(f"compile cache: {w}" for w in cache["warnings"])
    # Signalled (a stop, or SageMaker's MaxRuntime) without another failure first: "stopped".
    stopped = stop.signum is not None and launch_error is None
    return _finish(job, ctr, stats, ok, reason, cache, started, warnings, stopped=stopped, setup=record)


def _finish(job: dict, ctr: contract.Contract, stats: dict[int, dict], ok: bool, reason: str | None,
            cache: dict, started: float, warnings: list[str], stopped: bool = False, setup: dict | None = None) -> int:
    """Write results.json (both places) and, on failure, the failure file; the exit code.

    The document's status is "completed", "stopped" (the launcher was signalled) or "failed".
    The local copy (it travels in output.tar.gz) always ends with the job's final status: when
    publishing to `results_uri` fails, the job fails, and the local copy is rewritten to say so.
    """
    ended = time.time()

    def document(ok: bool, reason: str | None) -> bytes:
        status = "completed" if ok else "stopped" if stopped else "failed"
        results = build_results(job, ctr, stats, status=status, reason=reason,
                                cache=cache, started=started, ended=ended, warnings=warnings, setup=setup)
        return (json.dumps(results, indent=2, sort_keys=True) + "\n").encode()

    data = document(ok, reason)
    local = ctr.output_data_dir / results_schema.RESULTS_FILE
    _write_atomic(local, data)
    results_uri = job.get("results_uri")
    if ctr.node_rank == 0 and results_uri:
        try:
            publish_results(results_uri, data)
            _log(f"results written to {results_uri}")
        except Exception as exc:  # noqa: BLE001 - the local copy still exists; the job says why
            message = f"could not write results to {results_uri}: {type(exc).__name__}: {exc}"
            _log(f"ERROR {message}")
            if ok:
                ok, reason = False, message
                _write_atomic(local, document(ok, reason))
    if not ok:
        write_failure(ctr, f"{ctr.current_host}: {reason}")
        _log(f"FAILED: {reason}")
        return 1
    _log("completed")
    return 0


def write_failure(ctr: contract.Contract, reason: str) -> None:
    """The container contract's failure file: SageMaker shows it as FailureReason."""
    text = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."
    _write_atomic(ctr.failure_file, text.encode("utf-8", "replace"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Per-host training driver (the container's entrypoint).")
    parser.add_argument("--job", help=f"the resolved job file (default: {contract.JOB_FILE} beside this script)")
    parser.add_argument("--train-module", help=f"per-rank module (default: ${TRAIN_MODULE_ENV} or {TRAIN_MODULE})")
    parser.add_argument("--container", action="store_true",
                        help="run as the container's entrypoint: set up what the training toolkit would "
                             "(entrypoints.container)")
    args, _unknown = parser.parse_known_args(argv)
    try:
        return run(args)
    except Exception as exc:  # noqa: BLE001 - the contract: write the reason, exit non-zero
        traceback.print_exc()
        reason = f"launcher error: {type(exc).__name__}: {exc}"
        try:
            write_failure(contract.Contract.from_env(), reason)
        except Exception:  # noqa: BLE001 - nothing more can be reported
            pass
        print(f"[launch] FAILED: {reason}", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
