"""Least privilege in infra/stack.yaml, checked statement by statement.

Every identity policy (the execution role's, and the operator's managed policy both in the
template and as `infra policy` prints it) is walked: no wildcard in any action, "Resource":
"*" only for the actions whose API allows nothing narrower, PassRole only on the role and
only to SageMaker, S3 only on the tool's prefixes. The bucket's settings that moto does not
apply (versioning, lifecycle, public access block, the TLS-only bucket policy) are asserted
on the parsed template; cfn-lint must be clean.
"""

from __future__ import annotations

import ast
import copy
import json
import re

import boto3
import botocore.session
import pytest

from orchestrator import infra

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS..S3..BucketPolicy")

ACCOUNT = "123456789012"
REGION = "us-east-1"
STACK = "orchestrator"
BUCKET = "orchestrator-bucket-abc123"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/orchestrator-ExecutionRole-XYZ"
BATCH_JOB_ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/orchestrator-BatchJobRole-XYZ"
KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
PREFIXES = ("compile-cache/", "jobs/", "data/")
# The one S3 grant narrower than a whole prefix: the role's s3:DeleteObject, for SageMaker's
# mirroring of pruned checkpoints (<output.uri>/checkpoints/<job>, output.uri at or below jobs/).
CHECKPOINT_PATTERNS = ("jobs/checkpoints/*", "jobs/*/checkpoints/*")
# The only actions allowed on "Resource": "*": their APIs support no resource-level permission.
STAR_EXCEPTIONS = {"ecr:GetAuthorizationToken", "cloudwatch:PutMetricData", "sagemaker:ListTrainingJobs",
                   "sagemaker:Search",
                   "pricing:GetProducts", "batch:DescribeJobs", "batch:ListJobs", "batch:DescribeJobQueues",
                   "batch:DescribeComputeEnvironments", "batch:DescribeJobDefinitions",
                   "servicequotas:ListServiceQuotas", "sagemaker:SearchTrainingPlanOfferings",
                   "sagemaker:ListTrainingPlans"}
# Actions that exist in IAM only (no API operation of that name in botocore's models).
# sagemaker:CreateReservedCapacity: CreateTrainingPlan's dependent action in the Service
# Authorization Reference (and parliament's copy of it), no API operation of its own.
IAM_ONLY_ACTIONS = {"s3:ListBucket", "iam:PassRole", "kms:ReEncryptFrom", "kms:ReEncryptTo",
                    "sagemaker:CreateReservedCapacity"}
SERVICE_MODELS = {"sagemaker": "sagemaker", "s3": "s3", "ecr": "ecr", "logs": "logs", "cloudwatch": "cloudwatch",
                  "iam": "iam", "kms": "kms", "cloudformation": "cloudformation", "sts": "sts",
                  "pricing": "pricing", "batch": "batch", "servicequotas": "service-quotas"}
OPERATOR_ACTIONS = {
    "sagemaker:CreateTrainingJob", "sagemaker:DescribeTrainingJob", "sagemaker:ListTrainingJobs", "sagemaker:Search",
    "sagemaker:StopTrainingJob", "sagemaker:AddTags", "sagemaker:ListTags", "iam:PassRole",
    "logs:GetLogEvents", "logs:DescribeLogStreams", "logs:FilterLogEvents",
    "s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject",
    "cloudformation:DescribeStacks", "pricing:GetProducts",
    "batch:SubmitJob", "batch:TagResource", "batch:TerminateJob", "batch:DescribeJobs", "batch:ListJobs",
    "batch:DescribeJobQueues", "batch:DescribeComputeEnvironments", "batch:DescribeJobDefinitions",
    "servicequotas:ListServiceQuotas",
    "sagemaker:SearchTrainingPlanOfferings", "sagemaker:ListTrainingPlans", "sagemaker:CreateTrainingPlan",
    "sagemaker:DescribeTrainingPlan", "sagemaker:CreateReservedCapacity",
}
ROLE_ACTIONS = {
    "s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject",
    "ecr:GetAuthorizationToken", "ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer",
    "ecr:BatchGetImage", "logs:CreateLogGroup", "logs:CreateLogStream", "logs:DescribeLogStreams",
    "logs:PutLogEvents", "cloudwatch:PutMetricData",
}


MLFLOW_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:mlflow-app/app-ABCDEF123456"


def context() -> dict[str, str]:
    return {
        "AWS::Partition": "aws", "AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::StackName": STACK,
        "Bucket": BUCKET, "Bucket.Arn": f"arn:aws:s3:::{BUCKET}", "ExecutionRole.Arn": ROLE_ARN,
        "EncryptionKey.Arn": KEY_ARN, "OperatorPolicy": f"arn:aws:iam::{ACCOUNT}:policy/op",
        "ImageRegistryAccount": "763104351884", "BucketName": "",
        "UseKms": "false", "CompileCacheNoncurrentDays": "30", "AbortIncompleteUploadDays": "7",
        "AWS::URLSuffix": "amazonaws.com", "ExecutionRole": "<ExecutionRole>",
        "MlflowResourceArn": MLFLOW_ARN,
        # The Batch resources (EnableBatch=true): parameters and resources as placeholders.
        **{name: f"<{name}>" for name, declared in infra.load_template()["Parameters"].items()
           if name.startswith(("EnableBatch", "Batch"))},
        "BatchJobRole.Arn": BATCH_JOB_ROLE_ARN, "BatchInstanceRole": "<BatchInstanceRole>",
        "BatchInstanceProfile.Arn": f"arn:aws:iam::{ACCOUNT}:instance-profile/<BatchInstanceProfile>",
        "BatchLaunchTemplate": "lt-0123456789abcdef0", "BatchLaunchTemplate.LatestVersionNumber": "1",
        "BatchLogGroup": f"/orchestrator/{STACK}/batch",
        **{name: f"arn:aws:batch:{REGION}:{ACCOUNT}:compute-environment/{name}"
           for name, resource in infra.load_template()["Resources"].items()
           if resource["Type"] == "AWS::Batch::ComputeEnvironment"},
    }


def resolved_template(use_kms: bool, batch: bool = True) -> dict:
    return infra.evaluate(infra.load_template(), context(), {
        "UseKmsKey": use_kms, "HasBucketName": False, "BatchEnabled": batch, "HasBatchServiceRole": False,
        "HasBatchImageId": False, "BatchLogsUseKms": batch and use_kms})


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


# --- the walker -------------------------------------------------------------------------


def identity_policy_problems(doc: dict, where: str, role_arn: str = ROLE_ARN, bucket: str = BUCKET,
                             account: str = ACCOUNT) -> list[str]:
    """Why a (resolved) identity policy grants more than the tool needs; empty when it does not."""
    problems = []
    log_group = f"arn:aws:logs:{REGION}:{account}:log-group:/aws/sagemaker/TrainingJobs"
    # The batch backend's jobs log to the stack's own group (read only: GetLogEvents).
    batch_log_group = f"arn:aws:logs:{REGION}:{account}:log-group:/orchestrator/{STACK}/batch"
    if doc.get("Version") != "2012-10-17":
        problems.append(f"{where}: Version must be '2012-10-17'")
    bucket_arn = f"arn:aws:s3:::{bucket}"
    for i, st in enumerate(doc.get("Statement", [])):
        at = f"{where} statement {st.get('Sid', i)}"
        for forbidden in ("NotAction", "NotResource", "NotPrincipal", "Principal"):
            if forbidden in st:
                problems.append(f"{at}: uses {forbidden}")
        if st.get("Effect") != "Allow":
            problems.append(f"{at}: identity policies here only allow")
        actions = as_list(st.get("Action", []))
        resources = as_list(st.get("Resource", []))
        condition = st.get("Condition", {})
        for action in actions:
            if not re.fullmatch(r"[a-z0-9-]+:[A-Za-z]+", action):
                problems.append(f"{at}: action {action!r} has a wildcard or is malformed")
        if "*" in resources:
            if resources != ["*"]:
                problems.append(f"{at}: '*' mixed with other resources")
            for action in actions:
                if action not in STAR_EXCEPTIONS:
                    problems.append(f"{at}: {action} on Resource '*' (not a listed exception)")
            if "cloudwatch:PutMetricData" in actions and condition != {
                    "StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/TrainingJobs"}}:
                problems.append(f"{at}: PutMetricData without the SageMaker namespace condition")
        elif any("*" in r.split(":", 5)[-1].split("/", 1)[0] for r in resources):
            problems.append(f"{at}: a resource wildcards more than a path")
        if any(a.startswith("iam:") for a in actions):
            if actions != ["iam:PassRole"] or resources != [role_arn] or condition != {
                    "StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}:
                problems.append(f"{at}: IAM access other than PassRole of the role to SageMaker")
        for resource in resources:
            if resource.startswith("arn:aws:s3:::"):
                if resource == bucket_arn:
                    if actions != ["s3:ListBucket"]:
                        problems.append(f"{at}: bucket-level access other than ListBucket")
                    if "s3:prefix" in json.dumps(condition):
                        # HEAD/GET of a missing key checks ListBucket without any s3:prefix: 403, not 404.
                        problems.append(f"{at}: ListBucket under an s3:prefix condition makes missing keys 403")
                elif any(resource == f"{bucket_arn}/{p}" for p in CHECKPOINT_PATTERNS):
                    if actions != ["s3:DeleteObject"]:
                        problems.append(f"{at}: the checkpoint prefixes are for s3:DeleteObject alone")
                elif not any(resource == f"{bucket_arn}/{p}*" for p in PREFIXES):
                    problems.append(f"{at}: S3 resource {resource} outside the tool's prefixes")
                elif "s3:DeleteObject" in actions and not resource.endswith("/compile-cache/*"):
                    problems.append(f"{at}: s3:DeleteObject on {resource}: deletes only under compile-cache/ "
                                    "and checkpoints/")
            elif resource.startswith("arn:aws:logs:") and resource not in (
                    f"{log_group}:*", f"{log_group}:log-stream:*", f"{batch_log_group}:log-stream:*"):
                problems.append(f"{at}: logs resource {resource} outside /aws/sagemaker/TrainingJobs")
            elif resource.startswith("arn:aws:sagemaker:") and not resource.endswith(":training-job/*"):
                # Training plans: their own actions on their own resource types, nothing else there.
                plan_actions = {":training-plan/*": ["sagemaker:CreateTrainingPlan", "sagemaker:DescribeTrainingPlan"],
                                ":reserved-capacity/*": ["sagemaker:CreateReservedCapacity"]}
                wanted = next((acts for tail, acts in plan_actions.items() if resource.endswith(tail)), None)
                if wanted is None:
                    problems.append(f"{at}: SageMaker resource {resource} is not training jobs or training plans")
                elif sorted(actions) != wanted:
                    problems.append(f"{at}: {resource} with actions other than {', '.join(wanted)}")
            elif resource.startswith("arn:aws:ecr:") and not resource.endswith(":repository/pytorch-training-neuronx"):
                problems.append(f"{at}: ECR resource {resource} is not the Neuron training images")
            elif resource.startswith("arn:aws:cloudformation:") and f":stack/{STACK}/" not in resource:
                problems.append(f"{at}: CloudFormation resource {resource} is not this stack")
    return problems


def actions_of(doc: dict) -> set[str]:
    return {a for st in doc["Statement"] for a in as_list(st["Action"])}


def role_policies(template: dict) -> list[tuple[str, dict]]:
    found = []
    for name, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Role":
            found += [(f"{name}/{p['PolicyName']}", p["PolicyDocument"]) for p in props.get("Policies", [])]
        elif resource["Type"] == "AWS::IAM::Policy" and name != infra.OPERATOR_POLICY_RESOURCE:
            found.append((name, props["PolicyDocument"]))
    return found


def operator_document(template: dict) -> dict:
    return template["Resources"][infra.OPERATOR_POLICY_RESOURCE]["Properties"]["PolicyDocument"]


# --- the walker catches what it should --------------------------------------------------


def test_the_walker_flags_each_kind_of_over_grant():
    bad = {"Version": "2012-10-17", "Statement": [
        {"Sid": "Star", "Effect": "Allow", "Action": "*", "Resource": "*"},
        {"Sid": "DeleteJobs", "Effect": "Allow", "Action": "s3:DeleteObject", "Resource": f"arn:aws:s3:::{BUCKET}/jobs/*"},
        {"Sid": "PutCheckpoints", "Effect": "Allow", "Action": ["s3:DeleteObject", "s3:PutObject"],
         "Resource": f"arn:aws:s3:::{BUCKET}/jobs/checkpoints/*"},
        {"Sid": "ServiceStar", "Effect": "Allow", "Action": "s3:*", "Resource": f"arn:aws:s3:::{BUCKET}/jobs/*"},
        {"Sid": "Prefix", "Effect": "Allow", "Action": "s3:Get*", "Resource": f"arn:aws:s3:::{BUCKET}/jobs/*"},
        {"Sid": "StarResource", "Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"},
        {"Sid": "WholeBucket", "Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{BUCKET}/*"},
        {"Sid": "AnyRole", "Effect": "Allow", "Action": "iam:PassRole", "Resource": ROLE_ARN},
        {"Sid": "Metrics", "Effect": "Allow", "Action": "cloudwatch:PutMetricData", "Resource": "*"},
        {"Sid": "Logs", "Effect": "Allow", "Action": "logs:GetLogEvents", "Resource": "arn:aws:logs:*:*:*"},
        {"Sid": "BareLogGroup", "Effect": "Allow", "Action": "logs:DescribeLogStreams",
         "Resource": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/sagemaker/TrainingJobs"},
        {"Sid": "ListUnderPrefix", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{BUCKET}",
         "Condition": {"StringLike": {"s3:prefix": ["jobs/*"]}}},
    ]}
    problems = "\n".join(identity_policy_problems(bad, "bad"))
    for sid in ("Star", "DeleteJobs", "PutCheckpoints", "ServiceStar", "Prefix", "StarResource", "WholeBucket",
                "AnyRole", "Metrics", "Logs", "BareLogGroup", "ListUnderPrefix"):
        assert f"statement {sid}:" in problems


# --- identity policies ------------------------------------------------------------------


@pytest.mark.parametrize("use_kms", [False, True])
def test_execution_role_policies_grant_only_what_a_job_does(use_kms):
    template = resolved_template(use_kms)
    policies = role_policies(template)
    assert [name for name, _ in policies] == ["ExecutionRole/training-job", "BatchJobRole/batch-job"]
    for name, doc in policies:
        assert identity_policy_problems(doc, name) == []
    doc = policies[0][1]
    assert actions_of(doc) == ROLE_ACTIONS
    written = {r for st in doc["Statement"] if "s3:PutObject" in as_list(st["Action"]) for r in as_list(st["Resource"])}
    # Training data is read-only for jobs.
    assert written == {f"arn:aws:s3:::{BUCKET}/compile-cache/*", f"arn:aws:s3:::{BUCKET}/jobs/*"}
    deleted = {r for st in doc["Statement"] if "s3:DeleteObject" in as_list(st["Action"]) for r in as_list(st["Resource"])}
    # Jobs delete nothing but the checkpoints SageMaker mirrors (train.py prunes old ones).
    assert deleted == {f"arn:aws:s3:::{BUCKET}/{p}" for p in CHECKPOINT_PATTERNS}
    ecr = next(st for st in doc["Statement"] if "ecr:BatchGetImage" in as_list(st["Action"]))
    assert ecr["Resource"] == f"arn:aws:ecr:{REGION}:763104351884:repository/pytorch-training-neuronx"


@pytest.mark.parametrize("use_kms", [False, True])
def test_the_batch_job_role_grants_the_containers_s3_calls_and_nothing_else(use_kms):
    """The training container on Batch runs launch.py as the SageMaker role's jobs do: the
    same reads and writes, no deletes (checkpoints stay on the instance), no image pull or
    logs (the ECS agent does those with the instance role)."""
    doc = dict(role_policies(resolved_template(use_kms)))["BatchJobRole/batch-job"]
    assert actions_of(doc) == {"s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"}
    written = {r for st in doc["Statement"] if "s3:PutObject" in as_list(st["Action"]) for r in as_list(st["Resource"])}
    assert written == {f"arn:aws:s3:::{BUCKET}/compile-cache/*", f"arn:aws:s3:::{BUCKET}/jobs/*"}
    read = {r for st in doc["Statement"] if "s3:GetObject" in as_list(st["Action"]) for r in as_list(st["Resource"])}
    assert read == {f"arn:aws:s3:::{BUCKET}/{p}*" for p in PREFIXES}


def _iam_match(pattern: str, value: str) -> bool:
    """IAM's resource matching: `*` matches any run of characters, `/` included."""
    return re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), value) is not None


def _granted(doc: dict, action: str, arn: str) -> bool:
    return any(action in as_list(st["Action"]) and any(_iam_match(r, arn) for r in as_list(st["Resource"]))
               for st in doc["Statement"])


@pytest.mark.parametrize("output", ["jobs", "jobs/team-a"])
def test_the_role_may_delete_exactly_the_checkpoints_sagemaker_mirrors(output):
    """A request's CheckpointConfig.S3Uri (with output.uri at or below jobs/) lies where the
    role may delete; nothing else a job writes there (results, outputs, source) does."""
    from orchestrator import request, spec

    loaded = spec.loads(f"""
name: ckpt
backend: sagemaker
role_arn: {ROLE_ARN}
instance: {{type: ml.trn1.2xlarge}}
training: {{steps: 20, warmup_steps: 2, checkpoint_every: 5}}
compile_cache: {{uri: s3://{BUCKET}/compile-cache}}
output: {{uri: s3://{BUCKET}/{output}}}
""")
    prepared = request.prepare(loaded)
    prefix = prepared.request["CheckpointConfig"]["S3Uri"].removeprefix(f"s3://{BUCKET}/")
    doc = role_policies(resolved_template(False))[0][1]
    bucket_arn = f"arn:aws:s3:::{BUCKET}"
    assert _granted(doc, "s3:DeleteObject", f"{bucket_arn}/{prefix}/ckpt-000000005.pt")
    results = prepared.job["results_uri"].removeprefix(f"s3://{BUCKET}/")
    for kept in (results, f"{output}/{prepared.job_name}/output/model.tar.gz",
                 prepared.source_uri.removeprefix(f"s3://{BUCKET}/"), "compile-cache/k/manifest.json"):
        assert not _granted(doc, "s3:DeleteObject", f"{bucket_arn}/{kept}"), kept


@pytest.mark.parametrize("output", ["jobs", "jobs/team-a"])
def test_the_role_can_read_every_channel_of_a_request(output):
    """SageMaker downloads each input channel with the role: s3:ListBucket with the channel's
    prefix, then s3:GetObject on each key. The code channel (the job's source archive) and a
    data channel under data/ must both be readable."""
    from orchestrator import request, spec

    loaded = spec.loads(f"""
name: chan
backend: sagemaker
role_arn: {ROLE_ARN}
instance: {{type: ml.trn1.2xlarge}}
data: {{source: s3://{BUCKET}/data/imagenet}}
compile_cache: {{uri: s3://{BUCKET}/compile-cache}}
output: {{uri: s3://{BUCKET}/{output}}}
""")
    prepared = request.prepare(loaded)
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in prepared.request["InputDataConfig"]}
    assert set(channels) == {"code", "train"} and channels["code"] == prepared.source_uri
    doc = role_policies(resolved_template(False))[0][1]
    for uri in channels.values():
        key = uri.removeprefix(f"s3://{BUCKET}/")
        assert _granted(doc, "s3:ListBucket", f"arn:aws:s3:::{BUCKET}"), uri  # unconditioned: any prefix
        assert _granted(doc, "s3:GetObject", f"arn:aws:s3:::{BUCKET}/{key}"), uri


@pytest.mark.parametrize("use_kms", [False, True])
def test_operator_policy_grants_exactly_what_the_orchestrator_calls(use_kms):
    doc = operator_document(resolved_template(use_kms))
    assert identity_policy_problems(doc, "OperatorPolicy") == []
    assert actions_of(doc) == OPERATOR_ACTIONS
    passrole = [st for st in doc["Statement"] if "iam:PassRole" in as_list(st["Action"])]
    assert passrole == [{"Sid": "PassTheExecutionRoleToSageMakerOnly", "Effect": "Allow", "Action": "iam:PassRole",
                         "Resource": ROLE_ARN,
                         "Condition": {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}}]


def test_every_action_exists_in_aws():
    session = botocore.session.get_session()
    template = resolved_template(True)
    documents = [doc for _, doc in role_policies(template)] + [operator_document(template)]
    documents.append(template["Resources"]["ExecutionRole"]["Properties"]["AssumeRolePolicyDocument"])
    documents.append(template["Resources"]["EncryptionKey"]["Properties"]["KeyPolicy"])
    operations = {}
    for doc in documents:
        for action in actions_of(doc):
            if action in IAM_ONLY_ACTIONS:
                continue
            service, operation = action.split(":")
            if service not in operations:
                operations[service] = set(session.get_service_model(SERVICE_MODELS[service]).operation_names)
            assert operation in operations[service], f"{action} is not an operation of {service}"


def test_printed_operator_policy_is_the_templates_filled_in():
    outputs = infra.StackOutputs(stack_name=STACK, region=REGION, role_arn=ROLE_ARN, bucket=BUCKET,
                                 compile_cache_uri=f"s3://{BUCKET}/compile-cache", output_uri=f"s3://{BUCKET}/jobs",
                                 operator_policy_arn=f"arn:aws:iam::{ACCOUNT}:policy/op")
    printed = infra.operator_policy(outputs)
    assert printed == operator_document(resolved_template(False))
    assert identity_policy_problems(printed, "infra policy") == []
    placeholders = infra.operator_policy(None, stack_name=STACK, region=REGION)
    assert identity_policy_problems(placeholders, "placeholders", role_arn=placeholders["Statement"][2]["Resource"],
                                    bucket="<BUCKET>", account="<ACCOUNT_ID>") == []
    assert "<ACCOUNT_ID>" in json.dumps(placeholders) and "<BUCKET>" in json.dumps(placeholders)


def test_deployed_policies_pass_the_walk_and_match_infra_policy(moto_server, moto_change_set_outputs, monkeypatch,
                                                                capsys):
    """What CloudFormation (moto) created from the template passes the same walk, and
    `infra policy` prints exactly the operator policy the stack created."""
    from orchestrator import cli

    cfn = boto3.client("cloudformation", region_name=REGION)
    plan = infra.plan_change_set(cfn, STACK, {}, sleep=lambda s: None)
    outputs = infra.execute(cfn, plan, sleep=lambda s: None)
    iam = boto3.client("iam")
    role_name = outputs.role_arn.rsplit("/", 1)[1]
    inline = iam.get_role_policy(RoleName=role_name, PolicyName="training-job")["PolicyDocument"]
    if isinstance(inline, str):
        # moto 5.2.5 stores a CloudFormation role's inline policy as the Python repr of a dict.
        inline = ast.literal_eval(inline)
    assert identity_policy_problems(inline, "deployed role", outputs.role_arn, outputs.bucket) == []
    policy = iam.get_policy(PolicyArn=outputs.operator_policy_arn)["Policy"]
    deployed = iam.get_policy_version(PolicyArn=outputs.operator_policy_arn,
                                      VersionId=policy["DefaultVersionId"])["PolicyVersion"]["Document"]
    assert identity_policy_problems(deployed, "deployed operator", outputs.role_arn, outputs.bucket) == []

    monkeypatch.setattr("sys.argv", ["orchestrator", "infra", "policy"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code in (0, None)
    captured = capsys.readouterr()
    assert json.loads(captured.out) == deployed
    assert outputs.operator_policy_arn in captured.err


# --- resource policies and the bucket (asserted on the template: moto skips them) ----------


def test_role_is_trusted_only_by_sagemaker_of_this_account():
    trust = infra.load_template()["Resources"]["ExecutionRole"]["Properties"]["AssumeRolePolicyDocument"]
    assert trust["Version"] == "2012-10-17"
    (statement,) = trust["Statement"]
    assert statement["Effect"] == "Allow"
    assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert statement["Action"] == "sts:AssumeRole"
    assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


def test_bucket_encryption_is_sse_s3_by_default_and_sse_kms_with_the_stacks_key():
    template = infra.load_template()
    assert template["Parameters"]["UseKms"]["Default"] == "false"
    assert template["Conditions"]["UseKmsKey"] == {"Fn::Equals": [{"Ref": "UseKms"}, "true"]}
    key = template["Resources"]["EncryptionKey"]
    assert key["Condition"] == "UseKmsKey"
    assert key["Properties"]["EnableKeyRotation"] is True
    sse_s3 = resolved_template(False)["Resources"]["Bucket"]["Properties"]["BucketEncryption"]
    assert sse_s3 == {"ServerSideEncryptionConfiguration": [
        {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}
    sse_kms = resolved_template(True)["Resources"]["Bucket"]["Properties"]["BucketEncryption"]
    assert sse_kms == {"ServerSideEncryptionConfiguration": [
        {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": KEY_ARN},
         "BucketKeyEnabled": True}]}


def test_key_policy_has_no_wildcard_action_and_lets_only_this_account_use_it_through_s3():
    policy = resolved_template(True)["Resources"]["EncryptionKey"]["Properties"]["KeyPolicy"]
    assert policy["Version"] == "2012-10-17"
    for st in policy["Statement"]:
        assert st["Effect"] == "Allow"
        assert all(re.fullmatch(r"kms:[A-Za-z]+", a) for a in as_list(st["Action"])), st["Sid"]
        assert st["Resource"] == "*"  # in a key policy: this key
        if st["Principal"] == {"AWS": "*"}:
            assert st["Condition"] == {"StringEquals": {"kms:CallerAccount": ACCOUNT,
                                                        "kms:ViaService": f"s3.{REGION}.amazonaws.com"}}
            assert not {"kms:PutKeyPolicy", "kms:ScheduleKeyDeletion", "kms:CreateGrant"} & set(st["Action"])
        elif "Service" in st["Principal"]:
            # With EnableBatch: CloudWatch Logs of this region, for the Batch log group only.
            assert st["Principal"] == {"Service": f"logs.{REGION}.amazonaws.com"}
            assert st["Condition"] == {"ArnEquals": {"kms:EncryptionContext:aws:logs:arn":
                                                     f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/orchestrator/{STACK}/batch"}}
            assert not {"kms:PutKeyPolicy", "kms:ScheduleKeyDeletion", "kms:CreateGrant"} & set(st["Action"])
        else:
            assert st["Principal"] == {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}
    # The account can still administer the key (no lock-out).
    assert any("kms:PutKeyPolicy" in st["Action"] for st in policy["Statement"])
    # The logs statement exists only with EnableBatch (a log group to encrypt).
    without_batch = resolved_template(True, batch=False)["Resources"]["EncryptionKey"]["Properties"]["KeyPolicy"]
    assert [st["Sid"] for st in without_batch["Statement"]] == ["AccountAdministersKey", "AccountPrincipalsUseKeyThroughS3"]
    assert "CloudWatchLogsEncryptsTheBatchLogGroup" in [st["Sid"] for st in policy["Statement"]]


def test_bucket_versioning_public_access_block_and_ownership():
    props = infra.load_template()["Resources"]["Bucket"]["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}


def test_bucket_lifecycle_aborts_uploads_and_expires_old_compile_cache_versions():
    template = infra.load_template()
    rules = {r["Id"]: r for r in template["Resources"]["Bucket"]["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert all(rule["Status"] == "Enabled" for rule in rules.values())
    abort = rules["abort-incomplete-multipart-uploads"]
    assert abort["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": {"Ref": "AbortIncompleteUploadDays"}}
    assert "Prefix" not in abort and "Filter" not in abort  # the whole bucket
    cache = rules["expire-noncurrent-compile-cache"]
    assert cache["Prefix"] == "compile-cache/"
    assert cache["NoncurrentVersionExpiration"] == {"NoncurrentDays": {"Ref": "CompileCacheNoncurrentDays"}}
    # `cache prune`'s deletes leave delete markers behind on this versioned bucket: expired too.
    assert cache["ExpiredObjectDeleteMarker"] is True
    days = template["Parameters"]["CompileCacheNoncurrentDays"]
    assert days["Type"] == "Number" and days["MinValue"] >= 1
    assert set(rules) == {"abort-incomplete-multipart-uploads", "expire-noncurrent-compile-cache"}


def test_bucket_policy_denies_every_request_without_tls():
    template = infra.load_template()
    policy = template["Resources"]["BucketPolicy"]
    assert policy["Properties"]["Bucket"] == {"Ref": "Bucket"}
    doc = infra.evaluate(policy["Properties"]["PolicyDocument"], context(), {})
    assert doc == {"Version": "2012-10-17", "Statement": [{
        "Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}


def test_outputs_name_what_the_tool_reads():
    outputs = infra.load_template()["Outputs"]
    assert set(infra.REQUIRED_OUTPUTS) <= set(outputs)
    assert set(outputs) <= set(infra.OUTPUT_KEYS)
    resolved = infra.evaluate(outputs, context(), {"UseKmsKey": True})
    assert resolved["CompileCacheUri"]["Value"] == f"s3://{BUCKET}/compile-cache"
    assert resolved["OutputUri"]["Value"] == f"s3://{BUCKET}/jobs"
    assert resolved["RoleArn"]["Value"] == ROLE_ARN


def test_each_wildcard_resource_is_explained_in_a_comment_above_it():
    lines = infra.TEMPLATE.read_text().splitlines()
    for action in STAR_EXCEPTIONS:
        at = next(i for i, line in enumerate(lines) if line.strip() == f"Action: {action}")
        sid = max(i for i in range(at) if lines[i].strip().startswith("- Sid:"))
        comment = []
        for line in reversed(lines[:sid]):
            if not line.strip().startswith("#"):
                break
            comment.append(line)
        text = " ".join(comment)
        assert action in text and '"*"' in text, f"no comment explains {action} on Resource '*'"


# --- cfn-lint ---------------------------------------------------------------------------


def test_cfn_lint_is_clean_and_would_notice_a_problem(tmp_path):
    from cfnlint.api import lint_all, lint_file

    assert [str(m) for m in lint_file(infra.TEMPLATE)] == []
    broken = copy.deepcopy(infra.TEMPLATE.read_text()).replace("Status: Enabled\n      PublicAccessBlock",
                                                                "Status: Enabledd\n      PublicAccessBlock")
    assert broken != infra.TEMPLATE.read_text()
    assert lint_all(broken)


# --- the operator policy allows what the tool really sends ------------------------------

# IAM action of each S3 API operation the tool's storage layer sends.
S3_OPERATION_ACTIONS = {
    "ListObjectsV2": "s3:ListBucket", "HeadObject": "s3:GetObject", "GetObject": "s3:GetObject",
    "PutObject": "s3:PutObject", "CreateMultipartUpload": "s3:PutObject", "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject", "AbortMultipartUpload": "s3:AbortMultipartUpload",
    "DeleteObject": "s3:DeleteObject",
}


def allowed(doc: dict, action: str, resource: str, prefix: str | None = None) -> bool:
    """Whether an Allow statement of `doc` grants `action` on `resource` (ListBucket: with
    `prefix` matching its s3:prefix condition). Enough IAM for the policies in this stack."""
    import fnmatch

    for st in doc["Statement"]:
        if st["Effect"] != "Allow" or action not in as_list(st["Action"]):
            continue
        if not any(fnmatch.fnmatchcase(resource, pattern) for pattern in as_list(st["Resource"])):
            continue
        wanted = st.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
        if wanted is None or (prefix is not None and any(fnmatch.fnmatchcase(prefix, p) for p in as_list(wanted))):
            return True
    return False


def test_operator_policy_allows_every_s3_call_of_cache_push_ls_show_and_prune(moto_server, tmp_path):
    # Record each S3 request the cache commands send to moto, then ask the operator policy of
    # the stack (resolved for this bucket) whether it allows that action on that object.
    import boto3

    from entrypoints.shared import compile_cache as cc
    from orchestrator import cache

    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    sent: list[tuple[str, str, str | None]] = []

    def record(params, model, **_):
        key = params.get("Key")
        resource = f"arn:aws:s3:::{params['Bucket']}" + (f"/{key}" if key is not None else "")
        sent.append((model.name, resource, params.get("Prefix")))

    s3.meta.events.register("before-parameter-build.s3.*", record)
    uri = f"s3://{BUCKET}/compile-cache"
    key = cc.CacheKey("neuronx-cc", "2.22.1", "xla", "", "trn1", 2)
    module = tmp_path / "src" / "neuronxcc-2.22.1" / "MODULE_a+00"
    module.mkdir(parents=True)
    (module / "model.neff").write_bytes(b"n" * 100)
    (module / "model.done").write_text("")
    cc.push(uri, key, tmp_path / "src", s3_client=s3)
    cc.pull(uri, key, tmp_path / "pulled", s3_client=s3)
    cache.list_keys(uri, s3_client=s3)
    cache.show(uri, key.digest(), s3_client=s3)
    report = cache.prune(uri, key=key.digest(), grace_s=0, s3_client=s3)
    assert len(report.deleted) == 2  # the manifest and the one archive: prune really deleted

    doc = operator_document(resolved_template(False))
    operations = {name for name, _, _ in sent}
    assert {"ListObjectsV2", "GetObject", "PutObject", "DeleteObject"} <= operations
    refused = [(name, resource) for name, resource, prefix in sent
               if not allowed(doc, S3_OPERATION_ACTIONS[name], resource, prefix)]
    assert refused == []
    # And the same policy refuses deleting anything outside the compile caches.
    assert not allowed(doc, "s3:DeleteObject", f"arn:aws:s3:::{BUCKET}/jobs/results/j/results.json")
    assert not allowed(doc, "s3:DeleteObject", f"arn:aws:s3:::{BUCKET}/data/train/x.png")
