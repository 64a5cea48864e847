"""orchestrator/infra/ and `orchestrator infra ...`: deploy infra/stack.yaml into moto's
CloudFormation, read its outputs, write the `infra:` file, and submit a job that uses them.

moto's CloudFormation neither rolls back nor emits resource events, so the rollback report,
the timeout and CloudFormation's own validation errors are driven through botocore's Stubber
with the responses real CloudFormation sends.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from job_waits import patience

from entrypoints.shared import atomic
from orchestrator import infra, spec
from orchestrator.errors import BackendError, InputError

ROOT = Path(__file__).resolve().parents[1]
REGION = "us-east-1"
ACCOUNT = "123456789012"
STACK_ID = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/orchestrator/11111111-2222-3333-4444-555555555555"
# moto's CloudFormation skips the bucket policy (test_infra_policy.py asserts it on the template).
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS..S3..BucketPolicy")
CHANGE_SET_ID = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:changeSet/cs/66666666-7777-8888-9999-000000000000"


def run_cli(monkeypatch, capsys, *args: str, stdin: str = "") -> tuple[int, str, str]:
    """Run `python -m orchestrator ARGS` in this process: (exit code, stdout, stderr)."""
    from orchestrator import cli

    monkeypatch.setattr(sys, "argv", ["orchestrator", *args])
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_subprocess(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=patience(120))


def cfn_client():
    return boto3.client("cloudformation", region_name=REGION)


def stack_outputs(stack_name: str = "orchestrator") -> dict[str, str]:
    stack = cfn_client().describe_stacks(StackName=stack_name)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


# --- the template loader ----------------------------------------------------------------


def test_template_loader_reads_short_form_tags_as_cfn_lint_does():
    from cfnlint.decode import decode_str

    ours = infra.load_template()
    theirs, matches = decode_str(infra.TEMPLATE.read_text())
    assert matches == []
    assert ours == json.loads(json.dumps(theirs))
    bucket_name = ours["Resources"]["Bucket"]["Properties"]["BucketName"]
    assert bucket_name == {"Fn::If": ["HasBucketName", {"Ref": "BucketName"}, {"Ref": "AWS::NoValue"}]}


def test_load_template_refuses_a_missing_or_non_template_file(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        infra.load_template(tmp_path / "missing.yaml")
    other = tmp_path / "other.yaml"
    other.write_text("just: a mapping\n")
    with pytest.raises(InputError, match="no Resources") as info:
        infra.load_template(other)
    assert "git checkout -- infra/stack.yaml" in info.value.hint
    other.write_text("Resources: [unclosed\n")
    with pytest.raises(InputError, match="not a valid template") as info:
        infra.load_template(other)
    assert info.value.hint.startswith("fix the YAML") and "infra/stack.yaml" in info.value.hint
    # A template without the OperatorPolicy resource has no policy to print.
    other.write_text("Resources: {Bucket: {Type: AWS::S3::Bucket}}\n")
    with pytest.raises(InputError, match="no OperatorPolicy policy document") as info:
        infra.operator_policy(None, template_path=other)
    assert "Properties.PolicyDocument" in info.value.hint and "infra/stack.yaml" in info.value.hint


def test_resolve_evaluates_intrinsics_and_drops_no_value():
    fragment = {
        "A": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${Bucket}/x-${!Literal}"},
        "B": {"Fn::If": ["On", {"Ref": "Bucket"}, {"Ref": "AWS::NoValue"}]},
        "C": [{"Fn::GetAtt": ["Role", "Arn"]}, {"Fn::If": ["On", "kept", {"Ref": "AWS::NoValue"}]}],
        "D": {"Fn::Sub": ["${X}-${Bucket}", {"X": {"Ref": "AWS::Region"}}]},
        "E": {"Fn::Join": ["/", ["a", {"Ref": "Bucket"}]]},
    }
    context = {"AWS::Partition": "aws", "Bucket": "b", "Role.Arn": "arn:role", "AWS::Region": "eu-west-1"}
    assert infra.evaluate(fragment, context, {"On": False}) == {
        "A": "arn:aws:s3:::b/x-${Literal}", "C": ["arn:role"], "D": "eu-west-1-b", "E": "a/b"}
    assert infra.evaluate(fragment, context, {"On": True})["B"] == "b"
    with pytest.raises(InputError, match="Nope") as info:
        infra.evaluate({"Ref": "Nope"}, context, {})
    assert "(AWS::Partition, AWS::Region, Bucket, Role.Arn)" in info.value.hint
    assert "operator_policy()'s context" in info.value.hint
    with pytest.raises(InputError, match="condition 'Off'") as info:
        infra.evaluate({"Fn::If": ["Off", 1, 2]}, context, {"On": True})
    assert "evaluates (On)" in info.value.hint


# --- parameters -------------------------------------------------------------------------


def test_parameters_are_checked_against_the_template():
    assert infra.parse_parameters(["CompileCacheNoncurrentDays=14", "BucketName=my-bucket-1"]) == {
        "CompileCacheNoncurrentDays": "14", "BucketName": "my-bucket-1"}
    assert infra.parse_parameters([], kms=True) == {"UseKms": "true"}
    assert infra.parse_parameters([], kms=False) == {"UseKms": "false"}
    assert infra.parse_parameters([]) == {}


@pytest.mark.parametrize(("pairs", "kms", "message"), [
    (["CompileCacheNoncurentDays=3"], None, "did you mean 'CompileCacheNoncurrentDays'"),
    (["Colour=red"], None, "no parameter 'Colour'"),
    (["UseKms"], None, "expected NAME=VALUE"),
    (["UseKms=maybe"], None, "must be one of true, false"),
    (["CompileCacheNoncurrentDays=0"], None, "must be at least 1"),
    (["CompileCacheNoncurrentDays=many"], None, "must be a number"),
    # S3 lifecycle days are whole numbers; CloudFormation's Number type would take these.
    (["CompileCacheNoncurrentDays=1.5"], None, "must be a whole number"),
    (["AbortIncompleteUploadDays=1e1"], None, "must be a whole number"),
    (["AbortIncompleteUploadDays=nan"], None, "must be a finite number"),
    (["BucketName=Not_A_Bucket"], None, "does not match"),
    (["ImageRegistryAccount=123"], None, "12-digit"),
    (["UseKms=true", "UseKms=true"], None, "given twice"),
    (["UseKms=false"], True, "--kms contradicts"),
])
def test_bad_parameters_are_input_errors(pairs, kms, message):
    with pytest.raises(InputError, match=message) as info:
        infra.parse_parameters(pairs, kms=kms)
    assert info.value.hint  # each says what to give instead


def test_parameter_hints_name_the_flag_to_keep():
    with pytest.raises(InputError) as info:
        infra.parse_parameters(["UseKms=true", "UseKms=true"])
    assert info.value.hint == "keep one --param UseKms=VALUE"
    with pytest.raises(InputError) as info:
        infra.parse_parameters(["UseKms=false"], kms=True)
    assert info.value.hint == "drop --param UseKms=false: --kms sets UseKms=true"


def test_integer_parameters_are_those_the_template_passes_to_integer_properties():
    assert infra.integer_parameters(infra.load_template()) == {
        "CompileCacheNoncurrentDays", "AbortIncompleteUploadDays", "BatchCapacityWaitSeconds", "BatchRootVolumeGiB",
        "BatchLogRetentionDays"}
    template = {
        "Parameters": {"Days": {"Type": "Number"}, "Ratio": {"Type": "Number"}, "Name": {"Type": "String"}},
        "Resources": {"B": {"Type": "AWS::S3::Bucket", "Properties": {
            "Tag": {"Fn::Sub": "${Ratio}"}, "Other": {"Ref": "Ratio"},
            "Rule": {"ExpirationInDays": {"Fn::If": ["C", {"Ref": "Days"}, {"Ref": "AWS::NoValue"}]},
                     "Prefix": {"Ref": "Name"}}}}},
    }
    assert infra.integer_parameters(template) == {"Days"}
    assert infra.parse_parameters(["Ratio=0.5", "Days=3"], template=template) == {"Ratio": "0.5", "Days": "3"}
    with pytest.raises(InputError, match=r"--param Days=0\.5: must be a whole number"):
        infra.parse_parameters(["Days=0.5"], template=template)


def test_cli_refuses_a_fractional_lifecycle_day_with_exit_2(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--yes", "--param",
                             "CompileCacheNoncurrentDays=1.5")
    assert code == 2
    assert "--param CompileCacheNoncurrentDays=1.5: must be a whole number" in err
    assert "replaced versions of compile-cache/" in err  # the parameter's description, as the hint
    assert out == ""


def no_aws_client(monkeypatch) -> list:
    """Make every infra command's client one that records and refuses any AWS call."""
    cfn = cfn_client()
    calls: list = []
    cfn.meta.events.register("before-call", lambda model, **kwargs: calls.append(model.name))
    Stubber(cfn).activate()  # no responses queued: any call would fail
    monkeypatch.setattr(infra, "make_client", lambda service, region: cfn)
    return calls


@pytest.mark.parametrize("name", ["", "1stack", "my_stack", "my stack", "a" * 129])
@pytest.mark.parametrize("command", [["deploy", "--yes"], ["outputs", "--write", "infra.yaml"], ["policy"]])
def test_a_stack_name_cloudformation_refuses_exits_2_before_any_aws_call(
        name, command, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    calls = no_aws_client(monkeypatch)
    code, out, err = run_cli(monkeypatch, capsys, "infra", command[0], "--stack-name", name, *command[1:])
    assert code == 2, err
    assert "--stack-name" in err and "not a CloudFormation stack name" in err
    assert "^[A-Za-z][-A-Za-z0-9]*$" in err and "at most 128 characters" in err
    assert out == ""
    assert calls == []
    assert list(tmp_path.iterdir()) == []


def test_check_stack_name_takes_what_cloudformation_takes():
    for name in ("orchestrator", "a", "Vit-2", "a" * 128):
        assert infra.check_stack_name(name) == name
    for call in (lambda: infra.read_outputs(cfn_client(), ""), lambda: infra.stack_status(cfn_client(), "-x"),
                 lambda: infra.plan_change_set(cfn_client(), "x_y", {}), lambda: infra.operator_policy(None, stack_name="")):
        with pytest.raises(InputError, match="not a CloudFormation stack name"):
            call()


def test_outputs_with_an_empty_stack_name_do_not_read_another_stack(
        moto_server, moto_change_set_outputs, monkeypatch, capsys, tmp_path):
    # DescribeStacks without a name lists every stack; "" must not fall through to the first one.
    cfn = cfn_client()
    infra.execute(cfn, infra.plan_change_set(cfn, "other", {}, sleep=lambda s: None), sleep=lambda s: None)
    target = tmp_path / "x.yaml"
    code, out, err = run_cli(monkeypatch, capsys, "infra", "outputs", "--stack-name", "", "--write", str(target))
    assert code == 2
    assert "--stack-name ''" in err
    assert out == ""
    assert not target.exists()


def test_cli_parameter_error_exits_2_before_any_aws_call(monkeypatch, capsys):
    # No endpoint and no stack: the flag is refused before a client is even built.
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--yes", "--param", "UseKms=maybe")
    assert code == 2
    assert "--param UseKms=maybe: must be one of true, false" in err
    assert out == ""


# --- deploy, outputs and a job that uses them, against the moto server ----------------------


def test_deploy_write_outputs_and_submit_a_job_against_the_same_moto_server(
        moto_server, moto_change_set_outputs, orch_home, tmp_path, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--yes", "--region", REGION)
    assert code == 0, err
    lines = out.splitlines()
    # The change set is shown before anything runs, then the progress, then the outputs.
    first_change = next(i for i, line in enumerate(lines) if "AWS::S3::Bucket" in line and "Add" in line)
    first_event = next(i for i, line in enumerate(lines) if "CREATE_IN_PROGRESS" in line)
    done = lines.index("stack orchestrator: deployed")
    assert lines[0].startswith("change set orchestrator-") and "CREATE stack orchestrator in us-east-1" in lines[0]
    assert first_change < first_event < done
    for resource in ("ExecutionRole", "OperatorPolicy", "BucketPolicy"):
        assert any(resource in line and "Add" in line for line in lines[:first_event])

    outputs = stack_outputs()
    bucket = outputs["BucketName"]
    assert outputs["RoleArn"] in out
    # The next steps: the outputs file, and attaching the operator policy to whoever submits.
    assert ("next: attach the operator policy to whoever submits jobs: aws iam attach-user-policy --user-name "
            f"YOUR_USER --policy-arn {outputs['OperatorPolicyArn']}") in out
    # The stack really made the role and the bucket the outputs name.
    role_name = outputs["RoleArn"].rsplit("/", 1)[1]
    trust = boto3.client("iam").get_role(RoleName=role_name)["Role"]["AssumeRolePolicyDocument"]
    assert trust["Statement"][0]["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    s3 = boto3.client("s3", region_name=REGION)
    s3.head_bucket(Bucket=bucket)
    assert s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0][
        "ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"

    configs = tmp_path / "configs"
    infra_file = configs / "infra.yaml"
    code, out, err = run_cli(monkeypatch, capsys, "infra", "outputs", "--region", REGION, "--write", str(infra_file))
    assert code == 0, err
    written = yaml.safe_load(infra_file.read_text())
    assert written == {
        "role_arn": outputs["RoleArn"],
        "compile_cache_uri": f"s3://{bucket}/compile-cache",
        "output_uri": f"s3://{bucket}/jobs",
        "bucket": bucket,
        "stack_name": "orchestrator",
        "region": REGION,
    }
    assert [p.name for p in configs.iterdir()] == ["infra.yaml"]
    # A config file for the user to read and commit: the mode open() gives, not mkstemp's 0600.
    assert infra_file.stat().st_mode & 0o777 == 0o666 & ~atomic.current_umask()

    job_file = configs / "job.yaml"
    job_file.write_text(
        "name: vit-infra\n"
        "backend: sagemaker\n"
        "infra: infra.yaml\n"
        "instance: {type: ml.trn1.2xlarge}\n"
        "training: {steps: 20, warmup_steps: 2, batch_size: 8}\n"
    )
    loaded = spec.load(job_file)
    assert loaded.role_arn == outputs["RoleArn"]
    assert loaded.compile_cache.uri == f"s3://{bucket}/compile-cache"
    assert loaded.output.uri == f"s3://{bucket}/jobs"
    assert loaded.region == REGION

    from orchestrator import request
    from orchestrator.backends.sagemaker import SageMakerBackend

    prepared = request.prepare(loaded)
    submitted = SageMakerBackend.connect(REGION).submit(prepared)
    assert submitted.created
    described = boto3.client("sagemaker", region_name=REGION).describe_training_job(
        TrainingJobName=submitted.job_name)
    assert described["RoleArn"] == outputs["RoleArn"]
    assert described["OutputDataConfig"]["S3OutputPath"] == f"s3://{bucket}/jobs"
    # Everything the submit wrote lies under a prefix the operator policy lets it write.
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys and all(key.startswith("jobs/") for key in keys)
    assert f"s3://{bucket}/{keys[0]}" == prepared.source_uri


def test_cli_deploy_outputs_and_submit_as_subprocesses(moto_server, moto_change_set_outputs, orch_home, tmp_path):
    """The commands of the README, as a user runs them, with AWS_ENDPOINT_URL at moto."""
    deployed = run_subprocess("infra", "deploy", "--yes", "--kms", "--stack-name", "vit", cwd=tmp_path)
    assert deployed.returncode == 0, deployed.stderr
    assert "parameter UseKms=true" in deployed.stdout
    assert "Add      EncryptionKey" in deployed.stdout
    written = run_subprocess("infra", "outputs", "--stack-name", "vit", "--write", "configs/infra.yaml", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    outputs = stack_outputs("vit")
    assert outputs["KmsKeyArn"] in written.stdout
    bucket = outputs["BucketName"]
    encryption = boto3.client("s3", region_name=REGION).get_bucket_encryption(Bucket=bucket)
    rule = encryption["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"] == {"SSEAlgorithm": "aws:kms",
                                                          "KMSMasterKeyID": outputs["KmsKeyArn"]}
    (tmp_path / "configs" / "job.yaml").write_text(
        "name: vit-sub\nbackend: sagemaker\ninfra: infra.yaml\n"
        "training: {steps: 20, warmup_steps: 2, batch_size: 8}\n")
    submitted = run_subprocess("submit", "configs/job.yaml", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    jobs = boto3.client("sagemaker", region_name=REGION).list_training_jobs()["TrainingJobSummaries"]
    assert len(jobs) == 1
    described = boto3.client("sagemaker", region_name=REGION).describe_training_job(
        TrainingJobName=jobs[0]["TrainingJobName"])
    assert described["RoleArn"] == outputs["RoleArn"]
    assert described["OutputDataConfig"]["S3OutputPath"] == f"s3://{bucket}/jobs"
    assert submitted.stdout.strip() == jobs[0]["TrainingJobName"]


def readme_setup_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Setting up AWS (infra/)", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1]


def test_readme_setup_commands_run_from_nothing_to_a_submitted_job(
        moto_server, moto_change_set_outputs, orch_home, tmp_path, monkeypatch):
    """Run the README's "Setting up AWS" commands as written, against the moto server."""
    block = readme_setup_block()
    heredoc = re.search(r"cat > (\S+) <<'EOF'\n(.*?)\nEOF\n", block, re.S)
    assert heredoc, "the README section writes a job spec with a heredoc"
    commands = [line.split() for line in block.splitlines() if line.startswith("python -m orchestrator ")]
    assert [c[3] for c in commands] == ["infra", "infra", "validate", "plan", "submit"]
    # Only the region the README exports: neither variable is set before.
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    exports = re.findall(r"^export (\w+)=(\S+)", block, re.M)
    assert exports == [("AWS_REGION", REGION)]
    for name, value in exports:
        monkeypatch.setenv(name, value)
    (tmp_path / "configs").mkdir()
    for argv in commands:
        if argv[3] == "validate":
            (tmp_path / heredoc.group(1)).write_text(heredoc.group(2) + "\n")
        stdin = "y\n" if argv[3:5] == ["infra", "deploy"] else ""
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, env=env, input=stdin,
                              capture_output=True, text=True, timeout=patience(120))
        assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
    outputs = stack_outputs()
    boto3.client("iam", region_name=REGION).get_policy(PolicyArn=outputs["OperatorPolicyArn"])  # step 3 attaches this
    (job,) = boto3.client("sagemaker", region_name=REGION).list_training_jobs()["TrainingJobSummaries"]
    described = boto3.client("sagemaker", region_name=REGION).describe_training_job(
        TrainingJobName=job["TrainingJobName"])
    assert described["RoleArn"] == outputs["RoleArn"]
    assert described["TrainingJobName"].startswith("vit-first-")


def test_deploy_again_is_nothing_to_do_and_a_changed_parameter_updates(
        moto_server, moto_change_set_outputs, monkeypatch, capsys):
    assert run_cli(monkeypatch, capsys, "infra", "deploy", "--yes")[0] == 0
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--yes")
    assert code == 0, err
    assert "nothing to do" in out
    assert infra.stack_status(cfn_client(), "orchestrator") == "CREATE_COMPLETE"

    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--yes", "--param",
                             "CompileCacheNoncurrentDays=14")
    assert code == 0, err
    assert "UPDATE stack orchestrator" in out
    assert "UPDATE_COMPLETE" in out
    params = {p["ParameterKey"]: p["ParameterValue"]
              for p in cfn_client().describe_stacks(StackName="orchestrator")["Stacks"][0]["Parameters"]}
    # The parameter given changed; those not given kept their deployed values.
    assert params["CompileCacheNoncurrentDays"] == "14"
    assert params["UseKms"] == "false"


def test_update_change_set_keeps_parameters_not_given():
    stubbed = cfn_client()
    with Stubber(stubbed) as stub:
        stub.add_response("describe_stacks", {"Stacks": [{
            "StackName": "orchestrator", "StackId": STACK_ID, "CreationTime": dt.datetime(2026, 1, 1),
            "StackStatus": "CREATE_COMPLETE",
            "Parameters": [{"ParameterKey": "CompileCacheNoncurrentDays", "ParameterValue": "9"},
                           {"ParameterKey": "UseKms", "ParameterValue": "false"}]}]})
        expected = [{"ParameterKey": "UseKms", "ParameterValue": "true"},
                    {"ParameterKey": "CompileCacheNoncurrentDays", "UsePreviousValue": True}]
        stub.add_response("create_change_set", {"Id": CHANGE_SET_ID, "StackId": STACK_ID}, {
            "StackName": "orchestrator", "ChangeSetName": stub_any(), "ChangeSetType": "UPDATE",
            "TemplateBody": infra.template_body(infra.load_template()), "Parameters": expected,
            "Capabilities": ["CAPABILITY_IAM"], "Description": "orchestrator infra deploy"})
        stub.add_response("describe_change_set", change_set_response("CREATE_COMPLETE", changes=[
            {"Type": "Resource", "ResourceChange": {"Action": "Modify", "LogicalResourceId": "Bucket",
                                                    "ResourceType": "AWS::S3::Bucket", "Replacement": "False"}}]))
        plan = infra.plan_change_set(stubbed, "orchestrator", {"UseKms": "true"}, sleep=lambda s: None)
    assert plan.kind == "UPDATE"
    assert plan.changes == (infra.Change("Modify", "Bucket", "AWS::S3::Bucket", "False"),)


def test_declining_the_change_set_executes_nothing_and_cleans_up(moto_server, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", stdin="n\n")
    assert code == 0, err
    assert "Add      Bucket" in out
    assert "not executed" in out
    # The empty stack CloudFormation made to hold the CREATE change set is gone too.
    assert infra.stack_status(cfn_client(), "orchestrator") is None
    assert boto3.client("s3", region_name=REGION).list_buckets()["Buckets"] == []


def test_deploy_without_yes_and_without_a_terminal_exits_2_and_leaves_nothing(moto_server, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", stdin="")
    assert code == 2
    assert "pass --yes" in err
    assert infra.stack_status(cfn_client(), "orchestrator") is None


def test_outputs_of_a_missing_stack_exit_2_and_policy_falls_back_to_placeholders(
        moto_server, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "infra", "outputs", "--stack-name", "nope")
    assert code == 2
    assert "no stack 'nope' in region us-east-1" in err
    assert "`python -m orchestrator infra deploy`" in err

    code, out, err = run_cli(monkeypatch, capsys, "infra", "policy", "--stack-name", "nope")
    assert code == 0, err
    assert "PLACEHOLDERS" in err
    document = json.loads(out)
    passrole = next(s for s in document["Statement"] if s["Action"] == "iam:PassRole")
    assert passrole["Resource"] == "arn:aws:iam::<ACCOUNT_ID>:role/<EXECUTION_ROLE>"
    assert "arn:aws:s3:::<BUCKET>/jobs/*" in json.dumps(document)
    assert "arn:aws:cloudformation:us-east-1:<ACCOUNT_ID>:stack/nope/*" in json.dumps(document)


def test_failed_execution_in_moto_exits_1_with_the_reason(moto_server, moto_change_set_outputs, monkeypatch, capsys):
    boto3.client("s3", region_name=REGION).create_bucket(Bucket="already-taken-bucket")
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--yes", "--param",
                             "BucketName=already-taken-bucket")
    assert code == 1
    assert "BucketAlreadyExists" in err
    assert "hint:" in err


@pytest.mark.timeout(60)
def test_a_deploy_after_a_failed_first_deploy_starts_clean_and_succeeds(
        moto_server, moto_change_set_outputs, monkeypatch, capsys):
    boto3.client("s3", region_name=REGION).create_bucket(Bucket="taken")
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--stack-name", "qa2", "--yes",
                             "--param", "BucketName=taken")
    assert code == 1
    assert "BucketAlreadyExists" in err
    assert "the change set and its empty stack were deleted" in err
    # No REVIEW_IN_PROGRESS stack nor AVAILABLE change set is left for the next deploy to trip on.
    assert infra.stack_status(cfn_client(), "qa2") is None
    assert [s["StackStatus"] for s in cfn_client().list_stacks()["StackSummaries"]
            if s["StackStatus"] != "DELETE_COMPLETE"] == []

    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--stack-name", "qa2", "--yes")
    assert code == 0, err
    assert "stack qa2: deployed" in out
    assert infra.stack_status(cfn_client(), "qa2") == "CREATE_COMPLETE"


@pytest.mark.timeout(60)
def test_deploy_follows_the_stack_of_its_change_set_not_the_name(
        moto_server, moto_change_set_outputs, monkeypatch, capsys):
    # A deploy killed before executing leaves a REVIEW_IN_PROGRESS stack; moto then makes a second
    # stack of that name for the next change set. Polling by name saw the stale one forever.
    cfn = cfn_client()
    infra.plan_change_set(cfn, "qa3", {}, sleep=lambda s: None)
    assert infra.stack_status(cfn, "qa3") == "REVIEW_IN_PROGRESS"
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--stack-name", "qa3", "--yes")
    assert code == 0, err
    assert "stack qa3: deployed" in out
    assert "role_arn" in out


# --- what moto cannot do: rollback, validation, timeouts (Stubber) -----------------------


def stub_any():
    from botocore.stub import ANY

    return ANY


def change_set_response(status: str, changes: list | None = None, reason: str | None = None) -> dict:
    response = {"ChangeSetName": "cs", "ChangeSetId": CHANGE_SET_ID, "StackId": STACK_ID, "StackName": "orchestrator",
                "Status": status, "ExecutionStatus": "AVAILABLE" if status == "CREATE_COMPLETE" else "UNAVAILABLE",
                "Changes": changes or []}
    if reason:
        response["StatusReason"] = reason
    return response


def event(n: int, logical: str, rtype: str, status: str, reason: str | None = None) -> dict:
    raw = {"StackId": STACK_ID, "EventId": f"e{n}", "StackName": "orchestrator", "LogicalResourceId": logical,
           "ResourceType": rtype, "ResourceStatus": status, "Timestamp": dt.datetime(2026, 1, 1, 12, 0, n)}
    if reason:
        raw["ResourceStatusReason"] = reason
    return raw


def missing_stack(stub: Stubber) -> None:
    stub.add_client_error("describe_stacks", "ValidationError", "Stack with id orchestrator does not exist", 400)


def stack(status: str, reason: str | None = None) -> dict:
    body = {"StackName": "orchestrator", "StackId": STACK_ID, "CreationTime": dt.datetime(2026, 1, 1),
            "StackStatus": status}
    if reason:
        body["StackStatusReason"] = reason
    return {"Stacks": [body]}


def planned_create(stub: Stubber, pending: bool = True) -> None:
    missing_stack(stub)
    stub.add_response("create_change_set", {"Id": CHANGE_SET_ID, "StackId": STACK_ID})
    if pending:
        stub.add_response("describe_change_set", change_set_response("CREATE_PENDING"))
    stub.add_response("describe_change_set", change_set_response("CREATE_COMPLETE", changes=[
        {"Type": "Resource", "ResourceChange": {"Action": "Add", "LogicalResourceId": "Bucket",
                                                "ResourceType": "AWS::S3::Bucket"}}]))


def test_rollback_names_the_failed_resource_and_its_reason():
    cfn = cfn_client()
    seen = []
    with Stubber(cfn) as stub:
        planned_create(stub)
        plan = infra.plan_change_set(cfn, "orchestrator", {"BucketName": "taken"}, sleep=lambda s: None)
        stub.add_response("describe_stack_events", {"StackEvents": [
            event(0, "orchestrator", "AWS::CloudFormation::Stack", "REVIEW_IN_PROGRESS", "User Initiated")]})
        stub.add_response("execute_change_set", {})
        stub.add_response("describe_stack_events", {"StackEvents": [
            event(3, "ExecutionRole", "AWS::IAM::Role", "CREATE_FAILED", "Resource creation cancelled"),
            event(2, "Bucket", "AWS::S3::Bucket", "CREATE_FAILED", "taken already exists"),
            event(1, "orchestrator", "AWS::CloudFormation::Stack", "CREATE_IN_PROGRESS", "User Initiated"),
            event(0, "orchestrator", "AWS::CloudFormation::Stack", "REVIEW_IN_PROGRESS", "User Initiated")]})
        stub.add_response("describe_stacks", stack("ROLLBACK_IN_PROGRESS", "The following resource(s) failed to "
                                                                          "create: [Bucket]."))
        stub.add_response("describe_stack_events", {"StackEvents": [
            event(4, "orchestrator", "AWS::CloudFormation::Stack", "ROLLBACK_COMPLETE"),
            event(3, "ExecutionRole", "AWS::IAM::Role", "CREATE_FAILED", "Resource creation cancelled")]})
        stub.add_response("describe_stacks", stack("ROLLBACK_COMPLETE"))
        with pytest.raises(BackendError) as caught:
            infra.execute(cfn, plan, on_event=seen.append, sleep=lambda s: None)
        stub.assert_no_pending_responses()
    message = caught.value.message
    assert message.splitlines() == [
        "deploying stack orchestrator failed: ROLLBACK_COMPLETE",
        "  Bucket (AWS::S3::Bucket) CREATE_FAILED: taken already exists",
        "  ExecutionRole (AWS::IAM::Role) CREATE_FAILED: Resource creation cancelled",
    ]
    assert "delete-stack --stack-name orchestrator --region us-east-1" in caught.value.hint
    # Progress came in time order, each event once, none from before the execution.
    assert [(e.logical_id, e.status) for e in seen] == [
        ("orchestrator", "CREATE_IN_PROGRESS"), ("Bucket", "CREATE_FAILED"), ("ExecutionRole", "CREATE_FAILED"),
        ("orchestrator", "ROLLBACK_COMPLETE")]


def stack_with_outputs(status: str) -> dict:
    body = stack(status)
    body["Stacks"][0]["Outputs"] = [
        {"OutputKey": "RoleArn", "OutputValue": f"arn:aws:iam::{ACCOUNT}:role/orch-Role-1"},
        {"OutputKey": "BucketName", "OutputValue": "orch-bucket-1"},
        {"OutputKey": "CompileCacheUri", "OutputValue": "s3://orch-bucket-1/compile-cache"},
        {"OutputKey": "OutputUri", "OutputValue": "s3://orch-bucket-1/jobs"},
        {"OutputKey": "OperatorPolicyArn", "OutputValue": f"arn:aws:iam::{ACCOUNT}:policy/orch-Op-1"}]
    return body


def executing_create(cfn, stub: Stubber, by_id: dict | None = None):
    """A computed CREATE change set, and its ExecuteChangeSet accepted: the plan to execute.
    `by_id`: the parameters the event read before the execute must carry (the StackId)."""
    planned_create(stub, pending=False)
    plan = infra.plan_change_set(cfn, "orchestrator", {}, sleep=lambda s: None)
    stub.add_response("describe_stack_events", {"StackEvents": []}, by_id)
    stub.add_response("execute_change_set", {},
                      {"StackName": "orchestrator", "ChangeSetName": CHANGE_SET_ID} if by_id else None)
    return plan


def test_execute_polls_the_stack_by_the_change_sets_stack_id():
    cfn = cfn_client()
    by_id = {"StackName": STACK_ID}
    with Stubber(cfn) as stub:
        plan = executing_create(cfn, stub, by_id)
        stub.add_response("describe_stack_events", {"StackEvents": []}, by_id)
        stub.add_response("describe_stacks", stack("CREATE_IN_PROGRESS"), by_id)
        stub.add_response("describe_stack_events", {"StackEvents": []}, by_id)
        stub.add_response("describe_stacks", stack_with_outputs("CREATE_COMPLETE"), by_id)
        outputs = infra.execute(cfn, plan, sleep=lambda s: None)
        stub.assert_no_pending_responses()
    assert outputs.stack_name == "orchestrator"
    assert outputs.bucket == "orch-bucket-1"


def add_polls(stub: Stubber, status: str, polls: int, event_at: int | None = None) -> None:
    """`polls` rounds of a deploy's wait: the stack in `status`, and no new event except one
    at round `event_at`."""
    for n in range(polls):
        events = [event(1, "Bucket", "AWS::S3::Bucket", "CREATE_IN_PROGRESS")] if n == event_at else []
        stub.add_response("describe_stack_events", {"StackEvents": events})
        stub.add_response("describe_stacks", stack(status))


def execute_ticking(cfn, plan, step_s: int, waits: list | None = None, **options):
    """infra.execute with no sleeping and a clock that moves `step_s` seconds at each reading;
    the (status, elapsed) waits it reports are appended to `waits`."""
    ticks = iter(range(0, 10_000, step_s))
    if waits is not None:
        options["on_wait"] = lambda status, elapsed: waits.append((status, elapsed))
    return infra.execute(cfn, plan, sleep=lambda s: None, clock=lambda: next(ticks), **options)


def test_a_change_set_left_unexecuted_stops_after_the_review_bound_and_says_how_to_clean_up():
    cfn = cfn_client()
    waits = []
    with Stubber(cfn) as stub:
        plan = executing_create(cfn, stub)
        add_polls(stub, "REVIEW_IN_PROGRESS", 3)  # 25 s, 50 s, 75 s after the execute at 0 s
        with pytest.raises(BackendError, match="was not executed") as caught:
            execute_ticking(cfn, plan, 25, waits, review_timeout_s=60, heartbeat_s=30)
        stub.assert_no_pending_responses()
    assert "REVIEW_IN_PROGRESS 75 s after ExecuteChangeSet" in caught.value.message
    assert f"delete-stack --stack-name {STACK_ID} --region us-east-1" in caught.value.hint
    # The wait was shown, not silent: at the first quiet poll, then once per heartbeat.
    assert waits == [("REVIEW_IN_PROGRESS", 25)]


def test_a_long_quiet_deploy_reports_its_status_every_heartbeat():
    cfn = cfn_client()
    waits = []
    with Stubber(cfn) as stub:
        plan = executing_create(cfn, stub)
        add_polls(stub, "CREATE_IN_PROGRESS", 7, event_at=2)  # polls at 10..70 s; the event at 30 s resets the heartbeat
        stub.add_response("describe_stack_events", {"StackEvents": []})
        stub.add_response("describe_stacks", stack_with_outputs("CREATE_COMPLETE"))
        execute_ticking(cfn, plan, 10, waits, heartbeat_s=30)
        stub.assert_no_pending_responses()
    assert waits == [("CREATE_IN_PROGRESS", 10), ("CREATE_IN_PROGRESS", 60)]


def failed_execute(cfn, stub: Stubber):
    """A computed CREATE change set whose ExecuteChangeSet is refused: the plan to execute."""
    planned_create(stub, pending=False)
    plan = infra.plan_change_set(cfn, "orchestrator", {}, sleep=lambda s: None)
    stub.add_response("describe_stack_events", {"StackEvents": []})
    stub.add_client_error("execute_change_set", "InsufficientCapabilitiesException",
                          "Requires capabilities : [CAPABILITY_NAMED_IAM]", 400)
    stub.add_response("describe_stacks", stack("REVIEW_IN_PROGRESS"), {"StackName": STACK_ID})
    return plan


def test_a_create_change_set_that_fails_to_execute_is_deleted_with_its_empty_stack():
    cfn = cfn_client()
    with Stubber(cfn) as stub:
        plan = failed_execute(cfn, stub)
        stub.add_response("delete_change_set", {}, {"StackName": "orchestrator", "ChangeSetName": CHANGE_SET_ID})
        stub.add_response("describe_stacks", stack("REVIEW_IN_PROGRESS"), {"StackName": STACK_ID})
        stub.add_response("delete_stack", {}, {"StackName": STACK_ID})
        with pytest.raises(BackendError, match="InsufficientCapabilitiesException") as caught:
            infra.execute(cfn, plan, sleep=lambda s: None)
        stub.assert_no_pending_responses()
    assert "the change set and its empty stack were deleted" in caught.value.hint
    assert "administrator credentials" in caught.value.hint  # the cause's own hint is kept


def test_a_failed_cleanup_after_a_failed_execute_says_what_is_left():
    cfn = cfn_client()
    with Stubber(cfn) as stub:
        plan = failed_execute(cfn, stub)
        stub.add_client_error("delete_change_set", "Throttling", "Rate exceeded", 400)
        with pytest.raises(BackendError, match="InsufficientCapabilitiesException") as caught:
            infra.execute(cfn, plan, sleep=lambda s: None)
        stub.assert_no_pending_responses()
    assert "left behind" in caught.value.hint and "Rate exceeded" in caught.value.hint
    assert f"delete-stack --stack-name {STACK_ID} --region us-east-1" in caught.value.hint


def test_cli_shows_the_wait_for_a_quiet_deploy(monkeypatch, capsys):
    cfn = cfn_client()
    stub = Stubber(cfn)
    planned_create(stub, pending=False)
    stub.add_response("describe_stack_events", {"StackEvents": []})
    stub.add_response("execute_change_set", {})
    add_polls(stub, "CREATE_IN_PROGRESS", 1)
    stub.add_response("describe_stack_events", {"StackEvents": []})
    stub.add_response("describe_stacks", stack_with_outputs("CREATE_COMPLETE"))
    stub.activate()
    monkeypatch.setattr(infra, "make_client", lambda service, region: cfn)
    execute = infra.execute
    monkeypatch.setattr(infra, "execute", lambda *a, **kw: execute(*a, sleep=lambda s: None, **kw))
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--yes")
    assert code == 0, err
    lines = out.splitlines()
    executing = next(i for i, line in enumerate(lines) if line.startswith("executing change set orchestrator-"))
    waiting = next(i for i, line in enumerate(lines) if "stack orchestrator is CREATE_IN_PROGRESS" in line)
    assert executing < waiting < lines.index("stack orchestrator: deployed")
    stub.assert_no_pending_responses()


def test_cli_reports_a_rollback_with_exit_1(monkeypatch, capsys):
    cfn = cfn_client()
    stub = Stubber(cfn)
    planned_create(stub, pending=False)
    stub.add_response("describe_stack_events", {"StackEvents": []})
    stub.add_response("execute_change_set", {})
    stub.add_response("describe_stack_events", {"StackEvents": [
        event(2, "ExecutionRole", "AWS::IAM::Role", "CREATE_FAILED", "API: iam:CreateRole User is not authorized"),
        event(1, "orchestrator", "AWS::CloudFormation::Stack", "CREATE_IN_PROGRESS", "User Initiated")]})
    stub.add_response("describe_stacks", stack("ROLLBACK_COMPLETE"))
    stub.activate()
    monkeypatch.setattr(infra, "make_client", lambda service, region: cfn)
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--yes")
    assert code == 1
    assert "ExecutionRole (AWS::IAM::Role) CREATE_FAILED: API: iam:CreateRole User is not authorized" in err
    assert "CREATE_FAILED" in out  # shown as progress first


def test_cloudformation_validation_error_is_exit_2_with_its_reason(monkeypatch, capsys):
    cfn = cfn_client()
    stub = Stubber(cfn)
    missing_stack(stub)
    stub.add_client_error("create_change_set", "ValidationError",
                          "Template format error: Unresolved resource dependencies [Nope] in the Resources block", 400)
    stub.activate()
    monkeypatch.setattr(infra, "make_client", lambda service, region: cfn)
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--yes")
    assert code == 2
    assert "Unresolved resource dependencies [Nope]" in err


def test_no_updates_from_cloudformation_is_nothing_to_do():
    cfn = cfn_client()
    with Stubber(cfn) as stub:
        stub.add_response("describe_stacks", stack("UPDATE_COMPLETE"))
        stub.add_response("create_change_set", {"Id": CHANGE_SET_ID, "StackId": STACK_ID})
        stub.add_response("describe_change_set", change_set_response(
            "FAILED", reason="The submitted information didn't contain changes. Submit different information to "
                             "create a change set."))
        stub.add_response("delete_change_set", {}, {"StackName": "orchestrator", "ChangeSetName": CHANGE_SET_ID})
        plan = infra.plan_change_set(cfn, "orchestrator", {}, sleep=lambda s: None)
        stub.assert_no_pending_responses()
    assert plan.nothing_to_do and plan.kind == "UPDATE"


def test_a_change_set_that_fails_for_another_reason_is_an_input_error():
    cfn = cfn_client()
    with Stubber(cfn) as stub:
        missing_stack(stub)
        stub.add_response("create_change_set", {"Id": CHANGE_SET_ID, "StackId": STACK_ID})
        stub.add_response("describe_change_set", change_set_response(
            "FAILED", reason="Parameter 'BucketName' must match pattern ..."))
        stub.add_response("delete_change_set", {})
        stub.add_response("describe_stacks", stack("REVIEW_IN_PROGRESS"), {"StackName": STACK_ID})
        # The stack the change set made, by its id: never another stack of that name.
        stub.add_response("delete_stack", {}, {"StackName": STACK_ID})
        with pytest.raises(InputError, match="Parameter 'BucketName' must match pattern"):
            infra.plan_change_set(cfn, "orchestrator", {}, sleep=lambda s: None)
        stub.assert_no_pending_responses()


@pytest.mark.parametrize(("status", "message", "hint"), [
    ("ROLLBACK_COMPLETE", "cannot be updated", "delete-stack"),
    ("UPDATE_IN_PROGRESS", "busy", "wait"),
    ("DELETE_FAILED", "cannot take a change set", "describe-stack-events"),
])
def test_a_stack_that_cannot_take_a_change_set_is_a_backend_error(status, message, hint):
    cfn = cfn_client()
    with Stubber(cfn) as stub:
        stub.add_response("describe_stacks", stack(status))
        with pytest.raises(BackendError, match=message) as caught:
            infra.plan_change_set(cfn, "orchestrator", {}, sleep=lambda s: None)
    assert hint in caught.value.hint


def test_a_deploy_still_running_after_the_timeout_says_how_to_follow_it():
    cfn = cfn_client()
    with Stubber(cfn) as stub:
        planned_create(stub)
        plan = infra.plan_change_set(cfn, "orchestrator", {}, sleep=lambda s: None)
        stub.add_response("describe_stack_events", {"StackEvents": []})
        stub.add_response("execute_change_set", {})
        add_polls(stub, "CREATE_IN_PROGRESS", 3)
        with pytest.raises(BackendError, match="still CREATE_IN_PROGRESS after 10 minutes") as caught:
            execute_ticking(cfn, plan, 400, timeout_s=600)
    assert "describe-stack-events --stack-name orchestrator" in caught.value.hint


def test_access_denied_is_a_backend_error_with_a_hint():
    cfn = cfn_client()
    with Stubber(cfn) as stub:
        stub.add_client_error("describe_stacks", "AccessDenied", "User is not authorized to perform "
                              "cloudformation:DescribeStacks", 403)
        with pytest.raises(BackendError, match="AccessDenied") as caught:
            infra.read_outputs(cfn, "orchestrator")
    assert "administrator" in caught.value.hint


def test_outputs_of_a_stack_that_is_not_ours_are_a_backend_error():
    cfn = cfn_client()
    with Stubber(cfn) as stub:
        body = stack("CREATE_COMPLETE")
        body["Stacks"][0]["Outputs"] = [{"OutputKey": "RoleArn", "OutputValue": "arn:aws:iam::1:role/x"}]
        stub.add_response("describe_stacks", body)
        with pytest.raises(BackendError, match="no output BucketName, CompileCacheUri, OutputUri, OperatorPolicyArn"):
            infra.read_outputs(cfn, "orchestrator")


# --- the outputs file -------------------------------------------------------------------


def sample_outputs(**changes) -> infra.StackOutputs:
    values = dict(stack_name="orchestrator", region=REGION, role_arn=f"arn:aws:iam::{ACCOUNT}:role/orch-Role-1",
                  bucket="orch-bucket-1", compile_cache_uri="s3://orch-bucket-1/compile-cache",
                  output_uri="s3://orch-bucket-1/jobs",
                  operator_policy_arn=f"arn:aws:iam::{ACCOUNT}:policy/orch-OperatorPolicy-1")
    values.update(changes)
    return infra.StackOutputs(**values)


def test_outputs_file_replaces_atomically_and_leaves_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "infra.yaml"
    target.write_text("role_arn: old\n")
    with monkeypatch.context() as patched:
        def fail(src, dst):
            raise OSError(28, "No space left on device")

        patched.setattr(os, "replace", fail)
        with pytest.raises(InputError, match="No space left on device") as info:
            infra.write_outputs_file(sample_outputs(), target)
        assert "--write configs/infra.yaml" in info.value.hint
    assert target.read_text() == "role_arn: old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["infra.yaml"]
    infra.write_outputs_file(sample_outputs(), target)
    assert yaml.safe_load(target.read_text())["role_arn"] == f"arn:aws:iam::{ACCOUNT}:role/orch-Role-1"
    assert [p.name for p in tmp_path.iterdir()] == ["infra.yaml"]


def test_outputs_file_keys_are_those_the_spec_loader_reads(tmp_path):
    data = sample_outputs().infra_file()
    assert set(spec.INFRA_FIELDS) <= set(data)
    assert set(data) - set(spec.INFRA_FIELDS) == {"region", "bucket", "stack_name"}
    # A spec that sets a field keeps it; the file fills only what is missing.
    infra.write_outputs_file(sample_outputs(), tmp_path / "infra.yaml")
    (tmp_path / "job.yaml").write_text(
        "name: mine\ninfra: infra.yaml\noutput: {uri: s3://my-own-bucket/out}\n"
        "training: {steps: 20, warmup_steps: 2}\n")
    loaded = spec.load(tmp_path / "job.yaml")
    assert loaded.output.uri == "s3://my-own-bucket/out"
    assert loaded.compile_cache.uri == "s3://orch-bucket-1/compile-cache"
    assert loaded.role_arn == f"arn:aws:iam::{ACCOUNT}:role/orch-Role-1"


# --- infra outputs --write onto a file that is not an outputs file ---------------------------


@pytest.mark.timeout(60)
def test_outputs_write_refuses_a_job_spec_a_fifo_or_a_folder_before_any_aws_call(monkeypatch, capsys, tmp_path):
    # QA: --write onto an existing job spec overwrote it without a word; onto a FIFO replaced it.
    import os
    import stat

    calls = no_aws_client(monkeypatch)
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text("name: vit\nbackend: local\n")
    code, out, err = run_cli(monkeypatch, capsys, "infra", "outputs", "--write", str(spec_file))
    assert code == 2 and out == ""
    assert err == (f"error: --write {spec_file}: exists and is not an infra outputs file (its keys are backend, "
                   "name); it was left as it is\nhint: give --write a new file, or pass --force to replace this one\n")
    assert spec_file.read_text() == "name: vit\nbackend: local\n"
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for target in (tmp_path / "fifo", tmp_path / "dir"):
        for force in ([], ["--force"]):  # never, forced or not
            code, _, err = run_cli(monkeypatch, capsys, "infra", "outputs", "--write", str(target), *force)
            assert code == 2 and "not a regular file; nothing was written" in err
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode) and (tmp_path / "dir").is_dir()
    assert calls == []


def test_outputs_write_replaces_an_earlier_outputs_file_and_forced_any_file(tmp_path):
    earlier = tmp_path / "infra.yaml"
    earlier.write_text("# Written by ...\nrole_arn: arn:aws:iam::1:role/x\nbucket: b\nregion: us-east-1\n")
    infra.check_outputs_target(earlier)  # an outputs file: replaced without --force
    infra.check_outputs_target(tmp_path / "new.yaml")
    (tmp_path / "empty.yaml").write_text("")
    infra.check_outputs_target(tmp_path / "empty.yaml")
    notes = tmp_path / "notes.txt"
    notes.write_text("not yaml: [")
    with pytest.raises(InputError, match="it is not a YAML mapping of outputs"):
        infra.check_outputs_target(notes)
    infra.check_outputs_target(notes, force=True)


def test_ctrl_c_while_a_deploy_runs_says_the_stack_goes_on(monkeypatch, capsys):
    # Ctrl-C ended `infra deploy` with exit 130 and no word, while CloudFormation went on.
    cfn = cfn_client()
    with Stubber(cfn) as stub:
        plan = executing_create(cfn, stub)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(infra, "make_client", lambda service, region: cfn)
    monkeypatch.setattr(infra, "plan_change_set", lambda *args, **kwargs: plan)
    monkeypatch.setattr(infra, "execute", interrupted)
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--yes")
    assert code == 130 and "Traceback" not in err
    assert (f"interrupted (Ctrl-C) while waiting for stack orchestrator; CloudFormation goes on executing change set "
            f"{plan.change_set_name}") in err
    assert "python -m orchestrator infra outputs --stack-name orchestrator" in err
