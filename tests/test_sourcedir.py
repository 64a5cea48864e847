"""The source archive: byte-for-byte reproducible, with the layout the container entrypoint runs."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from job_waits import patience

from entrypoints.shared import contract
from orchestrator import sourcedir
from orchestrator.errors import OrchestratorError

JOB = {"schema": 1, "job_name": "vit-abc-1a2b3c4d", "spec_hash": "f" * 64, "spec": {"name": "vit-abc"},
       "instance": {"type": "ml.trn1.2xlarge"}, "workers_per_node": 2,
       "compile_cache": {"uri": None, "mode": "off"}, "results_uri": None, "environment": {}, "tags": {}}


@pytest.fixture
def fake_root(tmp_path) -> Path:
    root = tmp_path / "entrypoints"
    for folder in ("sub", "launcher", "trainer", "__pycache__"):
        (root / folder).mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "launcher" / "launch.py").write_text("print('launch')\n")
    (root / "trainer" / "train.py").write_text("print('train')\n")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "helper.py").write_text("X = 1\n")
    (root / "__pycache__" / "train.cpython-312.pyc").write_bytes(b"\0junk")
    (root / "notes.txt").write_text("not python")
    return root


def _members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return tar.getmembers()


def _read(data: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return tar.extractfile(name).read()


def test_same_inputs_give_the_same_bytes(fake_root):
    first = sourcedir.build_archive(JOB, root=fake_root)
    # Touching the files (new mtimes) must not change anything.
    for path in fake_root.rglob("*.py"):
        path.touch()
    second = sourcedir.build_archive(JOB, root=fake_root)
    assert first == second
    assert sourcedir.archive_sha256(first) == sourcedir.archive_sha256(second)


def test_entries_are_sorted_with_fixed_owners_times_and_modes(fake_root):
    members = _members(sourcedir.build_archive(JOB, root=fake_root))
    names = [m.name for m in members]
    assert names == sorted(names)
    for m in members:
        assert m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" and m.gname == ""
        assert m.mode == (0o755 if m.isdir() else 0o644)


def test_gzip_header_has_no_name_and_no_time(fake_root):
    data = sourcedir.build_archive(JOB, root=fake_root)
    assert data[:2] == b"\x1f\x8b"
    flags, mtime = data[3], int.from_bytes(data[4:8], "little")
    assert flags & 0x08 == 0  # FNAME
    assert mtime == 0
    assert gzip.decompress(data)  # a valid stream


def test_contents_layout(fake_root):
    data = sourcedir.build_archive(JOB, root=fake_root)
    names = {m.name for m in _members(data) if m.isfile()}
    assert names == {
        "launch.py", "job.json", "requirements.txt",
        "entrypoints/__init__.py", "entrypoints/launcher/launch.py", "entrypoints/trainer/train.py",
        "entrypoints/sub/__init__.py", "entrypoints/sub/helper.py",
    }
    dirs = {m.name for m in _members(data) if m.isdir()}
    assert dirs == {"entrypoints", "entrypoints/launcher", "entrypoints/sub", "entrypoints/trainer"}
    # The container runs the archive root's launch.py: a copy of the package's.
    assert _read(data, "launch.py") == (fake_root / "launcher" / "launch.py").read_bytes()
    assert json.loads(_read(data, contract.JOB_FILE)) == JOB
    requirements = _read(data, "requirements.txt").decode().split()
    assert any(r.startswith("timm>=") and "<" in r for r in requirements)
    assert not any(r.startswith(("torch", "torch-xla")) for r in requirements)


def test_content_changes_change_the_hash(fake_root):
    base = sourcedir.archive_sha256(sourcedir.build_archive(JOB, root=fake_root))
    other_job = sourcedir.archive_sha256(sourcedir.build_archive(dict(JOB, job_name="vit-abc-other"), root=fake_root))
    (fake_root / "trainer" / "train.py").write_text("print('changed')\n")
    other_source = sourcedir.archive_sha256(sourcedir.build_archive(JOB, root=fake_root))
    assert len({base, other_job, other_source}) == 3


def test_missing_launch_py_is_a_clear_error(fake_root):
    (fake_root / "launcher" / "launch.py").unlink()
    with pytest.raises(OrchestratorError) as info:
        sourcedir.build_archive(JOB, root=fake_root)
    assert str(fake_root / "launcher" / "launch.py") in info.value.message and info.value.hint


def test_real_entrypoints_package_is_packed_whole(tmp_path):
    root = sourcedir.entrypoints_dir()
    data = sourcedir.build_archive(JOB)
    names = {m.name for m in _members(data) if m.isfile()}
    expected = {f"entrypoints/{p.relative_to(root).as_posix()}" for p in root.rglob("*.py")
                if "__pycache__" not in p.parts}
    assert expected <= names
    assert "entrypoints/shared/contract.py" in names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert _read(data, "launch.py") == (root / "launcher" / "launch.py").read_bytes()
    # Unpacked as the container entrypoint does, the program imports its package from its folder.
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run([sys.executable, "-c", "import entrypoints.shared.contract as c; print(c.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=patience(60), check=True)
    assert Path(found.stdout.strip()).resolve() == (tmp_path / "entrypoints" / "shared" / "contract.py").resolve()
    # The container runs `python3 <code>/launch.py` from another folder and with no PYTHONPATH
    # (contract.container_entrypoint, bootstrap.script): the copy at the root finds the package
    # beside it, whose launcher lives one folder down.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    started = subprocess.run([sys.executable, str(tmp_path / contract.PROGRAM), "--help"], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=patience(60))
    assert started.returncode == 0, started.stderr
    assert "--container" in started.stdout


@pytest.mark.parametrize("padding", [0, 1, 511, 512, 9000, 20000])
def test_the_archive_is_the_same_tar_stream_whatever_the_job_size(fake_root, padding):
    job = dict(JOB, note="x" * padding)
    assert gzip.decompress(sourcedir.build_archive(job, root=fake_root)) == sourcedir.tar_stream(job, fake_root)
    real = sourcedir.entrypoints_dir()
    assert gzip.decompress(sourcedir.build_archive(job)) == sourcedir.tar_stream(job, real)


def test_the_shared_code_is_compressed_once_for_many_jobs(fake_root, monkeypatch):
    """Issue 22, item 9: a plan of many trials gzips the code once, each job.json on its own."""
    sizes: list[int] = []
    real_gzip = sourcedir._gzip
    monkeypatch.setattr(sourcedir, "_gzip", lambda data: sizes.append(len(data)) or real_gzip(data))
    monkeypatch.setattr(sourcedir, "_CODE", {})
    sourcedir._end.cache_clear()
    for i in range(50):
        sourcedir.build_archive(dict(JOB, job_name=f"vit-abc-{i}"), root=fake_root)
    # 2 shared members once, job.json per job, the end blocks once per length (here one).
    assert len(sizes) == 2 + 50 + 1
    # An edited file is packed anew (its size and mtime are the key).
    (fake_root / "trainer" / "train.py").write_text("print('changed!')\n")
    sizes.clear()
    data = sourcedir.build_archive(JOB, root=fake_root)
    assert len(sizes) in (3, 4) and _read(data, "entrypoints/trainer/train.py") == b"print('changed!')\n"


def test_prepared_archives_share_the_code_and_hash_as_the_whole_bytes(fake_root):
    """A plan holds each trial's archive as parts (the code one object for all): the same bytes
    and the same sha256 as the archive built and hashed whole."""
    first = sourcedir.build_parts(JOB, root=fake_root)
    second = sourcedir.build_parts(dict(JOB, job_name="vit-abc-2"), root=fake_root)
    for parts, job in ((first, JOB), (second, dict(JOB, job_name="vit-abc-2"))):
        whole = sourcedir.build_archive(job, root=fake_root)
        assert parts.data() == whole and parts.size == len(whole)
        assert parts.sha256 == sourcedir.archive_sha256(whole)
    assert first.sha256 != second.sha256
    assert first.parts[0] is second.parts[0] and first.parts[2] is second.parts[2]  # one copy of the code


def test_a_plan_looks_at_the_package_files_once_for_all_its_archives(fake_root, monkeypatch):
    """Within `same_sources` (a sweep plan) the files are stat'ed once, not once per trial; the
    archives are the same bytes as built one by one."""
    import os

    looked = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: looked.append(path) or real_stat(path, *a, **k))
    jobs = [dict(JOB, job_name=f"vit-abc-{i}") for i in range(20)]
    with sourcedir.same_sources():
        held = [sourcedir.build_archive(job, root=fake_root) for job in jobs]
    launch = str(fake_root / "launcher" / "launch.py")
    once = looked.count(launch)
    looked.clear()
    alone = [sourcedir.build_archive(job, root=fake_root) for job in jobs]
    assert held == alone
    assert once == 1 and looked.count(launch) == 20  # every archive alone looks at every file again


def test_gnu_tar_unpacks_the_multi_member_archive(fake_root, tmp_path):
    """The container runs `tar -xzf` on it (`contract.container_entrypoint`)."""
    import shutil

    if shutil.which("tar") is None:
        pytest.skip("no tar here")
    archive = tmp_path / "sourcedir.tar.gz"
    archive.write_bytes(sourcedir.build_archive(JOB, root=fake_root))
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(out)], check=True)
    assert json.loads((out / contract.JOB_FILE).read_text()) == JOB
    assert (out / "entrypoints" / "sub" / "helper.py").read_text() == "X = 1\n"


def test_a_file_added_or_removed_after_an_archive_is_packed_anew(fake_root):
    sourcedir.build_archive(JOB, root=fake_root)
    (fake_root / "sub" / "extra.py").write_text("Y = 2\n")
    names = {m.name for m in _members(sourcedir.build_archive(JOB, root=fake_root))}
    assert "entrypoints/sub/extra.py" in names
    (fake_root / "sub" / "extra.py").unlink()
    names = {m.name for m in _members(sourcedir.build_archive(JOB, root=fake_root))}
    assert "entrypoints/sub/extra.py" not in names
