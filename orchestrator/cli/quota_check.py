"""The quota check of `doctor --quotas`, `plan --quotas` and `submit` (`orchestrator.quotas`):
print each way of running the job against its quota, and exit 2 when none fits."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.cli.output import err


def run(loaded, say: Callable[[str], None] = err, *, tolerant: bool = False) -> list:
    """Read the spec's quotas (read-only AWS calls), print one line per need with `say`, and
    raise InputError (exit 2) when the job fits no instance type's quota. Returns the verdicts
    (none for a backend without quotas: local). `tolerant` (submit's own check): quotas that
    cannot be read (no servicequotas grant in an older stack, an endpoint without the API) are
    said and skipped, not the submit's failure."""
    from botocore.exceptions import BotoCoreError, ClientError

    from orchestrator import aws, quotas

    if not quotas.needs(loaded):
        return []
    quota_client, sagemaker_client = quotas.clients(loaded.region, attempts=1 if tolerant else None)
    try:
        verdicts = quotas.read(loaded, quota_client, sagemaker_client)
    except (BotoCoreError, ClientError) as exc:
        if not tolerant:
            raise
        why = aws.describe(exc) or f"{type(exc).__name__}: {exc}"
        say(f"quota: not read ({why}); submitting without the check (--no-quota-check skips it)")
        return []
    for verdict in verdicts:
        say(f"quota: {verdict.describe()}")
    quotas.check(verdicts, loaded.region)
    return verdicts
