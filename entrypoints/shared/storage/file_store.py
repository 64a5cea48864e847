"""The file:// store: objects are files under a local (or shared POSIX) folder.

Publication renames a finished temporary file into place (`entrypoints.shared.atomic`); conditional
writes check and replace under an exclusive, blocking `fcntl.flock` on a sidecar file, and an
etag is the sha256 hex of the content. (Not `filelock`: it polls for the lock, 3.3 times
slower under contention here, and importing it costs the launcher's start 0.2 s; see
docs/BENCHMARKS.md.) The store's own files lie next to the objects, named
`.storage-lock.*` and `.storage-tmp.*`; `list` never shows them. A writer killed midway
leaves a `.storage-tmp.*` file (never a partial object): `stale_temporaries` finds them.
A FIFO, device or socket where an object should be is never read. `get_file` keeps a sparse
file's holes (`entrypoints.shared.holes`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from entrypoints.shared import atomic, holes
from entrypoints.shared.storage.store import (
    COPY_BUFFER,
    INTERNAL_PREFIX,
    ObjectInfo,
    PendingObject,
    PreconditionFailed,
    StorageError,
    Store,
    check_key,
    check_prefix,
    copy_stream,
    download_atomically,
)


def _sha256_file(path: Path) -> str:
    # Not hashlib.file_digest: it needs Python 3.11, and the package runs on 3.10 (the Neuron
    # SDK 2.25 training image's Python; requires-python, held by tests/test_python_versions.py).
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class FileStore(Store):
    """A store in a local (or shared POSIX) folder; see the module docstring."""

    def __init__(self, root: Path):
        self.root = root
        self.uri_root = f"file://{root}"

    def _path(self, key: str) -> Path:
        return self.root / check_key(key, self.uri_root)

    def _error(self, op: str, key: str, exc: OSError) -> StorageError:
        return StorageError(f"{op} {self.uri_root}/{key}: {exc.strerror or exc}")

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent / f"{INTERNAL_PREFIX}lock.{path.name}", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def get_with_etag(self, key: str) -> tuple[bytes, str] | None:
        path = self._path(key)
        try:
            with _open_regular(path) as handle:
                data = handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error("read", key, exc) from exc
        return data, hashlib.sha256(data).hexdigest()

    def put_bytes(self, key: str, data: bytes, *, if_none_match: bool = False,
                  if_match: str | None = None) -> str:
        path = self._path(key)
        try:
            with self._locked(path):
                if if_none_match and path.exists():
                    raise PreconditionFailed(f"{self.uri(key)} already exists")
                if if_match is not None:
                    try:
                        current = _sha256_file(path)
                    except FileNotFoundError:
                        raise PreconditionFailed(f"{self.uri(key)} no longer exists") from None
                    if current != if_match:
                        raise PreconditionFailed(f"{self.uri(key)} changed since it was read")
                # Small objects (manifests) are the ones others decide on: durable. A link in
                # the store's folder is replaced, never followed out of it.
                atomic.write_bytes(path, data, follow_symlinks=False, temp_prefix=f"{INTERNAL_PREFIX}tmp.")
        except OSError as exc:
            raise self._error("write", key, exc) from exc
        return hashlib.sha256(data).hexdigest()

    def put_file(self, key: str, path: str | os.PathLike) -> str:
        with self.open_write() as pending, open(path, "rb") as src:
            digest = hashlib.sha256()
            buffer = bytearray(COPY_BUFFER)
            view = memoryview(buffer)
            while n := src.readinto(buffer):
                digest.update(view[:n])
                pending.write(view[:n])
            pending.commit(key)
        return digest.hexdigest()

    def get_file(self, key: str, path: str | os.PathLike) -> bool:
        source = self._path(key)
        try:
            with _open_regular(source) as src:
                # Holes stay holes: a sparse file's copy takes only its data's disk (issue 32).
                download_atomically(Path(path), lambda dst: holes.copy_stream(src, dst))
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise self._error("read", key, exc) from exc
        return True

    def path(self, key: str) -> Path:
        """Where the object lives on this machine (read it, never write it)."""
        return self._path(key)

    def stat(self, key: str) -> ObjectInfo | None:
        try:
            st = self._path(key).stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error("stat", key, exc) from exc
        return ObjectInfo(key, st.st_size, None, st.st_mtime) if _is_regular(st.st_mode) else None

    def open_write(self, *, spool_dir: str | os.PathLike | None = None) -> PendingObject:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            return _FilePending(self, self.root / f"{INTERNAL_PREFIX}tmp.{secrets.token_hex(8)}")
        except OSError as exc:
            raise StorageError(f"write {self.uri_root}: {exc.strerror or exc}") from exc

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "", *, with_etags: bool = True) -> list[ObjectInfo]:
        check_prefix(prefix, self.uri_root)
        start = self.root / prefix.rpartition("/")[0] if "/" in prefix else self.root
        found: list[ObjectInfo] = []
        try:
            for folder, dirs, files in os.walk(start, onerror=_raise):
                dirs[:] = [d for d in dirs if not d.startswith(INTERNAL_PREFIX)]
                for name in files:
                    if name.startswith(INTERNAL_PREFIX):
                        continue
                    full = Path(folder, name)
                    key = full.relative_to(self.root).as_posix()
                    if not key.startswith(prefix):
                        continue
                    try:
                        st = full.lstat()
                        if not _is_regular(st.st_mode):
                            continue
                        etag = _sha256_file(full) if with_etags else None
                    except FileNotFoundError:
                        continue  # deleted while listing
                    found.append(ObjectInfo(key, st.st_size, etag, st.st_mtime))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"list {self.uri_root}/{prefix}: {exc.strerror or exc}") from exc
        return sorted(found, key=lambda info: info.key)

    def stale_temporaries(self, older_than_s: float, *, now: float | None = None) -> list[tuple[Path, int]]:
        """(path, bytes) of temporary files that interrupted writers left, not modified for
        `older_than_s` seconds (a writer still at work keeps its file's mtime fresh)."""
        now = time.time() if now is None else now
        found = []
        for folder, _, files in os.walk(self.root):
            for name in files:
                if name.startswith(f"{INTERNAL_PREFIX}tmp."):
                    path = Path(folder, name)
                    with contextlib.suppress(FileNotFoundError):
                        st = path.lstat()
                        if now - st.st_mtime > older_than_s:
                            found.append((path, st.st_size))
        return sorted(found)

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise self._error("delete", key, exc) from exc


def _raise(exc: OSError) -> None:
    raise exc


def _open_regular(path: Path):
    """`path` opened for reading if it is a regular file (or a link to one); an OSError
    (EINVAL, "not a regular file") for a FIFO, device or socket, which is never read: a FIFO
    would block for ever and /dev/zero never end."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket)", str(path))
    return os.fdopen(fd, "rb")


def _is_regular(mode: int) -> bool:
    return stat.S_ISREG(mode)


class _FilePending(PendingObject):
    def __init__(self, store: FileStore, path: Path):
        super().__init__(path)
        self._store = store

    def commit(self, key: str) -> None:
        final = self._store._path(key)
        self._finish()
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(self.path, final)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                # The destination folder is another mount: copy beside it, then rename there.
                with open(self.path, "rb") as src:
                    download_atomically(final, lambda dst: copy_stream(src, dst))
                self.path.unlink()
        except OSError as exc:
            raise self._store._error("write", key, exc) from exc
        self.committed = True
