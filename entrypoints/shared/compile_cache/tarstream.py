"""The strict tar stream of the compile cache's archives (docs/COMPILE_CACHE.md).

`pack` writes uncompressed POSIX (pax) tarballs, deterministic (entries and files sorted,
mtime 0, uid/gid 0, modes 0644/0755), file contents copied in the kernel while a second
thread hashes what was written. `extract_archive` is a strict reader of its own rather than
`tarfile.extractall`: only regular files and folders of valid entries pass, anything else
(absolute names, `..`, links, devices, sparse files, oversized headers, more than
`MAX_MEMBERS` members, more member bytes than the budget, a truncated or corrupt stream)
raises `Rejected`, and what it writes goes into a fresh folder only (`O_EXCL | O_NOFOLLOW`).
Gzip-compressed archives (`.tar.gz`) are read too. Stdlib only.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import tarfile
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from entrypoints.shared.compile_cache.entries import entry_of

MAX_MEMBERS = 200_000
MAX_EXTENDED_HEADER = 64 * 1024

_BLOCK = 512
_COPY = 4 * 2**20
_HASH_CHUNK = 4 * 2**20


class Rejected(Exception):
    """An archive that must not be extracted; the message says why."""


# --- copying and hashing ----------------------------------------------------------------

def _copy_range(src: int, dst: int, offset: int, count: int) -> None:
    """Copy `count` bytes at `offset` of `src` to the current position of `dst`, in the kernel
    when it can (copy_file_range), else through a buffer."""
    done = 0
    try:
        while done < count:
            n = os.copy_file_range(src, dst, count - done, offset + done)
            if n == 0:
                raise Rejected("archive is truncated")
            done += n
        return
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM):
            raise
    buffer = bytearray(min(_COPY, count - done) or 1)
    while done < count:
        n = os.preadv(src, [memoryview(buffer)[: min(len(buffer), count - done)]], offset + done)
        if n == 0:
            raise Rejected("archive is truncated")
        _write_all(dst, memoryview(buffer)[:n])
        done += n


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _FileHasher(threading.Thread):
    """Hashes bytes [0, target) of a growing file in a thread of its own, so hashing
    overlaps the copying done by the caller. `advance(n)` raises the target; `result()` waits
    and returns the sha256 hex digest. It reads back what was written (page cache), so the
    digest is of the archive's actual bytes even if a source file changed meanwhile."""

    def __init__(self, fd: int, target: int = 0):
        super().__init__(daemon=True)
        self._fd = fd
        self._target = target
        self._closed = False
        self._cond = threading.Condition()
        self._sha = hashlib.sha256()
        self.hashed = 0
        self.error: BaseException | None = None
        self.start()

    def advance(self, target: int) -> None:
        with self._cond:
            self._target = target
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._closed = True
            self._target = self.hashed
            self._cond.notify()
        self.join()

    def result(self) -> str:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self.join()
        if self.error is not None:
            raise self.error
        return self._sha.hexdigest()

    def run(self) -> None:
        buffer = bytearray(_HASH_CHUNK)
        view = memoryview(buffer)
        try:
            while True:
                with self._cond:
                    while self.hashed >= self._target and not self._closed:
                        self._cond.wait()
                    end = self._target
                    if self.hashed >= end:
                        return
                while self.hashed < end:
                    n = os.preadv(self._fd, [view[: min(_HASH_CHUNK, end - self.hashed)]], self.hashed)
                    if n == 0:
                        raise Rejected("archive is truncated")
                    self._sha.update(view[:n])
                    self.hashed += n
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
            self.error = exc


# --- the tar header -------------------------------------------------------------------
# A POSIX ustar header, with a pax extended header before it when the name does not fit in
# 100 bytes of ASCII or the size in 11 octal digits. Written and parsed here rather than by
# `tarfile`: a few microseconds per member instead of tens, which matters for thousands of
# members, and the reader sees exactly the fields it checks.

_MAX_OCTAL_SIZE = 8**11 - 1


def _octal(value: int, width: int) -> bytes:
    return b"%0*o\0" % (width - 1, value)


def _ustar(name: bytes, kind: bytes, size: int, mode: int) -> bytes:
    header = bytearray(_BLOCK)
    header[0:len(name)] = name
    header[100:108] = _octal(mode, 8)
    header[108:116] = _octal(0, 8)
    header[116:124] = _octal(0, 8)
    header[124:136] = _octal(size, 12)
    header[136:148] = _octal(0, 12)
    header[148:156] = b" " * 8
    header[156:157] = kind
    header[257:265] = b"ustar\x0000"
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header)


def _pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode("utf-8", "surrogateescape")
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return str(length).encode() + body


def _encode_header(name: str, kind: bytes, size: int, mode: int) -> bytes:
    raw = name.encode("utf-8", "surrogateescape")
    records = b""
    if len(raw) > 100 or not raw.isascii():
        records += _pax_record("path", name)
        raw = raw[:100]
    if size > _MAX_OCTAL_SIZE:
        records += _pax_record("size", str(size))
    header = _ustar(raw, kind, min(size, _MAX_OCTAL_SIZE), mode)
    if not records:
        return header
    pad = bytes(-len(records) % _BLOCK)
    return _ustar(b"././@PaxHeader", tarfile.XHDTYPE, len(records), 0o644) + records + pad + header


@dataclass(frozen=True)
class _Header:
    name: str
    kind: bytes
    size: int
    mode: int


def _parse_octal(field: bytes, what: str) -> int:
    if field[:1] and field[0] & 0x80:
        raise Rejected(f"header {what} in base-256")
    digits = field.split(b"\0", 1)[0].strip()
    try:
        return int(digits, 8) if digits else 0
    except ValueError:
        raise Rejected(f"header {what} is not an octal number") from None


def _decode_header(block: bytes) -> _Header:
    stored = _parse_octal(block[148:156], "checksum")
    if stored != sum(block[:148]) + 256 + sum(block[156:]):
        raise Rejected("header checksum mismatch")
    name = block[:100].split(b"\0", 1)[0]
    if block[257:263] == b"ustar\0":  # POSIX; old GNU headers use the prefix field otherwise
        prefix = block[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return _Header(name.decode("utf-8", "surrogateescape"), block[156:157],
                   _parse_octal(block[124:136], "size"), _parse_octal(block[100:108], "mode"))


# --- writing --------------------------------------------------------------------------

class _ArchiveWriter:
    """Writes a pax tarball to the file descriptor `fd` (at its current position, 0), file
    contents copied in the kernel, while a `_FileHasher` hashes what was written."""

    def __init__(self, fd: int):
        self._fd = fd
        self._pending = bytearray()
        self.size = 0
        self._hasher = _FileHasher(fd)

    def _flush(self) -> None:
        if self._pending:
            _write_all(self._fd, self._pending)
            self.size += len(self._pending)
            self._pending.clear()

    def _header(self, name: str, kind: bytes, size: int, mode: int) -> None:
        self._pending += _encode_header(name, kind, size, mode)

    def add_dir(self, name: str) -> None:
        self._header(name, tarfile.DIRTYPE, 0, 0o755)

    def add_file(self, name: str, path: Path) -> int:
        src = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(src)
            size = st.st_size
            self._header(name, tarfile.REGTYPE, size, 0o755 if st.st_mode & 0o111 else 0o644)
            self._flush()
            try:
                _copy_range(src, self._fd, 0, size)
            except Rejected:
                raise OSError(f"{path} shrank while being packed") from None
            self.size += size
        finally:
            os.close(src)
        if size % _BLOCK:
            self._pending += bytes(_BLOCK - size % _BLOCK)
        self._hasher.advance(self.size)
        return size

    def close(self) -> str:
        """Write the end of the archive; the sha256 of all of it."""
        self._pending += bytes(2 * _BLOCK)
        self._flush()
        self._hasher.advance(self.size)
        return self._hasher.result()

    def abort(self) -> None:
        self._hasher.stop()


def pack(entries: Iterable[tuple[str, Path]], fd: int) -> tuple[str, int, dict[str, int]]:
    """Pack (name, path) entries into `fd`; (archive sha256, archive bytes, bytes per entry)."""
    writer = _ArchiveWriter(fd)
    sizes: dict[str, int] = {}
    try:
        for name, path in sorted(entries):
            if path.is_dir():
                total = 0
                writer.add_dir(name)
                for folder, dirs, files in os.walk(path):
                    dirs.sort()
                    rel = Path(folder).relative_to(path)
                    for sub in dirs:
                        writer.add_dir(f"{name}/{(rel / sub).as_posix()}")
                    for file in sorted(files):
                        total += writer.add_file(f"{name}/{(rel / file).as_posix()}", Path(folder, file))
                sizes[name] = total
            else:
                sizes[name] = writer.add_file(name, path)
        sha = writer.close()
    except BaseException:
        writer.abort()
        raise
    return sha, writer.size, sizes


# --- reading --------------------------------------------------------------------------

class _LocalSource:
    """An uncompressed archive in a local file: headers read with pread, contents copied
    in the kernel, and the whole file hashed meanwhile by a `_FileHasher` (pread, not mmap:
    a file truncated under us must fail the pull, not kill the process with SIGBUS)."""

    def __init__(self, fd: int, size: int):
        self._fd = fd
        self._size = size
        self.pos = 0
        self._hasher = _FileHasher(fd, size)

    def read(self, n: int) -> bytes:
        data = os.pread(self._fd, min(n, self._size - self.pos), self.pos)
        self.pos += len(data)
        return data

    def copy_to(self, out: int, n: int) -> None:
        if self.pos + n > self._size:
            raise Rejected("archive is truncated")
        _copy_range(self._fd, out, self.pos, n)
        self.pos += n

    def skip(self, n: int) -> None:
        if self.pos + n > self._size:
            raise Rejected("archive is truncated")
        self.pos += n

    def finish(self) -> tuple[str, int]:
        return self._hasher.result(), self._size

    def abort(self) -> None:
        self._hasher.stop()


class _HashingReader:
    """Reads raw bytes, hashing and counting them, refusing more than `limit` bytes."""

    def __init__(self, raw, limit: int):
        self._raw = raw
        self._limit = limit
        self.sha = hashlib.sha256()
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = _COPY
        data = self._raw.read(min(size, self._limit - self.count + 1))
        self.count += len(data)
        if self.count > self._limit:
            raise Rejected(f"archive is larger than the size limit ({self._limit} bytes)")
        self.sha.update(data)
        return data


class _StreamSource:
    """A gzip-compressed archive read as a stream; the compressed bytes are hashed."""

    def __init__(self, raw, limit: int):
        self._hashing = _HashingReader(raw, limit)
        self._gzip = gzip.GzipFile(fileobj=self._hashing, mode="rb")

    def read(self, n: int) -> bytes:
        return self._gzip.read(n)

    def _take(self, n: int) -> Iterator[bytes]:
        left = n
        while left:
            chunk = self._gzip.read(min(left, _COPY))
            if not chunk:
                raise Rejected("archive is truncated")
            left -= len(chunk)
            yield chunk

    def copy_to(self, out: int, n: int) -> None:
        for chunk in self._take(n):
            _write_all(out, chunk)

    def skip(self, n: int) -> None:
        for _ in self._take(n):
            pass

    def finish(self) -> tuple[str, int]:
        # The checksum covers every byte, including the end blocks and anything after them.
        while self._gzip.read(_COPY):
            pass
        while self._hashing.read(_COPY):
            pass
        return self._hashing.sha.hexdigest(), self._hashing.count

    def abort(self) -> None:
        """Nothing runs in the background for a stream."""


def _read_exact(source, size: int) -> bytes:
    data = source.read(size)
    while len(data) < size:
        more = source.read(size - len(data))
        if not more:
            raise Rejected("archive is truncated")
        data += more
    return data


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def _pax_records(data: bytes) -> dict[str, str]:
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        if space < 0 or not data[pos:space].isdigit():
            raise Rejected("malformed pax header")
        length = int(data[pos:space])
        record = data[space + 1: pos + length]
        if length <= space - pos or pos + length > len(data) or not record.endswith(b"\n") or b"=" not in record:
            raise Rejected("malformed pax header")
        key, _, value = record[:-1].partition(b"=")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def _member_name(name: str) -> list[str]:
    if not name or "\x00" in name:
        raise Rejected(f"member with an empty or NUL name {name!r}")
    if name.startswith("/"):
        raise Rejected(f"member {name!r} has an absolute path")
    parts = name.rstrip("/").split("/")
    if ".." in parts:
        raise Rejected(f"member {name!r} has a '..' component")
    if any(part in ("", ".") for part in parts):
        raise Rejected(f"member {name!r} is not a normalised relative path")
    return parts


_REJECTED_TYPES = {
    tarfile.SYMTYPE: "a symlink",
    tarfile.LNKTYPE: "a hard link",
    tarfile.GNUTYPE_LONGLINK: "a link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.GNUTYPE_SPARSE: "a sparse file",
    tarfile.XGLTYPE: "a global pax header",
}


def _extract(source, *, kind: str, dest: Path, wanted: set[str], budget: int) -> int:
    """Extract the members of `wanted` entries from `source` into the fresh folder `dest`.

    Every member must belong to a valid entry of `kind`; members of other entries are read
    and skipped. Raises Rejected for anything unsafe, truncated or over `budget` member
    bytes; returns the member bytes read. The caller verifies the checksum (`source.finish()`).
    """
    member_bytes = 0
    members = 0
    made: set[tuple[str, ...]] = set()
    long_name: str | None = None
    pax: dict[str, str] = {}
    try:
        while True:
            block = source.read(_BLOCK)
            if not block or block == bytes(_BLOCK):
                return member_bytes
            if len(block) < _BLOCK:
                block += _read_exact(source, _BLOCK - len(block))
            members += 1
            if members > MAX_MEMBERS:
                raise Rejected(f"archive has more than {MAX_MEMBERS} members")
            info = _decode_header(block)
            if info.kind in _REJECTED_TYPES:
                raise Rejected(f"member {info.name!r} is {_REJECTED_TYPES[info.kind]}")
            if info.kind in (tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME):
                if not 0 <= info.size <= MAX_EXTENDED_HEADER:
                    raise Rejected(f"extended header of {info.size} bytes")
                body = _read_exact(source, _padded(info.size))[: info.size]
                if info.kind == tarfile.XHDTYPE:
                    pax = _pax_records(body)
                    if any(key.startswith("GNU.sparse") for key in pax):
                        raise Rejected("archive holds a sparse file")
                else:
                    long_name = body.rstrip(b"\x00").decode("utf-8", "surrogateescape")
                continue
            name = pax.get("path") or long_name or info.name
            size = info.size
            if "size" in pax:
                if not pax["size"].isdigit():
                    raise Rejected(f"member {name!r} has a malformed size")
                size = int(pax["size"])
            pax, long_name = {}, None
            if info.kind not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE):
                raise Rejected(f"member {name!r} has unsupported type {info.kind!r}")
            is_dir = info.kind == tarfile.DIRTYPE or name.endswith("/")
            parts = _member_name(name)
            try:
                entry = entry_of(kind, parts, is_dir)
            except ValueError as exc:
                raise Rejected(str(exc)) from None
            if parts[-1].endswith(".lock"):
                # A lock travelling with an entry would make the compiler wait on it forever.
                raise Rejected(f"member {name!r} is a lock file")
            if size < 0:
                raise Rejected(f"member {name!r} has a negative size")
            if is_dir:
                if size:
                    raise Rejected(f"folder member {name!r} has a size")
                if entry is not None and entry in wanted:
                    _make_dirs(dest, parts, made)
                continue
            member_bytes += size
            if member_bytes > budget:
                raise Rejected(f"members exceed the size limit of {budget} bytes")
            if entry in wanted:
                _make_dirs(dest, parts[:-1], made)
                _write_member(source, dest.joinpath(*parts), size, 0o755 if info.mode & 0o111 else 0o644)
            else:
                source.skip(size)
            if size % _BLOCK:
                source.skip(_BLOCK - size % _BLOCK)
    except (EOFError, zlib.error, gzip.BadGzipFile, UnicodeError, ValueError) as exc:
        raise Rejected(f"archive is corrupt or truncated ({type(exc).__name__}: {exc})") from exc


def _make_dirs(dest: Path, parts: list[str], made: set[tuple[str, ...]]) -> None:
    """mkdir -p dest/parts, remembering what exists (every folder in dest is ours: no links)."""
    for depth in range(1, len(parts) + 1):
        prefix = tuple(parts[:depth])
        if prefix not in made:
            try:
                os.mkdir(dest.joinpath(*prefix), 0o755)
            except FileExistsError:
                if not dest.joinpath(*prefix).is_dir():
                    raise Rejected(f"member {'/'.join(prefix)!r} is both a file and a folder") from None
            made.add(prefix)


def _write_member(source, path: Path, size: int, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except FileExistsError:
        raise Rejected(f"member {path.name!r} appears twice") from None
    except (IsADirectoryError, NotADirectoryError):
        raise Rejected(f"member {path.name!r} is both a file and a folder") from None
    try:
        source.copy_to(fd, size)
    finally:
        os.close(fd)


def extract_archive(fd: int, size: int, *, compressed: bool, limit: int, kind: str, dest: Path,
                    wanted: set[str], budget: int) -> tuple[int, str, int]:
    """Extract the `wanted` entries of the archive open at `fd` (`size` bytes; gzip when
    `compressed`, then at most `limit` compressed bytes) into the fresh folder `dest`.

    Returns (member bytes read, the archive's sha256, its bytes). Raises Rejected (see the
    module docstring); the caller compares the sha256 with the manifest's before using `dest`.
    """
    if compressed:
        source = _StreamSource(open(fd, "rb", closefd=False), limit)
    else:
        source = _LocalSource(fd, size)
    try:
        member_bytes = _extract(source, kind=kind, dest=dest, wanted=wanted, budget=budget)
        sha, raw_bytes = source.finish()
    except BaseException:
        source.abort()
        raise
    return member_bytes, sha, raw_bytes
