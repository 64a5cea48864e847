"""NeuronCore and host utilization over a job, from `neuron-monitor` run beside training.

Contract:
- `Monitor.start(env)` runs `neuron-monitor -c <config>` (the training image has it: the
  `aws-neuron-tools` package) with the `CONFIG` below when the program is on the job's PATH;
  otherwise, or when it cannot start, the monitor is absent and `summary()` says why (a local
  run, a CPU host). It never raises and never fails the job.
- neuron-monitor streams one complete JSON report per line to stdout every `period`
  (Neuron docs, tools/neuron-sys-tools/neuron-monitor-user-guide.rst, "The JSON output
  format"). A reader thread takes from each report:
  - NeuronCore utilization: `neuron_runtime_data[].report.neuroncore_counters
    .neuroncores_in_use.<core>.neuroncore_utilization` (percent over the captured period),
    averaged over the cores in use in that report, over every Neuron application (the
    torchrun ranks);
  - device memory: the sum of `report.memory_used.neuron_runtime_used_bytes.neuron_device`;
  - host vCPU: `system_data.vcpu_usage.average_usage`, busy = 100 - idle - io_wait percent;
  - host memory: `system_data.memory_info.memory_used_bytes` (and `memory_total_bytes`).
  A group whose `error` is set, or that is missing, adds no sample of its own. Lines that are
  not JSON objects are counted (`bad_lines`) and skipped.
- `summary()` is results.json's `utilization` object (`results_schema.Utilization`): mean and
  peak of each figure over the reports so far; `stop()` ends the program (SIGTERM, then
  SIGKILL after `STOP_GRACE_S`) and returns the final summary.
- `metric_line()` is the `contract.UTILIZATION_TAG` line the launcher prints at each heartbeat
  and at the end (the request's MetricDefinitions turn it into CloudWatch metrics).

Stdlib only; nothing here imports `orchestrator`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from entrypoints.shared import contract

PROGRAM = "neuron-monitor"
# The groups we read, once a second; tag_filter ".*": every Neuron application on the host.
CONFIG = {
    "period": "1s",
    "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": "neuroncore_counters"}, {"type": "memory_used"}]}],
    "system_metrics": [{"type": "vcpu_usage"}, {"type": "memory_info"}],
}
STOP_GRACE_S = 5.0
SOURCE = "neuron-monitor"
# The figures kept: results.json's name -> what a report gives (None when the report has none).
FIGURES = ("neuroncore_util_pct", "device_memory_bytes", "host_vcpu_pct", "host_memory_bytes")


def _group(report: dict, name: str) -> dict | None:
    group = report.get(name) if isinstance(report, dict) else None
    return group if isinstance(group, dict) and not group.get("error") else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def figures(report: dict) -> dict[str, float | None]:
    """One neuron-monitor report's figures (see the module docstring)."""
    utils: list[float] = []
    device: list[float] = []
    for app in report.get("neuron_runtime_data") or []:
        if not isinstance(app, dict) or app.get("error"):
            continue
        counters = _group(app.get("report") or {}, "neuroncore_counters")
        for core in ((counters or {}).get("neuroncores_in_use") or {}).values():
            value = _number(core.get("neuroncore_utilization")) if isinstance(core, dict) else None
            if value is not None:
                utils.append(value)
        memory = _group(app.get("report") or {}, "memory_used")
        used = _number(((memory or {}).get("neuron_runtime_used_bytes") or {}).get("neuron_device"))
        if used is not None:
            device.append(used)
    system = report.get("system_data") or {}
    vcpu = ((_group(system, "vcpu_usage") or {}).get("average_usage")) or {}
    idle, io_wait = _number(vcpu.get("idle")), _number(vcpu.get("io_wait")) or 0.0
    memory_info = _group(system, "memory_info") or {}
    return {
        "neuroncore_util_pct": sum(utils) / len(utils) if utils else None,
        "device_memory_bytes": sum(device) if device else None,
        "host_vcpu_pct": max(0.0, 100.0 - idle - io_wait) if idle is not None else None,
        "host_memory_bytes": _number(memory_info.get("memory_used_bytes")),
        "host_memory_total_bytes": _number(memory_info.get("memory_total_bytes")),
    }


def _gib(value: float | None) -> float | None:
    return None if value is None else value / 2**30


def absent(reason: str) -> dict:
    """results.json's `utilization` when nothing was measured, and why."""
    summary: dict = {"source": None, "reason": reason, "samples": 0, "bad_lines": 0, "neuroncores_in_use": None,
                     "host_memory_total_bytes": None}
    for name in FIGURES:
        summary[f"{name}_mean"] = summary[f"{name}_peak"] = None
    return summary


class Monitor:
    """neuron-monitor beside training, and what it reported (see the module docstring)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.reason: str | None = "not started"
        self.samples: dict[str, list[float]] = {name: [] for name in FIGURES}
        self.reports = self.bad_lines = 0
        self.cores_in_use = 0
        self.memory_total: float | None = None
        self.lock = threading.Lock()
        self.reader: threading.Thread | None = None
        self.config_dir: tempfile.TemporaryDirectory | None = None

    def start(self, env: dict[str, str]) -> None:
        program = shutil.which(PROGRAM, path=env.get("PATH"))
        if program is None:
            self.reason = f"{PROGRAM} is not on PATH: not a Neuron host (the Neuron training image has it)"
            return
        self.config_dir = tempfile.TemporaryDirectory(prefix="neuron-monitor-")
        config = Path(self.config_dir.name) / "monitor.json"
        config.write_text(json.dumps(CONFIG))
        try:
            self.process = subprocess.Popen([program, "-c", str(config)], stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env, text=True)
        except OSError as exc:
            self.reason = f"{PROGRAM} did not start: {type(exc).__name__}: {exc}"
            return
        self.reason = None
        self.reader = threading.Thread(target=self._read, name="neuron-monitor", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            try:
                report = json.loads(line)
            except ValueError:
                report = None
            with self.lock:
                if not isinstance(report, dict):
                    self.bad_lines += line.strip() != ""
                    continue
                self.add(report)

    def add(self, report: dict) -> None:
        """Keep one report's figures (the reader thread calls it under the lock)."""
        found = figures(report)
        self.reports += 1
        for name in FIGURES:
            if found[name] is not None:
                self.samples[name].append(found[name])
        if found["host_memory_total_bytes"] is not None:
            self.memory_total = found["host_memory_total_bytes"]
        for app in report.get("neuron_runtime_data") or []:
            counters = _group((app or {}).get("report") or {}, "neuroncore_counters") if isinstance(app, dict) else None
            self.cores_in_use = max(self.cores_in_use, len((counters or {}).get("neuroncores_in_use") or {}))

    def summary(self) -> dict:
        """results.json's `utilization` so far."""
        if self.reason is not None:
            return absent(self.reason)
        with self.lock:
            if not self.reports:
                exited = self.process is not None and self.process.poll() is not None
                why = (f"{PROGRAM} exited with code {self.process.returncode} before its first report" if exited
                       else f"{PROGRAM} has not reported yet")
                return dict(absent(why), bad_lines=self.bad_lines)
            summary: dict = {"source": SOURCE, "reason": None, "samples": self.reports, "bad_lines": self.bad_lines,
                             "neuroncores_in_use": self.cores_in_use or None,
                             "host_memory_total_bytes": self.memory_total}
            for name in FIGURES:
                values = self.samples[name]
                summary[f"{name}_mean"] = round(sum(values) / len(values), 3) if values else None
                summary[f"{name}_peak"] = max(values) if values else None
        return summary

    def metric_line(self) -> str | None:
        """The UTILIZATION_TAG line of the figures so far; None when there are none."""
        summary = self.summary()
        found = {"neuroncore_util_pct": summary["neuroncore_util_pct_mean"],
                 "host_vcpu_pct": summary["host_vcpu_pct_mean"],
                 "device_memory_gib": _gib(summary["device_memory_bytes_mean"]),
                 "host_memory_gib": _gib(summary["host_memory_bytes_mean"])}
        values = {key: round(value, 3) for key, value in found.items() if value is not None}
        return contract.metric_line(contract.UTILIZATION_TAG, **values) if values else None

    def stop(self) -> dict:
        """End neuron-monitor and return the final summary."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.reader is not None:
            self.reader.join(STOP_GRACE_S)
        if self.config_dir is not None:
            self.config_dir.cleanup()
            self.config_dir = None
        return self.summary()
