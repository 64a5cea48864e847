"""Names a package exports, each imported from its submodule on first use (PEP 562).

A package whose `__init__` would otherwise import every submodule up front (and, through
them, pydantic models, the sweep runner or typer) lists its names in one table instead, and
its `__getattr__` imports a name's submodule only when the name is first asked for, so a
command loads no more than it uses (`validate` builds no sweep model, see tests/test_cli_main.py).

Contract:
- `module_getattr(package, exports)` returns a module-level `__getattr__` for `package`
  (its `__name__`): a name of `exports` (name -> submodule, relative to the package) is
  imported from `<package>.<submodule>` and kept in the package's namespace, so the next
  lookup is an ordinary attribute; any other name raises AttributeError, as a module does.
- `by_module({submodule: names})` is that table written the other way round, one line per
  submodule; a name listed twice is a ValueError (the table would be ambiguous).
- `load("module:attribute")` imports one attribute named in full (a registry's entry).

Standard library only: every layer may import it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def load(target: str) -> Any:
    """The attribute `target` names ("package.module:attribute"), its module imported now."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def by_module(names_of: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """{name: submodule} from {submodule: names}; ValueError for a name under two submodules."""
    table: dict[str, str] = {}
    for submodule, names in names_of.items():
        for name in names:
            if name in table:
                raise ValueError(f"{name!r} is listed under both {table[name]!r} and {submodule!r}")
            table[name] = submodule
    return table


def module_getattr(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of `package` that imports each name of `exports` on first use."""

    def __getattr__(name: str) -> Any:
        submodule = exports.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{submodule}"), name)
        # Kept in the package's namespace: the next lookup does not come here.
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
