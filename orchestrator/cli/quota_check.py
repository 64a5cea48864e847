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


def sweep_admission(definition, say: Callable[[str], None] = err):
    """The `sweep.admission.Admission` of a saved sweep from the account's quotas (read-only
    calls, tried once), or None when none could be read (said). InputError (exit 2) before any
    submit when a trial fits no instance type's quota: it would wait forever."""
    from botocore.exceptions import BotoCoreError, ClientError

    from orchestrator import aws, quotas
    from orchestrator.errors import InputError
    from orchestrator.sweep.admission import Admission

    specs = [t.spec for t in definition.trials]
    if not any(quotas.needs(s) for s in specs):
        return None
    try:
        quota_client, sagemaker_client = quotas.clients(definition.region, attempts=1)
        per_trial = quotas.sweep_verdicts(specs, quota_client, sagemaker_client)
    except (BotoCoreError, ClientError) as exc:
        why = aws.describe(exc) or f"{type(exc).__name__}: {exc}"
        say(f"quota: not read ({why}); trials are submitted without admission by quota")
        return None
    for trial, verdicts in zip(definition.trials, per_trial, strict=True):
        try:
            quotas.check(verdicts, definition.region)
        except InputError as exc:
            raise InputError(f"trial {trial.trial_id}: {exc.message}", hint=exc.hint) from None
    flat = [v for verdicts in per_trial for v in verdicts]
    for verdict in {v.need.quota_name: v for v in flat}.values():
        say(f"quota: {verdict.describe()}")
    return Admission.from_verdicts(flat)
