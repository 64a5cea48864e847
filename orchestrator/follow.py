"""Following a job until it ends: through network outages, and audibly when no one watches.
It prints nothing: `cli.job_view.wait` shows what it reports (`submit --wait`).

Contract:
- `follow(read_status, ...)` calls `read_status()` every `interval` seconds until the status
  is terminal and returns it. Each change of (status, secondary) goes to `on_status(st,
  elapsed, "change")`; when `heartbeat_s` is set (stdout is not a terminal: CI logs, nohup),
  a status unchanged for `heartbeat_s` goes to `on_status(st, elapsed, "heartbeat")`, so a
  two-hour "running" still prints a line a minute.
- A status that cannot be read for a reason that says nothing about the job
  (`aws_errors.is_transient`: no connection, a timeout, throttling, a 5xx after botocore's own
  retries) does not end the wait: the job keeps running in SageMaker.
  `on_transient(message, elapsed, retry_in)` is called and the next read waits with exponential backoff (interval x 2^n, at most
  `max_backoff_s`): a laptop that sleeps or changes Wi-Fi picks the job up again. The first
  read that works is reported as a change. Any other error (access denied, no such job) is
  raised.
- Time comes from the injected `clock` and `sleep`, so tests run without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from orchestrator import backoff
from orchestrator.aws_errors import is_transient
from orchestrator.backends.job import JobStatus
from orchestrator.env_seconds import env_seconds
from orchestrator.errors import OrchestratorError

# A line at least this often while a job runs and stdout is not a terminal.
DEFAULT_HEARTBEAT_S = 60.0
HEARTBEAT_VARIABLE = "ORCHESTRATOR_HEARTBEAT_SECONDS"
MAX_BACKOFF_S = backoff.CAP_S


def heartbeat_seconds() -> float:
    """The heartbeat interval: ORCHESTRATOR_HEARTBEAT_SECONDS when set (a positive number), else
    DEFAULT_HEARTBEAT_S. InputError for a value that is not a positive number."""
    return env_seconds(HEARTBEAT_VARIABLE, DEFAULT_HEARTBEAT_S, example=60)


def follow(read_status: Callable[[], JobStatus], *, interval: float,
           on_status: Callable[[JobStatus, float, str], None],
           on_transient: Callable[[str, float, float], None],
           heartbeat_s: float | None = None, sleep: Callable[[float], None] = time.sleep,
           clock: Callable[[], float] = time.monotonic, max_backoff_s: float = MAX_BACKOFF_S) -> JobStatus:
    """Poll until the job is terminal (see the module docstring); returns its last status."""
    start = clock()
    last: tuple | None = None
    last_line = start
    failures = 0
    while True:
        try:
            st = read_status()
        except OrchestratorError as exc:
            if not is_transient(exc):
                raise
            failures += 1
            delay = min(max_backoff_s, interval * backoff.RATE ** failures)
            on_transient(exc.message, clock() - start, delay)
            last, last_line = None, clock()  # the first status read again is shown
            sleep(delay)
            continue
        failures = 0
        now = clock()
        key = (st.status, st.secondary)
        if key != last:
            on_status(st, now - start, "change")
            last, last_line = key, now
        elif heartbeat_s is not None and now - last_line >= heartbeat_s:
            on_status(st, now - start, "heartbeat")
            last_line = now
        if st.terminal:
            return st
        sleep(interval)
