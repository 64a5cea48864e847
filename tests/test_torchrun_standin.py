"""The torchrun stand-in (tests/standins/torchrun_standin.py) keeps the real torchrun's process
contract: each scenario runs on both, with the command line the launcher builds, and must give
the same result. The launcher's other tests run on the stand-in only (it starts without torch)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from job_waits import patience, wait_for

from entrypoints.launcher import torchrun
from entrypoints.shared import contract
from orchestrator.backends.local.layout import free_port

ROOT = Path(__file__).resolve().parents[1]
STANDINS = ROOT / "tests" / "standins"

# A worker that records what torchrun gave it, then sleeps (PROBE_SLEEP), or fails (PROBE_FAIL_RANK).
PROBE = '''
import json, os, pathlib, signal, sys, time
out = pathlib.Path(os.environ["PROBE_DIR"])
rank = os.environ["RANK"]
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE",
        "GROUP_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS", "OMP_NUM_THREADS")
seen = {k: os.environ.get(k) for k in keys}
seen["own_session"] = os.getsid(0) == os.getpid()
seen["args"] = sys.argv[1:]
def stop(signum, frame):
    (out / f"signal-{rank}").write_text(signal.Signals(signum).name)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
(out / f"rank-{rank}.json").write_text(json.dumps(seen))
if os.environ.get("PROBE_FAIL_RANK") == rank:
    sys.exit(3)
time.sleep(float(os.environ.get("PROBE_SLEEP", "0")))
'''

IMPLEMENTATIONS = [pytest.param("torchrun_standin", id="stand-in"),
                   pytest.param(torchrun.TORCHRUN_MODULE, id="torchrun")]


def _start(module: str, tmp_path: Path, workers: int, **env: str) -> tuple[subprocess.Popen, Path]:
    (tmp_path / "probe_worker.py").write_text(PROBE)
    out = tmp_path / "seen"
    out.mkdir()
    job = {"workers_per_node": workers}
    ctr = contract.Contract.from_env(contract.sm_environment(tmp_path, ["algo-1"], "algo-1", "ml.trn1.2xlarge",
                                                             {}, []))
    run_env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    run_env.update(env, PROBE_DIR=str(out), PYTHONPATH=os.pathsep.join([str(tmp_path), str(STANDINS), str(ROOT)]),
                   **{torchrun.TORCHRUN_MODULE_ENV: module, torchrun.MASTER_PORT_ENV: str(free_port())})
    command = torchrun.torchrun_command(job, ctr, run_env, tmp_path / "job.json", tmp_path / "ranks", "probe_worker")
    command[command.index("--master_addr") + 1] = "127.0.0.1"
    proc = subprocess.Popen(command, env=run_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    return proc, out


def _seen(out: Path, rank: int) -> dict:
    return json.loads((out / f"rank-{rank}.json").read_text())


@pytest.mark.parametrize("module", IMPLEMENTATIONS)
def test_each_worker_gets_torchruns_environment_in_a_session_of_its_own(tmp_path, module):
    proc, out = _start(module, tmp_path, workers=2)
    output, _ = proc.communicate(timeout=patience(120))
    assert proc.returncode == 0, output
    port = _seen(out, 0)["MASTER_PORT"]
    for rank in (0, 1):
        assert _seen(out, rank) == {
            "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
            "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "1", "ROLE_NAME": "default",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0", "OMP_NUM_THREADS": "1", "own_session": True,
            "args": ["--job", str(tmp_path / "job.json"), "--stats-dir", str(tmp_path / "ranks")]}


@pytest.mark.parametrize("module", IMPLEMENTATIONS)
def test_a_failed_worker_stops_the_others_with_sigterm_and_torchrun_exits_1(tmp_path, module):
    proc, out = _start(module, tmp_path, workers=2, PROBE_FAIL_RANK="1", PROBE_SLEEP="120")
    output, _ = proc.communicate(timeout=patience(120))
    assert proc.returncode == 1, output
    assert (out / "signal-0").read_text() == "SIGTERM"


@pytest.mark.parametrize("module", IMPLEMENTATIONS)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_reaches_every_worker_and_torchrun_exits_1(tmp_path, module, signum):
    proc, out = _start(module, tmp_path, workers=2, PROBE_SLEEP="120")
    try:
        wait_for(lambda: all((out / f"rank-{r}.json").exists() for r in (0, 1)), 120, "workers did not start")
        time.sleep(0.2)  # the probe's handler is set before it writes its file; let torchrun settle too
        proc.send_signal(signum)
        output, _ = proc.communicate(timeout=patience(120))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, output
    # The probe handles SIGTERM only: a SIGINT ends it through Python's KeyboardInterrupt instead.
    expected = {"SIGTERM": ["SIGTERM", "SIGTERM"], "SIGINT": []}[signum.name]
    assert sorted(p.read_text() for p in out.glob("signal-*")) == expected


def test_the_standin_refuses_the_real_trainer(tmp_path):
    done = subprocess.run([sys.executable, "-m", "torchrun_standin", "--nproc_per_node", "1", "-m",
                           "entrypoints.trainer.train", "--job", "x"], env=dict(os.environ, PYTHONPATH=str(STANDINS)),
                          capture_output=True, text=True, timeout=patience(60))
    assert done.returncode == 2 and "mark the test real_torchrun" in done.stderr
