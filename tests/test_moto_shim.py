"""tests/moto_shim.py is the one place that touches moto beyond its public API."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import moto_shim
import pytest

TESTS = Path(__file__).resolve().parent
# moto's public API as the tests use it: the decorator and the threaded server (its /moto-api/
# endpoints are called over HTTP).
PUBLIC = {"moto": {"mock_aws"}, "moto.server": {"ThreadedMotoServer"}}


@pytest.mark.parametrize("patch", sorted(moto_shim.NAMES))
def test_every_moto_name_the_shim_touches_exists_in_the_installed_moto(patch):
    for dotted in moto_shim.NAMES[patch]:
        moto_shim.find(dotted, patch)


def test_a_name_moto_no_longer_has_fails_naming_the_patch_and_both_versions():
    with pytest.raises(moto_shim.MotoChanged) as err:
        moto_shim.find("moto.batch.responses:BatchResponse.submitjob", "record request bodies")
    text = str(err.value)
    assert "tests/moto_shim.py, patch 'record request bodies'" in text
    assert "moto.batch.responses:BatchResponse.submitjob" in text
    assert f"moto {moto_shim.moto_version()}" in text and f"moto {moto_shim.WRITTEN_FOR}" in text
    with pytest.raises(moto_shim.MotoChanged, match="no moto.nowhere"):
        moto_shim.find("moto.nowhere:thing", "demo")


def test_a_patch_whose_target_moved_fails_at_the_start_of_the_test(monkeypatch):
    monkeypatch.setitem(moto_shim.NAMES, "record request bodies",
                        ("moto.sagemaker.responses:SageMakerResponse.create_training_job_v2",
                         "moto.batch.responses:BatchResponse.submit_job"))
    with pytest.raises(moto_shim.MotoChanged, match="record request bodies"):
        moto_shim.record_bodies(monkeypatch, "CreateTrainingJob")


def test_no_other_test_module_touches_moto_beyond_its_public_api():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == "moto_shim.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "moto":
                names = {alias.name for alias in node.names}
                if not names <= PUBLIC.get(node.module, set()):
                    found.append(f"{path.name}:{node.lineno} from {node.module} import {', '.join(sorted(names))}")
            elif isinstance(node, ast.Import):
                found += [f"{path.name}:{node.lineno} import {a.name}" for a in node.names
                          if a.name.split(".")[0] == "moto" and a.name not in PUBLIC]
    assert not found, "move these into tests/moto_shim.py:\n" + "\n".join(found)


def test_the_shim_names_the_moto_version_the_lock_installs():
    """A `make upgrade` that moves moto stops here until someone has read the patches against
    the new release (the tests above pass) and moved WRITTEN_FOR."""
    lock = (TESTS.parent / "uv.lock").read_text()
    locked = re.search(r'^name = "moto"\nversion = "([^"]+)"', lock, re.M).group(1)
    assert moto_shim.WRITTEN_FOR == locked, (
        f"uv.lock installs moto {locked}; tests/moto_shim.py says it was written against {moto_shim.WRITTEN_FOR}: "
        "check its patches against the new moto, then set WRITTEN_FOR")
