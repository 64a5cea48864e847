"""Waiting in tests for a job (or anything) to reach a state, with the job's log in the failure."""

from __future__ import annotations

import time


def wait_for(condition, timeout: float, what: str, backend=None, job=None, poll_s: float = 0.3):
    """`condition()`'s first true value, polled every `poll_s` for at most `timeout` seconds;
    AssertionError `what` (with the last 60 lines of `job`'s log when a backend is given) after."""
    deadline = time.time() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.time() > deadline:
            log = "\n".join(list(backend.logs(job))[-60:]) if backend else ""
            raise AssertionError(f"{what}\n{log}")
        time.sleep(poll_s)
