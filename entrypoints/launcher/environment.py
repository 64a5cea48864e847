"""The environment every rank of a job sees: the job's variables, the EFA variables, the
compile cache directory and inductor's compile pool. Pure functions of the job, the
container contract and the launcher's own environment (`cache_directory` may make a folder).
Stdlib only.
"""

from __future__ import annotations

import platform
import re
import tempfile
from pathlib import Path

from entrypoints.shared import contract

# Where this host's compile cache lives (default: a fresh temporary directory).
CACHE_DIR_ENV = "ORCHESTRATOR_CACHE_DIR"
# Instance types with EFA, whose multi-node jobs need the EFA variables from us: the training
# toolkit sets them only inside its own torchrun distribution, and we run torchrun ourselves.
# (The catalog's efa_gbps > 0 rows; a test keeps the two equal. launch.py reads no catalog.)
EFA_INSTANCE_TYPES = ("ml.trn1.32xlarge", "ml.trn1n.32xlarge", "ml.trn2.48xlarge")


def _flag_value(flags: str, name: str) -> str | None:
    """The value of `--name=value` or `--name value` in a compiler flag string."""
    match = re.search(rf"(?:^|\s){re.escape(name)}(?:=|\s+)(\S+)", flags)
    return match.group(1) if match else None


def runtime_environment(job: dict, ctr: contract.Contract, base: dict[str, str]) -> dict[str, str]:
    """The environment every rank sees, before the compile cache directory is added.

    `base` (the launcher's own environment) without the job's `environment_unset`
    (`entrypoints.launcher.selection`), overlaid with the job's `environment`, and the
    EFA variables for multi-node jobs on EFA instances (setdefault: the request normally carries
    them already, and a user's explicit value wins).
    """
    env = dict(base)
    for key in job.get("environment_unset") or ():  # the first preference's, not the selected type's
        env.pop(key, None)
    env.update({k: str(v) for k, v in (job.get("environment") or {}).items()})
    instance_type = (job.get("instance") or {}).get("type") or ctr.instance_type
    if ctr.num_nodes > 1 and instance_type in EFA_INSTANCE_TYPES:
        for key, value in contract.EFA_ENV.items():
            env.setdefault(key, value)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def cache_directory(runtime: str, env: dict[str, str]) -> tuple[Path, bool]:
    """(directory, created_here): the user's cache dir if the job set one, else a fresh one.

    A user-set dir is NEURON_CC_FLAGS' --cache_dir (xla) or TORCHINDUCTOR_CACHE_DIR (native).
    """
    if runtime == "xla":
        user = _flag_value(env.get("NEURON_CC_FLAGS", ""), "--cache_dir")
    else:
        user = env.get("TORCHINDUCTOR_CACHE_DIR")
    if user:
        return Path(user), False
    if env.get(CACHE_DIR_ENV):
        return Path(env[CACHE_DIR_ENV]), False
    return Path(tempfile.mkdtemp(prefix="orchestrator-compile-cache-")), True


def without_cache_dir(runtime: str, env: dict[str, str]) -> dict[str, str]:
    """`env` without the compile cache directory the job's settings name (xla: NEURON_CC_FLAGS'
    `--cache_dir`), so that `with_cache_dir` can point the compiler elsewhere."""
    env = dict(env)
    if runtime == "xla" and "NEURON_CC_FLAGS" in env:
        flags = re.sub(r"(?:^|\s)--cache_dir(?:=|\s+)\S+", "", env["NEURON_CC_FLAGS"])
        env["NEURON_CC_FLAGS"] = " ".join(flags.split())
    return env


def cache_target(runtime: str, job: dict, env: dict[str, str]) -> str:
    """What compiled code runs on, for the cache key: the Neuron family (trn1, trn2) for xla;
    for native, `cuda` on GPU hosts, else `cpu-<machine>` (inductor's CPU code is per ISA)."""
    if runtime == "xla":
        return (job.get("instance") or {}).get("family") or "unknown"
    if int(env.get("SM_NUM_GPUS", "0") or 0) > 0:
        return "cuda"
    return f"cpu-{platform.machine() or 'unknown'}"


def with_cache_dir(runtime: str, env: dict[str, str], cache_dir: Path) -> dict[str, str]:
    """`env` pointing the compiler of `runtime` at `cache_dir` (user settings untouched)."""
    env = dict(env)
    if runtime == "xla":
        flags = env.get("NEURON_CC_FLAGS", "")
        if _flag_value(flags, "--cache_dir") is None:
            env["NEURON_CC_FLAGS"] = f"{flags} --cache_dir={cache_dir}".strip()
    else:
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir))
        env.setdefault("TRITON_CACHE_DIR", str(Path(env["TORCHINDUCTOR_CACHE_DIR"]) / "triton"))
    return env


def with_compile_threads(runtime: str, env: dict[str, str], cpus: int, workers: int) -> dict[str, str]:
    """`env` with inductor's compile pool sized to this rank's share of the host (native).

    Inductor starts, in every rank, a pool of as many compile processes as the host has CPUs
    (each importing torch): W ranks on one host make W such pools. `cpus // workers` per rank
    uses the host once; on small hosts that is faster cold and warm. A user's value wins. Not
    part of the cache key: inductor leaves compile_threads out of its own keys, and the
    artifacts do not depend on it.
    """
    env = dict(env)
    if runtime == "native":
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(1, cpus // max(1, workers))))
    return env
