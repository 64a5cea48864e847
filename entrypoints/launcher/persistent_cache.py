"""SageMaker's managed warm pool seen from inside the job: its persistent cache directory.

Source: the SageMaker developer guide, "SageMaker AI Managed Warm Pools", section "Using
persistent cache" (docs.aws.amazon.com/sagemaker/latest/dg/train-warm-pools.html): when a
job runs with `ResourceConfig.KeepAlivePeriodInSeconds` > 0, SageMaker mounts a directory at
`/opt/ml/sagemaker/warmpoolcache`, names it in `SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY`,
and keeps it for the warm pool's life: a later matching job that reuses the instances finds
there whatever the earlier ones left (pip's cache is the guide's own example). It is deleted
when the warm pool ends.

Contract:
- `persistent_root(env, opt_ml)` is that directory when it exists and is writable: the
  variable's path first, else `<opt_ml>/sagemaker/warmpoolcache`; None otherwise (no warm
  pool: the job keeps its ordinary, fresh directories).
- `compile_cache_dir(root, key_digest, runtime)` is where the compile cache of one key lives
  in it (`<root>/orchestrator/compile-cache/<digest>`): one folder per key, so a push only
  ever sends entries of its own key. A job on a reused instance finds its key's entries on
  disk, the pull downloads only what the folder lacks (nothing, when it holds them all), and
  pushes still send what the manifest lacks.
- `pip_cache_dir(root)` is pip's cache there (`PIP_CACHE_DIR`), for the code's requirements.
- `replaceable_cache_dir(path)`: whether a cache dir the job's settings name is the
  orchestrator's own default (`DEFAULT_NEURON_CACHE_DIR`, which the request sets for xla),
  which the persistent one replaces; a directory the user chose is kept.

Stdlib only; nothing here imports `orchestrator`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

PERSISTENT_CACHE_ENV = "SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"
# Relative to the /opt/ml root (the local backend roots each host elsewhere).
PERSISTENT_CACHE_DIR = "sagemaker/warmpoolcache"
# The --cache_dir the request gives neuronx-cc (orchestrator.catalog.NEURON_CACHE_DIR): the
# compiler's default (AWS Neuron docs, "Neuron Persistent Cache": general/arch/neuron-features/neuron-caching).
DEFAULT_NEURON_CACHE_DIR = "/var/tmp/neuron-compile-cache"


def persistent_root(env: Mapping[str, str], opt_ml: Path) -> Path | None:
    """The warm pool's persistent cache directory, or None (see the module docstring)."""
    named = env.get(PERSISTENT_CACHE_ENV)
    for candidate in ([Path(named)] if named else []) + [opt_ml / PERSISTENT_CACHE_DIR]:
        if candidate.is_dir() and os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    return None


def compile_cache_dir(root: Path, key_digest: str | None, runtime: str) -> Path:
    """The compile cache folder of one key in the persistent directory (created)."""
    folder = root / "orchestrator" / "compile-cache" / (key_digest or f"unkeyed-{runtime}")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def pip_cache_dir(root: Path) -> Path:
    return root / "pip"


def replaceable_cache_dir(path: Path | None) -> bool:
    """Whether the job's cache dir is ours to move into the persistent directory."""
    return path is None or str(path) == DEFAULT_NEURON_CACHE_DIR
