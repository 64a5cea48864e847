"""A number of seconds an environment variable may set (a client's timeouts, the heartbeat, a
local job's stop grace): one reading and one wording of a bad value for every such setting."""

from __future__ import annotations

import math
import os

from orchestrator.errors import InputError


def env_seconds(variable: str, default: float, *, example: float, at_most: float | None = None) -> float:
    """`variable`'s value in seconds when it is set (not empty), else `default`. InputError
    (exit 2) for a value that is not a finite number above 0, or is above `at_most`; the hint
    shows `example` and the default."""
    raw = os.environ.get(variable)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan  # fails every comparison below
    if not 0 < value <= (math.inf if at_most is None else at_most) or value == math.inf:
        bounds = "above 0" if at_most is None else f"between 0 and {at_most:g}"
        raise InputError(f"{variable}={raw!r} is not a number of seconds {bounds}",
                         hint=f"e.g. {variable}={example:g}, or unset it for the default ({default:g})")
    return value
