"""The AWS edge of `infra`: the CloudFormation client, reading a stack, and CloudFormation's
errors worded as ours (an invalid request -> InputError, the rest -> BackendError; the kind of
error is `aws_errors.classify`'s)."""

from __future__ import annotations

from orchestrator.errors import BackendError, InputError
from orchestrator.infra.template import DEFAULT_STACK

# CloudFormation's words for "this change set changes nothing".
NO_CHANGES = ("didn't contain changes", "No updates are to be performed")


def make_client(service: str, region: str | None):
    """A boto3 client for `region`, default as every command that calls AWS takes it
    (`region.default_region`: AWS_REGION, AWS_DEFAULT_REGION, the AWS config
    profile's region, us-east-1), built by `aws.client` (timeouts, retries, a checked
    endpoint). InputError for an unreadable AWS configuration or a malformed endpoint."""
    from orchestrator import aws
    from orchestrator.region import default_region

    return aws.client(service, default_region(region))


def describe_stack(cfn, stack_name: str) -> dict | None:
    try:
        stacks = cfn.describe_stacks(StackName=stack_name).get("Stacks", [])
    except Exception as exc:  # noqa: BLE001
        if is_missing_stack(exc):
            return None
        raise translate(exc, f"reading stack {stack_name}", cfn, stack_name) from None
    return stacks[0] if stacks else None


def is_missing_stack(exc: BaseException) -> bool:
    """Whether CloudFormation answered that the stack does not exist (`aws_errors.is_not_found`)."""
    from orchestrator import aws_errors

    return aws_errors.is_not_found(exc)


def is_no_changes(exc: BaseException) -> bool:
    """Whether CloudFormation refused a change set because it changes nothing: an answer, not
    an error (its validation error worded with one of NO_CHANGES)."""
    from orchestrator import aws_errors

    return aws_errors.kind_of(exc) == "invalid" and any(words in aws_errors.message_of(exc) for words in NO_CHANGES)


def translate(exc: BaseException, doing: str, cfn, stack_name: str | None = None,
              execution: bool = False) -> Exception:
    """ClientError / BotoCoreError -> our error, worded for CloudFormation (what kind of error it
    is, is `aws_errors.classify`'s); anything else is a bug and is re-raised."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from orchestrator import aws, aws_errors

    failure = aws_errors.classify(exc) if isinstance(exc, (ClientError, BotoCoreError)) else None
    kind = failure.kind if failure is not None else None
    if isinstance(exc, ClientError):
        name, message = aws_errors.code_of(exc), aws_errors.message_of(exc)
        if kind == "invalid" and not execution:
            return InputError(f"{doing}: CloudFormation refused the template or parameters: {message}",
                              hint="fix infra/stack.yaml or the --param values; cfn-lint infra/stack.yaml checks the "
                                   "template")
        if kind == "denied" or name == "InsufficientCapabilitiesException":
            return BackendError(f"{doing}: {name}: {message}",
                                hint="deploying creates IAM roles, a bucket and (with --kms) a KMS key: run it with "
                                     "administrator credentials; the operator policy is for running jobs")
        return BackendError(f"{doing}: {name}: {message}",
                            hint=f"check the stack with aws cloudformation describe-stack-events --stack-name "
                                 f"{stack_name or DEFAULT_STACK}{region_flag(cfn)}")
    if kind == "credentials" and isinstance(exc, NoCredentialsError):
        return BackendError(f"{doing}: no AWS credentials found",
                            hint="configure credentials (aws configure, AWS_PROFILE or environment variables)")
    silent = aws.describe(exc)
    if silent is not None:
        return BackendError(f"{doing}: {silent}; {aws.tries_said(exc)}", hint=aws.NO_ANSWER_HINT)
    if isinstance(exc, BotoCoreError):
        return BackendError(f"{doing}: {exc}")
    raise exc


def region_of(cfn) -> str | None:
    meta = getattr(cfn, "meta", None)
    return getattr(meta, "region_name", None)


def region_flag(cfn) -> str:
    region = region_of(cfn)
    return f" --region {region}" if region else ""
