"""How often a loop may ask a backend about its jobs: a floor per backend under `--poll` and
`--interval`.

Contract:
- `floor(names)` is the shortest wait between two rounds of status reads for jobs on the
  backends `names`: `CLOUD_FLOOR_S` when any of them is a cloud backend (SageMaker, Batch),
  `LOCAL_FLOOR_S` for the local backend alone.
- `at_least(requested, names, option)` is `requested` raised to that floor, and the note that
  says so (None when nothing was raised): the caller prints it, so a raised poll is never
  silent.

Why a cloud floor: each round of a sweep runner (and each poll of `submit --wait`) makes one
Describe call per job in flight, against an API request rate that is per account and Region and
shared with the console and every other tool of the account ("API calls to any AWS service
can't exceed the maximum allowed API request rate per account and per AWS Region":
https://repost.aws/knowledge-center/sagemaker-python-throttlingexception). A training job's
state changes over minutes: botocore's own waiter for one polls every 120 s (botocore
data/sagemaker/2017-07-24/waiters-2.json, TrainingJobCompletedOrStopped, delay 120). Five
seconds keeps a 50-job sweep at 10 Describe calls a second at most, and still shows a change
within seconds. The local backend reads a file: its floor only keeps a loop from spinning a core,
and so does a cloud backend whose endpoint is on this machine (AWS_ENDPOINT_URL or
AWS_ENDPOINT_URL_<SERVICE> on a loopback address: moto, LocalStack), which has no account rate.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from urllib.parse import urlsplit

LOCAL_FLOOR_S = 0.1
CLOUD_FLOOR_S = 5.0


def _on_this_machine(name: str) -> bool:
    """Whether backend `name`'s jobs are asked about on this machine: a backend that is not a
    cloud one, or one whose AWS service's endpoint is a loopback address (botocore's endpoint
    variables: the service's own first, then AWS_ENDPOINT_URL)."""
    from orchestrator.backends import registry

    backend = registry.backend_class(name)
    if not backend.cloud:
        return True
    service = backend.operation[0]
    url = os.environ.get(f"AWS_ENDPOINT_URL_{service.upper()}") or os.environ.get("AWS_ENDPOINT_URL")
    try:
        host = urlsplit(url).hostname if url else None
        return host == "localhost" or (host is not None and ipaddress.ip_address(host).is_loopback)
    except ValueError:
        return False


def floor(names: Iterable[str]) -> float:
    """The shortest poll for jobs on the backends `names` (see the module docstring)."""
    return LOCAL_FLOOR_S if all(_on_this_machine(name) for name in names) else CLOUD_FLOOR_S


def at_least(requested: float, names: Iterable[str], option: str) -> tuple[float, str | None]:
    """`requested` raised to `floor(names)`, and the note that says so (None if not raised)."""
    names = sorted(set(names))
    lowest = floor(names)
    if requested >= lowest:
        return requested, None
    cloud = ", ".join(name for name in names if not _on_this_machine(name))
    why = (f"each round asks {cloud} about every job in flight, within the account's API rate" if cloud
           else "a shorter one only spins a core")
    return lowest, f"note: {option} {requested:g} raised to {lowest:g} s, the least for {'/'.join(names)} jobs ({why})"
