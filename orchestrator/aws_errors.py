"""What an AWS error means: the one classifier of botocore errors (and of ours raised from one).

Contract:
- `classify(exc) -> Failure | None`: the kind of failure, in the vocabulary below, looked up
  through `exc`'s causes (our errors are raised `from` the botocore error); for one of our
  `BackendError`s with no botocore error behind it, from the code and HTTP status it carries;
  None when nothing AWS said is behind it.
- The kinds (docs/ARCHITECTURE.md, "Words"). Permanent: the same call would fail the same way.
    credentials  no usable credentials (none, partial, expired, rejected)   permanent, account-wide
    denied       no permission (an access-denied code, or HTTP 403)         permanent, account-wide
    quota        a service quota reached (ResourceLimitExceeded)            permanent
    capacity     the service has no instances of the type now               permanent
    conflict     a resource of that name exists already (ResourceInUse)     permanent
    not-found    the named resource does not exist (a not-found code)       permanent
    invalid      the service's validation refused the request's input       permanent
    refused      any other 4xx answer                                       permanent
    client       an SDK-side problem (bad parameters, unreadable config)    permanent
    throttled    throttling (a throttling code, or HTTP 429)                transient
    server       a 5xx, or a 4xx that says "try again" (RequestTimeout)     transient
    unreachable  no connection to the endpoint                              transient
    no-answer    connected, no reply in time                                transient
    dropped      a connection lost mid-answer                               transient
- `is_transient(error)`: whether one of our BackendErrors only says the service could not
  answer now (a transient kind): waits and sweeps try again. `never_asked(error)`: whether the
  service never saw the request (credentials, unreachable, no-answer), so its silence says
  nothing about a job. `is_not_found(exc)`: a not-found code, or a validation error that says
  so (SageMaker's "Requested resource not found", CloudFormation's "Stack ... does not exist").
- Wording stays with each service's translator (`backends.cloud_errors`,
  `infra.cloudformation`), which asks this module what kind of error it holds.

Codes are botocore's `Error.Code` values as the services' API references spell them (e.g. the
SageMaker API reference's "Common Errors", S3's "Error responses", CloudFormation's "Common
errors").
"""

from __future__ import annotations

from typing import NamedTuple

from orchestrator.errors import BackendError

# Error codes of an answer that rejects the caller's credentials, not the request.
BAD_CREDENTIAL_CODES = frozenset({
    "UnrecognizedClientException", "InvalidClientTokenId", "ExpiredToken", "ExpiredTokenException",
    "InvalidSignatureException", "SignatureDoesNotMatch", "IncompleteSignature", "MissingAuthenticationToken",
    "MissingAuthenticationTokenException", "AuthFailure", "InvalidAccessKeyId", "InvalidToken",
    "RequestExpired",
})
# HeadObject answers a denied read with a bare 403 (no body, so no code but the status).
ACCESS_DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "Forbidden",
                                 "UnauthorizedAccess", "AllAccessDisabled", "403"})
THROTTLE_CODES = frozenset({"ThrottlingException", "Throttling", "ThrottledException", "TooManyRequestsException",
                            "RequestLimitExceeded",
                            "SlowDown", "ProvisionedThroughputExceededException", "RequestThrottled",
                            "RequestThrottledException", "BandwidthLimitExceeded", "EC2ThrottledException",
                            "PriorRequestNotComplete", "TransactionInProgressException"})
# 4xx answers that say "try again" rather than "this request is wrong".
SERVER_CODES = frozenset({"RequestTimeout", "RequestTimeoutException", "InternalError", "InternalFailure",
                          "InternalServerError", "ServiceUnavailable", "ServiceUnavailableException",
                          "InternalServerException"})
QUOTA_CODES = frozenset({"ResourceLimitExceeded"})
# EC2 answers InsufficientInstanceCapacity with a 5xx: capacity is read before the status.
CAPACITY_CODES = frozenset({"InsufficientCapacityError", "InsufficientCapacity", "CapacityError",
                            "InsufficientInstanceCapacity"})
CONFLICT_CODES = frozenset({"ResourceInUse"})
NOT_FOUND_CODES = frozenset({"ResourceNotFound", "ResourceNotFoundException", "NoSuchKey", "NoSuchBucket",
                             "NotFound", "404"})
VALIDATION_CODES = frozenset({"ValidationException", "ValidationError"})
# How SageMaker and CloudFormation word a missing resource inside a validation error.
_NOT_FOUND_WORDS = ("not found", "could not find", "does not exist")

TRANSIENT_KINDS = frozenset({"throttled", "server", "unreachable", "no-answer", "dropped"})
ACCOUNT_WIDE_KINDS = frozenset({"credentials", "denied"})
NEVER_ASKED_KINDS = frozenset({"credentials", "unreachable", "no-answer"})


class Failure(NamedTuple):
    """What went wrong with a call, in one word (the module docstring's kinds), and whether
    trying the same call again can help."""

    kind: str
    permanent: bool

    @property
    def account_wide(self) -> bool:
        """Whether every call with these credentials fails the same way (credentials, denied):
        the same call for another job would not do better."""
        return self.kind in ACCOUNT_WIDE_KINDS


def botocore_cause(exc: BaseException | None) -> BaseException | None:
    """`exc` if it is a botocore error, else the first botocore error in its cause chain."""
    from botocore.exceptions import BotoCoreError, ClientError

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (BotoCoreError, ClientError)):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def _answer(code: str, status: int) -> Failure:
    """The Failure of an answer with error `code` and HTTP `status` (0 when unknown)."""
    if code in BAD_CREDENTIAL_CODES:
        return Failure("credentials", True)
    if code in ACCESS_DENIED_CODES:
        return Failure("denied", True)
    if code in THROTTLE_CODES or status == 429:
        return Failure("throttled", False)
    if code in QUOTA_CODES:
        return Failure("quota", True)
    if code in CAPACITY_CODES:
        return Failure("capacity", True)
    if code in SERVER_CODES or status >= 500:
        return Failure("server", False)
    if status == 403:
        return Failure("denied", True)
    if code in CONFLICT_CODES:
        return Failure("conflict", True)
    if code in NOT_FOUND_CODES:
        return Failure("not-found", True)
    if code in VALIDATION_CODES:
        return Failure("invalid", True)
    return Failure("refused", True)


def classify(exc: BaseException | None) -> Failure | None:
    """The Failure behind `exc` (see the module docstring); None when AWS said nothing of it."""
    from botocore import exceptions as aws

    cause = botocore_cause(exc)
    if cause is None:
        if isinstance(exc, BackendError) and (exc.code or exc.http_status):
            return _answer(exc.code or "", exc.http_status or 0)
        return None
    if isinstance(cause, aws.ClientError):
        status = http_status_of(cause)
        return _answer(code_of(cause), status or 0)
    if isinstance(cause, (aws.NoCredentialsError, aws.PartialCredentialsError, aws.CredentialRetrievalError,
                          aws.TokenRetrievalError, aws.NoAuthTokenError, aws.SSOError,
                          aws.UnknownCredentialError)):
        return Failure("credentials", True)
    if isinstance(cause, (aws.ReadTimeoutError, aws.ConnectTimeoutError)):
        return Failure("no-answer", False)
    if isinstance(cause, aws.ConnectionError):
        return Failure("unreachable", False)
    if isinstance(cause, aws.HTTPClientError):  # a connection dropped mid-answer
        return Failure("dropped", False)
    return Failure("client", True)


def kind_of(exc: BaseException | None) -> str | None:
    """`classify(exc).kind`, or None when AWS said nothing of `exc`."""
    failure = classify(exc)
    return failure.kind if failure is not None else None


def _error(exc: BaseException) -> dict:
    response = getattr(exc, "response", None)
    error = response.get("Error") if isinstance(response, dict) else None
    return error if isinstance(error, dict) else {}


def code_of(exc: BaseException) -> str:
    """The service's error code of a botocore ClientError ("" for anything else)."""
    return str(_error(exc).get("Code", ""))


def message_of(exc: BaseException) -> str:
    """The service's error message of a botocore ClientError ("" for anything else)."""
    return str(_error(exc).get("Message", ""))


def http_status_of(exc: BaseException) -> int | None:
    """The HTTP status of a botocore ClientError's answer, when it has one."""
    response = getattr(exc, "response", None)
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") if isinstance(response, dict) else None
    return status if isinstance(status, int) else None


def is_not_found(exc: BaseException) -> bool:
    """Whether a ClientError says the named resource does not exist: a not-found code, or a
    validation error that says so (SageMaker answers a describe of an unknown job with
    ValidationException "Requested resource not found"; CloudFormation an unknown stack with
    ValidationError "Stack with id X does not exist")."""
    code = code_of(exc)
    if code in NOT_FOUND_CODES:
        return True
    text = message_of(exc).lower()
    return code in VALIDATION_CODES and any(words in text for words in _NOT_FOUND_WORDS)


def is_definite_refusal(exc: BaseException) -> bool:
    """True when AWS answered and refused (a 4xx): the request certainly did nothing. False for
    5xx answers and transport errors, after which what was asked for may exist."""
    status = http_status_of(exc)
    return status is not None and 400 <= status < 500


def is_transient(error: BaseException) -> bool:
    """Whether `error` (one of our BackendErrors) only says the service could not answer now: a
    transient kind (throttled, server, unreachable, no-answer, dropped). An answer about the
    request (access denied, no such job, bad credentials) is not, nor is any other error."""
    if not isinstance(error, BackendError):
        return False
    failure = classify(error)
    return failure is not None and not failure.permanent


def never_asked(error: BaseException) -> bool:
    """Whether the service never saw the request behind `error`: no usable credentials, no
    connection to the endpoint, or no answer from it. An answer about the request (access
    denied, not found, throttled) is not such an error."""
    return kind_of(error) in NEVER_ASKED_KINDS
