"""The local backend: the container tree, the detached supervisor, status/logs/stop, outputs.

Fast tests run launch.py with the `fake_train` module (no torch); the slow ones train the
real entrypoints.trainer.train end to end, one host through the CLI and two hosts on loopback.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from job_waits import patience

from entrypoints.shared import contract, storage
from orchestrator import names, processes, request, spec
from orchestrator.backends.local import LocalBackend
from orchestrator.backends.local import layout as local_layout
from orchestrator.errors import BackendError, InputError
from orchestrator.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]

BASE = """
name: {name}
backend: local
instance: {{type: ml.trn1.2xlarge, count: {count}}}
model: {{arch: vit_tiny_patch16_224, image_size: 32, patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2,
         num_classes: 10}}
training:
  runtime: native
  steps: {steps}
  warmup_steps: {warmup}
  batch_size: 4
  precision: fp32
  log_every: 1
  workers_per_node: {workers}
  optimizer: {{name: adam, lr: 0.001}}
data: {{source: {source}, num_workers: 0}}
compile_cache: {{mode: "{cache}"}}
max_run_minutes: {max_run}
"""


def make_spec(tmp_path: Path, name: str = "loc", count: int = 1, workers: int = 1, steps: int = 4,
              source: str = "synthetic", max_run: int = 10, cache: str = "off", warmup: int = 1) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(BASE.format(name=name, count=count, workers=workers, steps=steps, source=source,
                                max_run=max_run, cache=cache, warmup=warmup))
    return path


def prepared_for(path: Path):
    return request.prepare(spec.load(path))


def wait_until(condition, timeout: float, what: str, interval: float = 0.2) -> None:
    """Poll `condition` until it is true; fail with `what` after `timeout` seconds."""
    deadline = time.time() + patience(timeout)
    while not condition():
        assert time.time() < deadline, what
        time.sleep(interval)


def start_sleeping_job(orch_home, tmp_path, monkeypatch):
    """Submit a job whose fake trainer sleeps, and return once its hosts are running:
    (backend, prepared, job dir, the status file's contents)."""
    monkeypatch.setenv("FAKE_TRAIN_SLEEP", "300")
    prepared = prepared_for(make_spec(tmp_path))
    backend = LocalBackend()
    backend.submit(prepared)
    job_dir = orch_home / "jobs" / prepared.job_name

    def started() -> bool:
        log = job_dir / "logs" / "all.log"
        return log.exists() and "fake-train rank 0/1 started" in log.read_text()

    wait_until(started, 60, "the fake trainer never started")
    return backend, prepared, job_dir, json.loads((job_dir / local_layout.STATUS_FILE).read_text())


def wait_terminal(backend: LocalBackend, job: str, timeout: float = 120.0):
    deadline = time.time() + patience(timeout)
    while time.time() < deadline:
        status = backend.status(job)
        if status.terminal:
            return status
        time.sleep(0.3)
    log = "\n".join(backend.logs(job))
    raise AssertionError(f"{job} not terminal after {timeout}s; log:\n{log}")


def store_tar_names(uri: str) -> list[str]:
    prefix, _, key = uri.rpartition("/")
    data = storage.open_store(prefix).get_bytes(key)
    assert data is not None, f"{uri} is missing"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return sorted(tar.getnames())


def results_of(prepared) -> dict:
    prefix, _, key = prepared.job["results_uri"].rpartition("/")
    data = storage.open_store(prefix).get_bytes(key)
    assert data is not None, f"no results at {prepared.job['results_uri']}"
    return json.loads(data)


# --- layout and the fake trainer ------------------------------------------------------------


def test_submit_lays_out_container_tree_and_runs_to_completion(orch_home, tmp_path, fake_train):
    prepared = prepared_for(make_spec(tmp_path))
    backend = LocalBackend()
    submitted = backend.submit(prepared)
    assert submitted.created and submitted.job_name == prepared.job_name
    status = wait_terminal(backend, prepared.job_name)
    assert status.status == "completed", status.failure_reason
    assert status.secondary == "Completed" and status.failure_reason is None
    assert status.instance_type == "ml.trn1.2xlarge" and status.instance_count == 1
    assert status.started and status.ended and status.ended >= status.started

    root = orch_home / "jobs" / prepared.job_name / "algo-1"
    hps = json.loads((root / contract.HYPERPARAMETERS).read_text())
    assert hps == prepared.request["HyperParameters"]
    resources = json.loads((root / contract.RESOURCE_CONFIG).read_text())
    assert resources["current_host"] == "algo-1" and resources["hosts"] == ["algo-1"]
    for rel in (contract.MODEL_DIR, contract.OUTPUT_DATA_DIR, contract.CHECKPOINT_DIR):
        assert (root / rel).is_dir()
    # The code dir is the unpacked source archive, with launch.py at its root.
    assert (root / "code" / "launch.py").read_bytes() == (ROOT / "entrypoints" / "launcher" / "launch.py").read_bytes()
    assert json.loads((root / "code" / "job.json").read_text()) == prepared.job

    # What the rank saw: the SM_* contract and the loopback rendezvous.
    rank0 = json.loads((root / contract.OUTPUT_DATA_DIR / "ranks" / "rank-0.json").read_text())
    assert rank0["env"]["SM_CURRENT_HOST"] == "algo-1"
    assert rank0["env"]["MASTER_ADDR"] == "127.0.0.1"

    # SageMaker's outputs, at SageMaker's place.
    out = f"{prepared.request['OutputDataConfig']['S3OutputPath']}/{prepared.job_name}/output"
    assert status.output_uri == f"{out}/model.tar.gz"
    assert "model.pt" in store_tar_names(f"{out}/model.tar.gz")
    assert {"results.json", "ranks/rank-0.json"} <= set(store_tar_names(f"{out}/output.tar.gz"))
    results = results_of(prepared)
    assert results["status"] == "completed" and results["backend"] == "local"
    assert results["job_name"] == prepared.job_name

    assert Ledger().get(prepared.job_name).status == "completed"
    lines = list(backend.logs(prepared.job_name))
    assert any(line.startswith("[algo-1] fake-train rank 0/1 started") for line in lines)
    assert any(line.startswith("[local] Uploaded model.tar.gz") for line in lines)


def test_the_callers_compiler_settings_do_not_leak_into_the_job(orch_home, tmp_path, fake_train, monkeypatch):
    # A container never sees the laptop's shell: a TORCHINDUCTOR_CACHE_DIR exported there
    # must not replace the job's fresh cache dir, nor other settings change the cache key.
    mine = tmp_path / "my-inductor-cache"
    mine.mkdir()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(mine))
    monkeypatch.setenv("TORCHINDUCTOR_FREEZING", "1")
    monkeypatch.setenv("TORCHDYNAMO_VERBOSE", "1")
    monkeypatch.setenv("NEURON_CC_FLAGS", "--model-type=cnn")
    prepared = prepared_for(make_spec(tmp_path))
    backend = LocalBackend()
    backend.submit(prepared)
    assert wait_terminal(backend, prepared.job_name).status == "completed"
    root = orch_home / "jobs" / prepared.job_name / "algo-1"
    rank0 = json.loads((root / contract.OUTPUT_DATA_DIR / "ranks" / "rank-0.json").read_text())
    assert rank0["cache_dir"] and rank0["cache_dir"] != str(mine)
    assert set(rank0["inductor_env"]) <= {"TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS"}
    assert rank0["env"]["NEURON_CC_FLAGS"] is None
    assert list(mine.iterdir()) == []


def test_resubmitting_the_same_job_runs_nothing_twice(orch_home, tmp_path, fake_train):
    prepared = prepared_for(make_spec(tmp_path))
    backend = LocalBackend()
    assert backend.submit(prepared).created
    first = wait_terminal(backend, prepared.job_name)
    job_dir = orch_home / "jobs" / prepared.job_name
    before = {name: ((job_dir / name).read_bytes(), (job_dir / name).stat().st_ino)
              for name in (local_layout.PID_FILE, local_layout.STATUS_FILE, "logs/all.log")}
    again = LocalBackend().submit(prepared)
    assert again.created is False and again.job_name == prepared.job_name
    # A second start would have laid the job out again and written a new supervisor pid
    # before submit returned (it waits for the supervisor to record itself): nothing changed.
    assert {name: ((job_dir / name).read_bytes(), (job_dir / name).stat().st_ino) for name in before} == before
    assert backend.status(prepared.job_name).ended == first.ended
    assert [e.job_name for e in Ledger().entries()] == [prepared.job_name]


def test_concurrent_submits_of_one_job_start_it_once(orch_home, tmp_path, fake_train):
    from concurrent.futures import ThreadPoolExecutor

    prepared = prepared_for(make_spec(tmp_path))
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda _: LocalBackend().submit(prepared), range(4)))
    assert sorted(o.created for o in outcomes) == [False, False, False, True]
    backend = LocalBackend()
    assert wait_terminal(backend, prepared.job_name).status == "completed"
    starts = [line for line in backend.logs(prepared.job_name) if "fake-train rank 0/1 started" in line]
    assert len(starts) == 1


def test_a_failing_rank_fails_the_job_with_its_reason_and_outputs_still_upload(orch_home, tmp_path,
                                                                                fake_train, monkeypatch):
    monkeypatch.setenv("FAKE_TRAIN_FAIL_RANK", "1")
    prepared = prepared_for(make_spec(tmp_path, workers=2))
    backend = LocalBackend()
    backend.submit(prepared)
    status = wait_terminal(backend, prepared.job_name)
    assert status.status == "failed" and status.secondary == "Failed"
    assert status.failure_reason == "AlgorithmError: algo-1: rank 1: RuntimeError: boom on purpose"
    assert Ledger().get(prepared.job_name).status == "failed"
    out = f"{prepared.request['OutputDataConfig']['S3OutputPath']}/{prepared.job_name}/output"
    assert "results.json" in store_tar_names(f"{out}/output.tar.gz")
    assert results_of(prepared)["status"] == "failed"


def test_two_hosts_get_their_own_contract_and_one_rendezvous(orch_home, tmp_path, fake_train):
    prepared = prepared_for(make_spec(tmp_path, count=2))
    backend = LocalBackend()
    backend.submit(prepared)
    status = wait_terminal(backend, prepared.job_name)
    assert status.status == "completed", status.failure_reason
    job_dir = orch_home / "jobs" / prepared.job_name
    plan = json.loads((job_dir / local_layout.PLAN_FILE).read_text())
    ports = set()
    for rank, host in enumerate(("algo-1", "algo-2")):
        env = plan["host"][host]["env"]
        # The platform's part: where /opt/ml is; the SM_* variables are the container's to compute.
        assert env[contract.BASE_DIR_ENV] == str(job_dir / host) and "SM_HOSTS" not in env
        assert env[contract.MASTER_ADDR_ENV] == "127.0.0.1"
        assert env["SM_NUM_CPUS"] == str(max(1, (os.cpu_count() or 1) // 2))
        ports.add(env["ORCHESTRATOR_MASTER_PORT"])
        seen = json.loads((job_dir / host / contract.OUTPUT_DATA_DIR / "ranks" / f"rank-{rank}.json").read_text())
        assert seen["world_size"] == 2 and seen["env"]["GROUP_RANK"] == str(rank)
        assert seen["env"]["SM_CURRENT_HOST"] == host and json.loads(seen["env"]["SM_HOSTS"]) == ["algo-1", "algo-2"]
        assert seen["env"]["SM_NUM_CPUS"] == env["SM_NUM_CPUS"]  # the host's share wins over the whole machine
        assert json.loads((job_dir / host / contract.RESOURCE_CONFIG).read_text())["current_host"] == host
    assert len(ports) == 1
    lines = list(backend.logs(prepared.job_name))
    assert any(line.startswith("[algo-1] ") for line in lines)
    assert any(line.startswith("[algo-2] ") for line in lines)
    # Only node rank 0 publishes results; it describes both hosts.
    assert results_of(prepared)["instance"]["count"] == 2


def test_stop_terminates_every_process_and_marks_stopped(orch_home, tmp_path, fake_train, monkeypatch):
    backend, prepared, _, data = start_sleeping_job(orch_home, tmp_path, monkeypatch)
    pids = [h["pid"] for h in data["hosts"].values()]
    backend.stop(prepared.job_name)
    assert backend.status(prepared.job_name).status in ("stopping", "stopped")
    status = wait_terminal(backend, prepared.job_name, timeout=90)
    assert status.status == "stopped" and status.secondary == "Stopped"
    assert Ledger().get(prepared.job_name).status == "stopped"
    assert not any(processes.process_alive(pid) for pid in pids)
    # As SageMaker does after a stop, what the job wrote is uploaded.
    out = f"{prepared.request['OutputDataConfig']['S3OutputPath']}/{prepared.job_name}/output"
    assert "results.json" in store_tar_names(f"{out}/output.tar.gz")
    backend.stop(prepared.job_name)  # stopping a stopped job is a no-op
    assert backend.status(prepared.job_name).status == "stopped"


@pytest.mark.parametrize("toolkit", ["on", "off"])
def test_stop_reaches_the_entrypoint_which_pushes_the_cache_and_reports_stopped(orch_home, tmp_path, fake_train,
                                                                                 monkeypatch, toolkit):
    """The stop SageMaker sends (SIGTERM to the container's first process, SIGKILL to all after
    the grace period) reaches launch.py, the request's entrypoint: it stops training, pushes
    what was compiled and writes its final results.json, all within the grace period. With the
    real toolkit's SM_* variables (on) and with the emulation that stands in where the toolkit
    is not installed (off)."""
    from entrypoints.shared import compile_cache

    if toolkit == "on":
        pytest.importorskip("sagemaker_training")
    else:
        monkeypatch.setenv("ORCHESTRATOR_SM_TOOLKIT", "off")
    monkeypatch.setenv(local_layout.STOP_GRACE_ENV, "60")
    # Warmup steps the fake trainer never reaches: nothing is pushed before the stop.
    monkeypatch.setenv("FAKE_TRAIN_SLEEP", "300")
    monkeypatch.setenv("FAKE_TRAIN_NEW_ENTRY", "fxgraph/st/compiled-before-the-stop")
    prepared = prepared_for(make_spec(tmp_path, name="stoptk", steps=20, warmup=10, cache="tarball"))
    backend = LocalBackend()
    backend.submit(prepared)
    job_dir = orch_home / "jobs" / prepared.job_name
    wait_until(lambda: "fake-train rank 0 warm" in (job_dir / "logs" / "all.log").read_text(), 60,
               "the fake trainer never got going")
    assert results_of(prepared)["status"] == "running"
    backend.stop(prepared.job_name)
    status = wait_terminal(backend, prepared.job_name, timeout=90)
    assert (status.status, status.secondary) == ("stopped", "Stopped")
    # The hosts ended within the grace period: SIGTERM to the first process, and no SIGKILL.
    signals = json.loads((job_dir / local_layout.STATUS_FILE).read_text())["stop_signals"]
    assert [s["signal"] for s in signals] == ["SIGTERM"]
    results = results_of(prepared)
    assert results["status"] == "stopped" and results["failure_reason"] == "stopped: the launcher received SIGTERM"
    assert results["cache"]["pushes"] == 1 and results["cache"]["new_entries"] == 1
    setup = results["container"]
    assert setup["entrypoint"] is True and setup["requirements"] == "installed"
    if toolkit == "on":
        assert setup["sm_environment"].startswith("sagemaker-training ")
    else:
        assert setup["sm_environment"] == "emulated"
    seen = json.loads((job_dir / "algo-1" / contract.OUTPUT_DATA_DIR / "ranks" / "rank-0.json").read_text())
    assert seen["env"]["SM_CURRENT_HOST"] == "algo-1" and json.loads(seen["env"]["SM_HOSTS"]) == ["algo-1"]
    assert seen["env"]["SM_CHANNELS"] == '["code"]'
    fresh = tmp_path / "fresh"
    key = compile_cache.CacheKey(**json.loads(storage.open_store(prepared.job["compile_cache"]["uri"]).get_bytes(
        f"{results['cache']['key']}/manifest.json"))["key"])
    assert compile_cache.pull(prepared.job["compile_cache"]["uri"], key, fresh).hit_entries == 1


def test_stop_signals_the_first_process_only_and_kills_everything_after_the_grace_period(orch_home, tmp_path,
                                                                                          monkeypatch):
    """As SageMaker: the SIGTERM goes to the container's first process, not its group; what it
    does not pass on never arrives, and after the grace period SIGKILL ends every process."""
    monkeypatch.setenv(local_layout.STOP_GRACE_ENV, "3")
    marks = tmp_path / "marks"
    marks.mkdir()
    child = ("import os, signal, time, pathlib; m = pathlib.Path(os.environ['MARKS']); "
             "signal.signal(signal.SIGTERM, lambda *a: (m / 'child-got-sigterm').touch()); "
             "(m / 'child.pid').write_text(str(os.getpid())); time.sleep(600)")
    first = ("import os, signal, subprocess, sys, time, pathlib; m = pathlib.Path(os.environ['MARKS']); "
             "signal.signal(signal.SIGTERM, lambda *a: (m / 'first-got-sigterm').touch()); "
             f"subprocess.Popen([sys.executable, '-c', {child!r}]); (m / 'first.pid').write_text(str(os.getpid())); "
             "time.sleep(600)")
    monkeypatch.setenv("MARKS", str(marks))
    prepared = prepared_for(make_spec(tmp_path, name="sigs"))
    prepared.request["AlgorithmSpecification"]["ContainerEntrypoint"] = ["python3", "-c", first]
    backend = LocalBackend()
    backend.submit(prepared)
    wait_until(lambda: (marks / "child.pid").exists() and (marks / "first.pid").exists(), 60,
               "the entrypoint never started its child")
    pids = [int((marks / name).read_text()) for name in ("first.pid", "child.pid")]
    backend.stop(prepared.job_name)
    status = wait_terminal(backend, prepared.job_name, timeout=60)
    assert status.status == "stopped"
    signals = json.loads((orch_home / "jobs" / prepared.job_name / local_layout.STATUS_FILE).read_text())["stop_signals"]
    assert [s["signal"] for s in signals] == ["SIGTERM", "SIGKILL"]
    assert signals[1]["at"] - signals[0]["at"] >= 3
    assert (marks / "first-got-sigterm").exists() and not (marks / "child-got-sigterm").exists()
    assert not any(processes.process_alive(pid) for pid in pids)


def test_max_runtime_stops_the_job(orch_home, tmp_path, fake_train, monkeypatch):
    monkeypatch.setenv("FAKE_TRAIN_SLEEP", "300")
    prepared = prepared_for(make_spec(tmp_path))
    prepared.request["StoppingCondition"]["MaxRuntimeInSeconds"] = 2  # a minute is the spec's floor
    backend = LocalBackend()
    backend.submit(prepared)
    status = wait_terminal(backend, prepared.job_name, timeout=90)
    assert status.status == "stopped" and status.secondary == "MaxRuntimeExceeded"
    assert "MaxRuntimeExceeded" in status.failure_reason


def test_logs_follow_streams_until_the_job_ends(orch_home, tmp_path, fake_train, monkeypatch):
    monkeypatch.setenv("FAKE_TRAIN_SLEEP", "2")
    prepared = prepared_for(make_spec(tmp_path))
    backend = LocalBackend(poll_seconds=0.1)
    backend.submit(prepared)
    lines = list(backend.logs(prepared.job_name, follow=True))
    assert backend.status(prepared.job_name).terminal
    text = "\n".join(lines)
    assert text.index("fake-train rank 0/1 started") < text.index("fake-train rank 0 done")
    assert lines[-1].startswith("[local] Job completed")


def test_file_data_channel_is_downloaded_into_every_host(orch_home, tmp_path, fake_train):
    data = tmp_path / "images"
    for cls in ("cat", "dog"):
        (data / cls).mkdir(parents=True)
        (data / cls / "0.png").write_bytes(cls.encode())
    prepared = prepared_for(make_spec(tmp_path, count=2, source=f"file://{data}"))
    backend = LocalBackend()
    backend.submit(prepared)
    assert wait_terminal(backend, prepared.job_name).status == "completed"
    for host in ("algo-1", "algo-2"):
        train = orch_home / "jobs" / prepared.job_name / host / "input/data/train"
        assert (train / "cat" / "0.png").read_bytes() == b"cat"
        assert (train / "dog" / "0.png").read_bytes() == b"dog"
        config = json.loads((orch_home / "jobs" / prepared.job_name / host / "input/config/inputdataconfig.json").read_text())
        assert list(config) == ["code", "train"]  # the source archive is a channel too
        code = orch_home / "jobs" / prepared.job_name / host / "input/data/code"
        assert [p.name for p in code.iterdir()] == ["sourcedir.tar.gz"]


def test_s3_data_channel_is_downloaded(orch_home, tmp_path, fake_train, moto_server):
    import boto3

    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="data-bucket")
    s3.put_object(Bucket="data-bucket", Key="imgs/cat/1.png", Body=b"meow")
    prepared = prepared_for(make_spec(tmp_path, source="s3://data-bucket/imgs"))
    backend = LocalBackend(s3_client=s3)
    backend.submit(prepared)
    assert wait_terminal(backend, prepared.job_name).status == "completed"
    root = orch_home / "jobs" / prepared.job_name / "algo-1"
    assert (root / "input/data/train/cat/1.png").read_bytes() == b"meow"
    rank0 = json.loads((root / contract.OUTPUT_DATA_DIR / "ranks" / "rank-0.json").read_text())
    assert rank0["env"]["SM_CHANNEL_TRAIN"] == str(root / "input/data/train")


def test_an_output_bucket_that_does_not_exist_fails_the_submit_cleanly(orch_home, tmp_path, fake_train, moto_server):
    # QA: a local spec with an s3:// output.uri whose bucket is missing gave a 65-line
    # traceback, and the ledger row stayed "submitting" without the reason.
    import boto3

    path = make_spec(tmp_path)
    path.write_text(path.read_text() + "output: {uri: s3://no-such-bucket/jobs}\n")
    prepared = prepared_for(path)
    backend = LocalBackend(s3_client=boto3.client("s3", region_name="us-east-1"))
    with pytest.raises(BackendError) as info:
        backend.submit(prepared)
    assert "could not upload the job's source to s3://no-such-bucket/" in info.value.message
    assert "bucket exists" in info.value.hint
    entry = Ledger().get(prepared.job_name)
    assert entry.status == "planned" and "no-such-bucket" in entry.detail
    assert not (orch_home / "jobs" / prepared.job_name).exists()


def test_empty_data_channel_is_refused_at_submit(orch_home, tmp_path, fake_train):
    empty = tmp_path / "empty"
    empty.mkdir()
    prepared = prepared_for(make_spec(tmp_path, source=f"file://{empty}"))
    with pytest.raises(InputError, match="no objects under"):
        LocalBackend().submit(prepared)
    assert not (orch_home / "jobs" / prepared.job_name).exists()
    assert Ledger().get(prepared.job_name) is None  # nothing left "submitting"


@pytest.mark.parametrize("field_name", ["data.source", "output.uri", "compile_cache.uri"])
@pytest.mark.parametrize("where", ["the file", "below the file"])
def test_a_file_where_a_folder_is_expected_is_exit_2_naming_the_field(orch_home, tmp_path, monkeypatch, capsys,
                                                                      field_name, where):
    # QA: data.source file:///etc/passwd failed at submit with exit 1 and "check your credentials
    # and the network"; a compile cache or output URI naming a file was accepted and failed in the job.
    from cli_harness import run_cli

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    uri = f"file://{blocker}" + ("" if where == "the file" else "/below")
    path = make_spec(tmp_path)
    text = path.read_text()
    if field_name == "data.source":
        text = text.replace("source: synthetic", f"source: {uri}")
    elif field_name == "output.uri":
        text += f"output: {{uri: {uri}}}\n"
    else:
        text = text.replace('compile_cache: {mode: "off"}', f"compile_cache: {{mode: tarball, uri: {uri}}}")
    path.write_text(text)
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(path))
    assert code == 2 and out == "" and "Traceback" not in err, err
    what = (f"{blocker} is a file, not a folder" if where == "the file" else
            f"{blocker}, a folder on its way, is a file")
    assert f"error: {field_name} {uri}: {what}\n" in err
    assert f"hint: make {field_name} a folder" in err and "credentials" not in err
    assert not (orch_home / "jobs").exists() or not list((orch_home / "jobs").iterdir())
    assert blocker.read_text() == "not a folder"


def test_a_job_laid_out_before_its_supervisor_wrote_its_pid_is_starting_not_orphaned(orch_home, tmp_path,
                                                                                       fake_train, monkeypatch):
    # QA: a sweep runner stopped (SIGTERM) inside submit, after the layout and before the
    # supervisor's pid file, left a job that status() marked failed at once; the supervisor
    # then started and trained it anyway, and the sweep's retry ran the trial a second time.
    prepared = prepared_for(make_spec(tmp_path))
    clock = {"now": 1_000_000.0}
    backend = LocalBackend(clock=lambda: clock["now"])
    job_dir = backend.job_dir(prepared.job_name)
    job_dir.mkdir(parents=True)
    local_layout.lay_out(prepared, job_dir, ledger=backend.ledger.path, python=backend.python, now=clock["now"])
    # (what submit does before it starts the supervisor)
    assert backend.status(prepared.job_name).status == "pending"
    clock["now"] += local_layout.START_GRACE_S + 1
    orphaned = backend.status(prepared.job_name)
    assert orphaned.status == "failed" and orphaned.failure_reason.startswith("InternalServerError")
    # A supervisor that starts only now finds the job ended and runs nothing.
    from orchestrator.backends.local import supervisor as local_runner

    assert local_runner.Supervisor(job_dir).run() == 1
    assert json.loads((job_dir / local_layout.STATUS_FILE).read_text())["state"] == "failed"
    assert not (job_dir / "algo-1" / contract.OUTPUT_DATA_DIR / "ranks").exists()
    assert "nothing run" in (job_dir / local_layout.LOG_DIR / local_layout.MERGED_LOG).read_text()


def test_a_vanished_supervisor_makes_the_job_failed(orch_home, tmp_path, fake_train, monkeypatch):
    import signal

    backend, prepared, _, data = start_sleeping_job(orch_home, tmp_path, monkeypatch)
    host_pid = data["hosts"]["algo-1"]["pid"]
    # launch.py, torchrun and the training process, which torchrun starts in its own session.
    tree = processes.process_tree(host_pid)
    workers = [pid for pid in tree if os.getsid(pid) == pid and pid != host_pid]
    assert len(tree) >= 3 and workers, tree
    os.kill(data["pid"], signal.SIGKILL)
    wait_until(lambda: not processes.process_alive(data["pid"]), 10, "the supervisor outlived SIGKILL", 0.1)
    status = backend.status(prepared.job_name)
    assert status.status == "failed" and "supervisor" in status.failure_reason
    from orchestrator import sweep as sweeps

    assert sweeps.failure_kind(status.failure_reason) == "internal"  # a sweep retries it as -rN
    for pid in tree:
        wait_until(lambda pid=pid: not processes.process_alive(pid), 10, f"process {pid} outlived its supervisor", 0.1)


def test_unknown_job_is_an_input_error(orch_home):
    from orchestrator.backends import UnknownJob

    backend = LocalBackend()
    # UnknownJob, an InputError: the CLI adds what the ledger knows of the name.
    with pytest.raises(UnknownJob, match="no local job named nope"):
        backend.status("nope")
    with pytest.raises(UnknownJob):
        list(backend.logs("nope"))
    with pytest.raises(UnknownJob):
        backend.stop("nope")


@pytest.mark.parametrize("content, why", [
    ("{bad", "not JSON (Expecting property name enclosed in double quotes"),
    ("[]", "a JSON array, not an object"),
    ("", "it is empty"),
    ("null", "a JSON null, not an object"),
    ('{"secondary": "Training"}', "state None is none of pending, starting"),
    ('{"state": "running", "started": "noon"}', "started 'noon' is not a time in seconds"),
    ('{"state": "running", "pid": "12a"}', "pid '12a' is not a process id"),
])
def test_a_damaged_status_file_is_an_input_error_naming_it(orch_home, content, why):
    from orchestrator.backends import UnknownJob

    folder = orch_home / "jobs" / "broken-1"
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(content)
    backend = LocalBackend()
    for name, call in (("status", backend.status), ("logs", lambda job: list(backend.logs(job))),
                       ("stop", backend.stop)):
        with pytest.raises(InputError) as info:
            call("broken-1")
        assert not isinstance(info.value, UnknownJob)  # the name is right: the file is not
        assert info.value.message.startswith(f"{folder / 'status.json'}: the local job's status file is damaged: {why}")
        assert f"(rm -r {folder}) to forget it" in info.value.hint and "--rerun" in info.value.hint
        if name == "stop":
            # QA (issue 14): the stop that found nothing running told the user to run `stop`.
            assert "nothing of it runs: no live supervisor is recorded in" in info.value.hint
            assert "orchestrator stop" not in info.value.hint
        else:
            assert "`python -m orchestrator stop broken-1` stops it" in info.value.hint
    assert (folder / "status.json").read_text() == content  # left for the user to look at
    assert sorted(p.name for p in folder.iterdir()) == ["status.json"]  # stop wrote no stop request


def test_a_running_job_with_a_damaged_status_file_can_still_be_stopped(orch_home, tmp_path, fake_train,
                                                                         monkeypatch):
    # QA: stop of a running job whose status.json was damaged was exit 2, with no way to stop it.
    backend, prepared, job_dir, data = start_sleeping_job(orch_home, tmp_path, monkeypatch)
    (job_dir / local_layout.STATUS_FILE).write_text("{}")
    backend.stop(prepared.job_name)
    wait_until(lambda: not processes.process_alive(data["pid"]), 60, "the supervisor did not stop")
    final = json.loads((job_dir / local_layout.STATUS_FILE).read_text())
    assert final["state"] == "stopped"  # the supervisor wrote a whole status as it stopped


@pytest.mark.parametrize("damage", ["not JSON", "deleted", "a folder"])
def test_cli_stop_of_a_running_job_with_a_damaged_status_file_works_from_its_pid_file(
        orch_home, tmp_path, fake_train, monkeypatch, capsys, damage):
    # QA (issue 14): `stop` exited 2 and its hint said to run `stop`.
    from cli_harness import run_cli

    backend, prepared, job_dir, data = start_sleeping_job(orch_home, tmp_path, monkeypatch)
    status_file = job_dir / local_layout.STATUS_FILE
    if damage == "not JSON":
        status_file.write_text("{bad")
    elif damage == "deleted":
        status_file.unlink()
    else:
        status_file.unlink()
        status_file.mkdir()
    code, out, err = run_cli(monkeypatch, capsys, "stop", prepared.job_name)
    assert code == 0, err
    assert out == f"{prepared.job_name}: stop requested (its supervisor was signalled; its status file cannot tell more)\n"
    assert err.startswith(f"note: {status_file}: the local job's status file is damaged")
    wait_until(lambda: not processes.process_alive(data["pid"]), 60, "the supervisor did not stop")
    for host in data["hosts"].values():
        assert not processes.process_alive(host["pid"])


def test_stop_never_signals_a_process_that_took_the_supervisors_pid(orch_home, tmp_path):
    # The pid file outlived its supervisor and the pid now belongs to an unrelated process.
    import subprocess
    import sys

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        folder = orch_home / "jobs" / "broken-2"
        folder.mkdir(parents=True)
        (folder / "status.json").write_text("{bad")
        (folder / local_layout.PID_FILE).write_text(f"{other.pid}\n")
        with pytest.raises(InputError) as info:
            LocalBackend().stop("broken-2")
        assert "nothing of it runs" in info.value.hint
        assert other.poll() is None  # not signalled
        assert not (folder / local_layout.STOP_FILE).exists()
    finally:
        other.kill()
        other.wait()


def test_job_name_of_another_spec_is_refused(orch_home, tmp_path, fake_train):
    prepared = prepared_for(make_spec(tmp_path))
    Ledger().record_intent(prepared.job_name, backend="local", region="us-east-1", spec_hash="0" * 64, request={})
    with pytest.raises(InputError, match="already in the ledger for another spec"):
        LocalBackend().submit(prepared)


# --- the real trainer, end to end ------------------------------------------------------------


def _cli(*args: str, env: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_cli_submit_wait_status_logs_with_real_training(orch_home, tmp_path):
    path = make_spec(tmp_path, name="e2e", steps=3)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ORCHESTRATOR_TRAIN_MODULE", None)
    done = _cli("submit", str(path), "--wait", "--interval", "1", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    job = names.job_name(spec.load(path))
    assert job in done.stdout

    status = _cli("status", job, env=env, timeout=patience(60))
    assert status.returncode == 0, status.stderr
    assert "completed" in status.stdout
    logs = _cli("logs", job, env=env, timeout=patience(60))
    assert logs.returncode == 0, logs.stderr
    assert contract.SUMMARY_TAG in logs.stdout and "[algo-1]" in logs.stdout

    prepared = prepared_for(path)
    results = results_of(prepared)
    assert results["status"] == "completed" and results["steps_done"] == 3
    assert results["step_time_s"]["n"] == 2 and results["final_loss"] is not None
    assert results["flops_per_sample"] > 0
    out = f"{prepared.request['OutputDataConfig']['S3OutputPath']}/{job}/output"
    assert "model.pt" in store_tar_names(f"{out}/model.tar.gz")
    assert "results.json" in store_tar_names(f"{out}/output.tar.gz")


@pytest.mark.slow
def test_two_hosts_train_to_the_end_over_gloo_on_loopback(orch_home, tmp_path, monkeypatch):
    monkeypatch.delenv("ORCHESTRATOR_TRAIN_MODULE", raising=False)
    prepared = prepared_for(make_spec(tmp_path, name="twohost", count=2, steps=3))
    backend = LocalBackend()
    backend.submit(prepared)
    status = wait_terminal(backend, prepared.job_name, timeout=240)
    assert status.status == "completed", status.failure_reason
    results = results_of(prepared)
    assert results["world_size"] == 2 and results["instance"]["count"] == 2
    assert results["steps_done"] == 3 and results["global_batch"] == 8
    job_dir = orch_home / "jobs" / prepared.job_name
    second = json.loads((job_dir / "algo-2" / contract.OUTPUT_DATA_DIR / "results.json").read_text())
    assert second["status"] == "completed" and second["world_size"] == 2


def test_a_supervisor_finding_a_damaged_status_file_leaves_a_whole_failed_one(tmp_path):
    from orchestrator.backends.local import supervisor as local_runner

    job_dir = tmp_path / "job"
    (job_dir / local_layout.LOG_DIR).mkdir(parents=True)
    (job_dir / local_layout.STATUS_FILE).write_text("{damaged")
    assert local_runner.main([str(job_dir)]) == 1
    status = json.loads((job_dir / local_layout.STATUS_FILE).read_text())
    assert status["state"] == "failed" and "supervisor crashed" in status["failure_reason"]


@pytest.mark.timeout(60)
def test_a_status_file_or_log_that_is_a_fifo_is_never_opened(orch_home):
    import os

    folder = orch_home / "jobs" / "piped-1"
    (folder / "logs").mkdir(parents=True)
    os.mkfifo(folder / "status.json")  # opening it to read would block for ever
    backend = LocalBackend()
    with pytest.raises(InputError, match="status file is damaged: is a FIFO \\(named pipe\\), not a regular file"):
        backend.status("piped-1")
    (folder / "status.json").unlink()
    (folder / "status.json").write_text('{"state": "completed"}')
    os.mkfifo(folder / "logs" / "all.log")
    with pytest.raises(InputError, match="the job's log is a FIFO \\(named pipe\\), not a file; not read"):
        list(backend.logs("piped-1"))


@pytest.mark.parametrize("follow", [False, True])
def test_cli_logs_of_a_job_with_a_damaged_status_file_shows_its_log_with_a_warning(
        orch_home, tmp_path, fake_train, monkeypatch, capsys, follow):
    """Issue 22 (smaller findings): `logs` refused an existing log because status.json was damaged."""
    from cli_harness import run_cli

    monkeypatch.delenv("FAKE_TRAIN_SLEEP", raising=False)
    prepared = prepared_for(make_spec(tmp_path))
    backend = LocalBackend()
    backend.submit(prepared)
    wait_terminal(backend, prepared.job_name)
    job_dir = orch_home / "jobs" / prepared.job_name
    log = (job_dir / local_layout.LOG_DIR / local_layout.MERGED_LOG).read_text()
    status_file = job_dir / local_layout.STATUS_FILE
    status_file.write_text("{bad")
    code, out, err = run_cli(monkeypatch, capsys, "logs", prepared.job_name, *(["-f"] if follow else []))
    assert code == 0, err
    assert out == log and "fake-train rank 0/1 started" in out
    assert err.startswith(f"warning: {status_file}: the local job's status file is damaged: not JSON")
    assert f"its log {job_dir / 'logs' / 'all.log'} is shown as it is" in err
    assert ("-f does not wait for more" in err) == follow
    # Without a log there is nothing to show: the damaged file is the error, exit 2.
    (job_dir / local_layout.LOG_DIR / local_layout.MERGED_LOG).unlink()
    code, _, err = run_cli(monkeypatch, capsys, "logs", prepared.job_name)
    assert code == 2 and "status file is damaged" in err


def test_a_file_named_jobs_in_the_home_is_said_to_be_a_file_where_a_folder_belongs(orch_home, tmp_path, monkeypatch,
                                                                                    capsys):
    """Issue 22 (smaller findings): it read as a damaged status.json (and submit as a bug)."""
    from cli_harness import run_cli

    path = make_spec(tmp_path)
    name = prepared_for(path).job_name
    (orch_home / "jobs").write_text("")
    said = f"error: {orch_home / 'jobs'} is a file, not a folder: the orchestrator keeps its jobs there"
    for command in (["submit", str(path)], ["status", name], ["logs", name], ["stop", name]):
        code, _, err = run_cli(monkeypatch, capsys, *command)
        assert code == 2, (command, err)
        assert said in err and "status file" not in err and "internal error" not in err, (command, err)
    assert (orch_home / "jobs").is_file()  # left as it was


def test_an_unreadable_file_in_a_data_folder_is_refused_before_anything_is_copied(orch_home, tmp_path, fake_train,
                                                                                  monkeypatch):
    # Issue 32: one unreadable file ended the job after 2.1 GB were copied, as "InternalServerError:
    # local supervisor: StorageError ... Permission denied", and the copy stayed behind.
    import os

    data = tmp_path / "data"
    (data / "cat").mkdir(parents=True)
    (data / "cat" / "1.png").write_bytes(b"meow")
    secret = data / "cat" / "2.png"
    secret.write_bytes(b"purr")
    prepared = prepared_for(make_spec(tmp_path, source=f"file://{data}"))
    real_open = os.open

    def refusing(path, flags, *args, **kwargs):  # what chmod 000 does to a user who is not root
        if str(path) == str(secret):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)  # the tests run as root here, whom chmod 000 does not stop
    with pytest.raises(InputError) as info:
        LocalBackend().submit(prepared)
    monkeypatch.undo()
    assert f"data channel 'train': {secret} cannot be read: Permission denied; nothing was copied" in info.value.message
    assert "chmod u+r" in info.value.hint
    assert not (orch_home / "jobs" / prepared.job_name).exists()
    assert Ledger().get(prepared.job_name) is None


def sparse_file(path: Path, size: int = 64 * 2**20) -> Path:
    """A `size`-byte file with 4 KiB of data at its start and in its middle, holes elsewhere;
    skips the test where the file system keeps no holes."""
    with open(path, "wb") as out:
        out.write(b"\x01" * 4096)
        out.seek(size // 2)
        out.write(b"\x02" * 4096)
        out.truncate(size)
    if path.stat().st_blocks * 512 >= size:
        pytest.skip(f"the file system of {path} keeps no holes")
    return path


def test_a_sparse_data_file_stays_sparse_in_every_host(orch_home, tmp_path, fake_train):
    # Issue 32 (14): a 2 GB sparse file took 2 GB of disk once copied into the channel.
    data = tmp_path / "images"
    (data / "cat").mkdir(parents=True)
    (data / "cat" / "0.png").write_bytes(b"cat")
    big = sparse_file(data / "cat" / "big.bin")
    prepared = prepared_for(make_spec(tmp_path, count=2, source=f"file://{data}"))
    backend = LocalBackend()
    backend.submit(prepared)
    assert wait_terminal(backend, prepared.job_name).status == "completed"
    for host in ("algo-1", "algo-2"):  # algo-1 from the store (get_file), algo-2 from algo-1's copy
        copy = orch_home / "jobs" / prepared.job_name / host / "input/data/train/cat/big.bin"
        assert copy.stat().st_size == big.stat().st_size and copy.read_bytes() == big.read_bytes()
        assert copy.stat().st_blocks * 512 <= 4 * big.stat().st_blocks * 512 < 2**20, host  # not 64 MiB


def test_a_copy_that_fails_half_way_keeps_nothing_and_blames_the_users_file(orch_home, tmp_path, fake_train,
                                                                            monkeypatch):
    # Issue 32 (14): a file that could not be read after others were copied ended the job as
    # "InternalServerError: local supervisor: StorageError ... Permission denied", the copies
    # left behind. A file made unreadable after submit's check fails the same way: here.
    import signal

    from orchestrator.backends.local import supervisor as local_runner

    data = tmp_path / "data"
    (data / "cat").mkdir(parents=True)
    for i in range(4):
        (data / "cat" / f"{i}.png").write_bytes(b"meow" * 1000)
    unreadable = data / "cat" / "2.png"  # after 0.png and 1.png were copied
    prepared = prepared_for(make_spec(tmp_path, count=2, source=f"file://{data}"))
    monkeypatch.setattr(LocalBackend, "_start_supervisor", lambda self, job_dir: None)  # run below, in this process
    LocalBackend().submit(prepared)  # passes its check: every file is readable now
    job_dir = orch_home / "jobs" / prepared.job_name
    real_open = os.open
    opened: list[str] = []

    def refusing(path, flags, *args, **kwargs):  # what chmod 000 does to a user who is not root
        if str(path) == str(unreadable):
            raise PermissionError(13, "Permission denied", str(path))
        if str(path).startswith(str(data)):
            opened.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)  # the tests run as root here, whom chmod 000 does not stop
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # the supervisor's handlers stay out of pytest
    assert local_runner.Supervisor(job_dir).run() == 0
    monkeypatch.setattr(os, "open", real_open)
    assert opened == [str(data / "cat" / "0.png"), str(data / "cat" / "1.png")]  # two copied, then the third failed
    status = LocalBackend().status(prepared.job_name)
    assert status.status == "failed"
    assert status.failure_reason.startswith(f"ClientError: data channel 'train': {unreadable} cannot be read: "
                                            "Permission denied; nothing copied was kept"), status.failure_reason
    assert "InternalServerError" not in status.failure_reason and "chmod u+r" in status.failure_reason
    for host in ("algo-1", "algo-2"):  # neither channel's copy stays, in either host
        assert list((job_dir / host / "input" / "data").iterdir()) == []
    assert sorted(p.name for p in (data / "cat").iterdir()) == ["0.png", "1.png", "2.png", "3.png"]  # untouched
