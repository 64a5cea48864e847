"""Push: publish the complete local entries of a key that its manifest lacks.

Finds them (`entries.complete_entries`), packs them into one archive (`tarstream.pack`:
written in place in a file:// store, spooled in the cache dir for S3), uploads it, and only
then publishes the manifest naming it (`manifest.publish`). Since the archive always lands
before the manifest naming it, a push killed at any point leaves at worst an unreferenced
archive, which `orchestrator cache prune` removes after its grace period. After publishing,
it checks its archive is still there (a prune racing with a re-upload of identical content)
and uploads it again if not. Protocol: docs/COMPILE_CACHE.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from entrypoints.shared.compile_cache.entries import complete_entries
from entrypoints.shared.compile_cache.key import CacheKey
from entrypoints.shared.compile_cache.manifest import ARCHIVE_DIR, ARCHIVE_SUFFIX, publish, read_manifest
from entrypoints.shared.compile_cache.tarstream import pack
from entrypoints.shared.storage import StorageError, Store, open_store


@dataclass
class PushStats:
    """What one push moved: new entries, archive bytes, seconds, archives, and the warnings
    it raised instead of failing (training never stops for the cache)."""

    new_entries: int = 0
    bytes: int = 0
    seconds: float = 0.0
    archives: int = 0
    warnings: list[str] = field(default_factory=list)


def _upload_archive(store: Store, key: CacheKey, entries: dict[str, Path], spool_dir: Path
                    ) -> tuple[str, int, dict[str, int]]:
    with store.open_write(spool_dir=spool_dir) as pending:
        sha, size, sizes = pack(entries.items(), pending.fileno())
        pending.commit(f"{key.digest()}/{ARCHIVE_DIR}/{sha}{ARCHIVE_SUFFIX}")
    return sha, size, sizes


def push(store_uri: str, key: CacheKey, cache_dir: Path, *, s3_client=None,
         store: Store | None = None) -> PushStats:
    """Publish the complete local entries the manifest lacks (see the module docstring).
    Storage failures become warnings; it raises only for programming errors.

    `store` replaces `open_store(store_uri, s3_client=...)` (tests, benchmarks).
    """
    started = time.monotonic()
    stats = PushStats()
    cache_dir = Path(cache_dir)
    try:
        store = store or open_store(store_uri, s3_client=s3_client)
        local = complete_entries(cache_dir, key.kind)
        if not local:
            return stats
        doc, etag = read_manifest(store, key, stats.warnings)
        missing = {name: path for name, path in local.items() if name not in doc["entries"]}
        if not missing:
            return stats
        sha, size, sizes = _upload_archive(store, key, missing, cache_dir)
        archive = f"{ARCHIVE_DIR}/{sha}{ARCHIVE_SUFFIX}"
        ours = {name: {"archive": archive, "sha256": sha, "bytes": sizes[name]} for name in missing}
        published = publish(store, key, doc, etag, ours, archive, size, stats.warnings)
        if published:
            stats.new_entries, stats.bytes, stats.archives = published, size, 1
            if not store.exists(f"{key.digest()}/{archive}"):
                # Pruned between our upload and our manifest (identical content re-uploaded
                # while prune judged the older copy): put it back.
                stats.warnings.append(f"{store.uri(key.digest() + '/' + archive)} vanished after "
                                      "publication; uploaded again")
                _upload_archive(store, key, missing, cache_dir)
    except (ValueError, StorageError, OSError) as exc:
        stats.warnings.append(f"cache not pushed: {exc}")
    finally:
        stats.seconds = time.monotonic() - started
    return stats
