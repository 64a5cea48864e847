"""The backends a sweep's trials run on: one per backend name, each made once, when first needed.

Contract:
- A sweep's trials may run on different backends (`variants` vary `backend` with
  `instance.type`); every job of one trial runs on that trial's backend, in the sweep's one
  region. `Router.get(name)` returns the backend called `name`, creating it on first use
  (`backends.create`, or the factory given), so a sweep of SageMaker trials only never builds
  a Batch client, and `sweep status --no-refresh` builds none.
- `Router.of(backend, names)` serves every name in `names` with one given backend object (the
  single-backend sweeps of tests and of earlier callers; `History` passes a mixed sweep's only
  the backend's own name); a name it was not given raises InputError instead of sending a job
  to the wrong backend.
- `shared()` is the sweep's backends whose job lists are the truth (`Backend.shared`): the
  runner asks each of them for the sweep's jobs (adoption, jobs in flight elsewhere).
- The runner's logic stays backend-agnostic: it asks the router for the backend of a trial or
  of a ledger row, and uses only the `Backend` protocol on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from orchestrator.backends import Backend
from orchestrator.errors import InputError


class Router:
    """The backends of one sweep, by name (see the module docstring)."""

    def __init__(self, names: Iterable[str], make: Callable[[str], Backend] | None = None,
                 given: dict[str, Backend] | None = None):
        self.names = tuple(dict.fromkeys(names))
        self._make = make
        self._made: dict[str, Backend] = dict(given or {})

    @classmethod
    def of(cls, backend: Backend, names: Iterable[str]) -> Router:
        """A router that serves each of `names` with `backend` (no other backend is made)."""
        names = tuple(dict.fromkeys(names)) or (backend.name,)
        return cls(names, given={name: backend for name in names})

    @classmethod
    def create(cls, names: Iterable[str], *, region: str | None, ledger, **options) -> Router:
        """A router that makes each backend with `backends.create(name, region=..., ledger=...)`."""
        from orchestrator import backends

        return cls(names, lambda name: backends.create(name, region=region, ledger=ledger, **options))

    def get(self, name: str) -> Backend:
        """The backend called `name`, made on first use."""
        found = self._made.get(name)
        if found is not None:
            return found
        if self._make is None:
            raise InputError(f"this sweep has a trial on the {name} backend, which this run was not given",
                             hint=f"the sweep's backends are {', '.join(self.names)}")
        self._made[name] = self._make(name)
        return self._made[name]

    def all(self, names: Iterable[str] | None = None) -> list[Backend]:
        """Every backend of the sweep, or those of `names` (each made now if it was not yet)."""
        return [self.get(name) for name in (self.names if names is None else dict.fromkeys(names))]

    def shared(self, names: Iterable[str] | None = None) -> list[Backend]:
        """The backends (of `names`, default all) whose job lists other machines add to
        (`Backend.shared`)."""
        return [backend for backend in self.all(names) if backend.shared]

    @property
    def sweep_poll_s(self) -> float:
        """Seconds between a runner's rounds: the shortest of the sweep's backends' (read from
        the backend's class for one not made yet: nothing is made to answer)."""
        from orchestrator import backends

        return min(self._made[name].sweep_poll_s if name in self._made else backends.backend_class(name).sweep_poll_s
                   for name in self.names)
