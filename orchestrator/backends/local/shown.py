"""What a local job's `status` shows that is not in its status.json: whether its output is
there, its record of results (the one `results` reads), and a full disk as the likely cause of
a supervisor's death. Shown is what exists: a file:// output that was never written is not
shown, and the step shown is the store's record's, as `results` shows it."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from orchestrator.backends import JobProgress, progress_of


def written(uri: str | None) -> str | None:
    """`uri` when the output is there to be shown: the job's status.json names the model's
    place from the start, and a store that could not be written (or a job that ended before
    its upload) leaves nothing there. A file:// output is looked at; another is shown as named."""
    if not uri or not uri.startswith("file://"):
        return uri
    from urllib.parse import unquote, urlsplit

    return uri if Path(unquote(urlsplit(uri).path)).exists() else None


def disk_note(job_dir: Path) -> str:
    """", its disk is full (...)" when the file system that holds the job has no block left
    for this user: the likely cause, which a supervisor that died of it could not log."""
    try:
        full = os.statvfs(job_dir).f_bavail == 0
    except (OSError, AttributeError):
        return ""
    return ": the disk that holds its folder is full (No space left on device)" if full else ""


def progress(host_copy: Path, results_uri: str | None, open_store: Callable) -> JobProgress | None:
    """The job's results.json at `results_uri` (in the store: what `results` reads, so both
    show the same step). The first host's copy, `host_copy` (launch.py rewrites it at every
    heartbeat), is `newer` when it says more than the store's, whose writes were refused (an
    unwritable store; "absent" when the store has none). A job laid out before status.json
    named its record (no `results_uri`) is read from its copy alone. None: no record yet."""
    try:
        own = progress_of(host_copy.read_bytes(), host_copy.as_uri())
    except OSError:
        own = None
    if not results_uri:
        return own
    prefix, _, name = results_uri.rpartition("/")
    try:
        got = open_store(prefix).get_with_etag(name)
    except Exception:  # noqa: BLE001 - progress is an extra: an unreadable store shows none
        got = None
    stored = progress_of(got[0], results_uri) if got is not None else None
    if own is None or (stored is not None and (stored.record, stored.steps_done) == (own.record, own.steps_done)):
        return stored
    return dataclasses.replace(stored or JobProgress(record="absent", steps_done=None, steps=None, at=None,
                                                      uri=results_uri), newer=own)
