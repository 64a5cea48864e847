"""The compile cache: pull before anything compiles, push what was compiled afterwards.

The format and protocol (key, store layout, entries, archives, pull, push) are in
docs/COMPILE_CACHE.md. The modules, one concept each:

- `key`: `CacheKey` and `key_for(runtime, target, world_size, env)`;
- `entries`: which local files and folders are complete entries (`complete_entries`);
- `tarstream`: the archives, written deterministically and read by a strict reader;
- `manifest`: `<key>/manifest.json`, parsed strictly and published by conditional writes;
- `pulling`: `pull(store_uri, key, cache_dir)`; `pushing`: `push(store_uri, key, cache_dir)`.

Stdlib only (+ `entrypoints.shared.storage`); torch is imported lazily, only by `key_for` on the
native runtime. Nothing here imports `orchestrator`.
"""

from entrypoints.shared.compile_cache.entries import complete_entries, valid_entry_name
from entrypoints.shared.compile_cache.key import KINDS, RUNTIME_KINDS, CacheKey, key_for, neuron_cc_flags
from entrypoints.shared.compile_cache.manifest import (
    ARCHIVE_DIR,
    ARCHIVE_SUFFIX,
    MANIFEST,
    SCHEMA,
    new_manifest,
    parse_manifest,
)
from entrypoints.shared.compile_cache.pulling import (
    DEFAULT_MAX_BYTES,
    PULL_TEMP_PREFIX,
    STALE_TEMP_S,
    PullStats,
    pull,
)
from entrypoints.shared.compile_cache.pushing import PushStats, push
from entrypoints.shared.compile_cache.tarstream import Rejected

__all__ = [
    "ARCHIVE_DIR", "ARCHIVE_SUFFIX", "DEFAULT_MAX_BYTES", "KINDS", "MANIFEST", "PULL_TEMP_PREFIX", "RUNTIME_KINDS",
    "SCHEMA", "STALE_TEMP_S", "CacheKey", "PullStats", "PushStats", "Rejected", "complete_entries", "key_for",
    "neuron_cc_flags", "new_manifest", "parse_manifest", "pull", "push", "valid_entry_name",
]
