"""Sweeps end to end on the local backend, and `sweep run --detach`'s background runner (`sweep.process`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from cli_harness import run_cli
from job_waits import patience
from sweep_fakes import (
    LOCAL_BASE,
    ROOT,
    cli_run,
    write,
)

from orchestrator import sweep as sweeps
from orchestrator.ledger import Ledger

# --- end to end on the local backend -------------------------------------------------------------


@pytest.mark.slow
def test_local_sweep_runs_to_completion_and_results_tabulate_it(tmp_path, orch_home):
    import os

    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(orch_home))
    run = subprocess.run([sys.executable, "-m", "orchestrator", "sweep", "run", "configs/sweep-local.yaml",
                          "--poll", "1"], capture_output=True, text=True, timeout=patience(600), cwd=ROOT, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    sweep_id = re.search(r"sweep (local-[0-9a-f]{8})", run.stderr + run.stdout).group(1)
    ledger = Ledger(orch_home / "ledger.sqlite3")
    entries = ledger.entries(sweep_id=sweep_id)
    assert len(entries) == 4 and {e.status for e in entries} == {"completed"}
    status = subprocess.run([sys.executable, "-m", "orchestrator", "sweep", "status", sweep_id, "--json"],
                            capture_output=True, text=True, timeout=patience(120), cwd=ROOT, env=env)
    assert status.returncode == 0, status.stderr
    assert {t["state"] for t in json.loads(status.stdout)["trials"]} == {"completed"}
    plot = tmp_path / "out.png"
    page = tmp_path / "report.html"
    results = subprocess.run([sys.executable, "-m", "orchestrator", "results", "--sweep", sweep_id, "--plot",
                              str(plot), "--html", str(page), "--format", "json"], capture_output=True, text=True,
                             timeout=patience(300), cwd=ROOT, env=env)
    assert results.returncode == 0, results.stderr
    doc = json.loads(results.stdout)
    rows = doc["rows"]
    assert len(rows) == 4
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # At a glance: what the sweep varied and the final loss, on this machine's CPUs.
    assert doc["varied"] == ["training.batch_size", "training.optimizer.lr"]
    assert sorted((r["varied"]["training.batch_size"], r["varied"]["training.optimizer.lr"]) for r in rows) == \
        [(4, 1.0e-4), (4, 1.0e-3), (8, 1.0e-4), (8, 1.0e-3)]
    assert all(isinstance(r["final_loss"], float) for r in rows)
    assert all(r["instance"].startswith("local CPU") and r["cores"] is None for r in rows)
    text = page.read_text()
    assert "<th class=\"varied\">training.optimizer.lr</th>" in text and "<th>final loss</th>" in text
    assert text.count("data:image/png;base64,") == 2
    table = subprocess.run([sys.executable, "-m", "orchestrator", "results", "--sweep", sweep_id, "--sort",
                            "final_loss"], capture_output=True, text=True, timeout=patience(300), cwd=ROOT, env=env)
    assert table.returncode == 0, table.stderr
    # The header may break at its space on a narrow screen (pytest-xdist's workers set COLUMNS=80):
    # the job names keep their line (issue 32: names whole or broken at separators).
    header = table.stdout.split("─", 1)[0].split()
    assert "training.optimizer.lr" in table.stdout and ("final loss" in table.stdout or "final" in header and "loss" in header)
    assert "ml.trn1.2xlarge" not in table.stdout


def test_cli_detach_on_a_finished_sweep_reports_in_the_foreground_and_status_takes_the_name(
        tmp_path, orch_home, fake_train):
    import os

    path = write(tmp_path, "sweep: done\nbase: base.yaml\ngrid:\n  training.batch_size: [4, 8]\nconcurrency: 2\n",
                 LOCAL_BASE)
    env = dict(os.environ, ORCHESTRATOR_HOME=str(orch_home))
    first = cli_run("sweep", "run", str(path), "--poll", "0.2", env=env)
    assert first.returncode == 0, first.stderr
    sweep_id = re.search(r"sweep (done-[0-9a-f]{8}): 2 completed", first.stdout).group(1)
    again = cli_run("sweep", "run", str(path), "--detach", env=env)
    assert again.returncode == 0, again.stderr
    assert "running in the background" not in again.stdout
    assert f"sweep {sweep_id}: nothing left to run, so no background runner was started" in again.stderr
    assert f"sweep {sweep_id}: 2 completed" in again.stdout
    assert not (orch_home / "sweeps" / f"{sweep_id}.log").exists()  # no runner was started
    shown = cli_run("sweep", "status", "done", "--json", "--no-refresh", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["sweep_id"] == sweep_id


def test_cli_detach_status_and_stop_on_the_local_backend(tmp_path, orch_home, fake_train, monkeypatch):
    """`sweep run --detach` returns at once; the background runner submits up to the cap;
    `sweep stop` ends the runner, stops the jobs in flight and cancels the rest."""
    import os
    import time

    from orchestrator.backends.local import LocalBackend
    from orchestrator.processes import process_alive

    monkeypatch.setenv("FAKE_TRAIN_SLEEP", "60")
    path = write(tmp_path, "sweep: bg\nbase: base.yaml\ngrid:\n  training.batch_size: [4, 8, 16]\nconcurrency: 2\n",
                 LOCAL_BASE)
    env = dict(os.environ, ORCHESTRATOR_HOME=str(orch_home))
    started = cli_run("sweep", "run", str(path), "--detach", "--poll", "0.2", env=env)
    assert started.returncode == 0, started.stderr
    sweep_id = re.search(r"sweep (bg-[0-9a-f]{8}): running in the background \(pid (\d+)\)", started.stdout)
    sweep_id, pid = sweep_id.group(1), int(sweep_id.group(2))
    log = orch_home / "sweeps" / f"{sweep_id}.log"
    assert str(log) in started.stdout

    def trials():
        shown = cli_run("sweep", "status", sweep_id, "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        return json.loads(shown.stdout)["trials"]

    deadline = time.monotonic() + patience(90)
    while sum(t["state"] in ("submitted", "running") for t in trials()) < 2:
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.5)
    assert [t["state"] for t in trials()].count("planned") == 1  # the cap holds
    assert process_alive(pid)
    again = cli_run("sweep", "resume", sweep_id, env=env)
    assert again.returncode == 2 and "being run by another process" in again.stderr

    stopped = cli_run("sweep", "stop", sweep_id, env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert "2 job(s) stopping, 1 trial(s) cancelled" in stopped.stdout
    assert f"continue it with `python -m orchestrator sweep resume {sweep_id}`" in stopped.stdout
    assert {t["state"] for t in trials()} == {"stopped"}
    deadline = time.monotonic() + patience(30)
    while process_alive(pid):
        assert time.monotonic() < deadline, "the detached runner did not exit"
        time.sleep(0.2)
    assert "submitted" in log.read_text() and "stopped (sweep stop)" in log.read_text()  # it ended cleanly
    ledger = Ledger(orch_home / "ledger.sqlite3")
    jobs = [e.job_name for e in ledger.entries(sweep_id=sweep_id) if e.status == "stopped"]
    backend = LocalBackend(ledger=ledger)
    deadline = time.monotonic() + patience(60)
    for name in jobs:
        if (backend.job_dir(name) / "status.json").exists():
            while backend.status(name).status != "stopped":
                assert time.monotonic() < deadline, f"{name} did not stop"
                time.sleep(0.5)


def test_two_detached_runs_of_one_sweep_at_once_start_one_runner_and_the_other_says_so(
        tmp_path, orch_home, fake_train, monkeypatch):
    # QA: both said "running in the background" and exited 0; one runner exited at once and
    # only the sweep's log said why.
    import os
    import time

    from orchestrator.processes import process_alive

    monkeypatch.setenv("FAKE_TRAIN_SLEEP", "60")
    path = write(tmp_path, "sweep: twice\nbase: base.yaml\ngrid:\n  training.batch_size: [4, 8]\nconcurrency: 1\n",
                 LOCAL_BASE)
    # The fake trainer's PYTHONPATH (its module, the torchrun stand-in) kept: without it the jobs
    # failed at once, the first runner ended, and the second took the sweep (a flaky [0, 0]).
    env = dict(os.environ, ORCHESTRATOR_HOME=str(orch_home),
               PYTHONPATH=os.pathsep.join((str(ROOT), os.environ.get("PYTHONPATH", ""))))
    command = [sys.executable, "-m", "orchestrator", "sweep", "run", str(path), "--detach", "--poll", "0.2"]
    runs = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    done = [(run.wait(timeout=patience(180)), *run.communicate()) for run in runs]
    try:
        assert sorted(code for code, _, _ in done) == [0, 2], done
        (_, won, _), = [d for d in done if d[0] == 0]
        (_, _, lost), = [d for d in done if d[0] == 2]
        found = re.search(r"sweep (twice-[0-9a-f]{8}): running in the background \(pid (\d+)\)", won)
        sweep_id, pid = found.group(1), int(found.group(2))
        assert f"error: sweep {sweep_id} is being run by another process on this machine (pid " in lost, lost
        named = int(re.search(r"\(pid (\d+)\)", lost).group(1))
        assert named == pid or not process_alive(named)  # the runner, or the run that held it for a moment
        assert "Traceback" not in lost and process_alive(pid)
        assert sweeps.lock_holder(sweep_id) == pid
    finally:
        stopped = cli_run("sweep", "stop", "twice", "--wait", "60", env=env)
        deadline = time.monotonic() + patience(60)
        while any(process_alive(int(p)) for p in re.findall(r"\(pid (\d+)\)", " ".join(d[1] for d in done))):
            assert time.monotonic() < deadline, "the runner did not exit"
            time.sleep(0.2)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@pytest.mark.timeout(120)
def test_a_detached_runner_that_cannot_start_is_reported_by_the_command(tmp_path, orch_home, monkeypatch, capsys):

    path = write(tmp_path, "sweep: broken\nbase: base.yaml\ngrid:\n  training.batch_size: [4]\n", LOCAL_BASE)
    # The background `sweep resume` ends before it holds the sweep.
    dies = tmp_path / "python"
    dies.write_text("#!/bin/sh\necho 'error: something it could not do'\nexit 3\n")
    dies.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(dies))
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "run", str(path), "--detach")
    assert code == 1 and "Traceback" not in err and "running in the background" not in out
    assert re.search(r"error: the background runner of sweep broken-[0-9a-f]{8} \(pid \d+\) exited at once "
                     r"\(exit code 3\): error: something it could not do\n", err), err
    assert "hint: its log is" in err
