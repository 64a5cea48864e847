"""Atomic file writes: a reader sees the old file or the new one, never a part.

The one helper for both sides (the container's entrypoints and the orchestrator); stdlib
only, and nothing here imports `orchestrator`.

What every writer here guarantees:

- The content goes to a temporary file that no other writer shares (`tempfile.mkstemp`),
  in the destination's folder (or in `staging`, a folder on the same file system), which is
  renamed over the destination once complete. On any error, an exception in the caller's
  `with` block included, the temporary file is removed and the destination is untouched.
- `durable=True` (the default): the file is fsync'd before the rename and its folder after
  it, so the new content survives a crash of the machine once the call returns. `False`: a
  reader still never sees a part, but a crash may bring the old content back (for files
  rewritten every few seconds, or lost with the machine anyway).
- Mode: an existing file keeps its mode; a new one gets the mode `open(path, "w")` would
  give it, 0o666 less the umask (mkstemp alone makes 0o600). `mode=` sets one instead.
- Symbolic links are written through, as `open()` does: the link's target gets the new
  content (and keeps its mode), the link stays a link; a dangling link's target is
  created. `follow_symlinks=False` replaces the link itself with the file (a store's folder,
  where a planted link must not redirect a write elsewhere).
- Something that is not a regular file (a folder, FIFO, socket or device) is never
  replaced: `NotRegularFile`, an OSError, checked before writing and again right before
  the rename.
- The temporary file is named `<temp_prefix><random>.tmp` (default prefix `.<name>.`), so
  readers of the folder that skip hidden or `*.tmp` names never pick it up.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class NotRegularFile(OSError):
    """A write refused to replace something that is not a regular file (see the module
    docstring); `strerror` is "is <what it is>, not a regular file"."""


def kind_of(mode: int) -> str | None:
    """What a file of `mode` is ("a folder", "a FIFO (named pipe)"...), None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def not_a_file(path: str | os.PathLike, *, follow_symlinks: bool = True) -> str | None:
    """What `path` is when a file written there would replace something that is not a
    regular file ("a FIFO (named pipe)", "a character device", "a folder"...); None for a
    regular file, nothing yet, or a path that cannot be looked up (the write says why).
    Links are followed as a write follows them; with `follow_symlinks=False` a link is
    itself replaceable (None)."""
    try:
        mode = os.stat(path).st_mode if follow_symlinks else os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        return None
    if not follow_symlinks and stat.S_ISLNK(mode):
        return None
    return kind_of(mode)


def _refuse_special(target: Path, given: str | os.PathLike, follow_symlinks: bool) -> None:
    kind = not_a_file(target, follow_symlinks=follow_symlinks)
    if kind is not None:
        raise NotRegularFile(errno.EEXIST, f"is {kind}, not a regular file", str(given))


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where the OS lets us (Linux's
    /proc/self/status); elsewhere set and restored under a lock, so two of our threads never
    see the temporary value."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    # The rename is durable only once the folder's entry is; some file systems refuse
    # fsync on a folder (EINVAL), where the rename is as durable as they make it.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _temp_in(folder: Path, prefix: str, mode: int) -> tuple[IO[bytes], Path]:
    """A new temporary file of `mode` in `folder`, open for writing (its `name` is its path)."""
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, mode)
        return open(name, "wb"), Path(name)  # noqa: SIM115 - the caller closes it
    except BaseException:
        os.unlink(name)
        raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path: str | os.PathLike, *, durable: bool = True, mode: int | None = None,
              follow_symlinks: bool = True, temp_prefix: str | None = None,
              staging: str | os.PathLike | None = None) -> Iterator[IO[bytes]]:
    """A binary file to fill (its `name` is the temporary file's path); on leaving the block
    it replaces `path` (see the module docstring). `staging` is the folder of the temporary file (default: the destination's);
    should the rename from there fail across file systems (EXDEV), the file is copied to a
    temporary file beside the destination and renamed from there. OSError propagates."""
    given = path
    target = Path(os.path.realpath(path)) if follow_symlinks else Path(os.path.abspath(path))
    _refuse_special(target, given, follow_symlinks)
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            st = os.stat(target) if follow_symlinks else os.lstat(target)
            mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o666 & ~current_umask()
        except FileNotFoundError:
            mode = 0o666 & ~current_umask()
    prefix = temp_prefix if temp_prefix is not None else f".{target.name}."
    folder = Path(staging) if staging is not None else target.parent
    if staging is not None:
        folder.mkdir(parents=True, exist_ok=True)
    handle, temp = _temp_in(folder, prefix, mode)
    moved: Path | None = None
    try:
        with handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        _refuse_special(target, given, follow_symlinks)  # made meanwhile: still never replaced
        try:
            os.replace(temp, target)
        except OSError as exc:
            if exc.errno != errno.EXDEV or staging is None:
                raise
            moved = _copy_beside(temp, target, prefix, mode, durable)
            os.replace(moved, target)
            temp.unlink()
        if durable:
            _fsync_folder(target.parent)
    except BaseException:
        for leftover in (temp, moved):
            if leftover is not None:
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()
        raise


def _copy_beside(source: Path, target: Path, prefix: str, mode: int, durable: bool) -> Path:
    """`source` copied into a new temporary file in `target`'s folder; its path."""
    out, temp = _temp_in(target.parent, prefix, mode)
    try:
        with out, open(source, "rb") as src:
            shutil.copyfileobj(src, out, 4 * 2**20)
            out.flush()
            if durable:
                os.fsync(out.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    return temp


def write_bytes(path: str | os.PathLike, data: bytes, **options: Any) -> Path:
    """Replace `path` with `data` atomically (options: those of `replacing`); `path` as given."""
    with replacing(path, **options) as handle:
        handle.write(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, *, encoding: str = "utf-8", **options: Any) -> Path:
    """Replace `path` with `text` atomically, encoded (options: those of `replacing`)."""
    return write_bytes(path, text.encode(encoding), **options)


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """How every JSON file here is written: sorted keys, `indent`, a final newline."""
    return json.dumps(value, indent=indent, sort_keys=True) + "\n"


def write_json(path: str | os.PathLike, value: Any, *, indent: int | None = 2, **options: Any) -> Path:
    """Replace `path` with `value` as JSON (`json_text`) atomically (options: those of `replacing`)."""
    return write_bytes(path, json_text(value, indent=indent).encode(), **options)
