"""Cache entries: the units a cache dir holds and the store moves (docs/COMPILE_CACHE.md).

A `neuronx-cc` entry is one `neuronxcc-<version>/MODULE_*` folder, complete when it holds
`model.done` and `model.neff`, no `*.lock` anywhere and only regular files and folders; an
`inductor` entry is one file, complete unless it is a lock or a temporary. Failed and
in-flight compiles never travel, and no name that a pull would refuse does either.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from entrypoints.shared.compile_cache.key import KINDS

_NEURON_TOP = re.compile(r"^neuronxcc-[A-Za-z0-9._+-]+$")
_SAFE_PART = re.compile(r"^[A-Za-z0-9_+=@,-][A-Za-z0-9._+=@,-]*$")


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


def entry_of(kind: str, parts: list[str], is_dir: bool) -> str | None:
    """The entry an archive member at `parts` belongs to; None for a folder above entries
    (created as needed). ValueError when it belongs to no valid entry of `kind`."""
    if kind == "neuronx-cc":
        if len(parts) == 1 and is_dir and _NEURON_TOP.match(parts[0]):
            return None
        name = "/".join(parts[:2])
    else:
        if is_dir:
            return None
        name = "/".join(parts)
    if len(parts) < 2 and kind == "neuronx-cc" or not valid_entry_name(kind, name):
        raise ValueError(f"member {'/'.join(parts)!r} is not part of a {kind} cache entry")
    return name
