"""Benchmark: one execution of a cloud schedule's Distributed Map in moto's interpreter, with
tests/moto_shim.py reading botocore's service model per SDK task (as it did) and once (now).

Starts a `ThreadedMotoServer` on 127.0.0.1 in this process (the interpreter's Map workers and
each trial's child are threads of it; fake credentials, a temporary ORCHESTRATOR_HOME), compiles
a sweep of `--trials` random trials of configs/vit-trn1-2xlarge.yaml at `--concurrency`, and
runs one execution as the scheduler starts it (tests/schedule_moto.py `run_once`), to its end,
once each way on an emptied server: "per_task" puts back the shim's read of the service model
for every task (a new botocore session each time), "once" is the shim as it is. Each run must
end SUCCEEDED with one job per trial. Prints one JSON object: per way the execution's seconds,
the seconds to its first and last job, and the load average.

    PYTHONPATH=. .venv/bin/python bench/schedule_run.py [--trials 100] [--concurrency 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from loopback_aws import threaded_moto, use_fake_credentials  # noqa: E402


def sweep_file(workdir: Path, trials: int, concurrency: int) -> Path:
    path = workdir / f"run{trials}.yaml"
    path.write_text(f"sweep: run\nbase: {ROOT / 'configs' / 'vit-trn1-2xlarge.yaml'}\n"
                    f"random: {{trials: {trials}, seed: 0, params: {{training.optimizer.lr: "
                    "{loguniform: [1.0e-5, 1.0e-3]}}}\n"
                    f"concurrency: {concurrency}\nmax_retries: 0\n"
                    "schedule: {cron: \"0 3 * * *\", catchup: latest, timezone: UTC}\n")
    return path


def one_way(url: str, compiled, per_task: bool) -> dict:
    import boto3
    import botocore.session
    import moto_shim
    import pytest
    from schedule_moto import interpreter_on, run_once

    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=30).read()
    patch = pytest.MonkeyPatch()
    try:
        off = interpreter_on(url, patch)
        if per_task:
            patch.setattr(moto_shim, "_service_model",
                          lambda service: botocore.session.get_session().get_service_model(service))
        made: list[float] = []
        moto_shim.after_create_training_job(patch, lambda backend, name: made.append(time.monotonic()))
        region = compiled.plan.sweep.base_spec.region
        started = time.monotonic()
        described = run_once(compiled, region, polls=None)
        seconds = time.monotonic() - started
        off()
    finally:
        patch.undo()
    jobs = {j["TrainingJobName"] for page in boto3.client("sagemaker", region_name=region).get_paginator(
        "list_training_jobs").paginate() for j in page["TrainingJobSummaries"]}
    if described["status"] != "SUCCEEDED" or len(jobs) != len(compiled.plan.trials) or len(made) != len(jobs):
        raise SystemExit(f"the execution ended {described['status']} with {len(jobs)} jobs ({len(made)} creates)")
    return {"run_s": round(seconds, 1), "jobs": len(jobs), "first_job_s": round(made[0] - started, 1),
            "last_job_s": round(made[-1] - started, 1), "load_average": round(os.getloadavg()[0], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-schedule-run-"))
    use_fake_credentials()
    os.environ["ORCHESTRATOR_HOME"] = str(workdir / "home")

    from orchestrator import spec
    from orchestrator.schedule import statemachine as sm
    from orchestrator.schedule.compiled import compile_schedule

    with threaded_moto() as url:
        compiled = compile_schedule(sm.placeholder_plan(spec.load_sweep(sweep_file(workdir, args.trials,
                                                                                   args.concurrency))))
        per_task = one_way(url, compiled, per_task=True)
        once = one_way(url, compiled, per_task=False)
    print(json.dumps({"trials": args.trials, "concurrency": args.concurrency, "per_task": per_task, "once": once,
                      "speedup": round(per_task["run_s"] / once["run_s"], 2), "python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
