"""neuron-monitor beside training (entrypoints.launcher.utilization): its reports read as the Neuron
docs describe them, through a stand-in on PATH (tests/standins/neuron-monitor), into
results.json, the metric line and the results table's input-bound flag."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from job_waits import patience

from entrypoints.launcher import utilization
from entrypoints.shared import contract, results_schema
from orchestrator.results import build_row
from orchestrator.results.render import render_table
from orchestrator.results.rows import Collection

STANDIN = Path(__file__).parent / "standins" / "neuron-monitor"
GIB = 2**30


@pytest.fixture
def on_path(tmp_path) -> dict:
    """An environment whose PATH has the stand-in neuron-monitor (and the rest of PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(STANDIN, bin_dir / "neuron-monitor")
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "STANDIN_MONITOR_PERIOD_S": "0.05"}


def _until(monitor: utilization.Monitor, reports: int) -> None:
    deadline = time.monotonic() + patience(30)
    while monitor.reports < reports and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_report_as_the_user_guide_shows_it():
    """The guide's example fields (trn2 LNC=2 with its v3d breakdown, an application whose
    collection failed, a group with an error) give the figures we keep."""
    report = {
        "neuron_runtime_data": [
            {"pid": 1, "neuron_runtime_tag": "a", "error": "", "report": {
                "neuroncore_counters": {"period": 1.0, "error": "", "neuroncores_in_use": {
                    "0": {"neuroncore_utilization": 42.01, "flops": 1, "v3d": {"nc_v3.0": {"neuroncore_utilization": 21.01}}},
                    "1": {"neuroncore_utilization": 62.01, "flops": 1}}},
                "memory_used": {"period": 1.0, "error": "", "neuron_runtime_used_bytes": {
                    "host": 6997643264, "neuron_device": 12519788544}}}},
            {"pid": 2, "neuron_runtime_tag": "b", "error": "", "report": {
                "neuroncore_counters": {"period": 1.0, "error": "", "neuroncores_in_use": {
                    "2": {"neuroncore_utilization": 20.0}}},
                "memory_used": {"period": 1.0, "error": "", "neuron_runtime_used_bytes": {"neuron_device": 1000}}}},
            {"pid": 3, "error": "could not connect", "report": {}},
            {"pid": 4, "error": "", "report": {"neuroncore_counters": {"error": "failed", "neuroncores_in_use": {
                "3": {"neuroncore_utilization": 99.0}}}}},
        ],
        "system_data": {
            "vcpu_usage": {"period": 1.0, "error": "", "average_usage": {
                "user": 32.77, "nice": 0, "system": 22.87, "idle": 39.36, "io_wait": 5.0, "irq": 0, "soft_irq": 0}},
            "memory_info": {"period": 5.3, "error": "", "memory_total_bytes": 49345835008,
                            "memory_used_bytes": 16042344448, "swap_total_bytes": 0, "swap_used_bytes": 0},
        },
    }
    found = utilization.figures(report)
    assert found["neuroncore_util_pct"] == pytest.approx((42.01 + 62.01 + 20.0) / 3)
    assert found["device_memory_bytes"] == 12519788544 + 1000
    assert found["host_vcpu_pct"] == pytest.approx(100 - 39.36 - 5.0)
    assert found["host_memory_bytes"] == 16042344448 and found["host_memory_total_bytes"] == 49345835008
    # A report of nothing (no application yet, a failed system group) has no figures.
    empty = utilization.figures({"neuron_runtime_data": [], "system_data": {"vcpu_usage": {"error": "x"}}})
    assert set(empty.values()) == {None}


def test_the_stand_in_on_path_is_run_with_our_config_and_summarised(on_path, tmp_path):
    copy = tmp_path / "config.json"
    reports = [{"util": [10.0, 30.0], "device": 4 * GIB, "idle": 60.0, "mem": 8 * GIB},
               {"util": [50.0, 70.0], "device": 6 * GIB, "idle": 20.0, "mem": 10 * GIB}]
    monitor = utilization.Monitor()
    monitor.start({**on_path, "STANDIN_MONITOR_REPORTS": json.dumps(reports), "STANDIN_MONITOR_GARBAGE": "1",
                   "STANDIN_MONITOR_CONFIG_COPY": str(copy)})
    _until(monitor, 4)
    summary = monitor.stop()
    assert monitor.process.poll() is not None  # ended, not left behind
    assert json.loads(copy.read_text()) == utilization.CONFIG
    n = summary["samples"]
    assert n >= 4 and summary["source"] == "neuron-monitor" and summary["reason"] is None
    assert summary["bad_lines"] == 1 and summary["neuroncores_in_use"] == 2
    # First report, then the last one repeated.
    assert summary["neuroncore_util_pct_mean"] == pytest.approx((20.0 + 60.0 * (n - 1)) / n, abs=1e-3)
    assert summary["neuroncore_util_pct_peak"] == 60.0
    assert summary["host_vcpu_pct_mean"] == pytest.approx((40.0 + 80.0 * (n - 1)) / n, abs=1e-3)
    assert summary["device_memory_bytes_peak"] == 6 * GIB and summary["host_memory_bytes_peak"] == 10 * GIB
    assert summary["host_memory_total_bytes"] == 32 * GIB
    # Exactly results.json's object, and its metric line as the request's definitions parse it.
    results_schema.from_values(results_schema.Utilization, summary)
    line = monitor.metric_line()
    for name, (tag, key) in contract.LAUNCH_METRIC_NAMES.items():
        match = re.search(contract.metric_regex(tag, key), line)
        assert match, name
    assert float(re.search(contract.metric_regex(contract.UTILIZATION_TAG, "device_memory_gib"), line)
                 .group(1)) == pytest.approx(summary["device_memory_bytes_mean"] / GIB, rel=1e-3)


def test_without_neuron_monitor_the_figures_are_absent_and_say_why(tmp_path):
    monitor = utilization.Monitor()
    monitor.start({"PATH": str(tmp_path)})
    summary = monitor.stop()
    assert summary["source"] is None and "neuron-monitor is not on PATH" in summary["reason"]
    assert summary["neuroncore_util_pct_mean"] is None and summary["samples"] == 0
    assert monitor.metric_line() is None


def test_a_monitor_that_exits_at_once_is_a_reason_not_a_failure(on_path):
    monitor = utilization.Monitor()
    monitor.start({**on_path, "STANDIN_MONITOR_EXIT": "3"})
    monitor.process.wait(30)
    summary = monitor.stop()
    assert summary["reason"] == "neuron-monitor exited with code 3 before its first report"
    assert summary["source"] is None


def _results(used: dict | None, status: str = "completed") -> results_schema.Results:
    from pydantic import TypeAdapter

    doc = {"schema": results_schema.SCHEMA, "job_name": "j", "status": status, "backend": "local",
           "instance": {"type": "ml.trn1.2xlarge", "count": 1}, "samples_per_s": 10.0, "utilization": used}
    return TypeAdapter(results_schema.Results).validate_python(doc)


def _used(cores: float, vcpu: float) -> dict:
    return dict(utilization.absent("x"), source="neuron-monitor", reason=None, samples=5,
                neuroncore_util_pct_mean=cores, host_vcpu_pct_mean=vcpu)


def test_results_flag_a_run_whose_cores_idle_while_its_vcpus_are_saturated():
    starved = build_row("starved", _results(_used(22.0, 96.0)), "u", None, None)
    assert starved.input_bound is True and (starved.neuroncore_util, starved.host_vcpu) == (22.0, 96.0)
    assert "input-bound: NeuronCores 22% busy while vCPUs 96% busy" in starved.note
    busy = build_row("busy", _results(_used(85.0, 96.0)), "u", None, None)
    idle = build_row("idle", _results(_used(22.0, 40.0)), "u", None, None)
    assert busy.input_bound is False and idle.input_bound is False and busy.note is None
    unmeasured = build_row("local", _results(utilization.absent("neuron-monitor is not on PATH")), "u", None, None)
    older = build_row("older", _results(None), "u", None, None)
    assert unmeasured.input_bound is None and older.input_bound is None and unmeasured.neuroncore_util is None
    table = render_table(Collection(prefix="p", rows=[starved, busy, unmeasured]))
    assert "NC util" in table and "96 input-bound" in table


def test_launch_runs_the_monitor_beside_training_into_results_and_metric_lines(orch_home, tmp_path, fake_train,
                                                                               on_path):
    from launch_harness import Host, make_job

    reports = [{"util": [12.0, 14.0], "device": 3 * GIB, "idle": 2.0, "mem": 9 * GIB}]
    host = Host(tmp_path, make_job())
    done = host.run(PATH=on_path["PATH"], STANDIN_MONITOR_PERIOD_S="0.05", STANDIN_MONITOR_REPORTS=json.dumps(reports),
                    FAKE_TRAIN_SLEEP="1")
    assert done.returncode == 0, done.stdout + done.stderr
    used = host.results["utilization"]
    assert used["source"] == "neuron-monitor" and used["samples"] >= 1
    assert used["neuroncore_util_pct_mean"] == 13.0 and used["host_vcpu_pct_peak"] == 98.0
    assert used["device_memory_bytes_peak"] == 3 * GIB
    lines = [line for line in done.stdout.splitlines() if line.startswith(contract.UTILIZATION_TAG)]
    assert lines and "neuroncore_util_pct=13;" in lines[-1] and "device_memory_gib=3;" in lines[-1]
    # The table's reading of this run: cores idle, vCPUs saturated.
    from orchestrator.results import parse

    row = build_row("j", parse((host.root / contract.OUTPUT_DATA_DIR / "results.json").read_bytes()), "u", None,
                    None)
    assert row.input_bound is True


def test_launch_without_neuron_tools_says_why_utilization_is_absent(orch_home, tmp_path, fake_train):
    from launch_harness import Host, make_job

    host = Host(tmp_path, make_job())
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    done = host.run(PATH=f"{bare}{os.pathsep}{Path(os.__file__).parent}{os.pathsep}/usr/bin:/bin")
    assert done.returncode == 0, done.stdout + done.stderr
    used = host.results["utilization"]
    assert used["source"] is None and used["reason"].startswith("neuron-monitor is not on PATH")
    assert contract.UTILIZATION_TAG not in done.stdout
