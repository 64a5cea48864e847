"""TensorBoard runs of a sweep or a job: its jobs' event files fetched into one local folder.

Contract:
- Each job's event files live at `<output.uri>/tensorboard/<job>/` (`locations.tensorboard_uri`:
  the request's TensorBoardOutputConfig.S3OutputPath, which SageMaker fills while the job runs
  and the local backend when it ends; a Batch job's launch.py uploads them when it ends, to
  the job file's `tensorboard_uri`).
- `fetch(prefix, folder, sweep=..., job=...)` finds the jobs as `results` does (`collect`: a
  sweep id or name, or one job; an unknown sweep or a job without results is an InputError)
  and copies each job's files into `<folder>/<run>/`, one run per job, named by what its
  sweep varied (`lr=0.001,batch_size=4`; a job outside a sweep by its name; the job name is
  added where two runs would share a name). Files already there with the same size are not
  fetched again. Keys stay under the job's prefix and names under the run's folder.
- It returns the runs (name, job, files fetched, files found); a job without event files is a
  run with none (its job may not have logged a step yet).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from entrypoints.shared.storage import open_store
from orchestrator.errors import InputError
from orchestrator.locations import TENSORBOARD_DIR
from orchestrator.results.collect import collect
from orchestrator.results.columns import shown_value
from orchestrator.results.read import _store_uri
from orchestrator.results.rows import Row


@dataclass(frozen=True)
class Run:
    """One job's TensorBoard run in the local folder."""

    name: str
    job: str
    fetched: int
    found: int


def _label(row: Row, short: bool) -> str:
    parts = [f"{path.rsplit('.', 1)[-1] if short else path}={shown_value(value)}"
             for path, value in row.varied.items()]
    text = ",".join(parts) or row.job
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", text)[:200]


def run_names(rows: list[Row]) -> dict[str, str]:
    """Job -> run folder name (see the module docstring)."""
    short = {row.job: _label(row, True) for row in rows}
    if len(set(short.values())) < len(short.values()):
        # Two varied paths ending alike (model.lr, optimizer.lr): the full paths tell them apart.
        short = {row.job: _label(row, False) for row in rows}
    counts: dict[str, int] = {}
    for name in short.values():
        counts[name] = counts.get(name, 0) + 1
    return {job: (name if counts[name] == 1 or name == job else f"{name},{job}") for job, name in short.items()}


def fetch(prefix: str, folder: Path, *, sweep: str | None = None, job: str | None = None,
          region: str | None = None) -> list[Run]:
    """Fetch the event files of the sweep's jobs (or of one job) into `folder` (see the module
    docstring). InputError when neither or both are given, or nothing matches."""
    if (sweep is None) == (job is None):
        raise InputError("give a sweep id or name, or a job name", hint="e.g. `tensorboard local-1a2b3c4d`")
    collection = collect(prefix, sweep=sweep, job=job, region=region)
    rows = [row for row in collection.rows if row.job]
    names = run_names(rows)
    runs = []
    for row in rows:
        source = open_store(_store_uri(f"{prefix.rstrip('/')}/{TENSORBOARD_DIR}/{row.job}"))
        target = folder / names[row.job]
        fetched = found = 0
        for info in source.list("", with_etags=False):
            parts = info.key.split("/")
            if any(p in ("", ".", "..") for p in parts):
                continue  # never a path outside the run's folder
            found += 1
            path = target.joinpath(*parts)
            if path.is_file() and path.stat().st_size == info.size:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if source.get_file(info.key, path):
                fetched += 1
        runs.append(Run(names[row.job], row.job, fetched, found))
    return runs
