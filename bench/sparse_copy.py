"""A sparse file copied into a local job's channel: the copy that writes holes as zeros (what
`FileStore.get_file` did, `storage.copy_stream`) against the one that keeps them
(`entrypoints.shared.holes`, what it does now), in one run and alternating.

Makes a sparse file of `--gb` GiB holding `--data-mb` MiB of random data in 16 runs spread
through it (issue 32: a 2 GB sparse file in a data folder took 2 GB once copied), copies it
each way through `download_atomically` as `get_file` does, and prints ONE JSON object: the
source's size and disk use, and per way the median wall seconds over `--repeats` and the disk
bytes (st_blocks x 512) the copy takes. Each copy is deleted before the next; the generated
files are removed at the end.

    PYTHONPATH=. .venv/bin/python bench/sparse_copy.py [--gb 2] [--data-mb 16] [--repeats 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from entrypoints.shared import holes
from entrypoints.shared.storage.store import copy_stream, download_atomically

RUNS = 16


def make_sparse(path: Path, size: int, data: int) -> None:
    """`size` bytes at `path`, `data` of them random bytes in RUNS runs spread evenly; the rest holes."""
    run = max(1, data // RUNS)
    with open(path, "wb") as out:
        for i in range(RUNS):
            out.seek(i * (size // RUNS))
            out.write(os.urandom(run))
        out.truncate(size)


def disk_bytes(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(8 * 2**20), b""):
            h.update(chunk)
    return h.hexdigest()


WAYS = {
    "zeros_written (copy_stream, before)": copy_stream,
    "holes_kept (holes.copy_stream, now)": holes.copy_stream,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument("--data-mb", type=float, default=16.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to make the files (default: the temporary folder)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="sparse-copy-", dir=args.dir))
    try:
        source = folder / "source.bin"
        make_sparse(source, int(args.gb * 2**30), int(args.data_mb * 2**20))
        expected = digest(source)
        seconds: dict[str, list[float]] = {name: [] for name in WAYS}
        used: dict[str, int] = {}
        for _ in range(args.repeats):
            for name, way in WAYS.items():  # alternating: both see the same cache and disk state
                target = folder / "copy.bin"
                start = time.perf_counter()
                with open(source, "rb") as src:
                    download_atomically(target, lambda dst, src=src, way=way: way(src, dst))
                fd = os.open(target, os.O_RDONLY)
                try:
                    os.fsync(fd)  # the written blocks reach the disk inside the timing
                finally:
                    os.close(fd)
                seconds[name].append(time.perf_counter() - start)
                used[name] = disk_bytes(target)
                if digest(target) != expected:
                    raise SystemExit(f"{name}: the copy differs from the source")
                target.unlink()
        print(json.dumps({
            "source": {"size_bytes": source.stat().st_size, "disk_bytes": disk_bytes(source),
                       "data_mb": args.data_mb, "runs": RUNS, "folder": str(folder.parent)},
            "repeats": args.repeats,
            "ways": {name: {"median_s": round(statistics.median(seconds[name]), 3),
                            "seconds": [round(s, 3) for s in seconds[name]], "copy_disk_bytes": used[name]}
                     for name in WAYS},
            "loadavg": os.getloadavg(),
        }, indent=2))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
