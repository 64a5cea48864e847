"""Sweeps admit trials by quota (orchestrator.sweep.admission): trials beyond the account's quota
for their instance type wait, shown as waiting for quota, and are never submitted to fail; the
sweep never has more instances of a type in flight than its quota."""

from __future__ import annotations

from sweep_fakes import BASE, rig, states  # noqa: F401 - rig is a fixture

from orchestrator.quotas import Need, Quota, Verdict
from orchestrator.sweep.admission import Admission, ways
from orchestrator.sweep.router import Router

SWEEP = """\
sweep: quota
base: base.yaml
grid:
  training.batch_size: [8, 16, 32, 64, 128]
concurrency: 5
"""
TRN1 = BASE.replace("ml.trn1.2xlarge", "ml.trn1.32xlarge")


def test_a_sweep_never_runs_more_than_the_quota(rig):  # noqa: F811
    make, cloud, _ = rig
    runner = make(SWEEP, TRN1, admission=Admission({"ml.trn1.32xlarge": 2}))
    progress = runner.step()
    assert len(cloud.jobs) == 2  # concurrency 5, quota 2
    assert progress.waiting_reason.startswith("waiting for quota: ml.trn1.32xlarge needs 1, 2 of 2")
    assert any("waiting for quota: ml.trn1.32xlarge" in event for event in progress.events)
    assert list(states(runner).values()).count("planned") == 3
    while not runner.step().done:
        cloud.finish_all()
    assert cloud.max_in_flight == 2
    assert set(states(runner).values()) == {"completed"} and len(cloud.creates) == 5


def test_limits_come_from_the_quota_less_what_runs():
    need = Need("sagemaker", "ml.trn1.32xlarge for training job usage", "ml.trn1.32xlarge", 1, "instances")
    admission = Admission.from_verdicts([Verdict(need, Quota(need.quota_name, "L-1", 4), 1),
                                         Verdict(need._replace(instance_type="ml.trn2.48xlarge"), None, 0)])
    assert admission.limits == {"ml.trn1.32xlarge": 3}


def test_a_preference_list_waits_only_when_no_type_has_room():
    listed = {"ResourceConfig": {"InstancePreferences": [{"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 2},
                                                         {"InstanceType": "ml.trn2.48xlarge", "InstanceCount": 1}]}}
    assert ways(listed) == [("ml.trn1.32xlarge", 2), ("ml.trn2.48xlarge", 1)]
    single = {"ResourceConfig": {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 2}}
    admission = Admission({"ml.trn1.32xlarge": 2, "ml.trn2.48xlarge": 1})
    assert admission.why_not(listed, [single]) is None  # trn2 has room
    why = admission.why_not(listed, [single, {"ResourceConfig": {"InstanceType": "ml.trn2.48xlarge",
                                                                   "InstanceCount": 1}}])
    assert "ml.trn1.32xlarge needs 2, 2 of 2" in why and "ml.trn2.48xlarge needs 1, 1 of 1" in why
    assert Admission({}).why_not(single, [single, single]) is None  # no known quota: not limited


def test_sweep_admission_reads_quotas_once_and_refuses_a_trial_that_fits_nowhere(rig, monkeypatch):  # noqa: F811
    import pytest
    from test_quotas import _clients

    from orchestrator import quotas
    from orchestrator.cli import quota_check
    from orchestrator.errors import InputError

    make, _, _ = rig
    runner = make(SWEEP, TRN1)
    answers = _clients({"ml.trn1.32xlarge for training job usage": ("L-11111111", 3)},
                       running={"other-1": ("ml.trn1.32xlarge", 1)})
    monkeypatch.setattr(quotas, "clients", lambda region, attempts=None: answers[:2])

    class Cloud:  # the sweep's SageMaker backend, which reads the quotas
        def quota_clients(self, attempts=None):
            return quotas.clients("us-east-1", attempts=attempts)

    class Quotaless:  # a backend without service quotas (the local one)
        def quota_clients(self, attempts=None):
            return None

    said: list[str] = []
    names = runner.d.backends
    assert quota_check.sweep_admission(runner.d, Router.of(Quotaless(), names), said.append) is None
    admission = quota_check.sweep_admission(runner.d, Router.of(Cloud(), names), said.append)
    answers[2].assert_no_pending_responses()  # one ListServiceQuotas walk for the five trials
    assert admission.limits == {"ml.trn1.32xlarge": 2}
    assert said == ['quota: ml.trn1.32xlarge: needs 1 instances of "ml.trn1.32xlarge for training job usage" '
                    "(L-11111111): quota 3, 1 in use: fits now"]
    answers = _clients({"ml.trn1.32xlarge for training job usage": ("L-11111111", 0)})
    monkeypatch.setattr(quotas, "clients", lambda region, attempts=None: answers[:2])
    with pytest.raises(InputError, match="L-11111111"):
        quota_check.sweep_admission(runner.d, Router.of(Cloud(), names), said.append)
