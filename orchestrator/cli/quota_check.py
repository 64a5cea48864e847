"""The quota check of `doctor --quotas`, `plan --quotas` and `submit` (`orchestrator.quotas`):
print each way of running the job against its quota, and exit 2 when none fits."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.cli.output import err


def failure_text(exc) -> tuple[str, str]:
    """(what went wrong, what to do) of a failed quota read, worded by its kind: the server
    failed (try later; no permissions involved), the call was denied (the IAM grant), or
    anything else; the service's text reduced to one line (an HTML error page to its title)."""
    from orchestrator import aws_errors
    from orchestrator.errors import service_message

    kind = aws_errors.kind_of(exc)
    code, status = aws_errors.code_of(exc), aws_errors.http_status_of(exc)
    said = service_message(f"{code}: {aws_errors.message_of(exc)}" if code else str(exc), 160)
    if kind == "server":
        return (f"the Service Quotas endpoint failed (HTTP {status or '5xx'}, a server error: {said})",
                "try again later: a server error, not a permissions problem")
    if kind in ("denied", "credentials"):
        return (f"{said} (access denied)", "the operator policy grants servicequotas:ListServiceQuotas (infra/README.md); "
                                    "update the stack if yours predates it")
    return (f"{type(exc).__name__}: {said}", "check the region and the endpoint (AWS_ENDPOINT_URL), then try again")


def run(loaded, say: Callable[[str], None] = err, *, tolerant: bool = False, backend=None) -> list:
    """Read the spec's quotas (read-only AWS calls), print one line per need with `say`, and
    raise InputError (exit 2) when the job fits no instance type's quota. Returns the verdicts
    (none for a backend without quotas: local). `tolerant` (submit's own check): quotas that
    the endpoint refuses to give (no servicequotas grant in an older stack, an endpoint without
    the API) are said and skipped, not the submit's failure; the clients are then the submitting
    `backend`'s (`Backend.quota_clients`; None from a backend without quotas: none are read)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from orchestrator import aws, quotas
    from orchestrator.errors import BackendError

    if not quotas.needs(loaded):
        return []
    try:
        clients = backend.quota_clients(attempts=aws.NO_ANSWER_ATTEMPTS) if tolerant else quotas.clients(loaded.region)
        if clients is None:
            return []
        quota_client, sagemaker_client = clients
        verdicts = quotas.read(loaded, quota_client, sagemaker_client)
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


def _quota_clients(router, definition):
    """The quota clients of the sweep's first backend that has quotas (`Backend.quota_clients`,
    tried once), or None."""
    for name in definition.backends:
        clients = router.get(name).quota_clients(attempts=1)
        if clients is not None:
            return clients
    return None


def sweep_admission(definition, router, say: Callable[[str], None] = err):
    """The `sweep.admission.Admission` of a saved sweep from the account's quotas (read-only
    calls, tried once, through the sweep's cloud `backend`), or None when none could be read
    (said) or its backends have none (`router`: the sweep's `sweep.Router`). InputError (exit 2) before any submit when a trial fits no
    instance type's quota: it would wait forever."""
    from botocore.exceptions import BotoCoreError, ClientError

    from orchestrator import aws, quotas
    from orchestrator.errors import InputError
    from orchestrator.sweep.admission import Admission

    specs = [t.spec for t in definition.trials]
    if not any(quotas.needs(s) for s in specs):
        return None
    try:
        clients = _quota_clients(router, definition)
        if clients is None:
            return None
        quota_client, sagemaker_client = clients
        per_trial = quotas.sweep_verdicts(specs, quota_client, sagemaker_client)
    except quotas.MalformedAnswer as exc:
        say(f"quota: not read ({exc.message}); trials are submitted without admission by quota")
        return None
    except (BotoCoreError, ClientError) as exc:
        why = aws.describe(exc) or failure_text(exc)[0]
        say(f"quota: not read ({why}); trials are submitted without admission by quota")
        return None
    for trial, verdicts in zip(definition.trials, per_trial, strict=True):
        try:
            quotas.require_fit(verdicts, definition.region)
        except InputError as exc:
            raise InputError(f"trial {trial.trial_id}: {exc.message}", hint=exc.hint) from None
    flat = [v for verdicts in per_trial for v in verdicts]
    for verdict in {v.need.quota_name: v for v in flat}.values():
        say(f"quota: {verdict.describe()}")
    return Admission.from_verdicts(flat)
