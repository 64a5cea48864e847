"""Benchmark: how long `sweep status` and `results --sweep` take on a sweep of 1,000 trials.

Starts a `ThreadedMotoServer` on 127.0.0.1 in this process (fake credentials, a temporary
ORCHESTRATOR_HOME), plans and saves a sweep of `--trials` SageMaker trials
(bench/sweep_submit.py's base and sweep) and submits them all in one runner step (moto
completes each job at once; the ledger's rows stay `submitted` until something asks), fails
every tenth job with a capacity reason (through the ledger the way the runner records it, so
that the table has causes to show), and writes each job's results.json where the spec's
output says. Then runs each command as a user would, `python -m orchestrator ...` in a child
process (its start-up and imports included), and times it:

- `sweep status ID --json` the first time: every `submitted` row is asked of SageMaker
  (one DescribeTrainingJob each) and moved to its end;
- `sweep status ID --json` again: nothing in flight, nothing asked;
- `sweep status ID --no-refresh` (the table);
- `results --sweep ID --prefix s3://.../jobs --format json`: every trial's results.json.

The two ways compared in one run are the first status (1,000 jobs asked) and the second
(none). Each output is checked: every trial is in it, with its state, and a failed one with
its cause. Each command's own CPU seconds are printed beside its wall time (the difference
is mostly the moto server answering). Prints one JSON object.

    PYTHONPATH=. .venv/bin/python bench/sweep_read.py [--trials 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from loopback_aws import threaded_moto, use_fake_credentials  # noqa: E402
from results_collect import results_doc  # noqa: E402
from sweep_submit import BASE, BUCKET, sweep_text  # noqa: E402

CAPACITY = "CapacityError: Unable to provision requested ML compute capacity."


def timed(*args: str) -> tuple[float, float, str]:
    """Wall seconds of `python -m orchestrator ARGS`, its own CPU seconds (user + system of its
    process: the rest of the wall time is mostly the moto server, in this process, answering)
    and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode != 0:
        raise SystemExit(f"orchestrator {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return round(seconds, 2), round(cpu, 2), done.stdout


def run(workdir: Path, trials: int) -> dict:
    import boto3

    from orchestrator import backends, spec
    from orchestrator import sweep as sweeps
    from orchestrator.ledger import Ledger
    from orchestrator.lifecycle import Status

    (workdir / "base.yaml").write_text(BASE)
    (workdir / "read.yaml").write_text(sweep_text("read", trials))
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    ledger = Ledger()
    backend = backends.create("sagemaker", region="us-east-1", ledger=ledger)
    started = time.perf_counter()
    planned = sweeps.plan(spec.load_sweep(workdir / "read.yaml"))
    definition = sweeps.save(planned, ledger)
    sweeps.Runner(definition, backend, ledger, poll_seconds=0, prepared=planned.prepared()).step()
    rows = [e for e in ledger.entries(sweep_id=definition.sweep_id)]
    failed = set()
    for i, entry in enumerate(sorted(rows, key=lambda e: e.job_name)):
        if i % 10 == 0:
            ledger.transition(entry.job_name, Status.FAILED, detail=CAPACITY, expect=(Status.SUBMITTED,))
            failed.add(entry.job_name)
        doc = results_doc(i)
        doc.update(job_name=entry.job_name, tags={"orchestrator:sweep": definition.sweep_id})
        s3.put_object(Bucket=BUCKET, Key=f"jobs/results/{entry.job_name}/results.json", Body=json.dumps(doc).encode())
    ledger.close()
    prepared_s = time.perf_counter() - started

    sweep_id = definition.sweep_id
    first_s, first_cpu, first = timed("sweep", "status", sweep_id, "--json")
    again_s, _, again = timed("sweep", "status", sweep_id, "--json")
    table_s, _, table = timed("sweep", "status", sweep_id, "--no-refresh")
    results_s, results_cpu, found = timed("results", "--sweep", sweep_id, "--prefix", f"s3://{BUCKET}/jobs", "--format", "json")

    shown = json.loads(again)["trials"]
    states = {t["job_name"]: t["state"] for t in shown}
    if len(shown) != trials or any(states[j] != "failed" for j in failed) or \
            sum(s == "completed" for s in states.values()) != trials - len(failed):
        raise SystemExit(f"sweep status showed {len(shown)} trials, states {sorted(set(states.values()))}")
    if any("Unable to provision" not in t["detail"] for t in shown if t["job_name"] in failed):
        raise SystemExit("a failed trial's cause is missing from sweep status")
    if sum(job in table for job in states) != trials:
        raise SystemExit("the status table does not name every trial's job")
    if sum(job in found for job in states) != trials:
        raise SystemExit("results --sweep does not show every trial's job")
    return {"trials": trials, "failed": len(failed), "setup_s": round(prepared_s, 1),
            "status_first_s": first_s, "status_again_s": again_s, "status_table_s": table_s,
            "results_sweep_s": results_s, "first_vs_again": round(first_s / again_s, 2),
            "status_first_cpu_s": first_cpu, "results_sweep_cpu_s": results_cpu,
            "load_average": os.getloadavg()[0], "python": sys.version.split()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-sweep-read-"))
    use_fake_credentials()
    os.environ["ORCHESTRATOR_HOME"] = str(workdir / "home")

    with threaded_moto():
        result = run(workdir, args.trials)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
