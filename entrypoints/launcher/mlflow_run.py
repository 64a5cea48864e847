"""The job's MLflow run, logged by the launcher of node rank 0 through a background buffer.

Contract:
- `RunLogger(job, ...)` for a job file with an "mlflow" object (`orchestrator.tracking`);
  `start()` starts one daemon thread, the only code that talks to the tracking server (through
  `mlflow.MlflowClient`, mlflow-skinny, imported in that thread).
- `params`, `tags`, `metrics`, `line` (rank 0's metric lines as torchrun's output passes
  through the launcher) and `artifact` only append to an in-memory buffer: they never block,
  never raise, never wait on the network. The training processes do not log at all.
- The thread makes the experiment and the run (for a sweep's trial, a child of the sweep's one
  parent run: found by its tags, or made and the earliest kept when trials race), then sends
  the buffer in batches. A call that fails (server down, slow: each request times out after
  `REQUEST_TIMEOUT_S`, refusing) is retried with backoff for `GIVE_UP_S`; then the logger
  gives up, says so in one warning (`warning`) and drops what it holds.
- `finish(status)` queues the end (the run's status) and waits for the buffer to drain; from
  then on a failing call is retried for `END_GRACE_S` at most (the job's end is not held long
  for a server that is away), and `FINISH_WAIT_S` caps the whole wait (a server that answers,
  slowly, call after call); `STOPPED_WAIT_S` for a stopped job (SIGKILL follows SIGTERM).
  results.json stays the record; the run is a copy of it.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from entrypoints.shared import contract

REQUEST_TIMEOUT_S = 10
GIVE_UP_S = 120.0
FINISH_WAIT_S = 180.0
STOPPED_WAIT_S = 15.0
END_GRACE_S = 45.0
FLUSH_S = 2.0
MAX_BUFFERED = 100_000
# MLflow's LogBatch limits (REST API docs): 1000 metrics, 100 params and 100 tags per request.
BATCH_METRICS, BATCH_PARAMS, BATCH_TAGS = 1000, 100, 100
PARAM_MAX = 6000  # MLflow's param value limit (characters)
TAG_PREFIX = "orchestrator."
ROLE_TAG = TAG_PREFIX + "role"
SWEEP_TAG = TAG_PREFIX + "sweep"
TRIAL_TAG = TAG_PREFIX + "trial"
JOB_TAG = TAG_PREFIX + "job"
PARENT_TAG = "mlflow.parentRunId"
_VALUE = re.compile(r"(\w+)=" + contract.NUMBER_REGEX + re.escape(contract.VALUE_END))
# Rank 0's lines (train.py) and their metric names in MLflow.
LINE_METRICS = {contract.METRICS_TAG: "train/", contract.SUMMARY_TAG: "summary/"}


def flat_params(job: dict, instance_type: str | None) -> dict[str, str]:
    """The run's params: model, training and instance fields, spec hash, image, backend."""
    spec = job.get("spec") or {}
    found: dict[str, str] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}", inner)
        elif value is not None:
            found[prefix] = str(value)[:PARAM_MAX]

    for section in ("model", "training", "instance", "image", "data"):
        walk(section, spec.get(section))
    for key, value in (job.get("instance") or {}).items():
        if value is not None:
            found[f"resolved.{key}"] = str(value)
    found.update({"spec_hash": job.get("spec_hash", ""), "backend": str(spec.get("backend")),
                  "region": str(spec.get("region")), "workers_per_node": str(job.get("workers_per_node")),
                  "instance.selected_type": str(instance_type or (job.get("instance") or {}).get("type"))})
    return found


def run_tags(job: dict, instance_type: str | None) -> dict[str, str]:
    """The run's tags: the job's own (orchestrator:* as orchestrator.*), the varied values, the type."""
    tags = {JOB_TAG: job["job_name"]}
    for key, value in (job.get("tags") or {}).items():
        tags[key.replace("orchestrator:", TAG_PREFIX)] = str(value)
    for path, value in (job.get("varied") or {}).items():
        tags[f"{TAG_PREFIX}varied.{path}"] = str(value)
    if instance_type:
        tags[TAG_PREFIX + "instance_type"] = instance_type
    return tags


def final_metrics(results: dict, section: dict) -> dict[str, float]:
    """The end's figures from results.json: samples/s, samples per dollar, MFU, compile time, cost bound."""
    out: dict[str, float] = {}
    samples = results.get("samples_per_s")
    for key in ("samples_per_s", "compile_s", "time_to_first_step_s", "final_loss", "duration_s"):
        if isinstance(results.get(key), (int, float)):
            out[f"final/{key}"] = float(results[key])
    price = section.get("price_per_hour")
    if samples and price:
        out["final/samples_per_dollar"] = float(samples) * 3600.0 / float(price)
    peak, flops = section.get("peak_flops_per_s"), results.get("flops_per_sample")
    if samples and peak and flops:
        out["final/mfu"] = float(flops) * float(samples) / float(peak)
    if section.get("cost_bound_usd") is not None:
        out["final/cost_bound_usd"] = float(section["cost_bound_usd"])
    return out


class RunLogger:
    """One job's MLflow run (see the module docstring)."""

    def __init__(self, job: dict, log: Callable[[str], None], *, instance_type: str | None = None,
                 client_factory: Callable[[str], object] | None = None, give_up_s: float = GIVE_UP_S,
                 flush_s: float = FLUSH_S, end_grace_s: float = END_GRACE_S) -> None:
        self.section = dict(job["mlflow"])
        self.job = job
        self.log = log
        self.instance_type = instance_type
        self.client_factory = client_factory or _client
        self.give_up_s, self.flush_s, self.end_grace_s = give_up_s, flush_s, end_grace_s
        self.warning: str | None = None
        self.run_id: str | None = None
        self.parent_id: str | None = None
        self.dropped = 0
        self._params: dict[str, str] = {}
        self._tags: dict[str, str] = {}
        self._metrics: list[tuple[str, float, int, int]] = []
        self._artifacts: list[Path] = []
        self._end: str | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._done = threading.Event()
        self._ended_at: float | None = None
        self._thread = threading.Thread(target=self._main, name="mlflow-run", daemon=True)

    def link(self) -> dict:
        """results.json's `mlflow` as things stand (`results_schema.Mlflow`)."""
        return {"tracking_uri": self.section["tracking_uri"], "experiment": self.section["experiment"],
                "run_id": self.run_id, "parent_run_id": self.parent_id, "warning": self.warning}

    # --- the training side: buffer only -------------------------------------------------

    def start(self) -> RunLogger:
        self.params(flat_params(self.job, self.instance_type))
        self.tags(run_tags(self.job, self.instance_type))
        self._thread.start()
        return self

    def params(self, values: dict[str, str]) -> None:
        with self._lock:
            self._params.update(values)

    def tags(self, values: dict[str, str]) -> None:
        with self._lock:
            self._tags.update(values)

    def metrics(self, values: dict[str, float], step: int = 0) -> None:
        now = int(time.time() * 1000)
        with self._lock:
            self._metrics.extend((key, float(value), now, step) for key, value in values.items())
            over = len(self._metrics) - MAX_BUFFERED
            if over > 0:  # a server away for long: keep the newest
                del self._metrics[:over]
                self.dropped += over

    def line(self, text: str) -> None:
        """A line of torchrun's output: rank 0's metric lines become metrics (others are ignored)."""
        tag = text.split(" ", 1)[0]
        prefix = LINE_METRICS.get(tag)
        if prefix is None:
            return
        values = {key: float(value) for key, value in _VALUE.findall(text)}
        step = int(values.pop("step", 0))
        if values:
            self.metrics({prefix + key: value for key, value in values.items()}, step)

    def artifact(self, path: Path) -> None:
        with self._lock:
            self._artifacts.append(Path(path))

    def finish(self, status: str, wait_s: float = FINISH_WAIT_S) -> str | None:
        """Queue the end (results.json's status: completed, stopped, failed) and wait at most
        `wait_s` for the buffer to drain. Returns the warning to record, if any."""
        with self._lock:
            self._end = {"completed": "FINISHED", "stopped": "KILLED"}.get(status, "FAILED")
        self._ended_at = time.monotonic()
        self._wake.set()
        if self._thread.is_alive() and not self._done.wait(wait_s) and self.warning is None:
            self.warning = (f"MLflow: the run at {self.section['tracking_uri']} was not brought up to date within "
                            f"{wait_s:g}s of the job's end; results.json holds everything")
            self.log(f"WARNING {self.warning}")
        return self.warning

    # --- the thread ------------------------------------------------------------------

    def _main(self) -> None:
        try:
            client = self._retry("connect", lambda: self.client_factory(self.section["tracking_uri"]))
            experiment = self._retry("experiment", lambda: _experiment(client, self.section["experiment"]))
            sweep = (self.job.get("tags") or {}).get("orchestrator:sweep")
            if sweep:
                self.parent_id = self._retry("parent run", lambda: _parent(client, experiment, sweep))
            tags = {PARENT_TAG: self.parent_id} if self.parent_id else {}
            run = self._retry("run", lambda: client.create_run(experiment, run_name=self.job["job_name"], tags=tags))
            self.run_id = run.info.run_id
            self.log(f"MLflow: run {self.run_id} in experiment {self.section['experiment']!r} at "
                     f"{self.section['tracking_uri']}")
            while True:
                ending = self._wake.wait(self.flush_s) and self._end is not None
                self._wake.clear()
                self._flush(client)
                if ending or self._end is not None:
                    self._flush(client)
                    self._close(client)
                    return
        except _GaveUp:
            return
        except Exception as exc:  # noqa: BLE001 - the run is a copy; training never pays for it
            self._give_up(f"{type(exc).__name__}: {exc}")
        finally:
            self._done.set()

    def _flush(self, client) -> None:
        with self._lock:
            params, tags, metrics = self._params, self._tags, self._metrics
            self._params, self._tags, self._metrics = {}, {}, []
        if not (params or tags or metrics):
            return
        from mlflow.entities import Metric, Param, RunTag

        param_list = [Param(k, v) for k, v in params.items()]
        tag_list = [RunTag(k, v) for k, v in tags.items()]
        metric_list = [Metric(k, v, ts, step) for k, v, ts, step in metrics]
        while param_list or tag_list or metric_list:
            batch = (metric_list[:BATCH_METRICS], param_list[:BATCH_PARAMS], tag_list[:BATCH_TAGS])
            self._retry("log", lambda b=batch: client.log_batch(self.run_id, metrics=b[0], params=b[1], tags=b[2]))
            metric_list, param_list, tag_list = (metric_list[BATCH_METRICS:], param_list[BATCH_PARAMS:],
                                                 tag_list[BATCH_TAGS:])

    def _close(self, client) -> None:
        with self._lock:
            artifacts, self._artifacts = self._artifacts, []
        for path in artifacts:
            if path.is_file():
                self._retry("artifact", lambda p=path: client.log_artifact(self.run_id, str(p)))
        self._retry("end", lambda: client.set_terminated(self.run_id, self._end))
        if self.parent_id:
            # The sweep's run ends with each trial's (a later trial sets it running again).
            self._retry("parent end", lambda: client.set_terminated(self.parent_id, "FINISHED"))
        if self.dropped:
            self._say(f"MLflow: {self.dropped} metric points were dropped while the server was away")

    def _retry(self, what: str, call):
        """`call()`, retried with backoff for `give_up_s` (once the job has ended, for
        `END_GRACE_S` after its end at most); then one warning and _GaveUp."""
        deadline = time.monotonic() + self.give_up_s
        pause = 0.5
        while True:
            try:
                return call()
            except Exception as exc:  # noqa: BLE001 - down, slow or refusing: all the same here
                if self._ended_at is not None:
                    deadline = min(deadline, self._ended_at + self.end_grace_s)
                if time.monotonic() + pause > deadline:
                    self._give_up(f"{what}: {type(exc).__name__}: {str(exc)[:300]}")
                    raise _GaveUp from None
                time.sleep(pause)
                pause = min(pause * 2, 10.0)

    def _give_up(self, why: str) -> None:
        self._say(f"MLflow: gave up logging to {self.section['tracking_uri']} ({why}); training went on and "
                  "results.json holds everything")
        with self._lock:
            self.dropped += len(self._metrics)
            self._metrics, self._params, self._tags = [], {}, {}

    def _say(self, message: str) -> None:
        if self.warning is None:
            self.warning = message
            self.log(f"WARNING {message}")


class _GaveUp(Exception):
    pass


def _client(uri: str):
    # Our own retries decide (above): MLflow's client retries each request for minutes by default.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(REQUEST_TIMEOUT_S))
    import mlflow

    # The sagemaker-mlflow plugin (installed with an ARN) signs and routes by the global URI.
    mlflow.set_tracking_uri(uri)
    if not uri.startswith("arn:"):
        # Where the plugin is installed anyway, its header provider fails on a URL, loudly, at every request.
        logging.getLogger("mlflow.tracking.request_header.registry").setLevel(logging.ERROR)
    return mlflow.MlflowClient(tracking_uri=uri)


def _experiment(client, name: str) -> str:
    """The id of the experiment `name`, made when missing (another job may make it at once)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def _parent(client, experiment: str, sweep: str) -> str:
    """The sweep's parent run: the earliest run tagged as it, made when there is none. Trials
    that start together may each make one; every one of them then keeps the earliest and the
    ones that lost delete their own (runs they made, never another's)."""
    query = f"tags.`{ROLE_TAG}` = 'sweep' and tags.`{SWEEP_TAG}` = '{sweep}'"

    def earliest():
        runs = client.search_runs([experiment], filter_string=query, max_results=50)
        return min(runs, key=lambda r: (r.info.start_time, r.info.run_id)) if runs else None

    found = earliest()
    if found is not None:
        if found.info.status != "RUNNING":
            client.update_run(found.info.run_id, status="RUNNING")
        return found.info.run_id
    mine = client.create_run(experiment, run_name=sweep, tags={ROLE_TAG: "sweep", SWEEP_TAG: sweep})
    kept = earliest()
    if kept is not None and kept.info.run_id != mine.info.run_id:
        client.delete_run(mine.info.run_id)
        return kept.info.run_id
    return mine.info.run_id
