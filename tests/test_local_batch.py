"""A batch spec run on this machine (`submit SPEC --local`, orchestrator.backends.local.batch_task):
its exact SubmitJob request, as an ECS task runs it (the image's start script evaluating the
bootstrap command, launch.py the first process, /opt/ml in the job's folder), against the local
store. Fast tests run launch.py with the `fake_train` module (no torch); the slow ones train a
tiny ViT to the end and stop one mid-training as TerminateJob would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from job_waits import patience, wait_for

from entrypoints.launcher import bootstrap, torchrun
from entrypoints.shared import contract, storage
from orchestrator import catalog, request, spec
from orchestrator.backends.local import LocalBackend
from orchestrator.backends.local import batch_task as local_batch
from orchestrator.backends.local import layout as local_layout
from orchestrator.ledger import Ledger

# Native eager PyTorch on inf2.xlarge without training.workers_per_node: the doctor's N004 holds
# (one worker per NeuronCore, 2), and the local run runs those 2 workers as CPU processes.
SPEC = """\
name: {name}
backend: batch
region: us-east-1
instance: {{type: inf2.xlarge, count: {count}}}
batch: {{stack: orchestrator}}
model: {{arch: vit_tiny_patch16_224, patch_embed: linear, image_size: 32, patch_size: 8, depth: 1,
        embed_dim: 32, num_heads: 2, num_classes: 10}}
training: {{runtime: {runtime}, compile: {compile}, steps: {steps}, warmup_steps: 2, batch_size: 4, precision: fp32,
           log_every: {log_every}{workers}}}
data: {{source: synthetic, num_workers: 0}}
compile_cache: {{uri: s3://example-bucket/compile-cache, mode: {cache}, push_interval_s: 2}}
output: {{uri: s3://example-bucket/jobs}}
max_run_minutes: 30
"""


def write_spec(tmp_path: Path, name: str = "lb", count: int = 1, runtime: str = "native", compile: str = "false",
               steps: int = 3, cache: str = '"off"', log_every: int = 1, workers: int | None = None) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, count=count, runtime=runtime, compile=compile, steps=steps, cache=cache,
                                log_every=log_every,
                                workers="" if workers is None else f", workers_per_node: {workers}"))
    return path


def local_prepared(path: Path):
    return request.prepare(spec.load(path), local=LocalBackend)  # the backend that runs it here


def stored(uri: str) -> dict | None:
    prefix, _, name = uri.rpartition("/")
    data = storage.open_store(prefix).get_bytes(name)
    return json.loads(data) if data else None


def terminal(backend, job: str, timeout: float = 180.0):
    return wait_for(lambda: (s := backend.status(job)).terminal and s, timeout, f"{job} never ended", backend, job)


# --- the request and the job folder ---------------------------------------------------------


def test_the_local_run_sends_the_batch_request_beside_the_real_job(orch_home, tmp_path):
    path = write_spec(tmp_path)
    real = request.prepare(spec.load(path))
    local = local_prepared(path)
    assert local.job_name == f"{real.job_name}-local" and local.spec_hash == real.spec_hash
    # The same SubmitJob: queue, job definition, bootstrap command, retries, timeout, variables.
    for key in ("jobQueue", "jobDefinition", "retryStrategy", "timeout", "propagateTags"):
        assert local.request[key] == real.request[key], key
    assert local.request["containerOverrides"]["command"] == real.request["containerOverrides"]["command"]
    assert local.request["containerOverrides"]["command"] == bootstrap.command()
    names = {e["name"] for e in local.request["containerOverrides"]["environment"]}
    assert names == {e["name"] for e in real.request["containerOverrides"]["environment"]}
    env = {e["name"]: e["value"] for e in local.request["containerOverrides"]["environment"]}
    assert env["SM_MODEL_DIR"] == "/opt/ml/model"  # the request as sent; the local backend moves /opt/ml
    # ... against the local store: the archive, results.json and the compile cache.
    store = f"file://{orch_home}/store"
    assert env[bootstrap.CODE_URI_ENV] == local.source_uri and local.source_uri.startswith(f"{store}/jobs/source/")
    assert local.job["results_uri"] == f"{store}/jobs/results/{local.job_name}/results.json"
    assert local.job["compile_cache"]["uri"] == f"{store}/compile-cache"
    assert local.job["tensorboard_uri"] == f"{store}/jobs/tensorboard/{local.job_name}"
    assert local.job["backend"] == "local" and "backend" not in real.job


def test_a_local_xla_run_trains_one_worker_where_the_instance_runs_one_per_neuroncore(orch_home, tmp_path,
                                                                                      monkeypatch, capsys):
    from cli_harness import run_cli

    path = write_spec(tmp_path, runtime="xla")
    real, local = request.prepare(spec.load(path)), local_prepared(path)
    assert real.job["workers_per_node"] == real.target.workers_per_node == 2
    assert local.job["workers_per_node"] == 1  # PJRT's CPU device runs one process
    assert local_prepared(write_spec(tmp_path, name="nat")).job["workers_per_node"] == 2  # native: the spec's
    code, _, err = run_cli(monkeypatch, capsys, "submit", str(path), "--local", "--dry-run")
    assert code == 0
    code, _, err = run_cli(monkeypatch, capsys, "submit", str(path), "--local")
    assert code == 0 and "the local run trains 1 worker where inf2.xlarge runs 2" in err
    LocalBackend().stop(local.job_name)
    terminal(LocalBackend(), local.job_name)


def test_the_job_folder_runs_the_command_through_the_start_script_with_opt_ml_moved(orch_home, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.delenv(local_layout.STOP_GRACE_ENV, raising=False)
    prepared = local_prepared(write_spec(tmp_path, runtime="xla", cache="tarball"))
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    local_batch.lay_out(prepared, job_dir, ledger=tmp_path / "ledger.sqlite3", python="python3", now=1.0)
    plan = json.loads((job_dir / local_layout.PLAN_FILE).read_text())
    script = job_dir / local_batch.START_SCRIPT_NAME
    assert plan["entrypoint"] == ["bash", "-m", str(script), *prepared.request["containerOverrides"]["command"]]
    assert plan["channels"] == {} and plan["output_prefix"] is None  # the bootstrap fetches; Batch uploads nothing
    assert plan["stop_grace_s"] == 30.0  # ECS's stop timeout
    assert plan["max_run_s"] == prepared.request["timeout"]["attemptDurationSeconds"] == 30 * 60
    root = job_dir / "algo-1"
    env = plan["host"]["algo-1"]["env"]
    assert env["SAGEMAKER_BASE_DIR"] == str(root) and env["SM_MODEL_DIR"] == str(root / "model")
    assert env["SM_CHANNEL_CODE"] == str(root / "input/data/code")
    # The Neuron compile cache the request names is the container's own too.
    assert catalog.NEURON_CACHE_DIR in dict((e["name"], e["value"]) for e in
                                            prepared.request["containerOverrides"]["environment"])["NEURON_CC_FLAGS"]
    assert f"--cache_dir={root}/var-tmp/neuron-compile-cache" in env["NEURON_CC_FLAGS"]
    # This machine's CPUs for the instance's NeuronCores.
    assert (env["SM_NUM_NEURONS"], env["PJRT_DEVICE"]) == ("0", "CPU")
    assert env["AWS_BATCH_JOB_ID"] == prepared.job_name and env["AWS_BATCH_JQ_NAME"] == "orchestrator-inf2-xlarge"
    # The request's own environment, plus what Batch sets and the placements the module lists:
    # nothing that changes how launch.py stops (it reads ECS's 30 s from the request).
    sent = {e["name"]: e["value"] for e in prepared.request["containerOverrides"]["environment"]}
    placed = {"GLOO_SOCKET_IFNAME", "PJRT_DEVICE", "ORCHESTRATOR_MASTER_PORT", "SAGEMAKER_BASE_DIR"}
    assert set(env) - set(sent) <= placed | {"AWS_BATCH_JOB_ID", "AWS_BATCH_JOB_ATTEMPT", "AWS_BATCH_JQ_NAME"}
    assert env[torchrun.STOP_GRACE_ENV] == sent[torchrun.STOP_GRACE_ENV] == "30"
    changed = {k for k in sent if env[k] != sent[k]}
    assert changed <= {"SAGEMAKER_BASE_DIR", "SM_NUM_CPUS", "SM_NUM_NEURONS", "NEURON_CC_FLAGS"} | {
        k for k, v in sent.items() if v.startswith(contract.OPT_ML)}, changed
    status = json.loads((job_dir / local_layout.STATUS_FILE).read_text())
    assert (status["state"], status["instance_type"]) == ("pending", "inf2.xlarge")

    monkeypatch.setenv(local_layout.STOP_GRACE_ENV, "5")
    again = tmp_path / "again"
    again.mkdir()
    local_batch.lay_out(prepared, again, ledger=tmp_path / "ledger.sqlite3", python="python3", now=1.0)
    assert json.loads((again / local_layout.PLAN_FILE).read_text())["stop_grace_s"] == 5.0


def test_the_start_script_evaluates_its_arguments_and_the_exec_keeps_the_first_process(tmp_path):
    script = tmp_path / local_batch.START_SCRIPT_NAME
    script.write_text(local_batch.START_SCRIPT)
    # The words as Batch passes them: parsed again by eval, and `exec` replaces the script's bash.
    words = ["exec", "/bin/bash", "-c", "'echo pid=$$ arg=\"a b\"'"]
    proc = subprocess.Popen(["bash", "-m", str(script), *words], stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=patience(30))
    assert proc.returncode == 0 and out.strip() == f"pid={proc.pid} arg=a b"
    done = subprocess.run(["bash", "-m", str(script), "train"], capture_output=True, text=True, timeout=patience(30))
    assert done.returncode == 127 and "not emulated" in done.stderr


def test_a_local_batch_job_runs_the_bootstrap_to_the_end(orch_home, tmp_path, fake_train):
    prepared = local_prepared(write_spec(tmp_path))
    backend = LocalBackend()
    assert backend.submit(prepared).created
    status = terminal(backend, prepared.job_name)
    assert status.status == "completed", status.failure_reason
    assert (status.instance_type, status.instance_count) == ("inf2.xlarge", 1)
    root = orch_home / "jobs" / prepared.job_name / "algo-1"
    # The bootstrap laid out /opt/ml in the job's folder and unpacked the archive it fetched.
    assert json.loads((root / "code" / "job.json").read_text()) == prepared.job
    assert (root / "input/data/code/sourcedir.tar.gz").read_bytes() == prepared.archive
    assert json.loads((root / contract.RESOURCE_CONFIG).read_text())["current_host"] == "algo-1"
    rank0 = json.loads((root / contract.OUTPUT_DATA_DIR / "ranks" / "rank-0.json").read_text())
    assert rank0["env"]["SM_CURRENT_HOST"] == "algo-1" and rank0["env"]["MASTER_ADDR"] == "127.0.0.1"
    results = stored(prepared.job["results_uri"])
    assert (results["status"], results["backend"], results["job_name"]) == ("completed", "local", prepared.job_name)
    assert results["container"]["entrypoint"] is True and results["instance"]["workers_per_node"] == 2
    assert Ledger().get(prepared.job_name).status == "completed"
    lines = list(backend.logs(prepared.job_name))
    assert not any("Uploaded model.tar.gz" in line for line in lines)  # Batch uploads nothing


def test_a_failing_local_batch_job_gives_the_failure_file_as_its_reason(orch_home, tmp_path, fake_train,
                                                                          monkeypatch):
    monkeypatch.setenv("FAKE_TRAIN_FAIL_RANK", "1")
    prepared = local_prepared(write_spec(tmp_path, name="lbfail"))
    backend = LocalBackend()
    backend.submit(prepared)
    status = terminal(backend, prepared.job_name)
    assert status.status == "failed"
    assert status.failure_reason.startswith("AlgorithmError: ") and "boom on purpose" in status.failure_reason
    assert stored(prepared.job["results_uri"])["status"] == "failed"


def test_an_attempt_that_outlives_its_timeout_is_stopped_as_ecs_stops_it_and_fails(orch_home, tmp_path,
                                                                                    fake_train, monkeypatch):
    monkeypatch.setenv("FAKE_TRAIN_SLEEP", "300")
    # ECS's own 30 s, which launch.py reads from the request: the real path.
    monkeypatch.delenv(local_layout.STOP_GRACE_ENV, raising=False)
    prepared = local_prepared(write_spec(tmp_path, name="lbtime"))
    LocalBackend()._upload_source(prepared)  # what submit does first
    job_dir = orch_home / "jobs" / prepared.job_name
    job_dir.mkdir(parents=True)
    local_batch.lay_out(prepared, job_dir, ledger=orch_home / "ledger.sqlite3", python=sys.executable, now=time.time())
    plan = json.loads((job_dir / local_layout.PLAN_FILE).read_text())
    plan["max_run_s"] = 2  # Batch's least is 60 s: shortened to keep the test fast
    (job_dir / local_layout.PLAN_FILE).write_text(json.dumps(plan))
    done = subprocess.run([sys.executable, "-m", local_layout.RUNNER_MODULE, str(job_dir)], timeout=patience(120))
    assert done.returncode == 0
    status = LocalBackend().status(prepared.job_name)
    assert status.status == "failed" and status.failure_reason == f"{local_batch.TIMEOUT_REASON} (1800 s)"
    assert plan["stop_grace_s"] == 30.0 and torchrun.STOP_GRACE_ENV not in os.environ
    record = json.loads((job_dir / local_layout.STATUS_FILE).read_text())
    assert [s["signal"] for s in record["stop_signals"]] == ["SIGTERM"]  # launch.py ended within the grace
    assert stored(prepared.job["results_uri"])["status"] == "stopped"  # what launch.py saw: a SIGTERM


# --- the CLI ------------------------------------------------------------------------------------


def test_bad_input_with_local_exits_2_and_starts_nothing(orch_home, tmp_path, monkeypatch, capsys):
    from cli_harness import run_cli

    cases = {
        "N041-batch-single-instance": write_spec(tmp_path, name="two", count=2),
        "N004-workers-per-node": write_spec(tmp_path, name="one", workers=1),
    }
    for rule, path in cases.items():
        code, out, err = run_cli(monkeypatch, capsys, "submit", str(path), "--local")
        assert code == 2 and rule in err and out == "", err
    sagemaker = tmp_path / "sm.yaml"
    sagemaker.write_text(write_spec(tmp_path).read_text().replace("backend: batch", "backend: sagemaker")
                         .replace("inf2.xlarge", "ml.trn1.2xlarge")
                         .replace("batch: {stack: orchestrator}", "role_arn: arn:aws:iam::123456789012:role/r"))
    code, _, err = run_cli(monkeypatch, capsys, "submit", str(sagemaker), "--local")
    assert code == 2 and "backend: local" in err
    assert not (orch_home / "jobs").exists() and not Ledger().entries()


def test_submit_local_names_the_local_run_in_what_to_do_next(orch_home, tmp_path, fake_train, monkeypatch, capsys):
    from cli_harness import run_cli

    path = write_spec(tmp_path, name="lbcli")
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(path), "--local")
    job = local_prepared(path).job_name
    assert code == 0 and out.strip() == job and "submitted to local" in err
    # Never the real submit: following the job again is `submit --local --wait`.
    assert f"submit {path} --local --wait" in err and "no cloud cost" in err
    assert terminal(LocalBackend(), job).status == "completed"


def test_dry_run_local_shows_the_request_the_local_run_sends(orch_home, tmp_path, monkeypatch, capsys):
    from cli_harness import run_cli

    path = write_spec(tmp_path)
    code, out, _ = run_cli(monkeypatch, capsys, "submit", str(path), "--local", "--dry-run")
    prepared = local_prepared(path)
    assert code == 0 and prepared.job_name in out and prepared.source_uri in out
    assert not (orch_home / "jobs").exists()


# --- real training --------------------------------------------------------------------------------


@pytest.mark.slow
def test_submit_local_trains_a_tiny_vit_through_the_bootstrap_and_results_shows_it(orch_home, tmp_path,
                                                                                  monkeypatch, capsys):
    from cli_harness import run_cli

    monkeypatch.delenv("ORCHESTRATOR_TRAIN_MODULE", raising=False)
    path = write_spec(tmp_path)
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(path), "--local", "--wait")
    job = local_prepared(path).job_name
    assert code == 0 and out.splitlines()[0] == job, err
    assert "no cloud cost" in err
    code, out, _ = run_cli(monkeypatch, capsys, "results", "--format", "json")
    row = next(r for r in json.loads(out)["rows"] if r["job"] == job)
    assert (row["status"], row["backend"], row["steps_done"]) == ("completed", "local", 3)
    assert row["instance"].startswith("local CPU") and row["final_loss"] is not None
    code, out, _ = run_cli(monkeypatch, capsys, "status", job)
    assert code == 0 and "status    completed" in out
    code, out, _ = run_cli(monkeypatch, capsys, "logs", job)
    assert code == 0 and "[algo-1] [launch] completed" in out
    # Submitting again runs nothing twice.
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(path), "--local")
    assert code == 0 and "already submitted" in err


@pytest.mark.slow
def test_a_local_batch_job_stopped_mid_training_pushes_its_cache_and_says_stopped(orch_home, tmp_path,
                                                                                  monkeypatch, capsys):
    from cli_harness import run_cli

    monkeypatch.delenv("ORCHESTRATOR_TRAIN_MODULE", raising=False)
    monkeypatch.setenv(local_layout.STOP_GRACE_ENV, "60")
    prepared = local_prepared(write_spec(tmp_path, name="lbstop", compile="true", steps=1000000,
                                         cache="tarball", log_every=200))
    backend = LocalBackend()
    backend.submit(prepared)
    uri = prepared.job["results_uri"]
    beat = wait_for(lambda: (r := stored(uri)) and (r.get("steps_done") or 0) >= 2 and r, 400,
                    "no heartbeat after the warmup steps", backend, prepared.job_name)
    key = beat["cache"]["key"]
    manifest = f"{prepared.job['compile_cache']['uri']}/{key}/manifest.json"
    wait_for(lambda: stored(manifest), 120, "nothing pushed after the warmup steps", backend, prepared.job_name)

    # TerminateJob: SIGTERM to the container's first process (launch.py, through two execs), within the grace.
    code, _, _ = run_cli(monkeypatch, capsys, "stop", prepared.job_name)
    assert code == 0
    status = terminal(backend, prepared.job_name, 120)
    assert status.status == "stopped"
    record = json.loads((orch_home / "jobs" / prepared.job_name / local_layout.STATUS_FILE).read_text())
    assert [s["signal"] for s in record["stop_signals"]] == [signal.Signals.SIGTERM.name]
    final = stored(uri)
    assert final["status"] == "stopped" and final["steps_done"] >= beat["steps_done"]
    assert final["failure_reason"].startswith("stopped")
    assert final["container"]["entrypoint"] is True and final["backend"] == "local"
    entries = stored(manifest)["entries"]
    assert any(name.startswith("fxgraph/") for name in entries), sorted(entries)
    assert final["cache"]["pushes"] >= 1 and final["cache"]["new_entries"] == len(entries)
    code, out, _ = run_cli(monkeypatch, capsys, "status", prepared.job_name)
    assert code == 0 and "status    stopped" in out


def test_local_rerun_takes_the_next_free_local_name(tmp_path, orch_home, monkeypatch, capsys):
    """QA: `--local --rerun` was refused, and its hint (remove the job folder) left the ledger
    row, so the spec could not run here again. A rerun of a local run is `<name>-<hash>-local-r<n>`,
    free in this machine's ledger and jobs folder; the real job's names are untouched."""
    from cli_harness import run_cli

    from orchestrator import names

    path = write_spec(tmp_path)
    loaded = spec.load(path)
    first = names.local_job_name(loaded)
    code, out, _ = run_cli(monkeypatch, capsys, "submit", str(path), "--local", "--rerun", "--dry-run")
    assert code == 0 and f'"jobName": "{first}"' in out  # nothing ran here yet: the plain local name
    Ledger().record_intent(first, backend="local", region="local", spec_hash="0" * 64, request={}, status="completed")
    code, out, _ = run_cli(monkeypatch, capsys, "submit", str(path), "--local", "--rerun", "--dry-run")
    assert code == 0 and f'"jobName": "{first}-r1"' in out
    assert names.local_job_name(loaded, 1) == f"{first}-r1" and not names.job_name(loaded).endswith("-local")


def test_local_flag_on_a_local_spec_says_it_changes_nothing(monkeypatch, capsys, orch_home):
    """Issue 22, smaller findings: `submit --local` of a local spec ignored --local silently."""
    from cli_harness import run_cli

    root = Path(__file__).resolve().parents[1]
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(root / "configs" / "local-tiny.yaml"), "--local",
                             "--dry-run")
    assert code == 0, err
    assert "has backend: local" in err and "--local changes nothing" in err


def test_a_batch_and_a_sagemaker_layout_write_plan_and_status_alike(orch_home, tmp_path, monkeypatch):
    """One writer (`layout.write_plan_and_status`) of both layouts' plan.json and first
    status.json: the same fields each local job's plan holds, the same pending status, and the
    job's record of results in both (the batch layout's status once lacked it)."""
    from tests.test_backend_local import make_spec, prepared_for

    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    ledger = orch_home / "ledger.sqlite3"
    laid = {}
    for kind, prepared, lay_out in (
            ("batch", local_prepared(write_spec(tmp_path, name="lbsame")), local_batch.lay_out),
            ("sagemaker", prepared_for(make_spec(tmp_path, name="smsame")), local_layout.lay_out)):
        job_dir = orch_home / "jobs" / prepared.job_name
        job_dir.mkdir(parents=True)
        lay_out(prepared, job_dir, ledger=ledger, python="/the/python", now=123.0)
        plan = json.loads((job_dir / local_layout.PLAN_FILE).read_text())
        status = json.loads((job_dir / local_layout.STATUS_FILE).read_text())
        assert plan["job_name"] == prepared.job_name
        assert (plan["ledger"], plan["python"], plan["pythonpath"]) == (str(ledger), "/the/python", "/somewhere")
        assert status["results_uri"] == prepared.job["results_uri"] is not None
        assert (status["job_name"], status["state"], status["created"]) == (prepared.job_name, "pending", 123.0)
        assert oct((job_dir / local_layout.PLAN_FILE).stat().st_mode & 0o777) == "0o600"
        laid[kind] = status
    assert set(laid["batch"]) == set(laid["sagemaker"])  # the same fields
    assert laid["batch"]["output_uri"] == laid["batch"]["results_uri"]  # Batch uploads nothing else
    assert laid["sagemaker"]["output_uri"].endswith("/model.tar.gz")
