"""The cache key: what decides whether compiled artifacts can be reused (docs/COMPILE_CACHE.md).

Stdlib only; torch is imported only by `key_for` on the native runtime, for its version.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass

KINDS = ("neuronx-cc", "inductor")
RUNTIME_KINDS = {"xla": "neuronx-cc", "native": "inductor"}


@dataclass(frozen=True)
class CacheKey:
    """What decides whether compiled artifacts are reusable; `digest()` names its folder in a store."""

    kind: str
    compiler_version: str
    runtime: str
    flags: str
    target: str
    world_size: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"cache kind {self.kind!r}: expected one of {KINDS}")
        if self.runtime not in RUNTIME_KINDS:
            raise ValueError(f"runtime {self.runtime!r}: expected one of {tuple(RUNTIME_KINDS)}")
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {self.world_size!r}")

    def as_dict(self) -> dict:
        return asdict(self)

    def digest(self) -> str:
        canonical = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        name = f"{self.kind}-{self.compiler_version}-{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"
        return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _neuronx_cc_version(env: Mapping[str, str]) -> str:
    exe = shutil.which("neuronx-cc", path=env.get("PATH"))
    if exe is None:
        return "absent"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120,
                             env=dict(env), check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    text = out.stdout + out.stderr
    match = re.search(r"version\s+([0-9][0-9A-Za-z.+_-]*)", text, re.IGNORECASE) or re.search(
        r"\b(\d+\.\d+(?:\.\d+)+[0-9A-Za-z.+_-]*)", text)
    return match.group(1) if match else "unknown"


def neuron_cc_flags(raw: str) -> str:
    """NEURON_CC_FLAGS without the cache location (`--cache_dir=X` or `--cache_dir X`)."""
    try:
        tokens = shlex.split(raw)
    except ValueError:
        tokens = raw.split()
    kept: list[str] = []
    skip = False
    for token in tokens:
        if skip:
            skip = False
            continue
        if token == "--cache_dir":
            skip = True
            continue
        if token.startswith("--cache_dir="):
            continue
        kept.append(token)
    return " ".join(kept)


def _torch_version() -> str:
    try:
        import torch
    except ImportError:
        return "absent"
    return str(torch.__version__)


def key_for(runtime: str, target: str, world_size: int, env: Mapping[str, str]) -> CacheKey:
    """The cache key of a job: `runtime` xla|native, `target` family (trn1, trn2, cpu, cuda)."""
    if runtime == "xla":
        return CacheKey("neuronx-cc", _neuronx_cc_version(env), "xla",
                        neuron_cc_flags(env.get("NEURON_CC_FLAGS", "")), target, world_size)
    if runtime == "native":
        flags = " ".join(f"{name}={env[name]}" for name in sorted(env)
                         if name.startswith("TORCHINDUCTOR_") and name != "TORCHINDUCTOR_CACHE_DIR")
        return CacheKey("inductor", _torch_version(), "native", flags, target, world_size)
    raise ValueError(f"runtime {runtime!r}: expected one of {tuple(RUNTIME_KINDS)}")
