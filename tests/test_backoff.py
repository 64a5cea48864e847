"""One backoff (`orchestrator.backoff`) behind the sweep runner, a cloud schedule's Retry and
`follow`: the values are stated once, and each reads them."""

from __future__ import annotations

import inspect

from orchestrator import backoff
from orchestrator import follow as following
from orchestrator.backends import scheduled
from orchestrator.sweep.runner import Runner


def test_the_runner_a_schedules_retry_and_follow_share_one_backoff():
    defaults = inspect.signature(Runner.__init__).parameters
    assert (defaults["backoff_base"].default, defaults["backoff_cap"].default) == (backoff.BASE_S, backoff.CAP_S)
    retrier = scheduled.retry(["States.Timeout"])
    # ASL's IntervalSeconds and MaxDelaySeconds are whole seconds: the same values, as integers.
    assert (retrier["IntervalSeconds"], retrier["BackoffRate"], retrier["MaxDelaySeconds"]) == \
           (backoff.BASE_S, backoff.RATE, backoff.CAP_S)
    assert isinstance(retrier["IntervalSeconds"], int) and isinstance(retrier["MaxDelaySeconds"], int)
    assert inspect.signature(following.follow).parameters["max_backoff_s"].default == backoff.CAP_S
