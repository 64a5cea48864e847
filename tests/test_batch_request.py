"""The Batch SubmitJob request of a batch spec: valid per botocore's batch model, true to the
spec (queue, job definition, retries, timeout, tags, the whole instance), and a bootstrap
command that the training image's start script turns back into the script it carries."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import botocore.session
import pytest
from botocore.validate import ParamValidator
from cli_harness import run_cli as _cli
from job_waits import patience

from entrypoints.launcher import bootstrap
from entrypoints.shared import contract
from orchestrator import request, spec

BATCH = """\
name: batch-req
backend: batch
region: us-east-1
instance: {type: inf2.xlarge}
data: {source: synthetic, num_workers: 1}
compile_cache: {uri: s3://orchestrator-example-bucket/cc}
output: {uri: s3://orchestrator-example-bucket/jobs}
max_run_minutes: 60
tags: {team: vision}
"""
# The else branch of the image's ENTRYPOINT script, as aws-neuron/deep-learning-containers
# common/start_with_right_hostname.sh has it (run as `bash -m start_with_right_hostname.sh`).
START_SCRIPT = 'if [[ "$1" = "train" ]]; then\n  exit 99\nelse\n  eval "$@"\nfi\n'


@pytest.fixture(autouse=True)
def _isolated(orch_home):
    return orch_home


def _prepared(**overrides):
    loaded = spec.loads(BATCH, "job.yaml")
    return request.prepare(spec.with_overrides(loaded, overrides) if overrides else loaded)


def _env(req: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in req["containerOverrides"]["environment"]}


def test_the_request_is_valid_per_botocores_batch_model():
    model = botocore.session.get_session().get_service_model("batch")
    for overrides in ({}, {"instance.type": "inf2.48xlarge", "data.num_workers": 1}, {"instance.spot": True,
                                                                                       "max_retry_attempts": 3}):
        report = ParamValidator().validate(_prepared(**overrides).request,
                                           model.operation_model("SubmitJob").input_shape)
        assert not report.has_errors(), report.generate_report()


def test_queue_and_job_definition_follow_the_type_and_stack():
    req = _prepared().request
    assert (req["jobQueue"], req["jobDefinition"]) == ("orchestrator-inf2-xlarge", "orchestrator-neuron-1chip")
    big = _prepared(**{"instance.type": "inf2.24xlarge", "instance.spot": True, "batch.stack": "lab"},
                    max_retry_attempts=1).request
    assert (big["jobQueue"], big["jobDefinition"]) == ("lab-inf2-24xlarge-spot", "lab-neuron-6chip")
    own = _prepared(**{"batch.job_queue": "my-queue", "batch.job_definition": "my-def:3"}).request
    assert (own["jobQueue"], own["jobDefinition"]) == ("my-queue", "my-def:3")


def test_retries_only_when_the_host_went_away_and_the_timeout_is_per_attempt():
    req = _prepared(max_retry_attempts=2, max_run_minutes=90).request
    assert req["retryStrategy"] == {"attempts": 3, "evaluateOnExit": [
        {"onStatusReason": "Host EC2*", "action": "RETRY"}, {"onReason": "*", "action": "EXIT"}]}
    assert req["timeout"] == {"attemptDurationSeconds": 5400}


def test_tags_are_the_jobs_and_propagate_to_the_task():
    prepared = _prepared()
    req = prepared.request
    assert req["tags"]["team"] == "vision" and req["tags"]["orchestrator:job"] == prepared.job_name
    assert req["jobName"] == prepared.job_name and req["propagateTags"] is True


def test_the_job_takes_the_whole_instance():
    reqs = _prepared(**{"instance.type": "inf2.8xlarge"}).request["containerOverrides"]["resourceRequirements"]
    assert reqs == [{"type": "VCPU", "value": "32"}, {"type": "MEMORY", "value": str(int(128 * 1024 * 0.9))}]


def test_the_environment_carries_the_contract_and_the_archive():
    prepared = _prepared()
    env = _env(prepared.request)
    assert env[bootstrap.CODE_URI_ENV] == prepared.source_uri
    assert json.loads(env["SM_HOSTS"]) == ["algo-1"] and env["SM_CURRENT_HOST"] == "algo-1"
    assert (env["SM_NUM_NEURONS"], env["SM_NUM_CPUS"]) == ("2", "4")
    assert env["SM_MODEL_DIR"] == "/opt/ml/model" and env["SM_CHANNELS"] == '["code"]'
    assert "--model-type=transformer" in env["NEURON_CC_FLAGS"]
    assert env[contract.MASTER_ADDR_ENV] == "127.0.0.1"  # algo-1 resolves on SageMaker's network only
    assert json.loads(env[bootstrap.HYPERPARAMETERS_ENV])["sagemaker_job_name"] == json.dumps(prepared.job_name)
    for name in contract.SM_VARS:
        if name != "SM_CHECKPOINT_DIR":
            assert name in env, name


def test_the_archive_fetch_takes_the_jobs_region(tmp_path):
    """botocore reads AWS_DEFAULT_REGION only: behind an S3 gateway endpoint a client without a
    region goes to the global endpoint and fails. The request sets AWS_REGION, and the fetch
    gives it to its client (a stand-in boto3 records what the fetch asked for)."""
    import subprocess

    assert _env(_prepared().request)["AWS_REGION"] == "us-east-1"
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "boto3.py").write_text(
        "import json, os\n"
        "class _Client:\n"
        "    def download_file(self, bucket, key, dest):\n"
        "        open(dest, 'w').write(json.dumps([bucket, key]))\n"
        "def client(name, region_name=None):\n"
        "    open(os.environ['SEEN'], 'w').write(json.dumps([name, region_name]))\n"
        "    return _Client()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_REGION", "AWS_DEFAULT_REGION")}
    env.update(PYTHONPATH=str(fake), SEEN=str(tmp_path / "seen.json"), AWS_REGION="eu-west-3",
               SM_RESOURCE_CONFIG="{}", **{bootstrap.CODE_URI_ENV: "s3://bucket/jobs/source/abc/sourcedir.tar.gz",
                                           bootstrap.HYPERPARAMETERS_ENV: "{}", bootstrap.INPUT_DATA_CONFIG_ENV: "{}"})
    # The bootstrap's own lines up to the fetch (the unpack after it needs a real archive).
    lines = bootstrap.script().split("; ")
    upto = "; ".join(lines[:next(i for i, line in enumerate(lines) if line.startswith("python3 -c")) + 1])
    env["SAGEMAKER_BASE_DIR"] = str(tmp_path / "opt-ml")
    done = subprocess.run(["bash", "-c", upto], env=env, capture_output=True, text=True, timeout=patience(60))
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "seen.json").read_text()) == ["s3", "eu-west-3"]
    fetched = tmp_path / "opt-ml" / "input" / "data" / "code" / "sourcedir.tar.gz"
    assert json.loads(fetched.read_text()) == ["bucket", "jobs/source/abc/sourcedir.tar.gz"]


def test_the_request_tells_launch_py_ecs_stop_timeout():
    """ECS sends SIGKILL 30 s after its SIGTERM (StopTask); launch.py would assume SageMaker's
    120 s and give torchrun 60 s, so the request says 30 and torchrun gets 15."""
    from entrypoints.launcher import torchrun

    env = _env(_prepared().request)
    assert env[torchrun.STOP_GRACE_ENV] == "30" and torchrun.STOP_GRACE_S == 120.0
    stop = torchrun.StopSignals(lambda line: None, grace_s=float(env[torchrun.STOP_GRACE_ENV]))
    assert stop.torchrun_deadline_s == 15.0


def test_plan_shows_the_submit_job_request_and_its_cost(tmp_path, monkeypatch, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(BATCH)
    code, out, err = _cli(monkeypatch, capsys, "plan", str(path))
    assert code == 0, err
    assert '"jobQueue": "orchestrator-inf2-xlarge"' in out
    assert "cost: at most" in out + err and "inf2.xlarge at 0.7582 USD/h" in out + err


def _archive(program: str) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        data = program.encode()
        info = tarfile.TarInfo(contract.PROGRAM)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def test_the_image_start_script_runs_the_bootstrap_which_execs_launch_py(tmp_path):
    # launch.py here records where it runs and what it was given, then exits 3: the job's exit
    # code must be launch.py's, and launch.py must be the process the start script became.
    program = ("import json, os, sys\n"
               "json.dump({'argv': sys.argv[1:], 'pid': os.getpid(), 'cwd_files': sorted(os.listdir(os.path.dirname("
               "os.path.abspath(__file__))))}, open(os.environ['OUT'], 'w'))\n"
               "sys.exit(3)\n")
    (tmp_path / "sourcedir.tar.gz").write_bytes(_archive(program))
    (tmp_path / "start_with_right_hostname.sh").write_text(START_SCRIPT)
    base = tmp_path / "opt-ml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SM_")}
    env.update(bootstrap.environment(instance_type="inf2.xlarge", neuron_cores=2, vcpus=4,
                                     hyperparameters={"sagemaker_program": '"launch.py"'},
                                     code_uri=f"file://{tmp_path / 'sourcedir.tar.gz'}", region="us-east-1"))
    env.update(SAGEMAKER_BASE_DIR=str(base), OUT=str(tmp_path / "out.json"))
    proc = subprocess.Popen(["bash", "-m", str(tmp_path / "start_with_right_hostname.sh"), *bootstrap.command()],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = proc.communicate(timeout=patience(60))
    assert proc.returncode == 3, output
    seen = json.loads((tmp_path / "out.json").read_text())
    assert seen["argv"] == ["--container"] and seen["pid"] == proc.pid  # exec'd all the way down
    assert contract.PROGRAM in seen["cwd_files"]
    config = base / "input" / "config"
    assert json.loads((config / "resourceconfig.json").read_text())["hosts"] == ["algo-1"]
    assert json.loads((config / "hyperparameters.json").read_text()) == {"sagemaker_program": '"launch.py"'}
    assert set(json.loads((config / "inputdataconfig.json").read_text())) == {"code"}
    for folder in ("model", "output/data", "checkpoints"):
        assert (base / folder).is_dir()


def test_a_missing_archive_fails_the_job_before_anything_runs(tmp_path):
    env = dict(os.environ, SAGEMAKER_BASE_DIR=str(tmp_path / "b"), SM_RESOURCE_CONFIG="{}",
               **{bootstrap.CODE_URI_ENV: f"file://{tmp_path}/absent.tar.gz", bootstrap.HYPERPARAMETERS_ENV: "{}",
                  bootstrap.INPUT_DATA_CONFIG_ENV: "{}"})
    done = subprocess.run(["bash", "-c", 'eval "$@"', "start", *bootstrap.command()], env=env, capture_output=True,
                          text=True, timeout=patience(60))
    assert done.returncode != 0 and "absent.tar.gz" in done.stderr
    assert not (tmp_path / "b" / "code" / contract.PROGRAM).exists()


def test_the_doctor_refuses_what_batch_cannot_run():
    for overrides, rule in (({"image.neuron_sdk": "2.28.0"}, "N048-batch-image-fixed"),
                            ({"data.source": "s3://orchestrator-example-bucket/imagenet"}, "N049-batch-data-source")):
        loaded = spec.with_overrides(spec.loads(BATCH, "job.yaml"), overrides)
        from orchestrator import doctor

        assert rule in {f.rule for f in doctor.errors(doctor.findings(loaded))}


def test_the_archive_path_in_the_request_is_where_submit_uploads_it():
    prepared = _prepared()
    assert Path(prepared.source_uri).name == contract.SOURCE_ARCHIVE
    assert f"/source/{prepared.archive_sha256[:16]}/" in _env(prepared.request)[bootstrap.CODE_URI_ENV]


def test_a_batch_job_uploads_its_tensorboard_files_where_tensorboard_reads_them(tmp_path):
    # QA: Batch jobs' TensorBoard events never reached the store (a SubmitJob has no
    # TensorBoardOutputConfig, and nothing uploaded them), while `tensorboard` said they would come.
    from entrypoints.launcher import report
    from orchestrator.results import tensorboard as boards

    prepared = _prepared()
    name = prepared.job_name
    # The job file names the place `tensorboard` fetches from: <output.uri>/tensorboard/<job>.
    assert prepared.job["tensorboard_uri"] == f"s3://orchestrator-example-bucket/jobs/{boards.TENSORBOARD_DIR}/{name}"
    sagemaker = request.prepare(spec.loads(BATCH.replace("backend: batch", "backend: sagemaker")
                                           .replace("inf2.xlarge", "ml.trn1.2xlarge")
                                           + "role_arn: arn:aws:iam::123456789012:role/r\n", "job.yaml"))
    assert "tensorboard_uri" not in sagemaker.job  # SageMaker uploads TensorBoardOutputConfig itself
    # launch.py, on node rank 0, puts every event file there at the end.
    out = tmp_path / "opt" / "output"
    (out / "tensorboard" / "sub").mkdir(parents=True)
    (out / "tensorboard" / "events.out.tfevents.1").write_bytes(b"e1")
    (out / "tensorboard" / "sub" / "events.out.tfevents.2").write_bytes(b"e2")
    job = {"tensorboard_uri": f"file://{tmp_path}/store/jobs/tensorboard/{name}"}
    two_hosts = {"SM_OUTPUT_DIR": str(out), "SM_HOSTS": '["algo-1", "algo-2"]'}
    assert report.upload_tensorboard(job, contract.Contract.from_env(two_hosts)) == (2, None)
    board = tmp_path / "store" / "jobs" / "tensorboard" / name
    assert (board / "events.out.tfevents.1").read_bytes() == b"e1"
    assert (board / "sub" / "events.out.tfevents.2").read_bytes() == b"e2"
    # Another node uploads nothing; a store that cannot be written is a warning, not a failure.
    other = contract.Contract.from_env({**two_hosts, "SM_CURRENT_HOST": "algo-2"})
    assert report.upload_tensorboard({"tensorboard_uri": f"file://{tmp_path}/other"}, other) == (0, None)
    assert not (tmp_path / "other").exists()
    (tmp_path / "blocked").write_text("a file where the store's folder would be")
    done, warning = report.upload_tensorboard({"tensorboard_uri": f"file://{tmp_path}/blocked/x"},
                                              contract.Contract.from_env(two_hosts))
    assert done == 0 and warning.startswith(f"TensorBoard files not uploaded to file://{tmp_path}/blocked/x: ")
