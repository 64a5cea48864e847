"""`Calls`: what the code under test sent to AWS, read off boto3 clients before moto sees it, so
tests assert our requests rather than moto's echo."""

from __future__ import annotations

import copy


class Calls:
    """The parameters of every call the given clients make, as we passed them."""

    def __init__(self, *clients):
        self.calls: list[tuple[str, dict]] = []
        for client in clients:
            client.meta.events.register("provide-client-params.*.*", self._record)

    def _record(self, params, model, **_):
        self.calls.append((model.name, copy.deepcopy(params)))

    def named(self, operation: str) -> list[dict]:
        """The parameters of each call of `operation`, in order."""
        return [params for name, params in self.calls if name == operation]
