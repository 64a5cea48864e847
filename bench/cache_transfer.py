"""Compile-cache transfer against the plainest way to move the same tree.

Generates a Neuron-layout cache tree (default 2,000 files, 500 MB of incompressible bytes:
500 `MODULE_*` folders of model.neff, model.hlo_module.pb, compile_flags.json, model.done),
then, in one run and alternating, times:

- ours: `compile_cache.push` (find complete entries, pack into one archive while hashing it,
  publish it and the manifest) + `compile_cache.pull` into an empty cache dir (read the
  manifest, stream the archive through the safe reader while hashing it, verify the sha256,
  rename the entries into place), through a `file://` store;
- baseline (the issue's goal: ours within 1.2x): `tar cf` of the tree plus one copy of the
  same tree (`cp -a`), i.e. packing once and laying the files down once more, as push + pull do;
- stricter reference: `tar cf` plus one `cp` of the tarball (never creates the 2,000 files);
- reference: `tar cf` plus `tar xf` of the same tree (GNU tar, no checksum, no checks).

Prints ONE JSON object: medians over `--repeats` of wall seconds and of CPU seconds (ours in
this process, tar and cp as children), ratio = ours / baseline, ratio_vs_tar_cf_xf, and the
CPU cost of one sha256 over the tree (push hashes the archive once, pull once more).
With `--s3` it also times push + pull through a moto S3 server on 127.0.0.1 (informational:
moto keeps objects in its own process, so that figure measures moto as much as us).
All generated data (about 3x the tree size at the peak) is removed at the end.

With `--library` it instead compares the hand-written pieces of `entrypoints.shared.storage` with the
libraries that do the same work (`bench/library_comparisons.py`): S3 multipart upload and
ranged GETs against boto3's transfer manager through a moto server subprocess, and `fcntl`
against `filelock` locks, and prints that JSON object.

    PYTHONPATH=. .venv/bin/python bench/cache_transfer.py [--files 2000] [--mb 500] [--repeats 3] [--s3]
    PYTHONPATH=. .venv/bin/python bench/cache_transfer.py --library [--transfer-mb 256,16] [--repeats 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from entrypoints.shared import compile_cache  # noqa: E402

FILES_PER_MODULE = 4


def generate(root: Path, files: int, total_bytes: int, seed: int = 0) -> int:
    """A Neuron cache tree of `files` files and about `total_bytes` bytes; returns bytes written."""
    rng = random.Random(seed)
    modules = max(1, files // FILES_PER_MODULE)
    per_module = total_bytes // modules
    top = root / "neuronxcc-2.22.12471.0"
    written = 0
    for index in range(modules):
        module = top / f"MODULE_{rng.getrandbits(63)}+{rng.getrandbits(32):08x}"
        module.mkdir(parents=True)
        hlo = per_module // 10
        neff = per_module - hlo - 64
        (module / "model.neff").write_bytes(rng.randbytes(neff))
        (module / "model.hlo_module.pb").write_bytes(rng.randbytes(hlo))
        (module / "compile_flags.json").write_text(json.dumps(["--target=trn1", f"--id={index}"]).ljust(64))
        (module / "model.done").write_bytes(b"")
        written += neff + hlo + 64
    return written


def _tree_signature(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _settle() -> None:
    """Flush dirty pages left by the previous step, so that step does not slow the next."""
    os.sync()
    time.sleep(0.2)


def _tar_then(tree: Path, work: Path, then: list[str], made: Path) -> dict[str, float]:
    """Time `tar cf` of the tree into work/tree.tar, then the command `then` (which makes
    `made`); seconds of each step, the total, and the children's CPU seconds. Cleans up."""
    tarball = work / "tree.tar"
    _settle()
    cpu = _cpu(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(["tar", "cf", str(tarball), "-C", str(tree), "."], check=True)
    tarred = time.perf_counter()
    subprocess.run(then, check=True)
    done = time.perf_counter()
    cpu = _cpu(resource.RUSAGE_CHILDREN) - cpu
    tarball.unlink()
    if made.is_dir():
        shutil.rmtree(made)
    else:
        made.unlink()
    return {"tar_cf": tarred - started, "then": done - tarred, "total": done - started, "cpu": cpu}


def run_baseline(tree: Path, work: Path) -> dict[str, float]:
    """The stricter reference: `tar cf` plus `cp` of the tarball (never creates the files)."""
    copy = work / "copy.tar"
    out = _tar_then(tree, work, ["cp", str(work / "tree.tar"), str(copy)], copy)
    out["cp"] = out.pop("then")
    return out


def run_tar_and_tree_copy(tree: Path, work: Path) -> dict[str, float]:
    """The goal's baseline: `tar cf` of the tree plus one copy of the same tree."""
    copy = work / "tree-copy"
    out = _tar_then(tree, work, ["cp", "-a", str(tree), str(copy)], copy)
    out["cp_tree"] = out.pop("then")
    return out


def run_tar_round_trip(tree: Path, work: Path) -> dict[str, float]:
    """Reference, not the goal's baseline: GNU tar packing and unpacking the same tree, no
    checksum and no safety checks. It shows what unpacking thousands of files costs here."""
    unpacked = work / "unpacked"
    unpacked.mkdir()
    out = _tar_then(tree, work, ["tar", "xf", str(work / "tree.tar"), "-C", str(unpacked)], unpacked)
    return {"total": out["total"], "cpu": out["cpu"]}


def run_ours(tree: Path, work: Path, store_uri: str, key: compile_cache.CacheKey, store=None) -> dict[str, float]:
    dest = work / "pulled"
    _settle()
    cpu = _cpu(resource.RUSAGE_SELF)
    started = time.perf_counter()
    pushed = compile_cache.push(store_uri, key, tree, store=store)
    middle = time.perf_counter()
    pulled = compile_cache.pull(store_uri, key, dest, store=store)
    done = time.perf_counter()
    cpu = _cpu(resource.RUSAGE_SELF) - cpu
    if pushed.warnings or pulled.warnings or pulled.hit_entries != pushed.new_entries:
        raise SystemExit(f"transfer failed: push {pushed}, pull {pulled}")
    if _tree_signature(dest) != _tree_signature(tree):
        raise SystemExit("the pulled tree differs from the source tree")
    shutil.rmtree(dest)
    return {"push": middle - started, "pull": done - middle, "total": done - started, "cpu": cpu,
            "entries": pushed.new_entries, "archive_bytes": pushed.bytes}


def sha256_cpu(tree: Path) -> float:
    """CPU seconds to sha256 the tree's bytes once: push and pull each do it once."""
    cpu = _cpu(resource.RUSAGE_SELF)
    for path in sorted(tree.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                hashlib.file_digest(fh, "sha256")
    return _cpu(resource.RUSAGE_SELF) - cpu


def _median(runs: list[dict], name: str) -> float:
    return round(statistics.median(run[name] for run in runs), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--mb", type=float, default=500.0, help="tree size in MB (10^6 bytes)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to put the temporary data (default TMPDIR)")
    parser.add_argument("--s3", action="store_true", help="also push/pull through a moto S3 server")
    parser.add_argument("--library", action="store_true",
                        help="compare the hand-written S3 transfers and locks with boto3's transfer manager and filelock")
    parser.add_argument("--transfer-mb", default="256,16", help="object sizes in MiB for --library")
    parser.add_argument("--lock-processes", type=int, default=4)
    parser.add_argument("--lock-cycles", type=int, default=200)
    args = parser.parse_args()
    if args.library:
        print(json.dumps(run_library(args)))
        return

    work = Path(tempfile.mkdtemp(prefix="cache-transfer-", dir=args.dir))
    try:
        load_before = os.getloadavg()[0]
        tree = work / "tree"
        total = generate(tree, args.files, int(args.mb * 1e6))
        key = compile_cache.CacheKey("neuronx-cc", "2.22.12471.0", "xla", "", "trn1", 2)
        baseline, tarball_copy, ours, tar_round_trip = [], [], [], []
        for repeat in range(args.repeats):
            store_dir = work / f"store-{repeat}"
            baseline.append(run_tar_and_tree_copy(tree, work))
            tarball_copy.append(run_baseline(tree, work))
            ours.append(run_ours(tree, work, f"file://{store_dir}", key))
            shutil.rmtree(store_dir)
            tar_round_trip.append(run_tar_round_trip(tree, work))
        result = {
            "benchmark": "cache_transfer",
            "dir": str(work.parent),
            "cpus": os.cpu_count(),
            "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "files": sum(1 for p in tree.rglob("*") if p.is_file()),
            "bytes": total,
            "repeats": args.repeats,
            "archive_format": "pax tar, uncompressed",
            "baseline_s": {name: _median(baseline, name) for name in ("tar_cf", "cp_tree", "total")},
            "tar_cf_cp_tarball_s": {name: _median(tarball_copy, name) for name in ("tar_cf", "cp", "total")},
            "ours_s": {name: _median(ours, name) for name in ("push", "pull", "total")},
            "tar_cf_xf_s": _median(tar_round_trip, "total"),
            "cpu_s": {"baseline": _median(baseline, "cpu"), "ours": _median(ours, "cpu"),
                      "tar_cf_xf": _median(tar_round_trip, "cpu"),
                      "sha256_of_tree_once": round(sha256_cpu(tree), 3)},
        }
        result["ratio"] = round(result["ours_s"]["total"] / result["baseline_s"]["total"], 3)
        result["cpu_ratio"] = round(result["cpu_s"]["ours"] / result["cpu_s"]["baseline"], 3)
        result["ratio_vs_tar_cf_cp_tarball"] = round(
            result["ours_s"]["total"] / result["tar_cf_cp_tarball_s"]["total"], 3)
        result["ratio_vs_tar_cf_xf"] = round(result["ours_s"]["total"] / result["tar_cf_xf_s"], 3)
        result["goal"] = 1.2
        result["ok"] = result["ratio"] <= 1.2
        if args.s3:
            result["s3_moto_s"] = _run_s3(tree, work, key, args.repeats)
            result["s3_ratio"] = round(result["s3_moto_s"]["total"] / result["baseline_s"]["total"], 3)
        print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_library(args: argparse.Namespace) -> dict:
    """`--library`: the comparisons of bench/library_comparisons.py, one JSON object."""
    from library_comparisons import compare_locks, compare_transfers
    from loopback_aws import use_fake_credentials

    use_fake_credentials()
    work = Path(tempfile.mkdtemp(prefix="library-compare-", dir=args.dir))
    try:
        load_before = os.getloadavg()[0]
        transfers = compare_transfers(work, [int(mb) for mb in args.transfer_mb.split(",")], args.repeats)
        locks = compare_locks(work, args.lock_processes, args.lock_cycles, args.repeats)
        multipart = [result for result in transfers["sizes"].values() if result["multipart"]]
        faster = bool(multipart) and all(result["handwritten_over_library"] <= 0.8 for result in multipart)
        return {"benchmark": "library_comparisons", "cpus": os.cpu_count(),
                "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                "transfers": transfers, "locks": locks,
                "handwritten_s3_at_least_20pct_faster": faster}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_s3(tree: Path, work: Path, key: compile_cache.CacheKey, repeats: int) -> dict[str, float]:
    import boto3
    from loopback_aws import threaded_moto, use_fake_credentials

    from entrypoints.shared.storage import open_store

    use_fake_credentials()
    with threaded_moto(set_endpoint=False) as url:
        client = boto3.client("s3", endpoint_url=url)
        runs = []
        for repeat in range(repeats):
            bucket = f"bench-{repeat}"
            client.create_bucket(Bucket=bucket)
            store = open_store(f"s3://{bucket}/cache", s3_client=client)
            runs.append(run_ours(tree, work, store.uri_root, key, store=store))
        return {name: _median(runs, name) for name in ("push", "pull", "total")}


if __name__ == "__main__":
    main()
