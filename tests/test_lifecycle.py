"""lifecycle: one status vocabulary for backends, the ledger, sweeps and results."""

from __future__ import annotations

import json

import pytest

from orchestrator.backends import JobStatus
from orchestrator.ledger import Ledger
from orchestrator.lifecycle import IN_FLIGHT, RECORDED, REPORTED, TERMINAL, Status, is_terminal


def test_terminal_statuses_are_the_ends_of_a_job():
    assert {s for s in Status if s.is_terminal()} == {Status.COMPLETED, Status.FAILED, Status.STOPPED} == TERMINAL
    assert is_terminal("failed") and not is_terminal("stopping") and not is_terminal(None)
    assert JobStatus("j", Status.STOPPED).terminal and not JobStatus("j", Status.STOPPING).terminal


def test_the_ledger_records_the_nearest_coarser_status():
    assert [s.recorded() for s in REPORTED] == [Status.SUBMITTED, Status.SUBMITTED, Status.RUNNING, Status.RUNNING,
                                                Status.COMPLETED, Status.FAILED, Status.STOPPED]
    assert all(s.recorded() in RECORDED for s in Status)
    assert {s for s in Status if s.in_flight()} == IN_FLIGHT == {Status.SUBMITTING, Status.SUBMITTED, Status.RUNNING}


def test_a_status_reads_writes_and_prints_as_its_word():
    assert Status.RUNNING == "running" and Status("running") is Status.RUNNING
    assert f"{Status.FAILED}" == "failed" and str(Status.FAILED) == "failed" and f"{Status.FAILED:>8}" == "  failed"
    assert json.dumps({"status": Status.COMPLETED}) == '{"status": "completed"}'


def test_the_ledger_takes_recorded_statuses_only_and_reads_them_back_as_statuses(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    ledger.record_intent("j-1", backend="local", region="us-east-1", spec_hash="0" * 64, request={})
    assert ledger.transition("j-1", Status.RUNNING, expect=(Status.SUBMITTING,))
    entry = ledger.get("j-1")
    assert entry.status is Status.RUNNING and entry.status.in_flight()
    assert [e.job_name for e in ledger.entries(statuses=(Status.RUNNING,))] == ["j-1"]
    for reported_only in ("pending", "starting", "stopping", "bogus"):
        with pytest.raises(ValueError, match="unknown ledger state"):
            ledger.transition("j-1", reported_only)


def test_results_json_statuses_are_lifecycle_statuses_and_rows_carry_them():
    """results.json's statuses (its schema's, docs/RESULTS.md) are words of the one vocabulary:
    a row made from a document alone carries the Status member."""
    from entrypoints.shared import results_schema
    from orchestrator import results

    assert {Status(s) for s in results_schema.STATUSES} == {Status.RUNNING} | TERMINAL
    for word in results_schema.STATUSES:
        doc = {"schema": results_schema.SCHEMA, "job_name": "j-1", "status": word, "backend": "local",
               "instance": {"type": "ml.trn1.2xlarge", "count": 1}}
        row = results.build_row("j-1", results.parse(json.dumps(doc).encode()), "file:///x", None, None)
        assert row.status is Status(word)
