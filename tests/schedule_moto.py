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
    moto_shim.stepfunctions_item_reader_loopback(url, monkeypatch)
    moto_shim.stepfunctions_sdk_error_names(monkeypatch)
    moto_shim.stepfunctions_sdk_pascal_case(monkeypatch)
    moto_shim.stepfunctions_definition_from_s3(monkeypatch)
    _moto_config(url, True)
    return lambda: _moto_config(url, False)


def batch_use_no_docker(url: str) -> None:
    """moto's Batch runs jobs without docker: each SUCCEEDED at once (FACTS: moto 5.2)."""
    body = json.dumps({"batch": {"use_docker": False}}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/config", data=body, method="POST"),
                           timeout=patience(10)).read()


def run_once(plan_or_compiled, region: str, fired: str = "2026-12-05T03:00:00Z", polls: int | None = 600) -> dict:
    """Put the items of a compiled schedule (or of `plan`, compiled here) where its ItemReader
    reads them, create its state machine in moto and run one execution of it as the scheduler
    would start it at `fired`, to its end (at most `polls` DescribeExecution calls 0.1 s
    apart; None: until it ends): DescribeExecution's answer."""
    import itertools
    import time

    import boto3

    from orchestrator.schedule import statemachine as sm
    from orchestrator.schedule.compiled import Compiled, compile_schedule

    compiled = plan_or_compiled if isinstance(plan_or_compiled, Compiled) else compile_schedule(plan_or_compiled)
    s3 = boto3.client("s3", region_name=region)
    bucket, key = compiled.items_at
    try:
        s3.create_bucket(Bucket=bucket, **({} if region == "us-east-1" else {
            "CreateBucketConfiguration": {"LocationConstraint": region}}))
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    s3.put_object(Bucket=bucket, Key=key, Body=compiled.items_text.encode())
    sfn = boto3.client("stepfunctions", region_name=region)
    arn = sfn.create_state_machine(name=f"m{time.monotonic_ns()}", definition=sm.substituted(compiled.definition_text),
                                   roleArn="arn:aws:iam::123456789012:role/orchestrator-schedule")["stateMachineArn"]
    execution = sfn.start_execution(stateMachineArn=arn, input=json.dumps(
        sm.execution_input(fired)))["executionArn"]
    for _ in range(polls) if polls is not None else itertools.count():  # moto runs it on a server thread
        described = sfn.describe_execution(executionArn=execution)
        if described["status"] != "RUNNING":
            break
        time.sleep(0.1)
    return described
