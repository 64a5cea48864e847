"""A job's locations are one value (issue 24): made by its backend when it is prepared, carried by
`Prepared`, recorded in the ledger, and what the job file, the request and the backends read."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from entrypoints.launcher import bootstrap
from orchestrator import backends, locations, request, spec
from orchestrator.ledger import Ledger

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _prepared(config: str, **kwargs):
    return request.prepare(spec.load(CONFIGS / config), **kwargs)


def test_the_laptop_and_the_container_name_results_json_alike():
    from entrypoints.shared.results_schema import RESULTS_FILE

    assert locations.RESULTS_FILE == RESULTS_FILE


def test_the_value_spells_every_location_under_its_prefixes():
    where = locations.Locations.under("s3://b/jobs/", "j-1", "s3://b/cache/")
    assert where == locations.Locations(
        output="s3://b/jobs", results="s3://b/jobs/results/j-1/results.json", tensorboard="s3://b/jobs/tensorboard/j-1",
        checkpoints="s3://b/jobs/checkpoints/j-1", compile_cache="s3://b/cache", source=None)
    sourced = where.with_source("ab" * 32)
    assert sourced.source == "s3://b/jobs/source/abababababababab/sourcedir.tar.gz"
    assert locations.Locations.from_json(json.loads(json.dumps(sourced.to_json()))) == sourced
    assert locations.output_of_source(sourced.source) == "s3://b/jobs"


def test_a_sagemaker_request_reads_its_locations_from_the_value(orch_home):
    prepared = _prepared("vit-trn1-2xlarge.yaml")
    where, req, job = prepared.locations, prepared.request, prepared.job
    assert where == locations.of(prepared.spec, prepared.job_name).with_source(prepared.archive_sha256)
    assert job["results_uri"] == where.results and job["compile_cache"]["uri"] == where.compile_cache
    assert req["OutputDataConfig"]["S3OutputPath"] == where.output
    assert req["TensorBoardOutputConfig"]["S3OutputPath"] == where.tensorboard
    assert req["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == where.source == prepared.source_uri


def test_a_batch_request_and_job_file_read_theirs_too(orch_home):
    prepared = _prepared("vit-inf2-xlarge.yaml")
    where = prepared.locations
    env = {e["name"]: e["value"] for e in prepared.request["containerOverrides"]["environment"]}
    assert env[bootstrap.CODE_URI_ENV] == where.source
    assert prepared.job["tensorboard_uri"] == where.tensorboard and prepared.job["results_uri"] == where.results


def test_a_batch_spec_run_here_has_the_stores_locations(orch_home):
    prepared = _prepared("vit-inf2-xlarge.yaml", local=backends.create("local"))
    store = locations.store(prepared.job_name)
    assert prepared.locations == store.with_source(prepared.archive_sha256)
    assert prepared.locations.output == f"file://{orch_home}/store/jobs"
    assert prepared.job["results_uri"] == store.results and prepared.job["backend"] == "local"


def test_a_local_spec_without_prefixes_uses_the_store(orch_home):
    prepared = _prepared("local-tiny.yaml")
    assert prepared.locations.output == f"file://{orch_home}/store/jobs"
    assert prepared.locations.compile_cache == f"file://{orch_home}/store/compile-cache"


def test_the_ledger_records_the_locations_of_each_job(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    where = locations.Locations.under("s3://b/jobs", "j-1", None).with_source("0" * 64)
    ledger.record_intent("j-1", backend="sagemaker", region="us-east-1", spec_hash="h", request={},
                         locations=where.to_json())
    assert locations.Locations.from_json(ledger.get("j-1").locations) == where
    ledger.record_intent("j-2", backend="sagemaker", region="us-east-1", spec_hash="h", request={})
    assert ledger.get("j-2").locations is None


def _old_ledger(path: Path) -> None:
    """A ledger as written before it kept locations: no such column, one row."""
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE jobs (job_name TEXT PRIMARY KEY, backend TEXT NOT NULL, region TEXT NOT NULL,
            spec_hash TEXT NOT NULL, state TEXT NOT NULL, request TEXT NOT NULL, sweep_id TEXT, trial_id TEXT,
            attempt INTEGER NOT NULL DEFAULT 0, detail TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL);
        CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO jobs VALUES ('old-1', 'sagemaker', 'us-east-1', 'h', 'completed', '{}', NULL, NULL, 0, NULL, 1, 1);
    """)
    db.commit()
    db.close()


def test_a_ledger_from_before_gains_the_column_and_keeps_its_rows(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    _old_ledger(path)
    ledger = Ledger(path)
    assert ledger.get("old-1").locations is None and ledger.get("old-1").status == "completed"
    ledger.record_intent("new-1", backend="local", region="us-east-1", spec_hash="h", request={},
                         locations={"output": "file:///x", "results": "r", "tensorboard": "t", "checkpoints": "c",
                                    "compile_cache": None, "source": None})
    assert ledger.get("new-1").locations["results"] == "r"


def test_a_ledger_from_before_opened_for_reading_only_reads_none_for_the_locations(tmp_path, monkeypatch):
    """A ledger this process cannot write (read-only file or folder: `Ledger(read_only=True)`
    falls back to reading it as it is) has no column to add: its rows read None."""
    path = tmp_path / "ledger.sqlite3"
    _old_ledger(path)

    def refused(self):
        from orchestrator.errors import InputError

        raise InputError(f"{self.path}: it is read-only") from sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(Ledger, "_open", refused)
    ledger = Ledger(path, read_only=True)
    assert not ledger.writable
    entry = ledger.get("old-1")
    assert entry.locations is None and entry.status == "completed"
    assert [e.job_name for e in ledger.entries()] == ["old-1"]
