"""`orchestrator smoke SPEC`: a few training steps here, failing if graphs keep compiling.

Contract: `run(spec, steps)` writes the spec's resolved job file to a temporary directory and
runs `python -m entrypoints.trainer.smoke --job <it> --steps N` in a subprocess (the orchestrator
never imports torch), with `PJRT_DEVICE=CPU` unless the caller's environment names another
PJRT device. It returns a `SmokeResult` when no graph was compiled after warmup, and raises
`JobFailed` (exit 1) whose message names the step that recompiled, or why the run broke
(exit status and the last lines of its output), or that it ran past the timeout.
`InputError` (exit 2) for a step count too small to see a steady step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from entrypoints.shared import contract
from orchestrator.errors import InputError, JobFailed

# Must equal entrypoints.trainer.smoke.SMOKE_TAG / EXIT_RECOMPILED / DEFAULT_WARMUP (a test checks;
# importing that module here is not allowed: it belongs to the torch side).
SMOKE_TAG = "orchestrator-smoke"
EXIT_RECOMPILED = 3
WARMUP = 2
DEFAULT_STEPS = 5
DEFAULT_TIMEOUT_S = 1800.0
TAIL_LINES = 30
CODE_DIR = Path(contract.__file__).resolve().parents[1]


@dataclass(frozen=True)
class SmokeResult:
    """The entrypoint's verdict (see entrypoints/trainer/smoke.py for the fields)."""

    ok: bool
    runtime: str
    steps: int
    warmup: int
    graphs_per_step: tuple[int, ...]
    recompiled_steps: tuple[int, ...]
    message: str


def run(spec, steps: int = DEFAULT_STEPS, *, on_progress: Callable[[str], None] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S) -> SmokeResult:
    """Smoke-test a loaded JobSpec (see the module docstring)."""
    from orchestrator import names, request

    job = request.resolved_job(spec, names.job_name(spec, "smoke"))
    return run_job(job, steps, on_progress=on_progress, timeout_s=timeout_s)


def run_job(job: dict, steps: int = DEFAULT_STEPS, *, vary_batch: bool = False,
            on_progress: Callable[[str], None] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
            python: str = sys.executable) -> SmokeResult:
    """Smoke-test a resolved job dict. `vary_batch` (tests) shrinks the batch every step."""
    if steps <= WARMUP:
        raise InputError(f"--steps {steps} leaves no step after the {WARMUP} warmup steps",
                         hint=f"use --steps {WARMUP + 3} or more")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CODE_DIR), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PJRT_DEVICE", "CPU")
    with tempfile.TemporaryDirectory(prefix="orchestrator-smoke-") as tmp:
        job_path = Path(tmp) / contract.JOB_FILE
        job_path.write_text(json.dumps(job))
        cmd = [python, "-m", "entrypoints.trainer.smoke", "--job", str(job_path), "--steps", str(steps),
               "--warmup", str(WARMUP)]
        if vary_batch:
            cmd.append("--vary-batch")
        rc, tail, verdict, timed_out = _watch(cmd, env, on_progress, timeout_s)
    if timed_out:
        raise JobFailed(f"smoke run of {job['job_name']} ran past {timeout_s:.0f} s and was stopped",
                        hint="run fewer --steps or a smaller model; compile time grows with the model")
    if verdict is not None and rc in (0, EXIT_RECOMPILED):
        result = SmokeResult(ok=bool(verdict["ok"]), runtime=verdict["runtime"], steps=verdict["steps"],
                             warmup=verdict["warmup"], graphs_per_step=tuple(verdict["graphs_per_step"]),
                             recompiled_steps=tuple(verdict["recompiled_steps"]), message=verdict["message"])
        if result.ok and rc == 0:
            return result
        raise JobFailed(f"smoke: {result.message}",
                        hint="make every step's tensors the same shape (drop_last=True, fixed image size, "
                             "no .item() or data-dependent branches in the step), then run smoke again")
    lines = "\n".join(tail)
    raise JobFailed(f"smoke run of {job['job_name']} failed (exit status {rc}); its last output:\n{lines}",
                    hint="run `python -m entrypoints.trainer.smoke --job job.json` by hand for the full traceback")


def _watch(cmd: list[str], env: dict, on_progress: Callable[[str], None] | None,
           timeout_s: float) -> tuple[int, deque, dict | None, bool]:
    """Run `cmd`, passing progress lines on; (exit status, last lines, verdict, timed out)."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    verdict = None
    proc = subprocess.Popen(cmd, cwd=CODE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace")
    timed_out = threading.Event()

    def stop() -> None:
        timed_out.set()
        proc.kill()

    timer = threading.Timer(timeout_s, stop)
    timer.start()
    try:
        for raw in proc.stdout or ():
            line = raw.rstrip("\n")
            tail.append(line)
            if line.startswith(SMOKE_TAG + " "):
                try:
                    verdict = json.loads(line[len(SMOKE_TAG) + 1:])
                except json.JSONDecodeError:
                    verdict = None
            elif line.startswith("smoke ") and on_progress is not None:
                on_progress(line)
        rc = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rc, tail, verdict, timed_out.is_set()
