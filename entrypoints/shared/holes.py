"""Copying a file with its holes: a sparse file stays sparse.

Python's own copies (shutil.copyfile, which uses sendfile on Linux; shutil.copyfileobj) read a
hole as zeros and write them, so a 2 GB sparse file takes 2 GB of disk once copied (issue 32,
finding 14). `copy_data` copies only the file's data extents, as `lseek(2)` SEEK_DATA and
SEEK_HOLE find them, and gives the copy the source's size, so its holes stay holes. Each extent
goes through `os.copy_file_range` where the kernel has it (no bytes through this process; XFS
and Btrfs share the blocks, a reflink), else through reads and writes. A file system that
cannot say where the data is (SEEK_DATA refused) is copied whole, as before. No library on
PyPI does this (the `reflink` packages only clone, which ext4 and tmpfs cannot);
docs/BENCHMARKS.md ("Sparse files") has the figures.
"""

from __future__ import annotations

import errno
import os
import shutil

_CHUNK = 8 * 2**20
# copy_file_range refusing a pair of files (another file system on an older kernel, a file
# system without it): the extent goes through reads and writes instead.
_NO_COPY_RANGE = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP,
                            errno.EPERM})


def extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The (start, end) byte ranges of `fd` that hold data, holes left out; the whole file
    when the system cannot say (no SEEK_DATA, or the file system refuses it)."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None:
        return [(0, size)] if size else []
    found: list[tuple[int, int]] = []
    position = 0
    while position < size:
        try:
            start = os.lseek(fd, position, seek_data)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data at or after `position`: the rest is a hole
                break
            return [(0, size)] if size else []  # not said here: all of it
        end = min(os.lseek(fd, start, seek_hole), size)
        if end > start:
            found.append((start, end))
        position = max(end, start + 1)
    return found


def _copy_range(src: int, dst: int, start: int, end: int, use_kernel: bool) -> bool:
    """Copy bytes [start, end) of `src` to the same offsets of `dst`; whether the kernel's
    copy_file_range may still be used for the next ranges. Stops early at the source's end (a
    file that shrank meanwhile)."""
    position = start
    while use_kernel and position < end:
        try:
            done = os.copy_file_range(src, dst, min(end - position, _CHUNK), position, position)
        except OSError as exc:
            if exc.errno not in _NO_COPY_RANGE:
                raise
            use_kernel = False
            break
        if done == 0:  # the end, or a file system whose copy_file_range copies nothing: reads say which
            use_kernel = False
            break
        position += done
    while position < end:
        data = os.pread(src, min(end - position, _CHUNK), position)
        if not data:
            break
        view = memoryview(data)
        while view:
            written = os.pwrite(dst, view, position)
            position += written
            view = view[written:]
    return use_kernel


def copy_data(src: int, dst: int) -> None:
    """Copy the content of the file open at `src` into the empty file open for writing at
    `dst` (file descriptors), keeping the source's holes as holes; `dst` ends at the source's
    size. The offsets of neither descriptor matter (positioned reads and writes)."""
    size = os.fstat(src).st_size
    use_kernel = hasattr(os, "copy_file_range")
    for start, end in extents(src, size):
        use_kernel = _copy_range(src, dst, start, end, use_kernel)
    os.ftruncate(dst, size)  # the trailing hole, which no extent wrote


def copy_stream(src, dst) -> None:
    """`copy_data` between two open file objects (a binary reader, a binary writer that holds
    nothing written yet): what `shutil.copyfileobj` does, with the holes kept."""
    dst.flush()
    copy_data(src.fileno(), dst.fileno())


def copy_file(src: str | os.PathLike, dst: str | os.PathLike) -> str | os.PathLike:
    """`shutil.copy2` with the holes kept (the copy function of `shutil.copytree`): the content,
    then the permission bits and times. Returns `dst`."""
    with open(src, "rb") as source, open(dst, "wb") as target:
        copy_data(source.fileno(), target.fileno())
    shutil.copystat(src, dst)
    return dst
