"""Waiting in tests for a job (or anything) to reach a state, with the job's log in the failure.

Every bound a test puts on a wait goes through `patience`: the bounds are written for a quiet
machine, and a loaded 2-core one (CI beside other work, `make test` beside two busy processes)
may take several times as long without anything being wrong. A passing test never waits for the
bound, so a larger one costs only the time a real failure takes to report.
"""

from __future__ import annotations

import os
import time

# TEST_PATIENCE=1 restores the written bounds (to see a hang fail fast).
PATIENCE = float(os.environ.get("TEST_PATIENCE", "4"))


def patience(seconds: float) -> float:
    """`seconds`, a bound written for a quiet machine, scaled for a loaded one."""
    return seconds * PATIENCE


def wait_for(condition, timeout: float, what: str, backend=None, job=None, poll_s: float = 0.3):
    """`condition()`'s first true value, polled every `poll_s` for at most `timeout` seconds;
    AssertionError `what` (with the last 60 lines of `job`'s log when a backend is given) after."""
    deadline = time.time() + patience(timeout)
    while True:
        value = condition()
        if value:
            return value
        if time.time() > deadline:
            log = "\n".join(list(backend.logs(job))[-60:]) if backend else ""
            raise AssertionError(f"{what}\n{log}")
        time.sleep(poll_s)
