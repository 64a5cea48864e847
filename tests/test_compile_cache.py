"""entrypoints/compile_cache/: keys, entries, pull/push on file:// and S3 (loopback moto),
concurrent and killed pushes, and hostile archives (docs/COMPILE_CACHE.md)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
import types
from pathlib import Path

import boto3
import pytest

from entrypoints import compile_cache as cc
from entrypoints import storage
from entrypoints.compile_cache import tarstream

ROOT = Path(__file__).resolve().parents[1]
KEY = cc.CacheKey("neuronx-cc", "2.22.1", "xla", "--model-type=transformer", "trn1", 2)
INDUCTOR_KEY = cc.CacheKey("inductor", "2.9.0+cpu", "native", "", "cpu", 2)


@pytest.fixture(params=["file", "s3"])
def store_uri(request, tmp_path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store"
    return f"s3://{request.getfixturevalue('moto_bucket')}/compile-cache"


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


# --- key ------------------------------------------------------------------------------

def test_digest_is_sanitised_and_depends_on_every_field():
    digest = cc.CacheKey("inductor", "2.9.0+cpu", "native", "A=1", "cpu", 2).digest()
    assert digest.startswith("inductor-2.9.0_cpu-")
    assert len(digest.rsplit("-", 1)[1]) == 16
    base = dict(kind="neuronx-cc", compiler_version="2.22.1", runtime="xla", flags="", target="trn1", world_size=2)
    digests = {cc.CacheKey(**base).digest()}
    for field, value in [("flags", "-O1"), ("target", "trn2"), ("world_size", 32), ("compiler_version", "2.23.0")]:
        digests.add(cc.CacheKey(**{**base, field: value}).digest())
    assert len(digests) == 5


@pytest.mark.parametrize("bad", [dict(kind="gcc"), dict(runtime="jax"), dict(world_size=0)])
def test_key_rejects_programming_errors(bad):
    fields = dict(kind="neuronx-cc", compiler_version="1", runtime="xla", flags="", target="trn1", world_size=1)
    with pytest.raises(ValueError):
        cc.CacheKey(**{**fields, **bad})


def test_key_for_xla_reads_the_compiler_version_and_drops_the_cache_dir(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    compiler = bin_dir / "neuronx-cc"
    compiler.write_text("#!/bin/sh\necho 'NeuronX Compiler version 2.22.12471.0+6ba3a2e1'\necho\n"
                        "echo 'Python version 3.12.3'\n")
    compiler.chmod(0o755)
    env = {"PATH": str(bin_dir), "NEURON_CC_FLAGS": "--cache_dir=/tmp/a --model-type=transformer -O1 --cache_dir /b"}
    key = cc.key_for("xla", "trn1", 32, env)
    assert key == cc.CacheKey("neuronx-cc", "2.22.12471.0+6ba3a2e1", "xla", "--model-type=transformer -O1", "trn1", 32)
    moved = cc.key_for("xla", "trn1", 32, {**env, "NEURON_CC_FLAGS": "--model-type=transformer --cache_dir=/c -O1"})
    assert moved.digest() == key.digest()


def test_key_for_xla_without_the_compiler():
    key = cc.key_for("xla", "trn2", 64, {"PATH": "/nonexistent"})
    assert (key.kind, key.compiler_version, key.flags, key.world_size) == ("neuronx-cc", "absent", "", 64)


def test_key_for_native_uses_torch_and_inductor_options(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="2.9.0+cpu"))
    env = {"TORCHINDUCTOR_CACHE_DIR": "/somewhere", "TORCHINDUCTOR_MAX_AUTOTUNE": "1",
           "TORCHINDUCTOR_FREEZING": "0", "PATH": "/bin"}
    key = cc.key_for("native", "cpu", 2, env)
    assert key == cc.CacheKey("inductor", "2.9.0+cpu", "native",
                              "TORCHINDUCTOR_FREEZING=0 TORCHINDUCTOR_MAX_AUTOTUNE=1", "cpu", 2)
    with pytest.raises(ValueError):
        cc.key_for("tpu", "cpu", 1, env)


# --- entries --------------------------------------------------------------------------

def test_only_complete_neuron_entries_count(tmp_path):
    good = neuron_entry(tmp_path, "1")
    neuron_entry(tmp_path, "2", state="failed")
    neuron_entry(tmp_path, "3", state="locked")
    in_flight = tmp_path / "neuronxcc-2.22.1" / "MODULE_4+4fe2a1"
    in_flight.mkdir()
    (in_flight / "model.neff").write_bytes(b"partial")  # no model.done yet
    linked = Path(tmp_path / neuron_entry(tmp_path, "5"))
    (linked / "escape").symlink_to("/etc/passwd")
    (tmp_path / "neuronxcc-2.22.1" / "not-a-module").mkdir()
    (tmp_path / "stray.lock").write_text("")
    assert set(cc.complete_entries(tmp_path, "neuronx-cc")) == {good}


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


def test_inductor_entries_are_files_without_locks_or_temporaries(tmp_path):
    expected = inductor_tree(tmp_path)
    assert set(cc.complete_entries(tmp_path, "inductor")) == expected


def test_entry_names_pull_would_refuse_never_travel(tmp_path):
    (tmp_path / "ok.py").write_bytes(b"x")
    (tmp_path / "with space.py").write_bytes(b"x")
    assert set(cc.complete_entries(tmp_path, "inductor")) == {"ok.py"}


# --- round trips ----------------------------------------------------------------------

def test_neuron_round_trip(store_uri, tmp_path):
    source = tmp_path / "job1"
    names = {neuron_entry(source, str(i), size=1000 * (i + 1)) for i in range(4)}
    neuron_entry(source, "failed", state="failed")
    neuron_entry(source, "locked", state="locked")
    pushed = cc.push(store_uri, KEY, source)
    assert (pushed.new_entries, pushed.archives, pushed.warnings) == (4, 1, [])
    assert pushed.bytes > 10_000
    doc = manifest(store_uri)
    assert doc["schema"] == 1 and doc["key"] == KEY.as_dict()
    assert set(doc["entries"]) == names
    archive = next(iter(doc["entries"].values()))["archive"]
    assert {entry["archive"] for entry in doc["entries"].values()} == {archive}
    assert doc["entries"][sorted(names)[0]]["bytes"] == 1000 + len(b"hlo 0") + len('["--target=trn1"]')

    target = tmp_path / "job2"
    pulled = cc.pull(store_uri, KEY, target)
    assert (pulled.hit_entries, pulled.archives, pulled.warnings) == (4, 1, [])
    assert pulled.bytes == pushed.bytes
    expected = {path: data for path, data in files(source).items() if path.split("/")[1] in
                {name.split("/")[1] for name in names}}
    assert files(target) == expected
    assert cc.complete_entries(target, "neuronx-cc").keys() == names
    # A second pull finds everything in place.
    again = cc.pull(store_uri, KEY, target)
    assert (again.hit_entries, again.bytes, again.warnings) == (0, 0, [])


def test_inductor_round_trip(store_uri, tmp_path):
    source = tmp_path / "inductor1"
    expected = inductor_tree(source)
    pushed = cc.push(store_uri, INDUCTOR_KEY, source)
    assert (pushed.new_entries, pushed.warnings) == (len(expected), [])
    target = tmp_path / "inductor2"
    pulled = cc.pull(store_uri, INDUCTOR_KEY, target)
    assert (pulled.hit_entries, pulled.warnings) == (len(expected), [])
    assert files(target) == {name: data for name, data in files(source).items() if name in expected}


def test_push_uploads_only_entries_missing_from_the_manifest(store_uri, tmp_path):
    source = tmp_path / "cache"
    first = {neuron_entry(source, "a"), neuron_entry(source, "b")}
    assert cc.push(store_uri, KEY, source).new_entries == 2
    assert cc.push(store_uri, KEY, source).new_entries == 0
    added = neuron_entry(source, "c")
    pushed = cc.push(store_uri, KEY, source)
    assert pushed.new_entries == 1
    doc = manifest(store_uri)
    assert set(doc["entries"]) == first | {added}
    second_archive = doc["entries"][added]["archive"]
    assert all(doc["entries"][name]["archive"] != second_archive for name in first)
    store = storage.open_store(store_uri)
    data = store.get_bytes(f"{KEY.digest()}/{second_archive}")
    assert len(data) == pushed.bytes
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        tops = {"/".join(member.name.split("/")[:2]) for member in archive.getmembers()}
    assert tops == {added}


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


def test_pull_keeps_local_entries(tmp_path):
    uri = f"file://{tmp_path}/store"
    source = tmp_path / "a"
    name = neuron_entry(source, "1")
    cc.push(uri, KEY, source)
    local = tmp_path / "b"
    neuron_entry(local, "1")
    before = files(local)
    pulled = cc.pull(uri, KEY, local)
    assert (pulled.hit_entries, pulled.archives, pulled.warnings) == (0, 0, [])
    assert files(local) == before
    assert name in cc.complete_entries(local, "neuronx-cc")


def test_missing_cache_is_a_quiet_cold_start(store_uri, tmp_path):
    pulled = cc.pull(store_uri, KEY, tmp_path / "cache")
    assert (pulled.hit_entries, pulled.bytes, pulled.archives, pulled.warnings) == (0, 0, 0, [])
    assert cc.push(store_uri, KEY, tmp_path / "empty").new_entries == 0


def test_unreachable_store_warns_instead_of_raising(moto_server, tmp_path):
    uri = "s3://no-such-bucket/cache"
    pulled = cc.pull(uri, KEY, tmp_path / "cache")
    assert pulled.hit_entries == 0 and "no-such-bucket" in pulled.warnings[0]
    source = tmp_path / "src"
    neuron_entry(source, "1")
    pushed = cc.push(uri, KEY, source)
    assert pushed.new_entries == 0 and "cache not pushed" in pushed.warnings[0]


def test_max_bytes_leaves_out_archives_too_large_before_downloading(tmp_path):
    uri = f"file://{tmp_path}/store"
    source = tmp_path / "src"
    neuron_entry(source, "1", size=50_000)
    cc.push(uri, KEY, source)
    pulled = cc.pull(uri, KEY, tmp_path / "cache", max_bytes=10_000)
    assert pulled.hit_entries == 0 and pulled.bytes == 0
    assert "max_bytes" in pulled.warnings[0]


def test_s3_multipart_push_and_ranged_pull(moto_bucket, tmp_path):
    client = boto3.client("s3")
    store = storage.open_store(f"s3://{moto_bucket}/mp", s3_client=client, multipart_threshold=2**20,
                               part_size=storage.MIN_PART_SIZE)
    source = tmp_path / "src"
    for i in range(3):
        neuron_entry(source, str(i), size=4 * 2**20)
    pushed = cc.push(store.uri_root, KEY, source, store=store)
    assert pushed.new_entries == 3 and pushed.bytes > 12 * 2**20
    archive = next(iter(manifest(store.uri_root)["entries"].values()))["archive"]
    head = client.head_object(Bucket=moto_bucket, Key=f"mp/{KEY.digest()}/{archive}")
    assert head["ETag"].strip('"').endswith("-3")  # uploaded in three parts
    ranges = []
    client.meta.events.register("before-parameter-build.s3.GetObject",
                                lambda params, **_: ranges.append(params.get("Range")))
    target = tmp_path / "dst"
    pulled = cc.pull(store.uri_root, KEY, target, store=store)
    assert (pulled.hit_entries, pulled.warnings) == (3, [])
    assert len([r for r in ranges if r]) == 3
    assert files(target) == files(source)
    assert not list(target.glob(".*"))  # the download spool went with the extraction folder


# --- concurrency ----------------------------------------------------------------------

class RacingStore:
    """A store that lets another push publish just before our first manifest write."""

    def __init__(self, inner, race):
        self._inner, self._race, self.raced = inner, race, False

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def put_bytes(self, key, data, **conditions):
        if key.endswith("/manifest.json") and not self.raced:
            self.raced = True
            self._race()
        return self._inner.put_bytes(key, data, **conditions)


@pytest.mark.parametrize("existing", [False, True])
def test_conflicting_publish_rereads_and_merges(store_uri, tmp_path, existing):
    if existing:
        base = tmp_path / "base"
        neuron_entry(base, "base")
        cc.push(store_uri, KEY, base)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    our_names = {neuron_entry(ours, "o1"), neuron_entry(ours, "shared")}
    their_names = {neuron_entry(theirs, "t1"), neuron_entry(theirs, "shared")}
    store = RacingStore(storage.open_store(store_uri), lambda: cc.push(store_uri, KEY, theirs))
    pushed = cc.push(store_uri, KEY, ours, store=store)
    assert store.raced
    assert pushed.warnings == []
    assert pushed.new_entries == 1  # "shared" was published by them first
    doc = manifest(store_uri)
    assert set(doc["entries"]) == our_names | their_names | ({"neuronxcc-2.22.1/MODULE_base+4fe2a1"} if existing else set())
    assert_manifests_name_only_present_archives(store_uri)
    pulled = cc.pull(store_uri, KEY, tmp_path / "fresh")
    assert pulled.hit_entries == len(doc["entries"]) and pulled.warnings == []


def _push_worker(store_uri: str, cache_dir: str, barrier) -> None:
    barrier.wait(timeout=120)
    stats = cc.push(store_uri, KEY, Path(cache_dir))
    if stats.warnings or stats.new_entries != 3:
        raise SystemExit(f"push went wrong: {stats}")


def test_eight_processes_pushing_at_once_end_with_the_union(store_uri, tmp_path):
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(8)
    expected = set()
    dirs = []
    for worker in range(8):
        cache_dir = tmp_path / f"worker{worker}"
        expected |= {neuron_entry(cache_dir, f"w{worker}e{i}") for i in range(3)}
        dirs.append(cache_dir)
    processes = [context.Process(target=_push_worker, args=(store_uri, str(d), barrier)) for d in dirs]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=240)
    assert [process.exitcode for process in processes] == [0] * 8
    doc = manifest(store_uri)
    assert set(doc["entries"]) == expected
    assert len({entry["archive"] for entry in doc["entries"].values()}) == 8
    assert_manifests_name_only_present_archives(store_uri)
    pulled = cc.pull(store_uri, KEY, tmp_path / "all")
    assert (pulled.hit_entries, pulled.archives, pulled.warnings) == (24, 8, [])


# --- killed pushes --------------------------------------------------------------------

class KilledBeforeTheManifest:
    """A store whose push dies (KeyboardInterrupt) once its archive is up, as it writes the manifest."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def put_bytes(self, key, data, **conditions):
        assert key.endswith("/manifest.json")
        raise KeyboardInterrupt("killed after the archive upload")


def test_push_dying_between_archive_and_manifest_leaves_no_dangling_reference(store_uri, tmp_path):
    source = tmp_path / "cache"
    neuron_entry(source, "1")
    dying = KilledBeforeTheManifest(storage.open_store(store_uri))
    with pytest.raises(KeyboardInterrupt):
        cc.push(store_uri, KEY, source, store=dying)
    store = storage.open_store(store_uri)
    archives = [info.key for info in store.list(f"{KEY.digest()}/archives/")]
    assert len(archives) == 1 and manifest(store_uri) is None
    assert cc.pull(store_uri, KEY, tmp_path / "cold").hit_entries == 0

    assert cc.push(store_uri, KEY, source).new_entries == 1
    neuron_entry(source, "2")
    with pytest.raises(KeyboardInterrupt):
        cc.push(store_uri, KEY, source, store=dying)
    assert len(manifest(store_uri)["entries"]) == 1
    assert_manifests_name_only_present_archives(store_uri)


PUSH_LOOP = """
import os, sys
from pathlib import Path
from entrypoints import compile_cache as cc
uri, cache = sys.argv[1], Path(sys.argv[2])
key = cc.CacheKey(**{k: (int(v) if k == "world_size" else v) for k, v in
                     (item.split("=", 1) for item in sys.argv[3:])})
print("ready", flush=True)
for i in range(10_000):
    folder = cache / "neuronxcc-2.22.1" / f"MODULE_{os.getpid()}x{i}+00"
    folder.mkdir(parents=True)
    (folder / "model.neff").write_bytes(os.urandom(3 * 2**20))
    (folder / "model.done").write_text("")
    cc.push(uri, key, cache)
"""


def test_push_killed_at_a_random_point_never_publishes_a_missing_archive(store_uri, tmp_path):
    rng = random.Random(20261130)  # random kill points, the same ones on every run
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    key_args = [f"{name}={value}" for name, value in KEY.as_dict().items()]
    delays = []
    for round_ in range(3):
        cache = tmp_path / f"cache{round_}"
        child = subprocess.Popen([sys.executable, "-c", PUSH_LOOP, store_uri, str(cache), *key_args], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        try:
            assert child.stdout.readline().strip() == b"ready", child.stderr.read()
            delays.append(rng.uniform(0.05, 1.5))
            time.sleep(delays[-1])
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL
        assert_manifests_name_only_present_archives(store_uri)
    doc = manifest(store_uri) or {"entries": {}}
    pulled = cc.pull(store_uri, KEY, tmp_path / "after")
    assert pulled.warnings == [], delays
    assert pulled.hit_entries == len(doc["entries"])


# --- hostile archives -----------------------------------------------------------------

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


@pytest.mark.parametrize("where", ["content", "header"])
def test_corrupted_bytes_fail_the_checksum(store_uri, tmp_path, where):
    source = tmp_path / "src"
    neuron_entry(source, "1")
    cc.push(store_uri, KEY, source)
    store = storage.open_store(store_uri)
    archive = next(iter(manifest(store_uri)["entries"].values()))["archive"]
    data = bytearray(store.get_bytes(f"{KEY.digest()}/{archive}"))
    data[2000 if where == "content" else 600] ^= 0xFF
    store.put_bytes(f"{KEY.digest()}/{archive}", bytes(data))
    cache_dir = tmp_path / "cache"
    pulled = cc.pull(store_uri, KEY, cache_dir)
    assert pulled.hit_entries == 0 and "rejected" in pulled.warnings[0]
    assert list(cache_dir.iterdir()) == []


def test_missing_archive_warns(tmp_path):
    uri = f"file://{tmp_path}/store"
    source = tmp_path / "src"
    neuron_entry(source, "1")
    cc.push(uri, KEY, source)
    for path in (tmp_path / "store").rglob("*.tar"):
        path.unlink()
    pulled = cc.pull(uri, KEY, tmp_path / "cache")
    assert pulled.hit_entries == 0 and "missing" in pulled.warnings[0]


def test_hostile_manifest_entries_are_dropped(tmp_path):
    uri = f"file://{tmp_path}/store"
    data = tar_bytes(good_entry_members())
    sha = hashlib.sha256(data).hexdigest()
    plant(uri, data)
    store = storage.open_store(uri)
    doc = json.loads(store.get_bytes(f"{KEY.digest()}/manifest.json"))
    doc["entries"]["../../etc/MODULE_x"] = {"archive": f"archives/{sha}.tar", "sha256": sha, "bytes": 1}
    doc["entries"]["neuronxcc-2.22.1/MODULE_2+x"] = {"archive": "../../elsewhere.tar", "sha256": sha, "bytes": 1}
    store.put_bytes(f"{KEY.digest()}/manifest.json", json.dumps(doc).encode())
    pulled = cc.pull(uri, KEY, tmp_path / "sandbox" / "cache")
    assert pulled.hit_entries == 1
    assert len(pulled.warnings) == 2 and all("ignored" in w for w in pulled.warnings)
    assert [p.name for p in (tmp_path / "sandbox").iterdir()] == ["cache"]


@pytest.mark.parametrize("raw", [b"not json", b'{"schema": 99, "entries": {}}', b"[]"])
def test_unusable_manifest_runs_cold_and_the_next_push_replaces_it(tmp_path, raw):
    uri = f"file://{tmp_path}/store"
    store = storage.open_store(uri)
    store.put_bytes(f"{KEY.digest()}/manifest.json", raw)
    pulled = cc.pull(uri, KEY, tmp_path / "cache")
    assert pulled.hit_entries == 0 and "running cold" in pulled.warnings[0]
    source = tmp_path / "src"
    neuron_entry(source, "1")
    pushed = cc.push(uri, KEY, source)
    assert pushed.new_entries == 1 and "replacing it" in pushed.warnings[0]
    assert cc.pull(uri, KEY, tmp_path / "cache").hit_entries == 1


def test_manifest_of_another_key_is_not_trusted(tmp_path):
    uri = f"file://{tmp_path}/store"
    source = tmp_path / "src"
    neuron_entry(source, "1")
    cc.push(uri, KEY, source)
    other = cc.CacheKey("neuronx-cc", "2.22.1", "xla", "-O3", "trn1", 2)
    store = storage.open_store(uri)
    store.put_bytes(f"{other.digest()}/manifest.json", store.get_bytes(f"{KEY.digest()}/manifest.json"))
    pulled = cc.pull(uri, other, tmp_path / "cache")
    assert pulled.hit_entries == 0 and "another cache key" in pulled.warnings[0]


def test_stale_temporaries_of_a_killed_pull_are_removed(tmp_path):
    cache_dir = tmp_path / "cache"
    stale = cache_dir / ".cache-pull-old"
    fresh = cache_dir / ".cache-pull-new"
    stale.mkdir(parents=True)
    fresh.mkdir()
    old = time.time() - 2 * cc.STALE_TEMP_S
    os.utime(stale, (old, old))
    cc.pull(f"file://{tmp_path}/store", KEY, cache_dir)
    assert not stale.exists() and fresh.exists()
