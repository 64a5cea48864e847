"""Every state shown is the truth: `results`, `status`, `sweep status` and the live display of
`submit --wait` (`cli.job_view.wait`) agree on a local job however it ends: completed, failed,
stopped, or each of its processes killed in turn (QA: `results` said `running` forever for a job
whose supervisor was killed, and `stopped` where `status` said failed after a SIGINT to
launch.py)."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from sweep_fakes import LOCAL_BASE, write
from test_backend_local import wait_terminal, wait_until

from orchestrator import processes, spec
from orchestrator import results as res
from orchestrator import sweep as sweeps
from orchestrator.actions.sweeps import sweep_backend
from orchestrator.backends.local import layout as local_layout
from orchestrator.cli import job_view
from orchestrator.errors import JobFailed
from orchestrator.ledger import Ledger


def _row(job: str):
    rows = {row.job: row for row in res.collect(res.local_store_uri(), workers=1).rows}
    return rows[job]


def _results_written(job_dir, status: str) -> bool:
    path = job_dir / "algo-1" / "output" / "data" / "results.json"
    return path.exists() and f'"status": "{status}"' in path.read_text()


def _sweep_state(definition, job: str) -> str:
    """The state `sweep status` shows for the job (its read-only ledger, asking the backend)."""
    ledger = Ledger(read_only=True)
    runner = sweeps.Runner(definition, sweep_backend(definition, ledger), ledger)
    runner.refresh()
    (view,) = [v for v in runner.views() if v.job_name == job]
    return view.status


class _Display:
    """`submit --wait`'s live display (off a terminal, as in a CI log) run beside the job: every
    status line it printed, and the status it ended on."""

    def __init__(self, backend, job: str, capsys) -> None:
        self.lines: list[str] = []
        self.final = None
        self.error: BaseException | None = None
        self._capsys = capsys
        self._thread = threading.Thread(target=self._follow, args=(backend, job), daemon=True)
        self._thread.start()

    def _follow(self, backend, job: str) -> None:
        try:
            self.final = job_view.wait(backend, job, 0.1, interactive=False).status
        except JobFailed as exc:
            self.error = exc
        except BaseException as exc:  # noqa: BLE001 - reported by `ended`
            self.error = exc

    def ended(self) -> str:
        self._thread.join(120)
        assert not self._thread.is_alive(), "the live display never saw the job end"
        captured = self._capsys.readouterr()
        self.lines = (captured.out + captured.err).splitlines()
        shown = [line.split()[1] for line in self.lines if line.startswith("status ")]
        assert len(shown) == 1, self.lines
        if self.error is not None:
            assert isinstance(self.error, JobFailed), repr(self.error)
            assert f" {shown[0]}" in self.error.message, (self.error.message, shown)
        else:
            assert shown[0] == self.final == "completed", self.lines
        return shown[0]


def _start(orch_home, tmp_path, monkeypatch, sleep: str = "300"):
    """A one-trial local sweep whose job is submitted by the sweep runner, as `sweep run` does,
    and running (its fake trainer started): (definition, backend, job, job dir, status file)."""
    import json

    monkeypatch.setenv("FAKE_TRAIN_SLEEP", sleep)
    path = write(tmp_path, "sweep: agree\nbase: base.yaml\ngrid:\n  training.batch_size: [4]\n", LOCAL_BASE)
    ledger = Ledger()
    definition = sweeps.save(sweeps.plan(spec.load_sweep(path)), ledger)
    backend = sweep_backend(definition, ledger)
    sweeps.Runner(definition, backend, ledger, poll_seconds=0.1).step()
    (view,) = sweeps.Runner(definition, None, ledger).views()
    job = view.job_name
    job_dir = orch_home / "jobs" / job

    def started() -> bool:
        log = job_dir / "logs" / "all.log"
        return log.exists() and "fake-train rank 0/1 started" in log.read_text()

    wait_until(started, 60, "the fake trainer never started")
    data = json.loads((job_dir / local_layout.STATUS_FILE).read_text())
    return definition, backend.get("local"), job, job_dir, data


def _all_agree(definition, backend, job: str, display: _Display, expected: str) -> None:
    shown = display.ended()
    final = backend.status(job).status
    row = _row(job)
    assert (final, row.status, _sweep_state(definition, job), shown) == (expected,) * 4
    # What it ran on, as `results` says it (this machine's CPU), and an output only where one is.
    (instance,) = [line for line in display.lines if line.startswith("instance ")]
    assert instance.split()[1:3] == row.instance.split()[:2] == ["local", "CPU"], (instance, row.instance)
    for line in display.lines:
        if line.startswith("output "):
            uri = line.split()[1]
            assert uri.startswith("file://") and os.path.exists(uri[len("file://"):]), line


@pytest.mark.parametrize("ending", ["completed", "failed", "stopped"])
def test_all_views_agree_when_a_local_job_ends_by_itself_or_is_stopped(orch_home, tmp_path, fake_train,
                                                                        monkeypatch, capsys, ending):
    if ending == "failed":
        monkeypatch.setenv("FAKE_TRAIN_FAIL_RANK", "0")
    definition, backend, job, _, _ = _start(orch_home, tmp_path, monkeypatch,
                                            sleep="300" if ending == "stopped" else "1")
    display = _Display(backend, job, capsys)
    if ending == "stopped":
        backend.stop(job)
    wait_terminal(backend, job)
    _all_agree(definition, backend, job, display, ending)


@pytest.mark.parametrize("victim, signum", [
    ("supervisor", signal.SIGKILL),
    ("launcher", signal.SIGINT),
    ("launcher", signal.SIGKILL),
    ("worker", signal.SIGKILL),
])
def test_all_views_agree_however_a_local_job_is_killed(orch_home, tmp_path, fake_train, monkeypatch, capsys,
                                                       victim, signum):
    definition, backend, job, job_dir, data = _start(orch_home, tmp_path, monkeypatch)
    launcher = data["hosts"]["algo-1"]["pid"]
    wait_until(lambda: _results_written(job_dir, "running"), 60, "no heartbeat results.json")
    assert _row(job).status == "running" == backend.status(job).status == _sweep_state(definition, job)
    display = _Display(backend, job, capsys)
    tree = processes.process_tree(launcher)
    pid = {"supervisor": data["pid"], "launcher": launcher,
           "worker": next((p for p in tree if os.getsid(p) == p and p != launcher), None)}[victim]
    assert pid is not None, tree
    os.kill(pid, signum)
    wait_until(lambda: not processes.process_alive(pid), 30, f"the {victim} outlived {signum.name}", 0.1)
    if victim == "supervisor":
        # Nothing else will write a final state: `results` must not wait for `status` to mark it.
        assert _row(job).status == "failed"
    else:
        wait_terminal(backend, job)
    _all_agree(definition, backend, job, display, "failed")


# Loaded by every Python process of the job (the fake trainer's folder is on PYTHONPATH): once
# the marker file exists, the file:// store refuses every write, as a store made unwritable.
_REFUSING_STORE = '''
import os
_marker = os.environ.get("FAKE_STORE_REFUSES_AFTER")
if _marker:
    from entrypoints.shared.storage import file_store

    def _refusing(write):
        def refused(self, key, *args, **kwargs):
            if os.path.exists(_marker):
                raise self._error("write", key, PermissionError(13, "Permission denied"))
            return write(self, key, *args, **kwargs)
        return refused

    file_store.FileStore.put_bytes = _refusing(file_store.FileStore.put_bytes)
    file_store.FileStore.put_file = _refusing(file_store.FileStore.put_file)
'''


def test_status_and_results_agree_on_a_job_whose_store_became_unwritable(orch_home, tmp_path, fake_train,
                                                                         monkeypatch, capsys):
    """Issue 33, item 6: the store refuses writes after the job's first record. `status` shows
    the step of the record `results` reads (not the job's own later copy, named apart as not
    stored), and no model.tar.gz, which was never written."""
    from cli_harness import run_cli

    marker = tmp_path / "store-refuses"
    (tmp_path / "fake-train-module" / "sitecustomize.py").write_text(_REFUSING_STORE)
    monkeypatch.setenv("FAKE_STORE_REFUSES_AFTER", str(marker))
    definition, backend, job, job_dir, _ = _start(orch_home, tmp_path, monkeypatch, sleep="5")
    stored = orch_home / "store" / "jobs" / "results" / job / "results.json"
    wait_until(stored.exists, 60, "no results.json in the store")
    marker.touch()
    wait_terminal(backend, job)
    wait_until(lambda: _results_written(job_dir, "failed"), 60, "the job's own results.json is not final")
    status = backend.status(job)
    assert status.status == "failed" and "could not write results to" in status.failure_reason
    assert status.output_uri is None  # model.tar.gz was refused: nothing shown
    row = _row(job)
    progress = backend.progress(job)
    assert progress.uri == stored.as_uri()
    assert (progress.steps_done, progress.record) == (row.steps_done, "running")
    assert progress.newer is not None and progress.newer.record == "failed" and progress.newer.steps_done == 12
    assert row.status == "failed" == _sweep_state(definition, job)
    code, out, _ = run_cli(monkeypatch, capsys, "status", job)
    assert code == 0
    (step,) = [line for line in out.splitlines() if line.startswith("step ")]
    assert step.split()[1] == str(row.steps_done)
    assert "not stored: the job's own copy says step 12" in out
    assert "model.tar.gz" not in out
