"""How the orchestrator talks to AWS: every boto3 client it builds, and what a botocore error means.

Clients (`client`):
- come from one boto3 Session (`aws_session`); an AWS configuration botocore cannot read (an
  unknown AWS_PROFILE, a config file that does not parse) is an InputError;
- the endpoint botocore resolves (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_<SERVICE>, a profile's
  `endpoint_url`) must be a URL: botocore refuses a malformed one with a bare ValueError while
  building the client, which becomes an InputError naming the setting;
- every client has connect and read timeouts (`timeouts`: CONNECT_TIMEOUT_S and
  READ_TIMEOUT_S, or ORCHESTRATOR_AWS_CONNECT_TIMEOUT / ORCHESTRATOR_AWS_READ_TIMEOUT in
  seconds). A read timeout bounds the wait for each piece of an answer, not a whole transfer,
  so long downloads are not cut short;
- a call whose endpoint cannot be reached or does not answer is tried NO_ANSWER_ATTEMPTS times
  in all, not the AWS_MAX_ATTEMPTS botocore would spend on it (minutes of silence on an
  endpoint that accepts connections and never answers); before the retry a note goes to
  `set_notifier`'s callback, so a waiting command says what it waits for. Everything else
  (throttling, 5xx) keeps botocore's retries (`retry_config`); a server error (HTTP 5xx) that
  botocore retries is noted there too, once, before its first retry.

What an error means is `aws_errors`' (`classify`); `describe` and `tries_said` word the
"no answer" and "cannot reach" cases, which this module's timeouts and tries shape.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from orchestrator.aws_errors import botocore_cause
from orchestrator.env_seconds import env_seconds
from orchestrator.errors import InputError, service_message

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 20.0
NO_ANSWER_ATTEMPTS = 2
DEFAULT_RETRY_MODE = "adaptive"
DEFAULT_MAX_ATTEMPTS = 10
USER_AGENT = "trainium-vit-orchestrator"
CONNECT_TIMEOUT_VARIABLE = "ORCHESTRATOR_AWS_CONNECT_TIMEOUT"
READ_TIMEOUT_VARIABLE = "ORCHESTRATOR_AWS_READ_TIMEOUT"

_notify: Callable[[str], None] | None = None
_noted: dict[str, float] = {}  # endpoint -> when a note about it last went out (time.monotonic)
_noted_lock = threading.Lock()


def set_notifier(callback: Callable[[str], None] | None) -> None:
    """Where notes about calls that wait on a silent endpoint go (the CLI: stderr)."""
    global _notify
    _notify = callback


# --- configuration ---------------------------------------------------------------------------


def timeouts() -> tuple[float, float]:
    """(connect, read) timeouts in seconds for every client: the defaults, or the environment's."""
    return (env_seconds(CONNECT_TIMEOUT_VARIABLE, CONNECT_TIMEOUT_S, example=30, at_most=3600),
            env_seconds(READ_TIMEOUT_VARIABLE, READ_TIMEOUT_S, example=30, at_most=3600))


def retry_config() -> dict:
    """botocore's retry settings for our clients: AWS_RETRY_MODE / AWS_MAX_ATTEMPTS when the
    user set them, else adaptive mode with DEFAULT_MAX_ATTEMPTS attempts. Attempts count the
    first call too, as AWS_MAX_ATTEMPTS does (botocore's `total_max_attempts`; its
    `max_attempts` would count retries only)."""
    mode = os.environ.get("AWS_RETRY_MODE") or DEFAULT_RETRY_MODE
    raw = os.environ.get("AWS_MAX_ATTEMPTS") or str(DEFAULT_MAX_ATTEMPTS)
    if mode not in ("standard", "adaptive", "legacy"):
        raise InputError(f"AWS_RETRY_MODE={mode!r} is not a botocore retry mode",
                         hint="use standard or adaptive (or unset it)")
    if not raw.isdigit() or int(raw) < 1:
        raise InputError(f"AWS_MAX_ATTEMPTS={raw!r} is not a positive integer", hint="e.g. AWS_MAX_ATTEMPTS=10")
    return {"mode": mode, "total_max_attempts": int(raw)}


def client_config(*, pool: int | None = None, retries: dict | None = None):
    """The botocore Config of every client: timeouts, retries (default `retry_config()`), our
    user agent, and a connection pool of `pool` connections when callers run threads."""
    from botocore.config import Config

    connect, read = timeouts()
    extra = {"max_pool_connections": max(10, pool)} if pool else {}
    return Config(retries=retries or retry_config(), connect_timeout=connect, read_timeout=read,
                  user_agent_extra=USER_AGENT, **extra)


def config_error(exc: Exception) -> InputError:
    return InputError(f"cannot read the AWS configuration: {service_message(exc)}",
                      hint="fix or unset AWS_PROFILE (`aws configure list-profiles` lists the profiles), "
                           "or AWS_CONFIG_FILE")


def aws_session(region: str | None = None):
    """A boto3 Session (for `region`, else botocore's default). InputError when the AWS
    configuration cannot be read: an AWS_PROFILE no config file names, a config file that
    does not parse (botocore raises these while building the session)."""
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        return boto3.session.Session(region_name=region)
    except BotoCoreError as exc:  # ProfileNotFound, ConfigParseError, ...
        raise config_error(exc) from None


def _endpoint_variables(service_id: str) -> tuple[str, str]:
    """The environment variables that set `service_id`'s endpoint, in botocore's order."""
    return "AWS_ENDPOINT_URL_" + service_id.upper().replace(" ", "_").replace("-", "_"), "AWS_ENDPOINT_URL"


def _endpoint_setting(service_id: str, value: str) -> str:
    """Which setting holds the endpoint `value` botocore refused, in botocore's order."""
    for variable in _endpoint_variables(service_id):
        if os.environ.get(variable) == value:
            return f"{variable}={value!r}"
    return f"the endpoint_url {value!r} of the AWS config profile"


def _endpoint_problem(value: str) -> str | None:
    """Why `value` cannot be an endpoint URL that botocore can send to, or None: botocore only
    checks a host is there when it builds a client, and an unknown scheme or a port out of
    range fails at the first call (a ValueError or "Not supported URL scheme")."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https"):
        return f"the scheme is {parts.scheme!r}, not http or https" if parts.scheme else "it has no http:// or https://"
    if not parts.hostname:
        return "it has no host"
    if port == 0:
        return "port 0 is not a port to connect to"
    return None


def client(service: str, region: str | None = None, *, config=None, session=None):
    """A boto3 client for `service` in `region` with `client_config()` (or `config` with our
    timeouts), whose calls give up on a silent or unreachable endpoint after NO_ANSWER_ATTEMPTS
    tries.
    InputError for a malformed endpoint setting or an unreadable AWS configuration."""
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    session = session or aws_session()
    service_id = str(session._session.get_service_model(service).service_id)
    for variable in _endpoint_variables(service_id):
        value = os.environ.get(variable)
        if value:
            why = _endpoint_problem(value)
            if why is not None:
                raise InputError(f"{variable}={value!r} is not an endpoint URL: {why}", hint=_ENDPOINT_HINT)
            break  # the one botocore uses
    connect, read = timeouts()
    # A caller's own config (storage's pool and retries for a store) gets our timeouts too.
    config = client_config() if config is None else config.merge(Config(connect_timeout=connect, read_timeout=read))
    try:
        built = session.client(service, region_name=region, config=config)
    except ValueError as exc:
        text = str(exc)
        if not text.startswith("Invalid endpoint: "):
            raise
        value = text[len("Invalid endpoint: "):]
        raise InputError(f"{_endpoint_setting(service_id, value)} is not an endpoint URL", hint=_ENDPOINT_HINT) from None
    except BotoCoreError as exc:  # ProfileNotFound and friends, raised late by some settings
        raise config_error(exc) from None
    limit_no_answer(built)
    return built


_ENDPOINT_HINT = ("give a URL with a scheme and a host, e.g. https://s3.us-east-1.amazonaws.com or "
                  "http://127.0.0.1:5000, or unset it to use AWS's own endpoints")


def limit_no_answer(built) -> None:
    """Make `built` (a botocore client) stop retrying a call that cannot reach its endpoint or
    gets no answer after NO_ANSWER_ATTEMPTS tries, and note the wait before retrying. A server
    error (HTTP 5xx) that botocore retries is noted too, once, at its first retry: with
    botocore's backoff its tries take seconds to a minute, which are otherwise silent."""
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

    endpoint = built.meta.endpoint_url
    retries = built.meta.config.retries or {}
    configured = retries.get("total_max_attempts") or (retries.get("max_attempts", 4) + 1)
    limit = min(NO_ANSWER_ATTEMPTS, configured)

    def needs_retry(attempts: int, caught_exception=None, operation=None, response=None, **_) -> bool | None:
        call = getattr(operation, "name", None)
        if caught_exception is None:
            status = getattr(response[0], "status_code", None) if response else None
            if status in RETRIED_STATUSES and attempts < configured:
                left = configured - attempts
                _note(endpoint, f"note: {shown_endpoint(endpoint)} answered {call or 'a call'} with a server error "
                                f"(HTTP {status}); trying again (up to {left} more tr{'y' if left == 1 else 'ies'})")
            return None  # botocore's own retry handler decides
        if not isinstance(caught_exception, (ReadTimeoutError, ConnectTimeoutError, EndpointConnectionError)):
            return None  # botocore's own retry handler decides
        if attempts >= limit:
            caught_exception.orchestrator_tries = attempts  # for `tries_said`
            return False  # give up now: botocore raises the error
        left = limit - attempts
        _note(endpoint, f"note: {describe(caught_exception, call)}; trying again "
                        f"({left} more tr{'y' if left == 1 else 'ies'})")
        return None

    # botocore's retry handler is registered on this exact event name; registered first, ours
    # answers first, and `False` ends the retries (botocore.endpoint.Endpoint._needs_retry).
    event = f"needs-retry.{built.meta.service_model.service_id.hyphenize()}"
    built.meta.events.register_first(event, needs_retry, unique_id=f"orchestrator-no-answer-{event}")


# The HTTP statuses botocore's retry handlers (standard, adaptive and legacy modes) retry as
# server errors (botocore.retries.standard's transient status codes; legacy's
# general_server_error): a note says so before the first retry.
RETRIED_STATUSES = frozenset({500, 502, 503, 504})


def _note(endpoint: str, text: str) -> None:
    """`text` to `set_notifier`'s callback, once per endpoint per wait: not once per thread
    (results reads in parallel) nor once per retry."""
    now = time.monotonic()
    with _noted_lock:
        fresh = now - _noted.get(endpoint, -1e9) > max(timeouts())
        if fresh:
            _noted[endpoint] = now
    if fresh and _notify is not None:
        _notify(text)


def shown_endpoint(url: str | None) -> str:
    """"the endpoint SCHEME://HOST:PORT" of a URL (botocore names the whole request URL:
    bucket, key, query; the endpoint is its start), never credentials written into it; "the
    AWS endpoint" without one."""
    parts = urlsplit(str(url)) if url else None
    host = parts.netloc.rpartition("@")[2] if parts else ""
    return f"the endpoint {parts.scheme}://{host}" if host else "the AWS endpoint"


# --- words for a silent endpoint --------------------------------------------------------------

def describe(exc: BaseException, operation: str | None = None) -> str | None:
    """Words for an endpoint that was not reached or did not answer (None for other errors),
    e.g. "the endpoint http://... does not answer DescribeTrainingJob (no reply within 20 s)"."""
    from botocore import exceptions as aws

    cause = botocore_cause(exc)
    url = getattr(cause, "kwargs", {}).get("endpoint_url") if cause is not None else None
    where = shown_endpoint(url)
    call = f" {operation}" if operation else ""
    connect, read = timeouts()
    if isinstance(cause, aws.ReadTimeoutError):
        return f"{where} does not answer{call} (no reply within {read:g} s)"
    if isinstance(cause, aws.ConnectTimeoutError):
        return f"{where} does not answer{call} (no connection within {connect:g} s)"
    if isinstance(cause, aws.EndpointConnectionError):
        return f"{where} cannot be reached ({service_message(cause)})"
    return None


def tries_said(exc: BaseException | None = None) -> str:
    """How many times the call that raised `exc` (a silent or unreachable endpoint) was tried,
    in words ("tried twice"): as counted when it gave up, else as configured."""
    cause = botocore_cause(exc) if exc is not None else None
    tries = getattr(cause, "orchestrator_tries", None)
    if not isinstance(tries, int):
        try:
            tries = min(NO_ANSWER_ATTEMPTS, retry_config()["total_max_attempts"])
        except InputError:
            tries = NO_ANSWER_ATTEMPTS
    return {1: "tried once", 2: "tried twice"}.get(tries, f"tried {tries} times")


NO_ANSWER_HINT = ("check the network, the region and AWS_ENDPOINT_URL if it is set; a slow link may need a longer "
                  f"{READ_TIMEOUT_VARIABLE} (seconds)")


# A paginated read stops after this many pages or seconds: an API that hands out a new
# NextToken on every page would otherwise be asked for ever (botocore's paginators catch only
# a repeated token). Far above any real answer: ListServiceQuotas' sagemaker quotas are a few
# hundred (MaxResults 100: a handful of pages); GetProducts for one type and region, a few items.
MAX_PAGES = 200
MAX_PAGING_S = 300.0


class EndlessPages(Exception):
    """A paginated answer that did not end within MAX_PAGES pages or MAX_PAGING_S seconds."""


def bounded_pages(pages, what: str, *, max_pages: int = MAX_PAGES, max_s: float = MAX_PAGING_S,
                  clock: Callable[[], float] = time.monotonic):
    """The pages of `pages` (a paginator's iterator), raising EndlessPages, naming `what`, once
    more than `max_pages` pages came or `max_s` seconds passed with more still to come."""
    start = clock()
    for count, page in enumerate(pages, 1):
        if count > max_pages or clock() - start > max_s:
            raise EndlessPages(f"{what}: the answer did not end after {count - 1} pages ({clock() - start:.0f} s), "
                               "each with a new NextToken; stopped asking")
        yield page
