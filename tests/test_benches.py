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
    ("sparse_copy.py", ["--gb", "0.01", "--data-mb", "0.5", "--repeats", "1"]),
])
def test_a_benchmark_runs_and_prints_json(tmp_path, script, args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=patience(600))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.index("{"):])
    assert isinstance(report, dict) and report
