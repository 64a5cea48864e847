"""IAM as AWS enforces it, which moto does not: resource formats, and every call granted.

1. Resource formats. Every statement of infra/stack.yaml (its intrinsic functions resolved,
   the template's parameters and resources replaced by placeholders, under every combination
   of its conditions) and of `infra policy` names, for each action, a resource of the form the
   AWS Service Authorization Reference requires for that action (tests/data/
   iam_resource_formats.json: the pages and the date they were read). A bare log group ARN
   for logs:DescribeLogStreams, a bucket ARN for s3:GetObject, "*" for an action that has
   resource-level permissions: each fails here.
2. Every call granted. Every boto3 operation the code calls (found by reading orchestrator/
   and entrypoints/), and every call SageMaker makes as the execution role inside the job
   (logs, image pull, metrics, and the S3 reads and writes of the cache, results, source,
   data, output and checkpoints), is mapped to the request IAM evaluates (action, resource,
   condition keys); a small evaluator of the resolved policies must allow it. An operation in
   the code that the map does not know fails the test, so a new call comes with its grant.
   The S3 paths come from a prepared request of a real spec, so they follow the code.
   The S3 requests the cache, results and submit code really send (recorded against moto)
   are checked the same way.
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import botocore.session
import pytest
from botocore import xform_name

from orchestrator import infra, request, spec

ROOT = Path(__file__).resolve().parents[1]
FORMATS = json.loads((ROOT / "tests" / "data" / "iam_resource_formats.json").read_text())
PARTITION, REGION, ACCOUNT, STACK = "aws", "us-east-1", "123456789012", "orchestrator"
BUCKET = "orchestrator-bucket-abc123"
LOG_GROUP = "/aws/sagemaker/TrainingJobs"


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


# --- the template, resolved with placeholders ------------------------------------------------

# The ARN each resource type's Fn::GetAtt .Arn (or Ref, for a managed policy) stands for.
_ARN_OF_TYPE = {
    "AWS::S3::Bucket": "arn:{partition}:s3:::{ref}",
    "AWS::IAM::Role": "arn:{partition}:iam::{account}:role/{ref}",
    "AWS::KMS::Key": "arn:{partition}:kms:{region}:{account}:key/{ref}",
    "AWS::IAM::ManagedPolicy": "arn:{partition}:iam::{account}:policy/{ref}",
    "AWS::IAM::InstanceProfile": "arn:{partition}:iam::{account}:instance-profile/{ref}",
    "AWS::Logs::LogGroup": "arn:{partition}:logs:{region}:{account}:log-group:{ref}:*",
}
# Other attributes the template reads with Fn::GetAtt: (resource type, attribute) -> placeholder.
_OTHER_ATTRIBUTES = {("AWS::EC2::LaunchTemplate", "LatestVersionNumber"): "1"}
# The principal each role's inline policies belong to: the SageMaker execution role ("role") and
# the Batch training container's role ("batch-job").
ROLE_PRINCIPALS = {"ExecutionRole": "role", "BatchJobRole": "batch-job"}


def placeholder_context(template: dict) -> dict[str, str]:
    """Every name the template can refer to: pseudo parameters, each parameter as <Name>, each
    resource's Ref as <LogicalId> and its Arn attribute as an ARN of its type around that."""
    context = {"AWS::Partition": PARTITION, "AWS::Region": REGION, "AWS::AccountId": ACCOUNT,
               "AWS::StackName": STACK, "AWS::URLSuffix": "amazonaws.com"}
    context.update({name: f"<{name}>" for name in template.get("Parameters", {})})
    for logical_id, resource in template["Resources"].items():
        ref = f"<{logical_id}>"
        arn = _ARN_OF_TYPE.get(resource["Type"], "<{ref}.Arn>").format(
            partition=PARTITION, region=REGION, account=ACCOUNT, ref=ref)
        context[logical_id] = arn if resource["Type"] == "AWS::IAM::ManagedPolicy" else ref
        context[f"{logical_id}.Arn"] = arn
        for (rtype, attribute), value in _OTHER_ATTRIBUTES.items():
            if resource["Type"] == rtype:
                context[f"{logical_id}.{attribute}"] = value
    return context


@functools.cache
def resolved_templates() -> list[tuple[str, dict]]:
    """The template resolved under every combination of its conditions."""
    template = infra.load_template()
    names = sorted(template.get("Conditions", {}))
    out = []
    for values in itertools.product([False, True], repeat=len(names)):
        conditions = dict(zip(names, values, strict=True))
        label = ",".join(f"{n}={v}" for n, v in conditions.items())
        out.append((label, infra.evaluate(template, placeholder_context(template), conditions)))
    return out


def identity_policies(template: dict) -> list[tuple[str, str, dict]]:
    """(principal, name, document) of every identity policy: the roles' inline policies
    (ROLE_PRINCIPALS: "role" for the SageMaker execution role's, "batch-job" for the Batch
    container's), managed policies ("operator" for the operator's)."""
    found = []
    for logical_id, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Role":
            found += [(ROLE_PRINCIPALS.get(logical_id, logical_id), f"{logical_id}/{p['PolicyName']}", p["PolicyDocument"])
                      for p in props.get("Policies", [])]
        elif resource["Type"] in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
            principal = "operator" if logical_id == infra.OPERATOR_POLICY_RESOURCE else logical_id
            found.append((principal, logical_id, props["PolicyDocument"]))
    return found


def concrete_template() -> dict:
    """The resolved template with this test's bucket and role, and the parameters' defaults, in
    place of their placeholders."""
    text = json.dumps(resolved_templates()[0][1])
    for name, declared in infra.load_template()["Parameters"].items():
        if str(declared.get("Default", "")):
            text = text.replace(f"<{name}>", str(declared["Default"]))
    return json.loads(text.replace("<Bucket>", BUCKET).replace("<ExecutionRole>", "x-ExecutionRole-1"))


def document_of(principal: str, template: dict | None = None) -> dict:
    template = template or concrete_template()
    docs = [doc for who, _, doc in identity_policies(template) if who == principal]
    assert len(docs) == 1, f"one {principal} policy expected"
    return docs[0]


# --- 1. resource formats --------------------------------------------------------------------

_VARIABLES = {
    "Partition": r"aws(?:-[a-z]+)*",
    "Region": r"[a-z]{2}(?:-[a-z]+)+-[0-9]+|<[A-Za-z_]+>",
    "Account": r"[0-9]{12}|<[A-Za-z_]+>",
    "ObjectName": r".+",
}
_COMPONENT = r"[^:]+"


def format_regex(resource_type: str) -> re.Pattern:
    """The ARN format of `resource_type` (the data file's) as a regex; a wildcard in the policy's
    resource counts as characters of the component it stands in."""
    pattern = FORMATS["resource_types"][resource_type]
    parts = re.split(r"\$\{(\w+)\}", pattern)
    regex = "".join(re.escape(p) if i % 2 == 0 else f"(?:{_VARIABLES.get(p, _COMPONENT)})"
                    for i, p in enumerate(parts))
    return re.compile(regex)


def format_problems(doc: dict, where: str) -> list[str]:
    """Why a resolved identity policy's statements do not name the resources their actions
    require; empty when each does."""
    problems = []
    for index, st in enumerate(doc.get("Statement", [])):
        if st.get("Effect") != "Allow":
            continue
        at = f"{where} statement {st.get('Sid', index)}"
        actions, resources = as_list(st.get("Action", [])), as_list(st.get("Resource", []))
        unknown = [a for a in actions if a not in FORMATS["actions"]]
        for action in unknown:
            problems.append(f"{at}: no resource format recorded for {action}; add it to "
                            "tests/data/iam_resource_formats.json from the Service Authorization Reference")
        actions = [a for a in actions if a not in unknown]
        if resources == ["*"]:
            for action in actions:
                if FORMATS["actions"][action]:
                    problems.append(f"{at}: {action} has resource-level permissions "
                                    f"({', '.join(FORMATS['actions'][action])}): name them, not '*'")
            continue
        used = set()
        for action in actions:
            types = FORMATS["actions"][action]
            if not types:
                problems.append(f"{at}: {action} takes only \"Resource\": \"*\" (no resource-level permission)")
                continue
            matched = [r for r in resources if any(format_regex(t).fullmatch(r) for t in types)]
            if not matched:
                wanted = " or ".join(FORMATS["resource_types"][t] for t in types)
                problems.append(f"{at}: {action} is granted on {resources}, none of the form {wanted}")
            used.update(matched)
        for resource in resources:
            if resource not in used and actions:
                problems.append(f"{at}: {resource} has the form no action of the statement requires")
    return problems


def test_every_granted_action_has_a_recorded_format_and_the_data_names_its_sources():
    assert FORMATS["read"] and "service_authorization_reference" in FORMATS["sources"]
    assert "cloudwatch_logs_access_control" in FORMATS["sources"]
    for action, types in FORMATS["actions"].items():
        assert all(t in FORMATS["resource_types"] for t in types), action
    for _, template in resolved_templates():
        for _, _, doc in identity_policies(template):
            for st in doc["Statement"]:
                for action in as_list(st["Action"]):
                    assert action in FORMATS["actions"], action


@pytest.mark.parametrize("label, template", resolved_templates(), ids=[label for label, _ in resolved_templates()])
def test_every_statement_of_the_template_names_resources_its_actions_require(label, template):
    policies = identity_policies(template)
    assert {who for who, _, _ in policies} == {"role", "batch-job", "operator"}
    for _, name, doc in policies:
        assert format_problems(doc, f"{name} ({label})") == []


def test_every_statement_of_infra_policy_names_resources_its_actions_require():
    outputs = infra.StackOutputs(stack_name=STACK, region=REGION, role_arn=f"arn:aws:iam::{ACCOUNT}:role/x-ExecutionRole-1",
                                 bucket=BUCKET, compile_cache_uri=f"s3://{BUCKET}/compile-cache",
                                 output_uri=f"s3://{BUCKET}/jobs", operator_policy_arn=f"arn:aws:iam::{ACCOUNT}:policy/op")
    assert format_problems(infra.operator_policy(outputs), "infra policy") == []
    assert format_problems(infra.operator_policy(None, stack_name=STACK), "infra policy (placeholders)") == []


def test_the_format_check_fails_on_what_aws_would_not_match():
    group = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{LOG_GROUP}"
    bad = {"Statement": [
        {"Sid": "BareGroup", "Effect": "Allow", "Action": ["logs:DescribeLogStreams", "logs:GetLogEvents"],
         "Resource": [group, f"{group}:log-stream:*"]},
        {"Sid": "BucketForObjects", "Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{BUCKET}"},
        {"Sid": "StarForJobs", "Effect": "Allow", "Action": "sagemaker:DescribeTrainingJob", "Resource": "*"},
        {"Sid": "TokenOnRepo", "Effect": "Allow", "Action": "ecr:GetAuthorizationToken",
         "Resource": f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/r"},
        {"Sid": "Unknown", "Effect": "Allow", "Action": "s3:GetObjectTagging", "Resource": f"arn:aws:s3:::{BUCKET}/x"},
    ]}
    problems = "\n".join(format_problems(bad, "bad"))
    assert "statement BareGroup: logs:DescribeLogStreams is granted on" in problems
    assert f"statement BareGroup: {group} has the form no action" in problems
    assert "statement BucketForObjects: s3:GetObject" in problems
    assert "statement StarForJobs: sagemaker:DescribeTrainingJob has resource-level permissions" in problems
    assert "statement TokenOnRepo: ecr:GetAuthorizationToken takes only" in problems
    assert "statement Unknown: no resource format recorded for s3:GetObjectTagging" in problems


# --- 2. an evaluator of the resolved policies --------------------------------------------------


def _matches(pattern: str, value: str) -> bool:
    """IAM's wildcard match: * any run of characters, ? one; everything else literal."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def _condition_holds(condition: dict, context: dict[str, str]) -> bool:
    for operator, block in condition.items():
        base, if_exists = (operator[:-len("IfExists")], True) if operator.endswith("IfExists") else (operator, False)
        for key, wanted in block.items():
            if key not in context:
                # A key absent from the request makes the condition false (IAM User Guide,
                # condition operators), unless the operator is ...IfExists.
                if not if_exists:
                    return False
                continue
            value, wanted = context[key], [str(w) for w in as_list(wanted)]
            if base == "StringEquals":
                ok = value in wanted
            elif base == "StringLike":
                ok = any(_matches(w, value) for w in wanted)
            elif base == "Bool":
                ok = value.lower() in [w.lower() for w in wanted]
            else:
                raise AssertionError(f"the evaluator does not know the condition operator {operator}")
            if not ok:
                return False
    return True


def allows(doc: dict, action: str, resource: str, context: dict[str, str] | None = None) -> bool:
    """Whether an identity policy allows `action` on `resource` with these condition keys
    (no Deny statements in these policies; the bucket policy's TLS deny is not in play)."""
    context = context or {}
    for st in doc["Statement"]:
        if st["Effect"] != "Allow":
            continue
        if not any(_matches(a.lower(), action.lower()) for a in as_list(st["Action"])):
            continue
        if not any(_matches(r, resource) for r in as_list(st["Resource"])):
            continue
        if _condition_holds(st.get("Condition", {}), context):
            return True
    return False


# --- the requests IAM sees --------------------------------------------------------------------


@dataclass(frozen=True)
class Need:
    """One authorization IAM makes for a call: action on resource with condition keys."""

    principal: str  # operator | role
    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()
    why: str = ""

    def allowed_by(self, doc: dict) -> bool:
        return allows(doc, self.action, self.resource, dict(self.context))


def job_arn(name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name}"


def plan_arn(name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/{name}"


def group_arn() -> str:
    # The form CloudWatch Logs authorizes log-group actions against (access-control page).
    return f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{LOG_GROUP}:*"


def stream_arn(job: str) -> str:
    return f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{LOG_GROUP}:log-stream:{job}/algo-1-1700000000"


def object_arn(uri: str) -> str:
    assert uri.startswith(f"s3://{BUCKET}/"), uri
    return f"arn:aws:s3:::{uri[len('s3://'):]}"


BUCKET_ARN = f"arn:aws:s3:::{BUCKET}"

# What IAM authorizes for each S3 API operation the tool sends. A HEAD or GET of a key that may
# be missing is also a ListBucket check without s3:prefix: the 404 (not 403) the code relies on
# (HeadObject/GetObject API reference, "Permissions").
S3_OPERATIONS = {
    "HeadObject": ("read",), "GetObject": ("read",),
    "PutObject": ("write",), "CreateMultipartUpload": ("write",), "UploadPart": ("write",),
    "CompleteMultipartUpload": ("write",), "AbortMultipartUpload": ("abort",),
    "ListObjectsV2": ("list",), "DeleteObject": ("delete",),
}


def s3_needs(principal: str, kind: str, target: str, why: str) -> list[Need]:
    if kind == "read":
        return [Need(principal, "s3:GetObject", object_arn(target), why=why),
                Need(principal, "s3:ListBucket", BUCKET_ARN, why=f"{why}: a missing key must read 404, not 403")]
    if kind == "write":
        return [Need(principal, "s3:PutObject", object_arn(target), why=why)]
    if kind == "abort":
        return [Need(principal, "s3:AbortMultipartUpload", object_arn(target), why=why)]
    if kind == "delete":
        return [Need(principal, "s3:DeleteObject", object_arn(target), why=why)]
    assert kind == "list"
    prefix = target[len(f"s3://{BUCKET}/"):]
    return [Need(principal, "s3:ListBucket", BUCKET_ARN, (("s3:prefix", prefix),), why=why)]


@dataclass
class Layout:
    """Where a job of a real spec reads and writes, from its prepared request."""

    job: str
    source: str
    results: str
    output: str
    checkpoint: str
    checkpoints: str
    data: str
    data_object: str
    cache_manifest: str
    cache_archive: str
    cache_root: str
    repository_arn: str
    results_prefix: str
    extra: dict = field(default_factory=dict)


def layout(tmp_path: Path) -> Layout:
    from entrypoints.shared import compile_cache as cc

    path = tmp_path / "job.yaml"
    path.write_text(f"""\
name: vit-iam
backend: sagemaker
region: {REGION}
role_arn: arn:aws:iam::{ACCOUNT}:role/x-ExecutionRole-1
instance: {{type: ml.trn1.2xlarge, count: 1}}
image: {{neuron_sdk: "2.30.0"}}
training: {{steps: 20, warmup_steps: 2, batch_size: 8, checkpoint_every: 10}}
data: {{source: s3://{BUCKET}/data/train}}
compile_cache: {{uri: s3://{BUCKET}/compile-cache, mode: tarball}}
output: {{uri: s3://{BUCKET}/jobs}}
max_run_minutes: 30
""")
    prepared = request.prepare(spec.load(path))
    req = prepared.request
    name = prepared.job_name
    train = next(c for c in req["InputDataConfig"] if c["ChannelName"] == "train")["DataSource"]["S3DataSource"]
    key = cc.CacheKey("neuronx-cc", "2.25.3371.0", "xla", "--model-type=transformer", "trn1", 2).digest()
    cache = prepared.job["compile_cache"]["uri"]
    image = req["AlgorithmSpecification"]["TrainingImage"]
    registry, repository = image.split("/", 1)
    account, _, _, region = registry.split(".")[:4]
    return Layout(
        job=name, source=prepared.source_uri, results=prepared.job["results_uri"],
        output=f"{req['OutputDataConfig']['S3OutputPath']}/{name}/output/model.tar.gz",
        checkpoint=f"{req['CheckpointConfig']['S3Uri']}/step-10.pt", checkpoints=f"{req['CheckpointConfig']['S3Uri']}/",
        data=train["S3Uri"] + "/", data_object=train["S3Uri"] + "/cat/0001.png",
        cache_manifest=f"{cache}/{key}/{cc.MANIFEST}", cache_archive=f"{cache}/{key}/archives/ab12.tar.gz",
        cache_root=f"{cache}/", repository_arn=f"arn:aws:ecr:{region}:{account}:repository/{repository.split(':')[0]}",
        results_prefix=prepared.job["results_uri"].rsplit("/", 2)[0] + "/",
        extra={"tensorboard": f"{req['TensorBoardOutputConfig']['S3OutputPath']}/"},
    )


def operator_s3(at: Layout) -> dict[str, list[Need]]:
    """S3 operation -> what the laptop's calls of it need (submit, results, cache commands)."""
    return {
        "HeadObject": s3_needs("operator", "read", at.source, "submit: is the source archive there")
                      + s3_needs("operator", "read", at.cache_archive, "cache show/prune: an archive's size"),
        "GetObject": s3_needs("operator", "read", at.results, "results: results.json")
                     + s3_needs("operator", "read", at.cache_manifest, "cache ls/show/prune: a manifest")
                     + s3_needs("operator", "read", at.extra["tensorboard"] + "events.out.tfevents.1",
                                "tensorboard: a job's event file"),
        "PutObject": s3_needs("operator", "write", at.source, "submit: the source archive")
                     + s3_needs("operator", "write", at.cache_manifest, "cache push from a laptop"),
        "CreateMultipartUpload": s3_needs("operator", "write", at.cache_archive, "a large archive"),
        "UploadPart": s3_needs("operator", "write", at.cache_archive, "a large archive"),
        "CompleteMultipartUpload": s3_needs("operator", "write", at.cache_archive, "a large archive"),
        "AbortMultipartUpload": s3_needs("operator", "abort", at.cache_archive, "a failed large upload"),
        "ListObjectsV2": s3_needs("operator", "list", at.results_prefix, "results: the jobs with results")
                         + s3_needs("operator", "list", at.cache_root, "cache ls/prune")
                         + s3_needs("operator", "list", at.extra["tensorboard"], "tensorboard: a job's event files"),
        "DeleteObject": s3_needs("operator", "delete", at.cache_archive, "cache prune")
                        + s3_needs("operator", "delete", at.cache_manifest, "cache prune --key"),
    }


def role_s3(at: Layout) -> dict[str, list[Need]]:
    """S3 operation -> what the job's own calls of it need (compile cache pull and push,
    results.json), as entrypoints/ sends them with the execution role."""
    return {
        "HeadObject": s3_needs("role", "read", at.cache_archive, "cache push: is the archive there"),
        "GetObject": s3_needs("role", "read", at.cache_manifest, "cache pull: the manifest (missing on a first run)")
                     + s3_needs("role", "read", at.cache_archive, "cache pull: an archive"),
        "PutObject": s3_needs("role", "write", at.cache_manifest, "cache push: the manifest")
                     + s3_needs("role", "write", at.results, "launch.py: results.json"),
        "CreateMultipartUpload": s3_needs("role", "write", at.cache_archive, "cache push: a large archive"),
        "UploadPart": s3_needs("role", "write", at.cache_archive, "cache push: a large archive"),
        "CompleteMultipartUpload": s3_needs("role", "write", at.cache_archive, "cache push: a large archive"),
        "AbortMultipartUpload": s3_needs("role", "abort", at.cache_archive, "cache push: a failed upload"),
        "ListObjectsV2": [],
        "DeleteObject": [],
    }


def sagemaker_as_role(at: Layout) -> list[Need]:
    """What SageMaker itself does as the execution role while running the job."""
    needs = [
        Need("role", "ecr:GetAuthorizationToken", "*", why="image pull: registry login"),
        *[Need("role", action, at.repository_arn, why="image pull")
          for action in ("ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage")],
        Need("role", "logs:CreateLogGroup", group_arn(), why="the job's logs, first job in a region"),
        Need("role", "logs:DescribeLogStreams", group_arn(), why="the job's logs"),
        Need("role", "logs:CreateLogStream", stream_arn(at.job), why="the job's logs"),
        Need("role", "logs:PutLogEvents", stream_arn(at.job), why="the job's logs"),
        Need("role", "cloudwatch:PutMetricData", "*", (("cloudwatch:namespace", LOG_GROUP),), why="job metrics"),
    ]
    # The code channel: an S3Prefix channel of the source archive's whole key.
    needs += s3_needs("role", "list", at.source, "the code channel's download (sourcedir.tar.gz)")
    needs += s3_needs("role", "read", at.source, "the code channel's download (sourcedir.tar.gz)")
    needs += s3_needs("role", "list", at.data, "the train channel's download")
    needs += s3_needs("role", "read", at.data_object, "the train channel's download")
    needs += s3_needs("role", "write", at.output, "model.tar.gz at the end")
    needs += s3_needs("role", "list", at.checkpoints, "checkpoint sync: what is there")
    needs += s3_needs("role", "read", at.checkpoint, "checkpoint sync: a restart reads them back")
    needs += s3_needs("role", "write", at.checkpoint, "checkpoint sync: each new checkpoint")
    # TensorBoardOutputConfig: SageMaker uploads rank 0's event files while the job runs.
    needs += s3_needs("role", "write", at.extra["tensorboard"] + "events.out.tfevents.1",
                      "TensorBoard upload of the event files")
    return needs


# Calls only `infra deploy` makes: it runs with administrator credentials (README, "Setting up
# AWS", step 0); the operator policy is for everything after.
# Calls IAM never asks a grant for. STS API reference, GetCallerIdentity: "No permissions are
# required to perform this operation. If an administrator attaches a policy to your identity
# that explicitly denies access to the sts:GetCallerIdentity action, you can still perform this
# operation." (orchestrator/accounts.py: which account a job belongs to, issue 33.)
NO_GRANT = {("sts", "GetCallerIdentity")}

ADMIN_ONLY = {
    ("cloudformation", "CreateChangeSet"), ("cloudformation", "DescribeChangeSet"),
    ("cloudformation", "ExecuteChangeSet"), ("cloudformation", "DeleteChangeSet"),
    ("cloudformation", "DeleteStack"), ("cloudformation", "DescribeStackEvents"),
    # `schedule deploy|list|remove` run with the credentials that deploy stacks (a schedule's
    # stack creates IAM roles; listing reads every schedule stack of the region), as `infra
    # deploy` does: docs/USAGE.md says so. The operator policy grants none of these.
    ("stepfunctions", "ListExecutions"), ("stepfunctions", "DescribeExecution"),
}


def operator_calls(at: Layout) -> dict[tuple[str, str], list[Need]]:
    """(service, operation) -> what the laptop's call needs. S3 is in operator_s3/role_s3."""
    role = f"arn:aws:iam::{ACCOUNT}:role/x-ExecutionRole-1"
    batch_arn, job_id = f"arn:aws:batch:{REGION}:{ACCOUNT}", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    return {
        ("sagemaker", "CreateTrainingJob"): [
            Need("operator", "sagemaker:CreateTrainingJob", job_arn(at.job), why="submit"),
            Need("operator", "iam:PassRole", role, (("iam:PassedToService", "sagemaker.amazonaws.com"),),
                 why="submit hands the execution role to SageMaker"),
            Need("operator", "sagemaker:AddTags", job_arn(at.job), why="submit with Tags (a dependent action)")],
        ("sagemaker", "DescribeTrainingJob"): [Need("operator", "sagemaker:DescribeTrainingJob", job_arn(at.job),
                                                    why="status, --wait, results, reconcile")],
        ("sagemaker", "StopTrainingJob"): [Need("operator", "sagemaker:StopTrainingJob", job_arn(at.job), why="stop")],
        ("sagemaker", "ListTags"): [Need("operator", "sagemaker:ListTags", job_arn(at.job), why="status, adopt")],
        ("sagemaker", "ListTrainingJobs"): [Need("operator", "sagemaker:ListTrainingJobs", "*",
                                                 why="sweeps, --rerun names, results --sweep")],
        ("sagemaker", "Search"): [Need("operator", "sagemaker:Search", "*", why="results --sweep, a sweep's refresh (its ended jobs in bulk)")],
        ("sagemaker", "SearchTrainingPlanOfferings"): [
            Need("operator", "sagemaker:SearchTrainingPlanOfferings", "*", why="capacity offerings, reserve")],
        ("sagemaker", "ListTrainingPlans"): [Need("operator", "sagemaker:ListTrainingPlans", "*",
                                                  why="capacity plans")],
        ("sagemaker", "DescribeTrainingPlan"): [
            Need("operator", "sagemaker:DescribeTrainingPlan", plan_arn("vit-trn1-20261207"),
                 why="doctor --quotas, a sweep on a plan")],
        ("sagemaker", "CreateTrainingPlan"): [
            Need("operator", "sagemaker:CreateTrainingPlan", plan_arn("vit-trn1-20261207"), why="capacity reserve"),
            Need("operator", "sagemaker:CreateReservedCapacity",
                 f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:reserved-capacity/a1b2c3d4e5f6",
                 why="capacity reserve (a dependent action)")],
        ("service-quotas", "ListServiceQuotas"): [Need("operator", "servicequotas:ListServiceQuotas", "*",
                                                       why="doctor --quotas, plan --quotas, submit's quota check")],
        ("logs", "DescribeLogStreams"): [Need("operator", "logs:DescribeLogStreams", group_arn(), why="logs")],
        ("cloudformation", "DescribeStacks"): [
            Need("operator", "cloudformation:DescribeStacks",
                 f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{STACK}/1a2b3c4d-0000-1111-2222-333344445555",
                 why="infra outputs, infra policy")],
        ("pricing", "GetProducts"): [Need("operator", "pricing:GetProducts", "*", why="prices refresh")],
        ("batch", "SubmitJob"): [
            Need("operator", "batch:SubmitJob", f"{batch_arn}:job-queue/{STACK}-inf2-xlarge", why="submit (batch)"),
            Need("operator", "batch:SubmitJob", f"{batch_arn}:job-definition/{STACK}-neuron-1chip",
                 why="submit (batch): the latest revision"),
            Need("operator", "batch:SubmitJob", f"{batch_arn}:job-definition/{STACK}-neuron-1chip:3",
                 why="submit (batch): a pinned revision"),
            # The Service Authorization Reference lists `job` among SubmitJob's resource types.
            Need("operator", "batch:SubmitJob", f"{batch_arn}:job/{job_id}", why="submit (batch): the job itself"),
            Need("operator", "batch:TagResource", f"{batch_arn}:job/{job_id}", why="submit with tags (dependent)")],
        ("batch", "TerminateJob"): [Need("operator", "batch:TerminateJob", f"{batch_arn}:job/{job_id}",
                                         why="stop (batch)")],
        **{("batch", read): [Need("operator", f"batch:{read}", "*", why="status, logs, reconcile, queue checks")]
           for read in ("DescribeJobs", "ListJobs", "DescribeJobQueues", "DescribeComputeEnvironments",
                        "DescribeJobDefinitions")},
        ("logs", "GetLogEvents"): [
            Need("operator", "logs:GetLogEvents", stream_arn(at.job), why="logs"),
            Need("operator", "logs:GetLogEvents", f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/orchestrator/{STACK}/batch"
                 f":log-stream:{STACK}-neuron-1chip/default/{job_id}", why="logs (batch)")],
    }


# --- the calls in the code ----------------------------------------------------------------------


def _code_files() -> list[Path]:
    return sorted([*(ROOT / "orchestrator").rglob("*.py"), *(ROOT / "entrypoints").rglob("*.py")])


def client_services() -> set[str]:
    """The services the code builds boto3 clients for: the first argument of every `*client(`
    call, a literal or a loop variable over a tuple of literals; and the `service` of every
    cloud backend class (`backends.cloud.make_clients(cls.service, ...)` builds its client)."""
    available = set(botocore.session.get_session().get_available_services())
    found: set[str] = set()
    for path in _code_files():
        tree = ast.parse(path.read_text(), str(path))
        loops: dict[str, set[str]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) \
                    and isinstance(node.iter, ast.Tuple):
                loops.setdefault(node.target.id, set()).update(
                    e.value for e in node.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
        for node in ast.walk(tree):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and node.target.id == "service" and isinstance(node.value, ast.Constant):
                assert node.value.value in available, f"{path}: no AWS service {node.value.value!r}"
                found.add(node.value.value)
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if not name.endswith("client"):
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and first.value in available:
                found.add(first.value)
            elif isinstance(first, ast.Name):
                found.update(v for v in loops.get(first.id, ()) if v in available)
    return found


# Method calls that share a name with an AWS operation but call no AWS API.
NOT_AWS = {
    ("entrypoints/trainer/vit.py", "create_model"): "timm.create_model",
    ("*", "search"): "re.search / re.Pattern.search (SageMaker's Search only in AWS_SEARCH)",
    ("entrypoints/launcher/mlflow_run.py", "create_experiment"): "MlflowClient.create_experiment (MLflow's REST API)",
}


# Where `search` is SageMaker's Search, not a regular expression's.
AWS_SEARCH = {"orchestrator/backends/sagemaker/backend.py"}


# A method named after operations of two services, called on one of them: (file, method) -> the
# service whose operation of that name the file does NOT call.
OTHER_SERVICE = {
    ("orchestrator/backends/batch/backend.py", "list_jobs"): "sagemaker",  # Batch's ListJobs on the batch client
    ("orchestrator/backends/batch/scheduled.py", "list_jobs"): "sagemaker",  # a running run's jobs, on the batch client
}


def calls_in_code(services: set[str]) -> dict[tuple[str, str], list[str]]:
    """(service, operation) -> where the code calls it: every method call (or get_paginator
    argument) named after an operation of those services, but those in NOT_AWS."""
    session = botocore.session.get_session()
    by_method: dict[str, set[tuple[str, str]]] = {}
    for service in services:
        for operation in session.get_service_model(service).operation_names:
            by_method.setdefault(xform_name(operation), set()).add((service, operation))
    found: dict[tuple[str, str], list[str]] = {}
    for path in _code_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            method = node.func.attr
            if method == "get_paginator" and node.args and isinstance(node.args[0], ast.Constant):
                method = node.args[0].value
            if (str(path.relative_to(ROOT)), method) in NOT_AWS or ("*", method) in NOT_AWS and not (
                    method == "search" and str(path.relative_to(ROOT)) in AWS_SEARCH):
                continue
            for key in by_method.get(method, ()):
                if OTHER_SERVICE.get((str(path.relative_to(ROOT)), method)) == key[0]:
                    continue
                found.setdefault(key, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_the_code_builds_clients_only_for_services_the_map_covers():
    assert client_services() == {"s3", "sagemaker", "logs", "cloudformation", "pricing", "batch", "stepfunctions",
                                "service-quotas", "sts"}


def test_every_aws_call_in_the_code_is_granted_to_whoever_makes_it(tmp_path):
    at = layout(tmp_path)
    docs = {"operator": document_of("operator"), "role": document_of("role")}
    mapped = operator_calls(at)
    s3_by_principal = {"operator": operator_s3(at), "role": role_s3(at)}
    found = calls_in_code(client_services())
    assert ("sagemaker", "CreateTrainingJob") in found and ("s3", "PutObject") in found  # the scan sees calls
    unmapped, refused = [], []
    for (service, operation), where in sorted(found.items()):
        if (service, operation) in ADMIN_ONLY or (service, operation) in NO_GRANT:
            continue
        if service == "s3":
            if operation not in S3_OPERATIONS:
                unmapped.append(f"s3 {operation} at {', '.join(where)}")
                continue
            needs = [n for uses in s3_by_principal.values() for n in uses[operation]]
        elif (service, operation) in mapped:
            needs = mapped[(service, operation)]
        else:
            unmapped.append(f"{service} {operation} at {', '.join(where)}")
            continue
        assert needs or service == "s3", (service, operation)
        refused += [f"{service} {operation} ({n.why}) needs {n.action} on {n.resource} {dict(n.context)} "
                    f"from the {n.principal} policy" for n in needs if not n.allowed_by(docs[n.principal])]
    assert unmapped == [], "AWS calls with no grant mapped in this test (add the IAM action and the statement)"
    assert refused == []


def test_every_call_sagemaker_makes_as_the_execution_role_is_granted(tmp_path):
    at = layout(tmp_path)
    role = document_of("role")
    refused = [f"{n.action} on {n.resource} ({n.why})" for n in sagemaker_as_role(at) if not n.allowed_by(role)]
    assert refused == []
    # Training data is read-only for jobs, and the operator cannot stop jobs through the role.
    assert not allows(role, "s3:PutObject", object_arn(at.data_object))
    assert not allows(role, "sagemaker:CreateTrainingJob", job_arn(at.job))


def test_the_batch_job_role_allows_what_the_container_does_and_nothing_of_the_operators(tmp_path):
    """A Batch job runs the same launch.py (cache pull and push, results.json) as the
    SageMaker role, and its bootstrap reads the source archive itself (no code channel)."""
    at = layout(tmp_path)
    job = document_of("batch-job")
    needs = [n for uses in role_s3(at).values() for n in uses]
    needs += s3_needs("batch-job", "read", at.source, "bootstrap: the source archive")
    refused = [f"{n.action} on {n.resource} ({n.why})" for n in needs if not allows(job, n.action, n.resource)]
    assert needs and refused == []
    # Nothing else: no deletes (checkpoints stay on the instance, N047), no data writes, no
    # image pull or logs (the ECS agent's, with the instance role), no job control.
    for action, resource in (("s3:DeleteObject", object_arn(at.checkpoint)), ("s3:DeleteObject", object_arn(at.cache_archive)),
                             ("s3:PutObject", object_arn(at.data_object)), ("ecr:BatchGetImage", at.repository_arn),
                             ("logs:PutLogEvents", stream_arn(at.job)), ("batch:SubmitJob", "*")):
        assert not allows(job, action, resource), action


def test_checkpoint_deletions_mirrored_by_sagemaker_are_granted(tmp_path):
    # SageMaker mirrors deletions in /opt/ml/checkpoints to S3 (model-checkpoints.html), with the role.
    at = layout(tmp_path)
    assert all(n.allowed_by(document_of("role")) for n in s3_needs("role", "delete", at.checkpoint, "sync"))


def test_the_evaluator_refuses_what_iam_would_refuse(tmp_path):
    """The grants as they were before this check existed fail it: a bare log group ARN, a
    ListBucket only under an s3:prefix condition, no pricing statement."""
    at = layout(tmp_path)
    group = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{LOG_GROUP}"
    old = {"Statement": [
        {"Effect": "Allow", "Action": ["logs:DescribeLogStreams", "logs:GetLogEvents"],
         "Resource": [group, f"{group}:log-stream:*"]},
        {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": BUCKET_ARN,
         "Condition": {"StringLike": {"s3:prefix": ["compile-cache/*", "jobs/*", "data/*"]}}},
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"{BUCKET_ARN}/jobs/*"},
    ]}
    assert not allows(old, "logs:DescribeLogStreams", group_arn())
    assert allows(old, "logs:GetLogEvents", stream_arn(at.job))
    head_of_missing = s3_needs("operator", "read", at.source, "submit")
    assert [n.allowed_by(old) for n in head_of_missing] == [True, False]  # GetObject yes; the 404's ListBucket no
    assert allows(old, "s3:ListBucket", BUCKET_ARN, {"s3:prefix": "jobs/results/"})
    assert not allows(old, "pricing:GetProducts", "*")
    assert not allows(document_of("operator"), "s3:DeleteObject", object_arn(at.results))


# --- 3. what the code really sends, recorded against moto ---------------------------------------


class Recorder:
    """The (operation, params) of every request sent through the clients it watches."""

    def __init__(self, *clients):
        self.sent: list[tuple[str, str, dict]] = []
        for client in clients:
            client.meta.events.register("before-parameter-build.*.*", self._record)

    def _record(self, params, model, **_):
        self.sent.append((model.service_model.service_name, model.name, dict(params)))


def needs_of_request(principal: str, service: str, operation: str, params: dict) -> list[Need]:
    """What IAM authorizes for one recorded request."""
    if service == "s3":
        key = params.get("Key")
        target = f"s3://{params['Bucket']}/" + (key if key is not None else params.get("Prefix", ""))
        kind = S3_OPERATIONS[operation][0]
        return s3_needs(principal, kind, target, f"recorded {operation}")
    if service == "sagemaker":
        name = params.get("TrainingJobName") or params.get("ResourceArn", "").rsplit("/", 1)[-1]
        if operation in ("ListTrainingJobs", "Search"):
            return [Need(principal, f"sagemaker:{operation}", "*")]
        needs = [Need(principal, f"sagemaker:{operation}", job_arn(name))]
        if operation == "CreateTrainingJob":
            needs.append(Need(principal, "iam:PassRole", params["RoleArn"],
                              (("iam:PassedToService", "sagemaker.amazonaws.com"),)))
            if params.get("Tags"):
                needs.append(Need(principal, "sagemaker:AddTags", job_arn(name)))
        return needs
    if service == "logs":
        if operation == "GetLogEvents":
            stream = params["logStreamName"]
            return [Need(principal, "logs:GetLogEvents",
                         f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{params['logGroupName']}:log-stream:{stream}")]
        return [Need(principal, f"logs:{operation}",
                     f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{params['logGroupName']}:*")]
    raise AssertionError(f"no mapping for recorded {service} {operation}")


def test_requests_the_laptop_and_the_job_really_send_are_granted(moto_server, orch_home, tmp_path):
    from entrypoints.shared import compile_cache as cc
    from entrypoints.shared import storage
    from orchestrator import cache, results
    from orchestrator.backends.sagemaker import SageMakerBackend

    docs = {"operator": document_of("operator"), "role": document_of("role")}
    layout(tmp_path)  # writes tmp_path/job.yaml
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    sm, logs = boto3.client("sagemaker", region_name=REGION), boto3.client("logs", region_name=REGION)

    # The laptop: submit (source upload + create), status, logs, results, cache commands.
    laptop = Recorder(s3, sm, logs)
    prepared = request.prepare(spec.load(tmp_path / "job.yaml"))
    backend = SageMakerBackend(sm, s3, logs)
    backend.submit(prepared)
    backend.status(prepared.job_name)
    list(backend.logs(prepared.job_name))
    # The job: compile cache pull (cold: the manifest is missing) and push, then results.json.
    job = Recorder(s3)
    key = cc.CacheKey("neuronx-cc", "2.25.3371.0", "xla", "", "trn1", 2)
    module = tmp_path / "neuron" / "neuronxcc-2.25.3371.0" / "MODULE_a+00"
    module.mkdir(parents=True)
    (module / "model.neff").write_bytes(b"n" * 64)
    (module / "model.done").write_text("")
    cc.pull(f"s3://{BUCKET}/compile-cache", key, tmp_path / "cold", s3_client=s3)
    cc.push(f"s3://{BUCKET}/compile-cache", key, tmp_path / "neuron", s3_client=s3)
    storage.S3Store(BUCKET, "jobs/results", s3).put_bytes(f"{prepared.job_name}/results.json", b"{}")
    recorded_job = list(job.sent)
    laptop.sent[:] = [r for r in laptop.sent if r not in recorded_job]
    results.collect(f"s3://{BUCKET}/jobs", s3=s3, backend_for=lambda name, region: backend, workers=1)
    cache.list_keys(f"s3://{BUCKET}/compile-cache", s3_client=s3)
    cache.show(f"s3://{BUCKET}/compile-cache", key.digest(), s3_client=s3)
    cache.prune(f"s3://{BUCKET}/compile-cache", key=key.digest(), grace_s=0, s3_client=s3)

    refused = []
    for principal, sent in (("operator", laptop.sent), ("role", recorded_job)):
        operations = {(service, op) for service, op, _ in sent}
        assert operations, principal
        for service, operation, params in sent:
            refused += [f"{principal}: {service} {operation} {params.get('Key') or params.get('Prefix') or ''} needs "
                        f"{n.action} on {n.resource} {dict(n.context)}"
                        for n in needs_of_request(principal, service, operation, params)
                        if not n.allowed_by(docs[principal])]
    assert {("s3", "HeadObject"), ("sagemaker", "CreateTrainingJob"), ("s3", "DeleteObject")} <= {
        (s, o) for s, o, _ in laptop.sent}
    assert {("s3", "GetObject"), ("s3", "PutObject")} <= {(s, o) for s, o, _ in recorded_job}
    assert refused == []
