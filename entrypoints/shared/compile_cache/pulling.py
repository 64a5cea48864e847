"""Pull: fetch the entries of a key that a cache dir lacks, before anything compiles.

Reads the manifest, then, for each archive holding entries missing locally, reads the
archive where it lies (file://) or from a download into the extraction folder (S3), through
the strict reader (`tarstream.extract_archive`) into a fresh temporary folder inside the
cache dir. Only when the archive is whole and its sha256 is the manifest's are complete
entries renamed into place (an entry that already exists locally is kept). So nothing is
written outside the cache dir, and a rejected archive leaves nothing. Size limits: the
manifest's sizes before downloading, the archive's size, and member by member
(`max_bytes`). Never raises for a bad, hostile or missing cache: it warns and the job runs
cold. Protocol: docs/COMPILE_CACHE.md.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from entrypoints.shared.compile_cache.key import CacheKey
from entrypoints.shared.compile_cache.manifest import MANIFEST, parse_manifest
from entrypoints.shared.compile_cache.tarstream import Rejected, extract_archive
from entrypoints.shared.storage import SPOOL_PREFIX, FileStore, StorageError, Store, open_store

DEFAULT_MAX_BYTES = 20 * 2**30
# Temporary names inside cache_dir; older ones than this are debris of a killed pull/push.
PULL_TEMP_PREFIX = ".cache-pull-"
STALE_TEMP_S = 3600.0


@dataclass
class PullStats:
    """What one pull moved: entries placed, archive bytes, seconds, archives, and the
    warnings it raised instead of failing (training never stops for the cache)."""

    hit_entries: int = 0
    bytes: int = 0
    seconds: float = 0.0
    archives: int = 0
    warnings: list[str] = field(default_factory=list)


def _remove_stale_temps(cache_dir: Path) -> None:
    """Remove what a killed pull (extraction folder) or push (S3 spool file) left behind."""
    now = time.time()
    for pattern in (f"{PULL_TEMP_PREFIX}*", f"{SPOOL_PREFIX}*"):
        for path in cache_dir.glob(pattern):
            with contextlib.suppress(OSError):
                if now - path.lstat().st_mtime > STALE_TEMP_S:
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        path.unlink()


def _entry_complete(kind: str, path: Path) -> bool:
    if kind == "neuronx-cc":
        # Extraction wrote only regular files and folders, and refused lock files.
        return (path / "model.done").is_file() and (path / "model.neff").is_file()
    return path.is_file()


def _place(source: Path, dest: Path) -> bool:
    """Move an extracted entry into the cache unless it exists there; True when moved."""
    if os.path.lexists(dest):
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        if source.is_dir():
            os.rename(source, dest)
        else:
            os.link(source, dest)  # fails if another process put it there meanwhile
    except OSError:
        if os.path.lexists(dest):
            return False  # another process put it there meanwhile: theirs is as good
        raise
    return True


def pull(store_uri: str, key: CacheKey, cache_dir: Path, *, s3_client=None,
         max_bytes: int = DEFAULT_MAX_BYTES, store: Store | None = None) -> PullStats:
    """Fetch the entries of `key` missing from `cache_dir` (see the module docstring); never
    raises for a bad, hostile or missing cache: it warns, and the job runs cold.

    `store` replaces `open_store(store_uri, s3_client=...)` (tests, benchmarks).
    """
    started = time.monotonic()
    stats = PullStats()
    cache_dir = Path(cache_dir)
    try:
        store = store or open_store(store_uri, s3_client=s3_client)
        cache_dir.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(cache_dir)
        raw = store.get_bytes(f"{key.digest()}/{MANIFEST}")
    except (ValueError, StorageError, OSError) as exc:
        stats.warnings.append(f"cache not pulled: {exc}")
        stats.seconds = time.monotonic() - started
        return stats
    if raw is None:
        stats.seconds = time.monotonic() - started
        return stats
    try:
        doc, warnings = parse_manifest(raw, key)
    except ValueError as exc:
        stats.warnings.append(f"{store.uri(key.digest() + '/' + MANIFEST)}: {exc}; running cold")
        stats.seconds = time.monotonic() - started
        return stats
    stats.warnings.extend(warnings)
    entries: dict[str, dict] = doc["entries"]
    by_archive: dict[str, list[str]] = {}
    for name, entry in entries.items():
        by_archive.setdefault(entry["archive"], []).append(name)
    budget = max_bytes
    for archive in sorted(by_archive):
        names = by_archive[archive]
        wanted = {name for name in names if not os.path.lexists(cache_dir / name)}
        if not wanted:
            continue
        expected = sum(entries[name]["bytes"] for name in names)
        if expected > budget:
            stats.warnings.append(f"{archive}: {len(wanted)} entries left out, the cache exceeds "
                                  f"max_bytes ({max_bytes} bytes)")
            continue
        used = _pull_archive(store, key, archive, entries[names[0]]["sha256"], wanted, cache_dir, budget, stats)
        budget -= used
    stats.seconds = time.monotonic() - started
    return stats


def _pull_archive(store: Store, key: CacheKey, archive: str, sha: str, wanted: set[str], cache_dir: Path,
                  budget: int, stats: PullStats) -> int:
    """Extract one archive's wanted entries into place; member bytes read (0 if rejected)."""
    object_key = f"{key.digest()}/{archive}"
    uri = store.uri(object_key)
    # Headers and padding are about 1 KiB per member on top of the member bytes.
    limit = budget + 64 * 2**20
    temp: Path | None = None
    try:
        info = store.stat(object_key)
        if info is None:
            stats.warnings.append(f"{uri} is missing; {len(wanted)} entries will compile")
            return 0
        if info.size > limit:
            raise Rejected(f"{info.size} bytes exceed the size limit of {limit} bytes")
        temp = Path(_make_temp(cache_dir))
        if isinstance(store, FileStore):
            local = store.path(object_key)
        else:
            local = temp / ".archive"  # entries never start with '.', so no member lands here
            if not store.get_file(object_key, local):
                stats.warnings.append(f"{uri} is missing; {len(wanted)} entries will compile")
                return 0
        fd = os.open(local, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size > limit:
                raise Rejected(f"{size} bytes exceed the size limit of {limit} bytes")
            member_bytes, got, raw_bytes = extract_archive(
                fd, size, compressed=archive.endswith(".gz"), limit=limit, kind=key.kind, dest=temp,
                wanted=wanted, budget=budget)
        finally:
            os.close(fd)
        if got != sha:
            raise Rejected(f"sha256 is {got}, the manifest says {sha}")
        stats.bytes += raw_bytes
        stats.archives += 1
        for name in sorted(wanted):
            source_path = temp / name
            if not os.path.lexists(source_path) or not _entry_complete(key.kind, source_path):
                stats.warnings.append(f"{uri}: entry {name!r} is missing or incomplete in the archive")
                continue
            if _place(source_path, cache_dir / name):
                stats.hit_entries += 1
        return member_bytes
    except Rejected as exc:
        stats.warnings.append(f"{uri} rejected: {exc}; {len(wanted)} entries will compile")
    except (StorageError, OSError) as exc:
        stats.warnings.append(f"{uri} not pulled: {exc}; {len(wanted)} entries will compile")
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    return 0


def _make_temp(cache_dir: Path) -> str:
    return tempfile.mkdtemp(prefix=PULL_TEMP_PREFIX, dir=cache_dir)
