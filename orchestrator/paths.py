"""Where the orchestrator keeps its local state (ledger, local store, caches), and reading and
writing files there safely. Files are written through `entrypoints.shared.atomic`, the one
atomic-write helper of both sides; what is not a regular file is named as it names it."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from entrypoints.shared.atomic import NotRegularFile, kind_of, not_a_file
from orchestrator.errors import InputError


def home() -> Path:
    """ORCHESTRATOR_HOME, default ~/.orchestrator (created on first use).

    InputError (exit 2) when it cannot be a folder: it is a file, a folder above it is a
    file, or it cannot be created (permissions, read-only file system). A home that exists
    but is read-only is returned as is: the writers say what they could not write.
    """
    raw = os.environ.get("ORCHESTRATOR_HOME")
    try:
        path = Path(raw).expanduser() if raw else Path.home() / ".orchestrator"
    except RuntimeError:  # "~" with no HOME and no password entry to read it from
        raise InputError(f"cannot find the home folder for ORCHESTRATOR_HOME={raw or '~/.orchestrator'}",
                         hint="set ORCHESTRATOR_HOME to an absolute folder path") from None
    label = f"ORCHESTRATOR_HOME={path}" if raw else f"{path} (the default ORCHESTRATOR_HOME)"
    hint = "point ORCHESTRATOR_HOME at a folder (it is created if missing)"
    if not path.is_absolute():
        # Checked before anything is created: a relative home would mean another folder in each
        # working directory, and file:// URIs and background runners need an absolute one.
        raise InputError(f"{label} is a relative path; nothing was created",
                         hint=f"set it to an absolute path, e.g. ORCHESTRATOR_HOME={Path.cwd() / path}")
    try:
        if not path.is_dir():
            # Private: the ledger and job files hold requests, and a request may hold a secret
            # (`environment:`). Folders above it are made as the umask says (mkdir's `mode` is
            # the last folder's only).
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(path, 0o700)
    except FileExistsError:
        what = "is a file, not a folder" if path.is_file() else "exists and is not a folder"
        raise InputError(f"{label} {what}", hint=hint) from None
    except NotADirectoryError:
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is a file, not a folder" if blocker else "a folder above it is a file"
        raise InputError(f"{label} cannot be created: {why}", hint=hint) from None
    except PermissionError:
        raise InputError(f"{label} cannot be created: permission denied",
                         hint="point ORCHESTRATOR_HOME at a folder you can write to (it is created if missing)") from None
    except OSError as exc:
        raise InputError(f"{label} cannot be created: {exc.strerror or exc}",
                         hint=write_hint(exc, "point ORCHESTRATOR_HOME at another folder")) from None
    return path


def home_folder(name: str, *, create: bool = True, base: Path | None = None) -> Path:
    """ORCHESTRATOR_HOME/`name` (or `base`/`name`), a folder made if missing (unless not
    `create`: then it may be missing, for a command that only reads). InputError (exit 2) naming
    it when it cannot be one: something else is there under that name, or it cannot be created."""
    path = (home() if base is None else base) / name
    try:
        if create and not path.is_dir():
            path.mkdir(mode=0o700, exist_ok=True)
        elif not path.is_dir() and os.path.lexists(path):
            raise FileExistsError(path)
    except FileExistsError:
        mode = os.lstat(path).st_mode
        what = "a link that leads to no folder" if stat.S_ISLNK(mode) else (kind_of(mode) or "a file")
        raise InputError(f"{path} is {what}, not a folder: the orchestrator keeps its {name} there",
                         hint=f"move {path} aside (the orchestrator creates the folder again)") from None
    except OSError as exc:
        raise InputError(f"cannot create {path}: {exc.strerror or exc}",
                         hint=write_hint(exc, "point ORCHESTRATOR_HOME at another folder")) from None
    return path


def unusable(path: str | os.PathLike) -> str | None:
    """Why `path` cannot even be looked up (a name longer than the file system allows, a loop
    of links, a folder on the way that cannot be searched, a NUL byte), or None: a path that
    exists, or one that does not (yet)."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:
        return "it contains a NUL byte"
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def folder_problem(path: Path) -> str | None:
    """What makes `path` unusable as a folder to read or create (a store's root): "<path>: why"
    when it cannot be looked up (`unusable`), "<path> is not a folder" when it exists as
    something else; None for a folder or a path that does not exist yet."""
    why = unusable(path)
    if why is not None:
        return f"{path}: {why}"
    if path.exists() and not path.is_dir():
        return f"{path} is not a folder"
    return None


def is_file(path: str | os.PathLike) -> bool:
    """Whether `path` is a regular file (or a link to one); False, never an error, for a path
    that cannot be looked up at all (see `unusable`)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def write_hint(exc: BaseException, instead: str) -> str:
    """What to do about a write that failed with `exc` (an OSError), by its cause; `instead`
    says where else to write ("write the plot elsewhere, e.g. --plot /tmp/results.png")."""
    code = getattr(exc, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk is full: free some space there, or {instead}"
    if code == errno.EROFS:
        return f"that file system is read-only: {instead}"
    if code in (errno.EACCES, errno.EPERM):
        return f"you may not write there: make it writable for you, or {instead}"
    if code == errno.EIO:
        return f"the disk reported an I/O error: check it, or {instead}"
    if code in (errno.ENOTDIR, errno.EISDIR, errno.ENOENT, errno.ENAMETOOLONG):
        return f"check the path, or {instead}"
    return instead[:1].upper() + instead[1:] if instead else "check the path"


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """At most `limit` + 1 bytes of `path`, which must be a regular file (or a link to one):
    NotRegularFile (an OSError) for a FIFO, device, socket or folder, which is never read (a
    FIFO would block for ever, /dev/zero never ends). Other OSErrors propagate."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    kind = kind_of(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise NotRegularFile(errno.EINVAL, f"is {kind}, not a regular file", str(path))
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit + 1)


def check_write_target(path: str | os.PathLike, option: str, *, folder_must_exist: bool = False) -> Path:
    """InputError (exit 2) when `option`'s `path` names something other than a regular file
    or a new path: writing there would replace a device, FIFO, socket or folder with a file
    (as root, `--plot /dev/null` would replace the device node). With `folder_must_exist`, also
    when the file's folder is missing: the write would create folders nobody asked for (a
    typo's, or those a dangling link points into). Returns where the write lands, links resolved."""
    why = unusable(path)
    if why is not None:
        raise InputError(f"{option} {path}: {why}", hint=f"give {option} a shorter or plainer path")
    kind = not_a_file(path)
    if kind is not None:
        raise InputError(f"{option} {path}: is {kind}, not a regular file; nothing was written to it",
                         hint=f"give {option} a new or regular file, e.g. {option} results.png" if option == "--plot"
                         else f"give {option} a new or regular file")
    landing = Path(os.path.realpath(path))
    if folder_must_exist and not landing.parent.is_dir():
        through = f" (a link to {landing})" if os.path.islink(path) else ""
        raise InputError(f"{option} {path}{through}: the folder {landing.parent} does not exist; nothing was written "
                         "and no folder was created", hint=f"create the folder first, or give {option} a file in a "
                         "folder that exists")
    return landing


def check_output_file(path: str | os.PathLike, option: str, *, force: bool = False,
                      ours: Callable[[Path], str | None] | None = None, create_folder: bool = False) -> Path:
    """The one rule for a file a command writes where the user asks (`results --plot/--html/
    --output`, `infra outputs --write`): InputError (exit 2), before anything is read or
    written, when `path` is a symbolic link (output is never written through one), something
    that is not a regular file, in a folder that does not exist, or an existing file while
    `force` is off (unless `ours(path)`, None, says an earlier run of the same option wrote it;
    else it says what the file is). `create_folder`: a missing folder is created by the write.
    Returns the path as written (its folder resolved, the name itself never followed)."""
    why = unusable(path)
    if why is not None:
        raise InputError(f"{option} {path}: {why}", hint=f"give {option} a shorter or plainer path")
    if os.path.islink(path):
        raise InputError(f"{option} {path}: is a symbolic link (to {os.readlink(path)}); output is never written "
                         "through a link, and the link and its target were left as they are",
                         hint=f"give {option} the file itself or a new path")
    kind = not_a_file(path, follow_symlinks=False)
    if kind is not None:
        raise InputError(f"{option} {path}: is {kind}, not a regular file; nothing was written to it",
                         hint=f"give {option} a new or regular file, e.g. {option} results.png" if option == "--plot"
                         else f"give {option} a new or regular file")
    landing = Path(os.path.realpath(Path(path).parent)) / Path(path).name
    if not landing.parent.is_dir() and not (create_folder and not os.path.lexists(landing.parent)):
        raise InputError(f"{option} {path}: the folder {landing.parent} does not exist; nothing was written "
                         "and no folder was created", hint=f"create the folder first, or give {option} a file in a "
                         "folder that exists")
    if os.path.lexists(path) and not force:
        what = ours(Path(path)) if ours is not None else ""
        if what is None:
            return landing
        raise InputError(f"{option} {path}: exists{' and ' + what if what else ''}; it was left as it is",
                         hint=f"give {option} a new file, or pass --force to replace this one")
    return landing


def write_output_file(path: str | os.PathLike, data: bytes) -> Path:
    """Write a file `check_output_file` allowed, atomically; a link planted there since is
    replaced by the file, never written through. OSError propagates."""
    from entrypoints.shared.atomic import write_bytes

    return write_bytes(path, data, follow_symlinks=False)


def check_write_targets(targets: list[tuple[str | os.PathLike | None, str]], *, force: bool = False) -> None:
    """`check_output_file` for each (path, option) given (None: not asked for), and InputError
    when two of them land on one file: the second write would silently replace the first."""
    seen: dict[Path, str] = {}
    for path, option in targets:
        if path is None:
            continue
        landing = check_output_file(path, option, force=force)
        if landing in seen:
            raise InputError(f"{seen[landing]} and {option} both write {landing}; only one of them would be kept",
                             hint=f"give {option} another file")
        seen[landing] = option
