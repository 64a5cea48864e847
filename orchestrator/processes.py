"""Processes of this machine, through psutil: whether one lives, what it runs, and a tree of
them to signal.

Used by the local backend (its supervisors and the hosts' processes) and by sweep runners
(the process that holds a sweep). psutil reads each OS's own process table (/proc on Linux,
sysctl on macOS), so nothing here parses it by hand; but who holds a file lock
(`lock_holder`), which psutil does not read: Linux's /proc/locks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import psutil


def process_alive(pid: int | None) -> bool:
    """Whether `pid` is a live process: it exists and is not a zombie (one of another user
    counts as alive: it exists)."""
    if not pid:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def command_line(pid: int) -> list[str] | None:
    """The argv of process `pid`; None when it is gone or its command line cannot be read."""
    try:
        return psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def runs(pid: int | None, *needles: Iterable[str]) -> bool:
    """Whether process `pid` lives and its argv has, for each of `needles`, one of its words
    (so that a recycled pid, now another program's, is never taken for the one recorded)."""
    argv = command_line(pid) if pid and process_alive(pid) else None
    return argv is not None and all(set(words) & set(argv) for words in needles)


def process_tree(pgid: int) -> list[int]:
    """Pids of process group `pgid` and of all their descendants, including descendants that
    left the group (torchrun starts every worker in a session of its own, so a signal to a
    host's group alone never reaches the training processes)."""
    children: dict[int, list[int]] = {}
    found: set[int] = set()
    for proc in psutil.process_iter(["ppid"]):
        try:
            group = os.getpgid(proc.pid)
        except OSError:  # exited while we read
            continue
        children.setdefault(proc.info["ppid"], []).append(proc.pid)
        if group == pgid:
            found.add(proc.pid)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return sorted(found)


def kill_tree(pgid: int | None, signum: int) -> None:
    """Send `signum` to a process group and every descendant (see `process_tree`).

    The tree is read before any signal goes out: once torchrun dies its workers are
    re-parented and could no longer be told apart from other processes."""
    if not pgid:
        return
    for pid in process_tree(pgid):
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def lock_holder(path: str | os.PathLike, byte: int | None = None) -> int | None:
    """The pid of another process that holds a write lock (POSIX, fcntl) on `path`, one that
    covers `byte` when given; None when none is found or the system does not say (Linux lists
    the locks in /proc/locks; psutil does not read them). Cheap: one small file read, no
    process scanned."""
    try:
        st = os.stat(path)
        with open("/proc/locks") as handle:
            listed = handle.read()
    except OSError:
        return None
    for line in listed.splitlines():
        # "1: POSIX  ADVISORY  WRITE 1234 08:02:5678 120 120" (MAJOR:MINOR:INODE, the range's
        # first and last byte or EOF); a waiter's line has "->" and holds nothing.
        fields = line.split()
        if len(fields) < 8 or "->" in fields or fields[1] != "POSIX" or fields[3] != "WRITE":
            continue
        major, minor, inode = (fields[5].split(":") + ["", "", ""])[:3]
        try:
            same = (int(inode), int(major, 16), int(minor, 16)) == (st.st_ino, os.major(st.st_dev), os.minor(st.st_dev))
            first, last = int(fields[6]), (None if fields[7] == "EOF" else int(fields[7]))
            pid = int(fields[4])
        except ValueError:
            continue
        covers = byte is None or (first <= byte and (last is None or byte <= last))
        if same and covers and pid > 0 and pid != os.getpid():
            return pid
    return None
