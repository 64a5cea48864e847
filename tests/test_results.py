"""results: collection from S3 (moto server) and file:// stores, the arithmetic, faults, output.

Prices come from an override file written into ORCHESTRATOR_HOME, so every expected figure
below is computed by hand from round numbers.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import threading

import moto_shim
import pytest
from cli_harness import run_cli
from job_waits import patience
from typer.testing import CliRunner

from orchestrator import results as res
from orchestrator.cli import app
from orchestrator.errors import InputError

BUCKET = "results-bucket"
PREFIX = f"s3://{BUCKET}/jobs"
ROLE = "arn:aws:iam::123456789012:role/orchestrator-training"


def results_doc(job: str, *, sps: float = 100.0, type_: str = "ml.trn1.2xlarge", count: int = 1, cores: int = 2,
                backend: str = "sagemaker", status: str = "completed", sweep: str | None = None,
                hit: int = 1, new: int = 3, global_batch: int = 64) -> dict:
    tags = {"team": "vision", "orchestrator:job": job}
    if sweep:
        tags["orchestrator:sweep"] = sweep
        tags["orchestrator:trial"] = job.rsplit("-", 1)[-1]
    return {
        "schema": "orchestrator.results/v1", "job_name": job, "spec_hash": "ab" * 32, "status": status,
        "failure_reason": None if status == "completed" else "boom", "backend": backend, "region": "us-east-1",
        "instance": {"type": type_, "count": count, "neuron_cores": cores, "logical_cores": cores,
                     "workers_per_node": cores},
        "world_size": cores * count, "runtime": "xla", "compile": False, "precision": "bf16", "batch_size": 32,
        "global_batch": global_batch, "steps": 500, "warmup_steps": 10, "steps_done": 500,
        "model": {"arch": "vit_base_patch16_224", "image_size": 224, "patch_embed": "linear"},
        "step_time_s": {"p50": global_batch / sps, "p90": 1.0, "mean": global_batch / sps, "n": 490},
        "samples_per_s": sps, "time_to_first_step_s": 30.0, "compile_s": 28.5,
        "cache": {"mode": "tarball", "uri": "s3://b/c", "key": "k", "hit_entries": hit, "new_entries": new,
                  "pull_bytes": 0, "pull_s": 0.0, "push_bytes": 1, "push_s": 0.1, "warnings": []},
        "final_loss": 6.9, "versions": {"python": "3.12.3", "torch": "2.9.0", "torch_xla": "2.9.0",
                                        "timm": "1.0.0", "neuronx_cc": None},
        "started_at": "2026-11-29T22:00:00Z", "ended_at": "2026-11-29T22:05:00Z", "duration_s": 300.0,
        "tags": tags, "warnings": [],
    }


@pytest.fixture
def prices(orch_home):
    """Round prices for the instance types the tests use, as the catalog's override file."""
    rows = [
        {"type": "ml.trn1.2xlarge", "region": "us-east-1", "usd_per_hour": 2.0, "source": "test prices",
         "as_of": "2026-01-01", "kind": "sagemaker-on-demand"},
        {"type": "ml.trn1.32xlarge", "region": "us-east-1", "usd_per_hour": 20.0, "source": "test prices",
         "as_of": "2026-01-01", "kind": "sagemaker-on-demand"},
    ]
    (orch_home / "prices.json").write_text(json.dumps({"prices": rows}))
    return orch_home


@pytest.fixture
def aws(moto_server):
    import boto3

    s3 = boto3.client("s3", region_name="us-east-1")
    sm = boto3.client("sagemaker", region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    return s3, sm


def put_results(s3, job: str, doc: dict | bytes) -> None:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    s3.put_object(Bucket=BUCKET, Key=f"jobs/results/{job}/results.json", Body=body)


def create_job(sm, job: str, *, type_: str = "ml.trn1.2xlarge", count: int = 1, spot: bool = False,
               billable: int | None = None, training: int | None = None, status: str | None = None,
               failure: str | None = None) -> None:
    args = {
        "TrainingJobName": job,
        "AlgorithmSpecification": {"TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/x:1",
                                   "TrainingInputMode": "File"},
        "RoleArn": ROLE,
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/jobs"},
        "ResourceConfig": {"InstanceType": type_, "InstanceCount": count, "VolumeSizeInGB": 100},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600, **({"MaxWaitTimeInSeconds": 7200} if spot else {})},
        "EnableManagedSpotTraining": spot,
    }
    sm.create_training_job(**args)
    # moto completes jobs at once and reports no seconds: set what SageMaker would report.
    fake = moto_shim.sagemaker_jobs("us-east-1")[job]
    if billable is not None:
        fake.billable_time_in_seconds = billable
    if training is not None:
        fake.training_time_in_seconds = training
    if status is not None:
        fake.training_job_status = status
    if failure is not None:
        fake.failure_reason = failure


def on_client(sagemaker):
    """`collect`'s backend_for: SageMaker jobs described through the SageMaker backend on this client."""
    import boto3

    from orchestrator.backends.sagemaker import SageMakerBackend

    def backend_for(name: str, region: str):
        assert name == "sagemaker"
        return SageMakerBackend(sagemaker, boto3.client("s3", region_name=region),
                                boto3.client("logs", region_name=region))

    return backend_for


def by_job(collection: res.Collection) -> dict[str, res.Row]:
    rows = {r.job: r for r in collection.rows}
    assert len(rows) == len(collection.rows)
    return rows


# --- parsing ------------------------------------------------------------------------------

def test_parse_reads_v1_and_ignores_unknown_keys():
    doc = results_doc("j-1")
    doc["something_new"] = {"x": 1}
    parsed = res.parse(json.dumps(doc).encode())
    assert parsed.job_name == "j-1" and parsed.instance.count == 1 and parsed.cache.hit_entries == 1


@pytest.mark.parametrize("data, reason", [
    (b'{"schema": "orchestrator.results/v1", "job_na', "not valid JSON (truncated?)"),
    (b"", "not valid JSON (truncated?)"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"schema": "orchestrator.results/v9", "job_name": "x"}',
     "unknown schema 'orchestrator.results/v9'; this orchestrator reads 'orchestrator.results/v1'; a newer "
     "orchestrator wrote it: upgrade this one"),
    (b'{"job_name": "x"}', "unknown schema None"),
])
def test_parse_rejects_with_a_reason(data, reason):
    with pytest.raises(res.UnreadableResults, match=None) as info:
        res.parse(data)
    assert reason in str(info.value)


def test_a_json_error_reads_once_with_its_position():
    with pytest.raises(res.UnreadableResults) as info:
        res.parse(b'{"schema": "orchestrator.results/v1", "job_na')
    assert str(info.value) == "not valid JSON (truncated?): Unterminated string starting at: line 1 column 39"
    with pytest.raises(res.UnreadableResults) as info:
        res.parse(b'{"schema": }')
    assert str(info.value) == "not valid JSON: Expecting value: line 1 column 12"


def test_non_finite_numbers_keep_the_row_and_are_named(prices):
    doc = results_doc("nan-1", backend="local")
    doc["step_time_s"]["p50"] = float("nan")
    doc["samples_per_s"] = float("inf")
    write_local(prices, "nan-1", json.dumps(doc).encode())  # json writes NaN and Infinity
    write_local(prices, "ok-1", results_doc("ok-1", backend="local"))
    rows = by_job(res.collect(res.local_store_uri()))
    row = rows["nan-1"]
    assert row.status == "completed" and row.step_time_p50_s is None and row.samples_per_s is None
    assert row.note == "non-finite value in step_time_s.p50, samples_per_s"
    assert rows["ok-1"].note is None
    assert "nan-1: non-finite value in step_time_s.p50" in res.render_table(res.collect(res.local_store_uri()))


def test_parse_names_a_bad_field():
    doc = results_doc("j-1")
    doc["instance"]["count"] = "two"
    with pytest.raises(res.UnreadableResults) as info:
        res.parse(json.dumps(doc).encode())
    assert "field instance.count" in str(info.value)


def test_parse_validates_through_the_one_schema():
    """The reader's object is the writer's class (`entrypoints.shared.results_schema.Results`), fields
    the table does not show included, and a field an earlier writer had not added reads as its
    default."""
    from entrypoints.shared import results_schema

    doc = results_doc("j-1")
    doc["container"] = {"entrypoint": True, "sm_environment": "emulated", "hostname": None,
                        "requirements": "none"}
    parsed = res.parse(json.dumps(doc).encode())
    assert isinstance(parsed, results_schema.Results)
    assert parsed.container == results_schema.Container(entrypoint=True, sm_environment="emulated", hostname=None,
                                                         requirements="none")
    assert parsed.versions.torch == "2.9.0" and parsed.heartbeat_at is None and parsed.compiler_cache == {}


@pytest.mark.parametrize("path, value, reason", [
    (("status",), "exploded", "field status: Input should be 'running', 'completed', 'stopped' or 'failed'"),
    (("cache", "mode"), "zip", "field cache.mode: Input should be 'tarball' or 'off'"),
    (("versions", "torch"), 2, "field versions.torch: Input should be a valid string"),
    (("world_size",), 0, "field world_size: Input should be greater than or equal to 1"),
])
def test_a_value_outside_the_schema_is_an_unreadable_row_naming_the_field(prices, path, value, reason):
    doc = results_doc("odd-1", backend="local")
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    write_local(prices, "odd-1", doc)
    write_local(prices, "ok-1", results_doc("ok-1", backend="local"))
    rows = by_job(res.collect(res.local_store_uri()))
    assert rows["odd-1"].status == res.UNREADABLE and rows["odd-1"].note.endswith(reason)
    assert rows["ok-1"].status == "completed"


# --- the arithmetic -----------------------------------------------------------------------

def test_price_performance_from_s3_and_sagemaker(aws, prices):
    s3, sm = aws
    # a: 1 x 2.0 USD/h at 100 samples/s -> 180,000 samples/USD, 5.5556 USD per million.
    put_results(s3, "a", results_doc("a", sps=100.0))
    create_job(sm, "a", billable=900, training=900)
    # b: 1 x 20.0 USD/h at 800 samples/s -> 144,000 samples/USD.
    put_results(s3, "b", results_doc("b", sps=800.0, type_="ml.trn1.32xlarge", cores=32, hit=0, new=0))
    create_job(sm, "b", type_="ml.trn1.32xlarge")
    # c: 2 x 2.0 USD/h, managed spot billing 600 of 1000 s -> effective 2.4 USD/h; 180 samples/s
    # -> 270,000 samples/USD: the best row. It billed 600 s x 4.0 USD/h = 0.6667 USD.
    put_results(s3, "c", results_doc("c", sps=180.0, count=2))
    create_job(sm, "c", count=2, spot=True, billable=600, training=1000)

    collection = res.collect(PREFIX, workers=4)
    rows = by_job(collection)
    assert [r.job for r in collection.rows] == ["c", "a", "b"]
    a, b, c = rows["a"], rows["b"], rows["c"]

    assert a.price_per_hour == pytest.approx(2.0)
    assert a.samples_per_dollar == pytest.approx(180_000)
    assert a.cost_per_million_samples == pytest.approx(1e6 / 180_000)
    assert a.relative == pytest.approx(180_000 / 270_000)
    assert a.cost_usd == pytest.approx(900 / 3600 * 2.0)
    assert a.cache_hit_ratio == pytest.approx(0.25)
    assert (a.count, a.cores, a.global_batch, a.status) == (1, 2, 64, "completed")
    assert a.step_time_p50_s == pytest.approx(0.64)

    assert b.samples_per_dollar == pytest.approx(144_000)
    assert b.relative == pytest.approx(144_000 / 270_000)
    assert b.cores == 32 and b.cache_hit_ratio is None and b.cost_usd is None

    assert c.spot and c.spot_savings == pytest.approx(0.4)
    assert c.price_per_hour == pytest.approx(2.4)
    assert c.samples_per_dollar == pytest.approx(270_000)
    assert c.relative == pytest.approx(1.0)
    assert c.cost_usd == pytest.approx(600 / 3600 * 4.0)
    assert c.cores == 4 and c.billable_s == 600 and c.training_s == 1000
    assert "spot, 40% saved" in c.price_source and "test prices" in c.price_source


def test_status_comes_from_sagemaker_and_failed_rows_are_not_ranked(aws, prices):
    s3, sm = aws
    put_results(s3, "good", results_doc("good", sps=100.0))
    create_job(sm, "good")
    # The container wrote results, but SageMaker then failed the job: SageMaker's word wins.
    put_results(s3, "late-fail", results_doc("late-fail", sps=1000.0))
    create_job(sm, "late-fail", status="Failed", failure="AlgorithmError: exit 1")
    rows = by_job(res.collect(PREFIX, workers=2))
    assert rows["late-fail"].status == "failed"
    assert rows["late-fail"].relative is None and "AlgorithmError" in rows["late-fail"].note
    assert rows["good"].relative == pytest.approx(1.0)


def test_spot_without_seconds_uses_on_demand_price_and_says_so(aws, prices):
    s3, sm = aws
    put_results(s3, "s", results_doc("s"))
    create_job(sm, "s", spot=True)
    row = res.collect(PREFIX).rows[0]
    assert row.price_per_hour == pytest.approx(2.0) and row.spot_savings is None
    assert "spot savings unknown" in row.note


def test_cost_columns_from_an_unverified_price_carry_the_markup_and_are_marked(aws, orch_home):
    """With the shipped EC2 prices (no `prices refresh`), cost columns use EC2 x the stated
    markup, the row says its price is unverified, and the table marks those cells "~"."""
    s3, sm = aws
    put_results(s3, "ec2", results_doc("ec2", sps=100.0))
    create_job(sm, "ec2", billable=3600, training=3600)
    collection = res.collect(PREFIX)
    row = collection.rows[0]
    assert row.price_verified is False
    assert row.price_per_hour == pytest.approx(1.34375 * 1.5)
    assert row.cost_usd == pytest.approx(1.34375 * 1.5)
    assert "x 1.5 (assumed SageMaker markup" in row.price_source and "unverified price" in row.price_source
    table = res.render_table(collection)
    assert "~2.0156" in table and "~ estimated: an EC2 price times an assumed SageMaker markup" in table
    assert json.loads(res.render_json(collection))["rows"][0]["price_verified"] is False


def test_sagemaker_prices_are_not_marked(aws, prices):
    s3, sm = aws
    put_results(s3, "sm", results_doc("sm", sps=100.0))
    create_job(sm, "sm")
    collection = res.collect(PREFIX)
    assert collection.rows[0].price_verified is True
    assert "~" not in res.render_table(collection)


def test_a_failed_over_sweep_job_is_marked_as_a_configuration_of_its_own(aws, prices):
    s3, sm = aws
    doc = results_doc("demo-1a2b3c4d-t0badf00-r1", sps=800.0, type_="ml.trn1.32xlarge", cores=32,
                      sweep="demo-1a2b3c4d", global_batch=1024)
    doc["tags"]["orchestrator:attempt"] = "failover:ml.trn1.2xlarge"
    put_results(s3, "demo-1a2b3c4d-t0badf00-r1", doc)
    put_results(s3, "demo-1a2b3c4d-t11111111", results_doc("demo-1a2b3c4d-t11111111", sweep="demo-1a2b3c4d"))
    collection = res.collect(PREFIX, workers=1)
    rows = by_job(collection)
    moved = rows["demo-1a2b3c4d-t0badf00-r1"]
    assert moved.failover_from == "ml.trn1.2xlarge"
    assert "failed over from ml.trn1.2xlarge: not its trial's configuration" in moved.note
    assert "global batch 1024" in moved.note
    assert rows["demo-1a2b3c4d-t11111111"].failover_from is None
    table = res.render_table(collection)
    assert "ml.trn1.32xlarge (failover from ml.trn1.2xlarge)" in table


def test_jobs_sagemaker_failed_or_stopped_before_writing_results_show_why(aws, prices):
    """A capacity error or a stop leaves no results.json: the row says what SageMaker says,
    not "missing"; a name SageMaker does not know stays missing."""
    s3, sm = aws
    create_job(sm, "demo-1a2b3c4d-t00000001", status="Failed",
               failure="CapacityError: Unable to provision requested ML compute capacity")
    create_job(sm, "demo-1a2b3c4d-t00000002", status="Stopped", billable=12)
    s3.put_object(Bucket=BUCKET, Key="jobs/results/gone/other.txt", Body=b"x")  # a folder, no results.json
    collection = res.collect(PREFIX, sweep="demo", workers=1)
    rows = by_job(collection)
    capacity, stopped = rows["demo-1a2b3c4d-t00000001"], rows["demo-1a2b3c4d-t00000002"]
    assert capacity.status == "failed" and "CapacityError: Unable to provision" in capacity.note
    assert capacity.note.startswith("no results.json at ") and capacity.instance == "ml.trn1.2xlarge"
    assert stopped.status == "stopped" and stopped.billable_s == 12 and "the job is stopped" in stopped.note
    table = res.render_table(collection)
    assert "failed" in table and "stopped" in table and "missing" not in table.split("\n")[3]
    with pytest.raises(InputError, match="no results.json"):
        res.collect(PREFIX, job="gone-job")  # SageMaker has no such job: still the missing-job error


def test_unknown_price_and_missing_sagemaker_job(aws, prices):
    s3, _ = aws
    put_results(s3, "odd", results_doc("odd", type_="ml.trn2.48xlarge", cores=64))
    row = res.collect(PREFIX).rows[0]
    assert row.status == "completed"  # from results.json: SageMaker has no such job
    assert row.price_per_hour is None and row.samples_per_dollar is None and row.relative is None
    assert "no price for ml.trn2.48xlarge" in row.note and "no job odd in SageMaker in us-east-1" in row.note


def test_rank_by_hand():
    rows = [res.Row(job="x", status="completed", samples_per_dollar=50.0, samples_per_s=1.0),
            res.Row(job="y", status="completed", samples_per_dollar=200.0, samples_per_s=1.0),
            res.Row(job="z", status="failed", samples_per_dollar=400.0, samples_per_s=9.0),
            res.Row(job="w", status="unreadable"),
            res.Row(job="v", status="completed", samples_per_s=5.0)]
    ranked = res.rank(rows)
    assert [r.job for r in ranked] == ["y", "x", "z", "v", "w"]
    assert [r.relative for r in ranked] == [1.0, 0.25, None, None, None]


# --- local jobs, file:// stores, no ledger ------------------------------------------------

def write_local(root, job: str, doc: dict | bytes) -> None:
    folder = root / "store" / "jobs" / "results" / job
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())


def test_local_jobs_have_no_cost_and_need_no_aws(prices):
    write_local(prices, "loc-1", results_doc("loc-1", backend="local", sps=40.0, hit=2, new=2))
    write_local(prices, "loc-2", results_doc("loc-2", backend="local", sps=60.0, status="failed"))
    collection = res.collect(res.local_store_uri(), workers=2)
    rows = by_job(collection)
    assert [r.job for r in collection.rows] == ["loc-2", "loc-1"]  # unranked: fastest first
    assert rows["loc-1"].price_per_hour is None and rows["loc-1"].price_source == "local: no cloud cost"
    assert rows["loc-1"].cache_hit_ratio == 0.5 and rows["loc-1"].status == "completed"
    assert rows["loc-2"].status == "failed" and rows["loc-2"].note == "boom"
    assert not (prices / "ledger.sqlite3").exists()


def heartbeat_doc(job: str, **kw) -> dict:
    """What launch.py leaves when the job is killed between heartbeats: status running, no end."""
    doc = results_doc(job, **kw)
    doc.update(status="running", failure_reason=None, steps_done=120, ended_at=None,
               heartbeat_at="2026-11-29T22:03:00Z")
    return doc


def test_a_killed_jobs_last_heartbeat_is_a_row_with_its_last_known_step(aws, prices):
    write_local(prices, "loc-killed", heartbeat_doc("loc-killed", backend="local"))
    row = by_job(res.collect(res.local_store_uri(), workers=1))["loc-killed"]
    assert (row.status, row.steps_done) == ("running", 120)
    assert row.note == "heartbeat at 2026-11-29T22:03:00Z: step 120 of 500"
    # On SageMaker the job's own status wins, and the row says the heartbeat is its last word.
    s3, sm = aws
    put_results(s3, "sm-killed", heartbeat_doc("sm-killed"))
    create_job(sm, "sm-killed", status="Stopped")
    row = by_job(res.collect(PREFIX, s3=s3, backend_for=on_client(sm), workers=1))["sm-killed"]
    assert (row.status, row.steps_done) == ("stopped", 120)
    assert row.note == ("heartbeat at 2026-11-29T22:03:00Z: step 120 of 500; the job ended before its final "
                        "results were written: this is its last known state")


def test_collects_from_a_prefix_without_any_ledger(aws, prices, tmp_path, monkeypatch):
    s3, sm = aws
    for job in ("p-1", "p-2", "p-3"):
        put_results(s3, job, results_doc(job))
        create_job(sm, job)
    fresh_home = tmp_path / "never-submitted"
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(fresh_home))
    collection = res.collect(PREFIX, workers=3)
    assert sorted(r.job for r in collection.rows) == ["p-1", "p-2", "p-3"]
    assert all(r.status == "completed" for r in collection.rows)
    assert not (fresh_home / "ledger.sqlite3").exists()


def test_the_region_rule_applies_to_s3_and_to_jobs_whose_results_name_no_region(aws, prices, monkeypatch):
    import boto3
    s3, _ = aws
    doc = results_doc("far-1")
    del doc["region"]  # an older launcher's results
    put_results(s3, "far-1", doc)
    # The job lives in eu-west-2, the region the user's AWS_REGION names (README step 0).
    boto3.client("sagemaker", region_name="eu-west-2").create_training_job(
        TrainingJobName="far-1", RoleArn=ROLE, OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/jobs"},
        AlgorithmSpecification={"TrainingImage": "x:1", "TrainingInputMode": "File"},
        ResourceConfig={"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100},
        StoppingCondition={"MaxRuntimeInSeconds": 3600})
    moto_shim.sagemaker_jobs("eu-west-2")["far-1"].billable_time_in_seconds = 321
    monkeypatch.setenv("AWS_REGION", "eu-west-2")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    from orchestrator import aws as aws_clients

    made: list = []
    real_client = aws_clients.client

    def spy(service, region, **kwargs):
        made.append((service, region))
        return real_client(service, region, **kwargs)

    monkeypatch.setattr(aws_clients, "client", spy)
    row = res.collect(PREFIX).rows[0]
    assert [region for service, region in made if service == "s3"][0] == "eu-west-2"  # botocore alone: us-east-1
    assert ("sagemaker", "eu-west-2") in made
    assert row.status == "completed" and row.billable_s == 321, row.note
    assert "no job" not in (row.note or "")


def test_an_unreadable_aws_config_is_the_commands_error_only_when_a_region_is_needed(prices, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "nope")
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    write_local(prices, "loc-1", results_doc("loc-1", backend="local"))
    assert res.collect(res.local_store_uri()).rows[0].status == "completed"  # its results name the region
    nameless = results_doc("loc-2", backend="local")
    del nameless["region"]
    write_local(prices, "loc-2", nameless)
    # A local job needs no AWS configuration, even when its results name no region (QA).
    assert {r.status for r in res.collect(res.local_store_uri()).rows} == {"completed"}
    doc = results_doc("sm-1")
    del doc["region"]
    write_local(prices, "sm-1", doc)
    for workers in (1, 4):
        with pytest.raises(InputError, match="cannot read the AWS configuration") as info:
            res.collect(res.local_store_uri(), workers=workers)
        assert "AWS_PROFILE" in info.value.hint


# --- filters ------------------------------------------------------------------------------

def test_sweep_filter_by_tag_and_name_and_sagemaker_jobs_without_results(aws, prices):
    s3, sm = aws
    put_results(s3, "swa-t1", results_doc("swa-t1", sweep="swa"))
    create_job(sm, "swa-t1")
    # Tagged with the sweep, though the name does not say so.
    put_results(s3, "renamed", results_doc("renamed", sweep="swa"))
    # Named like the sweep but tagged with another one: the tag wins.
    put_results(s3, "swa-x", results_doc("swa-x", sweep="swa-other"))
    put_results(s3, "other-t1", results_doc("other-t1", sweep="other"))
    put_results(s3, "swa-broken", b"{")
    # Submitted, still running, no results object yet: still a row.
    create_job(sm, "swa-t2", status="InProgress")
    rows = by_job(res.collect(PREFIX, sweep="swa", region="us-east-1"))
    assert set(rows) == {"swa-t1", "renamed", "swa-broken", "swa-t2"}
    # SageMaker's word for it, not "missing" (a job running has written no results yet).
    assert rows["swa-t2"].status == "running" and "no results.json" in rows["swa-t2"].note
    assert "the job is running" in rows["swa-t2"].note
    assert rows["swa-broken"].status == "unreadable"
    assert rows["swa-t1"].sweep == "swa" and rows["swa-t1"].trial == "t1"


def test_job_filter_and_a_missing_job(aws, prices):
    s3, sm = aws
    put_results(s3, "one", results_doc("one"))
    put_results(s3, "two", results_doc("two"))
    rows = res.collect(PREFIX, job="two").rows
    assert [r.job for r in rows] == ["two"]
    # A --job with no results object is a pointing mistake, not a table of one "missing" row.
    with pytest.raises(InputError) as info:
        res.collect(PREFIX, job="nope")
    assert info.value.message == f"--job nope: no results.json at {PREFIX}/results/nope/results.json"
    assert "--prefix" in info.value.hint
    # An unreadable one is still a row (the table says why), never an error for the filter.
    put_results(s3, "half", b'{"schema": ')
    assert [(r.job, r.status) for r in res.collect(PREFIX, job="half").rows] == [("half", "unreadable")]


def _sweep_job(name: str, digest: str, trial: str = "t0000000a", tick: str | None = None) -> tuple[str, str]:
    """(sweep id, job name) the way sweeps make them (`names.Identity`)."""
    from orchestrator.names import Identity

    ident = Identity(name, digest, tick)
    return ident.sweep_id, ident.job_name(trial)


def _missing(root, job: str) -> None:
    (root / "store" / "jobs" / "results" / job).mkdir(parents=True)


def test_sweep_filter_takes_an_id_or_a_name_and_matches_folders_and_tags_alike(prices):
    """The QA case: `--sweep instances` listed the missing rows of every instances-* sweep but
    dropped the one completed row, tagged instances-e232772a."""
    done_id, done_job = _sweep_job("instances", "e232772a")
    write_local(prices, done_job, results_doc(done_job, backend="local", sweep=done_id))
    for digest in ("11111111", "22222222", "33333333", "44444444"):
        _missing(prices, _sweep_job("instances", digest)[1])
    write_local(prices, _sweep_job("instances", "e232772a", "t0000000b")[1], b'{"schema": ')
    big_id, big_job = _sweep_job("instances-big", "55555555")  # another sweep whose name starts alike
    write_local(prices, big_job, results_doc(big_job, backend="local", sweep=big_id))
    _missing(prices, _sweep_job("instances-big", "66666666")[1])
    # A name long enough that its job names are truncated, and scheduled ticks.
    long_name = "instances-" + "x" * 40
    long_id, long_job = _sweep_job(long_name, "77777777")
    assert not long_job.startswith(long_id)
    _missing(prices, long_job)
    tick_id, tick_job = _sweep_job("nightly", "88888888", tick="202601050300")
    write_local(prices, tick_job, results_doc(tick_job, backend="local", sweep=tick_id))
    _missing(prices, _sweep_job("nightly", "88888888", tick="202601060300")[1])

    def jobs(sweep: str) -> set[str]:
        return {r.job for r in res.collect(res.local_store_uri(), sweep=sweep, workers=2).rows}

    by_name = jobs("instances")
    assert done_job in by_name and len(by_name) == 6 and not any("big" in j or "xxx" in j for j in by_name)
    assert jobs(done_id) == {done_job, _sweep_job("instances", "e232772a", "t0000000b")[1]}
    assert jobs("instances-big") == {big_job, _sweep_job("instances-big", "66666666")[1]} == jobs(big_id) | {
        _sweep_job("instances-big", "66666666")[1]}
    assert jobs(long_name) == {long_job} == jobs(long_id)
    assert jobs("nightly") == jobs("nightly-88888888") == {tick_job, _sweep_job("nightly", "88888888",
                                                                                 tick="202601060300")[1]}
    assert jobs(tick_id) == {tick_job}
    with pytest.raises(InputError) as info:
        res.collect(res.local_store_uri(), sweep="instances-e232772b")
    assert info.value.message.startswith("no results for sweep instances-e232772b under file://")
    assert done_id in info.value.hint and big_id in info.value.hint and "sweep name" in info.value.hint


def test_a_plain_job_whose_name_starts_like_a_sweep_is_not_in_it(prices):
    """The QA case: `results --sweep local` (configs/sweep-local.yaml's sweep) also listed the
    plain `local-smoke-*` jobs of `make demo`: tagged by our launcher, with no sweep tag."""
    sweep_id, trial_job = _sweep_job("local", "0a1b2c3d")
    write_local(prices, trial_job, results_doc(trial_job, backend="local", sweep=sweep_id))
    write_local(prices, "local-smoke-35d2c9a3", results_doc("local-smoke-35d2c9a3", backend="local"))
    untagged = results_doc("local-other-1", backend="local")
    untagged["tags"] = {}  # results written by something else: only the name can tell
    write_local(prices, "local-other-1", untagged)
    rows = res.collect(res.local_store_uri(), sweep="local", workers=2).rows
    assert {r.job for r in rows} == {trial_job, "local-other-1"}


def test_sweep_name_or_id_finds_sagemaker_jobs_without_results_alike(aws, prices):
    s3, sm = aws
    sweep_id, job = _sweep_job("instances", "e232772a")
    put_results(s3, job, results_doc(job, sweep=sweep_id))
    create_job(sm, job)
    running = _sweep_job("instances", "e232772a", "t0000000b")[1]
    create_job(sm, running, status="InProgress")
    create_job(sm, _sweep_job("instances-big", "55555555")[1], status="InProgress")
    for asked in ("instances", sweep_id):
        rows = by_job(res.collect(PREFIX, sweep=asked, region="us-east-1"))
        assert set(rows) == {job, running} and rows[running].status == "running"


def test_bad_filters_and_prefixes_are_input_errors(orch_home):
    with pytest.raises(InputError, match="--job and --sweep"):
        res.collect("file:///tmp/x", job="a", sweep="b")
    with pytest.raises(InputError, match="s3://bucket/prefix or file://"):
        res.collect("/just/a/path")
    with pytest.raises(InputError, match="no bucket"):
        res.collect("s3:///jobs")


@pytest.mark.parametrize("prefix, message", [
    ("s3://UPPER/x", "'UPPER' is not a valid S3 bucket name"),
    ("s3://ab/x", "'ab' is not a valid S3 bucket name"),
    ("s3://my_bucket/x", "'my_bucket' is not a valid S3 bucket name"),
    ("s3://a..b/x", "'a..b' is not a valid S3 bucket name"),
    ("s3://", "no bucket"),
    ("file://relative/path", "needs an absolute path"),
    ("file:///etc/passwd", "/etc/passwd is not a folder"),
    ("http://127.0.0.1:9/x", "s3://bucket/prefix or file:///path"),
])
def test_cli_results_refuses_a_bad_prefix_before_any_call(orch_home, monkeypatch, capsys, prefix, message):
    import boto3

    monkeypatch.setattr(boto3.session.Session, "client", lambda *a, **k: pytest.fail("an AWS client was made"))
    code, out, err = run_cli(monkeypatch, capsys, "results", "--prefix", prefix)
    assert code == 2 and out == ""
    assert f"error: --prefix {prefix!r}: " in err and message in err


@pytest.mark.parametrize("job", ["../../fake/results/j1", "a/b", "..", "", "x" * 64, "a b"])
def test_cli_results_job_must_be_a_job_name_and_nothing_outside_the_prefix_is_read(tmp_path, orch_home, monkeypatch,
                                                                                  capsys, job):
    # A results object outside the prefix that a path-joining --job would reach.
    outside = tmp_path / "fake" / "results" / "j1"
    outside.mkdir(parents=True)
    (outside / "results.json").write_text(json.dumps(results_doc("j1", backend="local")))
    prefix = (tmp_path / "x").as_uri()  # <prefix>/results/../../fake/results/j1 is `outside`
    code, out, err = run_cli(monkeypatch, capsys, "results", "--prefix", prefix, "--job", job)
    assert code == 2 and "j1" not in out
    assert f"error: --job {job[:80]!r} is not a job name" in err and "1-63" in err
    with pytest.raises(InputError, match="is not a job name"):
        res.collect(prefix, job=job)


def test_listed_folders_never_lead_outside_the_prefix(prices, tmp_path):
    store = res.ResultsPrefix(res.local_store_uri())
    for name in ("..", ".", "a/../..", ""):
        with pytest.raises(res.UnreadableResults, match="not a job folder name"):
            store.get(name)
    s3 = res.ResultsPrefix("s3://bb-bucket/jobs", s3_client=None)
    with pytest.raises(res.UnreadableResults):
        s3.get("../other")


def test_cli_results_job_without_results_says_where_it_looked(prices, monkeypatch, capsys):
    write_local(prices, "c-1", results_doc("c-1", backend="local"))
    code, out, err = run_cli(monkeypatch, capsys, "results", "--job", "nosuchjob")
    where = f"{res.local_store_uri()}/results/nosuchjob/results.json"
    assert code == 2 and out == ""
    assert f"error: --job nosuchjob: no results.json at {where}" in err and "hint: " in err and "--prefix" in err
    # Among many, a missing object is still a row and the table is shown.
    (prices / "store" / "jobs" / "results" / "c-2").mkdir()
    code, out, err = run_cli(monkeypatch, capsys, "results", "--format", "csv")
    assert code == 0 and "c-1" in out and "c-2,missing" in out.replace('"', "")


# --- unreadable objects never abort the table ---------------------------------------------

def test_unreadable_objects_are_rows(aws, prices):
    s3, sm = aws
    put_results(s3, "fine", results_doc("fine"))
    create_job(sm, "fine")
    put_results(s3, "truncated", json.dumps(results_doc("truncated")).encode()[:200])
    put_results(s3, "future", {**results_doc("future"), "schema": "orchestrator.results/v2"})
    put_results(s3, "wrongtype", {**results_doc("wrongtype"), "samples_per_s": "fast"})
    # A job folder holding something, but no results.json.
    s3.put_object(Bucket=BUCKET, Key="jobs/results/nofile/output/failure", Body=b"x")
    rows = by_job(res.collect(PREFIX, workers=4))
    assert rows["fine"].status == "completed" and rows["fine"].relative == 1.0
    assert rows["truncated"].status == "unreadable" and "truncated" in rows["truncated"].note
    assert rows["future"].status == "unreadable" and "orchestrator.results/v2" in rows["future"].note
    assert rows["wrongtype"].status == "unreadable" and "samples_per_s" in rows["wrongtype"].note
    assert rows["nofile"].status == "missing"
    assert rows["truncated"].uri == f"{PREFIX}/results/truncated/results.json"
    table = res.render_table(res.Collection(PREFIX, list(rows.values())))
    for job in rows:
        assert job in table


# --- throttling and 5xx -------------------------------------------------------------------

def _client_error(code: str, status: int, operation: str):
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": "injected"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


class Flaky:
    """Wraps a boto3 client: the first `failures` calls of `method` for each job raise."""

    def __init__(self, client, method: str, failures: int, code: str = "SlowDown", status: int = 503,
                 only: set[str] | None = None):
        self._client = client
        self._method = method
        self._failures = failures
        self._code, self._status = code, status
        self._only = only
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()
        self.injected = 0

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if name != self._method:
            return attr

        def call(**kwargs):
            key = kwargs.get("Key") or kwargs.get("TrainingJobName")
            with self._lock:
                count = self._seen.get(key, 0)
                self._seen[key] = count + 1
                fail = count < self._failures and (self._only is None or any(o in key for o in self._only))
                if fail:
                    self.injected += 1
            if fail:
                raise _client_error(self._code, self._status, self._method)
            return attr(**kwargs)

        return call


def test_a_job_that_keeps_failing_is_a_row_not_a_gap(aws, prices):
    s3, sm = aws
    for job in ("ok-1", "ok-2", "bad-1"):
        put_results(s3, job, results_doc(job))
        create_job(sm, job)
    flaky_s3 = Flaky(s3, "get_object", failures=100, code="InternalError", status=500, only={"bad-1"})
    collection = res.collect(PREFIX, s3=flaky_s3, workers=3)
    rows = by_job(collection)
    assert set(rows) == {"ok-1", "ok-2", "bad-1"}
    assert rows["bad-1"].status == "error" and "InternalError" in rows["bad-1"].note
    assert [r.job for r in collection.errors] == ["bad-1"]
    # Retrying is botocore's (the client's retry config, under this wrapper): asked once here.
    assert flaky_s3.injected == 1


def test_describe_failure_keeps_the_results_and_says_error(aws, prices):
    s3, sm = aws
    put_results(s3, "d-1", results_doc("d-1"))
    create_job(sm, "d-1")
    flaky_sm = Flaky(sm, "describe_training_job", failures=100, code="AccessDeniedException", status=400)
    row = res.collect(PREFIX, backend_for=on_client(flaky_sm)).rows[0]
    assert row.status == "error" and "AccessDeniedException" in row.note
    assert row.samples_per_s == 100.0 and flaky_sm.injected == 1  # not retryable: asked once


def test_botocore_retries_injected_503s(aws, prices, monkeypatch):
    """503 SlowDown answers injected below botocore are retried by the client's own config."""
    import boto3
    from botocore.awsrequest import AWSResponse

    s3_plain, sm = aws
    for job in ("r-1", "r-2", "r-3"):
        put_results(s3_plain, job, results_doc(job))
        create_job(sm, job)
    # Standard mode: adaptive mode would also rate-limit the client after throttling, slowly.
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")
    s3 = boto3.client("s3", region_name="us-east-1", config=res.client_config(4))
    assert s3.meta.config.retries["mode"] == "standard"
    failed: set[str] = set()  # one 503 per object: botocore's backoff sleeps for real
    lock = threading.Lock()

    class Raw:
        def stream(self, **kwargs):
            yield b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"

    def inject(request, **kwargs):
        with lock:
            if request.url in failed:
                return None
            failed.add(request.url)
        return AWSResponse(request.url, 503, {}, Raw())

    s3.meta.events.register("before-send.s3.GetObject", inject)
    collection = res.collect(PREFIX, s3=s3, workers=3)
    assert len(failed) == 3
    assert sorted(r.job for r in collection.rows) == ["r-1", "r-2", "r-3"]
    assert all(r.status == "completed" for r in collection.rows)  # botocore absorbed them


def test_progress_reports_every_job(prices):
    for i in range(5):
        write_local(prices, f"pg-{i}", results_doc(f"pg-{i}", backend="local"))
    seen = []
    res.collect(res.local_store_uri(), workers=3, progress=lambda done, total: seen.append((done, total)))
    assert seen[0] == (0, 5) and seen[-1] == (5, 5) and len(seen) == 6


# --- output shapes ------------------------------------------------------------------------

def sample_collection() -> res.Collection:
    rows = [
        res.Row(job="fast", status="completed", backend="sagemaker", instance="ml.trn1.2xlarge", count=1, cores=2,
                runtime="xla", precision="bf16", global_batch=64, step_time_p50_s=0.1, samples_per_s=640.0,
                price_per_hour=2.0, price_source="test prices, 2026-01-01", samples_per_dollar=1_152_000.0,
                cost_per_million_samples=0.868, compile_s=28.0, cache_hit_ratio=0.25),
        res.Row(job="slow", status="completed", backend="sagemaker", instance="ml.trn1.32xlarge", count=1,
                cores=32, runtime="xla", precision="bf16", global_batch=1024, step_time_p50_s=0.2,
                samples_per_s=5120.0, price_per_hour=20.0, price_source="test prices, 2026-01-01",
                samples_per_dollar=921_600.0, cost_per_million_samples=1.085, compile_s=30.0),
        res.Row(job="local-1", status="completed", backend="local", instance="ml.trn1.2xlarge", count=1,
                samples_per_s=50.0, price_source="local: no cloud cost"),
        res.Row(job="broken", status="unreadable", note="not valid JSON (truncated?)"),
    ]
    return res.Collection(PREFIX, res.rank(rows))


def test_csv_shape():
    text = res.render_csv(sample_collection())
    records = list(csv.DictReader(io.StringIO(text)))
    # Every Row field but `varied`, whose dotted paths are columns of their own (none here).
    assert list(records[0]) == [f.name for f in dataclasses.fields(res.Row) if f.name != "varied"]
    assert [r["job"] for r in records] == ["fast", "slow", "local-1", "broken"]
    assert records[0]["relative"] == "1.0" and float(records[1]["relative"]) == pytest.approx(0.8)
    assert records[3]["samples_per_s"] == "" and records[3]["status"] == "unreadable"


def test_json_shape():
    doc = json.loads(res.render_json(sample_collection()))
    assert doc["prefix"] == PREFIX and set(doc) == {"prefix", "varied", "rows"} and doc["varied"] == []
    assert [r["job"] for r in doc["rows"]] == ["fast", "slow", "local-1", "broken"]
    assert doc["rows"][1]["relative"] == pytest.approx(0.8)
    assert doc["rows"][2]["price_per_hour"] is None and doc["rows"][3]["note"].startswith("not valid JSON")


def test_table_has_every_column_and_row():
    text = res.render_table(sample_collection())
    for header, _, _ in res.COLUMNS:
        assert header in text
    lines = {line.split("│")[1].strip(): line for line in text.splitlines() if line.startswith("│")}
    assert set(lines) == {"fast", "slow", "local-1", "broken"}
    assert "1.00" in lines["fast"] and "0.80" in lines["slow"] and "1,152,000" in lines["fast"]
    assert "local" in lines["local-1"].split("│")[10]
    assert "broken: not valid JSON (truncated?)" in text
    assert "price: test prices, 2026-01-01" in text


def test_plot_writes_a_png():
    data = res.render_plot(sample_collection())
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000


def test_plot_refuses_when_nothing_has_throughput():
    rows = [res.Row(job="broken", status="unreadable")]
    with pytest.raises(InputError, match="nothing to plot"):
        res.render_plot(res.Collection(PREFIX, rows))


# --- the command --------------------------------------------------------------------------

def test_cli_results_local_default_table_csv_json_and_plot(prices, tmp_path):
    write_local(prices, "c-1", results_doc("c-1", backend="local", sps=40.0))
    write_local(prices, "c-2", results_doc("c-2", backend="local", sps=60.0))
    write_local(prices, "c-3", b'{"schema": ')
    runner = CliRunner()
    out = tmp_path / "out.png"
    result = runner.invoke(app, ["results", "--plot", str(out)])
    assert result.exit_code == 0, result.output
    assert "c-1" in result.stdout and "c-3" in result.stdout and "unreadable" in result.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from entrypoints.shared.atomic import current_umask

    assert out.stat().st_mode & 0o777 == 0o666 & ~current_umask()  # as open() makes it, not 0600

    result = runner.invoke(app, ["results", "--format", "csv"])
    assert result.exit_code == 0
    assert [r["job"] for r in csv.DictReader(io.StringIO(result.stdout))] == ["c-2", "c-1", "c-3"]

    result = runner.invoke(app, ["results", "--format", "json", "--job", "c-2"])
    assert result.exit_code == 0
    assert [r["job"] for r in json.loads(result.stdout)["rows"]] == ["c-2"]


def test_a_failed_plot_write_leaves_the_old_file_whole(prices, tmp_path, monkeypatch, capsys):
    from orchestrator import paths

    write_local(prices, "c-1", results_doc("c-1", backend="local", sps=40.0))
    out = tmp_path / "plots" / "out.png"
    out.parent.mkdir()
    out.write_bytes(b"the previous plot")

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(paths.os, "replace", fail)
    code, _, err = run_cli(monkeypatch, capsys, "results", "--plot", str(out), "--force")
    assert code == 2 and "cannot write: No space left on device" in err
    assert "hint: the results above are complete" in err and "--plot results.png" in err
    assert out.read_bytes() == b"the previous plot" and list(out.parent.iterdir()) == [out]  # no temp left


def test_cli_results_from_s3_prefix(aws, prices):
    s3, sm = aws
    put_results(s3, "s-1", results_doc("s-1", sps=100.0))
    create_job(sm, "s-1")
    result = CliRunner().invoke(app, ["results", "--prefix", PREFIX, "--format", "json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["rows"][0]
    assert row["samples_per_dollar"] == pytest.approx(180_000) and row["relative"] == 1.0


def test_cli_results_bad_input_is_an_input_error(orch_home):
    runner = CliRunner()
    result = runner.invoke(app, ["results", "--format", "xml", "--prefix", "file:///tmp"])
    assert isinstance(result.exception, InputError) and "--format 'xml'" in result.exception.message
    assert "--format csv" in result.exception.hint
    result = runner.invoke(app, ["results", "--prefix", "file:///tmp", "--spec", "job.yaml"])
    assert isinstance(result.exception, InputError) and "give one" in result.exception.message
    assert "--prefix s3://bucket/jobs" in result.exception.hint and "not both" in result.exception.hint
    # An empty local store and no --prefix: nothing to guess for SageMaker jobs.
    result = runner.invoke(app, ["results"])
    assert isinstance(result.exception, InputError) and "--prefix" in result.exception.hint
    result = runner.invoke(app, ["results", "--sweep", "nothing", "--prefix", (orch_home / "empty").as_uri()])
    assert isinstance(result.exception, InputError)
    assert "no results for sweep nothing" in result.exception.message


def test_cli_results_exit_codes_through_main(orch_home):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "orchestrator", "results", "--job", "a", "--sweep", "b",
                           "--prefix", "file:///tmp"], capture_output=True, text=True, env=env, timeout=patience(120))
    assert done.returncode == 2
    assert "error: --job and --sweep" in done.stderr


def test_cli_results_exit_1_when_a_job_could_not_be_read(prices, monkeypatch):
    write_local(prices, "e-1", results_doc("e-1", backend="local"))
    real = res.ResultsPrefix.get

    def failing(self, job):
        if job == "e-1":
            raise _client_error("InternalError", 500, "GetObject")
        return real(self, job)

    monkeypatch.setattr(res.ResultsPrefix, "get", failing)
    result = CliRunner().invoke(app, ["results", "--format", "csv"])
    assert result.exit_code == 1
    assert "e-1,error" in result.stdout


def test_an_unlistable_prefix_is_a_backend_error(moto_server, prices):
    from orchestrator.errors import BackendError

    with pytest.raises(BackendError, match="cannot list s3://no-such-bucket/jobs: NoSuchBucket"):
        res.collect("s3://no-such-bucket/jobs")


def test_sweep_discovery_failure_is_a_backend_error_not_a_gap(aws, prices):
    from orchestrator.errors import BackendError

    s3, sm = aws
    put_results(s3, "sw-t1", results_doc("sw-t1", sweep="sw"))

    class Refusing:
        meta = sm.meta

        def list_training_jobs(self, **kwargs):
            raise _client_error("AccessDeniedException", 400, "ListTrainingJobs")

    with pytest.raises(BackendError, match="sweep sw") as info:
        res.collect(PREFIX, sweep="sw", backend_for=on_client(Refusing()))
    assert "sagemaker:ListTrainingJobs" in info.value.hint


def test_cli_results_takes_the_prefix_and_region_from_a_spec(prices, tmp_path):
    write_local(prices, "spec-1", results_doc("spec-1", backend="local"))
    spec_file = tmp_path / "local.yaml"
    spec_file.write_text("name: spec\nbackend: local\n")
    result = CliRunner().invoke(app, ["results", "--spec", str(spec_file), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["prefix"] == res.local_store_uri() and [r["job"] for r in doc["rows"]] == ["spec-1"]


def test_reads_what_the_entrypoint_writes(prices):
    """The launcher's own results document (entrypoints/launcher/report.py) parses and becomes a row."""
    from entrypoints.launcher import report
    from entrypoints.shared import contract

    job = {"schema": 1, "job_name": "ep-1", "spec_hash": "cd" * 32,
           "spec": {"backend": "local", "region": "us-east-1", "training": {"batch_size": 8, "runtime": "native",
                                                                            "precision": "fp32", "steps": 20}},
           "instance": {"type": "ml.trn1.2xlarge", "neuron_cores": 2, "logical_cores": 2},
           "workers_per_node": 1, "compile_cache": {"uri": None, "mode": "off"},
           "tags": {"orchestrator:sweep": "sw", "orchestrator:trial": "t1"}, "varied": {"training.optimizer.lr": 0.001}}
    ctr = contract.Contract.from_env({"SM_HOSTS": '["algo-1"]', "SM_CURRENT_HOST": "algo-1", "SM_NUM_CPUS": "6"})
    stats = {0: {"world_size": 1, "batch_size": 8, "step_times_s": [0.1, 0.1, 0.2, 0.1], "steps_done": 20,
                 "runtime": "native", "precision": "fp32", "compile_s": 4.0, "time_to_first_step_s": 5.0,
                 "final_loss": 2.25}}
    cache = {"mode": "tarball", "uri": "file:///c", "key": "k", "hit_entries": 3, "new_entries": 1, "pull_bytes": 0,
             "pull_s": 0.0, "push_bytes": 0, "push_s": 0.0, "pushes": 0, "warnings": [], "persistent_dir": None,
             "local_entries": 0}
    doc = report.build_results(job, ctr, stats, status="completed", reason=None, cache=cache, started=0.0,
                               ended=10.0, warnings=[])
    write_local(prices, "ep-1", (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    row = res.collect(res.local_store_uri()).rows[0]
    assert (row.job, row.status, row.backend, row.sweep, row.trial) == ("ep-1", "completed", "local", "sw", "t1")
    assert row.global_batch == 8 and row.samples_per_s == pytest.approx(8 / 0.125)
    assert row.step_time_p50_s == pytest.approx(0.1) and row.compile_s == 4.0 and row.cache_hit_ratio == 0.75
    # A local job ran on this machine's CPUs: neither the spec's instance type nor its NeuronCores.
    assert row.instance == "local CPU x6" and row.cores is None and row.price_per_hour is None
    assert row.varied == {"training.optimizer.lr": 0.001} and row.final_loss == 2.25


def test_cli_results_table_shows_bracketed_values_verbatim(prices, tmp_path, monkeypatch, capsys):
    """Values in the table are data, never rich markup: "[/x]" would be a MarkupError, "[bold]" would vanish."""
    store = tmp_path / "brackets"
    # A local row names no instance type: the bracketed values travel as varied values.
    write_local(store, "br-1", {**results_doc("br-1", backend="local"), "varied": {"tags.x": "ml.[/x]"}})
    write_local(store, "br-2", {**results_doc("br-2", backend="local"), "varied": {"tags.x": "ml.[bold]y"}})
    prefix = (store / "store" / "jobs").as_uri()
    code, out, err = run_cli(monkeypatch, capsys, "results", "--prefix", prefix)
    assert code == 0, err
    assert "ml.[/x]" in out and "ml.[bold]y" in out and "Traceback" not in err
    code, out, err = run_cli(monkeypatch, capsys, "results", "--job", "br-1", "--prefix", prefix)
    assert code == 0 and "ml.[/x]" in out and "br-2" not in out
    # The title carries the prefix, also verbatim.
    assert res.render_table(res.Collection("file:///tmp/[/p]", [])).splitlines()[0].strip() == \
        "results under file:///tmp/[/p]"


def test_a_prefix_with_a_name_too_long_is_exit_2(tmp_path, monkeypatch, capsys):
    prefix = f"file://{tmp_path}/{'a' * 256}/jobs"
    code, out, err = run_cli(monkeypatch, capsys, "results", "--prefix", prefix)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith(f"error: --prefix {prefix!r}: {tmp_path}/{'a' * 256}/jobs: File name too long\n")


def test_a_plot_on_a_full_disk_says_the_disk_is_full(prices, tmp_path, monkeypatch, capsys):
    # QA: a full disk said "make the file writable" / "a folder you can write".
    from orchestrator import paths

    write_local(prices, "c-1", results_doc("c-1", backend="local", sps=40.0))

    def full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(paths.os, "replace", full)
    code, _, err = run_cli(monkeypatch, capsys, "results", "--plot", str(tmp_path / "out.png"))
    assert code == 2
    assert "hint: the results above are complete; for the plot, the disk is full: free some space there, or run " \
           "again with --plot a file in a folder you can write" in err


@pytest.mark.timeout(60)
def test_a_results_object_that_is_a_fifo_device_or_folder_is_a_row_not_a_hang(prices, orch_home, monkeypatch, capsys):
    import os

    base = orch_home / "store" / "jobs" / "results"
    write_local(prices, "ok-1", results_doc("ok-1", backend="local", sps=40.0))
    for job in ("fifo-1", "dev-1", "dir-1"):
        (base / job).mkdir(parents=True)
    os.mkfifo(base / "fifo-1" / "results.json")  # reading it would block for ever
    (base / "dev-1" / "results.json").symlink_to("/dev/zero")  # and this one never end
    (base / "dir-1" / "results.json").mkdir()
    code, out, err = run_cli(monkeypatch, capsys, "results", "--format", "json")
    assert code == 0, err
    rows = {row["job"]: row for row in json.loads(out)["rows"]}
    assert rows["fifo-1"]["status"] == "unreadable" and "is a FIFO (named pipe), not a regular file" in rows["fifo-1"]["note"]
    assert "is a character device" in rows["dev-1"]["note"] and "is a folder" in rows["dir-1"]["note"]
    assert rows["ok-1"]["samples_per_s"] == 40.0


def test_a_batch_trial_without_results_is_a_row_with_batchs_word_for_it(aws, prices):
    """A sweep's Batch trial cancelled for capacity before it wrote results.json is listed by
    the Batch backend (not only by SageMaker, the default) and described by it."""
    from orchestrator.backends import JobStatus
    from orchestrator.lifecycle import Status

    s3, sm = aws
    put_results(s3, "swb-t1", results_doc("swb-t1", sweep="swb"))
    create_job(sm, "swb-t1")
    reason = "Canceled by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
    asked: list[tuple[str, str]] = []

    class FakeBatch:
        name, cloud, place = "batch", True, "AWS Batch in us-east-1"

        def job_names(self, containing, *, in_flight=False):
            asked.append(("job_names", containing))
            return ["swb-t2", "other-t9"]

        def describe(self, job):
            asked.append(("describe", job))
            return JobStatus(job_name=job, status=Status.FAILED, secondary="FAILED", failure_reason=reason,
                             instance_type="inf2.xlarge", instance_count=1)

    sagemaker = on_client(sm)

    def backend_for(name, region):
        return FakeBatch() if name == "batch" else sagemaker(name, region)

    rows = by_job(res.collect(PREFIX, sweep="swb", region="us-east-1", backend_for=backend_for, workers=1))
    assert set(rows) == {"swb-t1", "swb-t2"}
    row = rows["swb-t2"]
    assert (row.status, row.backend, row.instance) == ("failed", "batch", "inf2.xlarge")
    assert reason in row.note and "no results.json" in row.note
    assert ("describe", "swb-t2") in asked and ("describe", "swb-t1") not in asked


def test_a_damaged_prices_file_is_one_clear_error_not_an_error_row_per_job(prices, monkeypatch, capsys):
    """QA: every row, local ones included, became an error; `plan` gives one exit-2 message."""
    write_local(prices, "loc-1", results_doc("loc-1", backend="local"))
    write_local(prices, "loc-2", results_doc("loc-2", backend="local"))
    (prices / "prices.json").write_text('{"prices": [{"type": "ml.trn1.2xlarge"}]}')
    with pytest.raises(InputError) as info:
        res.collect(res.local_store_uri(), workers=2)
    assert info.value.message == f"{prices / 'prices.json'}: prices[0]: missing 'region'"
    assert "delete" in info.value.hint
    from cli_harness import run_cli

    code, out, err = run_cli(monkeypatch, capsys, "results")
    assert code == 2 and out == "", (out, err)
    assert err.count("prices[0]: missing 'region'") == 1 and "Traceback" not in err


def test_plot_and_html_targets_are_resolved_before_anything_is_written(prices, tmp_path, monkeypatch, capsys):
    # QA: --html through a dangling link created the link's missing folders (as root, anywhere),
    # a path in a missing folder created every parent silently, and the same path for both
    # silently kept only the HTML.
    write_local(prices, "c-1", results_doc("c-1", backend="local", sps=40.0))
    link = tmp_path / "report.html"
    link.symlink_to(tmp_path / "elsewhere" / "deep" / "report.html")
    code, out, err = run_cli(monkeypatch, capsys, "results", "--html", str(link))
    assert code == 2 and out == ""  # refused before the table: output never goes through a link
    assert f"error: --html {link}: is a symbolic link (to {tmp_path}/elsewhere/deep/report.html)" in err
    assert not (tmp_path / "elsewhere").exists()
    code, _, err = run_cli(monkeypatch, capsys, "results", "--plot", str(tmp_path / "typo" / "a" / "out.png"))
    assert code == 2 and "the folder" in err and "does not exist" in err and "create the folder first" in err
    assert not (tmp_path / "typo").exists()
    same = tmp_path / "both.out"
    alias = tmp_path / "alias" / "both.out"
    (tmp_path / "alias").symlink_to(tmp_path)  # a linked folder on the way is followed
    for html in (same, alias):
        code, out, err = run_cli(monkeypatch, capsys, "results", "--plot", str(same), "--html", str(html))
        assert code == 2 and out == ""
        assert f"error: --plot and --html both write {same}; only one of them would be kept" in err
        assert not same.exists()
    # Two files in folders that exist are written.
    code, _, err = run_cli(monkeypatch, capsys, "results", "--plot", str(tmp_path / "p.png"),
                           "--html", str(tmp_path / "r.html"))
    assert code == 0, err
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and b"<html" in (tmp_path / "r.html").read_bytes()
