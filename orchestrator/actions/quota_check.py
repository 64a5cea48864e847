"""The quota check of `doctor --quotas`, `plan --quotas` and `submit` (`orchestrator.quotas`):
say each way of running the job against its quota (the caller's `say` prints), and raise
InputError (exit 2) when any falls short (SageMaker checks every type of a preference list);
and the sweeps' admission, its lines said (`sweep.admission`)."""

from __future__ import annotations

from collections.abc import Callable


def failure_text(exc) -> tuple[str, str]:
    """(what went wrong, what to do) of a failed quota read, worded by its kind: the server
    failed (try later; no permissions involved), no usable credentials (configure them), the
    call was denied (the IAM grant), or anything else; the service's text reduced to one line (an HTML error page to its title)."""
    from orchestrator import aws_errors
    from orchestrator.errors import service_message

    kind = aws_errors.kind_of(exc)
    code, status = aws_errors.code_of(exc), aws_errors.http_status_of(exc)
    said = service_message(f"{code}: {aws_errors.message_of(exc)}" if code else str(exc), 160)
    if kind == "server":
        return (f"the Service Quotas endpoint failed (HTTP {status or '5xx'}, a server error: {said})",
                "try again later: a server error, not a permissions problem")
    if kind == "credentials":
        return (f"no usable AWS credentials ({said})",
                "configure credentials (aws configure, AWS_PROFILE or environment variables), then try again")
    if kind == "denied":
        return (f"{said} (access denied)", "the operator policy grants servicequotas:ListServiceQuotas (infra/README.md); "
                                    "update the stack if yours predates it")
    return (f"{type(exc).__name__}: {said}", "check the region and the endpoint (AWS_ENDPOINT_URL), then try again")


def run(loaded, say: Callable[[str], None], *, tolerant: bool = False, backend=None,
        wanted: tuple | None = None) -> list:
    """Read the spec's quotas (read-only AWS calls), print one line per need with `say`, and
    raise InputError (exit 2) when any instance type it may run on falls short of its quota. Returns the verdicts
    (none for a backend without quotas: local). `tolerant` (submit's own check): quotas that
    the endpoint refuses to give (no servicequotas grant in an older stack, an endpoint without
    the API) are said and skipped, not the submit's failure; the clients are then the submitting
    `backend`'s (`Backend.quota_clients`; None from a backend without quotas: none are read).
    `wanted`: the needs as the prepared job decided them (`Prepared.quota_needs`), else the
    spec's own."""
    from botocore.exceptions import BotoCoreError, ClientError

    from orchestrator import aws, quotas
    from orchestrator.errors import BackendError

    if wanted is None:
        wanted = tuple(quotas.needs(loaded))
    if not wanted:
        return []
    try:
        clients = backend.quota_clients(attempts=aws.NO_ANSWER_ATTEMPTS) if tolerant else quotas.clients(loaded.region)
        if clients is None:
            return []
        quota_client, sagemaker_client = clients
        verdicts = quotas.read(loaded, quota_client, sagemaker_client, wanted=wanted)
    except quotas.MalformedAnswer as exc:
        if not tolerant:
            raise
        say(f"quota: not read ({exc.message}); submitting without the check (--no-quota-check skips it)")
        return []
    except (BotoCoreError, ClientError) as exc:
        # An endpoint that does not answer would not take the job either: that stops the submit
        # (exit 1, as any call to it). A refusal (no servicequotas grant in an older stack, an
        # endpoint without the API) skips the check, said.
        silent = aws.describe(exc, "ListServiceQuotas")
        if silent is not None:
            raise BackendError(f"reading the quotas: {silent}; {aws.tries_said(exc)}", hint=aws.NO_ANSWER_HINT) from None
        what, todo = failure_text(exc)
        if not tolerant:
            raise BackendError(f"reading the quotas: {what}", hint=todo) from exc
        say(f"quota: not read ({what}); submitting without the check (--no-quota-check skips it)")
        return []
    for verdict in verdicts:
        say(f"quota: {verdict.describe()}")
    quotas.require_fit(verdicts, loaded.region)
    return verdicts


def sweep_admission(definition, router, say: Callable[[str], None]):
    """The `sweep.admission.Admission` of a saved sweep (`admission.for_sweep`, the one
    admission of every path), each quota's line said; None when none applies or none could be
    read (said). InputError (exit 2) before any submit when a trial cannot pass its quota."""
    from orchestrator.sweep import admission

    found, lines = admission.for_sweep(definition, router)
    for line in lines:
        say(f"quota: {line}")
    return found
