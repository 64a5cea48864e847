"""SageMaker managed warm pools on the laptop side: which jobs can share one, the order a
sweep runs its trials in so that they do, and the keep-alive time a sweep's bound counts.

Source: the SageMaker developer guide, "SageMaker AI Managed Warm Pools", sections "Matching
training jobs" and "Billing" (docs.aws.amazon.com/sagemaker/latest/dg/train-warm-pools.html):
a job reuses the pool a finished job left when its RoleArn, InstanceType, InstanceCount,
VolumeSizeInGB, VolumeKmsKeyId, VpcConfig, EnableInterContainerTrafficEncryption and
EnableNetworkIsolation are identical, within that job's KeepAlivePeriodInSeconds; the pool
then takes the new job's keep-alive. The kept time is billed.

Contract:
- `pool_key(request)` is the matching part of a CreateTrainingJob request, or None when the
  request keeps no warm pool (no `KeepAlivePeriodInSeconds`, or 0).
- `grouped(items, key)` orders items so that those of one pool key follow each other: each
  group where its first item was, items in their own order within it; items without a key
  keep their place. Stable and deterministic.
- `chained_keep_alive_usd(pairs, concurrency)` is the keep-alive a sweep's trials bill at
  most if they run as chains: the runner keeps at most `concurrency` jobs in flight, so the
  trials of one pool key form at most `min(concurrency, trials)` chains, and only the last job
  of each chain keeps its pool idle until the keep-alive ends (the next job of a chain starts
  as soon as the runner sees a slot free, within a poll interval). It counts the dearest
  keep-alives of each key, as many as it has chains.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")

# The request fields a warm pool matches on (ResourceConfig's, then the request's own).
_RESOURCE_FIELDS = ("InstanceType", "InstanceCount", "VolumeSizeInGB", "VolumeKmsKeyId")
_REQUEST_FIELDS = ("RoleArn", "VpcConfig", "EnableInterContainerTrafficEncryption", "EnableNetworkIsolation")


def keep_alive_s(request: dict) -> int:
    return int((request.get("ResourceConfig") or {}).get("KeepAlivePeriodInSeconds") or 0)


def pool_key(request: dict) -> str | None:
    """The fields a warm pool matches on, as one canonical string; None without a keep-alive."""
    if keep_alive_s(request) <= 0:
        return None
    resource = request.get("ResourceConfig") or {}
    fields = {name: resource.get(name) for name in _RESOURCE_FIELDS}
    fields.update({name: request.get(name) for name in _REQUEST_FIELDS})
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def grouped(items: Sequence[T], key: Callable[[T], str | None]) -> list[T]:
    """`items` with those of one pool key next to each other (see the module docstring)."""
    groups: dict[object, list[T]] = {}
    for index, item in enumerate(items):
        k = key(item)
        groups.setdefault(k if k is not None else ("alone", index), []).append(item)
    return [item for group in groups.values() for item in group]


def chained_keep_alive_usd(pairs: Iterable[tuple[str | None, float]], concurrency: int) -> float:
    """(pool key, keep-alive USD of that trial's job) pairs -> the keep-alive billed at most
    when trials run as chains (see the module docstring)."""
    by_key: dict[str, list[float]] = {}
    alone = 0.0
    for key, usd in pairs:
        if key is None:
            alone += usd
        else:
            by_key.setdefault(key, []).append(usd)
    chained = sum(sum(sorted(costs, reverse=True)[:max(1, min(concurrency, len(costs)))])
                  for costs in by_key.values())
    return alone + chained
