"""Every state shown is the truth: `results` and `status` agree on a local job however it ends,
each of its processes killed in turn (QA: `results` said `running` forever for a job whose
supervisor was killed, and `stopped` where `status` said failed after a SIGINT to launch.py)."""

from __future__ import annotations

import os
import signal

import pytest
from test_backend_local import start_sleeping_job, wait_terminal, wait_until

from orchestrator import processes
from orchestrator import results as res


def _row(job: str):
    rows = {row.job: row for row in res.collect(res.local_store_uri(), workers=1).rows}
    return rows[job]


def _results_written(job_dir, status: str) -> bool:
    path = job_dir / "algo-1" / "output" / "data" / "results.json"
    return path.exists() and f'"status": "{status}"' in path.read_text()


@pytest.mark.parametrize("victim, signum", [
    ("supervisor", signal.SIGKILL),
    ("launcher", signal.SIGINT),
    ("launcher", signal.SIGKILL),
    ("worker", signal.SIGKILL),
])
def test_results_and_status_agree_however_a_local_job_ends(orch_home, tmp_path, fake_train, monkeypatch,
                                                           victim, signum):
    backend, prepared, job_dir, data = start_sleeping_job(orch_home, tmp_path, monkeypatch)
    job = prepared.job_name
    launcher = data["hosts"]["algo-1"]["pid"]
    wait_until(lambda: _results_written(job_dir, "running"), 60, "no heartbeat results.json")
    assert _row(job).status == "running" == backend.status(job).status
    tree = processes.process_tree(launcher)
    pid = {"supervisor": data["pid"], "launcher": launcher,
           "worker": next((p for p in tree if os.getsid(p) == p and p != launcher), None)}[victim]
    assert pid is not None, tree
    os.kill(pid, signum)
    wait_until(lambda: not processes.process_alive(pid), 30, f"the {victim} outlived {signum.name}", 0.1)
    if victim == "supervisor":
        # Nothing else will write a final state: `results` must not wait for `status` to mark it.
        row = _row(job)
        assert row.status == "failed", row
        assert backend.status(job).status == "failed" == _row(job).status
    else:
        final = wait_terminal(backend, job)
        assert final.status == "failed", final
        assert _row(job).status == final.status
