"""A job interrupted loses nothing it compiled: real training (a tiny compiled ViT on the CPU)
through the local backend, killed outright, then run again warm and stopped the way SageMaker
stops a container. Slow: two real jobs, cold and warm compiles on 2 cores (a few minutes)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from job_waits import wait_for

from entrypoints.shared import storage
from orchestrator import names, processes, request, spec
from orchestrator.backends.local import LocalBackend
from orchestrator.backends.local import layout as local_layout

SPEC = """
name: interrupted
backend: local
instance: {type: ml.trn1.2xlarge, count: 1}
model: {arch: vit_tiny_patch16_224, image_size: 32, patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2,
        num_classes: 10}
training: {runtime: native, compile: true, steps: 1000000, warmup_steps: 2, batch_size: 4, precision: fp32,
           log_every: 200, workers_per_node: 1}
data: {source: synthetic, num_workers: 0}
compile_cache: {mode: tarball, push_interval_s: 2}
max_run_minutes: 30
"""


def stored(uri: str) -> dict | None:
    prefix, _, name = uri.rpartition("/")
    data = storage.open_store(prefix).get_bytes(name)
    return json.loads(data) if data else None


def manifest_entries(prepared, key: str | None) -> dict:
    if not key:
        return {}
    doc = stored(f"{prepared.job['compile_cache']['uri']}/{key}/manifest.json")
    return doc["entries"] if doc else {}


def kill_everything(job_dir: Path) -> list[int]:
    """SIGKILL the supervisor and every process of every host, all at once (no handler runs)."""
    status = json.loads((job_dir / local_layout.STATUS_FILE).read_text())
    pids = {status["pid"]}
    for host in status["hosts"].values():
        pids.update(processes.process_tree(host["pgid"]))
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return sorted(pids)


@pytest.mark.slow
def test_a_job_killed_outright_keeps_its_compiled_graphs_and_last_step_and_the_next_run_starts_warm(
        orch_home, tmp_path, monkeypatch, capsys):
    from cli_harness import run_cli

    monkeypatch.delenv("ORCHESTRATOR_TRAIN_MODULE", raising=False)
    monkeypatch.setenv(local_layout.STOP_GRACE_ENV, "60")
    path = tmp_path / "interrupted.yaml"
    path.write_text(SPEC)
    loaded = spec.load(path)
    first = request.prepare(loaded)
    backend = LocalBackend()
    backend.submit(first)
    job_dir = orch_home / "jobs" / first.job_name
    results_uri = first.job["results_uri"]

    # After the warmup steps the compiled graphs are pushed, while training goes on.
    beat = wait_for(lambda: (r := stored(results_uri)) and (r.get("steps_done") or 0) >= 2 and r, 300,
                    "no heartbeat after the warmup steps", backend, first.job_name)
    key = beat["cache"]["key"]
    wait_for(lambda: manifest_entries(first, key), 120, "nothing pushed after the warmup steps", backend,
             first.job_name)
    time.sleep(5)  # a few push intervals of training (2 s here; 60 s by default)
    assert not backend.status(first.job_name).terminal
    killed = kill_everything(job_dir)
    wait_for(lambda: not any(processes.process_alive(pid) for pid in killed), 60, "processes survived SIGKILL")

    # What the killed job left: its compiled entries in the store, and its last heartbeat.
    entries = manifest_entries(first, key)
    assert any(name.startswith("fxgraph/") for name in entries), sorted(entries)
    last = stored(results_uri)
    assert last["status"] == "running" and last["steps_done"] >= 1 and last["ended_at"] is None
    assert last["cache"]["pushes"] >= 1 and last["cache"]["new_entries"] == len(entries)
    # `status` and `results` show the job with its last known step.
    code, out, _ = run_cli(monkeypatch, capsys, "status", first.job_name)
    assert code == 0 and "status    failed" in out
    assert f"step      {last['steps_done']} of 1000000 (heartbeat " in out and "its last known step" in out
    code, out, _ = run_cli(monkeypatch, capsys, "results", "--format", "json")
    row = next(r for r in json.loads(out)["rows"] if r["job"] == first.job_name)
    # `results` says what `status` says (failed), with the last heartbeat's step figures.
    assert row["status"] == "failed" and row["steps_done"] == last["steps_done"]
    assert "heartbeat at " in row["note"] and "last known state" in row["note"]

    # The next run of the same spec starts warm: every graph comes from the pushed cache.
    second = request.prepare(loaded, job_name=names.rerun_job_name(loaded, 1))
    backend.submit(second)
    warm = wait_for(lambda: (r := stored(second.job["results_uri"])) and (r.get("steps_done") or 0) >= 2 and r, 300,
                    "the rerun never got past its warmup steps", backend, second.job_name)
    assert warm["cache"]["key"] == key and warm["cache"]["hit_entries"] == len(entries)
    assert warm["compiler_cache"]["fxgraph_hit"] >= 1 and warm["compiler_cache"]["fxgraph_miss"] == 0

    # And it stops as SageMaker stops a container: SIGTERM to the first process, within the grace period.
    backend.stop(second.job_name)
    status = wait_for(lambda: (s := backend.status(second.job_name)).terminal and s, 120, "the stop never ended",
                      backend, second.job_name)
    assert status.status == "stopped"
    signals = json.loads((orch_home / "jobs" / second.job_name / local_layout.STATUS_FILE).read_text())["stop_signals"]
    assert [s["signal"] for s in signals] == ["SIGTERM"]
    final = stored(second.job["results_uri"])
    assert final["status"] == "stopped" and final["steps_done"] > warm["steps_done"] >= 2
    assert final["container"]["entrypoint"] is True
