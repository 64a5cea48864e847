"""Recompilation check: `python -m entrypoints.trainer.smoke --job job.json --steps N`.

Runs N training steps of the job's model with its runtime in this one process (synthetic
data, no checkpoints, nothing written but stdout) and counts the graphs compiled during
each step: XLA's `UncachedCompile` counter, or the graphs torch.compile builds (native with
`compile: true`; automatic dynamic shapes are switched off, so a changing shape recompiles
as it would on Neuron). The first `--warmup` steps may compile (the first step traces the
model, the second adds the optimizer state); a graph compiled after them means the step is
not static (dynamic shapes, a partial batch, data-dependent control flow): on Neuron each
such graph costs minutes of compilation.

Output: one line per step, then one line `SMOKE_TAG <json>` with
{"ok", "runtime", "steps", "warmup", "graphs_per_step", "recompiled_steps", "message"}.
Exit status: 0 when no graph was compiled after warmup, `EXIT_RECOMPILED` when one was,
1 (a traceback) when the step itself fails.

`--vary-batch` shrinks the batch by one sample each step; it exists to prove the check
catches dynamic shapes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SMOKE_TAG = "orchestrator-smoke"
EXIT_RECOMPILED = 3
DEFAULT_WARMUP = 2


def run(job: dict, steps: int, warmup: int = DEFAULT_WARMUP, vary_batch: bool = False,
        log=print) -> dict:
    """Run the check in this process; returns the result object (see the module docstring)."""
    from entrypoints.trainer import runtime
    from entrypoints.trainer.train import Trainer

    if steps <= warmup:
        raise ValueError(f"--steps ({steps}) must be above --warmup ({warmup}) to see steady steps")
    spec = json.loads(json.dumps(job["spec"]))
    spec.setdefault("data", {})["source"] = "synthetic"
    spec["training"]["checkpoint_every"] = 0
    if spec["training"]["runtime"] == "native" and spec["training"].get("compile"):
        import torch._dynamo

        torch._dynamo.config.automatic_dynamic_shapes = False
    trainer = Trainer(dict(job, spec=spec), runtime.Dist(), checkpoint_dir=None, log=log)
    rt = trainer.runtime
    graphs_per_step: list[int] = []
    try:
        batches = trainer.batches(0)
        before = rt.compiled_graphs()
        for step in range(steps):
            images, labels = next(batches)
            if vary_batch:
                size = max(1, images.shape[0] - step)
                images, labels = images[:size], labels[:size]
            started = time.perf_counter()
            trainer.train_step(images, labels)
            rt.sync()
            elapsed = time.perf_counter() - started
            now = rt.compiled_graphs()
            graphs_per_step.append(now - before)
            before = now
            log(f"smoke step={step} batch={images.shape[0]} graphs_compiled={graphs_per_step[-1]} "
                f"step_time_s={elapsed:.4g}")
    finally:
        trainer.close()
    recompiled = [i for i, n in enumerate(graphs_per_step) if i >= warmup and n > 0]
    name = spec["training"]["runtime"] + (" + torch.compile" if spec["training"].get("compile") else "")
    if recompiled:
        message = (f"step {recompiled[0]} compiled {graphs_per_step[recompiled[0]]} new graph(s) after "
                   f"{warmup} warmup steps ({name}); steps that recompiled: {recompiled}. The step is not "
                   "static: look for changing tensor shapes (a partial last batch, variable image sizes), "
                   "data-dependent Python control flow, or host reads such as .item() inside the step. "
                   "On Neuron every new graph costs minutes of compilation.")
    elif rt.name == "native" and not spec["training"].get("compile"):
        message = f"{steps} steps ran eagerly (native without compile): nothing is compiled, nothing to check"
    else:
        message = (f"{steps} steps, graphs compiled per step {graphs_per_step}: none after the "
                   f"{warmup} warmup steps ({name})")
    return {"ok": not recompiled, "runtime": rt.name, "steps": steps, "warmup": warmup,
            "graphs_per_step": graphs_per_step, "recompiled_steps": recompiled, "message": message}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="entrypoints.trainer.smoke", description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=Path, required=True, help="the resolved job file (job.json)")
    parser.add_argument("--steps", type=int, default=5, help="steps to run (default 5)")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP,
                        help=f"steps allowed to compile (default {DEFAULT_WARMUP})")
    parser.add_argument("--vary-batch", action="store_true", help="shrink the batch each step (tests only)")
    args = parser.parse_args(argv)
    if args.warmup < 0 or args.steps <= args.warmup:
        parser.error(f"--steps ({args.steps}) must be above --warmup ({args.warmup}) to see steady steps")

    from entrypoints.shared import contract

    job = contract.load_job(args.job)
    result = run(job, args.steps, args.warmup, args.vary_batch, log=lambda line: print(line, flush=True))
    print(f"{SMOKE_TAG} {json.dumps(result)}", flush=True)
    return 0 if result["ok"] else EXIT_RECOMPILED


if __name__ == "__main__":
    sys.exit(main())
