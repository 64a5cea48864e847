"""The precompile pass (`training.precompile`): every graph compiled in parallel before training.

Contract: `run(...)` decides whether the pass applies and, when it does, runs
`neuron_parallel_compile <the job's torchrun command>` with `contract.PRECOMPILE_STEPS_ENV`
set (train.py then runs `contract.PRECOMPILE_STEPS` steps from step 0, without checkpoints or
a saved model) and its ranks' stats in a folder of their own. It returns results.json's
`precompile` object and never raises: a pass that fails or does not apply is a reason there
and in the log, and the real run compiles what is missing itself.

As the Neuron docs describe the tool (frameworks/torch/torch-neuronx/api-reference-guide/
training/pytorch-neuron-parallel-compile.rst): it runs the command in graph-extraction mode
(NEURON_EXTRACT_GRAPHS_ONLY=1: nothing executes, outputs are invalid), then compiles the
extracted graphs in parallel into the persistent cache that `--cache_dir` in NEURON_CC_FLAGS
names (launch.py sets it, the same for the pass and the run, so the run finds them); options
other than the step count must match the real run's, or the run compiles again. The
SageMaker training toolkit (sagemaker_training.torch_distributed, 4.6.1 and later) and the
SageMaker SDK v3 torchrun driver do the same when RUN_NEURON_PARALLEL_COMPILE=1, but as the
job itself (the pass replaces the run); here the pass precedes the run in the same job, so
the job's `max_run_minutes` (and the cost bound built on it) covers both.

Applies only to runtime xla with the tool on PATH (the Neuron training image has it). Stdlib
only; nothing here imports `orchestrator`.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from entrypoints.launcher.torchrun import StopSignals, run_torchrun, torchrun_command
from entrypoints.shared import contract


def section(requested: bool, *, ran: bool = False, reason: str | None = None, seconds: float | None = None,
            steps: int | None = None, exit_code: int | None = None) -> dict:
    """results.json's `precompile` object."""
    return {"requested": requested, "ran": ran, "reason": reason, "seconds": seconds, "steps": steps,
            "exit_code": exit_code}


def skipped_because(job: dict, runtime: str, env: dict[str, str]) -> str | None:
    """Why the pass does not apply to this job here; None when it does."""
    if not (job.get("spec") or {}).get("training", {}).get("precompile"):
        return "not requested (training.precompile: false)"
    if runtime != "xla":
        return f"runtime {runtime} has no XLA graphs to extract (precompile needs runtime xla)"
    if shutil.which(contract.PRECOMPILE_PROGRAM, path=env.get("PATH")) is None:
        return f"{contract.PRECOMPILE_PROGRAM} is not on PATH: not a Neuron host (the Neuron training image has it)"
    return None


def run(job: dict, ctr: contract.Contract, env: dict[str, str], job_file: Path, stats_dir: Path,
        train_module: str, cwd: Path, stop: StopSignals, log: Callable[[str], None]) -> dict:
    """The pass when it applies (see the module docstring); results.json's `precompile`."""
    runtime = (job.get("spec") or {}).get("training", {}).get("runtime", "xla")
    requested = bool((job.get("spec") or {}).get("training", {}).get("precompile"))
    reason = skipped_because(job, runtime, env)
    if reason is not None:
        if requested:
            log(f"precompile skipped: {reason}")
        return section(requested, reason=reason)
    steps = min(int(job["spec"]["training"]["steps"]), contract.PRECOMPILE_STEPS)
    program = shutil.which(contract.PRECOMPILE_PROGRAM, path=env.get("PATH"))
    stats_dir.mkdir(parents=True, exist_ok=True)
    command = [program, *torchrun_command(job, ctr, env, job_file, stats_dir, train_module)]
    pass_env = dict(env)
    pass_env[contract.PRECOMPILE_STEPS_ENV] = str(steps)
    pass_env.pop(contract.PROGRESS_REPORT_ENV, None)
    log(f"precompile: {contract.PRECOMPILE_PROGRAM} over {steps} steps: " + " ".join(command[1:]))
    started = time.monotonic()
    try:
        # A process group of its own: a stop reaches the wrapper, its torchrun and the workers.
        code, tail = run_torchrun(command, pass_env, cwd, stop, group=True)
    except Exception as exc:  # noqa: BLE001 - the real run compiles what the pass did not
        reason = f"{contract.PRECOMPILE_PROGRAM} did not run: {type(exc).__name__}: {exc}"
        log(f"WARNING precompile: {reason}")
        return section(True, reason=reason, steps=steps, seconds=round(time.monotonic() - started, 3))
    seconds = round(time.monotonic() - started, 3)
    if code != 0:
        last = next((line for line in reversed(tail) if line.strip()), "")
        reason = f"{contract.PRECOMPILE_PROGRAM} exited with code {code}" + (f": {last.strip()}" if last else "")
        log(f"WARNING precompile: {reason}; training compiles what is missing")
    else:
        log(f"precompile: done in {seconds:.1f}s")
    return section(True, ran=True, reason=reason, seconds=seconds, steps=steps, exit_code=code)
