"""Sweeps admit trials by quota (orchestrator.sweep.admission): trials beyond the account's quota
for their instance type wait, shown as waiting for quota, and are never submitted to fail; the
sweep never has more instances of a type in flight than its quota."""

from __future__ import annotations

from sweep_fakes import BASE, rig, states  # noqa: F401 - rig is a fixture

from orchestrator.quotas import Need, Quota, Verdict
from orchestrator.sweep.admission import Admission, QuotaLimit
from orchestrator.sweep.router import Router

TRN1_QUOTA = ("sagemaker", "ml.trn1.32xlarge for training job usage")


def _need(itype: str, amount: int, service: str = "sagemaker", name: str | None = None, unit: str = "instances"):
    return Need(service, name or f"{itype} for training job usage", itype, amount, unit)

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
    runner = make(SWEEP, TRN1, admission=Admission([QuotaLimit({TRN1_QUOTA: 2})]))
    progress = runner.step()
    assert len(cloud.jobs) == 2  # concurrency 5, quota 2
    assert progress.waiting_reason.startswith('waiting for quota: ml.trn1.32xlarge needs 1 instances of '
                                              '"ml.trn1.32xlarge for training job usage", 2 of 2')
    assert any("waiting for quota: ml.trn1.32xlarge" in event for event in progress.events)
    assert list(states(runner).values()).count("planned") == 3
    while not runner.step().done:
        cloud.finish_all()
    assert cloud.max_in_flight == 2
    assert set(states(runner).values()) == {"completed"} and len(cloud.creates) == 5


def test_limits_come_from_the_quota_less_what_runs():
    need = _need("ml.trn1.32xlarge", 1)
    admission = Admission.from_verdicts([Verdict(need, Quota(need.quota_name, "L-1", 4), 1),
                                         Verdict(_need("ml.trn2.48xlarge", 1), None, 0)])
    [limit] = admission.limits
    assert limit.remaining == {TRN1_QUOTA: 3}


def test_a_preference_list_waits_unless_every_type_has_room():
    """SageMaker checks every type of a list (rules table sagemaker-preferences-every-quota): a
    job waits when any of its types lacks room; a job in flight with preferences holds each."""
    listed = [_need("ml.trn1.32xlarge", 2), _need("ml.trn2.48xlarge", 1)]
    single = [_need("ml.trn1.32xlarge", 2)]
    admission = Admission([QuotaLimit({TRN1_QUOTA: 4, ("sagemaker", "ml.trn2.48xlarge for training job usage"): 1})])
    assert admission.why_not(listed, [single]) is None  # both have room
    why = admission.why_not(listed, [listed])  # trn2 held by the listed job in flight
    assert why is not None and "ml.trn2.48xlarge needs 1" in why and "ml.trn1.32xlarge" not in why
    assert admission.why_not(listed, [single, single]) is not None  # trn1 full: the list waits
    assert Admission([QuotaLimit({})]).why_not(single, [single, single]) is None  # no known quota: not limited


def test_vcpus_of_an_ec2_quota_never_meet_instances_of_a_sagemaker_one():
    """A mixed sweep: a Batch trial's vCPUs count against the EC2 Inf quota only."""
    inf = _need("inf2.xlarge", 4, "ec2", "Running On-Demand Inf instances", "vCPUs")
    trn = _need("ml.trn1.32xlarge", 1)
    admission = Admission.from_verdicts([Verdict(inf, Quota(inf.quota_name, "L-1945791B", 8), None),
                                         Verdict(trn, Quota(trn.quota_name, "L-1", 1), 0)])
    assert admission.why_not([trn], [[inf], [inf]]) is None
    assert admission.why_not([inf], [[trn]]) is None
    assert "8 of 8" in admission.why_not([inf], [[inf], [inf]])


def test_spot_and_on_demand_are_different_quotas():
    spot = _need("ml.trn1.32xlarge", 1, name="ml.trn1.32xlarge for spot training job usage")
    on_demand = _need("ml.trn1.32xlarge", 1)
    admission = Admission([QuotaLimit({TRN1_QUOTA: 1})])
    assert admission.why_not([spot], [[on_demand]]) is None
    assert admission.why_not([on_demand], [[on_demand]]) is not None


def test_a_further_limit_plugs_into_the_list():
    """The place a further limit (a training plan's capacity) plugs in: one more Limit."""

    class Closed:
        def why_not(self, needs, held):
            return "waiting for plan capacity"

    assert Admission([QuotaLimit({}), Closed()]).why_not([_need("ml.trn1.32xlarge", 1)], []) == \
        "waiting for plan capacity"


def test_sweep_admission_reads_quotas_once_and_refuses_a_trial_that_fits_nowhere(rig, monkeypatch):  # noqa: F811
    import pytest
    from test_quotas import _clients

    from orchestrator import quotas
    from orchestrator.actions import quota_check
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
    # One ListServiceQuotas walk (one page) for the five trials; every quota applied: no defaults read.
    assert answers[2].calls == [("ListServiceQuotas", "sagemaker")]
    assert admission.limits[0].remaining == {TRN1_QUOTA: 2}
    assert said == ['quota: ml.trn1.32xlarge: needs 1 instances of "ml.trn1.32xlarge for training job usage" '
                    "(L-11111111): quota 3, 1 in use: fits now"]
    answers = _clients({"ml.trn1.32xlarge for training job usage": ("L-11111111", 0)})
    monkeypatch.setattr(quotas, "clients", lambda region, attempts=None: answers[:2])
    with pytest.raises(InputError, match="L-11111111"):
        quota_check.sweep_admission(runner.d, Router.of(Cloud(), names), said.append)


FAILOVER = """\
sweep: quota-failover
base: base.yaml
grid:
  training.batch_size: [8, 16]
failover:
  instance.type: [ml.trn1n.32xlarge]
concurrency: 2
"""


def test_a_failover_type_its_quota_refuses_is_left_out_with_a_note(tmp_path, orch_home):
    """The failover type's quota (no applied value, default 0) would make SageMaker reject every
    trial's preference list: the sweep is planned without it, and says so."""
    from sweep_fakes import load
    from test_quotas import _clients

    from orchestrator import sweep as sweeps
    from orchestrator.sweep import admission

    sweep = load(tmp_path, FAILOVER, TRN1)
    listed = sweeps.plan(sweep)
    assert [[p.type for p in t.trial.spec.instance.preferences] for t in listed.trials] == \
        [["ml.trn1.32xlarge", "ml.trn1n.32xlarge"]] * 2  # the failover, sent as one preference list
    answers = _clients({"ml.trn1.32xlarge for training job usage": ("L-11111111", 8)},
                       defaults={"ml.trn1n.32xlarge for training job usage": ("L-22222222", 0)})

    class Cloud:
        def quota_clients(self, attempts=None):
            return answers[:2]

    planned, notes = admission.plan_within_quotas(sweep, Router.of(Cloud(), ["sagemaker"]))
    assert [t.trial.spec.instance.preferences for t in planned.trials] == [None, None]
    assert [t.chain for t in planned.trials] == [("ml.trn1.32xlarge",)] * 2
    [note] = notes
    assert note.startswith("failover type ml.trn1n.32xlarge left out of every trial: ") and "L-22222222" in note
    assert any(w.startswith("quota: failover type ml.trn1n.32xlarge left out") for w in planned.warnings)
    # With room for it, the list is kept as planned.
    answers = _clients({"ml.trn1.32xlarge for training job usage": ("L-11111111", 8),
                        "ml.trn1n.32xlarge for training job usage": ("L-22222222", 4)})
    planned, notes = admission.plan_within_quotas(sweep, Router.of(Cloud(), ["sagemaker"]))
    assert notes == [] and planned.trials[0].trial.spec.instance.preferences is not None
