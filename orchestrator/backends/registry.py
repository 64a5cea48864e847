"""The backend registry: each backend's name and where its class lives, imported when first
asked for. It imports no backend and nothing above the spec; what a backend is, is the
interface (`planning.Planning`, the class; `running.Backend`, the instance).

- `names()`, `backend_class(name)`, `create(name, ...)`: the backends by name. A job spec's
  class is looked up once, when the spec is validated (`JobSpec.backend_type`); callers pass
  it on instead of asking here again.
- `register(name, "module:class")`: a backend this package does not ship (a test's stand-in,
  tests/stand_in_backend/), offered to specs, `locate` and every command until `unregister`.
- `locate(job, ...)`: the backend that owns a job; `cloud_names()`: the cloud backends, the
  default first.
- `WAIT_INTERVAL_S`, `SWEEP_POLL_S`: the shipped backends' default polls (their classes read
  them; so does the CLI's help).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.errors import InputError

if TYPE_CHECKING:
    from orchestrator.backends.running import Backend

# name -> "module:class". The order is the order `locate` asks them whether they hold a job.
_CLASSES = {
    "sagemaker": "orchestrator.backends.sagemaker.backend:SageMakerBackend",
    "batch": "orchestrator.backends.batch.backend:BatchBackend",
    "local": "orchestrator.backends.local.backend:LocalBackend",
}
_SHIPPED = tuple(_CLASSES)
# Each shipped backend's default seconds between polls: of `submit --wait` (its class's
# `wait_interval_s`) and between a sweep runner's rounds (`sweep_poll_s`). Stated here, beside
# its line above, so the class and the help of --interval and --poll read one value, the help
# without importing a backend. The floor under them is `polling`'s.
WAIT_INTERVAL_S = {"sagemaker": 15.0, "batch": 30.0, "local": 2.0}
SWEEP_POLL_S = {"sagemaker": 30.0, "batch": 60.0, "local": 2.0}
# Where a job that neither the ledger nor this machine knows is looked for: a job submitted
# from another machine is in the cloud.
DEFAULT = "sagemaker"


def names() -> tuple[str, ...]:
    """The backends' names, as job specs give them."""
    return tuple(_CLASSES)


def register(name: str, target: str) -> None:
    """Offer backend `name`, the class `target` ("module:class", imported when first asked
    for), after the shipped ones. InputError for a shipped backend's name."""
    if name in _SHIPPED:
        raise InputError(f"backend {name!r} is one of this package's", hint="register another name")
    module, colon, attribute = target.partition(":")
    if not (module and colon and attribute):
        raise InputError(f"backend {name!r}: {target!r} is not module:class")
    _CLASSES[name] = target


def unregister(name: str) -> None:
    """Withdraw a backend that `register` offered (nothing for a name it did not)."""
    if name not in _SHIPPED:
        _CLASSES.pop(name, None)


def backend_class(name: str) -> type[Backend]:
    """The class of backend `name` (its module imported now); InputError for an unknown name."""
    if name not in _CLASSES:
        raise InputError(f"unknown backend {name!r}", hint=f"use {' or '.join(_CLASSES)}")
    module, _, attribute = _CLASSES[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def cloud_names() -> tuple[str, ...]:
    """The backends whose jobs run in the cloud (`Planning.cloud`), DEFAULT first."""
    ordered = (DEFAULT, *(name for name in _CLASSES if name != DEFAULT))
    return tuple(name for name in ordered if backend_class(name).cloud)


def create(name: str, *, region: str | None = None, **options) -> Backend:
    """The backend called `name`, built by its class's `create` (boto3 is imported only for a
    cloud backend). `options` (clients, `ledger`, `sleep`, `poll_seconds`...) pass through:
    sagemaker builds the clients not given for `region`, with botocore's retry config; local
    does not use `region`."""
    return backend_class(name).create(region, **options)


@dataclass(frozen=True)
class Located:
    """Which backend has a job, as `locate` found it."""

    backend: Backend
    entry: object | None  # the job's ledger `Entry`, None when the ledger does not know it
    # Neither the ledger nor this machine knows the job: it is looked for in DEFAULT's backend
    # in the command's region, which may not have it either.
    guessed: bool = False


def locate(job_name: str, *, region: str | None, ledger) -> Located:
    """The backend that owns `job_name`: the one the ledger recorded, in the ledger's region;
    else one that holds the job on this machine (a local job whose ledger row is gone); else
    DEFAULT's in `region` (default: `region.default_region`), since a job submitted from
    another machine is in neither."""
    entry = ledger.get(job_name)
    if entry is not None:
        return Located(create(entry.backend, region=entry.region, ledger=ledger), entry)
    for name in _CLASSES:
        if backend_class(name).holds(job_name):
            return Located(create(name, ledger=ledger), None)
    from orchestrator.region import default_region

    return Located(create(DEFAULT, region=default_region(region), ledger=ledger), None, guessed=True)


