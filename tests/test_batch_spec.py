"""The batch backend's spec, catalog facts, cost bound and doctor rules (N040-N047): an inf2
spec through AWS Batch is checked as thoroughly as a SageMaker one, before any AWS call."""

from __future__ import annotations

import math

import pytest

from orchestrator import catalog, cost, doctor, spec
from orchestrator.backends.batch import billing
from orchestrator.errors import SpecError

BATCH = """\
name: inf2-test
backend: batch
region: us-east-1
instance: {type: inf2.xlarge}
data: {source: synthetic, num_workers: 2}
compile_cache: {uri: s3://orchestrator-example-bucket/cc}
output: {uri: s3://orchestrator-example-bucket/jobs}
max_run_minutes: 60
"""


@pytest.fixture(autouse=True)
def _isolated(orch_home):
    return orch_home


def _spec(**overrides):
    loaded = spec.loads(BATCH, "job.yaml")
    return spec.with_overrides(loaded, overrides) if overrides else loaded


def _rules(s) -> dict[str, doctor.Finding]:
    return {f.rule: f for f in doctor.findings(s)}


def _fires(s, rule: str, severity: str = "error") -> doctor.Finding:
    found = [f for f in doctor.findings(s) if f.rule == rule]
    assert found, f"{rule} did not fire; got {[f.rule for f in doctor.findings(s)]}"
    assert found[0].severity == severity and found[0].message and found[0].fix and found[0].path
    return found[0]


# --- catalog -------------------------------------------------------------------------------

@pytest.mark.parametrize("itype, chips, vcpus", [("inf2.xlarge", 1, 4), ("inf2.8xlarge", 1, 32),
                                                 ("inf2.24xlarge", 6, 96), ("inf2.48xlarge", 12, 192)])
def test_inf2_facts_follow_the_neuron_docs(itype, chips, vcpus):
    # aws-neuron-sdk inf2-arch.rst: 1, 1, 6, 12 Inferentia2 chips, two NeuronCore-v2 each; no EFA.
    facts = catalog.instance(itype)
    assert (facts.chips, facts.neuron_cores, facts.vcpus, facts.device_memory_gib) == (chips, 2 * chips, vcpus,
                                                                                      32 * chips)
    assert facts.batch and facts.efa_gbps == 0 and not facts.multi_node and facts.family == "inf2"
    assert "inf2-arch.rst" in catalog.batch_source()


def test_batch_types_are_the_four_inf2_sizes_smallest_first():
    assert catalog.batch_instance_types() == ("inf2.xlarge", "inf2.8xlarge", "inf2.24xlarge", "inf2.48xlarge")
    assert catalog.type_family("inf2.24xlarge") == "inf2"
    assert catalog.type_family("ml.trn1n.32xlarge") == "trn1n"


def test_an_ec2_price_is_what_a_batch_job_bills_and_carries_its_source():
    price = catalog.price("inf2.xlarge", "us-east-1")
    assert price.usd_per_hour == pytest.approx(0.7582) and "us-east-1" in price.source and price.as_of
    assert price.verified  # no SageMaker markup: Batch adds no charge to EC2's
    assert not catalog.price("ml.inf2.xlarge", "us-east-1").verified


# --- spec ----------------------------------------------------------------------------------

def test_a_batch_spec_needs_no_role_and_refuses_one():
    assert _spec().role_arn is None
    text = BATCH + "role_arn: arn:aws:iam::123456789012:role/x\n"
    with pytest.raises(SpecError) as err:
        spec.loads(text, "job.yaml")
    assert "job definition" in str(err.value) and "role_arn" in str(err.value)


def test_a_batch_spec_needs_s3_output_and_cache():
    with pytest.raises(SpecError) as err:
        spec.loads("name: x\nbackend: batch\ninstance: {type: inf2.xlarge}\n", "job.yaml")
    text = str(err.value)
    assert "the batch backend needs an s3:// output.uri" in text
    assert "the batch backend needs an s3:// compile_cache.uri" in text


def test_batch_settings_on_another_backend_are_refused():
    text = BATCH.replace("backend: batch", "backend: local") + "batch: {job_queue: my-queue}\n"
    with pytest.raises(SpecError) as err:
        spec.loads(text, "job.yaml")
    assert "batch: is for backend: batch" in str(err.value)


def test_infra_fills_the_stack_name_and_not_the_role(tmp_path):
    (tmp_path / "infra.yaml").write_text(
        "role_arn: arn:aws:iam::123456789012:role/r\ncompile_cache_uri: s3://stack-bucket/cc\n"
        "output_uri: s3://stack-bucket/jobs\nbucket: stack-bucket\nstack_name: my-stack\nregion: us-east-1\n")
    (tmp_path / "job.yaml").write_text("name: x\nbackend: batch\ninstance: {type: inf2.xlarge}\ninfra: infra.yaml\n")
    loaded = spec.load(tmp_path / "job.yaml")
    assert loaded.role_arn is None and loaded.batch.stack == "my-stack"
    assert loaded.output.uri == "s3://stack-bucket/jobs"


# --- target and cost -----------------------------------------------------------------------

def test_workers_are_the_neuron_cores_and_the_neuron_flags_are_set():
    target = doctor.diagnose(_spec(**{"instance.type": "inf2.24xlarge", "data.num_workers": 1})).target
    assert target.workers_per_node == 12 and target.neuron
    assert "--model-type=transformer" in target.environment["NEURON_CC_FLAGS"]


def test_the_cost_bound_counts_every_attempt_and_the_instance_overhead():
    est = cost.estimate(_spec(max_retry_attempts=2))
    hours = 3 * (60 + billing.BATCH_INSTANCE_MINUTES) / 60
    assert est.hours_max == pytest.approx(hours)
    assert est.usd_max == pytest.approx(hours * 0.7582) and est.markup == 1.0 and est.verified
    assert "3 attempt(s)" in est.describe() and "EC2 on-demand" in est.describe()


# --- doctor --------------------------------------------------------------------------------

def test_the_reference_batch_spec_is_clean():
    assert doctor.errors(doctor.findings(_spec())) == []


def test_n040_a_sagemaker_name_is_told_its_ec2_name():
    f = _fires(_spec(**{"instance.type": "ml.inf2.xlarge"}), "N040-batch-instance-type")
    assert f.fix == "set instance.type: inf2.xlarge" and "inf2.48xlarge" in f.message
    assert "N017-price-unknown" not in _rules(_spec(**{"instance.type": "inf2.96xlarge"}))


def test_n040_a_trainium_type_is_sent_to_sagemaker():
    f = _fires(_spec(**{"instance.type": "trn1.2xlarge"}), "N040-batch-instance-type")
    assert "backend: sagemaker" in f.fix


def test_n041_one_instance():
    f = _fires(_spec(**{"instance.count": 2}), "N041-batch-single-instance")
    assert f.path == "instance.count" and "EFA" in f.message


def test_n042_spot_needs_retries_and_no_max_wait_is_asked_for():
    rules = _rules(_spec(**{"instance.spot": True}))
    assert "N042-batch-spot-retries" in rules and "N012-spot-max-wait" not in rules
    assert "N042-batch-spot-retries" not in _rules(_spec(**{"instance.spot": True}, max_retry_attempts=2))


def test_n043_max_wait_is_sagemakers():
    _fires(_spec(**{"instance.spot": True, "instance.max_wait_minutes": 120}, max_retry_attempts=1),
           "N043-batch-max-wait")


def test_n044_trn_only_options_are_refused():
    assert _fires(_spec(**{"instance.lnc": 1}), "N044-batch-trn-option").path == "instance.lnc"
    found = [f for f in doctor.findings(_spec(**{"instance.volume_gb": 200})) if f.rule == "N044-batch-trn-option"]
    assert found and found[0].path == "instance.volume_gb"


def test_n045_at_most_ten_attempts():
    assert "N045-batch-retry-limit" not in _rules(_spec(max_retry_attempts=9))
    _fires(_spec(max_retry_attempts=10), "N045-batch-retry-limit")


def test_n046_native_leaves_the_cores_idle():
    _fires(_spec(**{"training.runtime": "native"}), "N046-batch-native-runtime", "warning")


def test_n047_checkpoints_stay_on_the_instance():
    _fires(_spec(**{"training.checkpoint_every": 100}), "N047-batch-checkpoints-local", "warning")


def test_n004_workers_per_node_applies_to_batch():
    f = _fires(_spec(**{"training.workers_per_node": 1}), "N004-workers-per-node")
    assert "2 logical NeuronCores" in f.message


def test_n001_names_the_batch_backend_for_ml_inf2():
    sage = spec.loads(BATCH.replace("backend: batch", "backend: sagemaker").replace(
        "inf2.xlarge", "ml.inf2.xlarge") + "role_arn: arn:aws:iam::123456789012:role/r\n", "job.yaml")
    f = _fires(sage, "N001-instance-not-trainable")
    assert "backend: batch with instance.type: inf2.xlarge" in f.fix


def test_budget_is_checked_against_the_batch_bound():
    f = _fires(_spec(**{"budget.max_cost_usd": 0.5}), "N016-budget-exceeded")
    assert f.path == "budget.max_cost_usd"
    assert math.isfinite(cost.estimate(_spec()).usd_max)


ACCOUNT = "123456789012"


@pytest.mark.parametrize("field, value, words", [
    ("job_queue", f"arn:aws:batch:us-east-1:{ACCOUNT}:job-definition/d:1", "is the ARN of a job definition; "
     "batch.job_queue takes a job queue"),
    ("job_definition", f"arn:aws:batch:us-east-1:{ACCOUNT}:job-queue/q", "is the ARN of a job queue; "
     "batch.job_definition takes a job definition"),
    ("job_queue", "my-queue:3", "a job queue has no revision; write its name alone"),
    ("job_queue", f"arn:aws:batch:us-east-1:{ACCOUNT}:job-queue/q:2", "a job queue has no revision"),
    ("job_definition", "jd:0", "a job definition's revision is a whole number from 1"),
    ("job_definition", "jd:latest", "a job definition's revision is a whole number from 1"),
    ("job_definition", "my def", "is not a job definition name: up to 128 letters"),
    ("job_queue", f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:job-queue/q", "is not an AWS Batch job queue ARN"),
    ("job_queue", "arn:aws:batch:us-east-1:12:job-queue/q", "is not an AWS Batch job queue ARN"),
    ("job_queue", f"arn:aws:batch:eu-west-1:{ACCOUNT}:job-queue/q", "the ARN is in region eu-west-1, but the job "
     "runs in region us-east-1"),
    ("job_definition", f"arn:aws-cn:batch:us-east-1:{ACCOUNT}:job-definition/d:4", "the ARN is in partition "
     "aws-cn, but region us-east-1 is in aws"),
])
def test_batch_queue_and_definition_are_checked_by_kind_region_partition_and_form(field, value, words):
    # QA: an ARN of the other kind, of another region or partition, a queue with a revision and
    # `jd:0` were accepted; bad ones were reported as a raw regular expression.
    with pytest.raises(SpecError) as err:
        spec.loads(BATCH + f"batch: {{{field}: '{value}'}}\n", "job.yaml")
    text = str(err.value)
    assert words in text and f"batch.{field}" in text
    assert "^(" not in text and "[A-Za-z0-9]" not in text  # words, not the pattern


@pytest.mark.parametrize("field, value", [
    ("job_queue", "my-queue"), ("job_queue", f"arn:aws:batch:us-east-1:{ACCOUNT}:job-queue/my_queue"),
    ("job_definition", "my-def"), ("job_definition", "my-def:12"),
    ("job_definition", f"arn:aws:batch:us-east-1:{ACCOUNT}:job-definition/my-def"),
    ("job_definition", f"arn:aws:batch:us-east-1:{ACCOUNT}:job-definition/my-def:3"),
])
def test_what_submit_job_takes_is_accepted(field, value):
    assert getattr(spec.loads(BATCH + f"batch: {{{field}: '{value}'}}\n", "job.yaml").batch, field) == value


def test_a_batch_arn_of_the_specs_own_partition_outside_aws_is_accepted():
    text = BATCH.replace("us-east-1", "cn-north-1") + f"batch: {{job_queue: 'arn:aws-cn:batch:cn-north-1:{ACCOUNT}:job-queue/q'}}\n"
    assert spec.loads(text, "job.yaml").batch.job_queue.endswith("cn-north-1:123456789012:job-queue/q")
