"""Options and arguments several commands share, each checked before any call: a malformed
job name or region would otherwise reach AWS (botocore's "Parameter validation failed", a
DNS lookup of a made-up endpoint) or a path on disk. Refused here: exit 2."""

from __future__ import annotations

import re

import typer

from orchestrator.backends.registry import SWEEP_POLL_S, WAIT_INTERVAL_S
from orchestrator.polling import CLOUD_FLOOR_S, LOCAL_FLOOR_S
from orchestrator.region import REGION_DEFAULTS


def check_job_arg(value: str | None, argument: str) -> str | None:
    """`value` if it is a valid job name (`names.JOB_NAME_RULE`); InputError naming
    `argument` if not."""
    from orchestrator import names
    from orchestrator.errors import InputError

    if value is None:
        return None
    if not names.is_job_name(value):
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise InputError(f"{argument} {shown!r} is not a job name: a job name is {names.JOB_NAME_RULE}",
                         hint="use the job name `submit` printed (a sweep's jobs: `python -m orchestrator sweep status "
                              "ID`)")
    return value


def _job_argument(value: str) -> str:
    return check_job_arg(value, "JOB")


def job_option(value: str | None) -> str | None:
    return check_job_arg(value, "--job")


def check_region(value):
    """A --region value (None, one, or a list of them) if each looks like an AWS region name."""
    from orchestrator.errors import InputError
    from orchestrator.spec import REGION_PATTERN

    for region in [value] if isinstance(value, str) else (value or []):
        if not re.fullmatch(REGION_PATTERN, region):
            raise InputError(f"--region {region!r} is not an AWS region name",
                             hint="e.g. us-east-1, eu-west-1, us-gov-west-1 or cn-north-1")
    return value


JOB_ARGUMENT = typer.Argument(..., callback=_job_argument, help="Job name (as printed by submit).")
JOB_REGION_OPTION = typer.Option(None, "--region", callback=check_region, help="Region of a job the ledger "
                                 f"does not know (default: {REGION_DEFAULTS}). A job the ledger knows is looked "
                                 "up where the ledger recorded it; a different --region is noted and ignored.")
REGION_OPTION = typer.Option(None, "--region", callback=check_region, help=f"AWS region (default: {REGION_DEFAULTS}).")
# The floor keeps a loop from spinning a core (QA: --poll 0 did); a cloud round's is higher (`polling`).
POLL_MIN_S = LOCAL_FLOOR_S
# The longest wait between rounds: one day. Longer (or inf) would leave submitted jobs unwatched.
POLL_MAX_S = 86400.0
# --interval's help (`submit --wait`): the defaults and floors `polling` states.
INTERVAL_HELP = ("Seconds between status polls (--wait; default "
                 f"{WAIT_INTERVAL_S['sagemaker']:g} on SageMaker, {WAIT_INTERVAL_S['batch']:g} on Batch, "
                 f"{WAIT_INTERVAL_S['local']:g} locally; at least {CLOUD_FLOOR_S:g} on SageMaker and Batch, "
                 f"{LOCAL_FLOOR_S:g} locally: a shorter one is raised, with a note).")


def finite_seconds(param: typer.CallbackParam, value: float | None) -> float | None:
    """A seconds option (--poll, --interval) a loop can sleep: a NaN passes click's range check
    (every comparison with it is false) and `inf` made a sweep submit a trial and then fail."""
    import math

    from orchestrator.errors import InputError

    if value is not None and not math.isfinite(value):
        option = param.opts[0] if param.opts else "the option"
        raise InputError(f"{option} {value}: not a number of seconds; nothing was submitted",
                         hint=f"give {option} seconds between {POLL_MIN_S:g} and {POLL_MAX_S:g}, e.g. {option} 60")
    return value


POLL_OPTION = typer.Option(None, "--poll", min=POLL_MIN_S, max=POLL_MAX_S, callback=finite_seconds, help="Seconds between status rounds (default: "
                           f"{SWEEP_POLL_S['sagemaker']:g} on SageMaker, {SWEEP_POLL_S['batch']:g} on Batch, "
                           f"{SWEEP_POLL_S['local']:g} locally); at least {CLOUD_FLOOR_S:g} when the sweep has "
                           f"SageMaker or Batch jobs, {POLL_MIN_S:g} locally: a shorter one is raised, with a note.")
