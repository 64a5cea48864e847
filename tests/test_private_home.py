"""The home is private (issue 33, item 9): created 0700, the ledger and a local job's request
and plan 0600 whatever the umask; the doctor warns when `environment:` holds what looks like
a secret, since SageMaker shows a job's environment to anyone who may describe it."""

from __future__ import annotations

import os
import stat

import botocore.session
import pytest

from orchestrator import doctor, spec
from orchestrator.ledger import Ledger
from orchestrator.paths import home, home_folder

GOOD = """\
name: secret-test
backend: sagemaker
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {type: ml.trn1.2xlarge, count: 1}
image: {neuron_sdk: "2.30.0"}
training: {runtime: xla, steps: 100}
compile_cache: {uri: s3://orchestrator-example-bucket/cc}
output: {uri: s3://orchestrator-example-bucket/jobs}
max_run_minutes: 60
"""


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def open_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_home_its_folders_and_ledger_are_private(tmp_path, monkeypatch, open_umask):
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path / "a" / "home"))
    made = home()
    assert _mode(made) == 0o700
    assert _mode(home_folder("jobs")) == 0o700
    ledger = Ledger()
    ledger.put_value("x", 1)
    for name in ("ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm"):
        if (made / name).exists():
            assert _mode(made / name) == 0o600, name
    assert _mode(tmp_path / "a") == 0o755  # a folder above it is not the home's to change


def test_an_existing_home_is_left_as_it_is(tmp_path, monkeypatch, open_umask):
    existing = tmp_path / "shared-home"
    existing.mkdir(mode=0o750)
    os.chmod(existing, 0o750)
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(existing))
    assert home() == existing and _mode(existing) == 0o750


def test_a_local_jobs_request_and_plan_are_private(tmp_path, monkeypatch, open_umask):
    from orchestrator.backends.local import layout

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    written = {}

    def fake_write_json(path, value, **options):
        written[os.path.basename(path)] = options.get("mode")

    monkeypatch.setattr(layout, "write_json", fake_write_json)
    monkeypatch.setattr(layout, "host_tree", lambda *a, **k: None)
    monkeypatch.setattr(layout, "host_environment", lambda *a, **k: {})

    class Prepared:
        job_name = "j-1"
        request = {"ResourceConfig": {"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1},
                   "AlgorithmSpecification": {"ContainerEntrypoint": ["python"]},
                   "OutputDataConfig": {"S3OutputPath": "file:///tmp/out"}, "Environment": {"API_TOKEN": "x"}}
        job = {"spec": {"training": {"runtime": "native"}}}

    layout.lay_out(Prepared(), job_dir, ledger=tmp_path / "l.sqlite3", python="python", now=0.0)
    assert _mode(job_dir) == 0o700
    assert written["request.json"] == 0o600 and written["plan.json"] == 0o600


@pytest.mark.parametrize("name", ["HF_TOKEN", "DB_PASSWORD", "WANDB_API_KEY", "MY_SECRET", "aws_secret_access_key"])
def test_the_doctor_warns_of_a_secret_looking_environment_name(orch_home, name):
    loaded = spec.with_overrides(spec.loads(GOOD, "job.yaml"), {f"environment.{name}": "value"})
    [found] = [f for f in doctor.findings(loaded) if f.rule == "N076-secret-in-environment"]
    assert found.severity == "warning" and found.path == f"environment.{name}"
    assert "DescribeTrainingJob" in found.message and "Secrets Manager" in found.fix


@pytest.mark.parametrize("name", ["NEURON_CC_FLAGS", "MONKEY_MODE", "XLA_FLAGS", "KEYBOARD_LAYOUT"])
def test_ordinary_names_raise_no_secret_warning(orch_home, name):
    loaded = spec.with_overrides(spec.loads(GOOD, "job.yaml"), {f"environment.{name}": "value"})
    assert not [f for f in doctor.findings(loaded) if f.rule == "N076-secret-in-environment"]


def test_describe_training_job_does_return_the_environment():
    """What the warning says, from botocore's model of the API."""
    model = botocore.session.get_session().get_service_model("sagemaker")
    assert "Environment" in model.operation_model("DescribeTrainingJob").output_shape.members
