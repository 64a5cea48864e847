"""Benchmark: `results --sweep` on a sweep of 1,000 SageMaker jobs, describing each job
(DescribeTrainingJob) against reading the sweep's ended jobs in bulk (Search, 100 a call), in
one run.

Starts a moto server in its own process on 127.0.0.1 (so its CPU is not ours), seeds
`--trials` completed SageMaker training jobs of one sweep and their results.json objects,
then runs `orchestrator.results.collect(prefix, sweep=...)` both ways, alternating, `--rounds`
times each: "each" with the SageMaker backend's bulk read turned off (`describe_all` returns
None: every job described on its own, as before issue 35), "bulk" as shipped. For each way:
wall seconds, this process's CPU seconds (botocore, our collection, the thread pool: the
server is elsewhere), the server's CPU seconds, and the calls sent by operation (counted on
the clients), per trial too. `--latency-ms` sends each call that much later (a remote
endpoint's round trip; the calls still wait on moto besides). Checks both ways give the same rows and lose no job.

`clients` compares, in the same run, what `collect` builds before its first read (the store's
S3 client and the SageMaker and Batch backends' clients) with a boto3 Session each, as before
issue 35, and with one Session per region (`collect._Sessions`, as shipped): a session loads
each service's model once. Best of `--rounds` x 3 each, seconds of this process's CPU.

Prints one JSON object.

    PYTHONPATH=. .venv/bin/python bench/results_bulk.py [--trials 1000] [--workers 16] [--rounds 2] [--latency-ms 0]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from loopback_aws import moto_process  # noqa: E402
from results_collect import BUCKET, process_cpu_s, seed  # noqa: E402

SWEEP = "bench"  # results_collect's jobs: bench-0000..., tagged orchestrator:sweep "bench"


def counted(client, calls: Counter, latency_s: float = 0.0):
    """`client`, each request it sends counted in `calls` by operation, and sent `latency_s`
    late (botocore's before-send event, on the calling thread): a remote endpoint's round trip,
    which moto on loopback does not have."""
    def count(model, **_):
        calls[model.name] += 1

    def wait(**_):
        time.sleep(latency_s)

    client.meta.events.register("before-parameter-build.*.*", count)
    if latency_s:
        client.meta.events.register("before-send.*.*", wait)
    return client


def timed(prefix: str, workers: int, bulk: bool, server_pid: int, latency_s: float = 0.0) -> dict:
    import boto3

    from orchestrator import results
    from orchestrator.backends import registry
    from orchestrator.backends.sagemaker import SageMakerBackend

    calls: Counter = Counter()
    session = boto3.session.Session()
    s3 = counted(session.client("s3", config=results.client_config(workers)), calls, latency_s)
    sm = counted(session.client("sagemaker", config=results.client_config(workers)), calls, latency_s)

    def backend_for(name: str, region: str):
        if name != "sagemaker":
            return registry.create(name, region=region)
        backend = SageMakerBackend(sm, s3, None)
        if not bulk:
            backend.describe_all = lambda containing: None  # this run: every job described on its own
        return backend

    server_before, cpu_before = process_cpu_s(server_pid), time.process_time()
    start = time.perf_counter()
    collection = results.collect(prefix, sweep=SWEEP, workers=workers, s3=s3, backend_for=backend_for)
    wall = time.perf_counter() - start
    cpu, server_after = time.process_time() - cpu_before, process_cpu_s(server_pid)
    server = None if server_before is None or server_after is None else server_after - server_before
    return {"wall_s": wall, "cpu_s": cpu, "server_cpu_s": server, "calls": dict(sorted(calls.items())),
            "rows": collection.rows}


def client_setup(shared: bool) -> float:
    """CPU seconds to build the store's S3 client and the two cloud backends, `shared`: in one
    Session (as `collect` does), else each in a Session of its own."""
    from orchestrator import aws
    from orchestrator.backends import registry
    from orchestrator.results.collect import _Sessions, client_config

    sessions = _Sessions()
    start = time.process_time()
    aws.client("s3", "us-east-1", config=client_config(16), session=sessions("us-east-1") if shared else None)
    for name in registry.cloud_names():
        registry.create(name, region="us-east-1", pool=18, **({"session": sessions("us-east-1")} if shared else {}))
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="added before each call is sent, as a remote endpoint's round trip")
    args = parser.parse_args()

    with moto_process("bench-results-bulk-home-") as proc:
        import boto3

        seed(boto3.client("s3"), boto3.client("sagemaker"), args.trials)
        prefix = f"s3://{BUCKET}/jobs"
        timed(prefix, args.workers, True, proc.pid)  # warm both sides (imports, the schema, moto's first requests)
        runs: dict[str, list[dict]] = {"each": [], "bulk": []}
        for _ in range(args.rounds):
            for way in runs:
                runs[way].append(timed(prefix, args.workers, way == "bulk", proc.pid, args.latency_ms / 1000))
        rows = [run.pop("rows") for way in runs.values() for run in way]
        if any(r != rows[0] for r in rows) or len(rows[0]) != args.trials or \
                any(r.status != "completed" for r in rows[0]):
            raise SystemExit("the two ways gave different rows, or lost jobs")
        out: dict = {"trials": args.trials, "workers": args.workers, "rounds": args.rounds,
                     "latency_ms": args.latency_ms}
        for way, done in runs.items():
            best = min(done, key=lambda run: run["cpu_s"])
            out[way] = {"wall_s": round(min(r["wall_s"] for r in done), 2), "cpu_s": round(best["cpu_s"], 2),
                        "cpu_ms_per_trial": round(best["cpu_s"] * 1000 / args.trials, 2),
                        "server_cpu_s": None if best["server_cpu_s"] is None else round(best["server_cpu_s"], 2),
                        "calls": best["calls"],
                        "calls_per_trial": round(sum(best["calls"].values()) / args.trials, 3)}
        setup = {"session_each": [], "session_per_region": []}
        for _ in range(args.rounds * 3):
            setup["session_each"].append(client_setup(False))
            setup["session_per_region"].append(client_setup(True))
        out["clients"] = {way: round(min(times), 3) for way, times in setup.items()}
        out["cpu_ratio"] = round(out["each"]["cpu_s"] / out["bulk"]["cpu_s"], 2)
        out["wall_ratio"] = round(out["each"]["wall_s"] / out["bulk"]["wall_s"], 2)
        out.update(load_average=round(os.getloadavg()[0], 2), python=sys.version.split()[0])
        print(json.dumps(out))


if __name__ == "__main__":
    main()
