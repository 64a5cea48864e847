"""Crash safety of `sweep run`, proved against the moto server.

The runner runs as a subprocess (the real CLI, the real SageMaker backend, botocore talking
to the moto server on 127.0.0.1) and is SIGKILLed over and over: from outside after a seeded
random delay, and from inside at the two instants that matter most, just before a
CreateTrainingJob is sent (the intent is in the ledger, the job is not) and just after it
returned (the job exists, the ledger does not say so). Then it runs to the end.

moto overwrites a duplicate job name silently, so a duplicate would not show in
ListTrainingJobs: every create that reaches moto is counted on moto's side (the server runs
in this process) instead. Jobs are held InProgress on creation and completed by a seeded
background thread, so the runner really waits on its concurrency cap, and the cap is checked
at every create too.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import moto_shim
from job_waits import patience

from orchestrator import spec
from orchestrator import sweep as sweeps
from orchestrator.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]
CONCURRENCY = 3
KILLS = 24

BASE = """\
name: crash
backend: sagemaker
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {type: ml.trn1.2xlarge, count: 1}
image: {neuron_sdk: "2.30.0"}
training: {runtime: xla, steps: 100, warmup_steps: 5, batch_size: 32}
compile_cache: {uri: s3://crash-bucket/compile-cache, mode: tarball}
output: {uri: s3://crash-bucket/jobs}
max_run_minutes: 30
"""

SWEEP = f"""\
sweep: crash
base: base.yaml
grid:
  training.batch_size: [8, 16, 32, 64]
  training.optimizer.lr: [1.0e-4, 2.0e-4, 3.0e-4, 5.0e-4, 1.0e-3, 2.0e-3]
concurrency: {CONCURRENCY}
"""

# Runs the CLI; CRASH_BEFORE / CRASH_AFTER are the chances of SIGKILLing itself right
# before a CreateTrainingJob is sent / right after it returned. Each self-kill is noted in
# CRASH_NOTES first, so the test can tell that the dangerous windows were hit.
DRIVER = r'''
import os, random, signal, sys
from botocore.client import BaseClient

rng = random.Random(int(os.environ["CRASH_SEED"]))
before, after = float(os.environ["CRASH_BEFORE"]), float(os.environ["CRASH_AFTER"])
notes = os.environ["CRASH_NOTES"]
original = BaseClient._make_api_call


def die(where):
    with open(notes, "a") as handle:
        handle.write(where + "\n")
    os.kill(os.getpid(), signal.SIGKILL)


def call(self, operation, params):
    if operation == "CreateTrainingJob" and rng.random() < before:
        die("before-create")
    result = original(self, operation, params)
    if operation == "CreateTrainingJob" and rng.random() < after:
        die("after-create")
    return result


BaseClient._make_api_call = call
sys.argv = ["orchestrator", *sys.argv[1:]]
from orchestrator.cli import main

main()
'''


class MotoSide:
    """Counts every CreateTrainingJob that reaches moto, holds new jobs InProgress, checks
    the concurrency cap at each create, and completes jobs at seeded random moments."""

    def __init__(self, monkeypatch, seed: int):
        self.jobs = moto_shim.sagemaker_jobs("us-east-1")
        self.creates: Counter = Counter()
        self.over_cap: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        self.done = threading.Event()
        side = self

        def create_training_job(create, backend, training_job_name, *args, **kwargs):
            with side.lock:
                running = side.in_progress()
                if running >= CONCURRENCY:
                    side.over_cap.append((training_job_name, running))
                side.creates[training_job_name] += 1
                job = create(backend, training_job_name, *args, **kwargs)
                backend.training_jobs[training_job_name].training_job_status = "InProgress"
                return job

        moto_shim.around_create_training_job(monkeypatch, create_training_job)
        self.thread = threading.Thread(target=self._complete, daemon=True)

    def in_progress(self) -> int:
        return sum(1 for j in self.jobs.values() if j.training_job_status == "InProgress")

    def _complete(self) -> None:
        while not self.done.wait(0.1):
            with self.lock:
                for job in list(self.jobs.values()):
                    if job.training_job_status == "InProgress" and self.rng.random() < 0.025:
                        job.training_job_status = "Completed"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(timeout=patience(5))


def test_sigkilled_runner_never_duplicates_or_loses_a_trial(tmp_path, orch_home, moto_server, monkeypatch):
    import boto3

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="crash-bucket")
    (tmp_path / "base.yaml").write_text(BASE)
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(SWEEP)
    planned = sweeps.plan(spec.load_sweep(sweep_file))
    expected = {t.job_name for t in planned.trials}
    assert len(expected) == 24
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    notes = tmp_path / "crash-notes.txt"
    rng = random.Random(20260105)
    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(orch_home), CRASH_NOTES=str(notes))

    def runner(seed: int, before: float, after: float, log) -> subprocess.Popen:
        command = [sys.executable, str(driver), "sweep"]
        command += ["run", str(sweep_file)] if seed % 2 else ["resume", planned.sweep_id]
        command += ["--poll", "0.1"]
        return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**env, "CRASH_SEED": str(seed), "CRASH_BEFORE": str(before),
                                     "CRASH_AFTER": str(after)})

    sweeps.save(planned, Ledger())  # so that `resume` works from the first round on
    ledger = Ledger(orch_home / "ledger.sqlite3")
    killed_mid_sweep = 0
    with MotoSide(monkeypatch, seed=7) as moto, open(tmp_path / "runs.log", "w") as log:
        # Two rounds that certainly die inside a submit (no outside kill: they run until
        # their first create), then rounds of every kind.
        schedule = [(1.0, 0.0), (0.0, 1.0)] + [(0.05, 0.1) if i % 3 == 0 else (0.0, 0.0) for i in range(KILLS - 2)]
        for seed, (before, after) in enumerate(schedule):
            unfinished = sum(1 for e in ledger.entries(sweep_id=planned.sweep_id) if e.status != "completed")
            proc = runner(seed, before, after, log)
            try:
                proc.wait(timeout=60 if seed < 2 else rng.uniform(0.3, 2.5))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=patience(30))
            if proc.returncode == -signal.SIGKILL and unfinished:
                killed_mid_sweep += 1
        final = runner(10_000, 0.0, 0.0, log)
        assert final.wait(timeout=patience(240)) == 0, (tmp_path / "runs.log").read_text()[-3000:]
        over_cap = list(moto.over_cap)
        creates = Counter(moto.creates)

    hits = notes.read_text().split() if notes.exists() else []
    assert "before-create" in hits and "after-create" in hits
    assert killed_mid_sweep >= KILLS // 2, \
        f"only {killed_mid_sweep} of {KILLS} rounds were killed with trials left: the test proved little"
    # No duplicate: every name was created exactly once, and only the sweep's names.
    assert {name: n for name, n in creates.items() if n > 1} == {}
    assert set(creates) == expected
    listed = set()
    sm = boto3.client("sagemaker", region_name="us-east-1")
    for page in sm.get_paginator("list_training_jobs").paginate():
        listed.update(j["TrainingJobName"] for j in page["TrainingJobSummaries"])
    assert listed == expected
    # No lost trial: each one's only job completed, and the ledger says so.
    entries = ledger.entries(sweep_id=planned.sweep_id)
    assert {e.job_name for e in entries} == expected
    assert {e.status for e in entries} == {"completed"}
    # The cap held across crashes (jobs in flight are counted from the ledger and from moto).
    assert over_cap == []
