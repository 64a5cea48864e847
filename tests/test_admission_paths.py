"""The one admission by quota (`sweep.admission`): `sweep run`, `schedule tick` (as `schedule
run`, one evaluation of the same Scheduler) and the cloud schedule's deploy each go through
`admission.admit` before anything is submitted or uploaded (issue 34: the laptop schedule path
once ran sweeps without admission)."""

from __future__ import annotations

import pytest
from cli_harness import run_cli
from sweep_fakes import BASE, ROOT, FakeCloud, write
from test_quotas import _clients

from orchestrator import sweep as sweeps
from orchestrator.errors import InputError
from orchestrator.sweep import admission

QUOTA = "ml.trn1.2xlarge for training job usage"
REFUSED = "refused by the admission under test"
SWEEP = """\
sweep: admitted
base: base.yaml
grid:
  training.batch_size: [16, 32]
concurrency: 2
"""


class QuotaCloud(FakeCloud):
    """The fake cloud with Service Quotas to read (three instances of the sweep's type)."""

    sweep_poll_s = 30.0  # SageMaker's default round

    def submit(self, prepared):  # a path that skipped the admission fails here, at once
        raise AssertionError("a job was submitted: the admission was not asked first")

    def quota_clients(self, attempts=None):
        return _clients({QUOTA: ("L-11111111", 3)})[:2]


@pytest.fixture
def admitted(monkeypatch, orch_home):
    """(calls to `admission.admit`: each the labels it judged, clouds made): the admission
    refuses (InputError, exit 2) whatever it is asked; every backend is a QuotaCloud."""
    calls: list[list[str]] = []
    clouds: list[QuotaCloud] = []

    def admit(labelled, region):
        calls.append([label for label, _ in labelled])
        raise InputError(REFUSED)

    def create(cls, names, *, region, ledger, **options):
        clouds.append(QuotaCloud(ledger))
        return sweeps.Router.of(clouds[-1], names)

    monkeypatch.setattr(admission, "admit", admit)
    monkeypatch.setattr(sweeps.Router, "create", classmethod(create))
    return calls, clouds


def test_sweep_run_admits_its_trials_before_any_submit(tmp_path, monkeypatch, capsys, admitted):
    calls, clouds = admitted
    path = write(tmp_path, SWEEP, BASE)
    code, _, err = run_cli(monkeypatch, capsys, "sweep", "run", str(path))
    assert code == 2 and f"error: {REFUSED}" in err, err
    [labels] = calls  # the sweep's two trials, judged once
    assert len(labels) == 2 and all(label.startswith("trial ") for label in labels)
    assert clouds and not any(cloud.jobs or cloud.submit_calls for cloud in clouds)


def test_schedule_tick_admits_each_tick_sweep_before_any_submit(tmp_path, monkeypatch, capsys, admitted):
    calls, clouds = admitted
    # Every minute: the first evaluation owes the tick of this minute (within ON_TIME_SECONDS).
    path = write(tmp_path, SWEEP + 'schedule: {cron: "* * * * *", catchup: latest, timezone: UTC}\n', BASE)
    code, _, err = run_cli(monkeypatch, capsys, "schedule", "tick", str(path), "--no-follow")
    assert code == 2 and f"error: {REFUSED}" in err, err
    [labels] = calls  # the sweep's two trials, judged once
    assert len(labels) == 2 and all(label.startswith("trial ") for label in labels)
    assert clouds and not any(cloud.jobs or cloud.submit_calls for cloud in clouds)


def test_the_cloud_schedule_admits_every_attempt_before_anything_is_uploaded(monkeypatch, admitted):
    from orchestrator import spec
    from orchestrator.backends import sagemaker
    from orchestrator.infra import deploy as infra_deploy
    from orchestrator.schedule import in_aws, statemachine
    from orchestrator.schedule.compiled import compile_schedule

    calls, _ = admitted
    plan = statemachine.placeholder_plan(spec.load_sweep(ROOT / "configs" / "sweep-nightly.yaml"))
    monkeypatch.setattr(sagemaker.SageMakerBackend, "connect", lambda *a, **k: pytest.fail("a client was made"))
    monkeypatch.setattr(infra_deploy, "plan_change_set", lambda *a, **k: pytest.fail("a change set was made"))
    with pytest.raises(InputError, match=REFUSED):
        in_aws.deploy(compile_schedule(plan), "us-east-1",
                     clients={"cloudformation": object(), "quotas": _clients({QUOTA: ("L-11111111", 30)})[:2]})
    [labels] = calls
    # Every job a run may make: each trial's first job and its retries, by name.
    assert len(labels) > len(plan.trials) and all(label.startswith("trial ") for label in labels)
