"""Which AWS region a command uses when it is not told: one order for every command.

`default_region(region)`: the command's --region, else AWS_REGION, else AWS_DEFAULT_REGION,
else the region of the AWS config profile in use, else `FALLBACK_REGION` (a spec without
`region:` means us-east-1 too, by its schema). `REGION_DEFAULTS` says that order in the
words the commands' help uses. botocore alone reads AWS_DEFAULT_REGION and the profile
only, so every client that is not given a region by a spec gets it from here.
"""

from __future__ import annotations

import os
import re

from orchestrator.errors import InputError

# An AWS region's name (us-east-1, ap-southeast-2, us-gov-west-1): what a spec's `region` and a
# command's --region take.
REGION_PATTERN = r"^[a-z]{2}(-[a-z]+)+-\d+$"

FALLBACK_REGION = "us-east-1"
REGION_DEFAULTS = ("AWS_REGION, else AWS_DEFAULT_REGION, else the region of your AWS config profile "
                   "(AWS_PROFILE), else us-east-1")


def profile_region() -> tuple[str | None, str]:
    """(the region the AWS config file gives the profile in use, or None; that profile's
    name). Read from the config file itself: a Session's region_name would be an empty
    AWS_DEFAULT_REGION's "" instead. InputError as `aws.aws_session` raises it."""
    import botocore.session
    from botocore.exceptions import BotoCoreError

    from orchestrator.aws import config_error

    try:
        session = botocore.session.Session()
        return session.get_scoped_config().get("region") or None, session.profile or "default"
    except BotoCoreError as exc:  # ProfileNotFound, ConfigParseError, ...
        raise config_error(exc) from None


def default_region(region: str | None = None) -> str:
    """The region of a command that calls AWS (see the module docstring). A variable set to ""
    counts as unset. Imports botocore only to read the profile's region. InputError for an
    environment or profile value that is not a region name, or an AWS config that cannot be
    read."""
    if region:
        return region
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        value = os.environ.get(variable)
        if value:
            where = f"{variable}={value!r}"
            break
    else:
        value, profile = profile_region()
        if not value:
            return FALLBACK_REGION
        where = f"the region {value!r} of the AWS config profile {profile}"
    if not re.fullmatch(REGION_PATTERN, value):
        # Not "pass --region": some commands that read this rule (cache) have no such flag.
        raise InputError(f"{where} is not an AWS region name", hint="make it a region such as us-east-1")
    return value
