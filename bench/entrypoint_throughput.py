"""Steady samples/s of the training entrypoint's loop against a bare loop doing the same work.

Both sides train the same small ViT (64 px, patch 8, depth 4, width 192, 3 heads, linear
patch embedding) with the same batch, AdamW and precision, on the native runtime without
torch.compile, in this one process:

- entrypoint: `entrypoints.trainer.train.Trainer` built from a job dict exactly as train.py builds it
  (synthetic pool on the device, runtime, autocast), driven through `Trainer.run_steps`, the
  loop train.py runs: batch selection by step, per-step timing with its device sync, log lines
  (to a sink), statistics, and its progress reports (a stats file rewritten every `--beat`
  seconds, as launch.py asks). Timed from outside around each chunk of steps. Alongside it
  runs what launch.py runs while training (`entrypoints.launcher.heartbeat`, in a process of its own
  as in a job): periodic compile cache pushes every `--push-interval` seconds (5 s by default,
  twelve times as often as a job's default of 60 s), each finding `--new-entries` (20) fresh
  entries of 64 KiB (written by that process just before, standing in for the compiler; after
  its warmup a job compiles next to nothing) and pushing them to a file:// store, and
  results.json rewritten from the stats file every `--beat` seconds (5; a job's: 30).
  That process is stopped (SIGSTOP) while the bare loop runs, so its cost lands on the
  entrypoint side only.
- bare: the model from `entrypoints.trainer.vit.build` with the same seed, one pre-made batch, and
  `zero_grad / forward / loss / backward / step` in a plain loop.

After warmup on both, the two alternate in chunks of `--chunk` steps for `--rounds` rounds
(ABBA order, so drifting machine load hits both alike). The ratio is the median over rounds of
entrypoint/bare samples/s. Both use `--threads` intra-op threads (default 1: on a shared
machine a spinning thread pool makes step times swing several-fold, which would drown the
loop overhead being measured). Prints one JSON object; goal: ratio at least 0.95.
`loop_overhead_us_per_step` is the entrypoint's time per step outside its own timed region
(batch selection, bookkeeping, log lines, progress reports): a figure machine load barely moves.
Run: `PYTHONPATH=. .venv/bin/python bench/entrypoint_throughput.py [--rounds 30] [--chunk 3]`
(`--no-pushes` measures the loop alone).

`--mlflow` compares instead the entrypoint with MLflow on against the same entrypoint with it
off (goal: at least 0.98). On, every log line of rank 0 (`log_every` 1, ten times a job's
default) goes through a pipe to a second process that plays launch.py's part: it reads the
lines as launch.py reads torchrun's output and feeds `entrypoints.launcher.mlflow_run.RunLogger`,
which logs them to a real `mlflow server` (started here with a sqlite store on 127.0.0.1 unless
`--mlflow-uri` names one; it runs on this machine's cores too, so its own work lands on the
"on" side). Off, the lines go to a list and that process is stopped (SIGSTOP). Same ABBA
rounds; the JSON adds the points the server holds at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time

GOAL = 0.95
MLFLOW_GOAL = 0.98
ENTRY_BYTES = 64 * 1024
MODEL = {"arch": "vit_tiny_patch16_224", "patch_embed": "linear", "image_size": 64, "num_classes": 10,
         "patch_size": 8, "depth": 4, "embed_dim": 192, "num_heads": 3}


def job(steps: int, warmup: int, batch: int, precision: str, log_every: int = 10) -> dict:
    spec = {
        "name": "bench-throughput",
        "backend": "local",
        "model": MODEL,
        "training": {"runtime": "native", "compile": False, "steps": steps, "warmup_steps": warmup,
                     "batch_size": batch, "precision": precision, "seed": 0, "checkpoint_every": 0,
                     "log_every": log_every, "optimizer": {"name": "adamw", "lr": 1e-4, "weight_decay": 0.05}},
        "data": {"source": "synthetic", "num_workers": 0},
    }
    return {"schema": 1, "job_name": "bench-throughput", "spec_hash": "0" * 64, "spec": spec,
            "instance": {"type": "ml.trn1.2xlarge"}, "workers_per_node": 1,
            "compile_cache": {"uri": None, "mode": "off"}}


class Bare:
    """The plain loop: same model, optimizer and precision, one batch made up front."""

    def __init__(self, spec: dict) -> None:
        import torch

        from entrypoints.trainer import vit

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


def heartbeat_process(folder: str, push_interval: float, beat: float, new_entries: int) -> None:
    """What launch.py runs beside the ranks (see the module docstring), until SIGTERM; then
    writes its counts to <folder>/heartbeat.json."""
    import os
    import signal
    from pathlib import Path

    from entrypoints.launcher import heartbeat
    from entrypoints.shared import atomic, compile_cache

    root = Path(folder)
    cache_dir, store, stats_file = root / "cache", (root / "store").as_uri(), root / "stats" / "rank-0.json"
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = compile_cache.CacheKey("inductor", "bench", "native", "", "cpu", 1)
    cache = {"new_entries": 0, "push_bytes": 0, "push_s": 0.0, "pushes": 0, "warnings": []}
    pusher = heartbeat.CachePusher(store, key, cache_dir, cache, log=lambda line: None)
    made = [0]
    real_has_new = pusher.has_new

    def has_new() -> bool:
        # The compiler's output since the last look, written just before the look.
        for _ in range(new_entries):
            folder_ = cache_dir / "fxgraph" / f"{made[0] % 97:02d}"
            folder_.mkdir(parents=True, exist_ok=True)
            (folder_ / f"entry-{made[0]}").write_bytes(os.urandom(ENTRY_BYTES))
            made[0] += 1
        return real_has_new()

    pusher.has_new = has_new
    beats = [0]

    def on_beat() -> None:  # launch.py's heartbeat: read the rank's report, rewrite results.json
        stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
        data = json.dumps({"status": "running", "steps_done": stats.get("steps_done"), "cache": cache}).encode()
        atomic.write_bytes(root / "results.json", data, durable=False)
        beats[0] += 1

    done = []
    signal.signal(signal.SIGTERM, lambda *_: done.append(1))
    thread = heartbeat.Heartbeat(warmed=lambda: True, pusher=pusher, on_beat=on_beat, push_interval_s=push_interval,
                                 beat_s=beat, log=lambda line: None, tick_s=min(1.0, push_interval / 2))
    thread.start()
    while not done:
        time.sleep(0.05)
    thread.stop()
    (root / "heartbeat.json").write_text(json.dumps({"pushes": cache["pushes"], "pushed_entries": cache["new_entries"],
                                                     "push_bytes": cache["push_bytes"], "push_s": cache["push_s"],
                                                     "beats": beats[0], "warnings": cache["warnings"]}))


def mlflow_process(uri: str, experiment: str) -> None:
    """launch.py's part with MLflow on: rank 0's lines from stdin into the run logger, until
    EOF; "ready" on stdout once the run exists, then the figures as JSON."""
    import sys
    import threading

    from entrypoints.launcher import mlflow_run

    spec_job = {**job(1, 0, 1, "fp32"), "tags": {"orchestrator:job": "bench-throughput"},
                "mlflow": {"tracking_uri": uri, "experiment": experiment, "run_name": "bench-throughput",
                           "arn": False}}
    logger = mlflow_run.RunLogger(spec_job, lambda line: print(line, file=sys.stderr, flush=True)).start()

    def ready() -> None:
        while logger.run_id is None and logger.warning is None:
            time.sleep(0.1)
        print("ready", flush=True)

    threading.Thread(target=ready, daemon=True).start()
    for line in sys.stdin:
        logger.line(line)
    warning = logger.finish("completed")
    from mlflow import MlflowClient

    points = len(MlflowClient(uri).get_metric_history(logger.run_id, "train/loss")) if logger.run_id else 0
    print(json.dumps({"run_id": logger.run_id, "warning": warning, "dropped": logger.dropped,
                      "train_loss_points": points}), flush=True)


def start_mlflow_server(folder) -> tuple[object, str]:
    """`mlflow server` on a free loopback port with a sqlite store in `folder`; (process, URL)."""
    import os
    import socket
    import subprocess
    import sys
    import urllib.request
    from pathlib import Path

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    exe = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen([str(exe), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                             "--backend-store-uri", f"sqlite:///{folder}/mlflow.db", "--artifacts-destination",
                             f"{folder}/artifacts"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}, start_new_session=True)
    while True:
        if proc.poll() is not None:
            raise SystemExit("mlflow server exited")
        try:
            urllib.request.urlopen(f"{url}/api/2.0/mlflow/experiments/search?max_results=1", timeout=60).close()
            return proc, url
        except OSError:
            time.sleep(0.5)


def mlflow_main(args) -> None:
    """MLflow on against off (see the module docstring)."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    import uuid
    from pathlib import Path

    import torch

    torch.set_num_threads(args.threads)
    from entrypoints.trainer import runtime, train

    work = Path(tempfile.mkdtemp(prefix="bench-mlflow-"))
    server, uri = (None, args.mlflow_uri) if args.mlflow_uri else start_mlflow_server(work)
    helper = subprocess.Popen([sys.executable, __file__, "--mlflow-process", uri, f"bench-{uuid.uuid4().hex[:8]}"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert helper.stdout.readline().strip() == "ready"
    total = args.warmup + args.rounds * args.chunk * 2
    spec_job = job(total, args.warmup, args.batch, args.precision, log_every=1)
    sink: list[str] = []
    side = ["off"]

    def log(line: str) -> None:
        if side[0] == "on":
            helper.stdin.write(line + "\n")
            helper.stdin.flush()
        else:
            sink.append(line)

    trainer = train.Trainer(spec_job, runtime.Dist(), checkpoint_dir=None, log=log)
    stats = train.RankStats(0, 1, 0, "native", args.precision, args.batch)
    trainer.run_steps(0, args.warmup, stats, time.time())
    rates: dict[str, list[float]] = {"on": [], "off": []}
    step, lines_on = args.warmup, 0
    os.kill(helper.pid, signal.SIGSTOP)
    for round_ in range(args.rounds):
        for which in (("on", "off") if round_ % 2 == 0 else ("off", "on")):
            side[0] = which
            os.kill(helper.pid, signal.SIGCONT if which == "on" else signal.SIGSTOP)
            started = time.perf_counter()
            trainer.run_steps(step, step + args.chunk, stats, time.time())
            rates[which].append(args.batch * args.chunk / (time.perf_counter() - started))
            os.kill(helper.pid, signal.SIGSTOP)
            lines_on += args.chunk if which == "on" else 0
            step += args.chunk
    os.kill(helper.pid, signal.SIGCONT)
    trainer.close()
    helper.stdin.close()
    logged = json.loads(helper.stdout.read().strip().splitlines()[-1])
    helper.wait(timeout=600)
    if server is not None:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    shutil.rmtree(work, ignore_errors=True)
    ratios = [a / b for a, b in zip(rates["on"], rates["off"], strict=True)]
    print(json.dumps({
        "mlflow_on_samples_per_s": round(statistics.median(rates["on"]), 2),
        "mlflow_off_samples_per_s": round(statistics.median(rates["off"]), 2),
        "ratio": round(statistics.median(ratios), 3), "goal": MLFLOW_GOAL,
        "goal_met": statistics.median(ratios) >= MLFLOW_GOAL,
        "ratio_of_totals": round(sum(rates["on"]) / sum(rates["off"]), 3),
        "round_ratios": [round(r, 3) for r in ratios],
        "lines_sent_with_mlflow_on": lines_on, "server_train_loss_points": logged["train_loss_points"],
        "logger_warning": logged["warning"], "dropped": logged["dropped"],
        "tracking_server": "given" if args.mlflow_uri else "mlflow server on this machine (sqlite, loopback)",
        "rounds": args.rounds, "chunk": args.chunk, "model": MODEL, "batch": args.batch,
        "precision": args.precision, "log_every": 1, "torch": torch.__version__, "threads": torch.get_num_threads(),
    }))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--chunk", type=int, default=3, help="steps per side per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--push-interval", type=float, default=5.0, help="seconds between compile cache pushes")
    parser.add_argument("--beat", type=float, default=5.0, help="seconds between progress reports")
    parser.add_argument("--new-entries", type=int, default=20, help="fresh 64 KiB entries before each push")
    parser.add_argument("--no-pushes", action="store_true", help="no heartbeat process, no progress reports")
    parser.add_argument("--heartbeat-process", help=argparse.SUPPRESS)
    parser.add_argument("--mlflow", action="store_true", help="compare MLflow on against off (see above)")
    parser.add_argument("--mlflow-uri", help="with --mlflow: this tracking server instead of one started here")
    parser.add_argument("--mlflow-process", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mlflow_process:
        mlflow_process(*args.mlflow_process)
        return
    if args.mlflow:
        mlflow_main(args)
        return
    if args.heartbeat_process:
        heartbeat_process(args.heartbeat_process, args.push_interval, args.beat, args.new_entries)
        return

    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import torch

    torch.set_num_threads(args.threads)

    from entrypoints.trainer import runtime, train

    work = Path(tempfile.mkdtemp(prefix="bench-throughput-"))
    helper = None
    if not args.no_pushes:
        helper = subprocess.Popen([sys.executable, __file__, "--heartbeat-process", str(work), "--push-interval",
                                   str(args.push_interval), "--beat", str(args.beat), "--new-entries",
                                   str(args.new_entries)], env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
        os.kill(helper.pid, signal.SIGSTOP)

    def helper_runs(running: bool) -> None:
        if helper is not None:
            os.kill(helper.pid, signal.SIGCONT if running else signal.SIGSTOP)

    total = args.warmup + args.rounds * args.chunk
    spec_job = job(total, args.warmup, args.batch, args.precision)
    log_lines: list[str] = []
    beat = None if args.no_pushes else (lambda s: train.write_stats(s, work / "stats", durable=False))
    trainer = train.Trainer(spec_job, runtime.Dist(), checkpoint_dir=None, log=log_lines.append, beat=beat,
                            beat_s=args.beat)
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
            helper_runs(side == "entry")
            started = time.perf_counter()
            if side == "entry":
                trainer.run_steps(step, step + args.chunk, stats, time.time())
            else:
                bare.steps(args.chunk)
            elapsed = time.perf_counter() - started
            helper_runs(False)
            rate = args.batch * args.chunk / elapsed
            if side == "entry":
                outside_step_s.append((elapsed - sum(stats.step_times_s[timed_before:])) / args.chunk)
            (entry_rates if side == "entry" else bare_rates).append(rate)
        step += args.chunk
    trainer.finish(stats)
    trainer.close()
    pushes = None
    if helper is not None:
        helper_runs(True)
        helper.terminate()
        helper.wait(timeout=120)
        pushes = json.loads((work / "heartbeat.json").read_text())
    shutil.rmtree(work, ignore_errors=True)

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
        "heartbeat": pushes and {**pushes, "push_interval_s": args.push_interval, "beat_s": args.beat,
                                 "new_entries_per_push": args.new_entries},
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
