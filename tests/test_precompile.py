"""The precompile pass (`training.precompile`, entrypoints/launcher/precompile.py): launch.py runs the
job's torchrun command under a stand-in neuron_parallel_compile (tests/standins/) that
extracts and "compiles" graphs as the Neuron docs describe, pushes what it compiled, and
records the pass apart from training; the doctor and the cost bound say where it applies."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from job_waits import patience
from launch_harness import Host, make_job

from entrypoints.shared import compile_cache, contract
from orchestrator import doctor, request, spec

STANDIN = Path(__file__).parent / "standins" / "neuron_parallel_compile"
GRAPH = "neuronxcc-2.99.0+abc/MODULE_123+def"


@pytest.fixture
def tool_path(tmp_path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(STANDIN, bin_dir / contract.PRECOMPILE_PROGRAM)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def xla_job(precompile: bool = True, runtime: str = "xla") -> dict:
    job = make_job(workers=1)
    job["spec"]["training"].update(runtime=runtime, compile=runtime == "native", precompile=precompile)
    return job


def _logged(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_pass_runs_the_same_torchrun_command_then_training_starts_warm(orch_home, tmp_path, fake_train,
                                                                           tool_path):
    job = xla_job()
    host = Host(tmp_path, job)
    calls = tmp_path / "npc.jsonl"
    done = host.run(PATH=tool_path, STANDIN_NPC_LOG=str(calls), FAKE_TRAIN_EXTRACT_GRAPH=GRAPH)
    assert done.returncode == 0, done.stdout + done.stderr
    results = host.results
    assert results["precompile"] == {"requested": True, "ran": True, "reason": None,
                                     "seconds": results["precompile"]["seconds"], "steps": 10, "exit_code": 0}
    assert results["precompile"]["seconds"] >= 0
    # The tool ran the job's own torchrun command; only the ranks' stats folder differs.
    (command,) = _logged(calls)
    started = next(line for line in done.stdout.splitlines() if line.startswith("[launch] starting: "))
    real = started.removeprefix("[launch] starting: ").split(" ")
    assert command[0] == sys.executable and len(command[1:]) == len(real)
    differ = [i for i, (a, b) in enumerate(zip(command[1:], real, strict=True)) if a != b]
    assert [real[i - 1] for i in differ] == ["--stats-dir"]
    # The pass's ranks ran in graph-extraction mode over 10 steps, without heartbeats; the real ones did not.
    extraction = json.loads((host.root / contract.OUTPUT_DATA_DIR / "precompile-ranks" / "rank-0.json").read_text())
    assert extraction["env"]["NEURON_EXTRACT_GRAPHS_ONLY"] == "1"
    assert extraction["env"][contract.PRECOMPILE_STEPS_ENV] == "10"
    assert extraction["env"][contract.PROGRESS_REPORT_ENV] is None
    real_rank = host.rank(0)
    assert real_rank["env"]["NEURON_EXTRACT_GRAPHS_ONLY"] is None
    assert real_rank["env"][contract.PRECOMPILE_STEPS_ENV] is None
    # Training started warm: the compiled graph was in its cache dir when the rank started.
    assert f"{GRAPH}/model.neff" in real_rank["seen_cache"]
    # ... and the store had it right after the pass, before training ran.
    assert "compile cache pushed (after the precompile pass): 1 new entries" in done.stdout
    # The results table shows the pass's time beside training's compile time.
    from orchestrator.results import build_row, parse
    from orchestrator.results.render import render_table
    from orchestrator.results.rows import Collection

    row = build_row("j", parse((host.root / contract.OUTPUT_DATA_DIR / "results.json").read_bytes()), "u", None, None)
    assert row.precompile_s == results["precompile"]["seconds"] and row.compile_s == 2.0
    assert "precompile s" in render_table(Collection(prefix="p", rows=[row]))
    fresh = tmp_path / "fresh"
    pulled = compile_cache.pull(job["compile_cache"]["uri"], host.cache_key("xla"), fresh)
    assert pulled.hit_entries == 1 and (fresh / GRAPH / "model.neff").is_file()


def test_a_failed_pass_is_a_reason_and_training_still_runs(orch_home, tmp_path, fake_train, tool_path):
    host = Host(tmp_path, xla_job())
    done = host.run(PATH=tool_path, FAKE_TRAIN_EXTRACT_GRAPH=GRAPH, STANDIN_NPC_FAIL_GRAPHS="1")
    assert done.returncode == 0, done.stdout + done.stderr
    pre = host.results["precompile"]
    assert pre["ran"] is True and pre["exit_code"] == 1
    assert pre["reason"] == ("neuron_parallel_compile exited with code 1: "
                             "INFO ||NEURON_PARALLEL_COMPILE||: Total failed compilations: 1")
    assert host.results["status"] == "completed"


@pytest.mark.parametrize(("precompile", "runtime", "on_path", "reason"), [
    (True, "native", True, "runtime native has no XLA graphs to extract (precompile needs runtime xla)"),
    (True, "xla", False, "neuron_parallel_compile is not on PATH: not a Neuron host (the Neuron training image has it)"),
    (False, "xla", True, "not requested (training.precompile: false)"),
])
def test_where_the_pass_does_not_apply_it_says_why_and_the_tool_never_runs(orch_home, tmp_path, fake_train, tool_path,
                                                                           precompile, runtime, on_path, reason):
    host = Host(tmp_path, xla_job(precompile, runtime))
    calls = tmp_path / "npc.jsonl"
    path = tool_path if on_path else os.environ["PATH"]
    done = host.run(PATH=path, STANDIN_NPC_LOG=str(calls))
    assert done.returncode == 0, done.stdout + done.stderr
    assert host.results["precompile"] == {"requested": precompile, "ran": False, "reason": reason, "seconds": None,
                                          "steps": None, "exit_code": None}
    assert _logged(calls) == []
    assert (f"precompile skipped: {reason}" in done.stdout) is precompile


SPEC = """
name: pc
backend: {backend}
region: us-east-1
instance: {{type: ml.trn1.2xlarge}}
model: {{arch: vit_base_patch16_224}}
training: {{runtime: {runtime}, steps: 100, precompile: true}}
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
output: {{uri: "s3://bucket/out"}}
compile_cache: {{mode: "off"}}
"""


def _rules(backend: str, runtime: str) -> dict[str, doctor.Finding]:
    found = doctor.diagnose(spec.loads(SPEC.format(backend=backend, runtime=runtime)))
    return {f.rule: f for f in found.findings if f.rule.startswith("N06")}, found.estimate


def test_the_doctor_says_where_precompile_does_not_apply_and_the_bound_covers_it():
    rules, estimate = _rules("sagemaker", "xla")
    assert rules == {}
    assert "precompile pass" in estimate.note
    rules, _ = _rules("sagemaker", "native")
    assert rules["N060-precompile-native"].severity == "warning"
    assert rules["N060-precompile-native"].path == "training.precompile"
    rules, _ = _rules("local", "xla")
    assert rules["N061-precompile-local"].severity == "info"
    assert "neuron_parallel_compile" in rules["N061-precompile-local"].message


LOCAL = """
name: standins
backend: local
instance: {type: ml.trn1.2xlarge}
model: {arch: vit_tiny_patch16_224, image_size: 32, patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2,
        num_classes: 10}
training: {runtime: xla, steps: 12, warmup_steps: 2, batch_size: 4, precision: fp32, workers_per_node: 1,
           precompile: true}
data: {source: synthetic, num_workers: 0}
compile_cache: {mode: tarball}
"""


def test_a_local_job_with_the_stand_ins_shows_precompile_utilization_and_mfu_in_the_table(
        orch_home, tmp_path, fake_train, tool_path, monkeypatch):
    """The issue's end to end: the local backend's job, with both Neuron tools stood in on PATH."""
    from orchestrator import results as res
    from orchestrator.backends.local import LocalBackend

    shutil.copy(Path(__file__).parent / "standins" / "neuron-monitor", Path(tool_path.split(os.pathsep)[0]))
    monkeypatch.setenv("PATH", tool_path)
    monkeypatch.setenv("FAKE_TRAIN_EXTRACT_GRAPH", GRAPH)
    monkeypatch.setenv("FAKE_TRAIN_SLEEP", "1")
    monkeypatch.setenv("STANDIN_MONITOR_PERIOD_S", "0.05")
    monkeypatch.setenv("STANDIN_MONITOR_REPORTS", json.dumps([{"util": [81.0, 79.0], "device": 2**30, "idle": 70.0,
                                                                "mem": 2**32}]))
    path = tmp_path / "standins.yaml"
    path.write_text(LOCAL)
    loaded = spec.load(path)
    assert [f.rule for f in doctor.findings(loaded) if f.rule.startswith("N06")] == ["N061-precompile-local"]
    prepared = request.prepare(loaded)
    backend = LocalBackend()
    backend.submit(prepared)
    deadline = time.monotonic() + patience(120)
    while not backend.status(prepared.job_name).terminal:
        assert time.monotonic() < deadline, "\n".join(backend.logs(prepared.job_name))
        time.sleep(0.3)
    assert backend.status(prepared.job_name).status == "completed", "\n".join(backend.logs(prepared.job_name))
    (row,) = res.collect(res.local_store_uri(), workers=1).rows
    assert row.precompile_s is not None and row.neuroncore_util == 80.0 and row.host_vcpu == 30.0
    assert row.input_bound is False
    # The FLOPs the rank counted travel; MFU is blank: a local job did not run on a Trainium.
    assert row.flops_per_sample == 1.5e6 and row.mfu is None
    table = res.render_table(res.Collection(prefix="p", rows=[row]))
    assert "precompile s" in table and "NC util" in table and "MFU" in table


# A neuron_parallel_compile that starts a child (as the real one starts torchrun), which holds
# the output pipe, then exits on SIGTERM and leaves that child behind.
ORPHANING_WRAPPER = """#!{python}
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
with open(os.environ["WRAPPER_CHILD_PID"], "w") as out:
    out.write(str(child.pid))
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
print("wrapper ready", flush=True)
time.sleep(300)
"""


@pytest.mark.timeout(120)
def test_a_stop_during_the_pass_reaches_every_process_of_it(tmp_path):
    """SIGTERM during the precompile pass goes to its whole process group: the wrapper's
    child stops too, so the pass returns at once instead of waiting on an orphan's pipe."""
    import threading
    from types import SimpleNamespace

    import psutil

    from entrypoints.launcher import precompile
    from entrypoints.launcher.torchrun import StopSignals

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / contract.PRECOMPILE_PROGRAM
    wrapper.write_text(ORPHANING_WRAPPER.format(python=sys.executable))
    wrapper.chmod(0o755)
    pid_file = tmp_path / "child.pid"
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", WRAPPER_CHILD_PID=str(pid_file))
    logged: list[str] = []
    # A grace long enough that the late kill cannot be what ends the pass here.
    stop = StopSignals(logged.append, grace_s=600)

    def stop_when_started():
        while not pid_file.exists() or not pid_file.read_text():
            time.sleep(0.05)
        stop.handle(15)  # SIGTERM, as the platform's stop reaches launch.py

    threading.Thread(target=stop_when_started, daemon=True).start()
    ctr = SimpleNamespace(num_nodes=1, node_rank=0, master_addr="127.0.0.1")
    section = precompile.run(xla_job(), ctr, env, tmp_path / "job.json", tmp_path / "stats", "fake_train",
                             tmp_path, stop, logged.append)
    child = int(pid_file.read_text())
    assert section["ran"] is True and section["exit_code"] == 0  # the wrapper exited on the signal
    # The pipe closed, so the child is exiting; it ends as a zombie of PID 1 here (or is reaped).
    def ended() -> bool:
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    for _ in range(200):
        if ended():
            break
        time.sleep(0.05)
    assert ended()
    assert not any("still runs" in line for line in logged)  # the group stop sufficed, not the late kill
