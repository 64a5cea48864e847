"""The contract check (orchestrator/aws_contract.py): botocore's whole service model and the
documented-limits table, against the requests the product builds, before any AWS call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import run_cli
from job_waits import patience

from orchestrator import aws_contract, provenance, request
from orchestrator.spec import load

ROOT = Path(__file__).resolve().parents[1]
BASE = (ROOT / "configs" / "vit-trn1-2xlarge.yaml").read_text()
# A prefix whose keys pass S3's 1,024 bytes once the job's own path is added below it.
LONG_PREFIX = "s3://orchestrator-example-bucket/" + "p" * 990


def _spec(tmp_path, text: str = BASE, name: str = "job.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# --- the model walk -------------------------------------------------------------------------


def test_the_model_walk_finds_maximums_enums_ranges_and_sizes(orch_home, tmp_path):
    """botocore validates types and minimums only; the walk reads every maximum, enum, range
    and size of CreateTrainingJob's model, and names the shape it came from."""
    built = request.prepare(load(_spec(tmp_path))).request
    assert aws_contract.violations("sagemaker", "CreateTrainingJob", built) == []
    bad = json.loads(json.dumps(built))
    bad["OutputDataConfig"]["S3OutputPath"] = "s3://b/" + "k" * 1100
    bad["AlgorithmSpecification"]["TrainingInputMode"] = "Streaming"
    bad["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 21_601
    bad["Tags"] = [{"Key": f"k{i}", "Value": "v"} for i in range(51)]
    everything = aws_contract.violations("sagemaker", "CreateTrainingJob", bad)
    found = {v.path: v for v in everything if "botocore" in v.source}
    assert "1107 characters; at most 1024 allowed" in found["OutputDataConfig.S3OutputPath"].problem
    assert "shape S3Uri" in found["OutputDataConfig.S3OutputPath"].source
    # ...and the table's S3 key limit on the same URI, with its own source.
    assert any(v.path == "OutputDataConfig.S3OutputPath" and "object-keys.html" in v.source for v in everything)
    assert "is not one of" in found["AlgorithmSpecification.TrainingInputMode"].problem
    assert "above the maximum 21600" in found["ResourceConfig.KeepAlivePeriodInSeconds"].problem
    assert "51 items; at most 50 allowed" in found["Tags"].problem
    # Unicode-class patterns (the tags') are read, not skipped.
    assert aws_contract.unreadable_patterns() == frozenset()
    tagged = dict(built, Tags=[{"Key": "bad{key}", "Value": "v"}])
    assert any("does not match the pattern" in v.problem and v.path == "Tags[0].Key"
               for v in aws_contract.violations("sagemaker", "CreateTrainingJob", tagged))


def test_the_table_holds_limits_no_model_has_each_with_a_source():
    for entry in aws_contract.limits():
        assert entry["source"] and ("https://docs.aws.amazon.com/" in entry["source"]), entry["id"]
    body = "x" * 51_200
    assert aws_contract.violations("cloudformation", "CreateChangeSet",
                                   {"StackName": "s", "ChangeSetName": "c", "TemplateBody": body}) == []
    found = aws_contract.violations("cloudformation", "CreateChangeSet",
                                    {"StackName": "s", "ChangeSetName": "c", "TemplateBody": body + "é"})
    assert [v.path for v in found] == ["TemplateBody"] and "51202 bytes; at most 51200" in found[0].problem
    assert "API_CreateChangeSet.html" in found[0].source
    # S3's key limit is bytes of UTF-8, not characters: 513 two-byte characters are too many.
    assert aws_contract.violations("s3", "PutObject", {"Bucket": "b", "Key": "é" * 512}) == []
    found = aws_contract.violations("s3", "PutObject", {"Bucket": "b", "Key": "é" * 513})
    assert any(v.path == "Key" and "1026 bytes" in v.problem and "object-keys.html" in v.source for v in found)
    # A Batch job may not set the variables Batch reserves for itself.
    found = aws_contract.violations("batch", "SubmitJob", {
        "jobName": "j", "jobQueue": "q", "jobDefinition": "d",
        "containerOverrides": {"environment": [{"name": "AWS_BATCH_JOB_ID", "value": "x"}]}})
    assert [v.path for v in found] == ["containerOverrides.environment[0].name"]


def test_a_derived_value_is_reported_at_the_field_it_came_from(orch_home, tmp_path):
    spec = load(_spec(tmp_path))
    built = request.prepare(spec).request
    code = next(i for i, c in enumerate(built["InputDataConfig"]) if c["ChannelName"] == "code")
    assert provenance.field(spec, "CreateTrainingJob", built,
                            f"InputDataConfig[{code}].DataSource.S3DataSource.S3Uri") == "output.uri"
    assert provenance.field(spec, "CreateTrainingJob", built, "TensorBoardOutputConfig.S3OutputPath") == "output.uri"
    assert provenance.field(spec, "CreateTrainingJob", built, "TrainingJobName") == "name"
    team = next(i for i, t in enumerate(built["Tags"]) if t["Key"] == "team")
    assert provenance.field(spec, "CreateTrainingJob", built, f"Tags[{team}].Value") == "tags.team"


# --- the commands: exit 2 before any AWS call ------------------------------------------------


def _long(tmp_path) -> Path:
    return _spec(tmp_path, BASE.replace("s3://orchestrator-example-bucket/jobs", LONG_PREFIX))


@pytest.mark.parametrize("command", [["validate"], ["plan"]])
def test_a_prefix_too_long_for_s3_keys_exits_2_naming_output_uri(command, orch_home, tmp_path, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, *command, str(_long(tmp_path)))
    assert code == 2, (out, err)
    assert "output.uri" in err and "S3 allows at most 1024" in err and "object-keys.html" in err
    assert ":23:" in err  # the line of output.uri in the spec
    # Every location derived from the prefix is named, the limit's source quoted once.
    assert err.count("S3 allows at most 1024") >= 4 and err.count("object-keys.html") == 1


def test_submit_of_a_too_long_prefix_sends_nothing(orch_home, tmp_path, moto_server, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr("botocore.client.BaseClient._make_api_call",
                        lambda self, operation, params: calls.append(operation))
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(_long(tmp_path)))
    assert code == 2 and "output.uri" in err and "1024" in err, (out, err)
    assert calls == []


def test_the_prefix_at_the_limit_passes(orch_home, tmp_path, monkeypatch, capsys):
    # The longest key a job writes under output.uri is its results.json with a 63-character
    # job name: <prefix>/results/<name>/results.json. Room for exactly that passes.
    room = 1024 - len("/results/" + "n" * 63 + "/results.json") - len("jobs-")
    ok = BASE.replace("s3://orchestrator-example-bucket/jobs", "s3://orchestrator-example-bucket/jobs-" + "p" * room)
    code, out, err = run_cli(monkeypatch, capsys, "validate", str(_spec(tmp_path, ok)))
    assert code == 0, err
    code, out, err = run_cli(monkeypatch, capsys, "validate", str(_spec(tmp_path, ok.replace("jobs-", "jobs-p"))))
    assert code == 2 and "results.json" in err and "1025 bytes" in err


def test_sweep_plan_refuses_a_trial_aws_would_refuse(orch_home, tmp_path, monkeypatch, capsys):
    _long(tmp_path).rename(tmp_path / "base.yaml")
    sweep = _spec(tmp_path, "sweep: long\nbase: base.yaml\ngrid: {training.batch_size: [8, 16]}\n", "sweep.yaml")
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "plan", str(sweep))
    assert code == 2 and "output.uri" in err and "1024" in err, (out, err)


# --- the tests' hook ------------------------------------------------------------------------


def test_the_hook_sees_a_call_aws_would_refuse_that_moto_takes(moto_server, aws_contract_calls):
    import boto3

    cfn = boto3.client("cloudformation")
    body = '{"Resources":{"Topic":{"Type":"AWS::SNS::Topic"}},"Metadata":{"Padding":"' + "x" * 51_200 + '"}}'
    cfn.validate_template(TemplateBody=body)  # moto takes it
    found = aws_contract_calls()
    assert len(found) == 1 and found[0].startswith("cloudformation ValidateTemplate: TemplateBody:"), found
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="hook-bucket")
    s3.put_object(Bucket="hook-bucket", Key="k" * 1025, Body=b"x")  # moto takes this too
    found = aws_contract_calls()
    assert len(found) == 1 and "s3 PutObject: Key: 1025 bytes" in found[0], found


def test_a_test_whose_call_aws_would_refuse_fails(tmp_path):
    """The hook fails the test that made the call, even when the code under test swallowed the
    error (here the call goes to a Stubber, which answers it as moto would)."""
    import os
    import subprocess
    import sys

    (tmp_path / "test_refused.py").write_text(
        "import boto3\n"
        "from botocore.stub import Stubber\n"
        "def test_long_key():\n"
        "    s3 = boto3.client('s3', region_name='us-east-1', aws_access_key_id='x', aws_secret_access_key='x')\n"
        "    with Stubber(s3) as stub:\n"
        "        stub.add_response('put_object', {})\n"
        "        s3.put_object(Bucket='b', Key='k' * 1025, Body=b'x')\n"
        "def test_short_key():\n"
        "    s3 = boto3.client('s3', region_name='us-east-1', aws_access_key_id='x', aws_secret_access_key='x')\n"
        "    with Stubber(s3) as stub:\n"
        "        stub.add_response('put_object', {})\n"
        "        s3.put_object(Bucket='b', Key='k' * 1024, Body=b'x')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "aws_contract_hook", "-p", "no:cacheprovider",
                           "-p", "no:xdist", str(tmp_path / "test_refused.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=patience(120))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert "AWS would refuse calls this test made" in done.stdout and "s3 PutObject: Key: 1025 bytes" in done.stdout
