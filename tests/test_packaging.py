"""`pip install .`: a wheel built from this checkout, really installed into a throwaway virtual
environment, gives an `orchestrator` command that works from any folder, whose jobs carry the
installed entrypoints and whose `infra` finds its template.

Offline: the wheel is built without build isolation by this environment's setuptools (and
`wheel`, a dev dependency), and the throwaway environment sees this environment's packages
through a .pth file (a venv made by a venv's python would see the base interpreter's instead).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from orchestrator import request, spec

# Builds a wheel and a virtual environment: the slow tier (`make test-slow`).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
# What the wheel is built from: the files `git archive` would give a builder, no more.
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "orchestrator", "entrypoints", "infra")


def _run(argv: list, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """A venv with the wheel of this checkout installed: {"venv", "wheel", "env", "home"}."""
    base = tmp_path_factory.mktemp("install")
    source = base / "source"
    source.mkdir()
    for name in SOURCES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(
            ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                           if (ROOT / name).is_dir() else {}))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-q",
          "-w", base / "dist", source], cwd=base, env=env)
    [wheel] = (base / "dist").glob("*.whl")
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=base, env=env)
    python = venv / "bin" / "python"
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=base,
                        env=env).stdout.strip())
    # The dependencies (pydantic, boto3, ...) from this environment, after the venv's own packages.
    (purelib / "shared-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel],
         cwd=base, env=env)
    home = base / "home"
    return {"venv": venv, "wheel": wheel, "env": {**env, "ORCHESTRATOR_HOME": str(home)}, "home": home}


@pytest.fixture
def elsewhere(tmp_path) -> Path:
    """A folder outside the checkout holding the user's specs."""
    folder = tmp_path / "my-project"
    folder.mkdir()
    for name in ("local-tiny.yaml", "vit-trn1-2xlarge.yaml"):
        shutil.copy2(ROOT / "configs" / name, folder / name)
    return folder


@pytest.mark.timeout(600)
def test_the_installed_command_validates_and_plans_from_any_folder(installed, elsewhere):
    command, env = installed["venv"] / "bin" / "orchestrator", installed["env"]
    done = _run([command, "validate", "local-tiny.yaml"], cwd=elsewhere, env=env)
    assert done.stdout.strip() == "local-tiny.yaml: ok (local-tiny, local, ml.trn1.2xlarge x1)"
    done = _run([command, "validate", "vit-trn1-2xlarge.yaml"], cwd=elsewhere, env=env)
    assert done.stdout.strip() == "vit-trn1-2xlarge.yaml: ok (vit-trn1-2xlarge, sagemaker, ml.trn1.2xlarge x1)"
    done = _run([command, "plan", "--json", "vit-trn1-2xlarge.yaml"], cwd=elsewhere, env=env)
    planned = json.loads(done.stdout)
    # The same request and the same source archive, byte for byte, as this checkout makes: the
    # installed package packs its own (identical) entrypoints.
    here = request.prepare(spec.load(elsewhere / "vit-trn1-2xlarge.yaml"))
    assert planned["request"]["TrainingJobName"] == here.job_name
    assert planned["archive_sha256"] == here.archive_sha256
    # `python -m orchestrator` works there too.
    _run([installed["venv"] / "bin" / "python", "-m", "orchestrator", "validate", "local-tiny.yaml"], cwd=elsewhere,
         env=env)


@pytest.mark.timeout(600)
def test_the_installed_package_packs_its_own_entrypoints_and_finds_its_template(installed, elsewhere):
    probe = """
import io, json, tarfile
import entrypoints, orchestrator
from orchestrator import infra, request, spec
prepared = request.prepare(spec.load("local-tiny.yaml"))
names = tarfile.open(fileobj=io.BytesIO(prepared.archive)).getnames()
print(json.dumps({"orchestrator": orchestrator.__file__, "entrypoints": entrypoints.__file__, "names": names,
                  "template": str(infra.TEMPLATE), "resources": sorted(infra.load_template()["Resources"])}))
"""
    done = _run([installed["venv"] / "bin" / "python", "-c", probe], cwd=elsewhere, env=installed["env"])
    found = json.loads(done.stdout)
    venv = str(installed["venv"].resolve())
    for module in ("orchestrator", "entrypoints", "template"):
        assert found[module].startswith(venv), (module, found[module])  # the installed copy, not this checkout
    assert found["template"].endswith("orchestrator/data/stack.yaml")
    assert "OperatorPolicy" in found["resources"]
    names = set(found["names"])
    assert {"launch.py", "job.json", "requirements.txt", "entrypoints/launcher/launch.py", "entrypoints/shared/contract.py",
            "entrypoints/trainer/train.py"} <= names
    shipped = {f"entrypoints/{p.relative_to(ROOT / 'entrypoints').as_posix()}" for p in (ROOT / "entrypoints").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert {n for n in names if n.startswith("entrypoints/") and n.endswith(".py")} == shipped


def test_the_wheel_keeps_the_training_extras_optional(installed):
    with zipfile.ZipFile(installed["wheel"]) as wheel:
        [metadata] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [line for line in io.TextIOWrapper(wheel.open(metadata)).read().splitlines()
                    if line.startswith("Requires-Dist:")]
        entry_points = wheel.read(metadata.replace("METADATA", "entry_points.txt")).decode()
        names = wheel.namelist()
    training = [r for r in requires if r.split()[1].startswith(("torch", "timm"))]
    assert training and all('extra == "train"' in r for r in training), training
    assert any(r.startswith("Requires-Dist: pydantic") and "extra" not in r for r in requires)
    assert "orchestrator = orchestrator.cli:main" in entry_points
    assert "orchestrator/data/stack.yaml" in names and not any(n.startswith(("tests/", "infra/")) for n in names)
