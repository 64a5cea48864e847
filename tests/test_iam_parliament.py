"""Every IAM policy the product produces, linted by parliament against its bundled copy of
AWS's IAM database (offline): the stack's role policies and trust policies, the key policy,
the bucket policy and the operator policy.
Each finding is fixed or accepted below with its reason; an acceptance no longer needed fails
too, so the list stays true. The hand-kept tests/data/iam_resource_formats.json is checked
against the same database."""

from __future__ import annotations

import json
from pathlib import Path

import parliament
import pytest
from test_infra_policy import resolved_template

from orchestrator import infra

ROOT = Path(__file__).resolve().parents[1]
DOCUMENT_KEYS = ("PolicyDocument", "AssumeRolePolicyDocument", "KeyPolicy")

# (parliament issue, where) -> why it is accepted.
ACCEPTED = {
    ("MALFORMED", "ExecutionRole.AssumeRolePolicyDocument"):
        "a trust policy has no Resource (IAM User Guide, 'IAM JSON policy elements: Resource': role trust "
        "policies do not take one); parliament reads every document as an identity policy",
    ("MALFORMED", "BatchJobRole.AssumeRolePolicyDocument"): "a trust policy has no Resource (as above)",
    ("MALFORMED", "BatchInstanceRole.AssumeRolePolicyDocument"): "a trust policy has no Resource (as above)",
    ("RESOURCE_STAR", "EncryptionKey.KeyPolicy"):
        "in a key policy \"Resource\": \"*\" means this key and is the only form KMS takes (AWS KMS Developer "
        "Guide, 'Key policies': 'the resource is the KMS key')",
    ("RESOURCE_MISMATCH", "ExecutionRoleMlflowPolicy.PolicyDocument"):
        "parliament's IAM database knows one resource type for sagemaker-mlflow actions, "
        "mlflow-tracking-server; the grant names the stack's MlflowResourceArn, which may be an MLflow App "
        "(mlflow-app/..., botocore's MlflowConfig.MlflowResourceArn pattern): that IAM matches it is assumed "
        "(infra/stack.yaml says so)",
    ("MISMATCHED_TYPE", "EncryptionKey.KeyPolicy"):
        "ArnEquals on kms:EncryptionContext:aws:logs:arn is the form the CloudWatch Logs User Guide gives ('Encrypt "
        "log data in CloudWatch Logs using AWS KMS'); parliament's database types the encryption-context key as a "
        "String",
}


def _documents(template: dict) -> list[tuple[str, dict]]:
    found = []
    for name, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        found += [(f"{name}.{key}", props[key]) for key in DOCUMENT_KEYS if isinstance(props.get(key), dict)]
        found += [(f"{name}/{p['PolicyName']}", p["PolicyDocument"]) for p in props.get("Policies", [])]
    return found


def _findings() -> set[tuple[str, str, str]]:
    found = set()
    for use_kms in (True, False):
        template = resolved_template(use_kms)
        # The operator policy is the template's (`infra policy` prints it filled in with the
        # stack's values: tests/test_infra_policy.py holds them equal).
        for where, document in _documents(template):
            policy = parliament.analyze_policy_string(json.dumps(document))
            found |= {(finding.issue, where, json.dumps(finding.detail, default=str)[:300])
                      for finding in policy.findings}
    return found


def test_every_policy_passes_parliament_or_its_finding_is_accepted():
    found = _findings()
    unexplained = sorted(f for f in found if (f[0], f[1]) not in ACCEPTED)
    assert unexplained == [], "\n".join(map(str, unexplained))
    stale = sorted(set(ACCEPTED) - {(issue, where) for issue, where, _ in found})
    assert stale == [], f"accepted findings parliament no longer reports: {stale}"


def test_every_policy_is_linted():
    """The walk reaches each kind of document the product produces."""
    names = {where for where, _ in _documents(resolved_template(True))}
    assert {"ExecutionRole.AssumeRolePolicyDocument", "EncryptionKey.KeyPolicy",
            f"{infra.OPERATOR_POLICY_RESOURCE}.PolicyDocument"} <= names
    assert any(name.startswith("BucketPolicy") for name in names), sorted(names)
    assert any("/" in name for name in names)  # the roles' inline policies


# The hand-kept table names the resource types the tool's calls touch; parliament's database
# names every resource type of each action, required ones with "*".
FORMATS = json.loads((ROOT / "tests" / "data" / "iam_resource_formats.json").read_text())["actions"]
# Types the table lists that parliament 1.6.4's database does not, with why.
NOT_IN_PARLIAMENT = {
    ("batch:SubmitJob", "batch:job-definition-revision"):
        "SubmitJob with a pinned revision (job-definition/NAME:REV); the database lists the job-definition type only",
}


def _database(action: str) -> tuple[set[str], set[str]]:
    service, operation = action.split(":")
    # A prefix may have several entries in the database (CloudFormation has two).
    privilege = next(p for s in parliament.iam_definition if s["prefix"] == service
                     for p in s["privileges"] if p["privilege"] == operation)
    types = [r["resource_type"] for r in privilege["resource_types"] if r["resource_type"]]
    return ({f"{service}:{t.rstrip('*')}" for t in types}, {f"{service}:{t.rstrip('*')}" for t in types if t.endswith("*")})


@pytest.mark.parametrize("action", sorted(FORMATS))
def test_the_hand_kept_resource_types_agree_with_parliaments_database(action):
    every, required = _database(action)
    ours = set(FORMATS[action])
    assert {t for t in ours - every if (action, t) not in NOT_IN_PARLIAMENT} == set()
    # A type AWS requires for the action (batch:SubmitJob's job, for one) is in the table.
    assert required <= ours, sorted(required - ours)
