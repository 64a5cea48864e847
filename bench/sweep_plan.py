"""Benchmark: `sweep plan` of a large sweep, and the source archive built two ways.

Writes a temporary copy of configs/local-tiny.yaml's directory layout (the shipped base,
no AWS) and three sweeps of `--trials` trials over it: `grid` (batch size x learning rate),
`random` (seeded learning rates) and `variants` (one written-out mapping per trial, which the
YAML loader must take: issue 22). For each it times the real path: `spec.load_sweep` then
`sweep.plan` (expand, validate, doctor, prepare: request and source archive per trial).

The plan itself, two ways in one run (`--compare` trials of the grid, default 2,000), with the
same output asserted (job names, spec hashes, requests, archive hashes):
- `repeated`: the work that is the same for every trial done again for each (the package's
  files looked at per archive, the end-of-tar member gzipped per trial, each archive joined,
  held whole and hashed whole, each spec hashed twice with pydantic's field defaults asked
  anew), as the plan did before;
- `once`: `sweep.plan` now.

The two ways compared for the archive, over the plan's own resolved jobs:
- `per_trial`: the whole tar stream gzipped for every trial (how `sourcedir.build_archive`
  worked before), rebuilt here with tarfile and gzip;
- `shared_once`: `sourcedir.build_archive` now (the code gzipped once, each job.json apart).

Prints one JSON object.

    PYTHONPATH=. .venv/bin/python bench/sweep_plan.py [--trials 10000]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def per_trial_archive(job: dict) -> bytes:
    """The archive as it was built before: one tar stream, gzipped whole, per job."""
    from orchestrator import sourcedir

    return sourcedir._gzip(sourcedir.tar_stream(job))


class _Forgetful(dict):
    """A memo that keeps nothing: every lookup misses, as before the memo existed."""

    def __setitem__(self, key, value) -> None:
        pass


@contextlib.contextmanager
def repeated_work():
    """The plan as it was before the work shared by all trials was done once (see the docstring)."""
    from orchestrator import sourcedir
    from orchestrator.spec import identity as models

    saved = (sourcedir.same_sources, sourcedir._end, models._HASHED, models._DEFAULTS, sourcedir.build_parts)
    parts = sourcedir.build_parts

    def joined(job, root=None):  # each trial's whole archive held, and hashed whole
        data = parts(job, root).data()
        return sourcedir.Archive((data,), sourcedir.archive_sha256(data))

    sourcedir.build_parts = joined
    sourcedir.same_sources = contextlib.nullcontext
    sourcedir._end = lambda zeros: sourcedir._gzip(b"\0" * zeros)
    models._HASHED, models._DEFAULTS = _Forgetful(), _Forgetful()
    try:
        yield
    finally:
        sourcedir.same_sources, sourcedir._end, models._HASHED, models._DEFAULTS, sourcedir.build_parts = saved


def plan_output(planned) -> list:
    """What a plan decides, to compare two ways: names, hashes, requests, archives."""
    from orchestrator import sourcedir

    return [(t.job_name, t.prepared.spec_hash, json.dumps(t.prepared.request, sort_keys=True),
             sourcedir.archive_sha256(sourcedir.build_archive(t.prepared.job))) for t in planned.trials]


def sweeps_text(trials: int) -> dict[str, str]:
    batch = [2, 4, 8, 16]
    lrs = [round(1e-5 * (i + 1), 8) for i in range(trials // len(batch))]
    grid = ("sweep: big-grid\nbase: local-tiny.yaml\ngrid:\n"
            f"  training.batch_size: {batch}\n  training.optimizer.lr: {lrs}\n")
    rand = ("sweep: big-random\nbase: local-tiny.yaml\nrandom:\n"
            f"  trials: {trials}\n  seed: 7\n  params:\n    training.optimizer.lr: {{loguniform: [1.0e-6, 1.0e-2]}}\n")
    variants = "sweep: big-variants\nbase: local-tiny.yaml\nvariants:\n" + "".join(
        f"  - {{training.batch_size: {batch[i % 4]}, training.optimizer.lr: {1e-6 * (i + 1):.8g}}}\n"
        for i in range(trials))
    return {"grid": grid, "random": rand, "variants": variants}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--compare", type=int, default=2_000,
                        help="grid trials planned both ways (repeated work, and done once)")
    parser.add_argument("--archive-sample", type=int, default=300,
                        help="trials whose archives are built both ways (the per-trial way is slow)")
    args = parser.parse_args()
    from orchestrator import sourcedir, spec
    from orchestrator import sweep as sweeps

    report: dict = {"trials": args.trials, "plan_s": {}, "planned": {}}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["ORCHESTRATOR_HOME"] = str(Path(tmp) / "home")
        folder = Path(tmp) / "configs"
        folder.mkdir()
        shutil.copy(ROOT / "configs" / "local-tiny.yaml", folder / "local-tiny.yaml")
        planned = None
        for kind, text in sweeps_text(args.trials).items():
            path = folder / f"{kind}.yaml"
            path.write_text(text)
            start = time.perf_counter()
            planned = sweeps.plan(spec.load_sweep(path))
            report["plan_s"][kind] = round(time.perf_counter() - start, 2)
            # Random draws that repeat an earlier trial are planned once (`sweep.expand`).
            report["planned"][kind] = len(planned.trials)
        jobs = [t.prepared.job for t in planned.trials[:args.archive_sample]]
        path = folder / "compare.yaml"
        path.write_text(sweeps_text(args.compare)["grid"])
        outputs, compare, held = {}, {}, {}
        for way in ("repeated", "once"):
            with repeated_work() if way == "repeated" else contextlib.nullcontext():
                start = time.perf_counter()
                planned = sweeps.plan(spec.load_sweep(path))
                compare[way] = round(time.perf_counter() - start, 2)
            outputs[way] = plan_output(planned)
            # The archive bytes the plan holds: each distinct part once (shared code counted once).
            held[way] = round(sum(len(p) for p in {id(p): p for t in planned.trials
                                                   for p in t.prepared.parts.parts}.values()) / 2**20, 1)
        assert outputs["repeated"] == outputs["once"], "the two ways planned differently"
        report["compare"] = {"trials": args.compare, "plan_s": compare,
                             "speedup": round(compare["repeated"] / compare["once"], 2), "archive_mib_held": held}
    timings = {}
    for way, build in (("per_trial", per_trial_archive), ("shared_once", sourcedir.build_archive)):
        start = time.perf_counter()
        built = [build(job) for job in jobs]
        timings[way] = (time.perf_counter() - start) / len(jobs)
        reference = [per_trial_archive(job) for job in jobs[:20]]
        assert all(gzip.decompress(a) == gzip.decompress(b) for a, b in zip(built, reference, strict=False))
    report["archive_ms_per_trial"] = {way: round(s * 1000, 3) for way, s in timings.items()}
    report["archive_s_for_all_trials"] = {way: round(s * args.trials, 1) for way, s in timings.items()}
    report["archive_speedup"] = round(timings["per_trial"] / timings["shared_once"], 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
