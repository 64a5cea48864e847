"""Where the orchestrator keeps its local state (ledger, local store, caches)."""

from __future__ import annotations

import os
from pathlib import Path

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
    try:
        path.mkdir(parents=True, exist_ok=True)
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
        raise InputError(f"{label} cannot be created: {exc.strerror or exc}", hint=hint) from None
    return path


def write_atomic(path: Path, text: str | bytes) -> Path:
    """Write `text` (str, or bytes as they are) to `path` so readers see the old file or the
    new one, never a part: a temp file in the same folder, fsync'd, then renamed over.
    OSError propagates."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
