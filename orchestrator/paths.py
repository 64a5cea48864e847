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
