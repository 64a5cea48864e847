"""entrypoints.shared.compile_cache pull and push (docs/COMPILE_CACHE.md): round trips on file:// and
S3 (loopback moto), concurrent and killed pushes, checksums, missing archives. The key,
entries, the tar stream and the manifest have test files of their own."""

from __future__ import annotations

import io
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import boto3
import pytest
from compile_cache_harness import (
    INDUCTOR_KEY,
    KEY,
    assert_manifests_name_only_present_archives,
    files,
    inductor_tree,
    manifest,
    neuron_entry,
)
from job_waits import patience

from entrypoints.shared import compile_cache as cc
from entrypoints.shared import storage

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["file", "s3"])
def store_uri(request, tmp_path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store"
    return f"s3://{request.getfixturevalue('moto_bucket')}/compile-cache"


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


def _push_worker(store_uri: str, cache_dir: str, barrier) -> None:
    barrier.wait(timeout=patience(120))
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
        process.join(timeout=patience(240))
    assert [process.exitcode for process in processes] == [0] * 8
    doc = manifest(store_uri)
    assert set(doc["entries"]) == expected
    assert len({entry["archive"] for entry in doc["entries"].values()}) == 8
    assert_manifests_name_only_present_archives(store_uri)
    pulled = cc.pull(store_uri, KEY, tmp_path / "all")
    assert (pulled.hit_entries, pulled.archives, pulled.warnings) == (24, 8, [])


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
from entrypoints.shared import compile_cache as cc
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
            child.wait(timeout=patience(30))
        assert child.returncode == -signal.SIGKILL
        assert_manifests_name_only_present_archives(store_uri)
    doc = manifest(store_uri) or {"entries": {}}
    pulled = cc.pull(store_uri, KEY, tmp_path / "after")
    assert pulled.warnings == [], delays
    assert pulled.hit_entries == len(doc["entries"])


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
