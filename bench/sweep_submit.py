"""Benchmark: plan and submit a 200-trial sweep against a moto server, in one run.

Starts a `ThreadedMotoServer` on 127.0.0.1 in this process (fake credentials, a temporary
ORCHESTRATOR_HOME, every client pointed at it through AWS_ENDPOINT_URL), writes a sagemaker
base spec and a sweep of `--trials` trials (a 2 x 4 grid crossed with seeded random learning
rates), then times three phases of the real code path:

- plan: `sweep.plan` (expand, validate, doctor, prepare: request and source archive per
  trial) and `sweep.save` (definition and one `planned` ledger row per trial);
- submit: one `Runner.step()` with concurrency = trials, which submits every trial through
  `SageMakerBackend.submit` (DescribeTrainingJob, HeadObject + PutObject of the trial's
  archive, CreateTrainingJob; ledger transitions), the plan's prepared requests handed over;
- refresh: `Runner.refresh()`, one DescribeTrainingJob + ListTags per job (moto completes
  jobs at once, so every row moves to `completed`).

Time inside botocore is measured by wrapping `BaseClient._make_api_call` (serialising,
sending, the server's work, parsing); the rest of each phase's wall time is the
orchestrator's own. The server shares this interpreter, so its CPU counts as "inside
botocore": the share outside botocore is what our code adds to the AWS calls, not a
network figure. The two ways compared in the run are the submit step with the plan's
prepared requests handed over (what `sweep run` does) and a second, identical sweep whose
runner prepares every request again (what `sweep resume` in a fresh process does), each
submitted to an emptied server.

With `--held-rounds H`, instead: the calls a sweep makes while its jobs stay in flight for
H rounds each, at a concurrency of `--concurrency` (default 100), for the whole sweep. Jobs
are held InProgress by setting the status of moto's job objects between rounds (moto
completes a job at once); the runner's clock advances by SageMaker's poll interval per
round. The two ways compared in one run, each on an emptied server: "per_round_listing"
(the runner as it was: each round lists the sweep's jobs in progress, and every describe
asks ListTags too) and "current" (the one listing per runner and the tags asked once per
job). Prints calls per trial of ListTrainingJobs, DescribeTrainingJob and ListTags, and the
CPU seconds of the round loop (process time, the server's included).

Prints one JSON object.

    PYTHONPATH=. .venv/bin/python bench/sweep_submit.py [--trials 200]
    PYTHONPATH=. .venv/bin/python bench/sweep_submit.py --trials 2000 --held-rounds 6
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from loopback_aws import threaded_moto, use_fake_credentials  # noqa: E402

BUCKET = "bench-sweep"
BASE = f"""\
name: bench
backend: sagemaker
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {{type: ml.trn1.2xlarge, count: 1}}
image: {{neuron_sdk: "2.30.0"}}
training: {{runtime: xla, steps: 100, warmup_steps: 5, batch_size: 32}}
compile_cache: {{uri: s3://{BUCKET}/compile-cache, mode: tarball}}
output: {{uri: s3://{BUCKET}/jobs}}
max_run_minutes: 30
"""
GRID_POINTS = 8


def sweep_text(name: str, trials: int, concurrency: int | None = None) -> str:
    if trials % GRID_POINTS:
        raise SystemExit(f"--trials must be a multiple of {GRID_POINTS}")
    return f"""\
sweep: {name}
base: base.yaml
grid:
  instance.type: [ml.trn1.2xlarge, ml.trn1.32xlarge]
  training.batch_size: [8, 16, 32, 64]
random:
  trials: {trials // GRID_POINTS}
  seed: 0
  params:
    training.optimizer.lr: {{loguniform: [1.0e-5, 1.0e-3]}}
concurrency: {concurrency or trials}
"""


class BotocoreTimer:
    """Accumulates wall time and calls per operation inside BaseClient._make_api_call."""

    def __init__(self):
        from botocore.client import BaseClient

        self.seconds = 0.0
        self.calls: Counter = Counter()
        self._original = BaseClient._make_api_call
        timer = self

        def timed(client, operation, params):
            start = time.perf_counter()
            try:
                return timer._original(client, operation, params)
            finally:
                timer.seconds += time.perf_counter() - start
                timer.calls[operation] += 1

        BaseClient._make_api_call = timed

    def reset(self) -> None:
        self.seconds = 0.0
        self.calls = Counter()


def phase(timer: BotocoreTimer, trials: int, fn) -> tuple[dict, object]:
    timer.reset()
    start = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - start
    inside = timer.seconds
    return {
        "seconds": round(wall, 3),
        "trials_per_s": round(trials / wall, 1),
        "botocore_seconds": round(inside, 3),
        "outside_botocore_share": round(1 - inside / wall, 3),
        "api_calls": dict(sorted(timer.calls.items())),
    }, result


def job_names(backend) -> set[str]:
    names = set()
    for page in backend.sm.get_paginator("list_training_jobs").paginate():
        names.update(j["TrainingJobName"] for j in page["TrainingJobSummaries"])
    return names


def reset_server(bucket: str) -> None:
    import urllib.request

    import boto3

    request = urllib.request.Request(f"{os.environ['AWS_ENDPOINT_URL']}/moto-api/reset", method="POST")
    urllib.request.urlopen(request, timeout=30).read()
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=bucket)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--held-rounds", type=int, default=0,
                        help="measure the calls of a whole sweep whose jobs stay in flight this many rounds")
    parser.add_argument("--concurrency", type=int, default=100, help="with --held-rounds: the sweep's concurrency")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    use_fake_credentials()
    os.environ.pop("AWS_PROFILE", None)
    os.environ["ORCHESTRATOR_HOME"] = str(workdir / "home")

    with threaded_moto():
        if args.held_rounds:
            result = held(workdir, args.trials, args.held_rounds, args.concurrency)
        else:
            result = run(workdir, args.trials)
    print(json.dumps(result))


def run(workdir: Path, trials: int) -> dict:
    import boto3

    from orchestrator import backends, spec
    from orchestrator import sweep as sweeps
    from orchestrator.ledger import Ledger

    (workdir / "base.yaml").write_text(BASE)
    for name in ("handed", "fresh"):
        (workdir / f"{name}.yaml").write_text(sweep_text(name, trials))
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    ledger = Ledger()
    backend = backends.create("sagemaker", region="us-east-1", ledger=ledger)
    timer = BotocoreTimer()
    # Warm-up outside the timed phases: botocore's service models and the first connection.
    backend.sm.list_training_jobs(MaxResults=1)
    backend.s3.list_objects_v2(Bucket=BUCKET, MaxKeys=1)

    def plan_and_save(name):
        planned = sweeps.plan(spec.load_sweep(workdir / f"{name}.yaml"))
        return planned, sweeps.save(planned, ledger)

    plan_stats, (planned, definition) = phase(timer, trials, lambda: plan_and_save("handed"))
    runner = sweeps.Runner(definition, backend, ledger, poll_seconds=0, prepared=planned.prepared())
    submit_stats, progress = phase(timer, trials, runner.step)
    refresh_stats, _ = phase(timer, trials, runner.refresh)

    first = job_names(backend)
    states = Counter(v.status for v in runner.views())
    if first != {v.job_name for v in runner.views()} or states != {"completed": trials}:
        raise SystemExit(f"submitted {len(first)} jobs, expected {trials}; states {dict(states)}")

    # The same work again from an empty server, with the runner preparing every request.
    _, (_, fresh_definition) = phase(timer, trials, lambda: plan_and_save("fresh"))
    reset_server(BUCKET)
    fresh = sweeps.Runner(fresh_definition, backend, ledger, poll_seconds=0)
    fresh_stats, _ = phase(timer, trials, fresh.step)
    if job_names(backend) != {v.job_name for v in fresh.views()}:
        raise SystemExit("the second sweep did not submit every trial")
    return {
        "trials": trials,
        "sweep_id": definition.sweep_id,
        "plan": plan_stats,
        "submit": submit_stats,
        "refresh": refresh_stats,
        "submit_reprepared": fresh_stats,
        "handover_speedup": round(fresh_stats["seconds"] / submit_stats["seconds"], 2),
        "plan_vs_submit_throughput": round(plan_stats["trials_per_s"] / submit_stats["trials_per_s"], 2),
        "states_after_refresh": dict(states),
        "python": sys.version.split()[0],
    }


def held(workdir: Path, trials: int, rounds: int, concurrency: int) -> dict:
    """Both ways of a whole sweep whose jobs each stay InProgress for `rounds` rounds."""
    import boto3
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sagemaker.models import sagemaker_backends

    from orchestrator import backends, spec
    from orchestrator import sweep as sweeps
    from orchestrator.ledger import Ledger
    from orchestrator.lifecycle import IN_FLIGHT

    (workdir / "base.yaml").write_text(BASE)
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    ledger = Ledger()
    timer = BotocoreTimer()
    out: dict = {"trials": trials, "held_rounds": rounds, "concurrency": concurrency}

    class PerRoundListing(sweeps.Runner):
        """The runner as it was: the sweep's jobs in progress listed on every round, and
        ListTags with every DescribeTrainingJob."""

        def step(self):
            for backend in self.backends.shared(self.d.backends):
                backend._tag_cache.clear()
            return super().step()

        def submit_ready(self):
            if not self.backing_off():
                self._listed = None  # listed again, whether or not there is room
                rows = self.rows()
                self._elsewhere({h[-1].job_name for h in rows.values() if h[-1].status in IN_FLIGHT})
            super().submit_ready()

    for way, cls in (("per_round_listing", PerRoundListing), ("current", sweeps.Runner)):
        reset_server(BUCKET)
        (workdir / f"{way}.yaml").write_text(sweep_text(way.replace("_", "-"), trials, concurrency))
        planned = sweeps.plan(spec.load_sweep(workdir / f"{way}.yaml"))
        definition = sweeps.save(planned, ledger)
        backend = backends.create("sagemaker", region="us-east-1", ledger=ledger)
        backend.sm.list_training_jobs(MaxResults=1)  # warm-up, not counted
        now = [1_800_000_000.0]
        runner = cls(definition, backend, ledger, poll_seconds=30, clock=lambda now=now: now[0], sleep=lambda s: None,
                     prepared=planned.prepared())
        jobs = sagemaker_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].training_jobs
        age: dict[str, int] = {}
        timer.reset()
        cpu, wall, steps = time.process_time(), time.perf_counter(), 0
        while True:
            progress = runner.step()
            steps += 1
            if progress.done:
                break
            for name, job in jobs.items():  # every job created so far: one round older
                age[name] = age.get(name, -1) + 1
                job.training_job_status = "InProgress" if age[name] < rounds else "Completed"
                job.secondary_status = "Training" if age[name] < rounds else "Completed"
            now[0] += 30
            if steps > 10 * (trials // concurrency + 2) * (rounds + 2):
                raise SystemExit(f"{way}: the sweep did not end")
        calls = timer.calls
        out[way] = {
            "rounds": steps, "cpu_s": round(time.process_time() - cpu, 2),
            "wall_s": round(time.perf_counter() - wall, 2),
            "calls": dict(sorted(calls.items())),
            "per_trial": {op: round(calls[op] / trials, 3)
                          for op in ("ListTrainingJobs", "DescribeTrainingJob", "ListTags")},
        }
        if Counter(v.status for v in runner.views()) != {"completed": trials}:
            raise SystemExit(f"{way}: not every trial completed")
    before, after = out["per_round_listing"], out["current"]
    out["list_calls_ratio"] = round(before["calls"].get("ListTrainingJobs", 0)
                                    / max(1, after["calls"].get("ListTrainingJobs", 0)), 1)
    out["cpu_ratio"] = round(before["cpu_s"] / max(after["cpu_s"], 1e-9), 2)
    out["python"] = sys.version.split()[0]
    return out


if __name__ == "__main__":
    main()
