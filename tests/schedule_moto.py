"""moto's Step Functions interpreter made to behave, where the schedule's tests rely on it, as
the AWS documentation says Step Functions and CloudFormation do (the patches are in moto_shim).

- `interpreter_on(url, monkeypatch)`: the interpreter executes state machines (the moto
  server's `execute_state_machine` configuration). Its AWS SDK clients are pointed at the
  server's own address (`url`, on 127.0.0.1), not the host name moto gives them.
- Its AWS SDK integration passes a task's Parameters to boto3 as written and returns boto3's
  answer as it is. Step Functions takes and returns PascalCase member names even for a
  camelCase API such as AWS Batch's (developer guide, "AWS SDK service integrations": API
  naming conventions): the integration is given moto's own shape-driven renaming (the one its
  optimised integrations use) in both directions. Without it a PascalCase SubmitJob fails
  boto3's validation, which real Step Functions would send.
- Its CloudFormation model of AWS::StepFunctions::StateMachine reads DefinitionString only;
  CloudFormation reads DefinitionS3Location's object at create and update (CloudFormation
  template reference, AWS::StepFunctions::StateMachine): the model is given that.
"""

from __future__ import annotations

import json
import urllib.request

import moto_shim
from job_waits import patience


def _moto_config(url: str, execute: bool) -> None:
    body = json.dumps({"stepfunctions": {"execute_state_machine": execute}}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/config", data=body, method="POST"),
                           timeout=patience(10)).read()


def interpreter_on(url: str, monkeypatch):
    """Turn the interpreter on (and these fixes in); returns the function that turns it off."""
    monkeypatch.setenv("MOTO_PORT", url.rsplit(":", 1)[1])
    moto_shim.stepfunctions_loopback_clients(url, monkeypatch)
    moto_shim.stepfunctions_sdk_pascal_case(monkeypatch)
    moto_shim.stepfunctions_definition_from_s3(monkeypatch)
    _moto_config(url, True)
    return lambda: _moto_config(url, False)


def batch_use_no_docker(url: str) -> None:
    """moto's Batch runs jobs without docker: each SUCCEEDED at once (FACTS: moto 5.2)."""
    body = json.dumps({"batch": {"use_docker": False}}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/config", data=body, method="POST"),
                           timeout=patience(10)).read()


def run_once(plan, region: str, fired: str = "2026-12-05T03:00:00Z") -> dict:
    """Create the state machine of `plan` in moto and run one execution of it as the scheduler
    would start it at `fired`, to its end: DescribeExecution's answer."""
    import time

    import boto3

    from orchestrator.schedule import statemachine as sm

    sfn = boto3.client("stepfunctions", region_name=region)
    arn = sfn.create_state_machine(name=f"m{time.monotonic_ns()}", definition=sm.definition_json(sm.compile_plan(plan)),
                                   roleArn="arn:aws:iam::123456789012:role/orchestrator-schedule")["stateMachineArn"]
    execution = sfn.start_execution(stateMachineArn=arn, input=json.dumps(
        sm.execution_input(fired)))["executionArn"]
    for _ in range(600):  # moto runs it on a thread of the server; no timing is asserted
        described = sfn.describe_execution(executionArn=execution)
        if described["status"] != "RUNNING":
            break
        time.sleep(0.1)
    return described
