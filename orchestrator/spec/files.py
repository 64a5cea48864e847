"""Reading spec files: only regular files, at most MAX_SPEC_BYTES + 1 bytes, UTF-8, with a
did-you-mean for a file that is not there. The spec, a sweep, a sweep's `base:` and the
`infra:` file are all read this way.
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from pathlib import Path

from orchestrator.errors import Problem, SpecError
from orchestrator.spec.source import MAX_SPEC_BYTES

# How alike two file names' stems must be (difflib ratio) for "did you mean".
CLOSE_NAME_CUTOFF = 0.75


class UnreadableSpec(Exception):
    """Why a file cannot be read as a spec; the caller says where the file was named.

    `missing` is True when nothing is at the path (see `_missing_hint`); `hint` says what to
    do; `line` and `column` (1-based, 0 when unknown) locate the problem in the file."""

    def __init__(self, message: str, missing: bool = False, hint: str | None = None, line: int = 0,
                 column: int = 0):
        super().__init__(message)
        self.missing = missing
        self.hint = hint
        self.line = line
        self.column = column


def close_spec_name(path: Path, referrer: str | None = None) -> str | None:
    """The name of a YAML file in `path`'s folder close to `path`'s name, or None.

    For a path that does not exist: first the same name with the other YAML extension
    (`local-smoke.yaml` for `local-smoke.yml`, the likeliest slip), else a name whose stem is
    close (names compared without their extension: a shared ".yaml" would make any two look
    alike; close enough that `local-tiny` does not suggest `latin1`), the same extension
    first among equally close ones. `referrer`, the file whose field names `path`, is never
    offered for itself."""
    try:
        with os.scandir(path.parent) as entries:
            names = [e.name for e in entries if e.name.endswith((".yaml", ".yml")) and e.name != path.name]
    except (OSError, ValueError):
        return None
    if referrer is not None:
        names = [name for name in names if not _same_file(path.parent / name, referrer)]
    wanted = Path(path.name)
    same_stem = [name for name in sorted(names) if Path(name).stem == wanted.stem]
    if same_stem:
        return same_stem[0]
    scored = [(difflib.SequenceMatcher(None, wanted.stem, Path(name).stem).ratio(), Path(name).suffix == wanted.suffix,
               name) for name in names]
    close = [entry for entry in scored if entry[0] >= CLOSE_NAME_CUTOFF]
    if not close:
        return None
    return max(close, key=lambda entry: (entry[0], entry[1], [-ord(c) for c in entry[2]]))[2]


def _same_file(a: Path, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _missing_hint(path: Path) -> str:
    """A hint for a spec file named on the command line that does not exist: a close name in
    its folder, or to check the path."""
    if not path.parent.is_dir():
        return f"check the path: the folder {path.parent} does not exist"
    close = close_spec_name(path)
    if close:
        return f"did you mean {path.parent / close}?"
    return f"check the path: {path.parent} has no YAML file of a close name"


def read_text(path: Path) -> str:
    """The text of `path`, which must be a regular file of at most MAX_SPEC_BYTES UTF-8 bytes.

    Never opens anything but a regular file (a FIFO would block forever, /dev/zero never
    ends) and never reads more than MAX_SPEC_BYTES + 1 bytes. Raises `UnreadableSpec` whose
    message completes "<path> ...".
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        raise UnreadableSpec("does not exist", missing=True) from None
    except (OSError, ValueError) as exc:
        raise UnreadableSpec(f"cannot be read: {getattr(exc, 'strerror', None) or exc}", hint=_os_hint(exc)) from None
    if stat.S_ISDIR(info.st_mode):
        raise UnreadableSpec("is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise UnreadableSpec("is not a regular file (a device, pipe or socket?)")
    too_big = f"is larger than {MAX_SPEC_BYTES} bytes; spec files are small"
    if info.st_size > MAX_SPEC_BYTES:
        raise UnreadableSpec(too_big)
    try:
        # O_NONBLOCK: if the path was swapped for a FIFO since the stat, opening must not block.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise UnreadableSpec("is not a regular file (a device, pipe or socket?)")
            raw = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise UnreadableSpec(f"cannot be read: {exc.strerror or exc}", hint=_os_hint(exc)) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise UnreadableSpec(too_big)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        import shlex  # for this hint only: not on the path of a file that reads

        if raw[:2] in (b"\xff\xfe", b"\xfe\xff") or raw[:64].count(b"\x00") * 4 >= len(raw[:64]) > 0:
            # A byte-order mark or every other byte NUL: UTF-16 (Windows editors save it), not Latin-1.
            raise UnreadableSpec("is UTF-16 text (a byte-order mark or NUL bytes between the letters), not UTF-8",
                                 hint=f"save the file as UTF-8, e.g. `iconv -f utf-16 -t utf-8 {shlex.quote(str(path))} "
                                      "> NEW.yaml`, then use NEW.yaml") from None
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise UnreadableSpec(f"is not UTF-8 text (byte {exc.start}): byte 0x{raw[exc.start]:02x} at line {line}, "
                          f"column {column} is not UTF-8 (a Latin-1 or Windows-1252 file?)",
                          hint=f"save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 {shlex.quote(str(path))} > "
                               "NEW.yaml`, then use NEW.yaml", line=line, column=column) from None


def _os_hint(exc: BaseException) -> str | None:
    """What to do about an OSError met reading a spec file."""
    code = getattr(exc, "errno", None)
    if code == errno.ENAMETOOLONG:
        return "a name in the path is longer than the file system allows (255 bytes a name): use a shorter one"
    if code in (errno.EACCES, errno.EPERM):
        return "make the file readable (chmod) or copy it somewhere you can read"
    if code == errno.ELOOP:
        return "the path goes round a loop of symbolic links: fix the links"
    if isinstance(exc, ValueError):
        return "remove the NUL byte from the path"
    return None


def read_spec_file(path: Path) -> str:
    """`read_text` for a file named on the command line: problems are located at the file."""
    try:
        return read_text(path)
    except UnreadableSpec as exc:
        raise SpecError([Problem(str(path), exc.line, exc.column, "", str(exc))],
                        hint=_missing_hint(path) if exc.missing else exc.hint) from None
