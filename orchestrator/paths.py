"""Where the orchestrator keeps its local state (ledger, local store, caches)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """ORCHESTRATOR_HOME, default ~/.orchestrator (created on first use)."""
    raw = os.environ.get("ORCHESTRATOR_HOME")
    path = Path(raw).expanduser() if raw else Path.home() / ".orchestrator"
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_atomic(path: Path, text: str) -> Path:
    """Write `text` to `path` so readers see the old file or the new one, never a part:
    a temp file in the same folder, fsync'd, then renamed over. OSError propagates."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
