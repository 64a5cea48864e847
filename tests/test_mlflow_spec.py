"""MLflow on the laptop side: the `mlflow:` section, what the job file, the container's
environment, the source archive and the SageMaker and Batch requests carry (no server needed)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import botocore.session
import pytest

from orchestrator import aws_contract, request, sourcedir, tracking
from orchestrator import spec as specs
from orchestrator.errors import SpecError
from orchestrator.spec.models import MLFLOW_ARN_PATTERN

ROOT = Path(__file__).resolve().parents[1]
ARN = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-app/app-ABCDEF123456"
SAGEMAKER = """\
name: ml-test
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {type: ml.trn1.2xlarge}
image: {neuron_sdk: "2.30.0"}
compile_cache: {uri: s3://orchestrator-example-bucket/cc}
output: {uri: s3://orchestrator-example-bucket/jobs}
max_run_minutes: 60
"""
BATCH = """\
name: ml-batch
backend: batch
region: us-east-1
instance: {type: inf2.xlarge}
image: {neuron_sdk: "2.30.0"}
compile_cache: {uri: s3://orchestrator-example-bucket/cc}
output: {uri: s3://orchestrator-example-bucket/jobs}
batch: {job_queue: "arn:aws:batch:us-east-1:123456789012:job-queue/q", job_definition: "arn:aws:batch:us-east-1:123456789012:job-definition/d:1"}
max_run_minutes: 60
"""


@pytest.fixture(autouse=True)
def _home(orch_home):
    return orch_home


def _archive_requirements(prepared) -> str:
    with tarfile.open(fileobj=io.BytesIO(prepared.archive), mode="r:gz") as tar:
        return tar.extractfile("requirements.txt").read().decode()


def test_the_arn_pattern_is_botocores():
    model = botocore.session.get_session().get_service_model("sagemaker")
    shape = model.operation_model("CreateTrainingJob").input_shape.members["MlflowConfig"]
    assert shape.members["MlflowResourceArn"].metadata["pattern"] == MLFLOW_ARN_PATTERN
    assert set(shape.members) == {"MlflowResourceArn", "MlflowExperimentName", "MlflowRunName"}


def test_the_pinned_client_versions_are_the_locks():
    lock = (ROOT / "uv.lock").read_text()
    for name, version in (("mlflow-skinny", tracking.MLFLOW_SKINNY_VERSION),
                          ("sagemaker-mlflow", tracking.SAGEMAKER_MLFLOW_VERSION)):
        found = re.search(rf'\n\[\[package\]\]\nname = "{name}"\nversion = "([^"]+)"', lock)
        assert found is not None and found.group(1) == version, name


def test_a_sagemaker_job_with_an_arn_sends_mlflow_config_that_aws_accepts():
    s = specs.loads(SAGEMAKER + f"mlflow: {{tracking_uri: {ARN}, experiment: vit-sweeps}}\n", "job.yaml")
    prepared = request.prepare(s)
    assert prepared.request["MlflowConfig"] == {"MlflowResourceArn": ARN, "MlflowExperimentName": "vit-sweeps",
                                                "MlflowRunName": prepared.job_name}
    assert aws_contract.violations("sagemaker", "CreateTrainingJob", prepared.request) == []
    assert prepared.job["mlflow"]["arn"] is True and prepared.job["mlflow"]["cost_bound_usd"] > 0
    # The container gets the client and the SigV4 plugin an ARN needs, pinned.
    assert _archive_requirements(prepared).splitlines()[1:] == [
        f"mlflow-skinny=={tracking.MLFLOW_SKINNY_VERSION}", f"sagemaker-mlflow=={tracking.SAGEMAKER_MLFLOW_VERSION}"]


def test_a_url_goes_to_the_container_and_not_to_mlflow_config():
    s = specs.loads(SAGEMAKER + "mlflow: {tracking_uri: 'https://mlflow.example.com/'}\n", "job.yaml")
    prepared = request.prepare(s)
    assert "MlflowConfig" not in prepared.request
    env = prepared.request["Environment"]
    assert env["MLFLOW_TRACKING_URI"] == "https://mlflow.example.com/"
    assert env["MLFLOW_EXPERIMENT_NAME"] == "ml-test" and env["MLFLOW_RUN_NAME"] == prepared.job_name
    assert _archive_requirements(prepared).splitlines()[1:] == [f"mlflow-skinny=={tracking.MLFLOW_SKINNY_VERSION}"]


def test_without_mlflow_nothing_changes():
    s = specs.loads(SAGEMAKER, "job.yaml")
    prepared = request.prepare(s)
    assert "MlflowConfig" not in prepared.request and "mlflow" not in prepared.job
    assert "mlflow" not in prepared.job["spec"]
    assert not any(k.startswith("MLFLOW_") for k in prepared.request["Environment"])
    assert _archive_requirements(prepared) == sourcedir.REQUIREMENTS
    # The identity of a job without mlflow: is what it was before the section existed.
    with_it = specs.loads(SAGEMAKER + "mlflow: {tracking_uri: 'http://127.0.0.1:5000'}\n", "job.yaml")
    assert specs.spec_hash(with_it) != specs.spec_hash(s)


def test_a_batch_job_logs_to_a_url_through_its_environment():
    s = specs.loads(BATCH + "mlflow: {tracking_uri: 'http://127.0.0.1:5000', experiment: inf2}\n", "job.yaml")
    prepared = request.prepare(s)
    env = {e["name"]: e["value"] for e in prepared.request["containerOverrides"]["environment"]}
    assert env["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:5000" and env["MLFLOW_EXPERIMENT_NAME"] == "inf2"


@pytest.mark.parametrize("text, field, words", [
    (SAGEMAKER + f"mlflow: {{tracking_uri: {ARN.replace('us-east-1', 'eu-west-1')}}}\n", "mlflow.tracking_uri",
     "region 'eu-west-1', the job in 'us-east-1'"),
    (BATCH + f"mlflow: {{tracking_uri: {ARN}}}\n", "mlflow.tracking_uri", "sagemaker-mlflow plugin's SigV4"),
    (SAGEMAKER + "mlflow: {tracking_uri: 'ftp://x'}\n", "mlflow.tracking_uri", "http(s):// URL"),
    (SAGEMAKER + "mlflow: {tracking_uri: 'https://me:secret@mlflow.example.com'}\n", "mlflow.tracking_uri",
     "MLFLOW_TRACKING_PASSWORD"),
    (SAGEMAKER + "mlflow: {tracking_uri: 'arn:aws:sagemaker:us-east-1:123:mlflow-app/x'}\n", "mlflow.tracking_uri",
     "not usable"),
    (SAGEMAKER + "mlflow: {tracking_uri: 'http://h', experimnet: x}\n", "mlflow.experimnet", "unknown field"),
    (SAGEMAKER + "mlflow: {experiment: x}\n", "mlflow.tracking_uri", "required"),
])
def test_bad_mlflow_sections_are_located_errors(text, field, words):
    with pytest.raises(SpecError) as caught:
        specs.loads(text, "job.yaml")
    problems = caught.value.problems
    assert [p.path for p in problems] == [field], problems
    line = text.splitlines().index(next(x for x in text.splitlines() if x.startswith("mlflow:"))) + 1
    assert problems[0].line == line
    assert words in problems[0].message + (caught.value.hint or "")


def test_validate_exits_2_at_the_mlflow_line(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(SAGEMAKER + f"mlflow: {{tracking_uri: {ARN.replace('us-east-1', 'eu-west-1')}}}\n")
    run = subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(path)], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 2, run.stderr
    assert f"{path}:9:" in run.stderr and "mlflow.tracking_uri" in run.stderr


def test_a_sweeps_trials_log_to_the_sweeps_experiment_and_mlflow_cannot_vary(tmp_path):
    from orchestrator import sweep as sweeps

    (tmp_path / "base.yaml").write_text(SAGEMAKER + "mlflow: {tracking_uri: 'http://127.0.0.1:5000'}\n")
    (tmp_path / "sweep.yaml").write_text("sweep: lr-scan\nbase: base.yaml\ngrid:\n  training.optimizer.lr: [1.0e-4, 1.0e-3]\n")
    plan = sweeps.plan(specs.load_sweep(tmp_path / "sweep.yaml"))
    sections = [trial.prepared.job["mlflow"] for trial in plan.trials]
    assert {s["experiment"] for s in sections} == {"lr-scan"}
    assert {s["sweep"] for s in sections} == {plan.sweep_id}
    assert len({s["trial"] for s in sections}) == 2 and all(s["run_name"].startswith("lr-scan") for s in sections)
    (tmp_path / "vary.yaml").write_text("sweep: x\nbase: base.yaml\ngrid:\n  mlflow: [null]\n")
    with pytest.raises(SpecError) as caught:
        specs.load_sweep(tmp_path / "vary.yaml")
    assert "cannot vary in a sweep" in caught.value.problems[0].message
    json.dumps(sections)  # the job file's object is plain JSON


def test_infra_policy_prints_the_execution_roles_mlflow_grant_from_the_template():
    from orchestrator import infra

    run = subprocess.run([sys.executable, "-m", "orchestrator", "infra", "policy", "--mlflow", ARN],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    (statement,) = document["Statement"]
    assert statement["Resource"] == ARN and "sagemaker-mlflow:LogBatch" in statement["Action"]
    assert all(action.startswith("sagemaker-mlflow:") for action in statement["Action"])
    template = infra.load_template()
    # The stack adds the same grant, only when its MlflowResourceArn parameter is set.
    assert template["Resources"]["ExecutionRoleMlflowPolicy"]["Condition"] == "HasMlflow"
    assert template["Parameters"]["MlflowResourceArn"]["Default"] == ""
    assert re.fullmatch(template["Parameters"]["MlflowResourceArn"]["AllowedPattern"], ARN)
    bad = subprocess.run([sys.executable, "-m", "orchestrator", "infra", "policy", "--mlflow", "http://x"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "not a SageMaker MLflow App or tracking server ARN" in bad.stderr
