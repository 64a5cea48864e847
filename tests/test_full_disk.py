"""Read commands on a full disk (issue 33, item 5): `status` of a local job whose supervisor
is gone reports it failed without needing to write (it is marked by the next command that
can), and a read-only ledger on a full disk records nothing instead of failing."""

from __future__ import annotations

import errno
import json
import os
import sqlite3

from test_backend_local import make_spec, prepared_for

from orchestrator.backends.local import LocalBackend
from orchestrator.backends.local import backend as local_backend
from orchestrator.backends.local import layout as local_layout
from orchestrator.ledger import Ledger


class FullDisk:
    """A ledger's SQLite connection, except that every write meets a full disk (SQLITE_FULL)."""

    def __init__(self, db):
        self._db = db

    def __getattr__(self, name):
        return getattr(self._db, name)

    def execute(self, sql, *args):
        if sql.lstrip().upper().startswith(("BEGIN", "INSERT", "UPDATE", "DELETE", "CREATE", "ALTER")):
            error = sqlite3.OperationalError("database or disk is full")
            error.sqlite_errorcode = 13  # SQLITE_FULL
            raise error
        return self._db.execute(sql, *args)


def test_status_reports_an_orphan_on_a_full_disk_without_writing(orch_home, tmp_path, fake_train, monkeypatch):
    prepared = prepared_for(make_spec(tmp_path))
    clock = {"now": 1_000_000.0}
    backend = LocalBackend(clock=lambda: clock["now"])
    job_dir = backend.job_dir(prepared.job_name)
    job_dir.mkdir(parents=True)
    local_layout.lay_out(prepared, job_dir, ledger=backend.ledger.path, python=backend.python, now=clock["now"])
    clock["now"] += local_layout.START_GRACE_S + 1

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(local_backend, "write_json", full)
    shown = backend.status(prepared.job_name)
    assert shown.status == "failed" and shown.failure_reason.startswith("InternalServerError")
    assert json.loads((job_dir / local_layout.STATUS_FILE).read_text())["state"] == "pending"  # not written
    monkeypatch.undo()
    assert backend.status(prepared.job_name).status == "failed"  # marked once it can be
    assert json.loads((job_dir / local_layout.STATUS_FILE).read_text())["state"] == "failed"


def test_a_read_only_ledger_on_a_full_disk_records_nothing(orch_home, monkeypatch):
    Ledger().put_value("kept", 1)
    reader = Ledger(read_only=True)

    monkeypatch.setattr(reader, "_db", FullDisk(reader._db))
    reader.put_value("x", 2)  # nothing recorded, no error
    assert not reader.writable and reader.get_value("kept") == 1


def test_status_shows_no_output_that_was_never_written(orch_home, tmp_path, fake_train):
    """Issue 33, item 6: status.json names the model's place from the lay-out on; a store that
    could not be written leaves nothing there, and status must not show it."""
    prepared = prepared_for(make_spec(tmp_path))
    clock = {"now": 1_000_000.0}
    backend = LocalBackend(clock=lambda: clock["now"])
    job_dir = backend.job_dir(prepared.job_name)
    job_dir.mkdir(parents=True)
    local_layout.lay_out(prepared, job_dir, ledger=backend.ledger.path, python=backend.python, now=clock["now"])
    data = json.loads((job_dir / local_layout.STATUS_FILE).read_text())
    named = data["output_uri"]
    assert named.startswith("file://") and named.endswith("/model.tar.gz")
    (job_dir / local_layout.STATUS_FILE).write_text(json.dumps({**data, "state": "completed", "ended": clock["now"]}))
    assert backend.status(prepared.job_name).output_uri is None
    from urllib.parse import unquote, urlsplit

    model = unquote(urlsplit(named).path)
    import os

    os.makedirs(os.path.dirname(model), exist_ok=True)
    with open(model, "wb") as f:
        f.write(b"model")
    assert backend.status(prepared.job_name).output_uri == named


def test_a_supervisor_that_dies_names_its_cause(tmp_path, monkeypatch):
    from orchestrator.backends.local import supervisor

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / local_layout.STATUS_FILE).write_text(json.dumps({"state": "running"}))

    def dies(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(supervisor.Supervisor, "run", dies)
    monkeypatch.setattr(supervisor.Supervisor, "__init__", lambda self, job_dir: None)
    assert supervisor.main([str(job_dir)]) == 1
    reason = json.loads((job_dir / local_layout.STATUS_FILE).read_text())["failure_reason"]
    assert "No space left on device" in reason and reason.startswith("InternalServerError")


def test_an_orphan_on_a_full_disk_says_the_disk_is_full(orch_home, tmp_path, fake_train, monkeypatch):
    import os

    prepared = prepared_for(make_spec(tmp_path))
    clock = {"now": 1_000_000.0}
    backend = LocalBackend(clock=lambda: clock["now"])
    job_dir = backend.job_dir(prepared.job_name)
    job_dir.mkdir(parents=True)
    local_layout.lay_out(prepared, job_dir, ledger=backend.ledger.path, python=backend.python, now=clock["now"])
    clock["now"] += local_layout.START_GRACE_S + 1
    real = os.statvfs

    class Full:
        def __init__(self, st):
            self._st = st

        def __getattr__(self, name):
            return 0 if name == "f_bavail" else getattr(self._st, name)

    monkeypatch.setattr(os, "statvfs", lambda path: Full(real(path)))
    reason = backend.describe(prepared.job_name).failure_reason
    assert "disk that holds its folder is full (No space left on device)" in reason


class FullFile:
    """A file on a full disk: opened (appending to a file needs no new block), every write refused."""

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_supervisor_on_a_full_disk_ends_its_job_and_says_why_in_its_log(orch_home, tmp_path, fake_train,
                                                                          monkeypatch, capfd):
    """Its status.json and logs refused: the hosts still run to their end and are reaped, the
    outputs uploaded, and supervisor.log (its stderr) names the files and the cause."""
    import signal
    import time

    from orchestrator.backends.local import supervisor

    prepared = prepared_for(make_spec(tmp_path))
    backend = LocalBackend()
    job_dir = backend.job_dir(prepared.job_name)
    job_dir.mkdir(parents=True)
    backend._upload_source(prepared)  # as submit does before it lays the job out
    local_layout.lay_out(prepared, job_dir, ledger=backend.ledger.path, python=backend.python, now=time.time())
    laid_out = (job_dir / local_layout.STATUS_FILE).read_text()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(supervisor, "write_json", full)
    monkeypatch.setattr(supervisor, "open", lambda *args, **kwargs: FullFile(), raising=False)
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        assert supervisor.Supervisor(job_dir).run() == 0
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
    log = capfd.readouterr().err
    assert "[local] could not write status.json: OSError: [Errno 28] No space left on device" in log
    assert "could not write logs/all.log: OSError: [Errno 28] No space left on device" in log
    assert "could not write logs/algo-1.log: OSError: [Errno 28] No space left on device" in log
    assert "write(s) to status.json refused; the first: OSError: [Errno 28] No space left on device" in log
    assert (job_dir / local_layout.STATUS_FILE).read_text() == laid_out  # nothing half-written
    monkeypatch.undo()
    # The job ran to its end (the disk refused the supervisor's records only): the host's
    # results say completed, and its model reached the store.
    from urllib.parse import unquote, urlsplit

    results = job_dir / "algo-1" / "output" / "data" / "results.json"
    assert json.loads(results.read_text())["status"] == "completed"
    named = json.loads(laid_out)["output_uri"]
    assert os.path.exists(unquote(urlsplit(named).path))


def test_a_supervisor_whose_last_resort_meets_a_full_disk_says_why_in_its_log(tmp_path, monkeypatch, capfd):
    from orchestrator.backends.local import supervisor

    job_dir = tmp_path / "job"
    job_dir.mkdir()

    def dies(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(supervisor.Supervisor, "run", dies)
    monkeypatch.setattr(supervisor.Supervisor, "__init__", lambda self, job_dir: None)
    monkeypatch.setattr(supervisor, "write_json", dies)
    assert supervisor.main([str(job_dir)]) == 1
    log = capfd.readouterr().err
    assert "Traceback" in log and "OSError: [Errno 28] No space left on device" in log
    assert "[local] could not write status.json: OSError: [Errno 28] No space left on device" in log


def test_status_and_sweep_status_read_a_dead_supervisors_job_on_a_full_disk(orch_home, tmp_path, fake_train,
                                                                             monkeypatch, capsys):
    """`status` and `sweep status` of a sweep's job whose supervisor was killed, with every file
    write and every ledger write refused for want of space: both show it failed (exit 0), nothing
    is written; once the disk has room, the next `status` marks it."""
    import signal

    from cli_harness import run_cli
    from test_backend_local import wait_until
    from test_state_agreement import _start

    from entrypoints.shared import atomic
    from orchestrator import processes

    definition, _backend, job, job_dir, data = _start(orch_home, tmp_path, monkeypatch)
    os.kill(data["pid"], signal.SIGKILL)
    wait_until(lambda: not processes.process_alive(data["pid"]), 30, "the supervisor outlived SIGKILL", 0.1)
    status_before = (job_dir / local_layout.STATUS_FILE).read_bytes()
    ledger_before = Ledger(read_only=True).get(job).status

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")


    real_open = Ledger._open

    def open_on_a_full_disk(self):
        real_open(self)
        self._db = FullDisk(self._db)

    with monkeypatch.context() as m:
        m.setattr(atomic, "_temp_in", full)  # every atomic file write: status.json, results, locks
        m.setattr(Ledger, "_open", open_on_a_full_disk)
        code, out, err = run_cli(m, capsys, "status", job)
        assert code == 0, (out, err)
        assert "failed" in out and "InternalServerError" in out
        code, out, err = run_cli(m, capsys, "sweep", "status", definition.sweep_id)
        assert code == 0, (out, err)
        assert "failed" in out, out
        assert "cannot be written here" in err  # the note of a read-only ledger
    assert (job_dir / local_layout.STATUS_FILE).read_bytes() == status_before
    assert Ledger(read_only=True).get(job).status == ledger_before
    code, out, _ = run_cli(monkeypatch, capsys, "status", job)
    assert code == 0 and "failed" in out
    assert json.loads((job_dir / local_layout.STATUS_FILE).read_text())["state"] == "failed"
