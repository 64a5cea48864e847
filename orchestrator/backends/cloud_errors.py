"""The cloud backends' errors in our words: every botocore error the SageMaker and AWS Batch
backends meet is worded here, once, as our error with a hint (`translate`); what kind of error
it is, `aws_errors` decides.

A service's raw text in them (an HTML error page from a proxy or a fake) is cut down to one
line of at most `errors.MAX_SERVICE_MESSAGE` characters (`errors.service_message`).
"""

from __future__ import annotations

from orchestrator import aws, aws_errors
from orchestrator.backends.job import UnknownJob
from orchestrator.errors import BackendError, OrchestratorError, service_message

# The IAM action behind each API call we make, for AccessDenied hints.
_IAM_ACTION = {
    "CreateTrainingJob": "sagemaker:CreateTrainingJob (and iam:PassRole on the execution role)",
    "DescribeTrainingJob": "sagemaker:DescribeTrainingJob",
    "StopTrainingJob": "sagemaker:StopTrainingJob",
    "ListTags": "sagemaker:ListTags",
    "ListTrainingJobs": "sagemaker:ListTrainingJobs",
    "Search": "sagemaker:Search",
    "HeadObject": "s3:GetObject (and s3:ListBucket, without which a missing key reads as 403)",
    "PutObject": "s3:PutObject",
    "DescribeLogStreams": "logs:DescribeLogStreams",
    "GetLogEvents": "logs:GetLogEvents",
}
_JOB_OPERATIONS = frozenset({"DescribeTrainingJob", "StopTrainingJob", "ListTags"})



def translate(exc: Exception, *, operation: str, job_name: str | None = None, region: str | None = None,
              instance_type: str | None = None) -> OrchestratorError:
    """Our error for a botocore error raised by `operation`: what failed, and how to fix it.
    What kind of error it is, is `aws_errors.classify`'s; this function only words it."""
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    where = f" in {region}" if region else ""
    failure = aws_errors.classify(exc)
    kind = failure.kind if failure is not None else None
    if kind == "no-answer":
        return BackendError(f"{operation}: {aws.describe(exc)}; {aws.tries_said(exc)}", hint=aws.NO_ANSWER_HINT)
    if kind == "credentials" and isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return BackendError(f"{operation}: no usable AWS credentials ({service_message(exc)})",
                            hint="configure credentials (aws configure, AWS_PROFILE, or AWS_ACCESS_KEY_ID/"
                            "AWS_SECRET_ACCESS_KEY) for the account that holds the stack")
    if kind == "unreachable":
        return BackendError(f"{operation}: cannot reach the AWS endpoint ({service_message(exc)})",
                            hint="check the network, the region, and AWS_ENDPOINT_URL if it is set")
    if not isinstance(exc, ClientError):
        return BackendError(f"{operation} failed: {service_message(exc)}",
                            hint="a network or SDK error; rerunning is safe (a submit is reconciled through the ledger)")

    error = exc.response.get("Error", {})
    code = str(error.get("Code", "Unknown"))
    message = service_message(error.get("Message") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    job = f" {job_name}" if job_name else ""
    if kind == "credentials":
        return BackendError(f"{operation}{job}: AWS rejected the credentials{where}: {code}: {message}",
                            hint="renew or fix the credentials (aws sso login, aws configure, AWS_PROFILE, or "
                                 "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN)")
    if kind == "denied":
        action = _IAM_ACTION.get(operation, operation)
        return BackendError(f"{operation}{job}: access denied{where}: {message}",
                            hint=f"the caller needs {action}; `python -m orchestrator infra policy` prints the IAM "
                            "policy the orchestrator needs")
    if kind == "quota":
        what = f"{instance_type} for training job usage" if instance_type else "the instance type's training quota"
        return BackendError(f"{operation}{job}: service quota reached{where}: {message}",
                            hint=f"raise the SageMaker quota '{what}' (or '... for spot training job usage' "
                            f"with spot){where}: Service Quotas console > Amazon SageMaker > request increase, "
                            "or `aws service-quotas request-service-quota-increase --service-code sagemaker`")
    if kind == "conflict":
        return BackendError(f"{operation}{job}: a training job with this name already exists{where}: {message}",
                            hint="job names are unique per account and region; change the spec's name")
    if kind == "throttled":
        attempts = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)
        return BackendError(f"{operation}{job}: still throttled after {attempts + 1} attempts{where}: {message}",
                            hint="lower the sweep's concurrency, or raise AWS_MAX_ATTEMPTS; rerunning is safe")
    if operation in _JOB_OPERATIONS and aws_errors.is_not_found(exc):
        return UnknownJob(f"no SageMaker training job named{job}{where}",
                          hint="check the job name (as printed by submit) and the region (--region)")
    if code == "NoSuchBucket":  # a not-found worded for the bucket
        return BackendError(f"{operation}: the bucket does not exist{where}: {message}",
                            hint="deploy the stack (see infra/README.md) or fix the spec's s3:// URIs")
    if kind == "invalid":
        hint = ("run `python -m orchestrator plan SPEC` to see the exact request; fix the spec field behind it"
                if operation == "CreateTrainingJob" else None)
        return BackendError(f"{operation}{job}: SageMaker refused the request: {message}", hint=hint)
    hint = ("a passing error on AWS's side: rerunning is safe (a submit is reconciled through the ledger)"
            if failure is not None and not failure.permanent else None)
    return BackendError(f"{operation}{job} failed{where}: {code}: {message}", hint=hint)
