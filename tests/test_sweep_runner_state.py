"""`sweep status` says whether a runner holds the sweep (issue 33, item 8): its pid and host,
alive or not, and how to go on when none does."""

from __future__ import annotations

import json
import os

from cli_harness import run_cli
from sweep_fakes import SWEEP, load

from orchestrator import sweep as sweeps
from orchestrator.ledger import Ledger


def _saved(tmp_path):
    ledger = Ledger()
    return sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger), ledger


def test_sweep_status_tells_a_live_runner_from_a_dead_one(tmp_path, orch_home, monkeypatch, capsys):
    definition, ledger = _saved(tmp_path)
    sweep_id, host = definition.sweep_id, os.uname().nodename
    with sweeps.runner_lock(sweep_id):
        sweeps.record_runner(ledger, sweep_id, os.getpid())
        code, shown, _ = run_cli(monkeypatch, capsys, "sweep", "status", sweep_id, "--no-refresh")
        assert code == 0 and f"runner: pid {os.getpid()} on {host}, running" in shown
        code, as_json, _ = run_cli(monkeypatch, capsys, "sweep", "status", sweep_id, "--no-refresh", "--json")
        assert json.loads(as_json)["runner"] == {"pid": os.getpid(), "host": host, "alive": True}
    # The lock is gone with its holder (as after kill -9): the same pid is now "exited".
    code, shown, _ = run_cli(monkeypatch, capsys, "sweep", "status", sweep_id, "--no-refresh")
    assert code == 0 and f"runner: none (pid {os.getpid()} on {host} has exited)" in shown
    assert f"sweep resume {sweep_id}" in " ".join(shown.split())  # wrapped at the terminal's width


def test_a_sweep_never_run_says_how_to_start_and_another_host_is_not_guessed(tmp_path, orch_home, monkeypatch,
                                                                             capsys):
    definition, ledger = _saved(tmp_path)
    code, shown, _ = run_cli(monkeypatch, capsys, "sweep", "status", definition.sweep_id, "--no-refresh")
    shown = " ".join(shown.split())  # the line wraps at the terminal's width, which varies
    assert code == 0 and "runner: none;" in shown and f"sweep resume {definition.sweep_id}" in shown
    ledger.put_value(f"sweep:{definition.sweep_id}:runner", {"pid": 4242, "host": "other-laptop"})
    code, shown, _ = run_cli(monkeypatch, capsys, "sweep", "status", definition.sweep_id, "--no-refresh")
    assert "runner: last pid 4242 on other-laptop, on another host" in " ".join(shown.split())


def test_sweep_status_reads_only(tmp_path, orch_home, monkeypatch, capsys):
    """Asking about the lock creates nothing: no sweeps/ folder, no lock file."""
    definition, _ = _saved(tmp_path)
    lock = orch_home / "sweeps" / f"{definition.sweep_id}.lock"
    existed = lock.exists()
    run_cli(monkeypatch, capsys, "sweep", "status", definition.sweep_id, "--no-refresh")
    assert lock.exists() == existed
