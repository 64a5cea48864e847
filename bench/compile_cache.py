"""Benchmark: time to first step with an empty compile cache vs a pulled one.

Runs the smoke config (configs/local-smoke.yaml: native runtime, torch.compile, 2 workers on
CPU) twice through the local backend, in a fresh ORCHESTRATOR_HOME whose store starts empty:

1. cold: the cache key has no manifest; every graph compiles; launch.py pushes the inductor
   cache to the local store afterwards;
2. warm: the same spec under another job name (suffix), so it is a new job with its own fresh
   cache directory; launch.py pulls the first job's entries before torchrun starts.

Prints one JSON object from the two jobs' results.json: time to first step of rank 0 in each
run (from the rank's process start, so the pull, which finishes before any rank starts, is
not in it; `warm_pull_s` shows it, and `ratio_including_pull` adds it), their ratio and the
goal (warm/cold at most 0.2), and the cache figures.

Usage: python bench/compile_cache.py [--spec configs/local-smoke.yaml] [--home DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GOAL = 0.2


def run_job(backend, prepared, timeout_s: float) -> dict:
    """Submit, wait until terminal, and return the job's results.json from the store."""
    from entrypoints.shared import storage

    submitted = backend.submit(prepared)
    if not submitted.created:
        raise SystemExit(f"{prepared.job_name} existed already in this ORCHESTRATOR_HOME; use a fresh --home")
    deadline = time.monotonic() + timeout_s
    while True:
        status = backend.status(prepared.job_name)
        if status.terminal:
            break
        if time.monotonic() > deadline:
            backend.stop(prepared.job_name)
            raise SystemExit(f"{prepared.job_name} did not finish within {timeout_s:.0f} s")
        time.sleep(1.0)
    if status.status != "completed":
        tail = "\n".join(list(backend.logs(prepared.job_name))[-40:])
        raise SystemExit(f"{prepared.job_name} {status.status}: {status.failure_reason}\n{tail}")
    prefix, _, key = prepared.job["results_uri"].rpartition("/")
    data = storage.open_store(prefix).get_bytes(key)
    if data is None:
        raise SystemExit(f"{prepared.job_name}: no results at {prepared.job['results_uri']}")
    return json.loads(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(ROOT / "configs" / "local-smoke.yaml"))
    parser.add_argument("--home", help="ORCHESTRATOR_HOME to use (must be empty; default: a new temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary ORCHESTRATOR_HOME")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per run")
    args = parser.parse_args(argv)

    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="bench-compile-cache-"))
    home.mkdir(parents=True, exist_ok=True)
    if any(home.iterdir()):
        raise SystemExit(f"{home} is not empty: the cold run needs an empty store")
    os.environ["ORCHESTRATOR_HOME"] = str(home)
    # The launcher picks its own fresh cache dir per job; none of ours may leak in.
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "ORCHESTRATOR_CACHE_DIR", "ORCHESTRATOR_TRAIN_MODULE"):
        os.environ.pop(name, None)

    from orchestrator import names, request, spec
    from orchestrator.backends.local import LocalBackend

    loaded = spec.load(args.spec)
    if loaded.backend != "local" or loaded.compile_cache.mode != "tarball":
        raise SystemExit(f"{args.spec}: the benchmark needs backend: local and compile_cache.mode: tarball")
    backend = LocalBackend()
    try:
        cold = run_job(backend, request.prepare(loaded, job_name=names.job_name(loaded, "cold")), args.timeout)
        warm = run_job(backend, request.prepare(loaded, job_name=names.job_name(loaded, "warm")), args.timeout)
    finally:
        if not args.keep and not args.home:
            shutil.rmtree(home, ignore_errors=True)

    cold_ttfs, warm_ttfs = cold["time_to_first_step_s"], warm["time_to_first_step_s"]
    ratio = warm_ttfs / cold_ttfs
    out = {
        "spec": str(Path(args.spec)),
        "cold_job": cold["job_name"],
        "warm_job": warm["job_name"],
        "cold_time_to_first_step_s": round(cold_ttfs, 2),
        "warm_time_to_first_step_s": round(warm_ttfs, 2),
        "ratio": round(ratio, 3),
        "goal": GOAL,
        "meets_goal": ratio <= GOAL,
        "warm_pull_s": warm["cache"]["pull_s"],
        "ratio_including_pull": round((warm_ttfs + warm["cache"]["pull_s"]) / cold_ttfs, 3),
        "cache_hit_entries": warm["cache"]["hit_entries"],
        "cache_pull_bytes": warm["cache"]["pull_bytes"],
        "cold_new_entries": cold["cache"]["new_entries"],
        "cold_push_bytes": cold["cache"]["push_bytes"],
        "cold_push_s": cold["cache"]["push_s"],
        "warm_new_entries": warm["cache"]["new_entries"],
        "cold_compile_s": cold["compile_s"],
        "warm_compile_s": warm["compile_s"],
        "cold_duration_s": cold["duration_s"],
        "warm_duration_s": warm["duration_s"],
        "cold_step_time_p50_s": (cold["step_time_s"] or {}).get("p50"),
        "warm_step_time_p50_s": (warm["step_time_s"] or {}).get("p50"),
        # PyTorch's own cache lookups in rank 0: a warm run should show hits and no misses.
        "cold_compiler_cache": cold.get("compiler_cache"),
        "warm_compiler_cache": warm.get("compiler_cache"),
        "ddp_split_graphs": warm.get("ddp_split_graphs"),
        "world_size": cold["world_size"],
        "cache_warnings": cold["cache"]["warnings"] + warm["cache"]["warnings"],
        "versions": cold["versions"],
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
