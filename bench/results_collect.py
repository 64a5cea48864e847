"""Benchmark: collect 500 jobs' results sequentially and in parallel, in one run.

Starts a moto server in a separate process on 127.0.0.1 (its own interpreter, so the server's
CPU does not share our GIL), seeds 500 `results.json` objects in S3 and 500 SageMaker training
jobs, then times `orchestrator.results.collect` over the same prefix with `workers=1` and with
`--workers` threads. Each job costs one GetObject and one DescribeTrainingJob.

The top-level figures are plain loopback. On loopback both processes are CPU-bound (botocore
in ours, moto in the server), so the speedup cannot exceed the number of cores the two can
use at once, and by the busier of the two processes (one Python process runs on one core at
a time); the output's `speedup_ceiling` computes that bound from both processes' CPU seconds
in the same run. `with_latency` repeats the comparison with a
modelled round trip per request (`--latency-ms`, default 20: a botocore `before-send` hook
that sleeps on the client side), which is what a laptop talking to S3 and SageMaker sees and
what the thread pool is for.

Prints one JSON object: {"jobs", "sequential_s", "parallel_s", "speedup", "goal", "workers",
"with_latency": {...}, ...}.

    PYTHONPATH=. .venv/bin/python bench/results_collect.py [--jobs 500] [--workers 16] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from loopback_aws import moto_process  # noqa: E402

BUCKET = "bench-results"
TYPES = [("ml.trn1.2xlarge", 1, 2), ("ml.trn1.32xlarge", 1, 32), ("ml.trn1.32xlarge", 2, 32),
         ("ml.trn1n.32xlarge", 4, 32)]


def results_doc(i: int) -> dict:
    type_, count, cores = TYPES[i % len(TYPES)]
    job = f"bench-{i:04d}"
    sps = 100.0 + i
    return {
        "schema": "orchestrator.results/v1", "job_name": job, "spec_hash": "0" * 64, "status": "completed",
        "failure_reason": None, "backend": "sagemaker", "region": "us-east-1",
        "instance": {"type": type_, "count": count, "neuron_cores": cores, "logical_cores": cores,
                     "workers_per_node": cores},
        "world_size": cores * count, "runtime": "xla", "compile": False, "precision": "bf16", "batch_size": 32,
        "global_batch": 32 * cores * count, "steps": 500, "warmup_steps": 10, "steps_done": 500,
        "model": {"arch": "vit_base_patch16_224", "image_size": 224, "patch_embed": "linear"},
        "step_time_s": {"p50": 0.1, "p90": 0.12, "mean": 0.105, "n": 490}, "samples_per_s": sps,
        "time_to_first_step_s": 30.0, "compile_s": 28.0,
        "cache": {"mode": "tarball", "uri": f"s3://{BUCKET}/cache", "key": "k", "hit_entries": i % 4,
                  "new_entries": 3, "pull_bytes": 0, "pull_s": 0.0, "push_bytes": 1, "push_s": 0.1, "warnings": []},
        "final_loss": 6.9, "versions": {"python": "3.12.3", "torch": "2.9.0", "torch_xla": "2.9.0",
                                        "timm": "1.0.0", "neuronx_cc": None},
        "started_at": "2026-11-29T22:00:00Z", "ended_at": "2026-11-29T22:05:00Z", "duration_s": 300.0,
        "tags": {"orchestrator:sweep": "bench", "orchestrator:trial": f"{i:04d}"}, "warnings": [],
    }


def seed(s3, sm, jobs: int) -> None:
    s3.create_bucket(Bucket=BUCKET)

    def one(i: int) -> None:
        doc = results_doc(i)
        s3.put_object(Bucket=BUCKET, Key=f"jobs/results/{doc['job_name']}/results.json",
                      Body=json.dumps(doc).encode())
        type_, count, _ = TYPES[i % len(TYPES)]
        sm.create_training_job(
            TrainingJobName=doc["job_name"], RoleArn="arn:aws:iam::123456789012:role/bench",
            AlgorithmSpecification={"TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/x:1",
                                    "TrainingInputMode": "File"},
            OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/jobs"},
            ResourceConfig={"InstanceType": type_, "InstanceCount": count, "VolumeSizeInGB": 100},
            StoppingCondition={"MaxRuntimeInSeconds": 3600})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(jobs)))


def clients(workers: int, latency_s: float):
    import boto3

    from orchestrator import results

    session = boto3.session.Session()
    s3 = session.client("s3", config=results.client_config(workers))
    sm = session.client("sagemaker", config=results.client_config(workers))
    if latency_s > 0:
        def delay(**kwargs) -> None:
            time.sleep(latency_s)

        for client in (s3, sm):
            client.meta.events.register("before-send", delay)
    return s3, sm


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` (all its threads), through psutil; None when
    it cannot be read."""
    import psutil

    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return times.user + times.system


class Timing(NamedTuple):
    wall_s: float
    client_cpu_s: float       # this process: botocore, our collection code, the thread pool
    server_cpu_s: float | None  # the moto server process
    rows: list


def timed(prefix: str, workers: int, latency_s: float, server_pid: int) -> Timing:
    from orchestrator import results

    s3, sm = clients(workers, latency_s)
    server_before, client_before = process_cpu_s(server_pid), time.process_time()
    start = time.perf_counter()
    from orchestrator.backends.sagemaker import SageMakerBackend

    backend = SageMakerBackend(sm, s3, None)  # describes the jobs (no logs read)
    collection = results.collect(prefix, workers=workers, s3=s3, backend_for=lambda name, region: backend)
    wall = time.perf_counter() - start
    client_cpu, server_after = time.process_time() - client_before, process_cpu_s(server_pid)
    server_cpu = server_after - server_before if server_before is not None and server_after is not None else None
    return Timing(wall, client_cpu, server_cpu, collection.rows)


def ceiling(sequential: Timing, parallel: Timing, cpus: int) -> dict | None:
    """The largest speedup this machine allows for the parallel run's CPU work.

    On loopback nothing waits on a network: each request is CPU in our process and in the
    server's. The parallel run cannot take less wall time than its CPU seconds spread over
    every core, nor less than the busier process's CPU seconds (one Python process runs its
    bytecode on one core at a time). Dividing the sequential wall time by that floor gives
    the best speedup any number of threads could reach here.
    """
    if sequential.server_cpu_s is None or parallel.server_cpu_s is None:
        return None
    floor = max((parallel.client_cpu_s + parallel.server_cpu_s) / cpus,
                parallel.client_cpu_s, parallel.server_cpu_s)
    busy = (sequential.client_cpu_s + sequential.server_cpu_s) / sequential.wall_s
    return {"speedup_ceiling": round(sequential.wall_s / floor, 2),
            # Share of the sequential run's wall time that one process or the other was on a
            # CPU: near 1 means it never waited on anything but computation.
            "sequential_busy_share": round(busy, 2),
            "cpu_s": {"sequential": {"client": round(sequential.client_cpu_s, 2),
                                     "server": round(sequential.server_cpu_s, 2)},
                      "parallel": {"client": round(parallel.client_cpu_s, 2),
                                   "server": round(parallel.server_cpu_s, 2)}}}


def compare(prefix: str, jobs: int, workers: int, latency_s: float, rounds: int, server_pid: int) -> dict:
    """Best-of-`rounds` sequential and parallel times (alternating), checking both found the
    same rows and lost none."""
    sequential, parallel = [], []
    for _ in range(rounds):
        seq = timed(prefix, 1, latency_s, server_pid)
        sequential.append(seq)
        par = timed(prefix, workers, latency_s, server_pid)
        parallel.append(par)
        if seq.rows != par.rows or len(par.rows) != jobs or any(r.status != "completed" for r in par.rows):
            raise SystemExit("sequential and parallel collections differ or lost jobs")
    best_seq = min(sequential, key=lambda t: t.wall_s)
    best_par = min(parallel, key=lambda t: t.wall_s)
    out = {"sequential_s": round(best_seq.wall_s, 3), "parallel_s": round(best_par.wall_s, 3),
           "speedup": round(best_seq.wall_s / best_par.wall_s, 2)}
    if latency_s == 0:
        out.update(ceiling(best_seq, best_par, os.cpu_count() or 1) or {})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=20.0,
                        help="Also measure with this modelled round trip per request (0: skip).")
    parser.add_argument("--rounds", type=int, default=2, help="Alternate sequential/parallel this many times on "
                        "loopback; the best time of each is reported.")
    args = parser.parse_args()

    with moto_process("bench-results-home-") as proc:
        import boto3

        seed(boto3.client("s3"), boto3.client("sagemaker"), args.jobs)
        prefix = f"s3://{BUCKET}/jobs"
        timed(prefix, args.workers, 0.0, proc.pid)  # warm both sides (imports, moto's first requests)
        loopback = compare(prefix, args.jobs, args.workers, 0.0, args.rounds, proc.pid)
        out = {"jobs": args.jobs, **loopback, "goal": 4, "goal_met": loopback["speedup"] >= 4,
               "workers": args.workers, "requests_per_job": 2, "cpus": os.cpu_count(),
               "server": "moto.server subprocess on 127.0.0.1"}
        if args.latency_ms > 0:
            modelled = compare(prefix, args.jobs, args.workers, args.latency_ms / 1000, 1, proc.pid)
            out["with_latency"] = {"latency_ms": args.latency_ms, **modelled, "goal_met": modelled["speedup"] >= 4}
        print(json.dumps(out))


if __name__ == "__main__":
    main()
