"""Read commands on a full disk (issue 33, item 5): `status` of a local job whose supervisor
is gone reports it failed without needing to write (it is marked by the next command that
can), and a read-only ledger on a full disk records nothing instead of failing."""

from __future__ import annotations

import errno
import json
import sqlite3

from test_backend_local import make_spec, prepared_for

from orchestrator.backends.local import LocalBackend
from orchestrator.backends.local import backend as local_backend
from orchestrator.backends.local import layout as local_layout
from orchestrator.ledger import Ledger


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

    class Full(sqlite3.OperationalError):
        sqlite_errorcode = 13  # SQLITE_FULL

    class FullDisk:
        """The connection, except that a write transaction meets a full disk."""

        def __init__(self, db):
            self._db = db

        def __getattr__(self, name):
            return getattr(self._db, name)

        def execute(self, sql, *args):
            if sql.startswith("BEGIN"):
                raise Full("database or disk is full")
            return self._db.execute(sql, *args)

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
