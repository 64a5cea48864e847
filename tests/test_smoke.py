"""`orchestrator smoke`: orchestrator/smoke.py (laptop side) and entrypoints/trainer/smoke.py (the check)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from job_waits import patience

from entrypoints.trainer import smoke as entry_smoke
from orchestrator import names, request, spec
from orchestrator import smoke as orch_smoke
from orchestrator.errors import InputError, JobFailed

ROOT = Path(__file__).resolve().parents[1]
XLA_TINY = ROOT / "configs" / "local-xla-tiny.yaml"


def cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def tiny_xla_job() -> dict:
    loaded = spec.load(XLA_TINY)
    return request.resolved_job(loaded, names.job_name(loaded, "smoke"))


def test_both_sides_agree_on_the_protocol():
    assert orch_smoke.SMOKE_TAG == entry_smoke.SMOKE_TAG
    assert orch_smoke.EXIT_RECOMPILED == entry_smoke.EXIT_RECOMPILED
    assert orch_smoke.WARMUP == entry_smoke.DEFAULT_WARMUP


def test_orchestrator_side_never_imports_torch():
    code = "import sys, orchestrator.smoke, orchestrator.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         capture_output=True, text=True, timeout=patience(60))
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.slow
def test_cli_smoke_passes_on_the_tiny_xla_config(orch_home):
    proc = cli("smoke", str(XLA_TINY), "--steps", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = [line for line in proc.stdout.splitlines() if line.startswith("smoke step=")]
    assert len(steps) == 4
    assert "graphs_compiled=0" in steps[2] and "graphs_compiled=0" in steps[3]
    assert "ok:" in proc.stdout and "none after the 2 warmup steps (xla)" in proc.stdout


@pytest.mark.slow
def test_a_changing_batch_shape_is_caught_and_named(orch_home):
    progress: list[str] = []
    with pytest.raises(JobFailed) as caught:
        orch_smoke.run_job(tiny_xla_job(), 4, vary_batch=True, on_progress=progress.append)
    assert caught.value.exit_code == 1
    assert caught.value.message.startswith("smoke: step 2 compiled 1 new graph(s) after 2 warmup steps (xla)")
    assert "[2, 3]" in caught.value.message
    assert "drop_last" in caught.value.hint
    assert [line.split()[2] for line in progress] == ["batch=4", "batch=3", "batch=2", "batch=1"]


@pytest.mark.slow
def test_native_compile_recompilation_is_caught(tmp_path):
    # torch.compile would make the batch dimension dynamic after one recompile; smoke turns
    # that off so a changing shape recompiles every time, as it would on Neuron.
    job = tiny_xla_job()
    job["spec"]["training"].update(runtime="native", compile=True, precision="fp32")
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    proc = subprocess.run([sys.executable, "-m", "entrypoints.trainer.smoke", "--job", str(path), "--steps", "2",
                           "--warmup", "1", "--vary-batch"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=patience(600))
    assert proc.returncode == entry_smoke.EXIT_RECOMPILED, proc.stdout + proc.stderr[-2000:]
    verdict = json.loads(proc.stdout.splitlines()[-1].removeprefix(entry_smoke.SMOKE_TAG + " "))
    assert verdict["graphs_per_step"] == [1, 1] and verdict["recompiled_steps"] == [1]
    assert "native + torch.compile" in verdict["message"]


def test_a_broken_step_reports_the_exit_status_and_output(orch_home):
    job = tiny_xla_job()
    job["spec"]["model"]["arch"] = "vit_no_such_arch"
    with pytest.raises(JobFailed) as caught:
        orch_smoke.run_job(job, 3)
    assert "failed (exit status 1)" in caught.value.message
    assert "vit_no_such_arch" in caught.value.message


def test_too_few_steps_is_bad_input(orch_home):
    with pytest.raises(InputError, match="no step after the 2 warmup"):
        orch_smoke.run_job(tiny_xla_job(), 2)
    proc = cli("smoke", str(XLA_TINY), "--steps", "2")
    assert proc.returncode == 2
    assert "hint: use --steps 5" in proc.stderr


def test_a_bad_spec_is_bad_input(tmp_path, orch_home):
    bad = tmp_path / "bad.yaml"
    bad.write_text(XLA_TINY.read_text().replace("batch_size: 4", "batch_sise: 4"))
    proc = cli("smoke", str(bad))
    assert proc.returncode == 2
    assert "did you mean 'batch_size'" in proc.stderr
