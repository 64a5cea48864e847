"""orchestrator.aws_errors: the one classifier of AWS errors, as a table (each error code or
botocore exception -> its kind), and the callers that decide by it (waits, sweeps, the CLI's
"could the backend be asked", the SageMaker/Batch and CloudFormation translators)."""

from __future__ import annotations

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    CredentialRetrievalError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ReadTimeoutError,
    SSOTokenLoadError,
)

from orchestrator import aws_errors
from orchestrator.aws_errors import Failure
from orchestrator.backends import UnknownJob
from orchestrator.backends.cloud_errors import translate
from orchestrator.errors import BackendError, InputError


def _client_error(code: str, status: int, message: str = "m", operation: str = "CreateTrainingJob") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       operation)


# (error code, HTTP status) -> kind. Codes as the services' API references spell them.
ANSWERS = [
    # credentials: the caller's credentials are refused, not the request
    ("UnrecognizedClientException", 400, "credentials"), ("InvalidClientTokenId", 403, "credentials"),
    ("ExpiredToken", 400, "credentials"), ("ExpiredTokenException", 400, "credentials"),
    ("InvalidSignatureException", 400, "credentials"), ("SignatureDoesNotMatch", 403, "credentials"),
    ("InvalidAccessKeyId", 403, "credentials"), ("AuthFailure", 401, "credentials"),
    ("RequestExpired", 400, "credentials"),
    # denied: no permission (a bare 403 is HeadObject's denied read)
    ("AccessDenied", 403, "denied"), ("AccessDeniedException", 400, "denied"),
    ("UnauthorizedOperation", 403, "denied"), ("403", 403, "denied"), ("SomethingForbidden", 403, "denied"),
    # throttled, whatever the status
    ("ThrottlingException", 400, "throttled"), ("Throttling", 400, "throttled"), ("SlowDown", 503, "throttled"),
    ("TooManyRequestsException", 429, "throttled"), ("RequestLimitExceeded", 503, "throttled"),
    ("Anything", 429, "throttled"),
    # quota, capacity: read before the status (EC2 answers capacity with a 5xx)
    ("ResourceLimitExceeded", 400, "quota"),
    ("InsufficientCapacityError", 400, "capacity"), ("InsufficientInstanceCapacity", 500, "capacity"),
    # server: 5xx, and the 4xx that say "try again"
    ("InternalServerError", 500, "server"), ("InternalFailure", 500, "server"),
    ("ServiceUnavailable", 503, "server"), ("RequestTimeout", 400, "server"), ("ValidationException", 500, "server"),
    # permanent answers about the request
    ("ResourceInUse", 400, "conflict"),
    ("ResourceNotFound", 400, "not-found"), ("ResourceNotFoundException", 400, "not-found"),
    ("NoSuchKey", 404, "not-found"), ("NoSuchBucket", 404, "not-found"), ("404", 404, "not-found"),
    ("ValidationException", 400, "invalid"), ("ValidationError", 400, "invalid"),
    ("ClientException", 400, "refused"), ("PreconditionFailed", 412, "refused"), ("Anything", 400, "refused"),
]
TRANSIENT = {"throttled", "server", "unreachable", "no-answer", "dropped"}


@pytest.mark.parametrize("code, status, kind", ANSWERS)
def test_an_answer_is_classified_by_its_code_then_its_status(code, status, kind):
    failure = aws_errors.classify(_client_error(code, status))
    assert failure == Failure(kind, kind not in TRANSIENT)
    # Our errors raised from a botocore error mean the same.
    try:
        raise BackendError("wrapped") from _client_error(code, status)
    except BackendError as ours:
        assert aws_errors.classify(ours) == failure
    # One of ours that carries the code and status itself (a sweep's halt) means the same too.
    assert aws_errors.classify(BackendError("x", code=code, http_status=status)) == failure


@pytest.mark.parametrize("error, kind", [
    (NoCredentialsError(), "credentials"),
    (PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"), "credentials"),
    (CredentialRetrievalError(provider="sso", error_msg="expired"), "credentials"),
    (SSOTokenLoadError(error_msg="no token"), "credentials"),
    (ParamValidationError(report="bad"), "client"),
    (EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), "unreachable"),
    (ConnectTimeoutError(endpoint_url="http://127.0.0.1:9"), "no-answer"),
    (ReadTimeoutError(endpoint_url="http://127.0.0.1:9"), "no-answer"),
    (ConnectionClosedError(endpoint_url="http://127.0.0.1:9"), "dropped"),
])
def test_an_sdk_error_is_classified_by_its_type(error, kind):
    assert aws_errors.classify(error) == Failure(kind, kind not in TRANSIENT)
    assert aws_errors.kind_of(error) == kind


def test_classify_is_none_for_errors_no_aws_call_raised():
    assert aws_errors.classify(BackendError("the local supervisor did not start")) is None
    assert aws_errors.classify(ValueError("x")) is None
    assert aws_errors.classify(None) is None and aws_errors.kind_of(ValueError("x")) is None


def test_only_credentials_and_denied_are_account_wide():
    wide = {kind for _, _, kind in ANSWERS if Failure(kind, True).account_wide}
    assert wide == {"credentials", "denied"}


@pytest.mark.parametrize("code, message, found", [
    ("ResourceNotFound", "x", True), ("NoSuchKey", "x", True), ("404", "", True),
    ("ValidationException", "Requested resource not found.", True),  # SageMaker, an unknown job
    ("ValidationException", "Could not find job", True),
    ("ValidationError", "Stack with id vit-stack does not exist", True),  # CloudFormation
    ("ValidationException", "1 validation error detected", False),
    ("AccessDenied", "not found", False),
])
def test_not_found_is_a_code_or_a_validation_error_that_says_so(code, message, found):
    assert aws_errors.is_not_found(_client_error(code, 400, message)) is found


@pytest.mark.parametrize("status, refused", [(400, True), (404, True), (429, True), (500, False), (503, False)])
def test_a_definite_refusal_is_a_4xx_answer(status, refused):
    assert aws_errors.is_definite_refusal(_client_error("X", status)) is refused
    assert not aws_errors.is_definite_refusal(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"))


@pytest.mark.parametrize("cause, asked", [
    (NoCredentialsError(), False),
    (EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), False),
    (ReadTimeoutError(endpoint_url="http://127.0.0.1:9"), False),
    (ClientError({"Error": {"Code": "UnrecognizedClientException", "Message": "bad token"}}, "DescribeTrainingJob"),
     False),
    (ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "DescribeTrainingJob"), True),
    (ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow"}}, "DescribeTrainingJob"), True),
])
def test_never_asked_tells_a_missing_connection_from_an_answer(cause, asked):
    error = translate(cause, operation="DescribeTrainingJob", job_name="vit-1", region="us-east-1")
    error.__cause__ = cause
    assert aws_errors.never_asked(error) is (not asked)


@pytest.mark.parametrize("error", [
    NoCredentialsError(), _client_error("AccessDeniedException", 400), _client_error("ValidationException", 400),
    _client_error("ThrottlingException", 400), _client_error("InternalServerError", 500),
    _client_error("ResourceLimitExceeded", 400), _client_error("ResourceInUse", 400),
    EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), ReadTimeoutError(endpoint_url="http://127.0.0.1:9"),
])
def test_waiting_and_sweeps_decide_by_the_one_table(error):
    # submit --wait waits out what is transient; a sweep waits it out too (and a quota), and
    # stops (setup) or fails the trial (user) on what is permanent.
    from orchestrator import sweep

    try:
        raise BackendError("wrapped") from error
    except BackendError as ours:
        failure = aws_errors.classify(ours)
        assert aws_errors.is_transient(ours) is (not failure.permanent)
        kind = sweep.submit_error_kind(ours)
        assert (kind in sweep.WAIT_KINDS) is (not failure.permanent or failure.kind == "quota")
        assert (kind == "setup") is failure.account_wide


def test_is_transient_is_about_our_backend_errors_only():
    try:
        raise InputError("bad spec") from _client_error("ThrottlingException", 400)
    except InputError as ours:
        assert not aws_errors.is_transient(ours)
    assert aws_errors.is_transient(BackendError("x", code="SlowDown", http_status=503))
    assert not aws_errors.is_transient(BackendError("no botocore error behind it"))


@pytest.mark.parametrize("code, status, operation, words", [
    ("ExpiredTokenException", 400, "CreateTrainingJob", "AWS rejected the credentials"),
    ("AccessDeniedException", 400, "CreateTrainingJob", "access denied"),
    ("ResourceLimitExceeded", 400, "CreateTrainingJob", "service quota reached"),
    ("ResourceInUse", 400, "CreateTrainingJob", "a training job with this name already exists"),
    ("ThrottlingException", 400, "CreateTrainingJob", "still throttled after 1 attempts"),
    ("NoSuchBucket", 404, "HeadObject", "the bucket does not exist"),
    ("ValidationException", 400, "CreateTrainingJob", "SageMaker refused the request"),
    ("InternalFailure", 500, "CreateTrainingJob", "failed in us-east-1: InternalFailure"),
])
def test_the_sagemaker_translator_words_each_kind(code, status, operation, words):
    error = translate(_client_error(code, status, operation=operation), operation=operation, job_name="vit-1",
                      region="us-east-1")
    assert isinstance(error, BackendError) and words in error.message


def test_the_sagemaker_translator_says_unknown_job_for_a_job_not_found():
    error = translate(_client_error("ValidationException", 400, "Requested resource not found."),
                      operation="DescribeTrainingJob", job_name="vit-1", region="us-east-1")
    assert isinstance(error, UnknownJob) and error.message == "no SageMaker training job named vit-1 in us-east-1"


def test_the_cloudformation_translator_words_by_kind():
    from orchestrator.infra.cloudformation import is_missing_stack, is_no_changes
    from orchestrator.infra.cloudformation import translate as cfn_translate

    class Cfn:  # a client's region as the translator reads it
        class meta:  # noqa: N801 - botocore's attribute name
            region_name = "us-east-1"

    invalid = cfn_translate(_client_error("ValidationError", 400, "Template format error"), "deploying", Cfn())
    assert isinstance(invalid, InputError) and "CloudFormation refused the template or parameters" in invalid.message
    executing = cfn_translate(_client_error("ValidationError", 400, "x"), "executing", Cfn(), execution=True)
    assert type(executing) is BackendError
    denied = cfn_translate(_client_error("AccessDenied", 403), "deploying", Cfn())
    assert type(denied) is BackendError and "administrator credentials" in denied.hint
    other = cfn_translate(_client_error("LimitExceededException", 400), "deploying", Cfn(), "s")
    assert other.hint.endswith("describe-stack-events --stack-name s --region us-east-1")
    no_credentials = cfn_translate(NoCredentialsError(), "deploying", Cfn())
    assert no_credentials.message == "deploying: no AWS credentials found"
    assert is_missing_stack(_client_error("ValidationError", 400, "Stack with id s does not exist"))
    assert not is_missing_stack(_client_error("ValidationError", 400, "Template format error"))
    assert is_no_changes(_client_error("ValidationError", 400, "The submitted information didn't contain changes."))
    assert not is_no_changes(_client_error("AccessDenied", 403, "didn't contain changes"))


def test_the_sagemaker_translator_words_transport_and_credential_errors():
    missing = translate(NoCredentialsError(), operation="CreateTrainingJob")
    assert missing.message.startswith("CreateTrainingJob: no usable AWS credentials (")
    unreachable = translate(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), operation="HeadObject")
    assert unreachable.message.startswith("HeadObject: cannot reach the AWS endpoint (")
    silent = translate(ReadTimeoutError(endpoint_url="http://127.0.0.1:9"), operation="DescribeTrainingJob")
    assert silent.message.startswith("DescribeTrainingJob: the endpoint http://127.0.0.1:9 does not answer")
    # Another credential provider's failure keeps the SDK error's words, as before the one classifier.
    sso = translate(CredentialRetrievalError(provider="sso", error_msg="expired"), operation="ListTrainingJobs")
    assert sso.message.startswith("ListTrainingJobs failed: ")
