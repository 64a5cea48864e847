"""MLflow runs against a real tracking server (tests/mlflow_server.py), and the run logger's
buffer against servers that are down, refusing or silent: the job never pays for them."""

from __future__ import annotations

import http.server
import json
import os
import re
import socket
import threading
import uuid

import pytest
from conftest import FAKE_TRAIN_SOURCE
from mlflow_server import free_port
from sweep_fakes import LOCAL_BASE, cli_run, write

from entrypoints.launcher import mlflow_run
from entrypoints.shared import contract

# The fake trainer's rank 0 prints the metric lines train.py prints (two along the way, the summary).
METRIC_LINES = f'''
if rank == 0:
    print({contract.metric_line(contract.METRICS_TAG, step=3, loss=2.5, step_time_s=0.25, samples_per_s=16.0)!r}, flush=True)
    print({contract.metric_line(contract.METRICS_TAG, step=6, loss=2.25, step_time_s=0.2, samples_per_s=20.0)!r}, flush=True)
    print({contract.metric_line(contract.SUMMARY_TAG, samples_per_s=19.5, compile_s=0.5)!r}, flush=True)
'''


def _client(url: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=url)


def _job(url: str, **tags) -> dict:
    return {"job_name": "unit-job-1234abcd", "spec_hash": "0" * 64, "workers_per_node": 1,
            "spec": {"backend": "local", "region": "us-east-1", "model": {"arch": "vit_tiny_patch16_224"},
                     "training": {"batch_size": 4, "optimizer": {"lr": 0.001}}},
            "instance": {"type": "ml.trn1.2xlarge"}, "tags": dict(tags),
            "mlflow": {"tracking_uri": url, "experiment": f"unit-{uuid.uuid4().hex[:8]}", "run_name": "unit-job",
                       "arn": False, "price_per_hour": 1.0, "peak_flops_per_s": 1e12, "cost_bound_usd": 2.0}}


def test_a_local_sweep_leaves_one_parent_run_and_a_finished_child_run_per_trial(
        tmp_path, orch_home, fake_train, mlflow_server):
    (tmp_path / "fake-train-module" / "fake_train.py").write_text(FAKE_TRAIN_SOURCE + METRIC_LINES)
    experiment = f"sweep-{uuid.uuid4().hex[:8]}"
    base = LOCAL_BASE + f"mlflow: {{tracking_uri: '{mlflow_server}', experiment: {experiment}}}\n"
    path = write(tmp_path, "sweep: tracked\nbase: base.yaml\ngrid:\n  training.batch_size: [4, 8]\nconcurrency: 2\n",
                 base)
    env = dict(os.environ, ORCHESTRATOR_HOME=str(orch_home))
    run = cli_run("sweep", "run", str(path), "--poll", "0.2", env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    sweep_id = re.search(r"sweep (tracked-[0-9a-f]{8}): 2 completed", run.stdout).group(1)

    client = _client(mlflow_server)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id])
    parents = [r for r in runs if r.data.tags.get(mlflow_run.ROLE_TAG) == "sweep"]
    assert len(parents) == 1 and parents[0].data.tags[mlflow_run.SWEEP_TAG] == sweep_id
    children = [r for r in runs if r.data.tags.get(mlflow_run.PARENT_TAG) == parents[0].info.run_id]
    assert len(runs) == 3 and len(children) == 2
    assert {r.info.status for r in children} == {"FINISHED"}
    assert sorted(r.data.params["training.batch_size"] for r in children) == ["4", "8"]
    for child in children:
        assert child.data.tags[mlflow_run.SWEEP_TAG] == sweep_id and child.data.tags[mlflow_run.TRIAL_TAG]
        assert child.data.tags["orchestrator.varied.training.batch_size"] in ("4", "8")
        assert child.data.params["spec_hash"] and child.data.params["backend"] == "local"
        assert child.data.metrics["train/loss"] == 2.25  # the latest of the two points
        history = client.get_metric_history(child.info.run_id, "train/loss")
        assert [(m.step, m.value) for m in history] == [(3, 2.5), (6, 2.25)]
        assert child.data.metrics["summary/samples_per_s"] == 19.5
        assert "final/samples_per_s" in child.data.metrics
        assert [a.path for a in client.list_artifacts(child.info.run_id)] == ["results.json"]

    # `results` links each row to its run, and reads the runs back from the server.
    table = cli_run("results", "--sweep", sweep_id, "--format", "json", env=env)
    assert table.returncode == 0, table.stderr
    rows = json.loads(table.stdout)["rows"]
    assert sorted(r["mlflow_run"] for r in rows) == sorted(c.info.run_id for c in children)
    back = cli_run("results", "--mlflow", mlflow_server, "--experiment", experiment, "--format", "json", env=env)
    assert back.returncode == 0, back.stderr
    read = json.loads(back.stdout)["runs"]
    assert sorted(r["run_id"] for r in read) == sorted(c.info.run_id for c in children)
    assert all(r["metrics"]["summary/samples_per_s"] == 19.5 for r in read)
    # The one test that needs the server (its start-up is minutes on a loaded machine; each
    # xdist worker would start its own): a job outside a sweep, through the logger itself.
    _a_job_alone_logs_params_metrics_and_the_end(mlflow_server)


def _a_job_alone_logs_params_metrics_and_the_end(mlflow_server):
    job = _job(mlflow_server)
    logger = mlflow_run.RunLogger(job, lambda line: None, instance_type="ml.trn1.2xlarge").start()
    logger.line(contract.metric_line(contract.METRICS_TAG, step=10, loss=1.5, step_time_s=0.5, samples_per_s=8.0))
    logger.line("fake-train rank 0 done")  # not a metric line: ignored
    logger.metrics(mlflow_run.final_metrics({"samples_per_s": 8.0, "flops_per_sample": 1e9, "compile_s": 3.0},
                                            job["mlflow"]))
    assert logger.finish("completed") is None
    run = _client(mlflow_server).get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == job["job_name"]
    assert run.data.metrics["train/loss"] == 1.5 and run.data.metrics["final/compile_s"] == 3.0
    assert run.data.metrics["final/samples_per_dollar"] == 8.0 * 3600
    assert run.data.metrics["final/mfu"] == pytest.approx(8e9 / 1e12)
    assert run.data.metrics["final/cost_bound_usd"] == 2.0
    assert run.data.params["instance.selected_type"] == "ml.trn1.2xlarge"
    assert mlflow_run.PARENT_TAG not in run.data.tags  # no sweep, no parent


class _Refusing(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_error(503, "refusing on purpose")

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture(params=["down", "refusing", "silent"])
def bad_server(request, monkeypatch):
    """A tracking URI that never works: nothing listening, 503 to everything, or a socket that
    accepts and never answers (each request then times out: MLflow's timeout set to 1 s)."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    if request.param == "down":
        yield f"http://127.0.0.1:{free_port()}"
    elif request.param == "refusing":
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{server.server_address[1]}"
        server.shutdown()
    else:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
        sock.close()


def test_a_server_that_never_works_costs_nothing_but_one_warning(bad_server):
    said = []
    logger = mlflow_run.RunLogger(_job(bad_server), said.append, give_up_s=2, flush_s=0.1).start()
    # Everything the job hands over is buffered whatever the server does; nothing raises.
    for step in range(1, 2001):
        logger.line(contract.metric_line(contract.METRICS_TAG, step=step, loss=1.0, step_time_s=0.1,
                                         samples_per_s=10.0))
    warning = logger.finish("completed", wait_s=120)
    assert warning is not None and "gave up logging to" in warning and "results.json holds everything" in warning
    assert [line for line in said if line.startswith("WARNING")] == [f"WARNING {warning}"]
    assert logger.run_id is None


def test_the_buffer_keeps_the_newest_points_when_it_is_full(monkeypatch):
    monkeypatch.setattr(mlflow_run, "MAX_BUFFERED", 10)
    logger = mlflow_run.RunLogger(_job("http://127.0.0.1:1"), lambda line: None)
    logger.metrics({f"m{i}": float(i) for i in range(25)}, step=1)
    assert logger.dropped == 15 and [m[0] for m in logger._metrics] == [f"m{i}" for i in range(15, 25)]


def test_a_local_job_whose_server_is_down_completes_and_its_record_says_why(tmp_path, orch_home, fake_train):
    from pathlib import Path

    from orchestrator import names
    from orchestrator import results as res
    from orchestrator import spec as specs

    path = tmp_path / "job.yaml"
    path.write_text(LOCAL_BASE + f"mlflow: {{tracking_uri: 'http://127.0.0.1:{free_port()}'}}\n")
    env = dict(os.environ, ORCHESTRATOR_HOME=str(orch_home))
    done = cli_run("submit", str(path), "--wait", "--interval", "1", env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    job = names.job_name(specs.load(path))
    store = Path(res.local_store_uri().removeprefix("file://"))
    (found,) = list(store.rglob(f"{job}/results.json"))
    record = json.loads(found.read_text())
    assert record["status"] == "completed"
    assert record["mlflow"]["run_id"] is None and "gave up logging to" in record["mlflow"]["warning"]
    assert record["mlflow"]["experiment"] == "fake"


def test_a_retry_is_its_own_run_tagged_with_its_trial():
    job = _job("http://127.0.0.1:1", **{"orchestrator:sweep": "s-1a2b3c4d", "orchestrator:trial": "t0123abcd",
                                        "orchestrator:attempt": "retry"})
    job["job_name"] = "s-1a2b3c4d-t0123abcd-r1"
    job["varied"] = {"training.optimizer.lr": 0.001}
    tags = mlflow_run.run_tags(job, "ml.trn1.2xlarge")
    assert tags[mlflow_run.JOB_TAG] == "s-1a2b3c4d-t0123abcd-r1"
    assert tags[mlflow_run.TRIAL_TAG] == "t0123abcd" and tags["orchestrator.attempt"] == "retry"
    assert tags["orchestrator.varied.training.optimizer.lr"] == "0.001"
