"""The per-host driver of a training job: the container's first process.

Runs as `python3 launch.py --container` from the unpacked source archive (a copy of this file
at its root, `entrypoints/` beside it) and as `python -m entrypoints.launcher.launch`; without
`--container` it expects the SM_* variables from whoever started it. Contract: read the job
file (`--job`, else `job.json` beside it or in the code directory) and write results.json
"running"; pull the compile cache; run torchrun over `TRAIN_MODULE` (or
`ORCHESTRATOR_TRAIN_MODULE`), pushing new cache entries and rewriting results.json meanwhile;
then, whatever happened, push, write the final results.json (to `results_uri` on node rank 0)
and on failure the failure file, and exit non-zero. SIGTERM/SIGINT stop torchrun within half
the grace period and end "stopped"; a bad cache archive is a warning, never a failure. Stdlib
only (boto3 lazily); never imports `orchestrator`. Step by step: docs/ARCHITECTURE.md, "One
host: inside the container".
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

_HERE = Path(__file__).resolve().parent
# The code directory is the one holding the `entrypoints` package: the archive root when this
# file is the archive's launch.py, the package's parent when run as `-m entrypoints.launcher.launch`.
CODE_DIR = next((d for d in (_HERE, _HERE.parents[1]) if (d / "entrypoints" / "__init__.py").is_file()),
                _HERE)
if str(CODE_DIR) not in sys.path[:1]:
    sys.path.insert(0, str(CODE_DIR))

from entrypoints.launcher import (  # noqa: E402
    container,
    environment,
    failure,
    heartbeat,
    mlflow_run,
    persistent_cache,
    precompile,
    report,
    selection,
    utilization,
)
from entrypoints.launcher.torchrun import StopSignals, run_torchrun, torchrun_command  # noqa: E402
from entrypoints.shared import compile_cache, contract, nospace  # noqa: E402

TRAIN_MODULE = "entrypoints.trainer.train"
# Tests (and benchmarks of the launcher alone) name another per-rank module here.
TRAIN_MODULE_ENV = "ORCHESTRATOR_TRAIN_MODULE"
# While training runs, results.json is rewritten this often (or every push interval, if shorter).
HEARTBEAT_S = 30.0
DEFAULT_PUSH_INTERVAL_S = 60


def _log(message: str) -> None:
    print(f"[launch] {message}", flush=True)


def find_job_file(explicit: str | None) -> Path:
    """`--job` if given, else job.json next to this script or in the code directory."""
    if explicit:
        return Path(explicit)
    for candidate in (_HERE / contract.JOB_FILE, CODE_DIR / contract.JOB_FILE):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no {contract.JOB_FILE} beside {_HERE} or in {CODE_DIR}; pass --job PATH")


def run(args: argparse.Namespace) -> int:
    """The whole per-host job; returns the exit code (see the module docstring)."""
    with StopSignals(_log) as stop:
        return _run(args, stop)


def _run(args: argparse.Namespace, stop: StopSignals) -> int:
    started = time.time()
    # As the container's entrypoint, the SM_* variables are ours to set before anything reads them.
    setup = container.adopt_sm_environment(_log) if args.container else None
    ctr = contract.Contract.from_env()
    # A warm pool's persistent cache: pip's cache lives there (the user's PIP_CACHE_DIR wins),
    # before the requirements are installed; the compile cache below.
    persistent = persistent_cache.persistent_root(os.environ, Path(os.environ.get(contract.BASE_DIR_ENV) or contract.OPT_ML))
    if persistent is not None:
        os.environ.setdefault("PIP_CACHE_DIR", str(persistent_cache.pip_cache_dir(persistent)))
    warnings: list[str] = []
    job_file = find_job_file(args.job)
    # A scheduled cloud run's archive was made for the schedule's placeholder tick: take the
    # run's own name (the request's hyperparameter) so results.json lands under it.
    job = contract.for_run(contract.load_job(job_file), container.job_name_hyperparameter() if args.container else None)
    selection_error = None
    try:
        # With instance preferences: the job as the type SageMaker selected runs it.
        job = selection.adapt(job, ctr.instance_type, _log)
    except ValueError as exc:
        selection_error = str(exc)
    spec = job.get("spec") or {}
    training = spec.get("training") or {}
    runtime = training.get("runtime", "xla")
    cache_spec = job.get("compile_cache") or {}
    cache_uri = cache_spec.get("uri")
    mode = cache_spec.get("mode", "off") if cache_uri else "off"
    push_interval = float(cache_spec.get("push_interval_s") or DEFAULT_PUSH_INTERVAL_S)
    beat_s = min(HEARTBEAT_S, push_interval)
    cache = report.cache_section(mode, cache_uri)
    train_module = args.train_module or os.environ.get(TRAIN_MODULE_ENV) or TRAIN_MODULE
    _log(f"job {job['job_name']} host {ctr.current_host} ({ctr.node_rank + 1}/{ctr.num_nodes}), "
         f"runtime {runtime}, {job['workers_per_node']} workers per node")
    stats_dir = ctr.output_data_dir / "ranks"
    shutil.rmtree(stats_dir, ignore_errors=True)
    stats_dir.mkdir(parents=True, exist_ok=True)
    record = setup.record() if setup is not None else report.given_setup()
    results = report.Report(job, ctr, started, cache, warnings, stats_dir, record, _log)
    results.running()  # a record exists from the start, whatever happens next
    # The job's MLflow run: node rank 0's launcher alone, from rank 0's metric lines (the ranks
    # never talk to the server); a background buffer that costs training nothing.
    run_log = (mlflow_run.RunLogger(job, _log, instance_type=ctr.instance_type).start()
               if job.get("mlflow") and ctr.node_rank == 0 else None)
    if run_log is not None:
        results.mlflow = run_log.link
    launch_error = selection_error
    if setup is not None:
        try:
            container.prepare(setup, ctr, _log)
        except Exception as exc:  # noqa: BLE001 - reported as the job's failure reason
            launch_error = f"container set-up failed: {nospace.describe(exc)}"
        record.update(setup.record())
        warnings.extend(setup.warnings)

    env = environment.runtime_environment(job, ctr, dict(os.environ))
    cache_dir, cache_dir_is_ours = environment.cache_directory(runtime, env)
    key = None
    world_size = ctr.num_nodes * int(job["workers_per_node"])
    if mode == "tarball":
        # The key is computed from the environment the compiler sees, minus what launch adds
        # below (the cache dir path, the compile pool size): they change no compiled artifact.
        try:
            key = compile_cache.key_for(runtime, environment.cache_target(runtime, job, env), world_size, env)
            cache["key"] = key.digest()
        except Exception as exc:  # noqa: BLE001 - without a key the job runs cold, not never
            cache["warnings"].append(f"no cache key, running cold: {type(exc).__name__}: {exc}")
    if persistent is not None and (cache_dir_is_ours or persistent_cache.replaceable_cache_dir(cache_dir)):
        if cache_dir_is_ours:
            shutil.rmtree(cache_dir, ignore_errors=True)
        cache_dir, cache_dir_is_ours = persistent_cache.compile_cache_dir(persistent, cache["key"], runtime), False
        env = environment.without_cache_dir(runtime, env)
        cache["persistent_dir"] = str(cache_dir)
        if key is not None:
            cache["local_entries"] = len(compile_cache.complete_entries(cache_dir, key.kind))
        _log(f"warm pool: persistent cache {persistent}: compile cache with {cache['local_entries']} entries "
             f"on disk, pip cache {os.environ.get('PIP_CACHE_DIR')}")
    env = environment.with_cache_dir(runtime, env, cache_dir)
    env = environment.with_compile_threads(runtime, env, ctr.num_cpus, int(job["workers_per_node"]))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CODE_DIR), env.get("PYTHONPATH", "")) if p)
    env[contract.PROGRESS_REPORT_ENV] = f"{beat_s:g}"
    _log(f"compile cache dir {cache_dir} (mode {mode})")

    if key is not None and launch_error is None:
        _pull(cache_uri, key, cache_dir, cache)
    for warning in cache["warnings"]:
        _log(f"WARNING compile cache: {warning}")

    pusher = heartbeat.CachePusher(cache_uri, key, cache_dir, cache, _log) if key is not None else None
    returncode: int | None = None
    tail: list[str] = []
    monitor = utilization.Monitor()
    results.utilization = monitor.summary

    def beat() -> None:
        results.running()
        _metric_line(monitor)

    if stop.signum is None and launch_error is None:
        if setup is not None:
            env.update(setup.env)
        command = torchrun_command(job, ctr, env, job_file, stats_dir, train_module)
        beats = heartbeat.Heartbeat(warmed=lambda: report.warmed(stats_dir, int(training.get("warmup_steps") or 0)),
                                    pusher=pusher, on_beat=beat, push_interval_s=push_interval,
                                    beat_s=beat_s, log=_log)
        # As PID 1 (or a subreaper), orphaned workers' children are ours to reap.
        reaper = container.Reaper(lambda: {stop.child.pid} if stop.child is not None else set()) if setup else None
        beats.start()
        if reaper is not None:
            reaper.start()
        try:
            results.precompile = precompile.run(job, ctr, env, job_file, ctr.output_data_dir / "precompile-ranks",
                                                train_module, CODE_DIR, stop, _log)
            if results.precompile["ran"] and pusher is not None:
                _push(pusher, cache, "after the precompile pass")
            if stop.signum is None:
                # After the pass: its graph extraction (idle cores, busy vCPUs) is not training.
                monitor.start(env)
                _log(f"utilization: {monitor.reason or 'neuron-monitor runs beside training'}")
                _log("starting: " + " ".join(command[1:]))
                returncode, tail = run_torchrun(command, env, CODE_DIR, stop,
                                                on_line=run_log.line if run_log is not None else None)
        except Exception as exc:  # noqa: BLE001 - reported as the job's failure reason
            launch_error = f"could not run torchrun: {nospace.describe(exc)}"
        finally:
            beats.stop()
            if reaper is not None:
                reaper.stop()
        _log(f"torchrun exited with code {returncode}")
    monitor.stop()
    _metric_line(monitor)

    if pusher is not None:
        _push_at_the_end(pusher, cache)
    if cache_dir_is_ours:
        shutil.rmtree(cache_dir, ignore_errors=True)

    # A Batch job's TensorBoard files (SageMaker uploads its own while the job runs).
    uploaded, board_warning = report.upload_tensorboard(job, ctr)
    if uploaded:
        _log(f"TensorBoard: {uploaded} file(s) uploaded to {job['tensorboard_uri']}/")
    if board_warning:
        warnings.append(board_warning)
    stats = report.read_rank_stats(stats_dir)
    ok = launch_error is None and returncode == 0 and stop.signum is None
    reason = None
    if not ok:
        reason = launch_error or failure.failure_reason(stats, tail, returncode, stop.signum)
    elif not stats:
        warnings.append("no rank wrote its stats; step figures are missing")
    warnings.extend(f"compile cache: {w}" for w in cache["warnings"])
    # Signalled (a stop, or SageMaker's MaxRuntime) without another failure first: "stopped".
    stopped = stop.signum is not None and launch_error is None
    ok, reason = results.final(stats, ok, reason, stopped)
    if run_log is not None:
        before = run_log.link()
        _end_run(run_log, results.local, ok, stopped)
        if run_log.link() != before:
            results.amend()  # the run's id (or why there is none) in the final record too
    if not ok:
        failure.write_failure(ctr, f"{ctr.current_host}: {reason}")
        _log(f"FAILED: {reason}")
        return 1
    _log("completed")
    return 0


def _end_run(run_log: mlflow_run.RunLogger, local: Path, ok: bool, stopped: bool) -> None:
    """The MLflow run's end: results.json's figures and the file itself, then its status.
    A warning it gives is logged (results.json is already final: it is the record)."""
    import json

    try:
        run_log.metrics(mlflow_run.final_metrics(json.loads(local.read_text()), run_log.section))
        run_log.artifact(local)
    except (OSError, ValueError) as exc:
        _log(f"WARNING MLflow: results.json not read for the run: {exc}")
    # A stopped job is inside SageMaker's 120 s before SIGKILL: the run gets a short wait only.
    run_log.finish("completed" if ok else "stopped" if stopped else "failed",
                   mlflow_run.STOPPED_WAIT_S if stopped else mlflow_run.FINISH_WAIT_S)


def _metric_line(monitor: utilization.Monitor) -> None:
    """The utilization means so far as a metric line, when neuron-monitor reported any."""
    line = monitor.metric_line()
    if line is not None:
        contract.write_line(line)


def _pull(cache_uri: str, key: compile_cache.CacheKey, cache_dir: Path, cache: dict) -> None:
    """Step 3: the pull, its figures and warnings into `cache` (never raises)."""
    try:
        pulled = compile_cache.pull(cache_uri, key, cache_dir)
        cache.update(hit_entries=pulled.hit_entries, pull_bytes=pulled.bytes, pull_s=round(pulled.seconds, 3))
        cache["warnings"].extend(pulled.warnings)
    except Exception as exc:  # noqa: BLE001 - a broken cache must never stop training
        cache["warnings"].append(f"cache pull failed, running cold: {type(exc).__name__}: {exc}")
    _log(f"compile cache pulled: {cache['hit_entries']} entries, {cache['pull_bytes']} bytes "
         f"in {cache['pull_s']:.2f}s")


def _push_at_the_end(pusher: heartbeat.CachePusher, cache: dict) -> None:
    """Step 6's push of what is still new, whatever happened (never raises)."""
    _push(pusher, cache, "at the end")
    _log(f"compile cache: {cache['new_entries']} new entries pushed in all ({cache['pushes']} pushes, "
         f"{cache['push_bytes']} bytes, {cache['push_s']:.2f}s)")


def _push(pusher: heartbeat.CachePusher, cache: dict, why: str) -> None:
    """Push what is new now (never raises: a failed push loses the cache, not the job)."""
    try:
        pusher.push(why)
    except Exception as exc:  # noqa: BLE001 - a failed push loses the cache, not the job
        cache["warnings"].append(f"cache push failed: {type(exc).__name__}: {exc}")
        _log(f"WARNING compile cache: {cache['warnings'][-1]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Per-host training driver (the container's entrypoint).")
    parser.add_argument("--job", help=f"the resolved job file (default: {contract.JOB_FILE} beside this script)")
    parser.add_argument("--train-module", help=f"per-rank module (default: ${TRAIN_MODULE_ENV} or {TRAIN_MODULE})")
    parser.add_argument("--container", action="store_true",
                        help="run as the container's entrypoint: set up what the training toolkit would "
                             "(entrypoints.launcher.container)")
    args, _unknown = parser.parse_known_args(argv)
    try:
        return run(args)
    except Exception as exc:  # noqa: BLE001 - the contract: write the reason, exit non-zero
        traceback.print_exc()
        reason = f"launcher error: {nospace.describe(exc)}"
        try:
            failure.write_failure(contract.Contract.from_env(), reason)
        except Exception:  # noqa: BLE001 - nothing more can be reported
            pass
        print(f"[launch] FAILED: {reason}", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
