"""Saved formats across versions (issue 33, item 2): the previous release (its code taken
from git at PREVIOUS) reads a home this version wrote, and says "newer" for a sweep saved in
a schema it does not know; this version reads, and migrates in place, a home the previous
one wrote; a change of the job spec's fields cannot go without a new definition schema.

Only read commands run on the old code (`sweep status`), on a sweep saved but never run: no
AWS, a few seconds."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from sweep_fakes import SWEEP, load

from orchestrator import sweep as sweeps
from orchestrator.ledger import LEDGER_SCHEMA, Ledger, NewerLedger
from orchestrator.sweep import definition as definitions

ROOT = Path(__file__).resolve().parents[1]
# The release before the ledger kept jobs' accounts and its format number (user_version).
PREVIOUS = "48df07d"


@pytest.fixture(scope="module")
def previous(tmp_path_factory) -> Path:
    """The previous release's orchestrator/ and entrypoints/, from git (skips without git)."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and this checkout's history")
    found = subprocess.run([git, "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"], capture_output=True)
    if found.returncode != 0:
        pytest.skip(f"commit {PREVIOUS} is not in this clone (a shallow clone?)")
    folder = tmp_path_factory.mktemp("previous")
    archive = folder / "code.tar"
    subprocess.run([git, "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), PREVIOUS,
                    "orchestrator", "entrypoints"], check=True, timeout=120)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return folder


def _old(previous: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(previous), ORCHESTRATOR_HOME=str(home), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          cwd=previous, env=env, timeout=120)


def test_the_previous_release_reads_a_home_this_version_wrote(tmp_path, orch_home, previous):
    ledger = Ledger()
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    first = ledger.entries(sweep_id=definition.sweep_id)[0].job_name
    ledger.set_account(first, "123456789012")  # the column the previous release does not know
    # Its trials' specs carry fields the previous release does not know (mlflow, plan_full):
    # it says the sweep is newer, and reads the ledger (its rows, the account column) as before.
    done = _old(previous, orch_home, "sweep", "status", definition.sweep_id, "--no-refresh")
    assert done.returncode == 2 and f"schema {definitions.DEFINITION_SCHEMA}" in done.stderr, done.stderr
    assert "upgrade" in done.stderr and "Traceback" not in done.stderr and "internal error" not in done.stderr
    listed = _old(previous, orch_home, "sweep", "status")
    assert listed.returncode == 0 and definition.sweep_id in listed.stdout


def test_the_previous_release_says_a_newer_definition_is_newer(tmp_path, orch_home, previous):
    ledger = Ledger()
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    saved = ledger.get_value(definitions.key(definition.sweep_id))
    newer = definitions.DEFINITION_SCHEMA + 1
    ledger.put_value(definitions.key(definition.sweep_id), {**saved, "schema": newer})
    done = _old(previous, orch_home, "sweep", "status", definition.sweep_id, "--no-refresh")
    assert done.returncode == 2 and f"schema {newer}" in done.stderr and "upgrade" in done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_this_version_reads_and_migrates_a_home_the_previous_release_wrote(tmp_path, orch_home, previous):
    write = ("from pathlib import Path; from orchestrator import spec, sweep; from orchestrator.ledger import "
             f"Ledger; d = sweep.save(sweep.plan(spec.load_sweep(Path({str(tmp_path / 'sweep.yaml')!r}))), Ledger()); "
             "print(d.sweep_id)")
    load(tmp_path, SWEEP)  # writes the files
    env = dict(os.environ, PYTHONPATH=str(previous), ORCHESTRATOR_HOME=str(orch_home))
    done = subprocess.run([sys.executable, "-c", write], capture_output=True, text=True, cwd=previous, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    sweep_id = done.stdout.strip()
    db = orch_home / "ledger.sqlite3"
    before = sqlite3.connect(db).execute("SELECT job_name, state FROM jobs ORDER BY job_name").fetchall()
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == 0
    ledger = Ledger()
    assert [(e.job_name, e.status) for e in sorted(ledger.entries(sweep_id=sweep_id), key=lambda e: e.job_name)] \
        == before  # the rows kept, in place
    assert {e.account for e in ledger.entries()} == {None}
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == LEDGER_SCHEMA
    assert len(sweeps.load_definition(ledger, sweep_id).trials) == len(before)


def test_a_ledger_of_a_newer_format_is_read_but_not_written(tmp_path, orch_home):
    Ledger().put_value("x", 1)
    db = sqlite3.connect(orch_home / "ledger.sqlite3")
    db.execute(f"PRAGMA user_version={LEDGER_SCHEMA + 1}")
    db.commit()
    db.close()
    with pytest.raises(NewerLedger) as raised:
        Ledger()
    assert f"format {LEDGER_SCHEMA + 1}" in raised.value.message and "upgrade" in raised.value.hint
    reader = Ledger(read_only=True)
    assert reader.get_value("x") == 1 and not reader.writable


def test_the_spec_fields_go_with_the_definition_schema():
    """A field added to (or removed from) the job spec: bump DEFINITION_SCHEMA (keep the old
    number in READABLE_SCHEMAS) and record the new SPEC_FIELDS_DIGEST, so that an earlier
    version says "schema N: upgrade" instead of failing on a field it does not know."""
    digest = hashlib.sha256("\n".join(definitions.spec_fields()).encode()).hexdigest()[:16]
    assert digest == definitions.SPEC_FIELDS_DIGEST, (
        f"the job spec's fields changed (digest {digest}): bump DEFINITION_SCHEMA and set SPEC_FIELDS_DIGEST")
    assert "instance.preferences" in definitions.spec_fields()
    assert json.loads(json.dumps(definitions.READABLE_SCHEMAS)) == list(range(1, definitions.DEFINITION_SCHEMA + 1))


def _laid_out_job(tmp_path):
    """A local job laid out as submit does (its supervisor never started): (backend, job, status.json)."""
    import time

    from test_backend_local import make_spec, prepared_for

    from orchestrator.backends.local import LocalBackend
    from orchestrator.backends.local import layout as local_layout

    prepared = prepared_for(make_spec(tmp_path))
    backend = LocalBackend()
    job_dir = backend.job_dir(prepared.job_name)
    job_dir.mkdir(parents=True)
    local_layout.lay_out(prepared, job_dir, ledger=backend.ledger.path, python=backend.python, now=time.time())
    return backend, prepared.job_name, job_dir / local_layout.STATUS_FILE


def test_a_local_jobs_status_file_carries_its_format_and_a_newer_one_says_upgrade(tmp_path, orch_home,
                                                                                  monkeypatch, capsys):
    from cli_harness import run_cli

    from orchestrator.backends.local import layout as local_layout

    backend, job, path = _laid_out_job(tmp_path)
    written = json.loads(path.read_text())
    assert written["format"] == local_layout.STATUS_FORMAT == 1
    assert backend.status(job).status == "pending"
    # One written before the field reads as format 1, as before.
    path.write_text(json.dumps({k: v for k, v in written.items() if k != "format"}))
    assert backend.status(job).status == "pending"
    # A newer format is named, not read as a damaged file nor guessed at: exit 2, "upgrade".
    newer = local_layout.STATUS_FORMAT + 1
    path.write_text(json.dumps({**written, "format": newer, "state": "a-state-to-come"}))
    with pytest.raises(local_layout.NewerStatus):
        backend.status(job)
    code, out, err = run_cli(monkeypatch, capsys, "status", job)
    assert code == 2, (out, err)
    assert f"format {newer}, written by a newer version of the orchestrator" in err and "upgrade" in err
    assert "damaged" not in err and path.read_text() == json.dumps({**written, "format": newer,
                                                                     "state": "a-state-to-come"})


def test_the_previous_release_reads_a_local_jobs_status_file_this_version_wrote(tmp_path, orch_home, previous):
    _, job, path = _laid_out_job(tmp_path)
    assert "format" in json.loads(path.read_text())
    done = _old(previous, orch_home, "status", job, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] in ("pending", "failed")  # failed: its supervisor never started


def test_status_says_upgrade_for_a_results_json_of_a_newer_schema(tmp_path, orch_home, monkeypatch, capsys):
    """results.json carries its version in `schema`; `results` names a newer one (tests/test_results.py)
    and so does `status`'s step line, which reads none of its fields."""
    from cli_harness import run_cli

    from entrypoints.shared import results_schema

    _, job, path = _laid_out_job(tmp_path)
    uri = json.loads(path.read_text())["results_uri"]
    stored = Path(uri[len("file://"):])
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps({"schema": "orchestrator.results/v2", "job_name": job, "status": "running",
                                  "steps_done": 7, "steps": 9}))
    code, out, err = run_cli(monkeypatch, capsys, "status", job)
    assert code == 0, err
    (step,) = [line for line in out.splitlines() if line.startswith("step ")]
    assert step == (f"step      ? (results.json at {uri} is orchestrator.results/v2, written by a newer version of "
                    "the orchestrator: upgrade this one to read it)")
    stored.write_text(json.dumps({"schema": results_schema.SCHEMA, "job_name": job, "status": "running",
                                  "steps_done": 7, "steps": 9}))
    code, out, _ = run_cli(monkeypatch, capsys, "status", job)
    assert code == 0 and "step      7 of 9 (heartbeat)" in out
    assert results_schema.is_newer("orchestrator.results/v2") and not results_schema.is_newer(results_schema.SCHEMA)
