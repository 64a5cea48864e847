"""`capacity offerings | reserve | plans` and `doctor --quotas` on a spec's training plan.

moto has no training plans: SageMaker is botocore's Stubber, whose expected parameters are the
requests we must build, and whose answers are shaped like the API reference's (the
SearchTrainingPlanOfferings, CreateTrainingPlan, ListTrainingPlans and DescribeTrainingPlan
pages). tests/aws_contract_hook.py checks every request and every answer against botocore's model.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from cli_harness import run_cli

from orchestrator import spec as specs
from orchestrator.capacity import offerings, plans

ROOT = Path(__file__).resolve().parents[1]
PREFERENCES = ROOT / "configs" / "vit-trn-preferences.yaml"
ACCOUNT = "123456789012"
UTC = dt.timezone.utc
START = dt.datetime(2026, 12, 14, 11, 30, tzinfo=UTC)


def plan_arn(name: str) -> str:
    return f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:training-plan/{name}"


def offering(offering_id: str, type_: str, count: int, fee: str, *, start=START, hours: int = 3,
             zone: str = "us-east-1a") -> dict:
    """One TrainingPlanOffering as the API reference's SearchTrainingPlanOfferings answer shows it."""
    end = start + dt.timedelta(hours=hours)
    return {"TrainingPlanOfferingId": offering_id, "TargetResources": ["training-job"],
            "RequestedStartTimeAfter": start - dt.timedelta(days=1), "DurationHours": hours, "DurationMinutes": 0,
            "UpfrontFee": fee, "CurrencyCode": "USD",
            "ReservedCapacityOfferings": [{"ReservedCapacityType": "Instance", "InstanceType": type_,
                                           "InstanceCount": count, "AvailabilityZone": zone, "DurationHours": hours,
                                           "DurationMinutes": 0, "StartTime": start, "EndTime": end}]}


def summary(name: str, status: str, *, type_: str = "ml.trn1.32xlarge", total: int = 2, available: int = 2,
            in_use: int = 0, start=START, hours: int = 48) -> dict:
    """A TrainingPlanSummary (ListTrainingPlans) / DescribeTrainingPlan answer, as the developer
    guide's example shows one (training-plan-details-using-api-cli-sdk)."""
    end = start + dt.timedelta(hours=hours)
    return {"TrainingPlanArn": plan_arn(name), "TrainingPlanName": name, "Status": status,
            "DurationHours": hours, "DurationMinutes": 0, "StartTime": start, "EndTime": end,
            "UpfrontFee": "1234.56", "CurrencyCode": "USD", "TotalInstanceCount": total,
            "AvailableInstanceCount": available, "InUseInstanceCount": in_use, "TargetResources": ["training-job"],
            "ReservedCapacitySummaries": [{
                "ReservedCapacityArn": f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:reserved-capacity/{name}-rc1",
                "ReservedCapacityType": "Instance", "InstanceType": type_, "TotalInstanceCount": total,
                "Status": status, "AvailabilityZone": "us-east-1a", "DurationHours": hours, "DurationMinutes": 0,
                "StartTime": start, "EndTime": end}]}


def searched(type_: str, count: int, hours: int = 3, **extra) -> dict:
    return {"InstanceType": type_, "InstanceCount": count, "DurationHours": hours,
            "TargetResources": ["training-job"], **extra}


@pytest.fixture
def sagemaker(monkeypatch):
    client = boto3.client("sagemaker", region_name="us-east-1")
    with Stubber(client) as stub:
        monkeypatch.setattr(plans, "client", lambda region: client)
        yield stub
        stub.assert_no_pending_responses()


def _stub_preference_searches(stub, **extra) -> None:
    # The spec: 2 x trn1.32xlarge, else 2 x trn1n.32xlarge, else 1 x trn2.48xlarge; 120 min + 30 min start-up: 3 h.
    stub.add_response("search_training_plan_offerings", {"TrainingPlanOfferings": [
        offering("tpo-trn1-dear", "ml.trn1.32xlarge", 2, "310.40"),
        offering("tpo-trn1-cheap", "ml.trn1.32xlarge", 2, "95.10", start=START + dt.timedelta(days=2))]},
        searched("ml.trn1.32xlarge", 2, **extra))
    stub.add_response("search_training_plan_offerings", {"TrainingPlanOfferings": [
        offering("tpo-trn2-mid", "ml.trn2.48xlarge", 1, "120.00", zone="us-east-1b")]},
        searched("ml.trn2.48xlarge", 1, **extra))


# --- capacity offerings -----------------------------------------------------------------------


def test_offerings_search_each_type_a_plan_holds_and_list_them_cheapest_first(orch_home, sagemaker, monkeypatch,
                                                                             capsys):
    _stub_preference_searches(sagemaker)
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(monkeypatch, capsys, "capacity", "offerings", str(PREFERENCES))
    assert code == 0, err
    # trn1n is not among the types a plan can hold: named with the reason, never asked about
    # (the Stubber would fail on a third search).
    assert "not searched: ml.trn1n.32xlarge: a training plan cannot hold it" in err
    ids = [line.split()[1] for line in out.splitlines() if line.strip().startswith("id ")]
    assert ids == ["tpo-trn1-cheap", "tpo-trn2-mid", "tpo-trn1-dear"]
    assert "fee 95.10 USD" in out and "on-demand bound 129.00 USD" in out  # 2 h x 2 x 32.25 USD/h
    assert "2026-12-16 11:30 -> 2026-12-16 14:30 UTC, 3 h, us-east-1a" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_offerings_json_and_dates_go_into_the_search(orch_home, sagemaker, monkeypatch, capsys):
    after, before = dt.datetime(2026, 12, 10, tzinfo=UTC), dt.datetime(2026, 12, 20, 12, 0, tzinfo=UTC)
    _stub_preference_searches(sagemaker, StartTimeAfter=after, EndTimeBefore=before)
    code, out, _ = run_cli(monkeypatch, capsys, "capacity", "offerings", str(PREFERENCES), "--start-after",
                           "2026-12-10", "--end-before", "2026-12-20T12:00", "--json")
    assert code == 0
    found = json.loads(out)
    assert [s["instance_type"] for s in found["searched"]] == ["ml.trn1.32xlarge", "ml.trn2.48xlarge"]
    assert found["skipped"][0]["instance_type"] == "ml.trn1n.32xlarge"
    assert [o["upfront_fee"] for o in found["offerings"]] == [95.10, 120.00, 310.40]
    first = found["offerings"][0]
    assert first["on_demand_bound_usd"] == pytest.approx(129.0)
    assert first["on_demand_same_window_usd"] == pytest.approx(32.25 * 2 * 3)


def test_a_bad_date_or_a_spec_off_sagemaker_is_exit_2_before_any_call(orch_home, sagemaker, monkeypatch, capsys,
                                                                       tmp_path):
    code, _, err = run_cli(monkeypatch, capsys, "capacity", "offerings", str(PREFERENCES), "--start-after", "soon")
    assert code == 2 and "'soon' is not a date" in err
    local = tmp_path / "local.yaml"
    local.write_text((ROOT / "configs" / "local-tiny.yaml").read_text())
    code, _, err = run_cli(monkeypatch, capsys, "capacity", "offerings", str(local))
    assert code == 2 and "training plans reserve SageMaker capacity" in err


def test_the_types_a_plan_holds_are_botocores_and_the_duration_covers_start_up(orch_home):
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    enum = model.operation_model("SearchTrainingPlanOfferings").input_shape.members["InstanceType"].enum
    assert offerings.plan_instance_types() == frozenset(enum)
    assert {"ml.trn1.32xlarge", "ml.trn2.48xlarge"} <= offerings.plan_instance_types()
    assert "ml.trn1n.32xlarge" not in offerings.plan_instance_types()
    loaded = specs.load(PREFERENCES)
    assert offerings.duration_hours(loaded) == 3  # ceil((120 + 30) / 60)
    exact = loaded.model_copy(update={"max_run_minutes": 150})
    assert offerings.duration_hours(exact) == 3  # 180 minutes: exactly 3 h
    assert offerings.duration_hours(loaded.model_copy(update={"max_run_minutes": 151})) == 4


# --- capacity reserve -------------------------------------------------------------------------


def test_reserve_off_a_terminal_without_yes_creates_nothing(orch_home, sagemaker, monkeypatch, capsys):
    _stub_preference_searches(sagemaker)  # and no CreateTrainingPlan: the Stubber would refuse one
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    code, out, err = run_cli(monkeypatch, capsys, "capacity", "reserve", str(PREFERENCES), "tpo-trn1-cheap")
    assert code == 2
    assert "fee 95.10 USD" in out and "2026-12-16 11:30 -> 2026-12-16 14:30 UTC" in out
    assert "nothing was created" in err and "--yes" in err


def test_reserve_asks_then_creates_and_prints_the_spec_line(orch_home, sagemaker, monkeypatch, capsys):
    _stub_preference_searches(sagemaker)
    arn = plan_arn("vit-trn-preferences-20261216")
    sagemaker.add_response("create_training_plan", {"TrainingPlanArn": arn},
                           {"TrainingPlanName": "vit-trn-preferences-20261216",
                            "TrainingPlanOfferingId": "tpo-trn1-cheap"})
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    asked = []
    monkeypatch.setattr("typer.confirm", lambda text, default=False: asked.append(text) or True)
    code, out, err = run_cli(monkeypatch, capsys, "capacity", "reserve", str(PREFERENCES), "tpo-trn1-cheap")
    assert code == 0, err
    assert asked == ["Reserve it for 95.10 USD?"]
    assert f"created training plan {arn}" in out
    assert f"    - {{type: ml.trn1.32xlarge, training_plan_arn: '{arn}'}}" in out
    assert "instance.preferences.0 (ml.trn1.32xlarge)" in out


def test_reserve_declined_creates_nothing_and_yes_skips_the_question(orch_home, sagemaker, monkeypatch, capsys,
                                                                     tmp_path):
    _stub_preference_searches(sagemaker)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr("typer.confirm", lambda text, default=False: False)
    code, out, _ = run_cli(monkeypatch, capsys, "capacity", "reserve", str(PREFERENCES), "tpo-trn2-mid")
    assert code == 0 and "not reserved; nothing was created" in out
    # A single-type spec, --yes, --name: the job-level line.
    single = tmp_path / "trn1.yaml"
    single.write_text((ROOT / "configs" / "vit-trn1-32xlarge.yaml").read_text())
    loaded = specs.load(single)
    sagemaker.add_response("search_training_plan_offerings", {"TrainingPlanOfferings": [
        offering("tpo-one", loaded.instance.type, loaded.instance.count, "80.00")]},
        searched(loaded.instance.type, loaded.instance.count, offerings.duration_hours(loaded)))
    sagemaker.add_response("create_training_plan", {"TrainingPlanArn": plan_arn("week-50")},
                           {"TrainingPlanName": "week-50", "TrainingPlanOfferingId": "tpo-one"})
    code, out, err = run_cli(monkeypatch, capsys, "capacity", "reserve", str(single), "tpo-one", "--name", "week-50",
                             "--yes")
    assert code == 0, err
    assert f"instance:\n  training_plan_arn: '{plan_arn('week-50')}'" in out


def test_reserve_refuses_an_unknown_offering_or_a_bad_name(orch_home, sagemaker, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, "capacity", "reserve", str(PREFERENCES), "tpo-x", "--name", "bad_name")
    assert code == 2 and "is not a training plan name" in err  # before any call
    _stub_preference_searches(sagemaker)
    code, _, err = run_cli(monkeypatch, capsys, "capacity", "reserve", str(PREFERENCES), "tpo-gone", "--yes")
    assert code == 2 and "'tpo-gone' is not among the offerings" in err


# --- capacity plans and doctor --quotas -------------------------------------------------------


def test_plans_lists_status_window_capacity_and_the_ledger_jobs_that_used_each(orch_home, sagemaker, monkeypatch,
                                                                               capsys):
    from orchestrator.ledger import Ledger

    ledger = Ledger()
    ledger.record_intent("vit-a-1234abcd", backend="sagemaker", region="us-east-1", spec_hash="0" * 64,
                         request={"ResourceConfig": {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 2,
                                                     "TrainingPlanArn": plan_arn("week-49")}})
    ledger.record_intent("vit-b-1234abcd", backend="sagemaker", region="us-east-1", spec_hash="1" * 64,
                         request={"ResourceConfig": {"InstancePreferences": [
                             {"InstanceType": "ml.trn2.48xlarge", "TrainingPlanArns": [plan_arn("week-50")]}]}})
    ledger.close()
    sagemaker.add_response("list_training_plans", {"TrainingPlanSummaries": [summary("week-50", "Scheduled")],
                                                   "NextToken": "page2"},
                           {"SortBy": "StartTime", "SortOrder": "Descending"})
    sagemaker.add_response("list_training_plans", {"TrainingPlanSummaries": [
        summary("week-49", "Active", available=1, in_use=1)]},
        {"SortBy": "StartTime", "SortOrder": "Descending", "NextToken": "page2"})
    code, out, err = run_cli(monkeypatch, capsys, "capacity", "plans", "--region", "us-east-1")
    assert code == 0, err
    blocks = out.split("\n    " + plan_arn("week-50"))[0]
    assert "week-50  Scheduled  2026-12-14 11:30 -> 2026-12-16 11:30 UTC" in blocks
    assert "ledger jobs: vit-b-1234abcd" in blocks
    assert "2 x ml.trn1.32xlarge: 1 free, 1 in use" in out and "ledger jobs: vit-a-1234abcd" in out


def test_doctor_quotas_checks_the_plan_type_count_window_and_status(orch_home, sagemaker, monkeypatch, capsys,
                                                                    tmp_path):
    from orchestrator.actions import quota_check

    monkeypatch.setattr(quota_check, "run", lambda loaded, say=None, **kw: [])  # quotas: test_quotas' business
    text = (ROOT / "configs" / "vit-trn1-32xlarge.yaml").read_text()
    path = tmp_path / "planned.yaml"
    path.write_text(text.replace("max_cost_usd: 70", "max_cost_usd: 500").replace("instance: {type: ml.trn1.32xlarge, count: 1}",
                                 f"instance: {{type: ml.trn1.32xlarge, count: 2, training_plan_arn: '{plan_arn('week-49')}'}}"))
    loaded = specs.load(path)
    assert loaded.instance.training_plan_arn == plan_arn("week-49")
    now = dt.datetime.now(UTC)
    sagemaker.add_response("describe_training_plan", summary("week-49", "Active", total=loaded.instance.count,
                                                             start=now - dt.timedelta(hours=1)),
                           {"TrainingPlanName": "week-49"})
    code, out, err = run_cli(monkeypatch, capsys, "doctor", str(path), "--quotas")
    assert code == 0, err
    assert "plan: instance.training_plan_arn: week-49 Active" in out and "the job fits" in out
    # Another type, too few instances, an end before the job could finish, Expired: each said.
    sagemaker.add_response("describe_training_plan", summary("week-49", "Expired", type_="ml.trn2.48xlarge",
                                                             total=1, start=now - dt.timedelta(hours=47, minutes=30)),
                           {"TrainingPlanName": "week-49"})
    code, _, err = run_cli(monkeypatch, capsys, "doctor", str(path), "--quotas")
    assert code == 2
    assert "the plan is Expired" in err and "the plan holds ml.trn2.48xlarge" in err
    assert "the job needs 2 instance(s), the plan holds 1" in err
    assert f"max_run_minutes is {loaded.max_run_minutes}" in err


def test_the_contract_check_reads_stubbed_answers_too(orch_home, sagemaker, aws_contract_calls):
    """An answer AWS could not give (a status outside TrainingPlanStatus) is caught by the hook."""
    from orchestrator import aws_contract

    bad = summary("week-49", "Done")
    found = aws_contract.answer_violations("sagemaker", "DescribeTrainingPlan", bad)
    assert [v.path for v in found] == ["Status", "ReservedCapacitySummaries[0].Status"]
    assert "DescribeTrainingPlan output, shape TrainingPlanStatus" in found[0].source
    assert aws_contract.answer_violations("sagemaker", "DescribeTrainingPlan", summary("week-49", "Active")) == []
    sagemaker.add_response("describe_training_plan", bad, {"TrainingPlanName": "week-49"})
    plans.describe(plans.client("us-east-1"), plan_arn("week-49"))
    assert any("DescribeTrainingPlan (answer): Status: 'Done' is not one of" in line for line in aws_contract_calls())
