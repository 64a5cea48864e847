"""The container adapts to the instance type SageMaker selected from the preferences
(entrypoints.launcher.selection), and the local backend, told that the first preferences have no
capacity, runs a job as the next one: its resourceconfig.json, status, results.json and
`results` row name that type and its price."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import run_cli

from entrypoints.launcher import environment, selection
from entrypoints.shared import compile_cache, contract
from orchestrator import request, spec
from orchestrator.backends.local import LocalBackend
from orchestrator.backends.local import capacity as local_capacity
from orchestrator.errors import BackendError

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "vit-trn-preferences.yaml"

LOCAL = """\
name: loc-prefs
backend: local
instance:
  preferences:
    - {type: ml.trn2.48xlarge}
    - {type: ml.trn1.32xlarge}
model: {arch: vit_tiny_patch16_224, image_size: 32, patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2,
        num_classes: 10}
training: {runtime: native, steps: 3, warmup_steps: 1, batch_size: 4, precision: fp32, log_every: 1,
           optimizer: {name: adam, lr: 0.001}}
data: {source: synthetic, num_workers: 0}
compile_cache: {mode: "off"}
max_run_minutes: 10
"""


@pytest.fixture(autouse=True)
def _isolated(orch_home):
    return orch_home


def _job(text: str) -> dict:
    return request.prepare(spec.loads(text, "job.yaml")).job


def _reversed_config() -> str:
    """The preferences config as 1 x trn2.48xlarge, else 2 x trn1.32xlarge (counts on both)."""
    text = CONFIG.read_text()
    start, end = text.index("instance:\n"), text.index("image:")
    return (text[:start] + "instance:\n  preferences:\n    - {type: ml.trn2.48xlarge, count: 1}\n"
            "    - {type: ml.trn1.32xlarge, count: 2}\n" + text[end:])


def test_the_selected_type_sets_workers_lnc_and_environment():
    job = _job(CONFIG.read_text())
    adapted = selection.adapt(job, "ml.trn2.48xlarge")
    assert adapted["instance"] == {"type": "ml.trn2.48xlarge", "family": "trn2", "neuron_cores": 128,
                                   "logical_cores": 64, "lnc": 2, "vcpus": 192}
    assert adapted["workers_per_node"] == 64
    assert adapted["selected"]["preference"] == 3 and adapted["selected"]["count"] == 1
    # The first choice's EFA variables (2 hosts of trn1) reached the container through the
    # request; one trn2 host needs none, and needs LNC=2 for runtime and compiler.
    base = {**job["environment"], "PATH": "/usr/bin"}
    ctr = contract.Contract.from_env({"SM_HOSTS": '["algo-1"]', "SM_CURRENT_HOST": "algo-1",
                                      "SM_CURRENT_INSTANCE_TYPE": "ml.trn2.48xlarge"})
    env = environment.runtime_environment(adapted, ctr, base)
    assert "FI_PROVIDER" not in env and env["PATH"] == "/usr/bin"
    assert env["NEURON_LOGICAL_NC_CONFIG"] == "2" and "--lnc=2" in env["NEURON_CC_FLAGS"]
    assert environment.cache_target("xla", adapted, env) == "trn2"


def test_a_later_trn1_choice_loses_the_first_choices_lnc():
    job = _job(_reversed_config())
    assert [r["type"] for r in job["preferences"]] == ["ml.trn2.48xlarge", "ml.trn1.32xlarge"]
    adapted = selection.adapt(job, "ml.trn1.32xlarge")
    ctr = contract.Contract.from_env({"SM_HOSTS": '["algo-1", "algo-2"]', "SM_CURRENT_HOST": "algo-1",
                                      "SM_CURRENT_INSTANCE_TYPE": "ml.trn1.32xlarge"})
    env = environment.runtime_environment(adapted, ctr, dict(job["environment"]))
    assert "NEURON_LOGICAL_NC_CONFIG" not in env and "--lnc" not in env["NEURON_CC_FLAGS"]
    assert env["FI_PROVIDER"] == "efa" and adapted["workers_per_node"] == 32


def test_the_cache_key_follows_the_selected_type():
    job = _job(CONFIG.read_text())
    keys = {}
    for chosen in ("ml.trn1.32xlarge", "ml.trn2.48xlarge"):
        adapted = selection.adapt(job, chosen)
        env = dict(adapted["environment"])
        world = int(adapted["workers_per_node"]) * int(adapted["selected"]["count"])
        keys[chosen] = compile_cache.key_for("xla", environment.cache_target("xla", adapted, env), world, env).digest()
    assert keys["ml.trn1.32xlarge"] != keys["ml.trn2.48xlarge"]


def test_a_job_without_preferences_or_without_a_selected_type_is_unchanged():
    plain = _job((ROOT / "configs" / "vit-trn1-32xlarge.yaml").read_text())
    assert selection.adapt(plain, "ml.trn1.32xlarge") is plain
    job = _job(CONFIG.read_text())
    assert selection.adapt(job, "") is job


def test_a_type_outside_the_preferences_is_an_error():
    with pytest.raises(ValueError, match="none of the job's instance preferences"):
        selection.adapt(_job(CONFIG.read_text()), "ml.trn1.2xlarge")


def test_local_capacity_selects_the_first_type_with_capacity():
    resources = {"InstancePreferences": [{"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 2},
                                         {"InstanceType": "ml.trn2.48xlarge", "InstanceCount": 1}]}
    assert local_capacity.selected(resources, {}) == ("ml.trn1.32xlarge", 2)
    env = {local_capacity.NO_CAPACITY_ENV: "ml.trn1.32xlarge"}
    assert local_capacity.selected(resources, env) == ("ml.trn2.48xlarge", 1)
    with pytest.raises(BackendError) as caught:
        local_capacity.selected(resources, {local_capacity.NO_CAPACITY_ENV: "ml.trn1.32xlarge, ml.trn2.48xlarge"})
    assert caught.value.code == "InsufficientCapacityError"
    assert local_capacity.selected({"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1}, env) == ("ml.trn1.2xlarge", 1)


def test_a_local_job_without_capacity_for_its_first_choice_runs_as_the_second(
        orch_home, tmp_path, fake_train, monkeypatch, capsys):
    monkeypatch.setenv(local_capacity.NO_CAPACITY_ENV, "ml.trn2.48xlarge")
    prepared = request.prepare(spec.loads(LOCAL, str(tmp_path / "loc-prefs.yaml")))
    assert "InstanceType" not in prepared.request["ResourceConfig"]
    backend = LocalBackend()
    backend.submit(prepared)
    from test_backend_local import results_of, wait_terminal

    status = wait_terminal(backend, prepared.job_name)
    assert status.status == "completed", status.failure_reason
    assert (status.instance_type, status.instance_count) == ("ml.trn1.32xlarge", 1)
    root = orch_home / "jobs" / prepared.job_name / "algo-1"
    assert json.loads((root / contract.RESOURCE_CONFIG).read_text())["current_instance_type"] == "ml.trn1.32xlarge"
    log = "\n".join(backend.logs(prepared.job_name))
    assert "SageMaker selected ml.trn1.32xlarge (preference 2 of 2)" in log
    results = results_of(prepared)
    assert results["instance"]["type"] == "ml.trn1.32xlarge"
    assert results["instance"]["neuron_cores"] == 32
    monkeypatch.delenv(local_capacity.NO_CAPACITY_ENV)
    prefix = prepared.job["results_uri"].rsplit("/", 3)[0]  # <prefix>/results/<job>/results.json
    code, out, err = run_cli(monkeypatch, capsys, "results", "--prefix", prefix, "--format", "json")
    assert code == 0, err
    (row,) = [r for r in json.loads(out)["rows"] if r["job"] == prepared.job_name]
    assert row["backend"] == "local" and row["price_per_hour"] is None  # nothing billed here
    assert "ran as instance preference 2, ml.trn1.32xlarge x1" in row["note"]
    assert "32.2500 USD/h = 21.5000 USD/h" in row["note"]  # the shipped EC2 price x the stated markup
    assert results["instance"]["preference"] == 2


def _described(**resources) -> dict:
    """A DescribeTrainingJob answer with this ResourceConfig, validated against botocore's output model
    (moto returns no SelectedInstanceType, so this answer is written here)."""
    import datetime

    import botocore.session
    from botocore.validate import ParamValidator

    answer = {"TrainingJobName": "vit-trn-preferences-1", "TrainingJobArn":
              "arn:aws:sagemaker:us-east-1:123456789012:training-job/vit-trn-preferences-1",
              "ModelArtifacts": {"S3ModelArtifacts": "s3://orchestrator-example-bucket/jobs/output/model.tar.gz"}, "TrainingJobStatus": "InProgress",
              "SecondaryStatus": "Training", "AlgorithmSpecification": {"TrainingInputMode": "File"},
              "ResourceConfig": {"VolumeSizeInGB": 100, **resources},
              "StoppingCondition": {"MaxRuntimeInSeconds": 7200},
              "CreationTime": datetime.datetime(2026, 12, 4, tzinfo=datetime.timezone.utc)}
    shape = botocore.session.get_session().get_service_model("sagemaker").operation_model(
        "DescribeTrainingJob").output_shape
    report = ParamValidator().validate(answer, shape)
    assert not report.has_errors(), report.generate_report()
    return answer


def test_sagemaker_status_reports_the_selected_type_and_count():
    from orchestrator.backends.sagemaker import SageMakerBackend

    prefs = [{"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 2},
             {"InstanceType": "ml.trn2.48xlarge", "InstanceCount": 1}]
    chosen = SageMakerBackend._job_status(None, _described(InstancePreferences=prefs,
                                                           SelectedInstanceType="ml.trn2.48xlarge",
                                                           SelectedInstanceCount=1), tags={})
    assert (chosen.instance_type, chosen.instance_count) == ("ml.trn2.48xlarge", 1)
    waiting = SageMakerBackend._job_status(None, _described(InstancePreferences=prefs), tags={})
    assert (waiting.instance_type, waiting.instance_count) == ("ml.trn1.32xlarge", 2)  # not selected yet
