"""Inductor's CPU vector-ISA probes, remembered in the compile cache.

Before inductor emits vectorized C++ for the CPU it checks every instruction set the CPU
reports (AVX-512, its bf16 extension, AVX2, AMX...) by compiling a small kernel and loading it
in a fresh `python -c "import torch ..."` process, so that an ISA that torch's own build cannot
serve is dropped instead of crashing the job. That is one interpreter start, 1-2 CPU-seconds,
per ISA in every process that compiles, warm inductor cache or not: three per rank on an
AVX-512 host, about a third of the CPU time of a warm two-rank start on a small machine.

Contract:
- `install(cache_dir)` wraps inductor's probe (`VecISA.check_build`, torch 2.9) so that a
  probe that passed is recorded as `<cache_dir>/orchestrator-isa/<sha256>.json` (of the
  fingerprint and the memo schema),
  and a later probe with the same fingerprint returns True without compiling or starting a
  process. The folder is an ordinary inductor-cache entry, so it travels with the compile
  cache and a warm job probes nothing. Returns whether the wrapper is in place: False (and
  inductor probes as before) when torch's internals differ or the CPU's features cannot be
  read; calling it again does not wrap twice.
- The fingerprint holds everything a probe's outcome depends on: the probe's source, the
  compiler flags, the C++ compiler's version, torch's version and build, the Python
  executable, the machine and the CPU's feature flags. A memo whose recorded fingerprint
  differs from the one computed, or that cannot be read, is ignored and probed again.
- Failed probes are never recorded: a failure may be passing trouble (a process killed, a
  full disk), and recording it would turn vectorization off for every later job.
- The ranks of one host probe an ISA once between them: a lock per fingerprint (under
  `<cache_dir>/locks/`, which never travels) makes the others wait and read the memo.
- `counts()` says how many probes this process answered from memos (`isa_probe_hit`) and ran
  (`isa_probe_miss`).

Trust: a memo only lets inductor use an ISA that this CPU reports and that passed on a host
with the same fingerprint. Whoever can write the cache can already put compiled kernels in it,
so memos ask for no trust the cache did not already need.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

from entrypoints.shared import atomic

MEMO_DIR = "orchestrator-isa"
SCHEMA = 1

_counts = {"isa_probe_hit": 0, "isa_probe_miss": 0}

CheckBuild = Callable[[object, str], bool]


def counts() -> dict[str, int]:
    """Probes answered from memos and probes run, in this process."""
    return dict(_counts)


def cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU's feature flags (x86 `flags`, Arm `Features`), sorted; None if unreadable."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() in ("flags", "Features"):
            return " ".join(sorted(set(value.split())))
    return None


def fingerprint(code: str, arch_flags: str, compiler: str, features: str) -> dict[str, str]:
    """What decides one probe's outcome on a host (see the module docstring)."""
    import torch

    return {"code_sha256": hashlib.sha256(code.encode()).hexdigest(), "arch_flags": arch_flags,
            "compiler": compiler, "torch": str(torch.__version__),
            "torch_git": str(getattr(torch.version, "git_version", "")),
            "python": sys.executable, "machine": platform.machine(), "cpu_features": features}


def memo_path(cache_dir: Path, probe: dict[str, str]) -> Path:
    # The schema is part of the name: a memo a later format cannot read must not hold the name
    # a new one needs, since the store keeps the first entry published under a name for good.
    digest = hashlib.sha256(json.dumps({"schema": SCHEMA, "fingerprint": probe}, sort_keys=True).encode()).hexdigest()
    return Path(cache_dir) / MEMO_DIR / f"{digest}.json"


def _remembered(path: Path, probe: dict[str, str]) -> bool:
    try:
        memo = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(memo, dict) and memo.get("schema") == SCHEMA and memo.get("ok") is True
            and memo.get("fingerprint") == probe)


def _remember(path: Path, probe: dict[str, str], isa: str) -> None:
    # The temporary file's name starts with '.', so the compile cache never packs a half-written
    # memo; mode 0644 as pulled entries have: other users of a shared cache dir read it too.
    memo = json.dumps({"schema": SCHEMA, "ok": True, "isa": isa, "fingerprint": probe}, sort_keys=True)
    atomic.write_text(path, memo, mode=0o644, durable=False)


def memoized(check_build: CheckBuild, cache_dir: Path, features: str,
             compiler: Callable[[], str], arch_flags: Callable[[object], str]) -> CheckBuild:
    """`check_build` answered from memos under `cache_dir` where one matches.

    `compiler()` gives the C++ compiler's version line; `arch_flags(isa)` the flags the probe
    of `isa` compiles with at the time of the call (inductor changes them for its bf16 and
    fp16 sub-probes).
    """
    cache_dir = Path(cache_dir)

    def check(isa: object, code: str) -> bool:
        probe = fingerprint(code, arch_flags(isa), compiler(), features)
        path = memo_path(cache_dir, probe)
        if _remembered(path, probe):
            _counts["isa_probe_hit"] += 1
            return True
        with contextlib.ExitStack() as held:
            try:
                # filelock, as inductor's own cache locks: imported by inductor before it probes.
                from filelock import FileLock

                locks = cache_dir / "locks"
                locks.mkdir(parents=True, exist_ok=True)
                held.enter_context(FileLock(locks / f"{MEMO_DIR}-{path.stem}.lock"))
            except (OSError, ImportError):
                pass  # a cache dir we cannot write: probe unlocked, as inductor would
            # Another rank may have probed while this one waited.
            if _remembered(path, probe):
                _counts["isa_probe_hit"] += 1
                return True
            _counts["isa_probe_miss"] += 1
            ok = bool(check_build(isa, code))
            if ok:
                try:
                    _remember(path, probe, str(isa))
                except OSError:
                    pass  # a memo not written only costs the next job this probe
            return ok

    check.orchestrator_memo = True  # type: ignore[attr-defined]
    return check


def install(cache_dir: str | os.PathLike | None) -> bool:
    """Answer inductor's ISA probes from memos under `cache_dir` (see the module docstring)."""
    if not cache_dir:
        return False
    try:
        from torch._inductor import cpu_vec_isa
        from torch._inductor.cpp_builder import get_compiler_version_info, get_cpp_compiler
    except ImportError:
        return False
    vec_isa = getattr(cpu_vec_isa, "VecISA", None)
    original = getattr(vec_isa, "check_build", None)
    if original is None:
        return False
    if getattr(original, "orchestrator_memo", False):
        return True
    features = cpu_features()
    if features is None:
        return False
    vec_isa.check_build = memoized(original, Path(cache_dir), features,
                                   lambda: get_compiler_version_info(get_cpp_compiler()),
                                   lambda isa: str(getattr(isa, "_arch_flags", "")))
    return True
