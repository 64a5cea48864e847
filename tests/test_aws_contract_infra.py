"""`infra deploy` against the contract: the TemplateBody it sends fits CloudFormation's limit
with room to grow, a body past it stops before any AWS call, and the template's Rules use only
what CloudFormation evaluates there."""

from __future__ import annotations

import json

import pytest
from botocore.stub import Stubber

from orchestrator import aws_contract, infra
from orchestrator.errors import InputError

# CloudFormation evaluates in a rule's RuleCondition and Assert only Ref and these (Template
# reference, "Rules syntax": rule-specific intrinsic functions).
# https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/rules-section-structure.html
RULE_FUNCTIONS = {"Ref", "Fn::And", "Fn::Contains", "Fn::EachMemberEquals", "Fn::EachMemberIn", "Fn::Equals",
                  "Fn::Not", "Fn::Or", "Fn::RefAll", "Fn::ValueOf", "Fn::ValueOfAll"}


def test_the_body_sent_fits_the_limit_with_room_to_grow():
    template = infra.load_template()
    body = infra.template_body(template)
    maximum = aws_contract.limit("cloudformation-template-body")["max_bytes"]
    # The YAML with its comments is over the limit; the body sent is the same template.
    assert json.loads(body) == template
    assert len(body.encode()) <= 0.8 * maximum, len(body.encode())


def test_a_body_past_the_limit_stops_before_any_aws_call(tmp_path):
    text = infra.TEMPLATE.read_text() + "Metadata:\n  Padding: '" + "x" * 52_000 + "'\n"
    big = tmp_path / "stack.yaml"
    big.write_text(text)
    cfn = infra.make_client("cloudformation", "us-east-1")
    with Stubber(cfn), pytest.raises(InputError) as info:  # no response queued: any call would fail the stub
        infra.plan_change_set(cfn, "orchestrator", {}, template_path=big, sleep=lambda s: None)
    message = info.value.message
    assert "TemplateBody" in message and "at most 51200" in message and "API_CreateChangeSet.html" in message


def test_rules_use_only_rule_functions():
    rules = infra.load_template()["Rules"]
    used = set()

    def walk(node):
        if isinstance(node, dict):
            used.update(key for key in node if key == "Ref" or key.startswith("Fn::"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for rule in rules.values():
        walk(rule.get("RuleCondition"))
        for assertion in rule["Assertions"]:
            walk(assertion["Assert"])
    assert used and used <= RULE_FUNCTIONS, sorted(used - RULE_FUNCTIONS)


def test_deploy_against_moto_sends_the_compact_body(moto_server, moto_change_set_outputs, monkeypatch, capsys):
    from cli_harness import run_cli

    sent = []
    import botocore.client

    make_api_call = botocore.client.BaseClient._make_api_call

    def recording(self, operation, params):
        if operation == "CreateChangeSet":
            sent.append(params["TemplateBody"])
        return make_api_call(self, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recording)
    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--yes")
    assert code == 0, err
    assert len(sent) == 1 and len(sent[0].encode()) <= 51_200
    assert json.loads(sent[0]) == infra.load_template()
