"""entrypoints/launcher/launch.py: the per-host driver.

Most tests run the launcher for real (a subprocess, real torchrun) with the `fake_train`
module standing in for entrypoints.trainer.train, so the ordering of pull / torchrun / push, the
failure file and results.json are checked on the real process tree in seconds.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from job_waits import patience
from launch_harness import Host, make_job
from pydantic import TypeAdapter

from entrypoints.shared import compile_cache, contract, results_schema, storage
from orchestrator import sourcedir

ROOT = Path(__file__).resolve().parents[1]

RESULT_KEYS = {
    "schema", "job_name", "spec_hash", "status", "failure_reason", "backend", "region", "instance", "world_size",
    "runtime", "compile", "precision", "batch_size", "global_batch", "steps", "warmup_steps", "steps_done",
    "model", "step_time_s", "samples_per_s", "time_to_first_step_s", "compile_s", "flops_per_sample", "compiler_cache",
    "ddp_split_graphs", "cache", "container", "final_loss", "utilization", "precompile",
    "versions", "started_at", "ended_at", "heartbeat_at", "duration_s", "tags", "warnings", "varied", "mlflow",
}
SCHEMA_READER = TypeAdapter(results_schema.Results)
CACHE_KEYS = {"mode", "uri", "key", "hit_entries", "new_entries", "pull_bytes", "pull_s", "push_bytes", "push_s",
              "pushes", "warnings", "persistent_dir", "local_entries"}


def plant_hostile_archive(cache_uri: str, key, outside: Path) -> None:
    """Publish, under `key`, a manifest whose archive escapes the cache dir: an absolute
    member pointing at `outside` and a symlink entry pointing there too."""
    import hashlib

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        link = tarfile.TarInfo("fxgraph/zz/evil")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(link)
        payload = b"escaped"
        absolute = tarfile.TarInfo(str(outside))
        absolute.size = len(payload)
        tar.addfile(absolute, io.BytesIO(payload))
    data = raw.getvalue()
    sha = hashlib.sha256(data).hexdigest()
    store = storage.open_store(cache_uri)
    store.put_bytes(f"{key.digest()}/archives/{sha}.tar", data)
    manifest = {"schema": 1, "key": key.as_dict(), "archives": {f"archives/{sha}.tar": {"bytes": len(data)}},
                "entries": {"fxgraph/zz/evil": {"archive": f"archives/{sha}.tar", "sha256": sha, "bytes": 7}},
                "updated_at": "2026-01-01T00:00:00Z"}
    store.put_bytes(f"{key.digest()}/manifest.json", json.dumps(manifest).encode())


def stored_results(job: dict) -> dict:
    prefix, _, key = job["results_uri"].rpartition("/")
    return json.loads(storage.open_store(prefix).get_bytes(key))


# --- end to end through torchrun, with the fake trainer ----------------------------------------


def test_cache_is_pulled_before_ranks_start_and_new_entries_pushed(orch_home, tmp_path, fake_train):
    job = make_job()
    cold = Host(tmp_path / "cold", job)
    done = cold.run(FAKE_TRAIN_NEW_ENTRY="fxgraph/aa/entry-one")
    assert done.returncode == 0, done.stdout + done.stderr
    first = cold.results
    assert first["cache"]["hit_entries"] == 0 and first["cache"]["new_entries"] >= 1
    assert cold.rank(0)["seen_cache"] == []

    warm = Host(tmp_path / "warm", job)
    done = warm.run(FAKE_TRAIN_NEW_ENTRY="fxgraph/bb/entry-two")
    assert done.returncode == 0, done.stdout + done.stderr
    # Every rank found the first job's entry in its (fresh) cache dir when it started.
    for rank in (0, 1):
        seen = warm.rank(rank)
        assert "fxgraph/aa/entry-one/graph.bin" in seen["seen_cache"]
        assert seen["cache_dir"] != cold.rank(0)["cache_dir"]
    second = warm.results
    assert second["cache"]["hit_entries"] >= 1 and second["cache"]["new_entries"] >= 1
    assert second["cache"]["key"] == first["cache"]["key"] == warm.cache_key().digest()
    out = done.stdout
    assert out.index("compile cache pulled") < out.index("fake-train rank 0/2 started") < out.index(
        "compile cache pushed")


def manifest_entries(job: dict, key) -> dict:
    """Entry name -> its manifest record, in the job's compile cache store ({} before any push)."""
    data = storage.open_store(job["compile_cache"]["uri"]).get_bytes(f"{key.digest()}/{compile_cache.MANIFEST}")
    return json.loads(data)["entries"] if data else {}


def start_launcher(host: Host, **extra: str) -> subprocess.Popen:
    """The launcher in a session of its own, its output drained by a thread (into .lines)."""
    import threading

    proc = subprocess.Popen([sys.executable, "-m", "entrypoints.launcher.launch", "--job", str(host.job_file)], cwd=ROOT,
                            env={**host.env, **extra}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    proc.lines = []
    threading.Thread(target=lambda: proc.lines.extend(proc.stdout), daemon=True).start()
    return proc


def wait_for(condition, timeout: float, what: str, proc: subprocess.Popen | None = None):
    import time

    deadline = time.time() + patience(timeout)
    while True:
        value = condition()
        if value:
            return value
        assert time.time() < deadline, what + ("; launcher output:\n" + "".join(proc.lines) if proc else "")
        time.sleep(0.2)


def test_new_entries_are_pushed_while_training_runs_each_push_only_the_new_ones(orch_home, tmp_path, fake_train):
    job = make_job(workers=1, push=1)
    host = Host(tmp_path, job)
    key = host.cache_key()
    proc = start_launcher(host, FAKE_TRAIN_NEW_ENTRY="fxgraph/aa/first", FAKE_TRAIN_LATER_ENTRY="fxgraph/bb/second",
                          FAKE_TRAIN_LATER_AFTER="3", FAKE_TRAIN_SLEEP="8")
    try:
        # Right after the warmup steps, while training goes on, the first entry is in the store.
        wait_for(lambda: "fxgraph/aa/first/graph.bin" in manifest_entries(job, key), 60,
                 "no push after the warmup steps", proc)
        assert proc.poll() is None
        # results.json exists from the start and follows the first rank's progress.
        beat = wait_for(lambda: (r := stored_results(job))["steps_done"] == 3 and r, 30, "no heartbeat")
        assert beat["status"] == "running" and beat["ended_at"] is None and beat["heartbeat_at"]
        assert beat["cache"]["pushes"] == 1 and beat["cache"]["new_entries"] == 1
        # The entry compiled later follows within a push interval, as its own archive.
        wait_for(lambda: "fxgraph/bb/second/graph.bin" in manifest_entries(job, key), 30,
                 "no periodic push of the later entry", proc)
        entries = manifest_entries(job, key)
        assert proc.poll() is None
        assert entries["fxgraph/aa/first/graph.bin"]["archive"] != entries["fxgraph/bb/second/graph.bin"]["archive"]
        assert proc.wait(timeout=patience(120)) == 0, "".join(proc.lines)
    finally:
        proc.kill()
    results = host.results
    assert results["status"] == "completed" and results["steps_done"] == 12
    # Two pushes found something new; the end found nothing left to push.
    assert (results["cache"]["pushes"], results["cache"]["new_entries"]) == (2, 2)
    assert results["heartbeat_at"] == results["ended_at"]


def test_a_killed_job_leaves_its_compiled_entries_and_its_last_step(orch_home, tmp_path, fake_train):
    from orchestrator.processes import kill_tree

    job = make_job(workers=1, push=1)
    host = Host(tmp_path / "killed", job)
    key = host.cache_key()
    proc = start_launcher(host, FAKE_TRAIN_NEW_ENTRY="fxgraph/aa/first", FAKE_TRAIN_SLEEP="300")
    try:
        wait_for(lambda: "fxgraph/aa/first/graph.bin" in manifest_entries(job, key), 60,
                 "no push after the warmup steps", proc)
        wait_for(lambda: stored_results(job)["steps_done"] >= 1, 30, "no heartbeat")
        kill_tree(proc.pid, 9)  # every process of the host at once: no handler runs
        proc.wait(timeout=patience(30))
    finally:
        proc.kill()
    last = stored_results(job)
    assert last["status"] == "running" and last["steps_done"] == 3 and last["ended_at"] is None
    assert results_schema.as_document(SCHEMA_READER.validate_python(last)) == last  # a heartbeat is a record too
    assert last["cache"]["new_entries"] == 1
    # The next run of the same job starts warm: its rank finds the entry in its cache dir.
    again = Host(tmp_path / "again", job)
    done = again.run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert again.results["cache"]["hit_entries"] == 1
    assert "fxgraph/aa/first/graph.bin" in again.rank(0)["seen_cache"]


def test_failed_rank_writes_failure_file_and_the_cache_is_still_pushed(orch_home, tmp_path, fake_train):
    job = make_job()
    host = Host(tmp_path, job)
    done = host.run(FAKE_TRAIN_FAIL_RANK="1", FAKE_TRAIN_NEW_ENTRY="fxgraph/cc/entry-before-crash")
    assert done.returncode != 0
    assert host.failure == "algo-1: rank 1: RuntimeError: boom on purpose"
    results = host.results
    assert results["status"] == "failed"
    assert results["failure_reason"] == "rank 1: RuntimeError: boom on purpose"
    assert results["cache"]["new_entries"] >= 1
    assert stored_results(job) == results
    # The entry compiled before the crash is in the store: a fresh dir pulls it.
    fresh = tmp_path / "fresh-cache"
    pulled = compile_cache.pull(job["compile_cache"]["uri"], host.cache_key(), fresh)
    assert pulled.hit_entries >= 1
    assert (fresh / "fxgraph/cc/entry-before-crash/graph.bin").is_file()


def test_results_json_follows_the_schema(orch_home, tmp_path, fake_train):
    job = make_job()
    host = Host(tmp_path, job)
    done = host.run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert host.failure is None
    results = host.results
    assert set(results) == RESULT_KEYS
    assert set(results["cache"]) == CACHE_KEYS
    assert results["schema"] == "orchestrator.results/v1"
    assert results["job_name"] == job["job_name"] and results["spec_hash"] == job["spec_hash"]
    assert results["status"] == "completed" and results["failure_reason"] is None
    assert results["backend"] == "local" and results["region"] == "us-east-1"
    assert results["instance"] == {"type": "ml.trn1.2xlarge", "count": 1, "neuron_cores": 2, "logical_cores": 2,
                                   "workers_per_node": 2, "cpus": int(host.env["SM_NUM_CPUS"]),
                                   "preference": None}
    assert results["varied"] == {}  # not a sweep's trial
    assert results["mlflow"] is None  # its spec names no tracking server
    assert results["world_size"] == 2 and results["batch_size"] == 4 and results["global_batch"] == 8
    assert (results["runtime"], results["compile"], results["precision"]) == ("native", True, "fp32")
    assert (results["steps"], results["warmup_steps"], results["steps_done"]) == (12, 2, 12)
    assert results["model"] == {"arch": "vit_tiny_patch16_224", "image_size": 32, "patch_embed": "linear"}
    # The fake rank 0 reports step times 0.1 .. 1.0 (shuffled): median 0.55, p90 by nearest rank 0.9.
    assert results["step_time_s"] == pytest.approx({"p50": 0.55, "p90": 0.9, "mean": 0.55, "n": 10})
    assert results["samples_per_s"] == pytest.approx(8 / 0.55)
    assert results["time_to_first_step_s"] == 2.5 and results["compile_s"] == 2.0
    assert results["compiler_cache"] == {"fxgraph_hit": 3, "fxgraph_miss": 1, "aotautograd_hit": 2}
    assert results["ddp_split_graphs"] is False
    assert results["final_loss"] == 1.25
    assert results["flops_per_sample"] == 1.5e6  # the host's first rank counted it
    assert results["versions"]["torch"] == "fake-9.9"
    assert set(results["versions"]) == {"python", "torch", "torch_xla", "timm", "neuronx_cc"}
    assert results["tags"]["team"] == "vision" and results["tags"]["orchestrator:job"] == job["job_name"]
    assert results["started_at"].endswith("Z") and results["duration_s"] >= 0
    assert results["cache"]["mode"] == "tarball" and results["cache"]["uri"] == job["compile_cache"]["uri"]
    assert results["warnings"] == []
    assert stored_results(job) == results
    # Exactly a record of the schema, every field as the schema types it (docs/RESULTS.md is made from it).
    assert results_schema.as_document(SCHEMA_READER.validate_python(results)) == results
    # The reader of `orchestrator results` takes it as written.
    from orchestrator import results as reader

    parsed = reader.parse((host.root / contract.OUTPUT_DATA_DIR / "results.json").read_bytes())
    assert parsed.job_name == job["job_name"] and parsed.cache.new_entries == results["cache"]["new_entries"]


def test_results_that_cannot_be_stored_fail_the_job_and_the_local_copy_says_so(orch_home, tmp_path, fake_train):
    job = make_job()
    # The results prefix lies under a regular file: the store cannot create the folder.
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    job["results_uri"] = f"file://{blocker}/results/{job['job_name']}/results.json"
    host = Host(tmp_path / "host", job)
    done = host.run()
    assert done.returncode == 1, done.stdout + done.stderr
    results = host.results
    assert results["status"] == "failed"
    assert results["failure_reason"].startswith(f"could not write results to {job['results_uri']}")
    assert host.failure == f"algo-1: {results['failure_reason']}"[:len(host.failure)]
    assert blocker.read_text() == "not a folder"


def test_hostile_cache_archive_runs_cold_with_a_warning(orch_home, tmp_path, fake_train):
    job = make_job()
    host = Host(tmp_path / "h", job)
    key = host.cache_key()
    outside = tmp_path / "escaped.txt"
    plant_hostile_archive(job["compile_cache"]["uri"], key, outside)
    done = host.run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert not outside.exists()
    results = host.results
    assert results["status"] == "completed"
    assert results["cache"]["hit_entries"] == 0 and results["cache"]["warnings"]
    assert any(w.startswith("compile cache: ") for w in results["warnings"])
    assert "WARNING compile cache:" in done.stdout
    assert host.rank(0)["seen_cache"] == []


@pytest.mark.real_torchrun  # the stop's path through the real torchrun's signal handling
def test_sigterm_stops_training_and_still_pushes_and_reports(orch_home, tmp_path, fake_train):
    import signal

    job = make_job()
    host = Host(tmp_path, job)
    env = {**host.env, "FAKE_TRAIN_SLEEP": "120", "FAKE_TRAIN_NEW_ENTRY": "fxgraph/dd/before-stop"}
    proc = subprocess.Popen([sys.executable, "-m", "entrypoints.launcher.launch", "--job", str(host.job_file)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # Read on a thread: a silent child would block this loop, and the deadline must hold.
        import threading

        started = threading.Event()

        def watch() -> None:
            for line in proc.stdout:
                if "fake-train rank 0 compiled" in line:
                    started.set()

        threading.Thread(target=watch, daemon=True).start()
        assert started.wait(60), "the fake trainer never reported its compile"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=patience(60))  # the watching thread keeps draining the output
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert host.failure == "algo-1: stopped: the launcher received SIGTERM"
    results = host.results
    assert results["status"] == "stopped" and results["failure_reason"] == "stopped: the launcher received SIGTERM"
    assert results["cache"]["new_entries"] >= 1


def test_runs_as_launch_py_from_the_unpacked_source_archive(orch_home, tmp_path, fake_train):
    job = make_job(workers=1, mode="off")
    code = tmp_path / "code"
    with tarfile.open(fileobj=io.BytesIO(sourcedir.build_archive(job))) as tar:
        tar.extractall(code, filter="data")
    host = Host(tmp_path, job)
    done = host.run(cwd=code, argv=[sys.executable, "launch.py"])
    assert done.returncode == 0, done.stdout + done.stderr
    results = host.results
    assert results["status"] == "completed" and results["cache"]["mode"] == "off"
    assert results["cache"]["key"] is None and results["world_size"] == 1


@pytest.mark.real_torchrun  # the reason is read from torchrun's own failure report
def test_torchrun_failure_without_rank_stats_reports_the_error_line(orch_home, tmp_path, fake_train):
    job = make_job(workers=1, mode="off")
    host = Host(tmp_path, job)
    done = host.run(ORCHESTRATOR_TRAIN_MODULE="no_such_train_module")
    assert done.returncode != 0
    assert host.failure.startswith("algo-1: rank 0 (torchrun exited with code 1): ")
    assert "No module named no_such_train_module" in host.failure
    assert host.results["status"] == "failed" and host.results["step_time_s"] is None


def test_unreadable_job_file_still_writes_the_failure_file(tmp_path):
    root = tmp_path / "ml"
    env = {**os.environ, **contract.sm_environment(root, ["algo-1"], "algo-1", "ml.trn1.2xlarge", {}, [])}
    (tmp_path / "job.json").write_text('{"schema": 99}')
    done = subprocess.run([sys.executable, "-m", "entrypoints.launcher.launch", "--job", str(tmp_path / "job.json")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=patience(60))
    assert done.returncode == 1
    assert "job file schema 99" in (root / contract.FAILURE_FILE).read_text()


def test_the_compile_pool_is_not_in_the_key(orch_home, tmp_path, fake_train):
    # The launcher's key is the one computed without it, so hosts of any size share a cache.
    job = make_job(workers=1)
    host = Host(tmp_path, job)
    done = host.run(SM_NUM_CPUS="6")
    assert done.returncode == 0, done.stdout + done.stderr
    assert host.results["cache"]["key"] == host.cache_key().digest()
    assert host.rank(0)["env"]["TORCHINDUCTOR_COMPILE_THREADS"] == "6"
