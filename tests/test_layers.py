"""The layout's rules (docs/ARCHITECTURE.md), read from the source: what may import what, how
long a module may grow, and that what the source cites exists. Every import counts, including
those inside functions."""

from __future__ import annotations

import ast
import io
import re
import tokenize
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


# The container side's three parts (docs/ARCHITECTURE.md) and which of them each may import.
ENTRYPOINT_PARTS = {"launcher": {"launcher", "shared"}, "trainer": {"trainer", "shared"},
                    "shared": {"shared"}}


def test_the_container_side_is_its_three_parts():
    """Every module of entrypoints/ lives in the launcher, the trainer or their shared part."""
    top = ROOT / "entrypoints"
    loose = sorted(p.name for p in top.glob("*.py") if p.name != "__init__.py")
    folders = {p.name for p in top.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert (loose, folders) == ([], set(ENTRYPOINT_PARTS))


@pytest.mark.parametrize("part", sorted(ENTRYPOINT_PARTS))
def test_the_launcher_and_the_trainer_meet_only_in_the_shared_part(part):
    """The launcher starts the trainer by its module name (torchrun's `-m`), never by importing
    it, nor the trainer the launcher; both import the shared part, which imports neither."""
    def forbidden(name: str) -> bool:
        parts = name.split(".")
        return parts[0] == "entrypoints" and (len(parts) == 1 or parts[1] not in ENTRYPOINT_PARTS[part])
    assert _offenders(f"entrypoints/{part}", forbidden) == {}


# The backend interface and its registry (issue 34): what callers of a backend may import of
# orchestrator/backends/, besides the package that re-exports them.
BACKEND_INTERFACE = ("orchestrator.backends.planning", "orchestrator.backends.running", "orchestrator.backends.job",
                     "orchestrator.backends.registry")


def _a_backend_implementation(name: str) -> bool:
    return name.startswith("orchestrator.backends.") and name not in BACKEND_INTERFACE


def test_results_reach_neither_the_sweep_runner_nor_a_backend_implementation():
    """results joins jobs by their names and the backend protocol only (issue 11)."""
    def forbidden(name: str) -> bool:
        return (name == "orchestrator.sweep" or name.startswith("orchestrator.sweep.")
                or _a_backend_implementation(name))
    assert _offenders("orchestrator/results", forbidden) == {}


@pytest.mark.parametrize("package", ["orchestrator/cli", "orchestrator/actions", "orchestrator/sweep",
                                     "orchestrator/results"])
def test_callers_use_the_backend_protocol_not_an_implementation(package):
    """The CLI, the actions under it, sweeps and results never branch on a backend: they import
    only the protocol."""
    assert _offenders(package, _a_backend_implementation) == {}


# What plans a job and sits below the backends' layers: it reaches a backend through the
# interface modules (no arrow climbs to the package orchestrator/backends/__init__.py).
BELOW_THE_BACKENDS = ("catalog.py", "cost.py", "doctor", "locations.py", "quotas.py", "spec", "follow.py",
                      "polling.py", "preferences.py", "request.py", "capacity", "results")


@pytest.mark.parametrize("part", BELOW_THE_BACKENDS)
def test_what_plans_a_job_imports_the_backend_interface_not_the_package(part):
    """Issue 34, item 1: catalog, cost, doctor, locations and quotas (and the rest below the
    backends) import `backends.planning`, `backends.running`, `backends.job` or the registry,
    never `orchestrator.backends` itself, whose re-exports are for the commands."""
    path = ROOT / "orchestrator" / part
    paths = _modules(f"orchestrator/{part}") if path.is_dir() else [path]
    # cloud_errors: how a cloud backend's errors read, in the layers below (pyproject.toml).
    allowed = {*BACKEND_INTERFACE, "orchestrator.backends.cloud_errors"}
    bad = {}
    for p in paths:
        hits = sorted(n for n in _imports(p) if n.startswith("orchestrator.backends.") and n not in allowed)
        hits += [f"{line}: the package" for line in _package_imports(p.read_text(), "orchestrator.backends")]
        if hits:
            bad[str(p.relative_to(ROOT))] = hits
    assert bad == {}


def _package_imports(source: str, package: str) -> list[int]:
    """Lines of `source` that import `package` itself or a name it re-exports (`import package`,
    `from package import Name`); `from package import submodule` imports only the submodule."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(alias.name == package for alias in node.names):
            found.append(node.lineno)
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == package
              and not all(_is_module(f"{package}.{alias.name}") for alias in node.names)):
            found.append(node.lineno)
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == package.rpartition(".")[0]
              and any(alias.name == package.rpartition(".")[2] for alias in node.names)):
            found.append(node.lineno)
    return sorted(found)


def test_the_package_import_reader_tells_the_package_from_its_modules():
    source = ("from orchestrator.backends import registry\nfrom orchestrator import backends\n"
              "from orchestrator.backends import JobStatus\nimport orchestrator.backends\n"
              "from orchestrator.backends.job import JobStatus\n")
    assert _package_imports(source, "orchestrator.backends") == [2, 3, 4]


def _backend_class_calls(source: str) -> list[int]:
    """Lines of `source` that call `backend_class(...)` (a name or an attribute)."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
                  and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "backend_class")


# Issue 34, item 2: the backend is looked up where a spec is validated (`JobSpec.backend_type`)
# and passed on; outside orchestrator/backends/ at most this many calls look one up by name.
MAX_BACKEND_CLASS_CALLS = 5


def test_the_backend_is_looked_up_once_not_asked_for_again_and_again():
    calls = {}
    for path in _modules("orchestrator"):
        if (ROOT / "orchestrator" / "backends") not in path.parents:
            lines = _backend_class_calls(path.read_text())
            if lines:
                calls[str(path.relative_to(ROOT))] = lines
    assert sum(map(len, calls.values())) <= MAX_BACKEND_CLASS_CALLS, calls


def test_the_backend_class_call_counter_sees_each_form():
    source = ("a = backends.backend_class(spec.backend).cloud\nb = backend_class('local')\n"
              "c = spec.backend_type\nd = backend_classes('x')\n")
    assert _backend_class_calls(source) == [1, 2]


def test_the_spec_imports_nothing_above_it():
    """What the user writes is read below everything that acts on it: spec/ imports only itself,
    errors, names, the region's pattern (the cron syntax a schedule must have lives in spec/,
    issue 24) and the lazy-import helper (`lazy_exports`), and asks a backend what it needs of a
    spec through the registry alone (`orchestrator.backends.registry`, never a backend's folder)."""
    allowed = ("orchestrator.spec", "orchestrator.errors", "orchestrator.names", "orchestrator.region",
               "orchestrator.lazy_exports")
    assert _offenders("orchestrator/spec", lambda name: name.startswith("orchestrator")
                      and name not in ("orchestrator", "orchestrator.backends", "orchestrator.backends.registry")
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
    assert "entrypoints.shared.results_schema" in _imports(ROOT / "orchestrator" / "results" / "read.py")
    source = "def f():\n    from orchestrator.backends import sagemaker\n    from . import rows\n    import json\n"
    assert _imports_of(source, "orchestrator.results") >= {
        "orchestrator.backends.sagemaker", "orchestrator.results.rows", "json"}
    assert _imports_of("from ..backends import local\n", "orchestrator.results") >= {"orchestrator.backends.local"}
    assert _imports_of("def f():\n    from ..launcher import torchrun\n", "entrypoints.trainer") >= {
        "entrypoints.launcher.torchrun"}


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


# A cited path: a file or folder of this repository's code, tests, benchmarks, docs or infra.
CITED_PATH = re.compile(
    r"(?<![\w./-])((?:orchestrator|entrypoints|tests|bench|docs|infra)/[\w./-]*[\w/])(?![\w*])")
# A cited container module, `entrypoints.<part>.<module>[.<name>]`.
CITED_MODULE = re.compile(r"(?<![\w./-])(entrypoints(?:\.[A-Za-z_]\w*)+)")
# Written when a wheel is built (setup.py copies infra/stack.yaml there), so not in a checkout.
BUILT = {"orchestrator/data/stack.yaml"}


def _prose(text: str, suffix: str) -> str:
    """What a file says to a reader: a Python file's comments and docstrings (its string
    literals are data, such as the made-up trees tests build), any other file whole."""
    if suffix != ".py":
        return text
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    said = [tok.string for tok in tokens if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            said += [doc] if doc else []
    return "\n".join(said)


def _defined_names(module: str) -> set[str]:
    """The top-level names a module of this repository defines or imports."""
    path = ROOT.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def _unresolved_module(dotted: str) -> str | None:
    """`dotted` if it names no module of this repository or no name in one, else None."""
    parts = dotted.split(".")
    known = max(i for i in range(len(parts) + 1) if i == 0 or _is_module(".".join(parts[:i])))
    if known == len(parts) or (known and parts[known].startswith("__")):
        return None
    if known and parts[known] in _defined_names(".".join(parts[:known])):
        return None
    return dotted


def _prose_files() -> list[Path]:
    files = [ROOT / name for name in ("README.md", "Makefile", "pyproject.toml", "setup.py", "MANIFEST.in")]
    for top in ("orchestrator", "entrypoints", "configs", "infra", "tests", "docs", "bench"):
        files += [p for p in (ROOT / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and "golden" not in p.parts and p.suffix in (".py", ".md", ".yaml", ".yml", ".toml", ".sh")]
    return files


def test_every_file_and_container_module_the_source_cites_exists():
    """Issue 24, item 6: a docstring, comment or doc that names a file or folder under docs/,
    orchestrator/, entrypoints/, tests/, bench/ or infra/, or a container module by its dotted
    name, names something this checkout has: a module moved or a doc renamed leaves no stale
    pointer behind."""
    missing = []
    for path in _prose_files():
        text = _prose(path.read_text(errors="replace"), path.suffix)
        where = path.relative_to(ROOT)
        paths = {m.group(1).rstrip("./") for m in CITED_PATH.finditer(text)}
        modules = {m.group(1).rstrip(".") for m in CITED_MODULE.finditer(text)}
        missing += [f"{where}: {cited}" for cited in paths if cited not in BUILT and not (ROOT / cited).exists()]
        missing += [f"{where}: {cited}" for cited in modules if _unresolved_module(cited)]
    assert sorted(missing) == []


def test_the_citation_reader_finds_paths_and_modules_and_tells_a_stale_one():
    """The check above is only as good as its reader."""
    source = ('"""See docs/ARCHITECTURE.md and `entrypoints.launch`."""\n'
              'X = "docs/nowhere.md"  # entrypoints/shared/\n')
    text = _prose(source, ".py")
    assert {m.group(1) for m in CITED_PATH.finditer(text)} == {"docs/ARCHITECTURE.md", "entrypoints/shared/"}
    assert [m.group(1) for m in CITED_MODULE.finditer(text)] == ["entrypoints.launch"]
    assert _unresolved_module("entrypoints.launch") == "entrypoints.launch"
    assert _unresolved_module("entrypoints.launcher.launch") is None
    assert _unresolved_module("entrypoints.shared.results_schema.Results") is None
    assert _unresolved_module("entrypoints.shared.compile_cache.key_for") is None
    assert _unresolved_module("entrypoints.shared.results_schema.NoSuchThing") is not None



BACKEND_NAMES = ("sagemaker", "batch", "local")  # the registry's (`orchestrator.backends.names`)


def _name_comparisons(source: str) -> list[int]:
    """Lines of `source` that compare a backend (a name or attribute that says "backend") with a
    backend's name written out (==, !=, in, not in; in a tuple, list or set too): a branch on a
    backend outside its folder. An AWS service's name (`arn["service"] != "batch"`) is not one."""
    def names_in(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in BACKEND_NAMES
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(names_in(item) for item in node.elts)
        return False

    def says_backend(node) -> bool:
        return any("backend" in (getattr(n, "id", None) or getattr(n, "attr", None) or "").lower()
                   for n in ast.walk(node))

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            parts = (node.left, *node.comparators)
            if any(names_in(part) for part in parts) and any(says_backend(part) for part in parts):
                found.append(node.lineno)
        elif isinstance(node, ast.Dict):
            # A table keyed by backends (what each says, does...): "local" and another backend's
            # name among its keys; an AWS service's table ("sagemaker", "batch") has no "local".
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if "local" in keys and keys & {"sagemaker", "batch"}:
                found.append(node.lineno)
    return found


def test_outside_its_folder_no_code_branches_on_a_backends_name():
    """Issue 24: the spec, the doctor, `request.prepare`, cost, the catalog and the CLI ask the
    backend (`orchestrator.backends.Backend`'s class-level hooks) instead of comparing names."""
    from orchestrator import backends

    assert set(backends.names()) == set(BACKEND_NAMES)
    found = {}
    for path in _modules("orchestrator"):
        if (ROOT / "orchestrator" / "backends") in path.parents:
            continue
        lines = _name_comparisons(path.read_text())
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert found == {}


def test_the_name_comparison_reader_sees_each_form():
    source = ('a = spec.backend == "batch"\nb = backend in ("sagemaker", "batch")\nc = "local" != backend_name\n'
              'd = kind.cloud\ne = mode == "tarball"\nf = arn["service"] != "batch"\n'
              'g = {"sagemaker": "in SageMaker", "local": "on this machine"}\nh = {"sagemaker": 1, "batch": 2}\n')
    assert _name_comparisons(source) == [1, 2, 3, 7]


def test_the_layers_hold_as_import_linter_reads_them(capsys):
    """The layer table of docs/ARCHITECTURE.md, as pyproject.toml's import-linter contracts: no
    upward import, no circle between layers, the container rule, the registry imports no backend."""
    from importlinter.cli import lint_imports

    kept = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    assert kept == 0, capsys.readouterr().out


def test_the_schedule_compiler_names_no_aws_service_and_imports_no_backend():
    """Issue 35: each cloud backend owns its part of a cloud schedule (`backends.scheduled`);
    schedule/ asks the registry and that contract, never a backend's folder, and holds no string
    naming a backend's service (a comparison or a table keyed on one)."""
    assert _offenders("orchestrator/schedule", lambda name: name.startswith("orchestrator.backends.")
                      and name not in ("orchestrator.backends.scheduled", *BACKEND_INTERFACE)) == {}
    found = []
    for path in (ROOT / "orchestrator" / "schedule").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in (
                    "sagemaker", "batch", "local"):
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert found == []
