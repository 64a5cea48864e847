"""The ledger: intent-first rows, guarded transitions, and two processes writing at once."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from orchestrator.errors import BackendError, InputError
from orchestrator.ledger import Ledger, home
from tests.cli_harness import run_cli

REQUEST = {"TrainingJobName": "vit-abc", "Environment": {"A": "1"}, "Tags": [{"Key": "k", "Value": "v"}]}


def _intent(ledger: Ledger, name: str = "vit-abc", **kw):
    args = {"backend": "sagemaker", "region": "us-east-1", "spec_hash": "ab" * 32, "request": REQUEST}
    args.update(kw)
    return ledger.record_intent(name, **args)


def test_home_defaults_to_orchestrator_home(orch_home):
    assert home() == orch_home
    ledger = Ledger()
    assert ledger.path == orch_home / "ledger.sqlite3"
    assert ledger.path.exists()


NOT_SQLITE = bytes(range(256)) * 8  # what QA found: random bytes where the ledger should be


def test_a_file_that_is_not_sqlite_is_an_input_error_and_is_left_as_it_was(orch_home):
    path = orch_home / "ledger.sqlite3"
    path.write_bytes(NOT_SQLITE)
    with pytest.raises(InputError) as info:
        Ledger()
    assert info.value.exit_code == 2
    assert info.value.message == f"{path}: not a usable ledger: it is not an SQLite database"
    assert f"mv {path} {path}.bad" in info.value.hint
    assert path.read_bytes() == NOT_SQLITE
    assert sorted(p.name for p in orch_home.iterdir()) == ["ledger.sqlite3"]  # no -wal/-shm beside it


def test_a_damaged_ledger_is_an_input_error_and_is_left_as_it_was(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    _intent(ledger)
    ledger.close()
    damaged = path.read_bytes()[:100] + b"\xab" * (path.stat().st_size - 100)  # a valid header, pages gone
    path.write_bytes(damaged)
    with pytest.raises(InputError) as info:
        Ledger(path)
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"{path}: not a usable ledger: it is damaged")
    assert f"mv {path} {path}.bad" in info.value.hint
    assert path.read_bytes() == damaged


@pytest.mark.parametrize("args", [("status", "foo"), ("sweep", "status", "x")])
def test_cli_on_a_corrupt_ledger_exits_2_naming_it(orch_home, monkeypatch, capsys, args):
    path = orch_home / "ledger.sqlite3"
    path.write_bytes(NOT_SQLITE)
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2
    assert f"error: {path}: not a usable ledger" in err
    assert f"hint: move it aside (mv {path} {path}.bad)" in err
    assert "Traceback" not in err
    assert path.read_bytes() == NOT_SQLITE


def test_a_ledger_path_that_cannot_be_opened_is_an_input_error(tmp_path):
    folder = tmp_path / "ledger.sqlite3"
    folder.mkdir()  # SQLite cannot open a folder: what an unwritable home looks like to it
    with pytest.raises(InputError) as info:
        Ledger(folder)
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"{folder}: cannot open the ledger for writing")
    assert "ORCHESTRATOR_HOME" in info.value.hint
    assert list(folder.iterdir()) == []


def test_a_ledger_locked_past_the_busy_timeout_is_a_backend_error_and_recovers(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path, busy_timeout_s=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    try:
        with pytest.raises(BackendError) as info:
            _intent(ledger)
        assert info.value.exit_code == 1
        assert info.value.message == f"{path}: the ledger stayed locked by another process for 0.2s"
        assert "try again" in info.value.hint
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _intent(ledger).status == "submitting"  # no transaction left open by the failure


def test_intent_is_written_first_with_the_exact_request(orch_home):
    ledger = Ledger()
    entry = _intent(ledger)
    assert entry.status == "submitting"
    assert entry.request == REQUEST
    assert Ledger().get("vit-abc") == entry  # visible to a second handle (another process)


def test_intent_is_idempotent_and_never_forgets_the_first(orch_home):
    ledger = Ledger()
    first = _intent(ledger)
    ledger.transition("vit-abc", "submitted")
    again = _intent(ledger, spec_hash="cd" * 32, request={"other": True})
    assert again.status == "submitted"
    assert again.spec_hash == first.spec_hash
    assert again.request == REQUEST
    assert again.created_at == first.created_at
    assert len(ledger.entries()) == 1


def test_transition_with_expect_only_moves_matching_rows(orch_home):
    ledger = Ledger()
    _intent(ledger)
    assert ledger.transition("vit-abc", "submitted", expect=("submitting",))
    assert not ledger.transition("vit-abc", "submitted", expect=("submitting",))
    assert ledger.transition("vit-abc", "failed", detail="OOM", expect=("submitted", "running"))
    # A terminal row is not moved back by a stale status read.
    assert not ledger.transition("vit-abc", "running", expect=("submitting", "submitted", "running"))
    entry = ledger.get("vit-abc")
    assert (entry.status, entry.detail) == ("failed", "OOM")
    # detail is kept when a later transition gives none.
    ledger.transition("vit-abc", "stopped")
    assert ledger.get("vit-abc").detail == "OOM"


def test_transition_of_a_missing_row_changes_nothing(orch_home):
    ledger = Ledger()
    assert not ledger.transition("nope", "running")
    assert ledger.get("nope") is None


def test_unknown_states_are_refused(orch_home):
    ledger = Ledger()
    with pytest.raises(ValueError, match="unknown ledger state"):
        _intent(ledger, status="bogus")
    _intent(ledger)
    with pytest.raises(ValueError, match="unknown ledger state"):
        ledger.transition("vit-abc", "exploded")
    assert ledger.get("vit-abc").status == "submitting"


def test_entries_filter_by_sweep_state_and_backend(orch_home):
    ledger = Ledger()
    _intent(ledger, "a", sweep_id="s1", trial_id="t0")
    _intent(ledger, "b", sweep_id="s1", trial_id="t1", backend="local")
    _intent(ledger, "c")
    ledger.transition("b", "completed")
    assert [e.job_name for e in ledger.entries()] == ["a", "b", "c"]
    assert [e.job_name for e in ledger.entries(sweep_id="s1")] == ["a", "b"]
    assert [e.job_name for e in ledger.entries(statuses=("completed",))] == ["b"]
    assert [e.job_name for e in ledger.entries(backend="sagemaker")] == ["a", "c"]
    assert [e.job_name for e in ledger.entries(sweep_id="s1", backend="sagemaker")] == ["a"]


def test_key_values_round_trip(orch_home):
    ledger = Ledger()
    assert ledger.get_value("cursor", default=7) == 7
    ledger.put_value("cursor", {"at": "2026-01-01T03:00"})
    ledger.put_value("cursor", {"at": "2026-01-08T03:00"})
    assert Ledger().get_value("cursor") == {"at": "2026-01-08T03:00"}


def test_the_database_is_in_wal_mode(orch_home):
    Ledger()
    db = sqlite3.connect(orch_home / "ledger.sqlite3")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


JOBS_PER_WORKER = 40
STEPS = ("submitted", "running", "completed")


def _writer(path: str, worker: int, shared: str, start, errors) -> None:
    """One CLI-like process: its own handle, many short transactions, racing the other."""
    try:
        start.wait(30)
        ledger = Ledger(path)
        for i in range(JOBS_PER_WORKER):
            name = f"w{worker}-{i}"
            _intent(ledger, name, sweep_id=f"sweep-{worker}", trial_id=str(i))
            for state in STEPS:
                ledger.transition(name, state)
            # Both processes fight over the same row and the same key as well.
            _intent(ledger, shared)
            ledger.transition(shared, "running")
            ledger.put_value(f"count-{worker}", i + 1)
            ledger.entries(sweep_id=f"sweep-{1 - worker}")
        ledger.close()
    except Exception as exc:  # reported to the parent, which fails the test with it
        errors.put(f"worker {worker}: {type(exc).__name__}: {exc}")


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "ledger.sqlite3")
    Ledger(path).close()
    ctx = multiprocessing.get_context("spawn")
    start, errors = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, w, "shared-job", start, errors)) for w in (0, 1)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert problems == []  # in particular no "database is locked"

    ledger = Ledger(path)
    entries = ledger.entries()
    assert len(entries) == 2 * JOBS_PER_WORKER + 1
    for worker in (0, 1):
        rows = ledger.entries(sweep_id=f"sweep-{worker}")
        assert sorted(int(e.trial_id) for e in rows) == list(range(JOBS_PER_WORKER))
        assert {e.status for e in rows} == {"completed"}
        assert ledger.get_value(f"count-{worker}") == JOBS_PER_WORKER
    assert ledger.get("shared-job").status == "running"


def _open_and_read(path: str) -> str:
    try:
        Ledger(Path(path), busy_timeout_s=10).get("x")
        return "ok"
    except Exception as exc:  # noqa: BLE001 - reported to the test
        return f"{type(exc).__name__}: {exc}"


def test_processes_opening_a_new_ledger_together_all_get_it(tmp_path):
    # CI caught "the ledger stayed locked" from concurrent submits: switching a new file to
    # WAL fails at once, without the busy timeout, while another process holds it.
    with multiprocessing.get_context("fork").Pool(8) as pool:
        for round_ in range(12):
            path = tmp_path / str(round_) / "ledger.sqlite3"
            path.parent.mkdir()
            assert pool.map(_open_and_read, [str(path)] * 8) == ["ok"] * 8, round_


# --- messages that misled (issue 14), and read-only commands on a ledger they cannot write ---------


def test_a_ledger_that_is_a_folder_says_so(tmp_path):
    # QA: a ledger that is a folder said "make the file and its folder writable".
    (tmp_path / "ledger.sqlite3").mkdir()
    with pytest.raises(InputError) as info:
        Ledger(tmp_path / "ledger.sqlite3")
    assert info.value.message == (f"{tmp_path / 'ledger.sqlite3'}: cannot open the ledger for writing: it is a folder, "
                                  "not the ledger (an SQLite file)")
    assert info.value.hint.startswith(f"move it aside (mv {tmp_path / 'ledger.sqlite3'} ")
    assert "writable" not in info.value.hint
    with pytest.raises(InputError, match="is a folder"):
        Ledger(tmp_path / "ledger.sqlite3", read_only=True)  # nothing to read there either


def test_a_full_disk_says_the_disk_is_full(tmp_path, monkeypatch):
    # QA: a full disk said "make the file writable". SQLite's page cap gives SQLITE_FULL here,
    # set on the ledger's own connection as sqlite3 opens it.
    opened = []
    real_connect = sqlite3.connect

    def connect(*args, **kwargs):
        opened.append(real_connect(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(sqlite3, "connect", connect)
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    (db,) = opened
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count={pages}")
    with pytest.raises(InputError) as info:
        for n in range(1000):
            ledger.record_intent(f"job-{n}", backend="local", region="us-east-1", spec_hash="0" * 64,
                                 request={"pad": "x" * 4000})
    assert "the disk is full" in info.value.message
    assert info.value.hint.startswith("the disk that holds it is full: free some space there")
    assert "writable" not in info.value.hint


def test_a_read_only_ledger_is_read_by_read_only_commands_and_records_nothing(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    writer = Ledger(path)
    writer.record_intent("vit-1", backend="local", region="us-east-1", spec_hash="0" * 64, request={})
    writer.close()
    reader = Ledger(path, read_only=True)
    assert reader.writable  # it could be written: opened as usual
    reader.close()


def _ro_home_script(home, command: str) -> str:
    """A shell script that puts a copy of `home` on a read-only tmpfs at the same path, then runs
    `command` there."""
    import shlex

    copy = shlex.quote(str(home.parent / "copy"))
    target = shlex.quote(str(home))
    return (f"cp -a {target} {copy} && mount -t tmpfs tmpfs {target} && cp -a {copy}/. {target}/ && "
            f"mount -o remount,ro {target} && {command}")


@pytest.mark.timeout(300)
def test_status_and_sweep_status_read_a_ledger_on_a_read_only_file_system(orch_home, tmp_path):
    # QA: read-only commands failed when the ledger was not writable.
    import json
    import os
    import sys

    from cli_harness import in_mount_namespace

    ROOT = Path(__file__).resolve().parents[1]
    Ledger().record_intent("local-done-1", backend="local", region="us-east-1", spec_hash="0" * 64, request={})
    folder = orch_home / "jobs" / "local-done-1"
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({"state": "completed", "secondary": "Completed",
                                                    "created": 1.0, "started": 2.0, "ended": 3.0}))
    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(orch_home))
    python = f"{sys.executable} -m orchestrator"
    done = in_mount_namespace(_ro_home_script(orch_home, f"touch {orch_home}/x; {python} status local-done-1 && "
                                                       f"echo ===== && {python} sweep status"), env)
    assert "Read-only file system" in done.stderr  # the touch: the home really is read-only there
    assert done.returncode == 0, done.stdout + done.stderr
    status, sweeps_ = done.stdout.split("=====\n")
    assert "job       local-done-1" in status and "status    completed" in status
    assert sweeps_ == "no sweeps in the ledger\n"
    assert f"note: the ledger {orch_home / 'ledger.sqlite3'} cannot be written here: it was read as it is" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.timeout(300)
def test_a_full_disk_under_the_ledger_is_reported_as_a_full_disk(orch_home, tmp_path):
    import os
    import shlex
    import sys

    from cli_harness import in_mount_namespace

    ROOT = Path(__file__).resolve().parents[1]
    Ledger().close()
    (tmp_path / "base.yaml").write_text("name: full\nbackend: local\n")
    (tmp_path / "sweep.yaml").write_text("sweep: full\nbase: base.yaml\ngrid:\n  training.steps: [20, 30, 40, 50]\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(orch_home))
    home, copy = shlex.quote(str(orch_home)), shlex.quote(str(tmp_path / "copy"))
    script = (f"cp -a {home} {copy} && mount -t tmpfs -o size=512k tmpfs {home} && cp -a {copy}/. {home}/ && "
              f"(head -c 10000000 /dev/zero > {home}/filler 2>/dev/null; true) && "
              f"{sys.executable} -m orchestrator sweep run {shlex.quote(str(tmp_path / 'sweep.yaml'))}")
    done = in_mount_namespace(script, env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the disk is full" in done.stderr and "free some space" in done.stderr
    assert "writable" not in done.stderr and "Traceback" not in done.stderr


@pytest.fixture
def held_ledger(orch_home):
    """The home's ledger, its write lock held by another process until the test ends: (path,
    that process)."""
    import subprocess
    import sys

    path = orch_home / "ledger.sqlite3"
    Ledger(path).close()  # made, in WAL mode
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys\n"
         "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "db.execute('BEGIN IMMEDIATE')\n"
         "print('held', flush=True)\n"
         "sys.stdin.read()\n", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield path, holder
    finally:
        holder.stdin.close()  # it ends, and its lock with it
        holder.wait(60)


def test_a_command_waiting_for_a_held_ledger_says_so_once_then_gives_its_error(held_ledger, monkeypatch, capsys):
    # Issue 32 (13): a locked ledger made a command silent for 30 s before its clear error.
    from orchestrator import ledger

    path, holder = held_ledger
    monkeypatch.setattr(ledger, "BUSY_TIMEOUT_S", 0.5)
    monkeypatch.setattr(ledger, "NOTICE_AFTER_S", 0.05)
    monkeypatch.setattr(ledger, "_noted", {})
    code, _, err = run_cli(monkeypatch, capsys, "status", "vit-1")
    assert code == 1, err
    lines = err.splitlines()
    notes = [line for line in lines if line.startswith("note: the ledger ")]
    # Said once, naming the process that holds it (Linux says, in /proc/locks) and the wait.
    assert notes == [f"note: the ledger {path} is held by process {holder.pid} ({notes[0].split('(', 1)[1]}"], err
    assert "python" in notes[0] and notes[0].endswith("which is writing to it; waiting up to 0.45 s more")
    assert lines.index(notes[0]) < lines.index(f"error: {path}: the ledger stayed locked by another process for 0.5s")
    assert lines[-1].startswith("hint: another orchestrator command")


def test_a_write_that_gets_the_lock_after_the_note_goes_on(held_ledger, monkeypatch):
    # The wait is split in two (the note between): the second part still takes the lock.
    from orchestrator import errors, ledger

    path, holder = held_ledger
    said: list[str] = []
    monkeypatch.setattr(ledger, "_noted", {})
    monkeypatch.setattr(ledger, "NOTICE_AFTER_S", 0.05)

    def release(text: str) -> None:
        said.append(text)
        holder.stdin.close()  # the holder ends while this process waits for the rest

    monkeypatch.setattr(errors, "_notes", release)
    ledger_ = Ledger(path, busy_timeout_s=60)
    ledger_.record_intent("vit-1", backend="local", region="local", spec_hash="0" * 64, request={})
    assert ledger_.get("vit-1") is not None
    assert len(said) == 1 and f"is held by process {holder.pid}" in said[0]
