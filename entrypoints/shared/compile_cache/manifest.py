"""The manifest of one cache key, `<key digest>/manifest.json`, and its publication.

The manifest names every published entry and the content-addressed archive holding it
(format: docs/COMPILE_CACHE.md). A push publishes it by a conditional write (IfMatch on the
etag read, or IfNoneMatch when creating); on a conflict it re-reads, merges (union; an entry
already published is kept as published) and retries with jittered backoff,
`PUBLISH_ATTEMPTS` times at most.
"""

from __future__ import annotations

import json
import random
import re
import time

from entrypoints.shared.compile_cache.entries import valid_entry_name
from entrypoints.shared.compile_cache.key import CacheKey
from entrypoints.shared.storage import PreconditionFailed, Store

SCHEMA = 1
MANIFEST = "manifest.json"
ARCHIVE_DIR = "archives"
ARCHIVE_SUFFIX = ".tar"
PUBLISH_ATTEMPTS = 16
BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 2.0

_ARCHIVE_NAME = re.compile(r"^archives/([0-9a-f]{64})\.tar(\.gz)?$")


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def parse_manifest(data: bytes, key: CacheKey | None = None) -> tuple[dict, list[str]]:
    """A manifest's valid entries and the warnings about the rest.

    Raises ValueError when the document itself is unusable (not JSON, wrong schema, another
    key). Entries with a bad name, archive or checksum are dropped with a warning each.
    """
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeError) as exc:
        raise ValueError(f"manifest is not JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("entries"), dict):
        raise ValueError(f"manifest has schema {doc.get('schema') if isinstance(doc, dict) else None!r}, "
                         f"expected {SCHEMA} with an entries map")
    kind = key.kind if key is not None else (doc.get("key") or {}).get("kind")
    if key is not None and doc.get("key") != key.as_dict():
        raise ValueError("manifest belongs to another cache key")
    warnings: list[str] = []
    entries: dict[str, dict] = {}
    for name, entry in doc["entries"].items():
        if not valid_entry_name(kind, name):
            warnings.append(f"manifest entry {name!r} has an invalid name; ignored")
            continue
        archive = entry.get("archive") if isinstance(entry, dict) else None
        match = _ARCHIVE_NAME.match(archive) if isinstance(archive, str) else None
        if not match or entry.get("sha256") != match.group(1) or not isinstance(entry.get("bytes"), int) \
                or entry["bytes"] < 0:
            warnings.append(f"manifest entry {name!r} has an invalid archive reference; ignored")
            continue
        entries[name] = {"archive": archive, "sha256": entry["sha256"], "bytes": entry["bytes"]}
    doc["entries"] = entries
    if not isinstance(doc.get("archives"), dict):
        doc["archives"] = {}
    return doc, warnings


def new_manifest(key: CacheKey) -> dict:
    """An empty manifest of `key`."""
    return {"schema": SCHEMA, "key": key.as_dict(), "entries": {}, "archives": {}, "updated_at": _now_iso()}


def manifest_bytes(doc: dict) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def read_manifest(store: Store, key: CacheKey, warnings: list[str]) -> tuple[dict, str | None]:
    """(manifest, etag); a fresh manifest and None when absent; an unusable one is replaced."""
    got = store.get_with_etag(f"{key.digest()}/{MANIFEST}")
    if got is None:
        return new_manifest(key), None
    data, etag = got
    try:
        doc, problems = parse_manifest(data, key)
    except ValueError as exc:
        warnings.append(f"{store.uri(key.digest() + '/' + MANIFEST)}: {exc}; replacing it")
        return new_manifest(key), etag
    warnings.extend(problems)
    return doc, etag


def publish(store: Store, key: CacheKey, doc: dict, etag: str | None, ours: dict[str, dict],
            archive: str, size: int, warnings: list[str]) -> int:
    """Publish the manifest `doc` (read with `etag`) with the entries `ours` of `archive`
    (`size` bytes) merged in, by a conditional write; on a conflict re-read, merge and retry
    (see the module docstring). The number of entries we added; a warning when it gave up."""
    manifest_key = f"{key.digest()}/{MANIFEST}"
    for attempt in range(PUBLISH_ATTEMPTS):
        added = {name: entry for name, entry in ours.items() if name not in doc["entries"]}
        if not added:
            return 0
        merged = dict(doc)
        merged["entries"] = {**doc["entries"], **added}
        merged["archives"] = {**doc.get("archives", {}), archive: {"bytes": size}}
        merged["key"] = key.as_dict()
        merged["schema"] = SCHEMA
        merged["updated_at"] = _now_iso()
        try:
            if etag is None:
                store.put_bytes(manifest_key, manifest_bytes(merged), if_none_match=True)
            else:
                store.put_bytes(manifest_key, manifest_bytes(merged), if_match=etag)
            return len(added)
        except PreconditionFailed:
            time.sleep(random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt)))
            doc, etag = read_manifest(store, key, [])
    warnings.append(f"{store.uri(manifest_key)}: still conflicting after {PUBLISH_ATTEMPTS} attempts; "
                          f"{len(ours)} entries not published")
    return 0
