"""A full disk named by its cause: "No space left on device", where, and how much is free.

A write that meets a full disk does not always say so: torch.save into a file ends in
`RuntimeError: [enforce fail at inline_container.cc:664] . unexpected pos ...`, the OSError
(ENOSPC) that caused it at most in the exception's context. `DiskFull` is what a failed write
becomes when its cause is a full disk: found by errno in the exception chain, or, for an
error that hides it, by the free space of the file system it was writing to, looked at while
the write's own partial file still holds its blocks. `describe` words any exception for a
failure reason. Stdlib only.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

# A failed write leaves its file system below this many free bytes when a full disk failed it:
# the write that failed was refused its next block, so what is left is less than a block of
# the file system (4 KiB) plus the file system's own slack (delayed allocation, a journal's
# reserve), far below a mebibyte. Another error met with this little room is named so too:
# the next write would meet the full disk anyway.
FULL_BELOW = 1 << 20
NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"


class DiskFull(OSError):
    """A write refused for want of space: errno ENOSPC, with the path and the free bytes."""


def free_bytes(path: str | os.PathLike) -> int | None:
    """The bytes this process may still write on `path`'s file system (root may use the
    blocks reserved for it), or None when they cannot be read."""
    try:
        st = os.statvfs(_existing(Path(path)))
    except (OSError, AttributeError):  # AttributeError: no statvfs on this platform
        return None
    blocks = st.f_bfree if hasattr(os, "geteuid") and os.geteuid() == 0 else st.f_bavail
    return int(blocks) * int(st.f_frsize)


def mount_point(path: str | os.PathLike) -> Path:
    """The folder at which `path`'s file system is mounted (the first folder above it on
    another device)."""
    path = _existing(Path(os.path.abspath(path)))
    try:
        device = path.stat().st_dev
        while path.parent != path and path.parent.stat().st_dev == device:
            path = path.parent
    except OSError:
        pass
    return path


def in_chain(exc: BaseException) -> OSError | None:
    """The first OSError with errno ENOSPC among `exc`, its cause and its context."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno == errno.ENOSPC:
            return current
        current = current.__cause__ or current.__context__
    return None


def as_disk_full(exc: BaseException, path: str | os.PathLike,
                 written: str | os.PathLike | None = None) -> DiskFull | None:
    """A `DiskFull` naming `path` when `exc`, met writing it, came of a full disk: ENOSPC in
    its chain, or (an error that hides it, as torch.save's) a file system left with less than
    FULL_BELOW bytes. `written`: the file actually being written (a temporary file elsewhere),
    whose file system is the one looked at. Call it before the partial file is removed. None
    otherwise, and for an exception that is already a DiskFull."""
    if isinstance(exc, DiskFull) or not isinstance(exc, Exception):
        return None
    written = path if written is None else written
    free = free_bytes(written)
    if in_chain(exc) is None and (free is None or free >= FULL_BELOW or not isinstance(exc, (OSError, RuntimeError))):
        return None
    room = f"{free:,} bytes free" if free is not None else "its free space unknown"
    return DiskFull(errno.ENOSPC, f"{NO_SPACE}: writing {path} (the file system at {mount_point(written)}: {room})")


def describe(exc: BaseException) -> str:
    """`Type: message` for a failure reason, with "(No space left on device)" added when a
    full disk caused it and the message does not say so."""
    text = f"{type(exc).__name__}: {exc}"
    cause = in_chain(exc)
    if cause is not None and NO_SPACE not in text:
        where = f": {cause.filename}" if cause.filename else ""
        text += f" ({NO_SPACE}{where})"
    return text


def _existing(path: Path) -> Path:
    """`path` or its nearest folder above that exists (a file not yet written has none)."""
    while not path.exists() and path.parent != path:
        path = path.parent
    return path
