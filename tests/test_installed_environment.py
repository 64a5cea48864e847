"""The environment `make venv` makes works as README.md and docs/USAGE.md say: activated, from
any folder, with no PYTHONPATH naming the checkout (uv installs the checkout in editable mode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from job_waits import patience
from sweep_fakes import ROOT

from orchestrator import names, request, spec
from orchestrator.backends.local import LocalBackend
from orchestrator.errors import BackendError

STANDINS = ROOT / "tests" / "standins"
SPEC = """
name: activated
backend: local
instance: {type: ml.trn1.2xlarge}
model: {arch: vit_tiny_patch16_224, image_size: 32, patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2,
        num_classes: 10}
training: {runtime: native, steps: 2, warmup_steps: 1, batch_size: 4, precision: fp32, log_every: 1,
           optimizer: {name: adam, lr: 0.001}}
data: {source: synthetic, num_workers: 0}
compile_cache: {mode: "off"}
max_run_minutes: 10
"""


def activated_env(tmp_path: Path, pythonpath: list[str]) -> dict:
    """What `source .venv/bin/activate` leaves: the environment's bin first on PATH, no PYTHONPATH
    of the checkout's (only `pythonpath`: the test's stand-ins, never ROOT)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    venv = Path(sys.prefix)
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               ORCHESTRATOR_HOME=str(tmp_path / "home"))
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    assert str(ROOT) not in env.get("PYTHONPATH", "").split(os.pathsep)
    return env


def test_the_environment_imports_this_checkout_without_pythonpath(tmp_path):
    env = activated_env(tmp_path, [])
    done = subprocess.run(["python", "-c", "import orchestrator, entrypoints; print(orchestrator.__file__); "
                           "print(entrypoints.__file__)"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=patience(60))
    assert done.returncode == 0, ("the environment does not hold the package: run `make venv` (it installs "
                                  "this checkout in editable mode)\n" + done.stderr)
    assert done.stdout.split() == [str(ROOT / "orchestrator" / "__init__.py"),
                                   str(ROOT / "entrypoints" / "__init__.py")], (
        "the environment's editable install names another checkout: run `make venv` here")


def test_an_activated_environment_runs_a_local_job_from_another_folder(tmp_path, fake_train):
    # The fake trainer and the torchrun stand-in are the test's own modules (fake_train's folder and
    # tests/standins); the orchestrator package comes from the environment alone.
    fake_folder = tmp_path / "fake-train-module"
    env = activated_env(tmp_path, [str(fake_folder), str(STANDINS)])
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(["python", "-m", "orchestrator", "submit", str(path), "--wait", "--interval", "1"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=patience(240))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "completed" in done.stdout
    job = names.job_name(spec.load(path))
    results = json.loads((tmp_path / "home" / "store" / "jobs" / "results" / job / "results.json").read_text())
    assert results["status"] == "completed"


def test_a_python_that_cannot_run_the_supervisor_says_why_and_promises_no_retry(tmp_path, orch_home):
    # A Python without this package (no site-packages, PYTHONPATH ignored): the supervisor dies
    # at its import. A retry would fail the same way, so the hint says what to fix instead.
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    python.chmod(0o755)
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    prepared = request.prepare(spec.load(path))
    with pytest.raises(BackendError) as err:
        LocalBackend(python=str(python)).submit(prepared)
    assert "the local supervisor did not start (exit code 1)" in err.value.message
    assert "No module named 'orchestrator'" in err.value.message  # what its log said, since the folder goes
    assert "retries" not in err.value.hint and "make venv" in err.value.hint
    assert not (orch_home / "jobs" / prepared.job_name).exists()


def test_the_supervisor_is_started_with_the_folder_that_holds_the_package(tmp_path, orch_home, monkeypatch):
    # Without an editable install (a checkout run with PYTHONPATH elsewhere, a copied tree), the
    # supervisor finds the package only through the PYTHONPATH it is given: the folder above it.
    from orchestrator.backends.local import backend as local_backend

    seen: list[dict] = []

    def popen(argv, **kwargs):
        seen.append(kwargs["env"])
        raise OSError("not started in this test")

    monkeypatch.setattr(local_backend.subprocess, "Popen", popen)
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    with pytest.raises(BackendError, match="not started in this test") as err:
        LocalBackend().submit(request.prepare(spec.load(path)))
    assert seen[0]["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
    assert "submitting again retries" in err.value.hint  # an OSError may pass: there a retry can help
