"""The benchmarks still run (docs/BENCHMARKS.md quotes them): each cheap one at a tiny size, its
output one JSON document. A module moved under a benchmark (the archive's launch.py went to
`entrypoints/launcher/`) broke `bench/sweep_plan.py` without any test seeing it. Nothing here
is timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from job_waits import patience

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, args", [
    ("sweep_plan.py", ["--trials", "40", "--compare", "20", "--archive-sample", "3"]),
    ("sweep_submit.py", ["--trials", "8"]),
    ("results_collect.py", ["--jobs", "6", "--rounds", "1", "--latency-ms", "1"]),
    ("results_bulk.py", ["--trials", "6", "--rounds", "1"]),
    pytest.param("sweep_read.py", ["--trials", "16"], marks=pytest.mark.slow),  # four CLI processes
    pytest.param("schedule_run.py", ["--trials", "3", "--concurrency", "3"], marks=pytest.mark.slow),
    ("sparse_copy.py", ["--gb", "0.01", "--data-mb", "0.5", "--repeats", "1"]),
    ("schedule_list.py", ["--trials", "20", "--rounds", "1", "--latency-ms", "0"]),
    ("status_many.py", ["--jobs", "5", "--latency-ms", "1"]),
])
def test_a_benchmark_runs_and_prints_json(tmp_path, script, args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=patience(600))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.index("{"):])
    assert isinstance(report, dict) and report


def test_the_plan_walk_looks_the_backend_up_once(tmp_path):
    """bench/plan_walk.py (issue 34, "resolve once"): `plan` enters the backend registry where the
    spec is validated (its `backend` field, its class) and nowhere after; it entered 13 times at
    11 places when each of the doctor, cost, locations and the request asked by name."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "plan_walk.py"),
                           str(ROOT / "configs" / "vit-trn1-2xlarge.yaml")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=patience(600))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.index("{"):])
    assert report["entries"] == 2 and all(site.startswith("orchestrator/spec/") for site in report["by_entry"])
