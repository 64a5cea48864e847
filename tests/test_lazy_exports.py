"""lazy_exports: a package's names imported from their submodules on first use, once."""

from __future__ import annotations

import sys

import pytest

from orchestrator import lazy_exports


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package `lazypkg` whose `__init__` exports `A` from `one` and `B`, `C` from `two`."""
    root = tmp_path / "lazypkg"
    root.mkdir()
    (root / "__init__.py").write_text(
        "from orchestrator.lazy_exports import by_module, module_getattr\n"
        "_EXPORTS = by_module({'one': ('A',), 'two': ('B', 'C')})\n"
        "__getattr__ = module_getattr(__name__, _EXPORTS)\n")
    (root / "one.py").write_text("A = 'a'\n")
    (root / "two.py").write_text("B = 'b'\nC = ['c']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [m for m in sys.modules if m == "lazypkg" or m.startswith("lazypkg.")]:
        del sys.modules[name]


def test_a_name_is_imported_from_its_submodule_on_first_use_only(package):
    import lazypkg

    assert "lazypkg.one" not in sys.modules and "lazypkg.two" not in sys.modules
    assert lazypkg.A == "a"
    assert "lazypkg.one" in sys.modules and "lazypkg.two" not in sys.modules
    from lazypkg import C

    assert C is sys.modules["lazypkg.two"].C
    # Kept in the package's namespace: the next lookup is an ordinary attribute.
    assert vars(lazypkg)["A"] == "a" and vars(lazypkg)["C"] is C


def test_a_name_not_exported_is_an_attribute_error_naming_the_package(package):
    import lazypkg

    with pytest.raises(AttributeError, match="module 'lazypkg' has no attribute 'D'"):
        lazypkg.D  # noqa: B018
    with pytest.raises(ImportError):
        from lazypkg import D  # noqa: F401


def test_by_module_inverts_the_table_and_refuses_a_name_listed_twice():
    assert lazy_exports.by_module({"one": ("A", "B"), "two": ("C",)}) == {"A": "one", "B": "one", "C": "two"}
    with pytest.raises(ValueError, match="'B' is listed under both 'one' and 'two'"):
        lazy_exports.by_module({"one": ("A", "B"), "two": ("B",)})


def test_load_imports_one_attribute_named_in_full():
    import json

    assert lazy_exports.load("json:dumps") is json.dumps


@pytest.mark.parametrize("package_name", ["orchestrator.spec", "orchestrator.schedule", "orchestrator.cli"])
def test_every_exported_name_of_the_packages_that_use_it_exists(package_name):
    """A name in a package's table that its submodule lacks would fail only when first used."""
    import importlib

    module = importlib.import_module(package_name)
    table = {"orchestrator.cli": {"COMMANDS": "root", "app": "root"}}.get(package_name) or module._EXPORTS
    for name, submodule in table.items():
        assert getattr(module, name) is getattr(importlib.import_module(f"{package_name}.{submodule}"), name)
