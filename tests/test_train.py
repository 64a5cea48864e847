"""entrypoints/trainer/train.py, runtime.py, data.py: the per-rank loop, as launch.py runs it."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from job_waits import patience

from entrypoints.shared import contract

# torch and the modules that import it are imported when the first test here runs, not at
# collection: every test process collects this file, most never run it.
torch = data = flops = runtime = train = None


@pytest.fixture(autouse=True, scope="module")
def _torch_modules():
    global torch, data, flops, runtime, train
    import torch

    from entrypoints.trainer import data, flops, runtime, train

ROOT = Path(__file__).resolve().parents[1]
STATS_FIELDS = {"rank", "world_size", "local_rank", "steps_done", "start_step", "resumed_from", "step_times_s",
                "time_to_first_step_s", "compile_s", "final_loss", "samples_per_s", "runtime", "precision",
                "batch_size", "versions"}


def tiny_spec(**training) -> dict:
    spec = {
        "name": "tiny",
        "backend": "local",
        "model": {"arch": "vit_tiny_patch16_224", "patch_embed": "linear", "image_size": 32, "num_classes": 5,
                  "patch_size": 8, "depth": 1, "embed_dim": 32, "num_heads": 2},
        "training": {"runtime": "native", "compile": False, "steps": 6, "warmup_steps": 2, "batch_size": 4,
                     "precision": "fp32", "seed": 3, "checkpoint_every": 0, "log_every": 2,
                     "optimizer": {"name": "adamw", "lr": 1e-3, "weight_decay": 0.01, "momentum": 0.9}},
        "data": {"source": "synthetic", "num_workers": 0},
    }
    spec["training"].update(training)
    return spec


def write_job(path: Path, spec: dict) -> Path:
    job = {"schema": contract.JOB_FILE_SCHEMA, "job_name": "tiny-test", "spec_hash": "0" * 64, "spec": spec,
           "instance": {"type": "ml.trn1.2xlarge"}, "workers_per_node": 1,
           "compile_cache": {"uri": None, "mode": "off"}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(job))
    return path


class Job:
    """A job's files under tmp: job.json, the SM_* dirs, and how to run train.py on them."""

    def __init__(self, root: Path, spec: dict, channels: dict[str, Path] | None = None) -> None:
        self.root = root
        self.job = write_job(root / "job.json", spec)
        self.stats = root / "stats"
        self.model = root / "model"
        self.checkpoints = root / "checkpoints"
        self.env = dict(os.environ, PYTHONPATH=str(ROOT), SM_MODEL_DIR=str(self.model),
                        SM_CHECKPOINT_DIR=str(self.checkpoints), SM_OUTPUT_DATA_DIR=str(root / "output"),
                        SM_CHANNELS=json.dumps(sorted(channels or {})))
        from entrypoints.trainer.train import STOP_AT_STEP_ENV  # (test_tensorboard uses Job too)

        self.env.pop(STOP_AT_STEP_ENV, None)
        for name, path in (channels or {}).items():
            self.env[contract.channel_env(name)] = str(path)

    def run(self, *, torchrun_procs: int = 0, extra_env: dict | None = None, timeout: int = 300):
        args = ["-m", "entrypoints.trainer.train", "--job", str(self.job), "--stats-dir", str(self.stats)]
        if torchrun_procs:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            args = ["-m", "torch.distributed.run", "--nnodes", "1", "--node_rank", "0", "--nproc_per_node",
                    str(torchrun_procs), "--master_addr", "127.0.0.1", "--master_port", str(port)] + args
        return subprocess.run([sys.executable, *args], cwd=ROOT, env=dict(self.env, **(extra_env or {})),
                              capture_output=True, text=True, timeout=timeout)

    def rank_stats(self, rank: int = 0) -> dict:
        return json.loads((self.stats / f"rank-{rank}.json").read_text())


def metric_values(output: str, tag: str, key: str) -> list[float]:
    return [float(m) for m in re.findall(contract.metric_regex(tag, key), output)]


def test_native_single_process_trains_and_reports(tmp_path):
    job = Job(tmp_path, tiny_spec())
    proc = job.run()
    assert proc.returncode == 0, proc.stderr
    stats = job.rank_stats()
    assert STATS_FIELDS <= set(stats)
    assert stats["error"] is None
    assert (stats["rank"], stats["world_size"], stats["local_rank"]) == (0, 1, 0)
    assert stats["steps_done"] == 6 and stats["start_step"] == 0 and stats["resumed_from"] is None
    assert len(stats["step_times_s"]) == 6 - 2
    assert math.isfinite(stats["final_loss"])
    assert stats["samples_per_s"] > 0 and stats["time_to_first_step_s"] > 0 and stats["compile_s"] >= 0
    assert (stats["runtime"], stats["precision"], stats["batch_size"]) == ("native", "fp32", 4)
    assert set(stats["versions"]) == {"python", "torch", "torch_xla", "timm", "neuronx_cc"}
    assert stats["versions"]["torch"] == torch.__version__
    # The host's first rank counted the model's FLOPs per training sample (entrypoints.trainer.flops).
    assert stats["flops_per_sample"] == flops.training_flops_per_sample(tiny_spec()["model"]) > 0
    # Every metric the request's MetricDefinitions name is in the log, as SageMaker parses it.
    for name, (tag, key) in contract.METRIC_NAMES.items():
        assert metric_values(proc.stdout, tag, key), f"{name} not found in the log"
    assert [int(v) for v in metric_values(proc.stdout, contract.METRICS_TAG, "step")] == [2, 4, 6]
    losses = metric_values(proc.stdout, contract.METRICS_TAG, "loss")
    assert losses[-1] == pytest.approx(stats["final_loss"], rel=1e-4)
    weights = torch.load(job.model / "model.pt", weights_only=True)
    assert weights["patch_embed.proj.weight"].shape == (32, 3 * 8 * 8)
    assert not job.checkpoints.exists()


def test_the_precompile_pass_runs_a_few_steps_from_the_start_and_leaves_nothing_behind(tmp_path):
    """Under neuron_parallel_compile (contract.PRECOMPILE_STEPS_ENV) a rank runs that many steps
    from step 0, even beside a checkpoint, writes no checkpoint and saves no model."""
    job = Job(tmp_path, tiny_spec(checkpoint_every=1))
    job.checkpoints.mkdir(parents=True)
    (job.checkpoints / "ckpt-4.pt").write_bytes(b"a checkpoint the pass must not read")
    proc = job.run(extra_env={contract.PRECOMPILE_STEPS_ENV: "3", contract.PROGRESS_REPORT_ENV: "0.01"})
    assert proc.returncode == 0, proc.stderr
    stats = job.rank_stats()
    assert (stats["steps_done"], stats["start_step"], stats["resumed_from"]) == (3, 0, None)
    assert sorted(p.name for p in job.checkpoints.iterdir()) == ["ckpt-4.pt"]
    assert not (job.model / "model.pt").exists()


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(tmp_path):
    # Resuming at step 6 (not a multiple of the synthetic pool size) proves the batch of a step
    # follows its index, not the restart.
    assert 6 % data.POOL_SIZE
    spec = tiny_spec(steps=8, checkpoint_every=3)
    whole = Job(tmp_path / "whole", spec)
    assert whole.run().returncode == 0
    assert sorted(p.name for p in whole.checkpoints.iterdir()) == ["ckpt-000000006.pt", "ckpt-000000008.pt"]

    broken = Job(tmp_path / "broken", spec)
    killed = broken.run(extra_env={train.STOP_AT_STEP_ENV: "7"})
    assert killed.returncode == -signal.SIGKILL
    assert not (broken.model / "model.pt").exists()
    assert sorted(p.name for p in broken.checkpoints.iterdir()) == ["ckpt-000000003.pt", "ckpt-000000006.pt"]

    again = broken.run()
    assert again.returncode == 0, again.stderr
    stats = broken.rank_stats()
    assert (stats["start_step"], stats["resumed_from"], stats["steps_done"]) == (6, 6, 2)
    assert "resumed from checkpoint step 6" in again.stdout
    expected = torch.load(whole.model / "model.pt", weights_only=True)
    got = torch.load(broken.model / "model.pt", weights_only=True)
    assert expected.keys() == got.keys()
    for key in expected:
        assert torch.equal(expected[key], got[key]), key
    final_opt = torch.load(whole.checkpoints / "ckpt-000000008.pt", weights_only=False)["optimizer"]
    resumed_opt = torch.load(broken.checkpoints / "ckpt-000000008.pt", weights_only=False)["optimizer"]
    for index, state in final_opt["state"].items():
        assert torch.equal(state["exp_avg_sq"], resumed_opt["state"][index]["exp_avg_sq"])


def test_unreadable_or_foreign_newest_checkpoint_is_skipped(tmp_path):
    spec = tiny_spec(steps=4, checkpoint_every=2)
    job = {"spec": spec}
    first = train.Trainer(job, runtime.Dist(), checkpoint_dir=tmp_path, log=lambda line: None)
    first.run(train.RankStats(0, 1, 0, "native", "fp32", 4), 0.0)
    assert [s for s, _ in train.list_checkpoints(tmp_path)] == [4, 2]
    train.checkpoint_path(tmp_path, 4).write_bytes(train.checkpoint_path(tmp_path, 4).read_bytes()[:1000])
    other = tiny_spec(steps=4)
    other["model"]["depth"] = 2
    foreign = train.Trainer({"spec": other}, runtime.Dist(), checkpoint_dir=tmp_path / "x", log=lambda line: None)
    foreign.save_checkpoint(6)
    (tmp_path / "x" / "ckpt-000000006.pt").rename(tmp_path / "ckpt-000000006.pt")
    (tmp_path / ".ckpt-000000008.pt.tmp-1").write_bytes(b"half written")

    lines: list[str] = []
    resumed = train.Trainer(job, runtime.Dist(), checkpoint_dir=tmp_path, log=lines.append)
    assert (resumed.start_step, resumed.resumed_from) == (2, 2)
    assert any("ckpt-000000006.pt belongs to another model" in line for line in lines)
    assert any("ckpt-000000004.pt does not load" in line for line in lines)


def test_no_half_written_checkpoint_ever_appears_in_the_checkpoint_dir(tmp_path, monkeypatch):
    # SageMaker uploads whatever appears in /opt/ml/checkpoints: while a checkpoint is being
    # written, the folder must hold finished checkpoints only, the temporary file lying elsewhere.
    folder = tmp_path / "checkpoints"
    seen: list[tuple[str, list[str]]] = []
    save = torch.save

    def watching_save(obj, fh, *args, **kwargs):
        seen.append((fh.name, sorted(os.listdir(folder)) if folder.exists() else []))
        return save(obj, fh, *args, **kwargs)

    monkeypatch.setattr(train.torch, "save", watching_save)
    trainer = train.Trainer({"spec": tiny_spec(steps=6, checkpoint_every=2)}, runtime.Dist(), checkpoint_dir=folder,
                            log=lambda line: None)
    trainer.run(train.RankStats(0, 1, 0, "native", "fp32", 4), 0.0)
    assert len(seen) == 3
    for written, listing in seen:
        assert Path(written).parent == train.staging_dir(folder) and Path(written).parent != folder
        assert all(re.fullmatch(r"ckpt-\d{9}\.pt", name) for name in listing), listing
    assert sorted(os.listdir(folder)) == ["ckpt-000000004.pt", "ckpt-000000006.pt"]
    assert os.listdir(train.staging_dir(folder)) == []


def test_the_hosts_first_rank_reports_progress_after_warmup_then_every_interval():
    spec = tiny_spec(steps=6, warmup_steps=2)
    beats: list[dict] = []

    def beat(stats):
        beats.append({"steps_done": stats.steps_done, "timed": len(stats.step_times_s),
                      "loss": stats.final_loss, "cache": dict(stats.compiler_cache)})

    # An interval longer than the run: one report, right after the warmup steps.
    trainer = train.Trainer({"spec": spec}, runtime.Dist(), log=lambda line: None, beat=beat, beat_s=3600)
    trainer.run(train.RankStats(0, 1, 0, "native", "fp32", 4), 0.0)
    assert [b["steps_done"] for b in beats] == [2]
    assert beats[0]["timed"] == 0 and beats[0]["loss"] is not None
    # An interval shorter than a step: a report after every step from the warmup on.
    beats.clear()
    trainer = train.Trainer({"spec": spec}, runtime.Dist(), log=lambda line: None, beat=beat, beat_s=1e-9)
    trainer.run(train.RankStats(0, 1, 0, "native", "fp32", 4), 0.0)
    assert [b["steps_done"] for b in beats] == [2, 3, 4, 5, 6]
    assert [b["timed"] for b in beats] == [0, 1, 2, 3, 4]
    # Other ranks of the host report nothing (launch.py reads the host's first rank).
    beats.clear()
    other = runtime.Dist(local_rank=1)  # (a single-process group, so nothing rendezvouses)
    trainer = train.Trainer({"spec": spec}, other, log=lambda line: None, beat=beat, beat_s=1e-9)
    trainer.run(train.RankStats(0, 1, 1, "native", "fp32", 4), 0.0)
    assert beats == []


def test_heartbeat_stats_files_are_whole_and_replaced_atomically(tmp_path):
    stats = train.RankStats(0, 1, 0, "native", "fp32", 4, steps_done=3, step_times_s=[0.1, 0.2])
    path = train.write_stats(stats, tmp_path, durable=False)
    assert json.loads(path.read_text())["steps_done"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-0.json"]  # no temporary left behind


def test_an_exception_writes_stats_with_the_error_and_exits_non_zero(tmp_path):
    job = Job(tmp_path, dict(tiny_spec(), data={"source": f"file://{tmp_path}/no-such-dir", "num_workers": 0}))
    proc = job.run()
    assert proc.returncode != 0
    stats = job.rank_stats()
    assert stats["error"].startswith("FileNotFoundError")
    assert "no-such-dir" in stats["error"]
    assert stats["steps_done"] == 0
    assert "Traceback" in proc.stderr

    job.job.write_text(json.dumps({"schema": 99}))
    proc = job.run()
    assert proc.returncode != 0
    stats = job.rank_stats()
    assert stats["error"].startswith("ValueError") and "schema 99" in stats["error"]
    assert (stats["rank"], stats["world_size"]) == (0, 1)


def test_sigterm_ends_through_the_error_path(tmp_path):
    job = Job(tmp_path, tiny_spec(steps=1_000_000, log_every=1))
    args = [sys.executable, "-m", "entrypoints.trainer.train", "--job", str(job.job), "--stats-dir", str(job.stats)]
    proc = subprocess.Popen(args, cwd=ROOT, env=job.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in proc.stdout:
            if line.startswith(contract.METRICS_TAG):
                proc.terminate()
                break
        assert proc.wait(timeout=patience(60)) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stats = job.rank_stats()
    assert stats["error"] == "SystemExit: terminated by SIGTERM"
    assert stats["steps_done"] >= 1


@pytest.mark.slow
def test_two_ranks_with_gloo_through_torchrun(tmp_path):
    job = Job(tmp_path, tiny_spec(steps=4, warmup_steps=1, checkpoint_every=2))
    proc = job.run(torchrun_procs=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [job.rank_stats(r) for r in (0, 1)]
    assert [(s["rank"], s["world_size"], s["local_rank"]) for s in ranks] == [(0, 2, 0), (1, 2, 1)]
    assert all(s["steps_done"] == 4 and s["error"] is None for s in ranks)
    # Global throughput: both ranks' samples per step.
    step_time = ranks[0]["step_times_s"]
    assert ranks[0]["samples_per_s"] == pytest.approx(4 * 2 * len(step_time) / sum(step_time))
    # Only rank 0 logs: one metrics line per log step, one summary.
    assert len(metric_values(proc.stdout, contract.METRICS_TAG, "step")) == 2
    assert len(metric_values(proc.stdout, contract.SUMMARY_TAG, "samples_per_s")) == 1
    assert (job.model / "model.pt").exists()
    assert [s for s, _ in train.list_checkpoints(job.checkpoints)] == [4, 2]


@pytest.mark.slow
def test_compiled_ddp_job_with_a_warm_inductor_cache_reuses_every_graph(tmp_path):
    # Two ranks, torch.compile, the second job on the first one's cache dir (as launch.py lays
    # it down after a pull). A model whose gradients fit one DDP bucket is compiled unsplit, so
    # the warm job hits AOTAutograd's cache as well as inductor's: nothing is traced again.
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    counts = []
    for name in ("cold", "warm"):
        job = Job(tmp_path / name, tiny_spec(compile=True, steps=3, warmup_steps=1))
        proc = job.run(torchrun_procs=2, extra_env=cache, timeout=patience(600))
        assert proc.returncode == 0, proc.stderr[-3000:]
        stats = job.rank_stats()
        assert stats["ddp_split_graphs"] is False
        counts.append(stats["compiler_cache"])
    cold, warm = counts
    assert cold["fxgraph_miss"] >= 1 and cold["aotautograd_miss"] >= 1 and cold["aotautograd_bypass"] == 0
    assert warm["fxgraph_miss"] == 0 and warm["aotautograd_miss"] == 0 and warm["aotautograd_bypass"] == 0
    assert warm["aotautograd_hit"] == cold["aotautograd_miss"]
    # Inductor's CPU ISA probes: whichever rank probed first in the cold job left memos in
    # the cache, so the warm job answers every probe from them and starts no probe process.
    assert cold["isa_probe_hit"] + cold["isa_probe_miss"] >= 1
    assert warm["isa_probe_miss"] == 0
    assert warm["isa_probe_hit"] == cold["isa_probe_hit"] + cold["isa_probe_miss"]


DDP_SYNC_CHECK = """
import sys
import torch
import torch.distributed as dist
from entrypoints.trainer import runtime, vit
d = runtime.Dist.from_env()
rt = runtime.create("native", d, "fp32")
rt.setup()
torch.manual_seed(0)
module = vit.build({"arch": "vit_tiny_patch16_224", "image_size": 32, "patch_size": 8, "depth": 1,
                    "embed_dim": 32, "num_heads": 2, "num_classes": 5})
opt = torch.optim.SGD(module.parameters(), lr=0.1)
model = rt.prepare(module, compile=True)
torch.manual_seed(100 + d.rank)  # each rank its own data: only all-reduced gradients keep them equal
for _ in range(3):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.randint(0, 5, (4,))).backward()
    opt.step()
flat = torch.cat([p.detach().flatten() for p in module.parameters()])
seen = [torch.zeros_like(flat) for _ in range(d.world_size)]
dist.all_gather(seen, flat)
if d.rank == 0:
    print("split", rt.ddp_split_graphs, "diff", float((seen[0] - seen[1]).abs().max()),
          "moved", float((seen[0] - flat.new_tensor(0)).abs().sum()) > 0)
rt.shutdown()
"""


@pytest.mark.slow
def test_compiled_ddp_without_the_graph_split_still_averages_gradients(tmp_path):
    script = tmp_path / "ddp_sync.py"
    script.write_text(DDP_SYNC_CHECK)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TORCHINDUCTOR_COMPILE_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_addr", "127.0.0.1", "--master_port", str(port), str(script)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=patience(600))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "split False diff 0.0 moved True" in proc.stdout


def test_ddp_graph_split_only_when_gradients_span_more_than_one_bucket():
    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 2))
    model[1].bias.requires_grad_(False)  # frozen parameters are not all-reduced
    assert runtime.gradient_bytes(model) == (10 * 10 + 10 + 10 * 2) * 4
    assert runtime.gradient_bytes(model.to(torch.bfloat16)) == (10 * 10 + 10 + 10 * 2) * 2
    cap = 25 * 1024 * 1024  # DDP's default bucket_cap_mb
    assert not runtime.ddp_split_pays(cap, cap)
    assert runtime.ddp_split_pays(cap + 1, cap)
    # ViT-Tiny's gradients fit one default bucket in fp32; ViT-Base's (86M parameters) do not.
    assert not runtime.ddp_split_pays(5_700_000 * 4, cap)
    assert runtime.ddp_split_pays(86_000_000 * 4, cap)


def test_eager_runtimes_report_no_compiler_cache():
    native = runtime.NativeRuntime(runtime.Dist(), "fp32")
    assert native.compiler_cache() == {} and native.ddp_split_graphs is None


@pytest.mark.slow
def test_xla_runtime_on_cpu(tmp_path):
    job = Job(tmp_path, tiny_spec(runtime="xla", precision="bf16", steps=3, warmup_steps=1, log_every=1))
    proc = job.run(extra_env={"PJRT_DEVICE": "CPU"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = job.rank_stats()
    assert (stats["runtime"], stats["precision"], stats["steps_done"]) == ("xla", "bf16", 3)
    assert stats["graphs_compiled"] >= 1
    assert math.isfinite(stats["final_loss"])
    assert len(metric_values(proc.stdout, contract.METRICS_TAG, "loss")) == 3
    assert torch.load(job.model / "model.pt", weights_only=True)["head.weight"].device.type == "cpu"


def make_image_folder(root: Path, classes: int = 2, per_class: int = 6) -> Path:
    from PIL import Image

    gen = torch.Generator().manual_seed(0)
    for c in range(classes):
        folder = root / f"class{c}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            height, width = 20 + i, 28 - i  # odd sizes: the transform must resize
            pixels = torch.randint(0, 256, (height, width, 3), generator=gen, dtype=torch.uint8)
            Image.fromarray(pixels.numpy()).save(folder / f"img{i}.png")
    return root


def test_training_on_an_image_folder_channel(tmp_path):
    images = make_image_folder(tmp_path / "train")
    job = Job(tmp_path / "job", dict(tiny_spec(steps=4, warmup_steps=1),
                                     data={"source": "s3://bucket/train", "num_workers": 1}),
              channels={"train": images})
    proc = job.run()
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = job.rank_stats()
    assert stats["steps_done"] == 4 and math.isfinite(stats["final_loss"])


def test_image_folder_batches_are_static_sharded_and_resumable(tmp_path):
    root = make_image_folder(tmp_path / "train", per_class=7)
    rt = runtime.NativeRuntime(runtime.Dist(), "fp32")

    def source(rank: int, world: int) -> data.ImageFolderSource:
        return data.ImageFolderSource(rt, root, batch_size=3, image_size=16, num_classes=5, seed=1,
                                      dist=runtime.Dist(rank=rank, world_size=world), num_workers=0)

    single = source(0, 1)
    assert single.steps_per_epoch == 14 // 3
    stream = single.batches(0)
    run = [next(stream) for _ in range(7)]  # crosses an epoch boundary
    assert all(images.shape == (3, 3, 16, 16) and labels.shape == (3,) for images, labels in run)
    resumed = single.batches(5)
    for step in (5, 6):
        images, labels = next(resumed)
        assert torch.equal(images, run[step][0]) and torch.equal(labels, run[step][1])

    halves = [source(r, 2) for r in (0, 1)]
    indices = [list(h.sampler) for h in halves]
    assert len(indices[0]) == len(indices[1]) == 7
    assert not set(indices[0]) & set(indices[1])
    with pytest.raises(ValueError, match="fewer than one batch"):
        data.ImageFolderSource(rt, root, batch_size=8, image_size=16, num_classes=5, seed=1,
                               dist=runtime.Dist(rank=0, world_size=2), num_workers=0)
    with pytest.raises(ValueError, match="has 2 classes but model.num_classes is 1"):
        data.ImageFolderSource(rt, root, batch_size=2, image_size=16, num_classes=1, seed=1,
                               dist=runtime.Dist(), num_workers=0)


def test_synthetic_pool_is_made_once_and_indexed_by_step():
    rt = runtime.NativeRuntime(runtime.Dist(), "fp32")
    rank0 = data.SyntheticSource(rt, 2, 8, 10, seed=0, dist=runtime.Dist(), pool_size=3)
    rank1 = data.SyntheticSource(rt, 2, 8, 10, seed=0, dist=runtime.Dist(rank=1, world_size=2), pool_size=3)
    first = [next(rank0.batches(s)) for s in range(7)]
    assert first[0][0] is first[3][0] is first[6][0]  # the same tensors, no new data per step
    assert not torch.equal(first[0][0], first[1][0])
    assert not torch.equal(first[0][0], next(rank1.batches(0))[0])
    again = data.SyntheticSource(rt, 2, 8, 10, seed=0, dist=runtime.Dist(), pool_size=3)
    assert torch.equal(next(again.batches(4))[0], first[4][0])


def test_dist_from_env():
    assert runtime.Dist.from_env({}) == runtime.Dist(0, 1, 0, 1, 0)
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1"}
    dist = runtime.Dist.from_env(env)
    assert (dist.rank, dist.world_size, dist.local_rank, dist.node_rank) == (3, 4, 1, 1)
    assert not dist.is_main and not dist.is_node_main
    with pytest.raises(ValueError, match="inconsistent"):
        runtime.Dist.from_env({"RANK": "2", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="RANK='x'"):
        runtime.Dist.from_env({"RANK": "x"})


def test_runtime_choices_are_checked():
    with pytest.raises(ValueError, match="fp16 is not supported"):
        runtime.create("xla", runtime.Dist(), "fp16")
    with pytest.raises(ValueError, match="xla or native"):
        runtime.create("tpu", runtime.Dist(), "fp32")
    with pytest.raises(ValueError, match="adam, adamw or sgd"):
        train.make_optimizer([torch.zeros(1, requires_grad=True)], {"name": "lion"})
    sgd = train.make_optimizer([torch.zeros(1, requires_grad=True)], {"name": "sgd", "lr": 0.1, "momentum": 0.5})
    assert sgd.param_groups[0]["momentum"] == 0.5
