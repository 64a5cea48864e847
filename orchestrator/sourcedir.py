"""The job's source archive, `sourcedir.tar.gz`: byte-for-byte reproducible.

The request delivers the archive as the `code` input channel (SageMaker downloads it to
/opt/ml/input/data/code/ before the container starts) and its container entrypoint unpacks it
into /opt/ml/code and execs `python3 launch.py --container` there (`contract.container_entrypoint`),
which pip-installs `requirements.txt` as the training toolkit would. So the archive holds, at its
root:

- `launch.py`: a copy of `entrypoints/launch.py` (the container's first process);
- `entrypoints/`: every `*.py` of the entrypoints package (launch.py imports it from its folder);
- `job.json`: the resolved job (`entrypoints.contract`), which is too large for hyperparameters;
- `requirements.txt`: what the Neuron training image lacks (it has torch and torch-xla).

Same inputs, same bytes: entries are sorted, every mtime is 0, owners are 0/"" and modes are
0o644 (files) / 0o755 (directories); gzip's header carries no name and mtime 0. The content
hash therefore names the archive, and an upload can be skipped when that hash exists.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

from entrypoints import contract
from orchestrator.errors import OrchestratorError
from orchestrator.locations import ARCHIVE_NAME  # noqa: F401 - sourcedir.ARCHIVE_NAME

PACKAGE = "entrypoints"
# The training image already has torch and torch-xla; timm is the one library it lacks.
REQUIREMENTS = "timm>=1.0,<2\n"


def entrypoints_dir() -> Path:
    """The directory of the installed `entrypoints` package."""
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


def build_archive(job: dict, root: Path | None = None) -> bytes:
    """The bytes of `sourcedir.tar.gz` for the resolved job `job` (see the module docstring).

    `root` is the entrypoints package directory to pack (default: the installed one). Raises
    OrchestratorError when it holds no `launch.py`, since the container would have nothing to run.
    """
    root = entrypoints_dir() if root is None else Path(root)
    files = _sources(root)
    launch = files.get(f"{PACKAGE}/{contract.PROGRAM}")
    if launch is None:
        raise OrchestratorError(
            f"{root / contract.PROGRAM} is missing: the training job would have no program to run",
            hint="reinstall the package, or run from a complete checkout of the project",
        )
    files[contract.PROGRAM] = launch
    files[contract.JOB_FILE] = (json.dumps(job, indent=2, sort_keys=True) + "\n").encode()
    files["requirements.txt"] = REQUIREMENTS.encode()

    entries = [(name, True) for name in _directories(list(files))] + [(name, False) for name in files]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, directory in sorted(entries):
            if directory:
                tar.addfile(_info(name, directory=True))
            else:
                data = files[name]
                tar.addfile(_info(name, directory=False, size=len(data)), io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0, compresslevel=6) as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def archive_sha256(data: bytes) -> str:
    """sha256 hex of the archive bytes: its identity in the store."""
    return hashlib.sha256(data).hexdigest()
