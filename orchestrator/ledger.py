"""The local ledger: what was planned and submitted, crash-safe, shared by CLI processes.

SQLite in WAL mode under `ORCHESTRATOR_HOME/ledger.sqlite3`. Every change is one short
`BEGIN IMMEDIATE` transaction, so two CLI processes (a sweep runner and a `status`, two
sweep runners) can use it at once; readers never block the writer.

Rows are keyed by job name; a row's status is one of `lifecycle.RECORDED` (stored in the column
`state`, which existing ledgers keep). The protocol for anything that creates a cloud resource
is "intent first": write the row in status `submitting` (with the exact request), then call the
cloud, then move the row to `submitted`. A process killed in between leaves `submitting`
behind, and the next run reconciles it by asking the backend whether the job exists, never
by creating a second one.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import BackendError, InputError, note, notes_heard, visible
from orchestrator.lifecycle import RECORDED, Status
from orchestrator.paths import home

# How long a write waits for another process's lock in all (the error then), and after how long
# of it the wait is said (`errors.note`, which the CLI points at stderr), so a command
# held by another one (a sweep runner writing) is not silent for half a minute.
BUSY_TIMEOUT_S = 30.0
NOTICE_AFTER_S = 1.5
# In WAL mode a writer holds this byte of the -shm file (SQLite's WAL_WRITE_LOCK, lock 0, at
# UNIX_SHM_BASE = (22 + SQLITE_SHM_NLOCK) * 4 = 120 in os_unix.c; sqlite.org/walformat.html
# describes the locks), a rollback-mode writer the database file itself.
_WAL_WRITE_LOCK_BYTE = 120

_noted: dict[str, float] = {}  # ledger path -> when its wait was last said (time.monotonic)


# The ledger's format, in SQLite's user_version: 0 before it was kept, 2 since the `account`
# column. A column added later is added in place (`_open`), and the version bumped with it.
LEDGER_SCHEMA = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_name   TEXT PRIMARY KEY,
    backend    TEXT NOT NULL,
    region     TEXT NOT NULL,
    spec_hash  TEXT NOT NULL,
    state      TEXT NOT NULL,
    request    TEXT NOT NULL,
    sweep_id   TEXT,
    trial_id   TEXT,
    attempt    INTEGER NOT NULL DEFAULT 0,
    detail     TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    locations  TEXT,
    account    TEXT
);
CREATE INDEX IF NOT EXISTS jobs_sweep ON jobs (sweep_id, trial_id);
CREATE TABLE IF NOT EXISTS kv (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


class NewerLedger(InputError):
    """The ledger was written by a newer orchestrator (its user_version is above
    LEDGER_SCHEMA): it is not written by this one (exit 2); a read-only command reads it."""

    def __init__(self, path: Path, version: int):
        super().__init__(f"{path}: the ledger is in format {version}, written by a newer orchestrator; this one "
                         f"knows formats up to {LEDGER_SCHEMA} and does not write to it",
                         hint="upgrade this orchestrator (pip install -U, or the checkout that wrote it); read "
                              "commands (status, sweep status) still show what it holds")
        self.version = version


@dataclass(frozen=True)
class Entry:
    job_name: str
    backend: str
    region: str
    spec_hash: str
    status: Status  # stored in the column `state` (existing ledgers keep their schema)
    request: dict
    sweep_id: str | None
    trial_id: str | None
    attempt: int
    detail: str | None
    created_at: float
    updated_at: float
    # Where the job's objects go (`locations.Locations.to_json`), as it was prepared; None for a
    # row written before the ledger kept them.
    locations: dict | None = None
    # The AWS account (STS GetCallerIdentity) whose credentials were in use when the job was
    # about to be created; None for a local job, a row not submitted yet, or an older row.
    account: str | None = None


class Ledger:
    """A handle on the ledger database. Cheap to create; one per process is plenty."""

    def __init__(self, path: Path | None = None, *, busy_timeout_s: float | None = None, read_only: bool = False):
        """Open (creating if missing) the ledger at `path`, default `ORCHESTRATOR_HOME/ledger.sqlite3`.

        A file that is not a usable ledger (not SQLite, damaged, unreadable, read-only, a
        folder) is an InputError naming it; it is never deleted or rewritten. A write that
        waits more than `busy_timeout_s` (default BUSY_TIMEOUT_S) for another process's lock is a
        BackendError (exit 1); after NOTICE_AFTER_S of waiting it is said once (`errors.note`).

        `read_only` (commands that only read: status, logs, sweep status): a ledger this
        process cannot write (a read-only file, folder or file system) is opened for reading
        instead, and one that does not exist and cannot be created reads as empty. Such a
        ledger has `writable` False: `transition`, `set_account` and `put_value` then record
        nothing in the file (a copy of the ledger in memory takes them, so what the command
        read afterwards is what it learnt: a job found failed reads as failed), and
        `record_intent` is an InputError.
        """
        self.path = Path(path) if path else home() / "ledger.sqlite3"
        self.busy_timeout_s = BUSY_TIMEOUT_S if busy_timeout_s is None else busy_timeout_s
        self.writable = True
        self._select: str | None = None  # the SELECT list of an Entry (`_columns`)
        self._may_read_only = read_only
        self._memory = False  # a read-only ledger's writes go to a copy in memory (`_write`)
        if self.path.is_dir():
            raise InputError(f"{self.path}: cannot open the ledger for writing: it is a folder, not the ledger (an "
                             "SQLite file)",
                             hint=f"move it aside (mv {self.path} {self.path}.folder) and run again to start a new, "
                                  "empty ledger, or point ORCHESTRATOR_HOME at another folder")
        try:
            self._open()
        except NewerLedger as exc:
            if not read_only:
                raise
            self._open_for_reading(exc)  # its rows read as this version knows them
        except InputError as exc:
            if not read_only or not isinstance(exc.__cause__, (sqlite3.DatabaseError, OSError)):
                raise
            self._open_for_reading(exc)
        self._check_schema()

    # The columns every query reads (`locations` may be missing: added in place when writable).
    _REQUIRED = {"job_name", "backend", "region", "spec_hash", "state", "request", "sweep_id", "trial_id", "attempt",
                 "detail", "created_at", "updated_at"}

    def _check_schema(self) -> None:
        """InputError when the file is an SQLite database of another schema (its `jobs` table
        lacks our columns): every query would fail. It is left as it is."""
        with self._translated():
            jobs = self._job_columns()
            kv = {row[1] for row in self._db.execute("PRAGMA table_info(kv)")}
        missing = sorted(self._REQUIRED - jobs) if jobs else []  # no table yet: the schema makes it
        if (not kv or {"key", "value"} <= kv) and not missing:
            return
        self._db.close()
        what = (f"its jobs table lacks the column(s) {', '.join(missing)}" if missing
                else "its kv table lacks the columns key, value")
        raise InputError(f"{self.path} is not a ledger of this orchestrator: {what} (an SQLite file of another "
                         "schema); it was left as it is",
                         hint=f"move it aside (mv {self.path} {self.path}.other) and run again to start a new, empty "
                              "ledger, or point ORCHESTRATOR_HOME at another folder")

    def _open_for_reading(self, why: InputError) -> None:
        """The ledger as it is, without writing to it (see __init__'s `read_only`): read in
        place (mode=ro, which needs its -shm file usable); else, when its -wal file holds
        changes not yet in the main file, a copy of both read into memory (SQLite applies the
        -wal to the copy); else the main file alone (immutable=1). `why` is raised when none
        can be read."""
        self.writable = False
        if not self.path.exists():
            self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._db.executescript(_SCHEMA)
            return
        uri = self.path.resolve().as_uri()
        for how in ("mode=ro", "copy", "immutable=1"):
            db = None
            try:
                if how == "copy":
                    db = self._read_copy()
                    if db is None:
                        continue
                else:
                    db = sqlite3.connect(f"{uri}?{how}", uri=True, isolation_level=None, check_same_thread=False)
                db.execute("SELECT count(*) FROM jobs").fetchone()
                db.execute("SELECT count(*) FROM kv").fetchone()
            except (sqlite3.DatabaseError, OSError):
                if db is not None:
                    db.close()
                continue
            self._db = db
            return
        raise why

    def _read_copy(self) -> sqlite3.Connection | None:
        """The ledger with its -wal applied, in memory (None when there is no -wal to apply)."""
        import shutil
        import tempfile

        wal = self.path.with_name(self.path.name + "-wal")
        if not wal.exists() or wal.stat().st_size == 0:
            return None
        with tempfile.TemporaryDirectory(prefix="orchestrator-ledger-") as folder:
            copy = Path(folder) / self.path.name
            shutil.copyfile(self.path, copy)
            shutil.copyfile(wal, Path(folder) / wal.name)
            source = sqlite3.connect(copy)
            try:
                memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
                source.backup(memory)
            finally:
                source.close()
        return memory

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            from orchestrator.paths import write_hint

            raise InputError(f"{self.path}: cannot create the ledger's folder: {exc.strerror or exc}",
                             hint=write_hint(exc, "point ORCHESTRATOR_HOME at a folder you can write to")) from exc
        new = not self.path.exists()
        with self._translated():
            self._db = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None,
                                       check_same_thread=False)
            try:
                if new and self.path.exists():
                    # Private before anything is in it; SQLite gives its -wal and -shm the same mode.
                    os.chmod(self.path, 0o600)
                self._check_schema()  # before WAL mode and CREATE INDEX: a foreign file stays as it is
                self._use_wal()
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
                with self._tx():
                    for statement in _SCHEMA.strip().split(";"):
                        if statement.strip():
                            self._db.execute(statement)
                    columns = self._job_columns()
                    for column in ("locations", "account"):
                        if column not in columns:
                            # A ledger from before the column: added in place (SQLite keeps the rows).
                            self._db.execute(f"ALTER TABLE jobs ADD COLUMN {column} TEXT")
                    version = self._db.execute("PRAGMA user_version").fetchone()[0]
                    if version > LEDGER_SCHEMA:
                        raise NewerLedger(self.path, version)
                    if version < LEDGER_SCHEMA:
                        self._db.execute(f"PRAGMA user_version={LEDGER_SCHEMA}")
            except BaseException:
                self._db.close()
                raise

    def _job_columns(self) -> set[str]:
        return {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}

    def _columns(self) -> str:
        """The SELECT list of an `Entry` (a read-only ledger from before `locations` or `account`
        reads None for it)."""
        if self._select is None:
            present = self._job_columns()
            self._select = ", ".join(c if c in present else "NULL" for c in _COLUMNS.split(", "))
        return self._select

    def _use_wal(self) -> None:
        """Put the file in WAL mode, once. Switching the journal mode needs the whole file:
        SQLite answers "database is locked" at once, without waiting for the busy timeout,
        when another connection holds it, as when several processes open a new ledger
        together (a sweep's first submits, each job's supervisor). So read the mode first
        (WAL stays set in the file) and retry the switch until the busy timeout."""
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            try:
                if str(self._db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                    self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """sqlite3's errors about the file itself as our errors (see `_ledger_error`)."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            translated = _ledger_error(self.path, exc, self.busy_timeout_s)
            if translated is None:
                raise
            raise translated from exc

    @contextmanager
    def _unless_read_only(self) -> Iterator[None]:
        """For a ledger opened with `read_only`: a write SQLite refuses as read-only (a file on a
        read-only file system may open without a word and refuse the first write) makes the
        ledger read-only and the write a no-op, as if that had been known at open."""
        try:
            yield
        except InputError as exc:
            code = getattr(exc.__cause__, "sqlite_errorcode", None)
            # 13: SQLITE_FULL: a read command on a full disk records nothing, as on a read-only one.
            if not self._may_read_only or code is None or (code & 0xFF) not in (3, 8, 13, 14, 23):
                raise
            self.writable = False

    def _wait_for_locks(self, seconds: float) -> None:
        self._db.execute(f"PRAGMA busy_timeout={int(seconds * 1000)}")

    def _begin(self) -> None:
        """BEGIN IMMEDIATE, waiting up to busy_timeout_s for another process's write lock in
        all; once NOTICE_AFTER_S of that passed, the wait is said (`errors.note`), once per
        ledger per wait. SQLite waits inside one call, so the wait is split in two."""
        first = NOTICE_AFTER_S
        if not notes_heard() or first >= self.busy_timeout_s:
            self._db.execute("BEGIN IMMEDIATE")
            return
        self._wait_for_locks(first)
        try:
            self._db.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if _primary_code(exc) != 5:  # not SQLITE_BUSY
                raise
        finally:
            self._wait_for_locks(self.busy_timeout_s)
        rest = self.busy_timeout_s - first
        _say_held(self.path, rest)
        self._wait_for_locks(rest)
        try:
            self._db.execute("BEGIN IMMEDIATE")
        finally:
            self._wait_for_locks(self.busy_timeout_s)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._translated():
            self._begin()
            try:
                yield self._db
            except BaseException:
                # SQLite may have ended the transaction itself (a full disk does).
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            try:
                self._db.execute("COMMIT")
            except BaseException:
                # Leave no transaction open behind a failed commit: the next BEGIN would fail.
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def record_intent(self, job_name: str, *, backend: str, region: str, spec_hash: str, request: dict,
                      status: str = "submitting", sweep_id: str | None = None, trial_id: str | None = None,
                      attempt: int = 0, locations: dict | None = None) -> Entry:
        """Write the row before acting. If the row exists already, it is returned unchanged
        (the caller reconciles it), so a retried intent never forgets an earlier one."""
        status = _check_status(status)
        if not self.writable:
            raise InputError(f"{self.path}: the ledger cannot be written here, so {job_name} cannot be recorded",
                             hint="make the ledger, its folder and disk writable, or point ORCHESTRATOR_HOME at a "
                                  "folder you can write to")
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO jobs (job_name, backend, region, spec_hash, state, request, sweep_id,"
                " trial_id, attempt, detail, created_at, updated_at, locations) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (job_name, backend, region, spec_hash, status, json.dumps(request, sort_keys=True, default=str),
                 sweep_id, trial_id, attempt, None, now, now,
                 None if locations is None else json.dumps(locations, sort_keys=True)),
            )
        entry = self.get(job_name)
        assert entry is not None  # inserted or present: an internal invariant, not user input
        return entry

    def transition(self, job_name: str, status: str, *, detail: str | None = None,
                   expect: tuple[str, ...] | None = None) -> bool:
        """Move a row to `status`. With `expect`, only if its current status is one of those;
        returns whether the row changed (on a ledger not `writable`: in its copy in memory)."""
        status = _check_status(status)

        def update(db: sqlite3.Connection) -> bool:
            if expect:
                marks = ",".join("?" * len(expect))
                cur = db.execute(
                    f"UPDATE jobs SET state=?, detail=COALESCE(?, detail), updated_at=? "
                    f"WHERE job_name=? AND state IN ({marks})",
                    (status, detail, time.time(), job_name, *map(_check_status, expect)),
                )
            else:
                cur = db.execute(
                    "UPDATE jobs SET state=?, detail=COALESCE(?, detail), updated_at=? WHERE job_name=?",
                    (status, detail, time.time(), job_name),
                )
            return cur.rowcount > 0

        return self._write(update)

    def set_account(self, job_name: str, account: str) -> None:
        """Record the AWS account a job is created in, once (a row that has one keeps it)."""
        self._write(lambda db: db.execute("UPDATE jobs SET account=? WHERE job_name=? AND account IS NULL",
                                          (account, job_name)))

    def get(self, job_name: str) -> Entry | None:
        with self._translated():
            row = self._db.execute(f"SELECT {self._columns()} FROM jobs WHERE job_name=?", (job_name,)).fetchone()
        return _entry(row) if row else None

    def entries(self, *, sweep_id: str | None = None, statuses: tuple[str, ...] | None = None,
                backend: str | None = None) -> list[Entry]:
        """Rows, oldest first, filtered by sweep, statuses and backend."""
        where, args = [], []
        if sweep_id is not None:
            where.append("sweep_id=?")
            args.append(sweep_id)
        if statuses:
            where.append(f"state IN ({','.join('?' * len(statuses))})")
            args.extend(map(_check_status, statuses))
        if backend is not None:
            where.append("backend=?")
            args.append(backend)
        sql = f"SELECT {self._columns()} FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at, job_name"
        with self._translated():
            rows = self._db.execute(sql, args).fetchall()
        return [_entry(r) for r in rows]

    def put_value(self, key: str, value: object) -> None:
        self._write(lambda db: db.execute(
            "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, json.dumps(value, sort_keys=True))))

    def _write(self, change):
        """`change(db)` in a write transaction: in the file, or, on a ledger opened `read_only`
        that is not writable (from the start, or found so by this write: a full disk), in a
        copy of it in memory, which this object reads from then on. Its result."""
        if self.writable:
            with self._unless_read_only(), self._tx() as db:
                return change(db)
        if not self._memory:
            memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            with self._translated():
                self._db.backup(memory)
            self._db.close()
            self._db, self._memory = memory, True
        with self._tx() as db:
            return change(db)

    def get_value(self, key: str, default: object = None) -> object:
        with self._translated():
            row = self._db.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default


_COLUMNS = ("job_name, backend, region, spec_hash, state, request, sweep_id, trial_id, attempt, detail,"
            " created_at, updated_at, locations, account")


def _entry(row: tuple) -> Entry:
    return Entry(row[0], row[1], row[2], row[3], Status(row[4]), json.loads(row[5]), row[6], row[7], row[8], row[9],
                 row[10], row[11], json.loads(row[12]) if row[12] else None, row[13])


# SQLite's primary result codes (the low byte of an extended code) that are about the file.
_NOT_A_LEDGER = {11: "it is damaged (database disk image is malformed)", 26: "it is not an SQLite database"}
_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_CANNOT_WRITE = {3: "permission denied", 8: "it is read-only", 13: "the disk is full",
                 14: "it cannot be opened", 23: "access denied", 10: "an I/O error"}
_ELSEWHERE = "or point ORCHESTRATOR_HOME at a folder you can write to"
_CANNOT_WRITE_HINTS = {
    13: f"the disk that holds it is full: free some space there, {_ELSEWHERE} on another disk",
    10: f"the disk reported an I/O error: check it, {_ELSEWHERE} on another disk",
    14: f"check that the file and its folder exist and are readable and writable by you, {_ELSEWHERE}",
}


def _say_held(path: Path, waiting_s: float) -> None:
    """Say (`errors.note`) that another process holds the ledger and how long this one waits
    for it: once per ledger per wait, the holder's pid where the system says it."""
    now = time.monotonic()
    if now - _noted.get(str(path), -1e9) <= waiting_s or not notes_heard():
        return
    _noted[str(path)] = now
    from orchestrator.processes import command_line, lock_holder

    pid = lock_holder(f"{path}-shm", _WAL_WRITE_LOCK_BYTE) or lock_holder(path)
    argv = command_line(pid) if pid else None
    said = visible(" ".join(" ".join(argv).split()))[:80] if argv else None  # one line, however it was started
    who = (f"process {pid}" + (f" ({said})" if said else "")) if pid else "another process"
    note(f"note: the ledger {visible(str(path))} is held by {who}, which is writing to it; waiting up to "
         f"{waiting_s:g} s more")


def _primary_code(exc: sqlite3.DatabaseError) -> int | None:
    """SQLite's primary result code of `exc` (5: SQLITE_BUSY, ...)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF
    # Python 3.10: only the message says
    text = str(exc).lower()
    return next((c for c, needle in ((26, "not a database"), (11, "malformed"), (5, "locked"),
                                     (14, "unable to open"), (8, "readonly"), (13, "full"), (10, "disk i/o"))
                 if needle in text), None)


def _ledger_error(path: Path, exc: sqlite3.DatabaseError, busy_timeout_s: float) -> Exception | None:
    """Our error for an sqlite3 error about the ledger file; None for anything else (a bug)."""
    primary = _primary_code(exc)
    if primary in _NOT_A_LEDGER:
        return InputError(
            f"{path}: not a usable ledger: {_NOT_A_LEDGER[primary]}",
            hint=f"move it aside (mv {path} {path}.bad) and run again to start a new, empty ledger; "
                 "jobs recorded only in the old one are then unknown to `status` and sweeps")
    if primary in _BUSY:
        return BackendError(
            f"{path}: the ledger stayed locked by another process for {busy_timeout_s:g}s",
            hint="another orchestrator command (a sweep runner, a local job) is writing to it; "
                 "try again when it is done")
    if primary in (10, 13) and _disk_full(path):
        # A write that meets a full disk may come back as an I/O error (the WAL's shared memory).
        return InputError(f"{path}: cannot write to the ledger: the disk is full ({exc})", hint=_CANNOT_WRITE_HINTS[13])
    if primary in _CANNOT_WRITE:
        return InputError(
            f"{path}: cannot open the ledger for writing: {_CANNOT_WRITE[primary]} ({exc})",
            hint=_CANNOT_WRITE_HINTS.get(primary, f"make the file and its folder writable, {_ELSEWHERE}"))
    return None


def _disk_full(path: Path) -> bool:
    """Whether the file system that holds `path` has no block left for this process."""
    try:
        return os.statvfs(path.parent).f_bavail == 0
    except (OSError, AttributeError):
        return False


def _check_status(status: str) -> str:
    """`status` as stored: the value of a `lifecycle.RECORDED` status."""
    if status not in RECORDED:
        raise ValueError(f"unknown ledger state {status!r}")
    return Status(status).value
