"""The job's source archive, `sourcedir.tar.gz`: byte-for-byte reproducible.

The request delivers the archive as the `code` input channel (SageMaker downloads it to
/opt/ml/input/data/code/ before the container starts) and its container entrypoint unpacks it
into /opt/ml/code and execs `python3 launch.py --container` there (`contract.container_entrypoint`),
which pip-installs `requirements.txt` as the training toolkit would. So the archive holds, at its
root:

- `launch.py`: a copy of `entrypoints/launcher/launch.py` (the container's first process);
- `entrypoints/`: every `*.py` of the entrypoints package (launch.py imports it from its folder);
- `job.json`: the resolved job (`entrypoints.shared.contract`), which is too large for hyperparameters;
- `requirements.txt`: what the Neuron training image lacks (it has torch and torch-xla), and the
  pinned MLflow client only for a job whose spec names a tracking server (`tracking.requirements`).

Same inputs, same bytes: entries are sorted, every mtime is 0, owners are 0/"" and modes are
0o644 (files) / 0o755 (directories); gzip's header carries no name and mtime 0. The content
hash therefore names the archive, and an upload can be skipped when that hash exists. The code
all jobs share is compressed once per process and package content (`build_archive`).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

from entrypoints.shared import contract
from orchestrator import tracking
from orchestrator.errors import OrchestratorError
from orchestrator.locations import ARCHIVE_NAME  # noqa: F401 - sourcedir.ARCHIVE_NAME

PACKAGE = "entrypoints"
# The program inside the package; the archive carries it again at its root as contract.PROGRAM.
LAUNCHER = f"launcher/{contract.PROGRAM}"
# The training image already has torch and torch-xla; timm is the one library it lacks.
REQUIREMENTS = "timm>=1.0,<2\n"


@functools.cache
def entrypoints_dir() -> Path:
    """The directory of the installed `entrypoints` package (resolved once: a module does not move)."""
    import entrypoints

    return Path(entrypoints.__file__).resolve().parent


def _sources(root: Path) -> dict[str, bytes]:
    """Archive name -> bytes of every *.py under `root`, outside __pycache__."""
    files = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or any(part.startswith(".") for part in rel.parts):
            continue
        files[f"{PACKAGE}/{rel.as_posix()}"] = path.read_bytes()
    return files


def _directories(names: list[str]) -> set[str]:
    dirs = set()
    for name in names:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return dirs


def _info(name: str, *, directory: bool, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if directory:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    else:
        info.type = tarfile.REGTYPE
        info.mode = 0o644
        info.size = size
    return info


# gzip level of every member (the archive's size matters less than the plan's time).
_LEVEL = 6
_BLOCK = tarfile.BLOCKSIZE
_RECORD = tarfile.RECORDSIZE


def _entry(name: str, data: bytes | None) -> bytes:
    """One tar entry as tarfile writes it in GNU format: the header, then the data padded to a
    block (`data` None: a directory)."""
    info = _info(name, directory=data is None, size=0 if data is None else len(data))
    head = info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")
    if data is None:
        return head
    return head + data + b"\0" * (-len(data) % _BLOCK)


def _gzip(data: bytes) -> bytes:
    """One gzip member of `data`, with no name and mtime 0 (same bytes, same member)."""
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0, compresslevel=_LEVEL) as gz:
        gz.write(data)
    return packed.getvalue()


@functools.lru_cache(maxsize=32)
def _end(zeros: int) -> bytes:
    """The gzip member of the tar's end: `zeros` zero bytes (one of at most 20 lengths, the
    record being 20 blocks), compressed once per length."""
    return _gzip(b"\0" * zeros)


@dataclass(frozen=True)
class _Code:
    """What every job's archive shares, compressed once: the tar entries sorted before
    `job.json` (the entrypoints package) and after it (launch.py, requirements.txt)."""

    before: bytes  # gzip member
    before_size: int  # its uncompressed size
    after: bytes
    after_size: int
    before_sha256: object = None  # hashlib's state after `before`: each archive's hash goes on from it


_CODE: dict[tuple, _Code] = {}


# root -> (its directories, its *.py files): walked once; their stats tell when to walk again.
_LISTED: dict[str, tuple[list[str], list[str]]] = {}


# root -> its signature, while `same_sources()` holds: one plan's trials share one look at the files.
_HELD: dict[str, tuple] | None = None


@contextlib.contextmanager
def same_sources():
    """Within the block, the package's files are looked at (stat) once per root, not once per
    archive: a sweep plan builds all its trials' archives from one state of the code, as one
    submit does. Outside it, each archive looks again (a long-lived runner sees an edit)."""
    global _HELD
    outer = _HELD
    _HELD = {} if outer is None else outer
    try:
        yield
    finally:
        _HELD = outer


def _signature(root: Path) -> tuple:
    """Each directory's and *.py file's path, size and mtime under `root`. A file added or
    removed changes its directory's mtime, an edit the file's: then the tree is walked anew."""
    if _HELD is not None:
        held = _HELD.get(str(root))
        if held is None:
            held = _HELD[str(root)] = _look(root)
        return held
    return _look(root)


def _look(root: Path) -> tuple:
    import os

    listed = _LISTED.get(str(root))
    try:
        if listed is not None:
            return tuple((path, st.st_size, st.st_mtime_ns) for path in (*listed[0], *listed[1])
                         for st in (os.stat(path),))
    except FileNotFoundError:
        pass
    dirs = sorted({str(root), *(str(p) for p in root.rglob("*") if p.is_dir())})
    files = sorted(str(p) for p in root.rglob("*.py"))
    _LISTED[str(root)] = (dirs, files)
    return tuple((path, st.st_size, st.st_mtime_ns) for path in (*dirs, *files) for st in (os.stat(path),))


def requirements(job: dict) -> str:
    """requirements.txt for `job`: timm, and the MLflow client when the job logs to MLflow."""
    return REQUIREMENTS + tracking.requirements(job.get("mlflow"))


def _package_files(root: Path, requirements: str = REQUIREMENTS) -> dict[str, bytes]:
    """Every file of the archive but the job file, by its name in the archive: the package's
    sources, launch.py again at the root, `requirements` as requirements.txt. OrchestratorError
    without a launcher."""
    files = _sources(root)
    launch = files.get(f"{PACKAGE}/{LAUNCHER}")
    if launch is None:
        raise OrchestratorError(
            f"{root / LAUNCHER} is missing: the training job would have no program to run",
            hint="reinstall the package, or run from a complete checkout of the project",
        )
    files[contract.PROGRAM] = launch
    files["requirements.txt"] = requirements.encode()
    return files


def tar_stream(job: dict, root: Path | None = None) -> bytes:
    """The archive's tar stream as `tarfile` writes it in one go (uncompressed): what
    `build_archive`'s gzip members decompress to, and how the archive was built before its
    shared code was compressed once (`tests/test_sourcedir.py` holds one to the other;
    `bench/sweep_plan.py` times the old way)."""
    files = {**_package_files(entrypoints_dir() if root is None else Path(root), requirements(job)),
             contract.JOB_FILE: job_bytes(job)}
    entries = [(n, True) for n in _directories(list(files))] + [(n, False) for n in files]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, directory in sorted(entries):
            tar.addfile(_info(name, directory=directory, size=0 if directory else len(files[name])),
                        None if directory else io.BytesIO(files[name]))
    return raw.getvalue()


def _code(root: Path, requirements: str = REQUIREMENTS) -> _Code:
    """The shared members for the package at `root`, built once per content of its files: a
    sweep of 10,000 trials gzips its code once, not 10,000 times (issue 22). The key is each
    file's and directory's path, size and mtime (`_signature`), so an edit builds anew."""
    key = (str(root), _signature(root), requirements)
    code = _CODE.get(key)
    if code is not None:
        return code
    files = _package_files(root, requirements)
    entries = [(name, None) for name in _directories([*files, contract.JOB_FILE])] + list(files.items())
    before = b"".join(_entry(n, d) for n, d in sorted(entries) if n < contract.JOB_FILE)
    after = b"".join(_entry(n, d) for n, d in sorted(entries) if n > contract.JOB_FILE)
    packed = _gzip(before)
    code = _Code(packed, len(before), _gzip(after), len(after), hashlib.sha256(packed))
    if any(held[:2] != key[:2] for held in _CODE) or len(_CODE) >= 4:
        _CODE.clear()  # one package version at a time (with or without MLflow's client): it never grows
    _CODE[key] = code
    return code


def job_bytes(job: dict) -> bytes:
    """`job.json`'s bytes: sorted keys, compact (json's C encoder; with `indent` it falls back
    to the pure-Python one, which took half a 10,000-trial plan's archive time)."""
    return (json.dumps(job, sort_keys=True, separators=(",", ":")) + "\n").encode()


@dataclass(frozen=True)
class Archive:
    """An archive kept as its parts: the shared code (one copy for every trial of a plan), this
    job's `job.json` member and the end member; `data()` joins them into `build_archive`'s
    bytes, and `sha256` is their hash, computed on from the shared part's hash state (a plan of
    10,000 trials held 10,000 joined copies of the code: 1.2 GB, and hashed each whole)."""

    parts: tuple[bytes, ...]
    sha256: str

    def data(self) -> bytes:
        return b"".join(self.parts)

    @property
    def size(self) -> int:
        return sum(map(len, self.parts))


def build_parts(job: dict, root: Path | None = None) -> Archive:
    """`build_archive`'s bytes as an `Archive` of parts (the shared code not copied)."""
    code = _code(entrypoints_dir() if root is None else Path(root), requirements(job))
    job_entry = _entry(contract.JOB_FILE, job_bytes(job))
    size = code.before_size + len(job_entry) + code.after_size + 2 * _BLOCK
    parts = (code.before, _gzip(job_entry), code.after, _end(2 * _BLOCK + (-size % _RECORD)))
    digest = code.before_sha256.copy()
    for part in parts[1:]:
        digest.update(part)
    return Archive(parts, digest.hexdigest())


def build_archive(job: dict, root: Path | None = None) -> bytes:
    """The bytes of `sourcedir.tar.gz` for the resolved job `job` (see the module docstring).

    The archive is one tar stream, sorted, as four gzip members (a gzip file may hold several:
    RFC 1952 section 2.2; tar -xzf and Python's gzip read them as one stream): the shared code
    before `job.json` and after it, built once (`_code`), and this job's `job.json` and the
    tar's end blocks, built here. `root` is the entrypoints package directory to pack (default:
    the installed one). Raises OrchestratorError when it holds no `launcher/launch.py`, since the
    container would have nothing to run.
    """
    return build_parts(job, root).data()


def archive_sha256(data: bytes) -> str:
    """sha256 hex of the archive bytes: its identity in the store."""
    return hashlib.sha256(data).hexdigest()
