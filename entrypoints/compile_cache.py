"""The compile cache: pull before anything compiles, push what was compiled afterwards.

Stdlib only (+ `entrypoints.storage`); torch is imported lazily, only by `key_for` on the
native runtime. Nothing here imports `orchestrator`.

## Key

`CacheKey` holds what decides whether a compiled artifact can be reused: the compiler kind
and version, the runtime, the compiler flags, the target family and the world size. Its
`digest()` names the folder under the store: `<kind>-<version>-<sha256[:16]>`.

- `xla` runtime: kind `neuronx-cc`, version from `neuronx-cc --version` ("absent" when the
  compiler is not on PATH), flags = `NEURON_CC_FLAGS` without `--cache_dir`.
- `native` runtime: kind `inductor`, version = `torch.__version__`, flags = every
  `TORCHINDUCTOR_*` variable except `TORCHINDUCTOR_CACHE_DIR`, sorted `NAME=value` pairs.
  Inductor keys its own entries by graph, so this is coarse on purpose.

## Store layout under `<store_uri>/<key.digest()>/`

    manifest.json                 {"schema": 1, "key": {...}, "entries": {name: {"archive":
                                   "archives/<sha256>.tar", "sha256": <archive sha256>,
                                   "bytes": <entry file bytes>}}, "archives": {"archives/<sha>.tar":
                                   {"bytes": <archive bytes>}}, "updated_at": "<UTC ISO time>"}
    archives/<sha256>.tar         immutable, content-addressed: one per push, holding its new entries

Archives are uncompressed POSIX (pax) tarballs: NEFFs and compiled kernels compress poorly
and gzip would cost more time than the bytes it saves, so a pull or push runs at the speed
of the disk and network. Pull also reads `.tar.gz` archives named so in a manifest. Packing
is deterministic (entries and files sorted, mtime 0, uid/gid 0, modes 0644/0755).

## Entries

- `neuronx-cc` (the Neuron persistent cache, `<root>/neuronxcc-<version>/MODULE_<hash>+<flags>/`):
  an entry is one `MODULE_*` folder, named `neuronxcc-<version>/MODULE_...`. It is complete
  when it holds `model.done` and `model.neff`, no `*.lock` anywhere inside, and only regular
  files and folders. Failed compiles (`model.log` without `model.neff`) and compiles in
  flight (locked) never travel.
- `inductor` (`TORCHINDUCTOR_CACHE_DIR`): an entry is one file, named by its path relative to
  the root (`fxgraph/ev/<key>/<hash>`, `rj/c<hash>.so`, `triton/0/<hash>/<file>`...). Inductor
  names its files by content hash and writes them atomically, so a file is complete unless
  it is a lock (`*.lock`, the `locks/` folder, or a `<name>.lock` beside it) or a temporary
  (a name starting with `.` or `tmp`, or ending in `.tmp`). Per-file entries keep folders
  that grow (an fxgraph key holding several graphs) travelling correctly.

## Pull (never raises for a bad, hostile or missing cache: it warns and the job runs cold)

Reads the manifest, then, for each archive holding entries missing locally, reads the
archive where it lies (file://) or from a download into the extraction folder (S3: parallel
ranged GETs), through a strict reader of its own (not `tarfile.extractall`). Only regular
files and folders pass: absolute names, `..`, `.` or empty components, members that belong
to no valid entry of the key's kind, lock files, symlinks, hard links, devices, FIFOs,
sparse files, global pax headers, oversized extended headers, a name used twice or as both
file and folder reject the whole archive, as do more than `MAX_MEMBERS` members, member
bytes beyond what is left of `max_bytes` (checked against the manifest before downloading,
against the archive's size, and member by member), a truncated or corrupt stream, and a
sha256 that differs from the manifest's. Members of the wanted entries are written
(`O_EXCL | O_NOFOLLOW`, modes 0644/0755) into a fresh temporary folder inside `cache_dir`;
only when the archive is whole and its checksum verified are complete entries renamed into
place (an entry that already exists locally is kept). So nothing is written outside
`cache_dir`, and a rejected archive leaves nothing. Contents are copied in the kernel
(`copy_file_range`) while a second thread hashes the archive.

## Push

Finds complete local entries missing from the manifest, packs them into one archive
(written in place in a file:// store, spooled in `cache_dir` for S3; contents copied in the
kernel while a second thread hashes what was written), uploads it, and only then publishes the manifest by a conditional
write (IfMatch on the etag read, or IfNoneMatch when creating). On a conflict it re-reads,
merges (union; an entry already published is kept as published) and retries with jittered
backoff, `PUBLISH_ATTEMPTS` times at most. Since the archive always lands before the
manifest naming it, a push killed at any point leaves at worst an unreferenced archive,
which `orchestrator cache prune` removes after its grace period. After publishing, push
checks its archive is still there (a prune racing with a re-upload of identical content) and
uploads it again if not. Storage failures become warnings; push raises only for
programming errors.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import stat
import subprocess
import tarfile
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from entrypoints.storage import SPOOL_PREFIX, FileStore, PreconditionFailed, StorageError, Store, open_store

SCHEMA = 1
MANIFEST = "manifest.json"
ARCHIVE_DIR = "archives"
ARCHIVE_SUFFIX = ".tar"
KINDS = ("neuronx-cc", "inductor")
RUNTIME_KINDS = {"xla": "neuronx-cc", "native": "inductor"}
MAX_MEMBERS = 200_000
MAX_EXTENDED_HEADER = 64 * 1024
PUBLISH_ATTEMPTS = 16
BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 2.0
DEFAULT_MAX_BYTES = 20 * 2**30
# Temporary names inside cache_dir; older ones than this are debris of a killed pull/push.
PULL_TEMP_PREFIX = ".cache-pull-"
STALE_TEMP_S = 3600.0

_BLOCK = 512
_COPY = 4 * 2**20
_HASH_CHUNK = 4 * 2**20
_ARCHIVE_NAME = re.compile(r"^archives/([0-9a-f]{64})\.tar(\.gz)?$")
_NEURON_TOP = re.compile(r"^neuronxcc-[A-Za-z0-9._+-]+$")
_SAFE_PART = re.compile(r"^[A-Za-z0-9_+=@,-][A-Za-z0-9._+=@,-]*$")


# --- key ------------------------------------------------------------------------------

@dataclass(frozen=True)
class CacheKey:
    """What decides whether compiled artifacts are reusable (see the module docstring)."""

    kind: str
    compiler_version: str
    runtime: str
    flags: str
    target: str
    world_size: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"cache kind {self.kind!r}: expected one of {KINDS}")
        if self.runtime not in RUNTIME_KINDS:
            raise ValueError(f"runtime {self.runtime!r}: expected one of {tuple(RUNTIME_KINDS)}")
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {self.world_size!r}")

    def as_dict(self) -> dict:
        return asdict(self)

    def digest(self) -> str:
        canonical = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        name = f"{self.kind}-{self.compiler_version}-{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"
        return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _neuronx_cc_version(env: Mapping[str, str]) -> str:
    exe = shutil.which("neuronx-cc", path=env.get("PATH"))
    if exe is None:
        return "absent"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120,
                             env=dict(env), check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    text = out.stdout + out.stderr
    match = re.search(r"version\s+([0-9][0-9A-Za-z.+_-]*)", text, re.IGNORECASE) or re.search(
        r"\b(\d+\.\d+(?:\.\d+)+[0-9A-Za-z.+_-]*)", text)
    return match.group(1) if match else "unknown"


def neuron_cc_flags(raw: str) -> str:
    """NEURON_CC_FLAGS without the cache location (`--cache_dir=X` or `--cache_dir X`)."""
    try:
        tokens = shlex.split(raw)
    except ValueError:
        tokens = raw.split()
    kept: list[str] = []
    skip = False
    for token in tokens:
        if skip:
            skip = False
            continue
        if token == "--cache_dir":
            skip = True
            continue
        if token.startswith("--cache_dir="):
            continue
        kept.append(token)
    return " ".join(kept)


def _torch_version() -> str:
    try:
        import torch
    except ImportError:
        return "absent"
    return str(torch.__version__)


def key_for(runtime: str, target: str, world_size: int, env: Mapping[str, str]) -> CacheKey:
    """The cache key of a job: `runtime` xla|native, `target` family (trn1, trn2, cpu, cuda)."""
    if runtime == "xla":
        return CacheKey("neuronx-cc", _neuronx_cc_version(env), "xla",
                        neuron_cc_flags(env.get("NEURON_CC_FLAGS", "")), target, world_size)
    if runtime == "native":
        flags = " ".join(f"{name}={env[name]}" for name in sorted(env)
                         if name.startswith("TORCHINDUCTOR_") and name != "TORCHINDUCTOR_CACHE_DIR")
        return CacheKey("inductor", _torch_version(), "native", flags, target, world_size)
    raise ValueError(f"runtime {runtime!r}: expected one of {tuple(RUNTIME_KINDS)}")


# --- entries --------------------------------------------------------------------------

def _tree_is_plain(root: Path) -> bool:
    """Only regular files and folders, and no lock file, anywhere under `root`."""
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            mode = os.lstat(os.path.join(folder, name)).st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                return False
            if name.endswith(".lock"):
                return False
    return True


def _neuron_entries(cache_dir: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in sorted(cache_dir.iterdir()):
        if not (_NEURON_TOP.match(top.name) and top.is_dir() and not top.is_symlink()):
            continue
        for module in sorted(top.iterdir()):
            if not module.name.startswith("MODULE_") or module.is_symlink() or not module.is_dir():
                continue
            try:
                complete = ((module / "model.done").is_file() and (module / "model.neff").is_file()
                            and _tree_is_plain(module))
            except FileNotFoundError:
                complete = False  # removed while we looked
            if complete:
                found[f"{top.name}/{module.name}"] = module
    return found


def _inductor_temporary(name: str) -> bool:
    return name.startswith((".", "tmp")) or name.endswith((".lock", ".tmp"))


def _inductor_entries(cache_dir: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(cache_dir):
        rel = Path(folder).relative_to(cache_dir)
        dirs[:] = sorted(d for d in dirs if not _inductor_temporary(d) and not (rel == Path(".") and d == "locks"))
        names = set(files)
        for name in sorted(files):
            if _inductor_temporary(name) or f"{name}.lock" in names:
                continue
            path = Path(folder, name)
            try:
                if not stat.S_ISREG(path.lstat().st_mode):
                    continue
            except FileNotFoundError:
                continue
            found[(rel / name).as_posix()] = path
    return found


def complete_entries(cache_dir: Path, kind: str) -> dict[str, Path]:
    """Entry name -> folder (neuronx-cc) or file (inductor) of the complete local entries."""
    if kind not in KINDS:
        raise ValueError(f"cache kind {kind!r}: expected one of {KINDS}")
    cache_dir = Path(cache_dir)
    if not cache_dir.is_dir():
        return {}
    found = _neuron_entries(cache_dir) if kind == "neuronx-cc" else _inductor_entries(cache_dir)
    # A name that pull would refuse must not travel either.
    return {name: path for name, path in found.items() if valid_entry_name(kind, name)}


def valid_entry_name(kind: str, name: object) -> bool:
    """Whether a manifest's entry name is one this kind can hold (and safe as a path)."""
    if not isinstance(name, str) or not name or len(name) > 1024:
        return False
    parts = name.split("/")
    if not all(_SAFE_PART.match(part) for part in parts):
        return False
    if kind == "neuronx-cc":
        return len(parts) == 2 and bool(_NEURON_TOP.match(parts[0])) and parts[1].startswith("MODULE_")
    return parts[0] != "locks" and not any(_inductor_temporary(part) for part in parts)


# --- archives: copying and hashing ----------------------------------------------------

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


# --- archives: the tar header ---------------------------------------------------------
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


# --- archives: writing ----------------------------------------------------------------

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


def _pack(entries: Iterable[tuple[str, Path]], fd: int) -> tuple[str, int, dict[str, int]]:
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


# --- archives: reading ----------------------------------------------------------------

class Rejected(Exception):
    """An archive that must not be extracted; the message says why."""


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


def _entry_of(kind: str, parts: list[str], is_dir: bool) -> str | None:
    """The entry a member belongs to; None for a folder above entries (created as needed)."""
    if kind == "neuronx-cc":
        if len(parts) == 1 and is_dir and _NEURON_TOP.match(parts[0]):
            return None
        name = "/".join(parts[:2])
    else:
        if is_dir:
            return None
        name = "/".join(parts)
    if len(parts) < 2 and kind == "neuronx-cc" or not valid_entry_name(kind, name):
        raise Rejected(f"member {'/'.join(parts)!r} is not part of a {kind} cache entry")
    return name


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
            entry = _entry_of(kind, parts, is_dir)
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


# --- manifest -------------------------------------------------------------------------

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
    return {"schema": SCHEMA, "key": key.as_dict(), "entries": {}, "archives": {}, "updated_at": _now_iso()}


def _manifest_bytes(doc: dict) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


# --- pull -----------------------------------------------------------------------------

@dataclass
class _Transfer:
    """What one pull or push moved: bytes, seconds, archives, and the warnings it raised
    (both report problems this way instead of raising, so training never stops for them)."""

    bytes: int = 0
    seconds: float = 0.0
    archives: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass
class PullStats(_Transfer):
    hit_entries: int = 0


@dataclass
class PushStats(_Transfer):
    new_entries: int = 0


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
    """Fetch the entries of `key` missing from `cache_dir` (see the module docstring).

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
            if archive.endswith(".gz"):
                source = _StreamSource(open(fd, "rb", closefd=False), limit)
            else:
                source = _LocalSource(fd, size)
            try:
                member_bytes = _extract(source, kind=key.kind, dest=temp, wanted=wanted, budget=budget)
                got, raw_bytes = source.finish()
            except BaseException:
                source.abort()
                raise
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
    import tempfile

    return tempfile.mkdtemp(prefix=PULL_TEMP_PREFIX, dir=cache_dir)


# --- push -----------------------------------------------------------------------------

def _read_manifest(store: Store, key: CacheKey, warnings: list[str]) -> tuple[dict, str | None]:
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


def _upload_archive(store: Store, key: CacheKey, entries: dict[str, Path], spool_dir: Path
                    ) -> tuple[str, int, dict[str, int]]:
    with store.open_write(spool_dir=spool_dir) as pending:
        sha, size, sizes = _pack(entries.items(), pending.fileno())
        pending.commit(f"{key.digest()}/{ARCHIVE_DIR}/{sha}{ARCHIVE_SUFFIX}")
    return sha, size, sizes


def push(store_uri: str, key: CacheKey, cache_dir: Path, *, s3_client=None,
         store: Store | None = None) -> PushStats:
    """Publish the complete local entries the manifest lacks (see the module docstring).

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
        doc, etag = _read_manifest(store, key, stats.warnings)
        missing = {name: path for name, path in local.items() if name not in doc["entries"]}
        if not missing:
            return stats
        sha, size, sizes = _upload_archive(store, key, missing, cache_dir)
        archive = f"{ARCHIVE_DIR}/{sha}{ARCHIVE_SUFFIX}"
        ours = {name: {"archive": archive, "sha256": sha, "bytes": sizes[name]} for name in missing}
        published = _publish(store, key, doc, etag, ours, archive, size, stats)
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


def _publish(store: Store, key: CacheKey, doc: dict, etag: str | None, ours: dict[str, dict],
             archive: str, size: int, stats: PushStats) -> int:
    """Publish the manifest with `ours` merged in; the number of entries we added."""
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
                store.put_bytes(manifest_key, _manifest_bytes(merged), if_none_match=True)
            else:
                store.put_bytes(manifest_key, _manifest_bytes(merged), if_match=etag)
            return len(added)
        except PreconditionFailed:
            time.sleep(random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt)))
            doc, etag = _read_manifest(store, key, [])
    stats.warnings.append(f"{store.uri(manifest_key)}: still conflicting after {PUBLISH_ATTEMPTS} attempts; "
                          f"{len(ours)} entries not published")
    return 0
