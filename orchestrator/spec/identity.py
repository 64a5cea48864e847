"""A job's identity: `spec_hash`, the sha256 of the spec's canonical JSON.

Contract: the same spec gives the same hash in every version; a field of LATER_FIELDS (added
after specs were first hashed) counts only once set away from its default. A spec is frozen,
so its hash is computed once per spec object (a sweep plan asks twice a trial).
"""

from __future__ import annotations

import hashlib
import json
import weakref
from typing import Any

from pydantic import BaseModel

# Fields added after specs were first hashed. While one holds its default it is left out of the
# canonical form, so a spec that does not use it keeps its hash across the upgrade: its job
# name, the ledger's record of it and a sweep's trial ids stay the same (a resumed sweep would
# otherwise submit every trial again under new names). Every new optional field goes here.
LATER_FIELDS = ("instance.keep_alive_minutes", "training.precompile", "batch", "instance.preferences",
                "instance.training_plan_arn", "instance.plan_full", "mlflow")


def spec_hash(spec: BaseModel) -> str:
    """sha256 hex of the spec's canonical JSON (sorted keys, no whitespace): the identity of a job.

    The canonical JSON is every field, except a field of LATER_FIELDS at its default. A spec is
    frozen, so its hash is computed once per spec object (a sweep plan asks twice a trial)."""
    known = _HASHED.get(id(spec))
    if known is not None and known[0]() is spec:
        return known[1]
    data = spec.model_dump(mode="json")
    for path in LATER_FIELDS:
        _omit_at_default(spec, data, path.split("."))
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    key = id(spec)

    def forget(ref, key=key):
        if _HASHED.get(key, (None,))[0] is ref:
            del _HASHED[key]

    _HASHED[key] = (weakref.ref(spec, forget), digest)
    return digest


# id(spec) -> (a weak reference to it, its hash): an entry lives as long as its spec.
_HASHED: dict[int, tuple[weakref.ref, str]] = {}
# (model class, field name) -> the field's default: pydantic inspects the default factory's
# signature at every get_default, which was a fifth of a sweep plan's time per trial.
_DEFAULTS: dict[tuple[type, str], Any] = {}


def _omit_at_default(model: BaseModel, data: dict, path: list[str]) -> None:
    for name in path[:-1]:
        model, data = getattr(model, name, None), data.get(name)
        if not isinstance(model, BaseModel) or not isinstance(data, dict):
            return  # not a field of this model (a sweep spec has none of them)
    name = path[-1]
    field = type(model).model_fields.get(name)
    if field is None:
        return
    key = (type(model), name)
    default = _DEFAULTS.get(key, _DEFAULTS)  # the dict itself: no default can be it
    if default is _DEFAULTS:
        default = _DEFAULTS[key] = field.get_default(call_default_factory=True)
    if getattr(model, name) == default:
        data.pop(name, None)

