"""The terminal table of `results` fits the screen: the default columns, `--columns`, and the
width (issue 22, item 8). CSV, JSON and HTML keep every column."""

from __future__ import annotations

import csv
import io

import pytest
from cli_harness import run_cli
from typer.testing import CliRunner

from orchestrator import results as res
from orchestrator.cli import app
from orchestrator.errors import InputError

PREFIX = "file:///tmp/store/jobs"


def mixed_collection() -> res.Collection:
    """A sweep over lr and instance type, with a local row and a cloud row per point."""
    rows = []
    for i, lr in enumerate((1e-3, 3e-4)):
        rows.append(res.Row(
            job=f"vit-sweep-lr-and-instance-cloud-{i}", status="completed", backend="sagemaker",
            sweep="vit-sweep", instance="ml.trn1.32xlarge", count=2, cores=64, runtime="xla", precision="bf16",
            global_batch=1024, step_time_p50_s=0.2, samples_per_s=5120.0 + i, price_per_hour=21.5,
            price_source="test prices, 2026-01-01", cost_per_million_samples=1.1665, samples_per_dollar=857_302.0,
            relative=1.0 - i / 10, mfu=0.213, tflop_per_dollar=123_456.0, neuroncore_util=88.0, host_vcpu=12.0,
            compile_s=612.3, precompile_s=400.1, cache_hit_ratio=0.25, queue_s=190.0, run_s=3600.0,
            final_loss=2.3456, varied={"training.optimizer.lr": lr, "instance.type": "ml.trn1.32xlarge"}))
        rows.append(res.Row(
            job=f"vit-sweep-lr-and-instance-local-{i}", status="completed", backend="local", sweep="vit-sweep",
            instance="local CPU", count=1, samples_per_s=50.0, price_source="local: no cloud cost",
            final_loss=2.5, varied={"training.optimizer.lr": lr, "instance.type": "local"}))
    return res.Collection(PREFIX, rows)


def test_default_columns_are_the_varied_fields_and_those_that_matter():
    shown = [c.header for c in res.select_columns(mixed_collection().rows)]
    assert shown == ["job", "training.optimizer.lr", "instance.type", "instance", "samples/s", "USD/M samples",
                     "samples/USD", "MFU", "final loss", "status"]


def test_default_columns_drop_those_empty_for_every_row():
    local = [r for r in mixed_collection().rows if r.backend == "local"]
    shown = [c.header for c in res.select_columns(local)]
    # No cost, no MFU for a local job: those columns are "-" all the way down, so gone.
    assert shown == ["job", "training.optimizer.lr", "instance.type", "instance", "samples/s", "final loss",
                     "status"]
    # The job and the status stay even when empty (an unreadable row has nothing else).
    assert [c.header for c in res.select_columns([res.Row(job="x", status="unreadable")])] == ["job", "status"]


def test_columns_all_and_a_list():
    rows = mixed_collection().rows
    assert res.select_columns(rows, "all") == res.table_columns(rows)
    chosen = res.select_columns(rows, "job, samples_per_dollar,training.optimizer.lr,NC util,job")
    assert [c.header for c in chosen] == ["job", "samples/USD", "training.optimizer.lr", "NC util"]
    with pytest.raises(InputError, match="no column 'speed'") as raised:
        res.select_columns(rows, "job,speed")
    assert "samples/s" in raised.value.hint
    with pytest.raises(InputError, match="no column named"):
        res.select_columns(rows, " , ")


@pytest.mark.parametrize("width", [80, 100])
def test_the_default_table_fits_the_width(width):
    collection = mixed_collection()
    text = res.render_table(collection, width=width, shown=res.select_columns(collection.rows))
    assert max(len(line) for line in text.splitlines()) <= width
    # Numbers are never broken across lines; every row is there.
    for number in ("5,120.0", "5,121.0", "857,302", "21.3%", "2.346", "1.1665", "0.0003"):
        assert number in text
    assert sum(line.count("vit-") for line in text.splitlines()) == 4


def test_the_full_table_is_wider_than_a_screen():
    """The state before: every column at its natural width (what `--columns all` shows)."""
    text = res.render_table(mixed_collection())
    assert max(len(line) for line in text.splitlines()) > 200


def _results(monkeypatch, *args, columns_env: str | None = "100"):
    monkeypatch.setattr(res, "collect", lambda *a, **k: mixed_collection())
    monkeypatch.setattr(res, "has_results", lambda uri: True)
    env = {} if columns_env is None else {"COLUMNS": columns_env}
    if columns_env is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    return CliRunner().invoke(app, ["results", *args], env=env)


@pytest.mark.parametrize("width", ["80", "100"])
def test_cli_results_fits_columns(orch_home, monkeypatch, width):
    result = _results(monkeypatch, columns_env=width)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= int(width)
    assert "857,302" in result.stdout and "NC util" not in result.stdout and "precompile" not in result.stdout


def test_cli_results_off_a_terminal_fits_100(orch_home, monkeypatch):
    result = _results(monkeypatch, columns_env=None)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 100


def test_cli_results_columns_all_is_the_full_table(orch_home, monkeypatch):
    result = _results(monkeypatch, "--columns", "all", columns_env="80")
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip("\n") == res.render_table(mixed_collection()).rstrip("\n")
    for header in ("NC util", "precompile s", "queue s", "backend", "TFLOP/USD"):
        assert header in result.stdout


def test_cli_results_columns_list_and_errors(orch_home, monkeypatch):
    result = _results(monkeypatch, "--columns", "job,status")
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if "job" in line and "status" in line)
    assert "instance" not in header


def test_cli_results_bad_columns_exit_2(orch_home, monkeypatch, capsys):
    monkeypatch.setattr(res, "collect", lambda *a, **k: mixed_collection())
    monkeypatch.setattr(res, "has_results", lambda uri: True)
    code, out, err = run_cli(monkeypatch, capsys, "results", "--columns", "nope")
    assert code == 2 and "no column 'nope'" in err and "samples/USD" in err and out == ""
    code, out, err = run_cli(monkeypatch, capsys, "results", "--columns", "job", "--format", "csv")
    assert code == 2 and "--columns is for the table" in err and out == ""


def test_cli_results_csv_keeps_every_column(orch_home, monkeypatch):
    result = _results(monkeypatch, "--format", "csv", columns_env="80")
    assert result.exit_code == 0, result.output
    header = next(csv.reader(io.StringIO(result.stdout)))
    assert {"neuroncore_util", "precompile_s", "queue_s", "tflop_per_dollar", "training.optimizer.lr"} <= set(header)


def test_plot_labels_and_the_global_batch_header():
    """Issue 22, smaller findings: a local row's label read `local CPU x2 x1`; the `batch`
    column is the global batch and now says so."""
    from orchestrator.results.render import _label

    local = res.Row(job="l-1", status="completed", backend="local", instance="local CPU x2", count=1)
    cloud = res.Row(job="c-1", status="completed", backend="sagemaker", instance="ml.trn1.32xlarge", count=2)
    assert _label(local) == "l-1\nlocal CPU x2" and _label(cloud) == "c-1\nml.trn1.32xlarge x2"
    assert "global batch" in [c.header for c in res.table_columns([cloud])]


def test_shortened_varied_headers_are_spelled_out_under_the_table():
    collection = mixed_collection()
    text = res.render_table(collection, width=100, shown=res.select_columns(collection.rows))
    assert "varied: lr = training.optimizer.lr, type = instance.type" in text
