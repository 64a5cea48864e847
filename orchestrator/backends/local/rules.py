"""The doctor's rules only a job of this machine needs: an environment a local process can
receive (N031), and spot, which the request carries and this machine ignores."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from orchestrator.doctor import instance
from orchestrator.doctor.finding import Finding

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec


def check(spec: JobSpec) -> list[Finding]:
    # The request carries the spot settings (ignored here), and building it refuses spot
    # without a max wait: said where it is checked.
    return instance.spot(spec) + local_environment(spec)


# What the local job's processes get besides the spec's environment and the caller's own: the
# SM_* variables (SM_TRAINING_ENV repeats the hyperparameters and resource config), torchrun's
# and our own variables, and the command lines. Generous, so a spec that fits here fits there.
LOCAL_ENV_RESERVE = 64 * 1024


def exec_limits() -> tuple[int | None, int | None]:
    """(bytes one environment variable may take, "NAME=value" and its NUL; bytes all of a new
    process's arguments and environment may take) on this machine; None where unknown. Linux
    caps one string at MAX_ARG_STRLEN, 32 pages (linux/binfmts.h), and the whole at ARG_MAX
    (sysconf; a quarter of the stack limit); other systems have ARG_MAX only."""
    try:
        total = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError, AttributeError):
        total = None
    one = None
    if sys.platform.startswith("linux"):
        try:
            one = 32 * os.sysconf("SC_PAGESIZE")
        except (ValueError, OSError):
            one = 32 * 4096
    return one, (total if total and total > 0 else None)


def _env_bytes(items) -> int:
    """What `items` (name, value) take in a new process: "NAME=value" and a NUL each, and a pointer."""
    return sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 + 8 for k, v in items)


def local_environment(spec: JobSpec) -> list[Finding]:
    """N031: the spec's environment must reach the local job's processes, which inherit this
    process's environment too (the error otherwise: E2BIG at start, with no field named)."""
    one, total = exec_limits()
    out = []
    if one is not None:
        for key, value in spec.environment.items():
            size = _env_bytes([(key, value)]) - 8
            if size > one:
                out.append(Finding(
                    "N031-local-environment-size", "error",
                    f"environment {key[:40]}: {size} bytes; one environment variable of a process on this machine "
                    f"holds at most {one} bytes (Linux MAX_ARG_STRLEN), so the local job could not start",
                    "shorten it, or put the value in a file the job reads (a data.source folder) instead",
                    f"environment.{key}"))
    if total is not None and not out:
        own = _env_bytes(spec.environment.items())
        inherited = _env_bytes(os.environ.items())
        if own + inherited + LOCAL_ENV_RESERVE > total:
            out.append(Finding(
                "N031-local-environment-size", "error",
                f"environment: {own} bytes in all; with this process's own environment ({inherited} bytes, which "
                f"the job inherits) that is more than a process on this machine may receive ({total} bytes, "
                "ARG_MAX), so the local job could not start",
                "shorten the environment's values, or unset large variables in the shell that submits",
                "environment"))
    return out
