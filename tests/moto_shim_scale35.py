"""Patches of moto's private names for the cloud schedule's Distributed Map tests (moto 5.2.6),
kept here until one shared shim module of the tests takes them.

- `item_reader_loopback`: the Distributed Map's ItemReader (s3:getObject) builds its S3 client
  as the AWS SDK integration does, for moto's host name: pointed at the server's own address
  (127.0.0.1), as `schedule_moto._loopback_clients` does for the SDK integration.
- `sdk_error_names`: moto names an AWS SDK integration's errors after the lower-case service
  name ("sagemaker.ThrottlingException"); Step Functions writes both names in Pascal case
  ("SageMaker.ThrottlingException", developer guide, "Learning to use AWS service SDK
  integrations in Step Functions"). moto's table of service names is given SageMaker and Batch.
- `retries_without_waiting`: a Retrier's interval is slept in real time by moto's interpreter;
  the tests count the retries, not the seconds, so the wait is recorded and skipped.
- `describe_failing`: the interpreter's DescribeTrainingJob of chosen jobs is answered an error,
  once or always.
"""

from __future__ import annotations


def item_reader_loopback(url: str, monkeypatch) -> None:
    import boto3
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.eval import resource_eval_s3

    made = resource_eval_s3.boto_client_for

    def client_for(region, service, state_credentials=None):
        client = made(region=region, service=service, state_credentials=state_credentials)
        return boto3.client(service, region_name=region, endpoint_url=url, aws_access_key_id="ak",
                            aws_secret_access_key="sk", config=client.meta.config)

    monkeypatch.setattr(resource_eval_s3, "boto_client_for", client_for)


def sdk_error_names(monkeypatch) -> None:
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_aws_sdk,
    )

    names = {**state_task_service_aws_sdk._SERVICE_ERROR_NAMES, "sagemaker": "SageMaker", "batch": "Batch"}
    monkeypatch.setattr(state_task_service_aws_sdk, "_SERVICE_ERROR_NAMES", names)


def retries_without_waiting(monkeypatch) -> list[float]:
    """Skip the Retriers' sleeps; returns the intervals asked for, in order."""
    import types

    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    asked: list[float] = []
    monkeypatch.setattr(retrier_decl, "time", types.SimpleNamespace(sleep=asked.append))
    return asked


def describe_failing(monkeypatch, fail: dict[str, tuple[int | None, str]]) -> dict[str, int]:
    """The interpreter's DescribeTrainingJob of a job whose name contains a key of `fail` is
    answered that key's error code, `count` times (None: always), as botocore raises a service's
    error (a ClientError with its request id); returns how often each was answered so. Call
    after `schedule_moto.interpreter_on` (it wraps the clients that makes)."""
    from botocore.exceptions import ClientError
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_aws_sdk,
    )

    answered = {key: 0 for key in fail}
    made = state_task_service_aws_sdk.boto_client_for

    def refuse(params, **kwargs):
        name = params.get("TrainingJobName", "")
        for key, (count, code) in fail.items():
            if key in name and (count is None or answered[key] < count):
                answered[key] += 1
                raise ClientError({"Error": {"Code": code, "Message": f"{code} (a test's fault)"},
                                   "ResponseMetadata": {"RequestId": f"test-{answered[key]}", "HTTPStatusCode": 400}},
                                  "DescribeTrainingJob")

    def client_for(region, service, state_credentials=None):
        client = made(region, service, state_credentials)
        if service == "sagemaker":
            client.meta.events.register("before-parameter-build.sagemaker.DescribeTrainingJob", refuse)
        return client

    monkeypatch.setattr(state_task_service_aws_sdk, "boto_client_for", client_for)
    return answered
