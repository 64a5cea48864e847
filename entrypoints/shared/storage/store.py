"""The store interface both backends implement (`file_store.FileStore`, `s3_store.S3Store`),
its errors and its keys; the guarantees are in the package docstring."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from entrypoints.shared import atomic

COPY_BUFFER = 4 * 2**20
# The store's own names: the file store's lock and temporary files, S3's spool files. No
# key may use this prefix, and `list` never shows it.
INTERNAL_PREFIX = ".storage-"
# S3 spools streamed objects to local files named so (callers may clean up stale ones).
SPOOL_PREFIX = ".storage-spool."


class StorageError(Exception):
    """The store failed or refused an operation; the message names the URI."""


class PreconditionFailed(Exception):
    """A conditional write lost: the object exists (if_none_match) or changed (if_match)."""


@dataclass(frozen=True)
class ObjectInfo:
    """One object: key relative to the store root, size in bytes, etag, modification time.

    `last_modified` is seconds since the epoch. `etag` is None only when `list` was asked
    not to compute etags (the file store hashes content to make them).
    """

    key: str
    size: int
    etag: str | None
    last_modified: float


def check_key(key: str, where: str = "") -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where}: empty object key")
    if "\x00" in key or key.startswith("/") or key.endswith("/"):
        raise ValueError(f"{where}: invalid object key {key!r}")
    for part in key.split("/"):
        if part in ("", ".", "..") or part.startswith(INTERNAL_PREFIX):
            raise ValueError(f"{where}: invalid object key {key!r}")
    return key


def check_prefix(prefix: str, where: str) -> str:
    if prefix:
        check_key(prefix.rstrip("/"), where)
    return prefix


class Store:
    """The interface both backends implement (see the module docstring for semantics)."""

    uri_root: str

    def uri(self, key: str) -> str:
        return f"{self.uri_root}/{check_key(key, self.uri_root)}"

    def get_bytes(self, key: str) -> bytes | None:
        got = self.get_with_etag(key)
        return None if got is None else got[0]

    def get_with_etag(self, key: str) -> tuple[bytes, str] | None:
        raise NotImplementedError

    def put_bytes(self, key: str, data: bytes, *, if_none_match: bool = False,
                  if_match: str | None = None) -> str:
        raise NotImplementedError

    def put_file(self, key: str, path: str | os.PathLike) -> str:
        raise NotImplementedError

    def get_file(self, key: str, path: str | os.PathLike) -> bool:
        raise NotImplementedError

    def stat(self, key: str) -> ObjectInfo | None:
        """The object's size and modification time (etag: S3 only), or None if absent."""
        raise NotImplementedError

    def open_write(self, *, spool_dir: str | os.PathLike | None = None) -> PendingObject:
        """A writable object published under a key chosen at `commit(key)`.

        Use as a context manager: leaving it without `commit` discards what was written.
        `spool_dir` is where S3 spools the bytes before uploading (default: TMPDIR).
        """
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        raise NotImplementedError

    def list(self, prefix: str = "", *, with_etags: bool = True) -> list[ObjectInfo]:
        """Objects whose key starts with `prefix` (a string prefix, as on S3), sorted by key."""
        raise NotImplementedError

    def delete(self, key: str) -> None:
        """Delete the object; deleting an absent object is not an error."""
        raise NotImplementedError


class PendingObject:
    """An object being written, not yet published; see `Store.open_write`.

    Write with `write`, or straight to `fileno()` (opened read-write, so a writer may also
    read back what it wrote, e.g. to hash it).
    """

    def __init__(self, path: Path):
        self.path = path
        self._file = open(path, "w+b", buffering=0)  # noqa: SIM115 - closed by _finish/discard
        self.committed = False

    def write(self, data) -> int:
        view = memoryview(data)
        while view:
            view = view[self._file.write(view):]
        return len(data)

    def fileno(self) -> int:
        return self._file.fileno()

    def _finish(self) -> None:
        if not self._file.closed:
            self._file.close()

    def commit(self, key: str) -> str:
        raise NotImplementedError

    def discard(self) -> None:
        self._finish()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def __enter__(self) -> PendingObject:
        return self

    def __exit__(self, *exc) -> None:
        if not self.committed:
            self.discard()


def download_atomically(dest: Path, fill: Callable) -> None:
    """Write `dest` through a temporary file beside it (`atomic.replacing`: not durable, a
    link at `dest` replaced rather than followed), renamed into place when `fill(file)` is done."""
    with atomic.replacing(dest, durable=False, follow_symlinks=False) as dst:
        fill(dst)


def copy_stream(src, dst) -> None:
    buffer = bytearray(COPY_BUFFER)
    view = memoryview(buffer)
    while n := src.readinto(buffer):
        dst.write(view[:n])
