"""Schedules: fire times, catchup after a sleep, a tick submitted once across restarts and
across two machines, the sleeping loop, and the crontab line. Time is an injected clock."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from job_waits import patience
from sweep_fakes import BASE, Clock, FakeCloud, moto_backend

from orchestrator import schedule as schedules
from orchestrator import spec
from orchestrator import sweep as sweeps
from orchestrator.errors import InputError
from orchestrator.ledger import Ledger
from orchestrator.processes import process_alive

ROOT = Path(__file__).resolve().parents[1]

NIGHTLY = """\
sweep: nightly
base: base.yaml
grid:
  training.batch_size: [16, 32]
concurrency: 4
schedule: {cron: "0 3 * * *", catchup: CATCHUP}
"""


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


def load(tmp_path: Path, catchup: str = "latest", extra: str = "") -> spec.SweepSpec:
    (tmp_path / "base.yaml").write_text(BASE)
    path = tmp_path / "nightly.yaml"
    path.write_text(NIGHTLY.replace("CATCHUP", catchup) + extra)
    return spec.load_sweep(path)


def at(clock: Clock, when: datetime) -> None:
    clock.now = when.timestamp()


# --- fire times and catchup ---------------------------------------------------------------------


def test_next_fires_in_utc_and_in_a_time_zone(tmp_path):
    sweep = load(tmp_path)
    assert schedules.next_fires(sweep.schedule, utc(2026, 1, 5, 3, 0), 3) == [
        utc(2026, 1, 6, 3), utc(2026, 1, 7, 3), utc(2026, 1, 8, 3)]
    paris = load(tmp_path, extra="").schedule.model_copy(update={"timezone": "Europe/Paris"})
    # 03:00 in Paris is 02:00 UTC in winter and 01:00 UTC in summer.
    assert schedules.next_fires(paris, utc(2026, 1, 5, 12), 1) == [utc(2026, 1, 6, 2)]
    assert schedules.next_fires(paris, utc(2026, 7, 5, 12), 1) == [utc(2026, 7, 6, 1)]


def test_first_evaluation_owes_only_an_on_time_tick(tmp_path):
    schedule = load(tmp_path).schedule
    assert schedules.due(schedule, utc(2026, 1, 5, 3, 4), None).submit == [utc(2026, 1, 5, 3)]
    late = schedules.due(schedule, utc(2026, 1, 5, 3, 6), None)
    assert late.submit == [] and late.newest is None


@pytest.mark.parametrize("catchup", ["latest", "all", "none"])
def test_first_evaluation_owes_only_the_tick_due_now_whatever_the_catchup(tmp_path, catchup):
    schedule = load(tmp_path, catchup).schedule.model_copy(update={"cron": "* * * * *"})
    first = schedules.due(schedule, utc(2026, 1, 5, 12, 3, 20), None)
    assert first.submit == [utc(2026, 1, 5, 12, 3)] and first.skipped == []
    # Later evaluations count from `since` when no tick was ever handled.
    later = schedules.due(schedule, utc(2026, 1, 5, 12, 6, 10), None, since=utc(2026, 1, 5, 12, 3, 20))
    assert sorted(later.submit + later.skipped) == [utc(2026, 1, 5, 12, m) for m in (4, 5, 6)]


@pytest.mark.parametrize("catchup, submitted", [
    ("latest", [utc(2026, 1, 8, 3)]),
    ("all", [utc(2026, 1, 6, 3), utc(2026, 1, 7, 3), utc(2026, 1, 8, 3)]),
    ("none", []),
])
def test_catchup_after_three_missed_nights(tmp_path, catchup, submitted):
    schedule = load(tmp_path, catchup).schedule
    found = schedules.due(schedule, utc(2026, 1, 8, 10, 30), utc(2026, 1, 5, 3))
    assert found.submit == submitted
    assert sorted(found.submit + found.skipped) == [utc(2026, 1, 6, 3), utc(2026, 1, 7, 3), utc(2026, 1, 8, 3)]
    assert found.newest == utc(2026, 1, 8, 3)


def test_catchup_none_still_submits_a_tick_on_time(tmp_path):
    schedule = load(tmp_path, "none").schedule
    assert schedules.due(schedule, utc(2026, 1, 8, 3, 2), utc(2026, 1, 5, 3)).submit == [utc(2026, 1, 8, 3)]


def test_catchup_all_is_bounded(tmp_path):
    schedule = load(tmp_path, "all", extra="").schedule.model_copy(update={"max_catchup": 2})
    found = schedules.due(schedule, utc(2026, 1, 20, 4), utc(2026, 1, 5, 3))
    assert found.submit == [utc(2026, 1, 19, 3), utc(2026, 1, 20, 3)] and len(found.skipped) == 13


def test_a_very_long_absence_is_scanned_boundedly(tmp_path, monkeypatch):
    from orchestrator.schedule import cron

    monkeypatch.setattr(cron, "MAX_SCAN", 50)
    schedule = load(tmp_path).schedule.model_copy(update={"cron": "* * * * *"})
    found = schedules.due(schedule, utc(2026, 3, 1), utc(2026, 1, 1))
    assert found.truncated and found.submit == [utc(2026, 3, 1)] and len(found.skipped) == 49


# --- the scheduler ------------------------------------------------------------------------------


@pytest.fixture
def cloud_rig(tmp_path, orch_home):
    ledger = Ledger()
    return ledger, FakeCloud(ledger), Clock()


def test_a_tick_admits_by_quota_as_sweep_run_does(tmp_path, cloud_rig):
    """`schedule run`/`tick` build each tick sweep's runner with the sweeps' admission
    (`sweep.admission.for_sweep`): a quota of 1 lets one job of the tick's two through, and a
    quota of 0 (the default, no applied value) stops the tick with exit 2 before any submit."""
    from test_quotas import _clients

    ledger, _, clock = cloud_rig
    answers: list = []

    class QuotaCloud(FakeCloud):
        def quota_clients(self, attempts=None):
            return answers[-1][:2]

    cloud = QuotaCloud(ledger)
    answers.append(_clients({"ml.trn1.2xlarge for training job usage": ("L-11111111", 1)}))
    at(clock, utc(2026, 1, 5, 3, 0, 30))
    report = schedules.Scheduler(load(tmp_path), cloud, ledger, clock=clock, sleep=clock.sleep).evaluate()
    [progress] = report.progress
    assert len(cloud.jobs) == 1 and progress.waiting_reason.startswith("waiting for quota: ml.trn1.2xlarge")
    assert any("quota: ml.trn1.2xlarge: needs 1 instances" in note for note in report.notes)

    answers.append(_clients({}, defaults={"ml.trn1.2xlarge for training job usage": ("L-11111111", 0)}))
    at(clock, utc(2026, 1, 6, 3, 0, 30))
    fresh = QuotaCloud(ledger)
    with pytest.raises(InputError) as refused:
        schedules.Scheduler(load(tmp_path), fresh, ledger, clock=clock, sleep=clock.sleep).evaluate()
    assert refused.value.exit_code == 2 and "L-11111111" in refused.value.message
    assert fresh.jobs == {}


def test_a_tick_is_submitted_once_across_restarts(tmp_path, cloud_rig):
    ledger, cloud, clock = cloud_rig
    sweep = load(tmp_path)
    at(clock, utc(2026, 1, 5, 3, 0, 30))
    report = schedules.Scheduler(sweep, cloud, ledger, clock=clock, sleep=clock.sleep).evaluate()
    [sweep_id] = report.planned
    assert re.fullmatch(r"nightly-[0-9a-f]{8}-202601050300", sweep_id)
    assert sorted(cloud.creates) == sorted(f"{sweep_id}-{t.trial_id}" for t in sweeps.expand(sweep)[0])
    for name in cloud.creates:
        assert len(name) <= 63
        assert {t["Key"]: t["Value"] for t in cloud.jobs[name]["request"]["Tags"]}["orchestrator:sweep"] == sweep_id
    for minute in (1, 2, 30):
        at(clock, utc(2026, 1, 5, 3, minute))
        again = schedules.Scheduler(load(tmp_path), cloud, ledger, clock=clock, sleep=clock.sleep).evaluate()
        assert again.planned == []
    assert set(cloud.creates.values()) == {1} and len(cloud.creates) == 2
    cloud.finish_all()
    at(clock, utc(2026, 1, 5, 4))
    done = schedules.Scheduler(sweep, cloud, ledger, clock=clock, sleep=clock.sleep).evaluate()
    assert [p.done for p in done.progress] == [True]
    assert schedules.Scheduler(sweep, cloud, ledger, clock=clock).state()["active"] == []


def test_a_crash_between_saving_a_tick_and_its_bookkeeping_replans_the_same_tick(tmp_path, cloud_rig):
    ledger, cloud, clock = cloud_rig
    sweep = load(tmp_path)
    at(clock, utc(2026, 1, 5, 3, 0, 30))
    planned = sweeps.plan(sweep, tick=utc(2026, 1, 5, 3))
    sweeps.save(planned, ledger)  # the process died here: kv still says nothing
    report = schedules.Scheduler(sweep, cloud, ledger, clock=clock, sleep=clock.sleep).evaluate()
    assert report.planned == [planned.sweep_id]
    assert len(ledger.entries(sweep_id=planned.sweep_id)) == 2 and len(cloud.creates) == 2


def test_a_tick_already_run_by_another_process_is_busy_not_an_error(tmp_path, cloud_rig):
    ledger, cloud, clock = cloud_rig
    sweep = load(tmp_path)
    at(clock, utc(2026, 1, 5, 3, 0, 30))
    planned = sweeps.plan(sweep, tick=utc(2026, 1, 5, 3))
    sweeps.save(planned, ledger)  # saved, bookkeeping lost, and a `sweep resume` of it runs
    with sweeps.runner_lock(planned.sweep_id):
        report = schedules.Scheduler(sweep, cloud, ledger, clock=clock, sleep=clock.sleep).evaluate()
    assert report.planned == [] and report.busy == [planned.sweep_id] and cloud.creates == Counter()
    assert schedules.Scheduler(sweep, cloud, ledger, clock=clock).state()["active"] == [planned.sweep_id]


def test_after_a_sleep_catchup_latest_submits_only_the_newest_tick(tmp_path, cloud_rig):
    ledger, cloud, clock = cloud_rig
    sweep = load(tmp_path)
    scheduler = schedules.Scheduler(sweep, cloud, ledger, clock=clock, sleep=clock.sleep)
    at(clock, utc(2026, 1, 5, 3, 1))
    scheduler.evaluate()
    at(clock, utc(2026, 1, 8, 9))  # the laptop was closed for three days
    report = scheduler.evaluate()
    assert [p[-12:] for p in report.planned] == ["202601080300"]
    assert report.skipped == [utc(2026, 1, 6, 3), utc(2026, 1, 7, 3)]
    assert len(cloud.creates) == 4


@pytest.mark.parametrize("catchup", ["latest", "all"])
def test_a_new_schedule_submits_no_tick_from_before_it_existed(tmp_path, cloud_rig, catchup):
    """The QA case: cron `* * * * *`; the first `schedule tick` submitted the last five
    minutes' ticks (all) or reported four of them skipped (latest)."""
    ledger, cloud, clock = cloud_rig
    sweep = load(tmp_path, catchup)
    sweep = sweep.model_copy(update={"schedule": sweep.schedule.model_copy(update={"cron": "* * * * *"})})
    scheduler = schedules.Scheduler(sweep, cloud, ledger, clock=clock, sleep=clock.sleep)
    at(clock, utc(2026, 1, 5, 12, 3, 20))
    first = scheduler.evaluate()
    assert [p[-12:] for p in first.planned] == ["202601051203"] and first.skipped == []
    assert scheduler.state()["since"] == utc(2026, 1, 5, 12, 3, 20).isoformat()
    assert len(cloud.creates) == 2
    # Later, missed ticks follow `catchup` as documented.
    at(clock, utc(2026, 1, 5, 12, 6, 5))
    later = scheduler.evaluate()
    owed = {"all": ["202601051204", "202601051205", "202601051206"], "latest": ["202601051206"]}[catchup]
    assert [p[-12:] for p in later.planned] == owed
    assert later.skipped == ([] if catchup == "all" else [utc(2026, 1, 5, 12, 4), utc(2026, 1, 5, 12, 5)])


def test_a_tick_missed_after_a_first_evaluation_with_none_due_is_caught_up(tmp_path, cloud_rig):
    ledger, cloud, clock = cloud_rig
    scheduler = schedules.Scheduler(load(tmp_path), cloud, ledger, clock=clock, sleep=clock.sleep)
    at(clock, utc(2026, 1, 5, 10))  # nothing due: the schedule starts owing ticks from now
    assert scheduler.evaluate().planned == [] and "last" not in scheduler.state()
    at(clock, utc(2026, 1, 6, 9))  # the laptop slept through 03:00
    report = scheduler.evaluate()
    assert [p[-12:] for p in report.planned] == ["202601060300"] and report.skipped == []


def test_two_machines_submit_each_tick_job_once(tmp_path, orch_home, moto_server):
    import boto3

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="sweep-bucket")
    sweep = load(tmp_path)
    creates: Counter = Counter()
    clock = Clock()
    at(clock, utc(2026, 1, 5, 3, 0, 20))
    reports = []
    for laptop in ("a", "b"):
        ledger = Ledger(tmp_path / f"laptop-{laptop}.sqlite3")
        backend, _ = moto_backend(ledger, creates)
        scheduler = schedules.Scheduler(sweep, backend, ledger, clock=clock, sleep=clock.sleep,
                                        runner_options={"count_elsewhere": False})
        reports.append(scheduler.evaluate())
        # Laptop b finds laptop a's jobs in SageMaker (moto completes them at once) and takes
        # their state from there instead of submitting them again.
        expected = {"submitted"} if laptop == "a" else {"completed"}
        assert {e.status for e in ledger.entries(sweep_id=reports[-1].planned[0])} == expected
    assert reports[0].planned == reports[1].planned
    assert len(creates) == 2 and set(creates.values()) == {1}


def test_run_sleeps_in_slices_and_wakes_at_the_tick(tmp_path, cloud_rig):
    ledger, cloud, clock = cloud_rig
    at(clock, utc(2026, 1, 5, 2, 50))
    reports = []
    scheduler = schedules.Scheduler(load(tmp_path), cloud, ledger, clock=clock, sleep=clock.sleep,
                                    on_report=reports.append)
    scheduler.run(max_passes=2)
    assert reports[0].planned == [] and reports[0].next_fire == utc(2026, 1, 5, 3)
    assert len(reports[1].planned) == 1
    assert max(clock.sleeps) <= schedules.MAX_SLEEP_SECONDS and len(clock.sleeps) == 10
    assert clock.now == utc(2026, 1, 5, 3).timestamp()


def test_a_sweep_without_schedule_is_refused(tmp_path, cloud_rig):
    ledger, cloud, clock = cloud_rig
    (tmp_path / "base.yaml").write_text(BASE)
    path = tmp_path / "plain.yaml"
    path.write_text("sweep: plain\nbase: base.yaml\n")
    with pytest.raises(InputError):
        schedules.Scheduler(spec.load_sweep(path), cloud, ledger)


# --- the command line ---------------------------------------------------------------------------


def test_crontab_line_calls_schedule_tick_with_absolute_paths(tmp_path, orch_home):
    sweep = load(tmp_path)
    comment, zone, line = schedules.crontab_line(sweep, project=ROOT, python="/opt/py/bin/python3").splitlines()
    assert comment.startswith("# orchestrator: sweep nightly")
    assert zone == "CRON_TZ=UTC"  # the machine need not run in UTC
    assert line.startswith("0 3 * * * cd ")
    assert f"cd {ROOT} &&" in line and f"ORCHESTRATOR_HOME={orch_home}" in line
    assert "/opt/py/bin/python3 -m orchestrator schedule tick " + str((tmp_path / "nightly.yaml").resolve()) in line
    assert line.endswith(f">> {orch_home / 'schedules' / 'nightly.log'} 2>&1")


def test_crontab_line_of_a_sweep_not_loaded_from_a_file_says_how_to_load_it(tmp_path, orch_home):
    load(tmp_path)
    # Text loaded without a file name: a crontab line must not point at "<string>".
    sweep = spec.loads_sweep((tmp_path / "nightly.yaml").read_text(), base_dir=tmp_path)
    assert sweep.path is None
    with pytest.raises(InputError, match="was not loaded from a file") as info:
        schedules.crontab_line(sweep)
    assert "spec.load_sweep(PATH)" in info.value.hint and "schedule crontab SWEEP.yaml" in info.value.hint


def test_crontab_line_works_from_any_directory(tmp_path, orch_home, monkeypatch):
    load(tmp_path)
    monkeypatch.chdir(tmp_path)
    line = schedules.crontab_line(spec.load_sweep("nightly.yaml")).splitlines()[-1]
    # The package's folder and this interpreter, not the directory `crontab` was run from.
    assert f"PYTHONPATH={ROOT} " in line and f"cd {ROOT} &&" in line and f"PYTHONPATH={tmp_path}" not in line
    assert f" {Path(sys.executable).absolute()} -m orchestrator schedule tick {tmp_path / 'nightly.yaml'} " in line
    # Run the entry's command as cron would (bare environment, cwd /), asking for `next`
    # instead of `tick` so nothing is submitted.
    command = line.split(" ", 5)[5].replace(" schedule tick ", " schedule next ").split(" >> ")[0]
    done = subprocess.run(["sh", "-c", command + " -n 1"], capture_output=True, text=True, timeout=patience(120), cwd="/",
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"\d{4}-\d\d-\d\d 03:00 UTC\n", done.stdout)


def test_crontab_line_carries_the_aws_profile_and_region_in_use(tmp_path, orch_home, monkeypatch):
    """Cron's bare environment loses a named (or SSO) profile: every tick failed, visible only
    in the log. The entry sets the profile, the config file and the region; run as cron runs
    it, the program sees them."""
    load(tmp_path)
    config = tmp_path / "aws config"
    config.write_text("[profile research]\nregion = eu-west-1\n"
                      "[profile sso]\nregion = eu-west-1\nsso_session = corp\n[sso-session corp]\n"
                      "sso_start_url = https://127.0.0.1:9/start\nsso_region = eu-west-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "research")
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    comment, _, line = schedules.crontab_line(spec.load_sweep(tmp_path / "nightly.yaml")).splitlines()
    assert f"AWS_PROFILE=research AWS_CONFIG_FILE='{config}'" in line and "AWS_REGION=eu-west-1 " in line
    assert "Note:" not in comment
    probe = ("import boto3; s = boto3.session.Session(); import os; "
             "print(s.profile_name, s.region_name, os.environ['AWS_REGION'])")
    command = line.split(" ", 5)[5].split(" -m orchestrator ")[0] + f" -c {shlex.quote(probe)}"
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=patience(120), cwd="/",
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["research", "eu-west-1", "eu-west-1"]
    # Keys in the environment are not copied into crontab; an SSO profile needs its login.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_PROFILE", "sso")
    comment, _, line = schedules.crontab_line(spec.load_sweep(tmp_path / "nightly.yaml")).splitlines()
    assert "AKIAEXAMPLE" not in line and "AWS_ACCESS_KEY_ID" not in line
    assert "not written into crontab: give cron a profile" in comment and "aws sso login" in comment


def test_crontab_line_sets_cron_tz_and_quotes_paths(tmp_path, orch_home):
    load(tmp_path, extra="")
    path = tmp_path / "nightly.yaml"
    path.write_text(NIGHTLY.replace("CATCHUP", "latest").replace("catchup: latest}",
                                                                 "catchup: latest, timezone: Europe/Paris}"))
    sweep = spec.load_sweep(path)
    home = tmp_path / "my home"
    comment, zone, line = schedules.crontab_line(sweep, project=tmp_path / "a b", python="/opt/my py/python",
                                                 orchestrator_home=home).splitlines()
    assert zone == "CRON_TZ=Europe/Paris" and "Europe/Paris" in comment and "machine's zone" in comment
    assert line.startswith("0 3 * * * cd ")
    assert f"'{tmp_path / 'a b'}'" in line and "'/opt/my py/python' -m orchestrator" in line
    assert f"ORCHESTRATOR_HOME='{home}'" in line


@pytest.mark.parametrize("cron, token", [("0 0 L * *", "L"), ("0 3 ? * MON", "?"), ("0 3 * * MON#1", "#")])
def test_crontab_refuses_what_system_cron_cannot_read_but_schedule_next_takes_it(tmp_path, orch_home, cron, token):
    load(tmp_path)
    path = tmp_path / "nightly.yaml"
    path.write_text(NIGHTLY.replace('cron: "0 3 * * *"', f'cron: "{cron}"').replace("CATCHUP", "latest"))
    sweep = spec.load_sweep(path)
    with pytest.raises(InputError) as info:
        schedules.crontab_line(sweep)
    assert f"uses {token}" in info.value.message and info.value.message.startswith(f"{path}:")
    assert "schedule run" in info.value.hint
    # croniter reads it: `schedule run` and `schedule next` work with the same expression.
    assert len(schedules.next_fires(sweep.schedule, datetime(2026, 1, 1, tzinfo=timezone.utc), 2)) == 2
    # A month name with an L in it is not the L field.
    path.write_text(NIGHTLY.replace('cron: "0 3 * * *"', 'cron: "0 3 * JUL *"').replace("CATCHUP", "latest"))
    assert schedules.crontab_line(spec.load_sweep(path)).splitlines()[-1].startswith("0 3 * JUL * cd ")


def test_crontab_of_a_sweep_without_schedule_names_the_file(tmp_path, orch_home):
    load(tmp_path)
    path = tmp_path / "nightly.yaml"
    path.write_text(NIGHTLY.replace('schedule: {cron: "0 3 * * *", catchup: CATCHUP}\n', ""))
    with pytest.raises(InputError) as info:
        schedules.crontab_line(spec.load_sweep(path))
    assert info.value.message.startswith(f"{path}:") and "has no schedule" in info.value.message
    done = _cli("schedule", "crontab", str(path), env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 2 and f"error: {path}:" in done.stderr and "Traceback" not in done.stderr
    # `schedule next` and the scheduler say it the same way (one check: schedule.require_schedule).
    done = _cli("schedule", "next", str(path), env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 2 and f"error: {path}:" in done.stderr and "has no schedule" in done.stderr
    with pytest.raises(InputError, match="has no schedule"):
        schedules.Scheduler(spec.load_sweep(path), backend=None, ledger=None)


def _cli(*args, env):
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          timeout=patience(120), cwd=ROOT, env=env)


def test_cli_schedule_next_crontab_and_errors(tmp_path, orch_home):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    load(tmp_path)
    path = str(tmp_path / "nightly.yaml")
    shown = _cli("schedule", "next", path, "-n", "3", env=env)
    assert shown.returncode == 0, shown.stderr
    times = [datetime.strptime(line[:16], "%Y-%m-%d %H:%M") for line in shown.stdout.splitlines()]
    assert len(times) == 3 and all(t.hour == 3 and t.minute == 0 for t in times) and times == sorted(times)
    crontab = _cli("schedule", "crontab", path, env=env)
    assert crontab.returncode == 0 and "schedule tick" in crontab.stdout and (orch_home / "schedules").is_dir()
    (tmp_path / "nightly.yaml").write_text(NIGHTLY.replace("0 3 * * *", "0 25 * * *").replace("CATCHUP", "latest"))
    bad = _cli("schedule", "next", path, env=env)
    assert bad.returncode == 2 and "nightly.yaml:6:" in bad.stderr and "cron" in bad.stderr


def test_cli_schedule_next_refuses_a_cron_that_never_fires(tmp_path, orch_home):
    # Feb 31: croniter finds no fire time; `schedule next` must say so, not crash.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "nightly.yaml").write_text(NIGHTLY.replace("0 3 * * *", "0 3 31 2 *").replace("CATCHUP", "latest"))
    for command in ("next", "tick"):
        bad = _cli("schedule", command, str(tmp_path / "nightly.yaml"), env=env)
        assert bad.returncode == 2 and "nightly.yaml:6:" in bad.stderr, bad.stderr
        assert "never fires" in bad.stderr and "Traceback" not in bad.stderr


def test_cli_schedule_tick_submits_the_current_minute_once(tmp_path, orch_home, moto_server):
    import boto3

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="sweep-bucket")
    load(tmp_path, extra="")
    path = tmp_path / "nightly.yaml"
    path.write_text(path.read_text().replace("0 3 * * *", "* * * * *").replace("concurrency: 4", "concurrency: 1"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    first = _cli("schedule", "tick", str(path), "--no-follow", env=env)
    assert first.returncode == 0, first.stderr
    sweep_id = re.search(r"tick planned: sweep (nightly-[0-9a-f]{8}-\d{12})", first.stdout).group(1)
    assert "followed in the background" not in first.stdout
    # Again (as cron would, maybe within the same minute): nothing new for that tick; the
    # unfinished tick sweep goes to a background runner, which ends once moto's jobs have.
    second = _cli("schedule", "tick", str(path), "--poll", "0.1", env=env)
    assert second.returncode == 0, second.stderr
    assert re.search(rf"{sweep_id}: followed in the background \(pid \d+", second.stdout)
    # (If the minute turned between the two calls, the new minute's tick is followed too.)
    deadline = time.monotonic() + patience(60)
    for pid in map(int, re.findall(r"followed in the background \(pid (\d+)", second.stdout)):
        while process_alive(pid):
            assert time.monotonic() < deadline, (orch_home / "sweeps" / f"{sweep_id}.log").read_text()
            time.sleep(0.2)
    sm = boto3.client("sagemaker", region_name="us-east-1")
    names = [j["TrainingJobName"] for j in sm.list_training_jobs(MaxResults=100)["TrainingJobSummaries"]]
    assert len([n for n in names if n.startswith(sweep_id)]) == 2
    ledger = Ledger(orch_home / "ledger.sqlite3")
    entries = ledger.entries(sweep_id=sweep_id)
    assert {e.job_name for e in entries} == {n for n in names if n.startswith(sweep_id)}
    assert {e.status for e in entries} == {"completed"}


# --- characters cron treats specially in the command field (crontab(5), cronie do_command.c) ------


def cron_hands_the_shell(field: str) -> str:
    """What cron passes to `sh -c` for an entry's command field: a port of the loop in cronie's
    src/do_command.c (Vixie cron's): a backslash escapes the next character and is dropped only
    before a `%`; the first unescaped `%` ends the command (the rest is stdin)."""
    out: list[str] = []
    escaped = False
    for char in field:
        if escaped:
            if char == "%":
                out[-1] = "%"
            else:
                out.append(char)
            escaped = False
            continue
        if char == "%":
            break
        out.append(char)
        escaped = char == "\\"
    return "".join(out)


FAKE_PYTHON = """#!{python}
import json, os, sys
with open(os.environ["RECORD"], "w") as handle:
    json.dump({{"argv": sys.argv[1:], "cwd": os.getcwd(), "home": os.environ["ORCHESTRATOR_HOME"],
               "pythonpath": os.environ["PYTHONPATH"]}}, handle)
"""


@pytest.mark.parametrize("name", [
    "50%", "%", "%%x", "a\\%b", "a\\\\%b", "back\\slash", "trailing\\", "it's", 'say "hi"', "$HOME `id` $(id)",
    "a;b&c|d", "glob*?[x]", "#hash", "~tilde", "(paren){brace}<angle>!", "tab\there", "ünï cödé", "a\\'%\\",
])
def test_the_crontab_entry_gives_the_shell_every_path_exactly(tmp_path, orch_home, monkeypatch, name):
    # QA: a path with `%` was printed unescaped; cron cut the command there.
    import json

    weird = tmp_path / name
    project, home, interpreter_dir = weird / "project", weird / "home", weird / "bin"
    for folder in (project, home / "schedules", interpreter_dir):
        folder.mkdir(parents=True)
    (weird / "base.yaml").write_text(BASE)
    (weird / "nightly.yaml").write_text(NIGHTLY.replace("CATCHUP", "latest"))
    python = interpreter_dir / "python"
    python.write_text(FAKE_PYTHON.format(python=sys.executable))
    python.chmod(0o755)
    entry = schedules.crontab_line(spec.load_sweep(weird / "nightly.yaml"), project=project, python=str(python),
                                   orchestrator_home=home).splitlines()[-1]
    expr, field = " ".join(entry.split(" ")[:5]), entry.split(" ", 5)[5]
    assert expr == "0 3 * * *" and "\n" not in field
    record = tmp_path / "record.json"
    done = subprocess.run(["/bin/sh", "-c", cron_hands_the_shell(field)], env={"RECORD": str(record),
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=patience(60))
    assert done.returncode == 0, (done.stderr, (home / "schedules" / "nightly.log").read_text())
    got = json.loads(record.read_text())
    assert got == {"argv": ["-m", "orchestrator", "schedule", "tick", str(weird / "nightly.yaml")],
                   "cwd": str(project), "home": str(home), "pythonpath": str(project)}


@pytest.mark.parametrize("char", ["\n", "\r"])
def test_a_path_that_would_break_the_crontab_line_is_refused(tmp_path, orch_home, char):
    folder = tmp_path / f"line{char}break"
    folder.mkdir()
    (folder / "base.yaml").write_text(BASE)
    (folder / "nightly.yaml").write_text(NIGHTLY.replace("CATCHUP", "latest"))
    with pytest.raises(InputError, match="which ends a crontab line: cron cannot run it"):
        schedules.crontab_line(spec.load_sweep(folder / "nightly.yaml"))


def test_the_cron_emulation_follows_crontab5():
    assert cron_hands_the_shell("echo a%b%c") == "echo a"
    assert cron_hands_the_shell("echo a\\%b") == "echo a%b"
    assert cron_hands_the_shell("echo a\\\\%b") == "echo a\\\\"  # the second backslash does not escape the %
    assert cron_hands_the_shell("echo a\\nb") == "echo a\\nb"


# --- daylight saving time --------------------------------------------------------------------------


def _zoned(tmp_path, cron: str, zone: str = "America/New_York"):
    return load(tmp_path).schedule.model_copy(update={"cron": cron, "timezone": zone})


def test_a_set_time_in_the_hour_clocks_go_back_fires_once(tmp_path):
    # QA: 01:30 in America/New_York fired twice on 2027-11-07 (05:30 and 06:30 UTC), each tick
    # its own sweep: the sweep ran and cost twice.
    schedule = _zoned(tmp_path, "30 1 * * *")
    assert schedules.next_fires(schedule, utc(2027, 11, 6, 12), 3) == [
        utc(2027, 11, 7, 5, 30), utc(2027, 11, 8, 6, 30), utc(2027, 11, 9, 6, 30)]
    ticks, _ = schedules.ticks_between(schedule, utc(2027, 11, 6, 12), utc(2027, 11, 8, 12))
    assert ticks == [utc(2027, 11, 7, 5, 30), utc(2027, 11, 8, 6, 30)]
    # Weekly and @daily-style schedules in a zone that goes back at 02:00 -> 01:00 the same way.
    schedule = _zoned(tmp_path, "15 1 * * 0")
    ticks, _ = schedules.ticks_between(schedule, utc(2027, 11, 1), utc(2027, 11, 10))
    assert ticks == [utc(2027, 11, 7, 5, 15)]


def test_the_scheduler_plans_one_sweep_on_the_night_clocks_go_back(tmp_path, orch_home):
    text = NIGHTLY.replace("CATCHUP", "all").replace("0 3 * * *", "30 1 * * *").replace(
        "catchup: all}", "catchup: all, timezone: America/New_York}")
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "nightly.yaml").write_text(text)
    ledger = Ledger()
    clock = Clock()
    at(clock, utc(2027, 11, 7, 5, 0))
    scheduler = schedules.Scheduler(spec.load_sweep(tmp_path / "nightly.yaml"), FakeCloud(ledger), ledger,
                                    clock=clock, sleep=clock.sleep)
    planned = []
    for when in (utc(2027, 11, 7, 5, 0), utc(2027, 11, 7, 5, 31), utc(2027, 11, 7, 6, 31), utc(2027, 11, 7, 8)):
        at(clock, when)
        report = scheduler.evaluate()
        planned += report.planned
        assert report.skipped == []
    assert len(planned) == 1 and planned[0].endswith("-202711070530")


def test_the_skipped_hour_in_spring_still_fires_once_at_the_first_time_that_exists(tmp_path):
    # 02:30 does not exist on 2027-03-14 in New York: cron runs it when clocks reach 03:00.
    schedule = _zoned(tmp_path, "30 2 * * *")
    assert schedules.next_fires(schedule, utc(2027, 3, 13, 12), 3) == [
        utc(2027, 3, 14, 7, 0), utc(2027, 3, 15, 6, 30), utc(2027, 3, 16, 6, 30)]
    ticks, _ = schedules.ticks_between(schedule, utc(2027, 3, 13, 12), utc(2027, 3, 15, 12))
    assert ticks == [utc(2027, 3, 14, 7, 0), utc(2027, 3, 15, 6, 30)]


@pytest.mark.parametrize("cron, count", [("0 * * * *", 4), ("*/30 * * * *", 7), ("@hourly", 4)])
def test_schedules_by_the_clock_run_through_both_hours_as_cron_does(tmp_path, cron, count):
    # cronie runs jobs with * in the minute or hour field normally in the repeated hour.
    ticks, _ = schedules.ticks_between(_zoned(tmp_path, cron), utc(2027, 11, 7, 4, 59), utc(2027, 11, 7, 8, 29))
    assert len(ticks) == count and len(set(ticks)) == count


# --- Ctrl-C ---------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_ctrl_c_in_schedule_run_says_what_it_interrupted_and_how_to_go_on(tmp_path, orch_home):
    # QA: Ctrl-C during `schedule run` exited 130 with no message.
    import signal

    (tmp_path / "base.yaml").write_text("name: nightly-local\nbackend: local\n")
    path = tmp_path / "nightly.yaml"
    path.write_text(NIGHTLY.replace("CATCHUP", "latest").replace("0 3 * * *", "0 3 1 1 *"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(orch_home))
    run = subprocess.Popen([sys.executable, "-m", "orchestrator", "schedule", "run", str(path)], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           # Python turns SIGINT into KeyboardInterrupt only where it is not ignored.
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = run.stdout.readline()
    assert "next tick:" in first, first + run.stderr.read()
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=patience(60))
    assert run.returncode == 130
    assert "Traceback" not in err
    assert re.search(r"interrupted \(Ctrl-C\) while sleeping until the next tick, \d{4}-01-01 03:00 UTC\n", err), err
    assert f"`python -m orchestrator schedule run {path}` continues it (ticks missed meanwhile follow catchup: " \
           "latest)" in err


def test_the_scheduler_says_what_it_is_doing(tmp_path, orch_home):
    ledger = Ledger()
    cloud = FakeCloud(ledger)
    clock = Clock()
    at(clock, utc(2026, 1, 5, 3, 1))
    seen = []

    def sleep(seconds):
        seen.append(scheduler.doing)
        raise KeyboardInterrupt

    scheduler = schedules.Scheduler(load(tmp_path), cloud, ledger, clock=clock, sleep=sleep)
    with pytest.raises(KeyboardInterrupt):
        scheduler.run(poll_seconds=5)
    assert seen == ["waiting to poll 1 unfinished tick sweep(s)"]
    assert scheduler.unfinished() == [sweeps.identify(scheduler.sweep, utc(2026, 1, 5, 3)).sweep_id]


@pytest.mark.parametrize("alias", ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@hourly", "@midnight"])
def test_crontab_takes_the_aliases_system_cron_reads(tmp_path, orch_home, alias):
    # Issue 32: `schedule crontab` refused @yearly saying it "uses L" (the L of "yearly").
    sweep = load(tmp_path)
    text = (tmp_path / "nightly.yaml").read_text().replace('"0 3 * * *"', f'"{alias}"')
    (tmp_path / "nightly.yaml").write_text(text)
    line = schedules.crontab_line(spec.load_sweep(tmp_path / "nightly.yaml")).splitlines()[-1]
    assert line.startswith(f"{alias} cd "), (sweep.schedule.cron, line)
