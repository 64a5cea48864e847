"""Steady samples/s of the training entrypoint's loop against a bare loop doing the same work.

Both sides train the same small ViT (64 px, patch 8, depth 4, width 192, 3 heads, linear
patch embedding) with the same batch, AdamW and precision, on the native runtime without
torch.compile, in this one process:

- entrypoint: `entrypoints.train.Trainer` built from a job dict exactly as train.py builds it
  (synthetic pool on the device, runtime, autocast), driven through `Trainer.run_steps`, the
  loop train.py runs: batch selection by step, per-step timing with its device sync, log lines
  (to a sink), statistics. Timed from outside around each chunk of steps.
- bare: the model from `entrypoints.vit.build` with the same seed, one pre-made batch, and
  `zero_grad / forward / loss / backward / step` in a plain loop.

After warmup on both, the two alternate in chunks of `--chunk` steps for `--rounds` rounds
(ABBA order, so drifting machine load hits both alike). The ratio is the median over rounds of
entrypoint/bare samples/s. Both use `--threads` intra-op threads (default 1: on a shared
machine a spinning thread pool makes step times swing several-fold, which would drown the
loop overhead being measured). Prints one JSON object; goal: ratio at least 0.95.
`loop_overhead_us_per_step` is the entrypoint's time per step outside its own timed region
(batch selection, bookkeeping, log lines): a figure machine load barely moves.
Run: `PYTHONPATH=. .venv/bin/python bench/entrypoint_throughput.py [--rounds 30] [--chunk 3]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time

GOAL = 0.95
MODEL = {"arch": "vit_tiny_patch16_224", "patch_embed": "linear", "image_size": 64, "num_classes": 10,
         "patch_size": 8, "depth": 4, "embed_dim": 192, "num_heads": 3}


def job(steps: int, warmup: int, batch: int, precision: str) -> dict:
    spec = {
        "name": "bench-throughput",
        "backend": "local",
        "model": MODEL,
        "training": {"runtime": "native", "compile": False, "steps": steps, "warmup_steps": warmup,
                     "batch_size": batch, "precision": precision, "seed": 0, "checkpoint_every": 0,
                     "log_every": 10, "optimizer": {"name": "adamw", "lr": 1e-4, "weight_decay": 0.05}},
        "data": {"source": "synthetic", "num_workers": 0},
    }
    return {"schema": 1, "job_name": "bench-throughput", "spec_hash": "0" * 64, "spec": spec,
            "instance": {"type": "ml.trn1.2xlarge"}, "workers_per_node": 1,
            "compile_cache": {"uri": None, "mode": "off"}}


class Bare:
    """The plain loop: same model, optimizer and precision, one batch made up front."""

    def __init__(self, spec: dict) -> None:
        import torch

        from entrypoints import vit

        training = spec["training"]
        torch.manual_seed(training["seed"])
        self.model = vit.build(spec["model"])
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=training["optimizer"]["lr"],
                                           weight_decay=training["optimizer"]["weight_decay"])
        size, batch = spec["model"]["image_size"], training["batch_size"]
        self.images = torch.randn(batch, 3, size, size)
        self.labels = torch.randint(0, spec["model"]["num_classes"], (batch,))
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.bf16 = training["precision"] == "bf16"

    def steps(self, count: int) -> None:
        import torch

        model, optimizer, loss_fn, images, labels = (self.model, self.optimizer, self.loss_fn, self.images,
                                                     self.labels)
        for _ in range(count):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext():
                loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--chunk", type=int, default=3, help="steps per side per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)

    from entrypoints import runtime, train

    total = args.warmup + args.rounds * args.chunk
    spec_job = job(total, args.warmup, args.batch, args.precision)
    log_lines: list[str] = []
    trainer = train.Trainer(spec_job, runtime.Dist(), checkpoint_dir=None, log=log_lines.append)
    stats = train.RankStats(0, 1, 0, "native", args.precision, args.batch)
    bare = Bare(spec_job["spec"])

    trainer.run_steps(0, args.warmup, stats, time.time())
    bare.steps(args.warmup)
    entry_rates, bare_rates, outside_step_s = [], [], []
    step = args.warmup
    for round_ in range(args.rounds):
        order = ("entry", "bare") if round_ % 2 == 0 else ("bare", "entry")
        for side in order:
            timed_before = len(stats.step_times_s)
            started = time.perf_counter()
            if side == "entry":
                trainer.run_steps(step, step + args.chunk, stats, time.time())
            else:
                bare.steps(args.chunk)
            elapsed = time.perf_counter() - started
            rate = args.batch * args.chunk / elapsed
            if side == "entry":
                outside_step_s.append((elapsed - sum(stats.step_times_s[timed_before:])) / args.chunk)
            (entry_rates if side == "entry" else bare_rates).append(rate)
        step += args.chunk
    trainer.finish(stats)
    trainer.close()

    ratios = [e / b for e, b in zip(entry_rates, bare_rates, strict=True)]
    print(json.dumps({
        "entrypoint_samples_per_s": round(statistics.median(entry_rates), 2),
        "bare_samples_per_s": round(statistics.median(bare_rates), 2),
        "ratio": round(statistics.median(ratios), 3),
        "goal": GOAL,
        "goal_met": statistics.median(ratios) >= GOAL,
        "ratio_of_totals": round(sum(entry_rates) / sum(bare_rates), 3),
        "round_ratios": [round(r, 3) for r in ratios],
        "entrypoint_own_timing_samples_per_s": round(stats.samples_per_s, 2),
        "loop_overhead_us_per_step": round(statistics.median(outside_step_s) * 1e6, 1),
        "step_time_p50_s": round(statistics.median(stats.step_times_s), 4),
        "log_lines": len(log_lines),
        "rounds": args.rounds,
        "chunk": args.chunk,
        "model": MODEL,
        "batch": args.batch,
        "precision": args.precision,
        "optimizer": "adamw",
        "runtime": "native (eager, CPU)",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }))


if __name__ == "__main__":
    main()
