"""Object storage with the same semantics on `s3://` and `file://`.

Stdlib only; boto3 is imported when the first `s3://` store needs a client. Nothing here
imports `orchestrator`.

`open_store(uri)` returns a `Store` rooted at the URI's prefix; keys are relative to that
root and '/'-separated (no empty, `.` or `..` components). What both backends guarantee:

- Publication is atomic: a reader sees the old object or the new one, never a part.
  S3 gives this per PUT / CompleteMultipartUpload; the file store writes a temporary file in
  the destination folder and `os.replace`s it.
- Conditional writes: `put_bytes(..., if_none_match=True)` creates only when absent,
  `put_bytes(..., if_match=etag)` replaces only the version read; a conflict raises
  `PreconditionFailed`. S3 uses `IfNoneMatch="*"` / `IfMatch`. The file store checks and
  replaces under an exclusive `fcntl.flock` on a sidecar lock file, and its etag is the
  sha256 hex of the content, so an etag names content on both backends.
- Large objects move in parallel on S3: multipart uploads with parts uploaded by a thread
  pool (aborted on failure) and ranged GETs, each checked against the etag seen first.
- `open_write()` writes an object whose key is chosen after writing (content addressing):
  the file store writes it inside the store and renames it into place; S3 spools it to a
  local file and uploads that at `commit`.

Failures of the store itself (missing bucket, denied, unreachable endpoint, I/O errors)
raise `StorageError` naming the URI. A malformed URI or key raises `ValueError`.

The file store keeps its own files next to the objects, named `.storage-lock.*` and
`.storage-tmp.*`; `list` never shows them and keys may not use that prefix. A writer killed
midway leaves a `.storage-tmp.*` file behind (never a partial object): `stale_temporaries`
finds them for `orchestrator cache prune`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from entrypoints import atomic

# Objects larger than this move as multipart uploads / parallel ranged GETs on S3.
DEFAULT_MULTIPART_THRESHOLD = 64 * 2**20
DEFAULT_PART_SIZE = 16 * 2**20
# S3 refuses parts smaller than 5 MiB (all but the last).
MIN_PART_SIZE = 5 * 2**20
MAX_PARTS = 10_000
DEFAULT_WORKERS = 8
COPY_BUFFER = 4 * 2**20
# Seconds an S3 client waits for a connection, and for each piece of an answer.
S3_CONNECT_TIMEOUT_S = 10
S3_READ_TIMEOUT_S = 60

_INTERNAL = ".storage-"
# S3 spools streamed objects to local files named so (callers may clean up stale ones).
SPOOL_PREFIX = ".storage-spool."
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


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
            _check_key(prefix, uri)
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


def _check_key(key: str, where: str = "") -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where}: empty object key")
    if "\x00" in key or key.startswith("/") or key.endswith("/"):
        raise ValueError(f"{where}: invalid object key {key!r}")
    for part in key.split("/"):
        if part in ("", ".", "..") or part.startswith(_INTERNAL):
            raise ValueError(f"{where}: invalid object key {key!r}")
    return key


def _check_prefix(prefix: str, where: str) -> str:
    if prefix:
        _check_key(prefix.rstrip("/"), where)
    return prefix


class Store:
    """The interface both backends implement (see the module docstring for semantics)."""

    uri_root: str

    def uri(self, key: str) -> str:
        return f"{self.uri_root}/{_check_key(key, self.uri_root)}"

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


# --- file:// --------------------------------------------------------------------------

def _sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


class FileStore(Store):
    """A store in a local (or shared POSIX) folder; see the module docstring."""

    def __init__(self, root: Path):
        self.root = root
        self.uri_root = f"file://{root}"

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key, self.uri_root)

    def _error(self, op: str, key: str, exc: OSError) -> StorageError:
        return StorageError(f"{op} {self.uri_root}/{key}: {exc.strerror or exc}")

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent / f"{_INTERNAL}lock.{path.name}", os.O_RDWR | os.O_CREAT, 0o644)
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
                atomic.write_bytes(path, data, follow_symlinks=False, temp_prefix=f"{_INTERNAL}tmp.")
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
                _atomic_download(Path(path), lambda dst: _copy_stream(src, dst))
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
            return _FilePending(self, self.root / f"{_INTERNAL}tmp.{secrets.token_hex(8)}")
        except OSError as exc:
            raise StorageError(f"write {self.uri_root}: {exc.strerror or exc}") from exc

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "", *, with_etags: bool = True) -> list[ObjectInfo]:
        _check_prefix(prefix, self.uri_root)
        start = self.root / prefix.rpartition("/")[0] if "/" in prefix else self.root
        found: list[ObjectInfo] = []
        try:
            for folder, dirs, files in os.walk(start, onerror=_raise):
                dirs[:] = [d for d in dirs if not d.startswith(_INTERNAL)]
                for name in files:
                    if name.startswith(_INTERNAL):
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
                if name.startswith(f"{_INTERNAL}tmp."):
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
                    _atomic_download(final, lambda dst: _copy_stream(src, dst))
                self.path.unlink()
        except OSError as exc:
            raise self._store._error("write", key, exc) from exc
        self.committed = True


def _copy_stream(src, dst) -> None:
    buffer = bytearray(COPY_BUFFER)
    view = memoryview(buffer)
    while n := src.readinto(buffer):
        dst.write(view[:n])


def _atomic_download(dest: Path, fill) -> None:
    """Write `dest` through a temporary file beside it (`atomic.replacing`: not durable, a
    link at `dest` replaced rather than followed), renamed into place when complete."""
    with atomic.replacing(dest, durable=False, follow_symlinks=False) as dst:
        fill(dst)


# --- s3:// ----------------------------------------------------------------------------

_MISSING = {"NoSuchKey", "404", "NotFound"}
_CONFLICT = {"PreconditionFailed", "412", "ConditionalRequestConflict"}
_HINTS = {
    "NoSuchBucket": "create the bucket first (see infra/README.md) or fix the URI",
    "AccessDenied": "the credentials in use may not read or write this prefix",
    "InvalidAccessKeyId": "check the AWS credentials in the environment",
}


def _code(exc) -> str:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code or str(status or "")


def s3_client_config(max_workers: int = DEFAULT_WORKERS):
    """The botocore config of an S3 client for a store: a connection pool for its parallel
    part transfers, standard retries, and connect/read timeouts, so that an endpoint that
    accepts a connection and never answers fails the call instead of holding it for ever (the
    read timeout bounds each wait for data, not a whole transfer)."""
    from botocore.config import Config

    return Config(max_pool_connections=max(10, 2 * max_workers), retries={"mode": "standard", "max_attempts": 5},
                  connect_timeout=S3_CONNECT_TIMEOUT_S, read_timeout=S3_READ_TIMEOUT_S)


class S3Store(Store):
    """A store under an S3 prefix; see the module docstring."""

    def __init__(self, bucket: str, prefix: str, client=None, *,
                 multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
                 part_size: int = DEFAULT_PART_SIZE, max_workers: int = DEFAULT_WORKERS):
        self.bucket = bucket
        self.prefix = prefix
        self.uri_root = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self.max_workers = max(1, max_workers)
        self._client = client
        self._client_lock = threading.Lock()

    @property
    def client(self):
        with self._client_lock:
            if self._client is None:
                try:
                    import boto3
                except ImportError as exc:
                    raise StorageError(f"{self.uri_root}: boto3 is needed for s3:// stores") from exc
                self._client = boto3.client("s3", config=s3_client_config(self.max_workers))
            return self._client

    def _key(self, key: str) -> str:
        _check_key(key, self.uri_root)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _error(self, op: str, key: str, exc: Exception) -> StorageError:
        code = _code(exc)
        message = f"{op} {self.uri_root}/{key}: {exc}"
        if code in _HINTS:
            message += f" (hint: {_HINTS[code]})"
        return StorageError(message)

    @contextlib.contextmanager
    def _translate(self, op: str, key: str) -> Iterator[None]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (ClientError, BotoCoreError) as exc:
            raise self._error(op, key, exc) from exc

    def _head(self, key: str) -> dict | None:
        from botocore.exceptions import ClientError

        with self._translate("head", key):
            try:
                return self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            except ClientError as exc:
                if _code(exc) in _MISSING:
                    return None
                raise

    def get_with_etag(self, key: str) -> tuple[bytes, str] | None:
        from botocore.exceptions import ClientError

        with self._translate("get", key):
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            except ClientError as exc:
                if _code(exc) in _MISSING:
                    return None
                raise
            return response["Body"].read(), response["ETag"]

    def put_bytes(self, key: str, data: bytes, *, if_none_match: bool = False,
                  if_match: str | None = None) -> str:
        from botocore.exceptions import ClientError

        conditions: dict[str, str] = {}
        if if_none_match:
            conditions["IfNoneMatch"] = "*"
        if if_match is not None:
            conditions["IfMatch"] = if_match
        with self._translate("put", key):
            try:
                response = self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data,
                                                  **conditions)
            except ClientError as exc:
                code = _code(exc)
                if conditions and (code in _CONFLICT or (if_match and code in _MISSING)):
                    raise PreconditionFailed(f"{self.uri(key)}: {code}") from exc
                raise
        return response["ETag"]

    def put_file(self, key: str, path: str | os.PathLike) -> str:
        size = os.path.getsize(path)
        with self._translate("put", key):
            if size <= self.multipart_threshold:
                with open(path, "rb") as fh:
                    return self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=fh)["ETag"]
            return self._multipart_upload(key, Path(path), size)

    def _multipart_upload(self, key: str, path: Path, size: int) -> str:
        client = self.client
        part_size = max(self.part_size, -(-size // MAX_PARTS))
        offsets = list(range(0, size, part_size))
        upload_id = client.create_multipart_upload(Bucket=self.bucket, Key=self._key(key))["UploadId"]
        fd = os.open(path, os.O_RDONLY)
        try:
            def upload(index: int) -> dict:
                offset = offsets[index]
                body = os.pread(fd, min(part_size, size - offset), offset)
                etag = client.upload_part(Bucket=self.bucket, Key=self._key(key), UploadId=upload_id,
                                          PartNumber=index + 1, Body=body)["ETag"]
                return {"PartNumber": index + 1, "ETag": etag}

            with ThreadPoolExecutor(self.max_workers) as pool:
                parts = list(pool.map(upload, range(len(offsets))))
            return client.complete_multipart_upload(
                Bucket=self.bucket, Key=self._key(key), UploadId=upload_id,
                MultipartUpload={"Parts": parts})["ETag"]
        except BaseException:
            # An unfinished upload keeps its parts (and bills them) until aborted.
            with contextlib.suppress(Exception):
                client.abort_multipart_upload(Bucket=self.bucket, Key=self._key(key), UploadId=upload_id)
            raise
        finally:
            os.close(fd)

    def _get_range(self, key: str, etag: str, start: int, end: int) -> bytes:
        response = self.client.get_object(Bucket=self.bucket, Key=self._key(key),
                                          Range=f"bytes={start}-{end}", IfMatch=etag)
        data = response["Body"].read()
        if len(data) != end - start + 1:
            raise StorageError(f"get {self.uri(key)}: short read for bytes {start}-{end}")
        return data

    def get_file(self, key: str, path: str | os.PathLike) -> bool:
        head = self._head(key)
        if head is None:
            return False
        size, etag = head["ContentLength"], head["ETag"]
        with self._translate("get", key):
            if size <= self.multipart_threshold:
                response = self.client.get_object(Bucket=self.bucket, Key=self._key(key), IfMatch=etag)
                body = response["Body"]

                def stream(dst) -> None:
                    for chunk in body.iter_chunks(COPY_BUFFER):
                        dst.write(chunk)

                _atomic_download(Path(path), stream)
                return True

            def fill(dst) -> None:
                dst.truncate(size)
                fd = dst.fileno()

                def fetch(start: int) -> None:
                    end = min(start + self.part_size, size) - 1
                    os.pwrite(fd, self._get_range(key, etag, start, end), start)

                with ThreadPoolExecutor(self.max_workers) as pool:
                    list(pool.map(fetch, range(0, size, self.part_size)))

            _atomic_download(Path(path), fill)
        return True

    def stat(self, key: str) -> ObjectInfo | None:
        head = self._head(key)
        if head is None:
            return None
        return ObjectInfo(key, head["ContentLength"], head["ETag"], head["LastModified"].timestamp())

    def open_write(self, *, spool_dir: str | os.PathLike | None = None) -> PendingObject:
        import tempfile

        folder = Path(spool_dir) if spool_dir is not None else Path(tempfile.gettempdir())
        folder.mkdir(parents=True, exist_ok=True)
        return _S3Pending(self, folder / f"{SPOOL_PREFIX}{secrets.token_hex(8)}")

    def exists(self, key: str) -> bool:
        return self._head(key) is not None

    def list(self, prefix: str = "", *, with_etags: bool = True) -> list[ObjectInfo]:
        _check_prefix(prefix, self.uri_root)
        root = f"{self.prefix}/" if self.prefix else ""
        found: list[ObjectInfo] = []
        with self._translate("list", prefix):
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                         Prefix=root + prefix)
            for page in pages:
                for item in page.get("Contents", []):
                    found.append(ObjectInfo(item["Key"][len(root):], item["Size"], item["ETag"],
                                            item["LastModified"].timestamp()))
        return sorted(found, key=lambda info: info.key)

    def delete(self, key: str) -> None:
        with self._translate("delete", key):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))


class _S3Pending(PendingObject):
    def __init__(self, store: S3Store, path: Path):
        super().__init__(path)
        self._store = store

    def commit(self, key: str) -> None:
        self._finish()
        self._store.put_file(key, self.path)
        self.committed = True
        self.discard()
