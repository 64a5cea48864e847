"""What the compile cache's tests share: keys, cache trees as the compilers leave them, the
store's manifest, and hand-made (hostile) archives planted in a store."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

from entrypoints.shared import compile_cache as cc
from entrypoints.shared import storage

KEY = cc.CacheKey("neuronx-cc", "2.22.1", "xla", "--model-type=transformer", "trn1", 2)


INDUCTOR_KEY = cc.CacheKey("inductor", "2.9.0+cpu", "native", "", "cpu", 2)


def neuron_entry(root: Path, module: str, *, state: str = "complete", size: int = 2048,
                 version: str = "2.22.1") -> str:
    """A Neuron cache entry as the compiler leaves it; returns its entry name."""
    folder = root / f"neuronxcc-{version}" / f"MODULE_{module}+4fe2a1"
    folder.mkdir(parents=True)
    (folder / "model.hlo_module.pb").write_bytes(b"hlo " + module.encode())
    (folder / "compile_flags.json").write_text('["--target=trn1"]')
    if state == "failed":
        (folder / "model.log").write_text("ERROR: compilation failed")
    else:
        (folder / "model.neff").write_bytes(os.urandom(size))
        (folder / "model.done").write_text("")
    if state == "locked":
        (folder / "model.hlo_module.pb.lock").write_text("")
    return f"neuronxcc-{version}/{folder.name}"


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def manifest(store_uri: str, key: cc.CacheKey = KEY) -> dict | None:
    raw = storage.open_store(store_uri).get_bytes(f"{key.digest()}/manifest.json")
    return None if raw is None else json.loads(raw)


def assert_manifests_name_only_present_archives(store_uri: str) -> None:
    store = storage.open_store(store_uri)
    for info in store.list(with_etags=False):
        if info.key.endswith("/manifest.json"):
            folder = info.key.rsplit("/", 1)[0]
            doc = json.loads(store.get_bytes(info.key))
            for name, entry in doc["entries"].items():
                assert store.exists(f"{folder}/{entry['archive']}"), f"{name} names a missing {entry['archive']}"


def inductor_tree(root: Path) -> set[str]:
    """A TORCHINDUCTOR_CACHE_DIR as torch 2.9 leaves it on CPU; returns the entries expected."""
    layout = {
        "rj/crjt3fbg.so": b"\x7fELF", "rj/crjt3fbg.cpp": b"int main;", "rj/crjhr5lq.py": b"# kernel",
        "fxgraph/ev/feviasg/hyprx7iu": b"graph", "fxgraph/ev/feviasg/j2wd3u5u": b"graph 2",
        "aotautograd/auawdoll/r3arkwu4": b"aot", "triton/0/abc/kernel.cubin": b"cubin",
        "triton/0/abc/__grp__kernel.json": b"{}",
    }
    temporaries = {
        "locks/crjt3fbg.lock": b"", "rj/.1234.5678.tmp": b"half", "fxgraph/ev/feviasg/x.tmp": b"",
        "triton/0/tmp.pid_1_2/kernel.cubin": b"partial", "w7/cw7tud.so": b"in flight", "w7/cw7tud.so.lock": b"",
    }
    for name, data in {**layout, **temporaries}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return set(layout)


ENTRY = "neuronxcc-2.22.1/MODULE_1+4fe2a1"


def tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = b"payload", **fields):
    info = tarfile.TarInfo(name)
    info.type = kind
    for field, value in fields.items():
        setattr(info, field, value)
    return info, (data if kind == tarfile.REGTYPE else None)


def good_entry_members() -> list:
    return [member(ENTRY, tarfile.DIRTYPE), member(f"{ENTRY}/model.neff", data=b"neff"),
            member(f"{ENTRY}/model.done", data=b"")]


def plant(store_uri: str, stored: bytes, *, sha: str | None = None, suffix: str = ".tar",
          entries: dict[str, int] | None = None) -> None:
    """Put `stored` where a manifest names it as the archive holding `entries`."""
    sha = sha or hashlib.sha256(stored).hexdigest()
    store = storage.open_store(store_uri)
    archive = f"archives/{sha}{suffix}"
    store.put_bytes(f"{KEY.digest()}/{archive}", stored)
    doc = cc.new_manifest(KEY)
    for name, size in (entries or {ENTRY: 4}).items():
        doc["entries"][name] = {"archive": archive, "sha256": sha, "bytes": size}
    store.put_bytes(f"{KEY.digest()}/manifest.json", json.dumps(doc).encode())


def snapshot(root: Path, skip: Path) -> dict[str, tuple[int, float]]:
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime) for p in root.rglob("*")
            if skip not in p.parents and p != skip}
