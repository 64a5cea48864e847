"""entrypoints.shared.compile_cache.manifest: read strictly, published by conditional writes that
merge with a concurrent push."""

from __future__ import annotations

import hashlib
import json

import pytest
from compile_cache_harness import (
    KEY,
    assert_manifests_name_only_present_archives,
    good_entry_members,
    manifest,
    neuron_entry,
    plant,
    tar_bytes,
)

from entrypoints.shared import compile_cache as cc
from entrypoints.shared import storage


@pytest.fixture(params=["file", "s3"])
def store_uri(request, tmp_path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store"
    return f"s3://{request.getfixturevalue('moto_bucket')}/compile-cache"


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
