"""Object storage with the same semantics on `s3://` and `file://`.

Stdlib only; boto3 is imported when the first `s3://` store needs a client. Nothing here
imports `orchestrator`. Modules: `store` (the interface, errors, keys), `file_store`,
`s3_store`.

`open_store(uri)` returns a `Store` rooted at the URI's prefix; keys are relative to that
root and '/'-separated (no empty, `.` or `..` components). What both backends guarantee:

- Publication is atomic: a reader sees the old object or the new one, never a part.
  S3 gives this per PUT / CompleteMultipartUpload; the file store writes a temporary file in
  the destination folder and renames it into place.
- Conditional writes: `put_bytes(..., if_none_match=True)` creates only when absent,
  `put_bytes(..., if_match=etag)` replaces only the version read; a conflict raises
  `PreconditionFailed`. S3 uses `IfNoneMatch="*"` / `IfMatch`; the file store checks and
  replaces under an exclusive lock on a sidecar file, and its etag is the sha256 hex of the
  content, so an etag names content on both backends.
- Large objects move in parallel on S3 (boto3's transfer manager: multipart uploads, ranged
  GETs pinned to the ETag seen first).
- `open_write()` writes an object whose key is chosen after writing (content addressing):
  the file store writes it inside the store and renames it into place; S3 spools it to a
  local file and uploads that at `commit`.

Failures of the store itself (missing bucket, denied, unreachable endpoint, I/O errors)
raise `StorageError` naming the URI. A malformed URI or key raises `ValueError`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from entrypoints.shared.storage.file_store import FileStore
from entrypoints.shared.storage.s3_store import (
    DEFAULT_MULTIPART_THRESHOLD,
    DEFAULT_PART_SIZE,
    DEFAULT_WORKERS,
    MIN_PART_SIZE,
    S3_CONNECT_TIMEOUT_S,
    S3_READ_TIMEOUT_S,
    S3Store,
    s3_client_config,
)
from entrypoints.shared.storage.store import (
    SPOOL_PREFIX,
    ObjectInfo,
    PendingObject,
    PreconditionFailed,
    StorageError,
    Store,
    check_key,
)

__all__ = [
    "DEFAULT_MULTIPART_THRESHOLD", "DEFAULT_PART_SIZE", "DEFAULT_WORKERS", "MIN_PART_SIZE", "S3_CONNECT_TIMEOUT_S",
    "S3_READ_TIMEOUT_S", "SPOOL_PREFIX", "FileStore", "ObjectInfo", "PendingObject", "PreconditionFailed",
    "S3Store", "StorageError", "Store", "open_store", "s3_client_config",
]

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


def open_store(uri: str, *, s3_client=None, multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
               part_size: int = DEFAULT_PART_SIZE, max_workers: int = DEFAULT_WORKERS) -> Store:
    """A store rooted at `uri`: "s3://bucket[/prefix]" or "file:///absolute/path".

    `s3_client` is a boto3 S3 client to use; by default one is created on first use
    (botocore honours AWS_ENDPOINT_URL). The multipart knobs apply to S3 only.
    """
    if not isinstance(uri, str):
        raise ValueError(f"store URI must be a string, got {type(uri).__name__}")
    if uri.startswith("s3://"):
        bucket, _, prefix = uri[len("s3://"):].partition("/")
        if not _BUCKET.match(bucket) or ".." in bucket:
            raise ValueError(f"{uri}: {bucket!r} is not a valid S3 bucket name" + ("" if bucket else " (no bucket)"))
        prefix = prefix.strip("/")
        if prefix:
            check_key(prefix, uri)
        if part_size < MIN_PART_SIZE:
            raise ValueError(f"part_size {part_size} is below S3's minimum of {MIN_PART_SIZE} bytes")
        return S3Store(bucket, prefix, s3_client, multipart_threshold=multipart_threshold,
                       part_size=part_size, max_workers=max_workers)
    if uri.startswith("file://"):
        path = uri[len("file://"):]
        if path.startswith("localhost/"):
            path = path[len("localhost"):]
        if not path.startswith("/"):
            raise ValueError(f"{uri}: a file:// URI needs an absolute path (file:///abs/path)")
        if ".." in path.split("/"):
            raise ValueError(f"{uri}: '..' is not allowed in a store path")
        root = os.path.normpath(path)
        return FileStore(Path(root))
    raise ValueError(f"{uri!r}: unsupported store URI; use s3://bucket/prefix or file:///absolute/path")
