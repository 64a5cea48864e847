"""Service Quotas before money (orchestrator.quotas): the needs of a spec, the quota answers
(tests/quota_fake.py: a Service Quotas that lists applied values and defaults apart, as the real
one does, since moto implements neither ListServiceQuotas nor SageMaker's quotas; SageMaker
through botocore's Stubber), the exit-2 refusal that names the quota, and `submit` refusing
before any paid call."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from cli_harness import run_cli
from quota_fake import quota, service_quotas

from orchestrator import quotas, spec
from orchestrator.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "vit-trn-preferences.yaml"
TYPES = ("ml.trn1.32xlarge", "ml.trn1n.32xlarge", "ml.trn2.48xlarge")
CODES = {"ml.trn1.32xlarge": "L-11111111", "ml.trn1n.32xlarge": "L-22222222", "ml.trn2.48xlarge": "L-33333333"}


@pytest.fixture(autouse=True)
def _isolated(orch_home):
    return orch_home


def _clients(values: dict[str, tuple[str, float]], running: dict[str, tuple] | None = None,
             service: str = "sagemaker", extra: list[dict] | None = None,
             defaults: dict[str, tuple[str, float]] | None = None):
    """(service-quotas, sagemaker, the fake Service Quotas, the SageMaker Stubber): `values` are
    the APPLIED quotas (ListServiceQuotas, after another one), `defaults` the AWS defaults
    (ListAWSDefaultServiceQuotas), answered as the real service does (tests/quota_fake.py);
    ListTrainingJobs and one DescribeTrainingJob per running job ((type, count[, spot]))."""
    other = quota("ml.p5.48xlarge for training job usage", "L-99999999", 4)
    listed = [other] + [quota(name, code, value, service) for name, (code, value) in values.items()] + (extra or [])
    fake = service_quotas({service: listed},
                          {service: [quota(name, code, value, service) for name, (code, value) in (defaults or {}).items()]})
    sm = boto3.client("sagemaker", region_name="us-east-1")
    sm_stub = Stubber(sm)
    if service == "sagemaker":
        import datetime

        when = datetime.datetime(2026, 12, 4, tzinfo=datetime.timezone.utc)
        summaries = [{"TrainingJobName": name, "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{name}",
                      "CreationTime": when, "TrainingJobStatus": "InProgress"} for name in (running or {})]
        sm_stub.add_response("list_training_jobs", {"TrainingJobSummaries": summaries}, {"StatusEquals": "InProgress"})
        for name, (itype, count, *spot) in (running or {}).items():
            sm_stub.add_response("describe_training_job", {
                "TrainingJobName": name, "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{name}",
                "ModelArtifacts": {"S3ModelArtifacts": "s3://orchestrator-example-bucket/jobs/output/model.tar.gz"}, "TrainingJobStatus": "InProgress",
                "SecondaryStatus": "Training", "AlgorithmSpecification": {"TrainingInputMode": "File"},
                "ResourceConfig": {"VolumeSizeInGB": 100, "InstancePreferences": [{"InstanceType": itype, "InstanceCount": count}],
                                   "SelectedInstanceType": itype, "SelectedInstanceCount": count},
                "EnableManagedSpotTraining": bool(spot and spot[0]),
                "StoppingCondition": {"MaxRuntimeInSeconds": 60}, "CreationTime": when}, {"TrainingJobName": name})
    sm_stub.activate()
    return fake.client, sm, fake, sm_stub


def _named(values: dict[str, float]) -> dict[str, tuple[str, float]]:
    return {f"{t} for training job usage": (CODES[t], v) for t, v in values.items()}


def test_needs_per_preference_and_for_batch():
    loaded = spec.load(CONFIG)
    assert [(n.quota_name, n.amount, n.unit) for n in quotas.needs(loaded)] == [
        ("ml.trn1.32xlarge for training job usage", 2, "instances"),
        ("ml.trn1n.32xlarge for training job usage", 2, "instances"),
        ("ml.trn2.48xlarge for training job usage", 1, "instances")]
    batch = spec.load(ROOT / "configs" / "vit-inf2-xlarge.yaml")
    (need,) = quotas.needs(batch)
    assert (need.service, need.quota_name, need.unit) == ("ec2", "Running On-Demand Inf instances", "vCPUs")
    assert need.amount == 4 * batch.instance.count  # inf2.xlarge: 4 vCPUs
    assert quotas.needs(spec.load(ROOT / "configs" / "local-tiny.yaml")) == []


def test_read_matches_quotas_by_name_and_counts_running_jobs():
    sq, sm, fake, sm_stub = _clients(_named({"ml.trn1.32xlarge": 4, "ml.trn1n.32xlarge": 0}),
                                     running={"other-1": ("ml.trn1.32xlarge", 3)},
                                     defaults={"ml.trn2.48xlarge for training job usage": ("L-33333333", 0)})
    verdicts = quotas.read(spec.load(CONFIG), sq, sm)
    sm_stub.assert_no_pending_responses()
    # Applied values first; the defaults only for what ListServiceQuotas left out.
    assert fake.calls == [("ListServiceQuotas", "sagemaker")] * 2 + [("ListAWSDefaultServiceQuotas", "sagemaker")]
    trn1, trn1n, trn2 = verdicts
    assert (trn1.quota.code, trn1.quota.value, trn1.in_use, trn1.fits, trn1.free_now) == ("L-11111111", 4, 3, True, False)
    assert (trn1n.fits, trn1n.in_use, trn1n.quota.default) == (False, 0, False)
    assert (trn2.quota.value, trn2.quota.default, trn2.fits) == (0, True, False)  # the default: 0, not unknown
    assert "waits for running jobs" in trn1.describe() and "the AWS default" in trn2.describe()


def test_a_quota_with_no_applied_value_is_its_default_and_a_default_of_0_refuses():
    """Held out: ListServiceQuotas leaves the quota out (no applied value), its default is 0:
    the job is refused, not sent as if the quota were unknown."""
    only = spec.with_overrides(spec.load(CONFIG), {"instance.preferences": None})  # ml.trn1.32xlarge x 2
    sq, sm, fake, _ = _clients({}, defaults={"ml.trn1.32xlarge for training job usage": ("L-11111111", 0)})
    (verdict,) = quotas.read(only, sq, sm)
    assert verdict.quota == quotas.Quota("ml.trn1.32xlarge for training job usage", "L-11111111", 0, True)
    with pytest.raises(InputError) as caught:
        quotas.require_fit([verdict], "us-east-1")
    assert caught.value.exit_code == 2 and "L-11111111" in str(caught.value) and "the AWS default" in str(caught.value)
    # Neither applied nor default: unknown, said, not refused.
    sq, sm, _, _ = _clients({})
    (verdict,) = quotas.read(only, sq, sm)
    assert verdict.quota is None and "quota unknown" in verdict.describe()
    quotas.require_fit([verdict], "us-east-1")


def test_one_preference_type_short_of_its_quota_refuses_the_whole_list():
    """SageMaker checks the quota of every type of a preference list (rules table
    sagemaker-preferences-every-quota): one type at 0 refuses the job, naming that quota only."""
    sq, sm, _, _ = _clients(_named({"ml.trn1.32xlarge": 8, "ml.trn1n.32xlarge": 0, "ml.trn2.48xlarge": 2}))
    verdicts = quotas.read(spec.load(CONFIG), sq, sm)
    with pytest.raises(InputError) as caught:
        quotas.require_fit(verdicts, "us-east-1")
    text = f"{caught.value} {caught.value.hint}"
    assert "1 of the job's 3 instance types" in text and "L-22222222" in text
    assert "--quota-code L-22222222 --desired-value 2" in text
    assert "L-11111111" not in text and "L-33333333" not in text


def test_spot_and_on_demand_jobs_in_use_are_counted_against_their_own_quota():
    base = spec.load(CONFIG)
    spot = spec.with_overrides(base, {"instance.preferences": None, "instance.spot": True,
                                      "instance.max_wait_minutes": base.max_run_minutes})
    name = "ml.trn1.32xlarge for spot training job usage"
    sq, sm, _, _ = _clients({name: ("L-55555555", 4)}, running={"on-demand": ("ml.trn1.32xlarge", 3),
                                                                  "spot": ("ml.trn1.32xlarge", 1, True)})
    (verdict,) = quotas.read(spot, sq, sm)
    assert (verdict.need.quota_name, verdict.in_use) == (name, 1)  # the on-demand job's 3 hold another quota


def test_a_zero_quota_for_every_type_is_exit_2_naming_quota_code_and_the_way_to_raise_it():
    sq, sm, _, _ = _clients(_named(dict.fromkeys(TYPES, 0)))
    verdicts = quotas.read(spec.load(CONFIG), sq, sm)
    with pytest.raises(InputError) as caught:
        quotas.require_fit(verdicts, "us-east-1")
    error = caught.value
    assert error.exit_code == 2
    text = f"{error} {error.hint}"
    for itype in TYPES:
        assert f"\"{itype} for training job usage\" ({CODES[itype]}) is 0" in text
        assert f"--quota-code {CODES[itype]}" in text
    assert "aws service-quotas request-service-quota-increase --service-code sagemaker" in text
    assert "console.aws.amazon.com/servicequotas/home/services/sagemaker/quotas/L-11111111" in text


def test_batch_checks_the_ec2_inf_vcpu_quota():
    batch = spec.load(ROOT / "configs" / "vit-inf2-xlarge.yaml")
    sq, _, _, _ = _clients({"Running On-Demand Inf instances": ("L-1945791B", 2)}, service="ec2")
    (verdict,) = quotas.read(batch, sq, None)
    assert verdict.quota.value == 2 and verdict.in_use is None and verdict.fits is False
    with pytest.raises(InputError, match="Running On-Demand Inf instances"):
        quotas.require_fit([verdict], "us-east-1")


def test_submit_with_no_quota_exits_2_before_any_paid_call(monkeypatch, capsys):
    sq, sm, _, _ = _clients(_named(dict.fromkeys(TYPES, 0)))
    from orchestrator import backends

    class Backend:
        """The SageMaker backend as submit sees it: it reads quotas, and must not be asked to submit."""

        def quota_clients(self, attempts=None):
            assert attempts == 2  # submit's own check: twice, as every call to a silent endpoint
            return sq, sm

        def submit(self, prepared):
            pytest.fail("submitted (the source upload and CreateTrainingJob) past a quota of 0")

    monkeypatch.setattr(backends, "create", lambda *a, **k: Backend())
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(CONFIG))
    assert code == 2
    assert "ml.trn1.32xlarge for training job usage" in err and "L-11111111" in err
    assert "request-service-quota-increase" in err
    assert out == ""
    code, _, err = run_cli(monkeypatch, capsys, "submit", str(CONFIG), "--no-quota-check", "--dry-run")
    assert code == 0


def test_submit_with_one_preference_type_at_0_exits_2_before_any_upload(monkeypatch, capsys):
    """Held out: configs/vit-trn-preferences.yaml with one type at quota 0 (its applied value
    missing, its default 0) is refused before the source upload and CreateTrainingJob."""
    sq, sm, _, _ = _clients(_named({"ml.trn1.32xlarge": 8, "ml.trn2.48xlarge": 2}),
                            defaults={"ml.trn1n.32xlarge for training job usage": ("L-22222222", 0)})
    from orchestrator import backends

    class Backend:
        def quota_clients(self, attempts=None):
            return sq, sm

        def upload_source(self, prepared):
            pytest.fail("uploaded the source archive past a quota of 0")

        def submit(self, prepared):
            pytest.fail("submitted (the source upload and CreateTrainingJob) past a quota of 0")

    monkeypatch.setattr(backends, "create", lambda *a, **k: Backend())
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(CONFIG))
    assert code == 2 and out == ""
    assert '"ml.trn1n.32xlarge for training job usage" (L-22222222) is 0' in err
    assert "aws service-quotas request-service-quota-increase --service-code sagemaker --quota-code L-22222222" in err


def test_doctor_and_plan_with_quotas_show_each_type(monkeypatch, capsys):
    def answers(region, attempts=None):
        sq, sm, _, _ = _clients(_named({"ml.trn1.32xlarge": 8, "ml.trn1n.32xlarge": 0, "ml.trn2.48xlarge": 1}))
        return sq, sm

    monkeypatch.setattr(quotas, "clients", answers)
    code, out, err = run_cli(monkeypatch, capsys, "doctor", str(CONFIG), "--quotas")
    assert code == 2 and "L-22222222" in err  # one type short: SageMaker would reject the list
    lines = [line for line in out.splitlines() if line.startswith("quota: ")]
    assert len(lines) == 3 and "quota 8, 0 in use: fits now" in lines[0] and "does not fit" in lines[1]
    code, _, err = run_cli(monkeypatch, capsys, "plan", str(CONFIG), "--quotas")
    assert code == 2 and err.count("quota: ") == 3


def test_a_plain_plan_reads_no_quota(monkeypatch, capsys):
    monkeypatch.setattr(quotas, "clients", lambda *a, **k: pytest.fail("plan read quotas without --quotas"))
    code, _, _ = run_cli(monkeypatch, capsys, "plan", str(CONFIG))
    assert code == 0


def test_a_refused_quota_read_is_exit_1_for_doctor_and_said_and_skipped_for_submit(monkeypatch, capsys):
    sq = boto3.client("service-quotas", region_name="us-east-1")
    stub = Stubber(sq)
    stub.add_client_error("list_service_quotas", "AccessDeniedException", "not authorized", 400)
    stub.activate()
    monkeypatch.setattr(quotas, "clients", lambda region, attempts=None: (sq, None))
    code, _, err = run_cli(monkeypatch, capsys, "doctor", str(CONFIG), "--quotas")
    assert code == 1 and "AccessDeniedException" in err and "servicequotas:ListServiceQuotas" in err
    from orchestrator.actions import quota_check

    stub.add_client_error("list_service_quotas", "AccessDeniedException", "not authorized", 400)

    class Backend:
        def quota_clients(self, attempts=None):
            return sq, None

    said: list[str] = []
    assert quota_check.run(spec.load(CONFIG), said.append, tolerant=True, backend=Backend()) == []
    assert said and said[0].startswith("quota: not read (AccessDeniedException") and "--no-quota-check" in said[0]


def test_the_quota_needs_are_decided_once_when_the_job_is_prepared(monkeypatch, capsys):
    """Issue 34, item 2: `Prepared` carries the job's quota needs; submit's quota check reads
    them there instead of asking the backend again (once for the check, once for the read)."""
    from orchestrator import backends, request

    prepared = request.prepare(spec.load(CONFIG))
    assert prepared.quota_needs == tuple(quotas.needs(spec.load(CONFIG)))
    assert {n.instance_type for n in prepared.quota_needs} == set(TYPES)
    assert request.prepare(spec.load(ROOT / "configs" / "local-tiny.yaml")).quota_needs == ()

    sq, sm, _, _ = _clients(_named(dict.fromkeys(TYPES, 0)))

    class Backend:
        def quota_clients(self, attempts=None):
            return sq, sm

        def submit(self, prepared):
            pytest.fail("submitted past a quota of 0")

    asked = []
    real = quotas.needs
    monkeypatch.setattr(quotas, "needs", lambda s: asked.append(s) or real(s))
    monkeypatch.setattr(backends, "create", lambda *a, **k: Backend())
    code, _, err = run_cli(monkeypatch, capsys, "submit", str(CONFIG))
    assert code == 2 and "L-11111111" in err  # the check still ran, on the prepared needs
    assert len(asked) == 1  # by request.prepare
