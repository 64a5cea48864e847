"""SageMaker's errors in our words: every botocore error the SageMaker backend meets is
translated here, once, into our error with a hint (`translate`).

A service's raw text in them (an HTML error page from a proxy or a fake) is cut down to one
line of at most `errors.MAX_SERVICE_MESSAGE` characters (`errors.service_message`).
"""

from __future__ import annotations

from orchestrator import aws
from orchestrator.backends import UnknownJob
from orchestrator.errors import BackendError, OrchestratorError, service_message

# The IAM action behind each API call we make, for AccessDenied hints.
_IAM_ACTION = {
    "CreateTrainingJob": "sagemaker:CreateTrainingJob (and iam:PassRole on the execution role)",
    "DescribeTrainingJob": "sagemaker:DescribeTrainingJob",
    "StopTrainingJob": "sagemaker:StopTrainingJob",
    "ListTags": "sagemaker:ListTags",
    "ListTrainingJobs": "sagemaker:ListTrainingJobs",
    "HeadObject": "s3:GetObject (and s3:ListBucket, without which a missing key reads as 403)",
    "PutObject": "s3:PutObject",
    "DescribeLogStreams": "logs:DescribeLogStreams",
    "GetLogEvents": "logs:GetLogEvents",
}
# HeadObject answers a denied read with a bare 403 (no body, so no code but the status).
_ACCESS_DENIED = aws.ACCESS_DENIED_CODES | {"403"}
_NOT_FOUND = frozenset({"ResourceNotFound", "ResourceNotFoundException", "NoSuchKey", "NotFound", "404"})
# What a HEAD answers for a key the caller may not see, or that is missing without s3:ListBucket.
FORBIDDEN = frozenset({"403", "Forbidden", "AccessDenied"})
_JOB_OPERATIONS = frozenset({"DescribeTrainingJob", "StopTrainingJob", "ListTags"})



def translate(exc: Exception, *, operation: str, job_name: str | None = None, region: str | None = None,
              instance_type: str | None = None) -> OrchestratorError:
    """Our error for a botocore error raised by `operation`: what failed, and how to fix it."""
    from botocore.exceptions import (
        ClientError,
        ConnectTimeoutError,
        NoCredentialsError,
        PartialCredentialsError,
        ReadTimeoutError,
    )
    from botocore.exceptions import ConnectionError as AWSConnectionError

    where = f" in {region}" if region else ""
    silent = aws.describe(exc) if isinstance(exc, (ReadTimeoutError, ConnectTimeoutError)) else None
    if silent is not None:
        return BackendError(f"{operation}: {silent}; {aws.tries_said(exc)}", hint=aws.NO_ANSWER_HINT)
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return BackendError(f"{operation}: no usable AWS credentials ({service_message(exc)})",
                            hint="configure credentials (aws configure, AWS_PROFILE, or AWS_ACCESS_KEY_ID/"
                            "AWS_SECRET_ACCESS_KEY) for the account that holds the stack")
    if isinstance(exc, AWSConnectionError):
        return BackendError(f"{operation}: cannot reach the AWS endpoint ({service_message(exc)})",
                            hint="check the network, the region, and AWS_ENDPOINT_URL if it is set")
    if not isinstance(exc, ClientError):
        return BackendError(f"{operation} failed: {service_message(exc)}",
                            hint="a network or SDK error; rerunning is safe (a submit is reconciled through the ledger)")

    error = exc.response.get("Error", {})
    code = str(error.get("Code", "Unknown"))
    message = service_message(error.get("Message") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    job = f" {job_name}" if job_name else ""
    if code in aws.BAD_CREDENTIAL_CODES:
        return BackendError(f"{operation}{job}: AWS rejected the credentials{where}: {code}: {message}",
                            hint="renew or fix the credentials (aws sso login, aws configure, AWS_PROFILE, or "
                                 "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN)")
    if code in _ACCESS_DENIED:
        action = _IAM_ACTION.get(operation, operation)
        return BackendError(f"{operation}{job}: access denied{where}: {message}",
                            hint=f"the caller needs {action}; `python -m orchestrator infra policy` prints the IAM "
                            "policy the orchestrator needs")
    if code == "ResourceLimitExceeded":
        what = f"{instance_type} for training job usage" if instance_type else "the instance type's training quota"
        return BackendError(f"{operation}{job}: service quota reached{where}: {message}",
                            hint=f"raise the SageMaker quota '{what}' (or '... for spot training job usage' "
                            f"with spot){where}: Service Quotas console > Amazon SageMaker > request increase, "
                            "or `aws service-quotas request-service-quota-increase --service-code sagemaker`")
    if code == "ResourceInUse":
        return BackendError(f"{operation}{job}: a training job with this name already exists{where}: {message}",
                            hint="job names are unique per account and region; change the spec's name")
    if code in aws.THROTTLE_CODES:
        attempts = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)
        return BackendError(f"{operation}{job}: still throttled after {attempts + 1} attempts{where}: {message}",
                            hint="lower the sweep's concurrency, or raise AWS_MAX_ATTEMPTS; rerunning is safe")
    if operation in _JOB_OPERATIONS and is_not_found(exc):
        return UnknownJob(f"no SageMaker training job named{job}{where}",
                          hint="check the job name (as printed by submit) and the region (--region)")
    if code == "NoSuchBucket":
        return BackendError(f"{operation}: the bucket does not exist{where}: {message}",
                            hint="deploy the stack (see infra/README.md) or fix the spec's s3:// URIs")
    if code in ("ValidationException", "ValidationError"):
        hint = ("run `python -m orchestrator plan SPEC` to see the exact request; fix the spec field behind it"
                if operation == "CreateTrainingJob" else None)
        return BackendError(f"{operation}{job}: SageMaker refused the request: {message}", hint=hint)
    failure = aws.classify(exc)
    hint = ("a passing error on AWS's side: rerunning is safe (a submit is reconciled through the ledger)"
            if failure is not None and not failure.permanent else None)
    return BackendError(f"{operation}{job} failed{where}: {code}: {message}", hint=hint)


def is_not_found(exc: Exception) -> bool:
    """Whether a ClientError says the named resource does not exist. SageMaker answers a
    describe of an unknown job with ValidationException "Requested resource not found"."""
    error = getattr(exc, "response", {}).get("Error", {})
    code = str(error.get("Code", ""))
    text = str(error.get("Message", "")).lower()
    if code in _NOT_FOUND:
        return True
    return code in ("ValidationException", "ValidationError") and ("not found" in text or "could not find" in text)


def is_definite_refusal(exc: Exception) -> bool:
    """True when AWS answered and refused (a 4xx): the job was certainly not created. False for
    5xx answers and transport errors, after which the job may exist."""
    status = getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
    return isinstance(status, int) and 400 <= status < 500




def code_of(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
