"""A sweep's on-demand SageMaker trial sends its failover types as one instance preference list
(SageMaker fails over itself); spot trials, and chains whose counts cannot keep the global
batch, keep the runner's failover (issue 26)."""

from __future__ import annotations

import botocore.session
from botocore.validate import ParamValidator

from orchestrator import spec
from orchestrator import sweep as sweeps

BASE = """\
name: pref-sweep
backend: sagemaker
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {type: ml.trn1.32xlarge, count: 2}
image: {neuron_sdk: "2.30.0"}
model: {arch: vit_base_patch16_224, image_size: 224}
training: {runtime: xla, precision: bf16, steps: 100, batch_size: 16}
data: {source: synthetic, num_workers: 2}
compile_cache: {uri: s3://orchestrator-example-bucket/cc}
output: {uri: s3://orchestrator-example-bucket/jobs}
max_run_minutes: 60
"""
SWEEP = """\
sweep: prefs
base: base.yaml
grid: {training.optimizer.lr: [0.001, 0.0001]}
failover: {instance.type: [ml.trn1n.32xlarge, ml.trn2.48xlarge]}
"""


def _plan(tmp_path, base: str = BASE):
    (tmp_path / "base.yaml").write_text(base)
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    return sweeps.plan(spec.load_sweep(tmp_path / "sweep.yaml"))


def test_on_demand_failover_is_one_preference_list(tmp_path, orch_home):
    planned = _plan(tmp_path)
    assert len(planned.trials) == 2
    shape = botocore.session.get_session().get_service_model("sagemaker").operation_model(
        "CreateTrainingJob").input_shape
    for t in planned.trials:
        resources = t.prepared.request["ResourceConfig"]
        assert t.chain == ("ml.trn1.32xlarge",)  # nothing left for the runner to fail over to
        assert resources["InstancePreferences"] == [
            {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 2},
            {"InstanceType": "ml.trn1n.32xlarge", "InstanceCount": 2},
            {"InstanceType": "ml.trn2.48xlarge", "InstanceCount": 1}]
        assert "InstanceType" not in resources
        assert not ParamValidator().validate(t.prepared.request, shape).has_errors()
        assert t.trial.trial_id == "t" + t.trial.spec_hash[:8]  # the trial keeps its identity
        # The bound is the dearest choice's: trn2.48xlarge has no shipped price, so it is unknown.
        assert not t.prepared.estimate.known and "ml.trn2.48xlarge" in t.prepared.estimate.note


def test_spot_trials_keep_the_runners_failover(tmp_path, orch_home):
    planned = _plan(tmp_path, BASE.replace("count: 2}", "count: 2, spot: true, max_wait_minutes: 120}"))
    for t in planned.trials:
        assert t.chain == ("ml.trn1.32xlarge", "ml.trn1n.32xlarge", "ml.trn2.48xlarge")
        assert t.prepared.request["ResourceConfig"]["InstanceType"] == "ml.trn1.32xlarge"
        assert "InstancePreferences" not in t.prepared.request["ResourceConfig"]


def test_a_chain_that_cannot_keep_the_global_batch_stays_client_side(tmp_path, orch_home):
    planned = _plan(tmp_path, BASE.replace("count: 2}", "count: 1}"))  # 32 workers: trn2's 64 do not divide
    for t in planned.trials:
        assert t.chain == ("ml.trn1.32xlarge", "ml.trn1n.32xlarge", "ml.trn2.48xlarge")
        assert "InstancePreferences" not in t.prepared.request["ResourceConfig"]
