"""The layout's rules (docs/ARCHITECTURE.md), read from the source: what may import what, and
how long a module may grow. Every import counts, including those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# One concept per module: about 600 lines at most (docs/ARCHITECTURE.md).
MAX_MODULE_LINES = 600


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, absolute names, relative imports resolved."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    return _imports_of(path.read_text(), package)


def _imports_of(source: str, package: str) -> set[str]:
    tree = ast.parse(source)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            # `from orchestrator import sweep` imports the module orchestrator.sweep (a name
            # that is a module of this repository; a class or function is not one).
            found |= {f"{base}.{alias.name}" for alias in node.names if _is_module(f"{base}.{alias.name}")}
    return found


def _offenders(package: str, forbidden) -> dict[str, list[str]]:
    bad = {}
    for path in _modules(package):
        hits = sorted(name for name in _imports(path) if forbidden(name))
        if hits:
            bad[str(path.relative_to(ROOT))] = hits
    return bad


def test_the_container_side_never_imports_the_orchestrator():
    """The training image has our entrypoints/ and none of orchestrator/'s dependencies."""
    assert _offenders("entrypoints", lambda name: name == "orchestrator" or name.startswith("orchestrator.")) == {}


def test_results_reach_neither_the_sweep_runner_nor_a_backend_implementation():
    """results joins jobs by their names and the backend protocol only (issue 11)."""
    def forbidden(name: str) -> bool:
        return (name == "orchestrator.sweep" or name.startswith("orchestrator.sweep.")
                or name.startswith("orchestrator.backends."))
    assert _offenders("orchestrator/results", forbidden) == {}


@pytest.mark.parametrize("package", ["orchestrator/cli", "orchestrator/sweep", "orchestrator/results"])
def test_callers_use_the_backend_protocol_not_an_implementation(package):
    """The CLI, sweeps and results never branch on a backend: they import only the protocol."""
    assert _offenders(package, lambda name: name.startswith("orchestrator.backends.")) == {}


def test_the_spec_imports_nothing_above_it():
    """What the user writes is read below everything that acts on it: spec/ imports only itself,
    errors and names (the cron syntax a schedule must have lives in spec/, issue 24)."""
    allowed = ("orchestrator.spec", "orchestrator.errors", "orchestrator.names")
    assert _offenders("orchestrator/spec", lambda name: name.startswith("orchestrator")
                      and not any(name == a or name.startswith(a + ".") for a in allowed)) == {}


def test_results_columns_and_render_import_one_way():
    """render shows the columns that columns.py chooses; columns.py knows nothing of render
    (issue 24: they imported each other, one through a function-level import)."""
    assert "orchestrator.results.render" not in _imports(ROOT / "orchestrator" / "results" / "columns.py")


def test_one_module_classifies_aws_errors():
    """What a botocore error means is aws_errors' alone (issue 24): no other module of the
    orchestrator keeps a table of error codes (a *_CODES set) or matches throttling by its words.
    (schedule/statemachine's RETRY_ERRORS are Step Functions' own error names for the retries it
    runs in AWS, not a reading of a botocore error.)"""
    found = []
    for path in _modules("orchestrator"):
        if path.name == "aws_errors.py":
            continue
        text = path.read_text()
        found += [f"{path.relative_to(ROOT)}: {word}" for word in ("_CODES = ", "\"Throttl\" in")
                  if word in text]
    assert found == []


def test_no_module_holds_more_than_one_concepts_worth_of_lines():
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
               for package in ("orchestrator", "entrypoints") for p in _modules(package)}
    assert {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES} == {}


def test_the_import_reader_sees_imports_inside_functions_and_relative_ones():
    """The rules above are only as good as this reader: it must not miss a lazy import."""
    assert "entrypoints.results_schema" in _imports(ROOT / "orchestrator" / "results" / "read.py")
    source = "def f():\n    from orchestrator.backends import sagemaker\n    from . import rows\n    import json\n"
    assert _imports_of(source, "orchestrator.results") >= {
        "orchestrator.backends.sagemaker", "orchestrator.results.rows", "json"}
    assert _imports_of("from ..backends import local\n", "orchestrator.results") >= {"orchestrator.backends.local"}


def test_the_product_cites_its_own_files_and_primary_sources():
    """Issue 22, must-hold 8: nothing shipped or tested names files outside this repository
    (the team's shared notes) as a source; data files and comments cite AWS's docs, botocore's
    model or this repository's docs."""
    outside = ("FACTS" + ".md", "DESIGN" + ".md")  # split so this file does not match itself
    found = []
    for top in ("orchestrator", "entrypoints", "configs", "infra", "tests", "docs", "bench"):
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".json", ".yaml",
                                                                                     ".yml", ".md", ".txt", ".sh"):
                text = path.read_text(errors="replace")
                found += [f"{path.relative_to(ROOT)}: {name}" for name in outside if name in text]
    for name in ("README.md", "Makefile", "pyproject.toml"):
        text = (ROOT / name).read_text()
        found += [f"{name}: {n}" for n in outside if n in text]
    assert found == []
