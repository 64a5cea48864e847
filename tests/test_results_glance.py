"""A sweep's results at a glance: the varied fields and the final loss as columns, `--sort`,
local rows that say they ran on this machine's CPUs, and the self-contained `--html` page."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from cli_harness import run_cli
from sweep_fakes import LOCAL_BASE, write

from orchestrator import request
from orchestrator import results as res
from orchestrator import spec as specs
from orchestrator import sweep as sweeps
from orchestrator.errors import InputError

LR = "training.optimizer.lr"
BATCH = "training.batch_size"


def _doc(job: str, *, lr: float, batch: int, loss: float | None, sps: float, backend: str = "local",
         cpus: int | None = 4) -> dict:
    return {
        "schema": "orchestrator.results/v1", "job_name": job, "status": "completed", "backend": backend,
        "region": "us-east-1",
        "instance": {"type": "ml.trn1.2xlarge", "count": 1, "neuron_cores": 2, "workers_per_node": 1, "cpus": cpus},
        "global_batch": batch, "samples_per_s": sps, "final_loss": loss,
        "step_time_s": {"p50": batch / sps, "p90": batch / sps, "mean": batch / sps, "n": 5},
        "tags": {"orchestrator:job": job, "orchestrator:sweep": "lr-1a2b3c4d", "orchestrator:trial": job[-4:]},
        "varied": {BATCH: batch, LR: lr},
    }


@pytest.fixture
def store(orch_home):
    """Four local trials of a sweep over batch size and learning rate, in the local store."""
    docs = [_doc("lr-1a2b3c4d-t001", lr=1e-4, batch=4, loss=2.5, sps=40.0),
            _doc("lr-1a2b3c4d-t002", lr=1e-3, batch=4, loss=1.5, sps=42.0),
            _doc("lr-1a2b3c4d-t003", lr=1e-4, batch=8, loss=2.0, sps=70.0),
            _doc("lr-1a2b3c4d-t004", lr=1e-3, batch=8, loss=None, sps=65.0, cpus=None)]
    for doc in docs:
        folder = orch_home / "store" / "jobs" / "results" / doc["job_name"]
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(doc))
    return orch_home


def _table_rows(text: str) -> dict[str, list[str]]:
    return {cells[0]: cells for cells in ([c.strip() for c in line.split("│")[1:-1]]
                                          for line in text.splitlines() if line.startswith("│"))}


def test_the_table_shows_the_varied_fields_and_the_final_loss(store):
    collection = res.collect(res.local_store_uri(), sweep="lr-1a2b3c4d")
    headers = [c.header for c in res.table_columns(collection.rows)]
    assert headers[:3] == ["job", BATCH, LR] and headers[-2:] == ["final loss", "status"]
    text = res.render_table(collection)
    rows = _table_rows(text)
    t2 = rows["lr-1a2b3c4d-t002"]
    assert t2[1:3] == ["4", "0.001"] and t2[-2] == "1.5"
    assert rows["lr-1a2b3c4d-t004"][-2] == "-"  # no final loss recorded
    # Local rows name this machine's CPUs, never the AWS instance type of their spec.
    assert "ml.trn1.2xlarge" not in text
    assert rows["lr-1a2b3c4d-t001"][headers.index("instance")] == "local CPU x4"
    assert rows["lr-1a2b3c4d-t004"][headers.index("instance")] == "local CPU"
    assert rows["lr-1a2b3c4d-t001"][headers.index("cores")] == "-"


def test_csv_and_json_name_the_varied_fields_as_columns(store):
    collection = res.collect(res.local_store_uri())
    records = list(csv.DictReader(io.StringIO(res.render_csv(collection))))
    assert list(records[0])[:3] == ["job", BATCH, LR]
    by_job = {r["job"]: r for r in records}
    assert by_job["lr-1a2b3c4d-t003"][LR] == "0.0001" and by_job["lr-1a2b3c4d-t003"]["final_loss"] == "2.0"
    assert by_job["lr-1a2b3c4d-t003"]["instance"] == "local CPU x4"
    doc = json.loads(res.render_json(collection))
    assert doc["varied"] == [BATCH, LR]
    row = next(r for r in doc["rows"] if r["job"] == "lr-1a2b3c4d-t002")
    assert row["varied"] == {BATCH: 4, LR: 0.001} and row["final_loss"] == 1.5


def test_sort_by_any_column_in_its_natural_direction(store):
    rows = res.collect(res.local_store_uri()).rows
    jobs = lambda sorted_rows: [r.job[-4:] for r in sorted_rows]  # noqa: E731
    # Default (samples per dollar): local rows have no price, so rank's order: fastest first.
    assert jobs(res.sort_rows(rows)) == ["t003", "t004", "t002", "t001"]
    assert jobs(res.sort_rows(rows, "final_loss")) == ["t002", "t003", "t001", "t004"]  # least first, no value last
    assert jobs(res.sort_rows(rows, "final loss:desc")) == ["t001", "t003", "t002", "t004"]
    assert jobs(res.sort_rows(rows, "samples/s")) == ["t003", "t004", "t002", "t001"]  # most first
    assert jobs(res.sort_rows(rows, f"{LR}:desc"))[:2] in (["t002", "t004"], ["t004", "t002"])
    # Equal values keep the former (ranked) order: t003 before t001, t004 before t002.
    assert jobs(res.sort_rows(rows, LR)) == ["t003", "t001", "t004", "t002"]
    with pytest.raises(InputError, match="no such column") as info:
        res.sort_rows(rows, "loss")
    assert LR in info.value.hint and "final loss" in info.value.hint
    with pytest.raises(InputError, match="asc or desc"):
        res.sort_rows(rows, "final_loss:up")


def test_cli_sort_and_an_unknown_column_is_exit_2(store, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "results", "--sort", "final_loss", "--format", "csv")
    assert code == 0, err
    assert [r["job"][-4:] for r in csv.DictReader(io.StringIO(out))] == ["t002", "t003", "t001", "t004"]
    code, out, err = run_cli(monkeypatch, capsys, "results", "--sort", "nope")
    assert code == 2 and "--sort 'nope': no such column" in err and "Traceback" not in err


def test_html_report_is_one_self_contained_page(store, tmp_path, monkeypatch, capsys):
    page = tmp_path / "report.html"
    code, out, err = run_cli(monkeypatch, capsys, "results", "--sweep", "lr-1a2b3c4d", "--html", str(page),
                             "--sort", "final_loss")
    assert code == 0, err
    text = page.read_text()
    assert f"wrote {page}" in err
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", text)
    assert headers[:3] == ["job", BATCH, LR] and "final loss" in headers
    body_jobs = re.findall(r"<tr[^>]*><td>(lr-1a2b3c4d-t\d+)</td>", text)
    assert [j[-4:] for j in body_jobs] == ["t002", "t003", "t001", "t004"]  # --sort applies to the page
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', text)
    assert len(images) == 2  # throughput and final loss, inlined
    import base64

    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    # Nothing to fetch: no address, script or external stylesheet anywhere in the page.
    markup = re.sub(r"base64,[A-Za-z0-9+/=]+", "base64,", text).replace("file://", "")
    assert not re.search(r"(https?:|//[a-z]|<script|<link|@import|url\()", markup), "page loads something"


def test_html_escapes_values_and_says_why_a_plot_is_missing(orch_home):
    rows = [res.Row(job="j-1", status="unreadable", note="<b>bad</b>", varied={"tags.x": "<script>x</script>"})]
    text = res.render_html(res.Collection("file:///tmp/<p>", rows))
    assert "<script>" not in text and "&lt;script&gt;x&lt;/script&gt;" in text and "&lt;b&gt;bad" in text
    assert "No price-performance plot: nothing to plot" in text and "No loss plot" in text


def test_cli_html_to_an_unwritable_place_is_exit_2_before_reading(store, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, "results", "--html", "/dev/null")
    assert code == 2 and "--html" in err


def test_a_sweep_trials_job_file_carries_its_varied_values(tmp_path, orch_home):
    path = write(tmp_path, f"sweep: lrs\nbase: base.yaml\ngrid:\n  {LR}: [1.0e-4, 1.0e-3]\n", LOCAL_BASE)
    plan = sweeps.plan(specs.load_sweep(path))
    assert [t.prepared.job["varied"] for t in plan.trials] == [{LR: 1e-4}, {LR: 1e-3}]
    # A job outside a sweep has none (its job file, archive and request are as before).
    assert "varied" not in request.prepare(plan.trials[0].trial.spec).job
