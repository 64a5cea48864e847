"""Hand-written pieces of entrypoints.shared.storage against the libraries that do the same work
(issue 11; run by `bench/cache_transfer.py --library`).

- S3 transfers: the multipart upload (parts uploaded by a thread pool, aborted on failure)
  and the parallel ranged GETs pinned to the ETag seen first (IfMatch), that storage.py had
  by hand until issue 11, kept here as they were, against boto3's transfer manager
  (s3transfer: `upload_file` / `download_file` with the same threshold, part size and
  threads; it pins the ETag with IfMatch on every ranged GET too). Each side uploads then
  downloads the same file to a moto server started as a subprocess on 127.0.0.1 (its own
  interpreter: an in-process server would share our GIL), alternating which goes first,
  and the download is checked byte for byte.
- File locks (the file:// store's conditional writes, the ISA-probe memos): a blocking
  `fcntl.flock` on a sidecar file against `filelock.FileLock` (which polls a non-blocking
  flock), on the same work: processes taking turns at a read-increment-write of a counter
  file under the lock, uncontended (one process) and contended (several).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loopback_aws import start_moto  # noqa: E402

MiB = 2**20


# --- the hand-written S3 transfers (storage.py before issue 11) ----------------------------

def handwritten_upload(client, bucket: str, key: str, path: Path, *, threshold: int, part_size: int,
                       workers: int) -> str:
    size = os.path.getsize(path)
    if size <= threshold:
        with open(path, "rb") as fh:
            return client.put_object(Bucket=bucket, Key=key, Body=fh)["ETag"]
    part_size = max(part_size, -(-size // 10_000))
    offsets = list(range(0, size, part_size))
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    fd = os.open(path, os.O_RDONLY)
    try:
        def upload(index: int) -> dict:
            offset = offsets[index]
            body = os.pread(fd, min(part_size, size - offset), offset)
            etag = client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=index + 1,
                                      Body=body)["ETag"]
            return {"PartNumber": index + 1, "ETag": etag}

        with ThreadPoolExecutor(workers) as pool:
            parts = list(pool.map(upload, range(len(offsets))))
        return client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                                MultipartUpload={"Parts": parts})["ETag"]
    except BaseException:
        with contextlib.suppress(Exception):
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        raise
    finally:
        os.close(fd)


def handwritten_download(client, bucket: str, key: str, dest: Path, *, threshold: int, part_size: int,
                         workers: int) -> None:
    head = client.head_object(Bucket=bucket, Key=key)
    size, etag = head["ContentLength"], head["ETag"]
    temp = dest.parent / f".{dest.name}.tmp-{secrets.token_hex(6)}"
    with open(temp, "wb") as out:
        if size <= threshold:
            body = client.get_object(Bucket=bucket, Key=key, IfMatch=etag)["Body"]
            for chunk in body.iter_chunks(4 * MiB):
                out.write(chunk)
        else:
            out.truncate(size)
            fd = out.fileno()

            def fetch(start: int) -> None:
                end = min(start + part_size, size) - 1
                data = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end}",
                                         IfMatch=etag)["Body"].read()
                if len(data) != end - start + 1:
                    raise RuntimeError(f"short read for bytes {start}-{end}")
                os.pwrite(fd, data, start)

            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(fetch, range(0, size, part_size)))
    os.replace(temp, dest)


# --- boto3's transfer manager, configured the same way -------------------------------------

def transfer_config(*, threshold: int, part_size: int, workers: int):
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(multipart_threshold=threshold, multipart_chunksize=part_size, max_concurrency=workers,
                          use_threads=True)


def library_upload(client, bucket: str, key: str, path: Path, *, config) -> None:
    client.upload_file(str(path), bucket, key, Config=config)


def library_download(client, bucket: str, key: str, dest: Path, *, config) -> None:
    client.download_file(bucket, key, str(dest), Config=config)


# --- the S3 comparison ------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def compare_transfers(work: Path, sizes_mb: list[int], repeats: int, *, part_size: int = 16 * MiB,
                      threshold: int = 64 * MiB, workers: int = 8) -> dict:
    """Per object size: median upload, download and total seconds of each side, and
    `handwritten_over_library` (total seconds, < 1 when the hand-written code is faster)."""
    import boto3
    from botocore.config import Config

    proc, url = start_moto()
    try:
        client = boto3.client("s3", endpoint_url=url,
                              config=Config(max_pool_connections=max(10, 2 * workers),
                                            retries={"mode": "standard", "max_attempts": 5}))
        bucket = "bench-transfer"
        client.create_bucket(Bucket=bucket)
        config = transfer_config(threshold=threshold, part_size=part_size, workers=workers)
        sides = {
            "handwritten": (lambda key, path: handwritten_upload(client, bucket, key, path, threshold=threshold,
                                                                 part_size=part_size, workers=workers),
                            lambda key, dest: handwritten_download(client, bucket, key, dest, threshold=threshold,
                                                                   part_size=part_size, workers=workers)),
            "library": (lambda key, path: library_upload(client, bucket, key, path, config=config),
                        lambda key, dest: library_download(client, bucket, key, dest, config=config)),
        }
        out: dict[str, dict] = {}
        for size_mb in sizes_mb:
            source = work / f"object-{size_mb}.bin"
            with open(source, "wb") as fh:
                for _ in range(size_mb):
                    fh.write(os.urandom(MiB))
            digest = _sha256(source)
            runs: dict[str, dict[str, list[float]]] = {name: {"upload": [], "download": [], "total": [], "cpu": []}
                                                       for name in sides}
            for repeat in range(repeats):
                order = list(sides) if repeat % 2 == 0 else list(reversed(sides))
                for name in order:
                    upload, download = sides[name]
                    key, dest = f"{name}/{size_mb}/{repeat}", work / f"down-{name}.bin"
                    cpu, started = time.process_time(), time.perf_counter()
                    upload(key, source)
                    middle = time.perf_counter()
                    download(key, dest)
                    done = time.perf_counter()
                    cpu = time.process_time() - cpu
                    if _sha256(dest) != digest:
                        raise SystemExit(f"{name}: the downloaded object differs from the upload")
                    dest.unlink()
                    client.delete_object(Bucket=bucket, Key=key)
                    for field, value in (("upload", middle - started), ("download", done - middle),
                                         ("total", done - started), ("cpu", cpu)):
                        runs[name][field].append(value)
            source.unlink()
            result = {name: {field: _median(values) for field, values in fields.items()}
                      for name, fields in runs.items()}
            result["handwritten_over_library"] = round(result["handwritten"]["total"] / result["library"]["total"], 3)
            result["multipart"] = size_mb * MiB > threshold
            out[f"{size_mb}MiB"] = result
        return {"s3": "moto.server subprocess on 127.0.0.1", "part_size": part_size, "threshold": threshold,
                "workers": workers, "repeats": repeats, "sizes": out,
                "s3transfer": __import__("s3transfer").__version__, "boto3": boto3.__version__}
    finally:
        proc.kill()
        proc.wait(timeout=30)


# --- file locks ------------------------------------------------------------------------------

def lock_worker(kind: str, lock_path: str, counter: str, cycles: int, barrier) -> None:
    """Take the lock `cycles` times, each time reading, incrementing and rewriting `counter`."""
    if kind == "filelock":
        from filelock import FileLock

        lock = FileLock(lock_path)
        acquire = lock.__enter__
        release = lambda: lock.__exit__(None, None, None)  # noqa: E731
    else:
        import fcntl

        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        acquire = lambda: fcntl.flock(fd, fcntl.LOCK_EX)  # noqa: E731
        release = lambda: fcntl.flock(fd, fcntl.LOCK_UN)  # noqa: E731
    barrier.wait(timeout=120)
    for _ in range(cycles):
        acquire()
        try:
            value = int(Path(counter).read_text() or 0)
            Path(counter).write_text(str(value + 1))
        finally:
            release()


def compare_locks(work: Path, processes: int, cycles: int, repeats: int) -> dict:
    """Wall seconds for `processes` processes x `cycles` locked increments, each kind, and
    the same with one process (no contention); checks no increment was lost."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")

    def once(kind: str, count: int) -> float:
        lock_path, counter = work / f"{kind}.lock", work / f"{kind}.counter"
        counter.write_text("0")
        barrier = context.Barrier(count + 1)
        workers = [context.Process(target=lock_worker, args=(kind, str(lock_path), str(counter), cycles, barrier))
                   for _ in range(count)]
        for worker in workers:
            worker.start()
        barrier.wait(timeout=120)
        started = time.perf_counter()
        for worker in workers:
            worker.join(timeout=600)
        elapsed = time.perf_counter() - started
        if [worker.exitcode for worker in workers] != [0] * count or int(counter.read_text()) != count * cycles:
            raise SystemExit(f"{kind}: a worker failed or an increment was lost")
        return elapsed

    out: dict[str, dict] = {}
    for label, count in (("uncontended", 1), ("contended", processes)):
        times: dict[str, list[float]] = {"fcntl": [], "filelock": []}
        for repeat in range(repeats):
            for kind in (("fcntl", "filelock") if repeat % 2 == 0 else ("filelock", "fcntl")):
                times[kind].append(once(kind, count))
        result = {kind: _median(values) for kind, values in times.items()}
        result["processes"], result["cycles_each"] = count, cycles
        result["filelock_over_fcntl"] = round(result["filelock"] / result["fcntl"], 3)
        result["us_per_cycle"] = {kind: round(result[kind] / (count * cycles) * 1e6, 1) for kind in times}
        out[label] = result
    import filelock

    out["filelock"] = filelock.__version__
    out["import_filelock_s"] = _import_seconds("filelock")
    return out


def _import_seconds(module: str, runs: int = 5) -> float:
    """Median seconds a fresh interpreter spends importing `module` beyond starting up."""
    def run(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - started

    bare = [run("pass") for _ in range(runs)]
    loaded = [run(f"import {module}") for _ in range(runs)]
    return round(statistics.median(loaded) - statistics.median(bare), 3)
