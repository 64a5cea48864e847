"""entrypoints.shared.compile_cache.tarstream: archives written deterministically and read by a strict
reader that refuses anything unsafe, truncated or too large, and writes nothing then."""

from __future__ import annotations

import gzip
import hashlib
import os
import tarfile
from pathlib import Path

import pytest
from compile_cache_harness import (
    ENTRY,
    INDUCTOR_KEY,
    KEY,
    files,
    good_entry_members,
    manifest,
    member,
    neuron_entry,
    plant,
    snapshot,
    tar_bytes,
)

from entrypoints.shared import compile_cache as cc
from entrypoints.shared.compile_cache import tarstream


def test_archives_read_by_tar_tools_and_long_names_survive(tmp_path):
    source = tmp_path / "src"
    long_dir = source / ("d" * 90) / ("e" * 90)
    long_dir.mkdir(parents=True)
    (long_dir / "kernel.so").write_bytes(b"long")
    (source / "ab").mkdir()
    (source / "ab" / "cab.py").write_bytes(os.urandom(700))
    (source / "ab" / "cab.py").chmod(0o755)
    uri = f"file://{tmp_path}/store"
    assert cc.push(uri, INDUCTOR_KEY, source).new_entries == 2
    entry = next(iter(manifest(uri, INDUCTOR_KEY)["entries"].values()))
    with tarfile.open(tmp_path / "store" / INDUCTOR_KEY.digest() / entry["archive"]) as archive:
        read = {m.name: (archive.extractfile(m).read(), m.mode) for m in archive.getmembers()}
    assert read == {f"{'d' * 90}/{'e' * 90}/kernel.so": (b"long", 0o644),
                    "ab/cab.py": ((source / "ab" / "cab.py").read_bytes(), 0o755)}
    pulled = cc.pull(uri, INDUCTOR_KEY, tmp_path / "dst")
    assert pulled.hit_entries == 2 and files(tmp_path / "dst") == files(source)
    assert os.stat(tmp_path / "dst" / "ab" / "cab.py").st_mode & 0o777 == 0o755


def test_archives_are_deterministic_and_content_addressed(tmp_path):
    source = tmp_path / "cache"
    neuron_entry(source, "a")
    neuron_entry(source, "b")
    stores = [f"file://{tmp_path}/s1", f"file://{tmp_path}/s2"]
    for uri in stores:
        cc.push(uri, KEY, source)
    archives = [manifest(uri)["entries"] for uri in stores]
    assert archives[0] == archives[1]
    entry = next(iter(archives[0].values()))
    data = (tmp_path / "s1" / KEY.digest() / entry["archive"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    assert entry["archive"] == f"archives/{entry['sha256']}.tar"


def hostile_cases(sandbox: Path, victim: Path) -> dict:
    good = good_entry_members()
    return {
        "absolute path": (good + [member(str(sandbox / "evil-abs"))], "absolute path"),
        "dot-dot": (good + [member(f"{ENTRY}/../../../evil-dotdot")], "'..'"),
        "symlink escape": (good + [member(f"{ENTRY}/link", tarfile.SYMTYPE, linkname=str(sandbox)),
                                   member(f"{ENTRY}/link/evil-through-link")], "symlink"),
        "relative symlink escape": (good + [member(f"{ENTRY}/up", tarfile.SYMTYPE, linkname="../../..")], "symlink"),
        "hardlink escape": (good + [member(f"{ENTRY}/model.hlo", tarfile.LNKTYPE, linkname=str(victim))],
                            "hard link"),
        "relative hardlink escape": (good + [member(f"{ENTRY}/h", tarfile.LNKTYPE, linkname="../../../victim")],
                                     "hard link"),
        "character device": (good + [member(f"{ENTRY}/null", tarfile.CHRTYPE, devmajor=1, devminor=3)],
                             "character device"),
        "block device": (good + [member(f"{ENTRY}/disk", tarfile.BLKTYPE, devmajor=8, devminor=0)], "block device"),
        "fifo": (good + [member(f"{ENTRY}/pipe", tarfile.FIFOTYPE)], "FIFO"),
        "not an entry": (good + [member("stray/evil.sh")], "not part of a neuronx-cc cache entry"),
        "not a module": (good + [member("neuronxcc-2.22.1/evil.sh")], "not part of a neuronx-cc cache entry"),
        "duplicate member": (good + [member(f"{ENTRY}/model.neff", data=b"second")], "appears twice"),
        "lock file": (good + [member(f"{ENTRY}/model.hlo_module.pb.lock", data=b"")], "lock file"),
        "file and folder": (good + [member(f"{ENTRY}/model.neff/inner")], "both a file and a folder"),
    }


@pytest.mark.parametrize("case", ["absolute path", "dot-dot", "symlink escape", "relative symlink escape",
                                  "hardlink escape", "relative hardlink escape", "character device",
                                  "block device", "fifo", "not an entry", "not a module",
                                  "duplicate member", "lock file", "file and folder"])
def test_hostile_archive_is_rejected_and_writes_nothing(tmp_path, case):
    sandbox = tmp_path / "sandbox"
    cache_dir = sandbox / "cache"
    victim = sandbox / "victim"
    cache_dir.mkdir(parents=True)
    victim.write_bytes(b"precious")
    members, reason = hostile_cases(sandbox, victim)[case]
    uri = f"file://{tmp_path}/store"
    plant(uri, tar_bytes(members))
    before = snapshot(tmp_path, cache_dir)
    pulled = cc.pull(uri, KEY, cache_dir)
    assert pulled.hit_entries == 0
    assert len(pulled.warnings) == 1 and "rejected" in pulled.warnings[0] and reason in pulled.warnings[0]
    assert snapshot(tmp_path, cache_dir) == before
    assert victim.read_bytes() == b"precious"
    assert list(cache_dir.iterdir()) == []


def test_hostile_archive_from_s3_is_rejected_too(moto_bucket, tmp_path):
    uri = f"s3://{moto_bucket}/cc"
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    plant(uri, tar_bytes(good_entry_members() + [member(f"{ENTRY}/../../../evil")]))
    pulled = cc.pull(uri, KEY, sandbox / "cache")
    assert pulled.hit_entries == 0 and "'..'" in pulled.warnings[0]
    assert [p.name for p in sandbox.iterdir()] == ["cache"]
    assert list((sandbox / "cache").iterdir()) == []


def test_size_bomb_beyond_max_bytes_is_rejected(tmp_path):
    uri = f"file://{tmp_path}/store"
    bomb = good_entry_members() + [member(f"{ENTRY}/huge", data=b"\0" * (2 * 2**20))]
    plant(uri, tar_bytes(bomb), entries={ENTRY: 10})  # the manifest lies about the size
    cache_dir = tmp_path / "cache"
    pulled = cc.pull(uri, KEY, cache_dir, max_bytes=2**20)
    assert pulled.hit_entries == 0 and "size limit" in pulled.warnings[0]
    assert list(cache_dir.iterdir()) == []


def test_too_many_members_is_rejected(tmp_path, monkeypatch):
    monkeypatch.setattr(tarstream, "MAX_MEMBERS", 5)
    uri = f"file://{tmp_path}/store"
    many = good_entry_members() + [member(f"{ENTRY}/f{i}") for i in range(5)]
    plant(uri, tar_bytes(many))
    pulled = cc.pull(uri, KEY, tmp_path / "cache")
    assert pulled.hit_entries == 0 and "more than 5 members" in pulled.warnings[0]


def test_truncated_gzip_is_rejected(tmp_path):
    uri = f"file://{tmp_path}/store"
    data = gzip.compress(tar_bytes(good_entry_members() + [member(f"{ENTRY}/big", data=os.urandom(200_000))]))
    truncated = data[: len(data) // 2]
    plant(uri, truncated, suffix=".tar.gz")  # its checksum matches: the gzip layer must notice
    cache_dir = tmp_path / "cache"
    pulled = cc.pull(uri, KEY, cache_dir)
    assert pulled.hit_entries == 0
    assert "rejected" in pulled.warnings[0] and ("truncated" in pulled.warnings[0] or "corrupt" in pulled.warnings[0])
    assert list(cache_dir.iterdir()) == []


def test_gzip_archive_is_accepted(tmp_path):
    uri = f"file://{tmp_path}/store"
    plant(uri, gzip.compress(tar_bytes(good_entry_members())), suffix=".tar.gz")
    pulled = cc.pull(uri, KEY, tmp_path / "cache")
    assert (pulled.hit_entries, pulled.warnings) == (1, [])
    assert (tmp_path / "cache" / ENTRY / "model.neff").read_bytes() == b"neff"


def test_truncated_tar_is_rejected(tmp_path):
    uri = f"file://{tmp_path}/store"
    data = tar_bytes(good_entry_members() + [member(f"{ENTRY}/big", data=os.urandom(200_000))])
    plant(uri, data[:100_000])
    pulled = cc.pull(uri, KEY, tmp_path / "cache")
    assert pulled.hit_entries == 0 and "truncated" in pulled.warnings[0]
