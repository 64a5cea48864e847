"""Jobs belong to an AWS account (issue 33, item 1): a sweep resumed under another account's
credentials neither reads its jobs as lost nor creates them again; it names the account that
holds them and stops (exit 2). Two accounts on one moto server through STS AssumeRole (moto
maps the keys AssumeRole returns to the role's account)."""

from __future__ import annotations

import os
from collections import Counter

import moto_shim
import pytest
from sweep_fakes import SWEEP, cli_run, load, moto_backend, set_moto_status

from orchestrator import accounts
from orchestrator import sweep as sweeps
from orchestrator.errors import InputError
from orchestrator.ledger import Ledger

OTHER = "222222222222"


@pytest.fixture(autouse=True)
def _fresh_accounts():
    accounts.forget()
    yield
    accounts.forget()


def _as_other_account(monkeypatch) -> dict:
    """Switch this process's credentials to a role of account OTHER; returns them as env vars."""
    import boto3

    creds = boto3.client("sts", region_name="us-east-1").assume_role(
        RoleArn=f"arn:aws:iam::{OTHER}:role/other", RoleSessionName="other")["Credentials"]
    env = {"AWS_ACCESS_KEY_ID": creds["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
           "AWS_SESSION_TOKEN": creds["SessionToken"]}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    accounts.forget()
    # boto3's default session keeps the credentials it resolved first: a new one reads these.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    return env


def _sweep_in_flight(tmp_path, ledger, creates):
    backend, _ = moto_backend(ledger, creates)
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    runner = sweeps.Runner(definition, backend, ledger, sleep=lambda s: None, poll_seconds=0)
    runner.step()
    for name in creates:
        set_moto_status(name, "InProgress")
    return definition


def test_the_ledger_records_the_account_a_job_was_created_in(tmp_path, orch_home, bucket):
    ledger = Ledger()
    creates: Counter = Counter()
    definition = _sweep_in_flight(tmp_path, ledger, creates)
    rows = {e.job_name: e.account for e in ledger.entries(sweep_id=definition.sweep_id)}
    assert len(creates) == 2
    assert {rows[name] for name in creates} == {moto_shim.ACCOUNT}
    assert {a for n, a in rows.items() if n not in creates} == {None}  # planned: no job, no account


def test_another_accounts_credentials_never_read_a_job_as_lost_nor_submit_it_again(tmp_path, orch_home, bucket,
                                                                                monkeypatch):

    ledger = Ledger()
    creates: Counter = Counter()
    definition = _sweep_in_flight(tmp_path, ledger, creates)
    before = {e.job_name: (e.status, e.detail) for e in ledger.entries(sweep_id=definition.sweep_id)}
    _as_other_account(monkeypatch)
    backend, _ = moto_backend(ledger, creates)
    assert backend.account == OTHER
    runner = sweeps.Runner(definition, backend, ledger, sleep=lambda s: None, poll_seconds=0)
    with pytest.raises(InputError) as raised:
        runner.step()
    assert f"AWS account {moto_shim.ACCOUNT}" in raised.value.message and OTHER in raised.value.message
    assert ": lost (" not in str(runner.progress().events)
    assert {e.job_name: (e.status, e.detail) for e in ledger.entries(sweep_id=definition.sweep_id)} == before
    assert len(creates) == 2 and set(creates.values()) == {1}  # nothing created in either account


def test_a_row_left_submitting_is_not_created_under_another_account(tmp_path, orch_home, bucket, monkeypatch):
    """A create whose answer was lost under account A: under B, the submit must not create it
    (it may exist in A)."""
    ledger = Ledger()
    creates: Counter = Counter()
    backend, sm = moto_backend(ledger, creates)
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    runner = sweeps.Runner(definition, backend, ledger, sleep=lambda s: None, poll_seconds=0)
    sm.lose_next_answer = True
    runner.step()
    [left] = [e for e in ledger.entries(sweep_id=definition.sweep_id) if e.status == "submitting"]
    made = dict(creates)
    _as_other_account(monkeypatch)
    other, _ = moto_backend(ledger, creates)
    with pytest.raises(accounts.OtherAccount):
        other.submit(runner._prepare(runner.trials[left.trial_id], left))
    assert dict(creates) == made and ledger.get(left.job_name).status == "submitting"


def test_cli_sweep_resume_under_another_account_exits_2_naming_the_account(tmp_path, orch_home, bucket,
                                                                          monkeypatch):

    ledger = Ledger()
    creates: Counter = Counter()
    definition = _sweep_in_flight(tmp_path, ledger, creates)
    before = {e.job_name: (e.status, e.detail) for e in ledger.entries(sweep_id=definition.sweep_id)}
    env = dict(os.environ, **_as_other_account(monkeypatch))
    done = cli_run("sweep", "resume", definition.sweep_id, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"account {moto_shim.ACCOUNT}" in done.stderr and ": lost (" not in done.stdout + done.stderr
    assert {e.job_name: (e.status, e.detail) for e in Ledger().entries(sweep_id=definition.sweep_id)} == before
    assert len(creates) == 2
