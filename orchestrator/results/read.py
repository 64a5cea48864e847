"""Reading results: a `results.json` object validated against its one schema, and where the
objects live.

Contract:
- Results live at `<prefix>/results/<job>/results.json` (schema "orchestrator.results/v1",
  docs/RESULTS.md), the prefix being the jobs' output.uri. `ResultsPrefix` reads them through
  `entrypoints.shared.storage`, the store the entrypoint writes them with: botocore alone retries
  throttling, 5xx and dropped connections (the client's retry config).
- `parse` validates an object with pydantic over `entrypoints.shared.results_schema.Results`, the
  classes the writer builds it with: extra keys are ignored (a newer v1 writer may add some),
  a field an earlier writer had not added yet reads as its default, and every field present
  must have the schema's type and values. Anything else is `UnreadableResults`, with a reason a
  user can act on: not UTF-8, not JSON (truncated?), not an object, an unknown or newer
  schema, the first field that is wrong (`field instance.count: ...`).
- Keys and paths stay under the prefix: a job folder name that is not one plain path segment
  is `UnreadableResults` and never read, and so is an object larger than `MAX_RESULTS_BYTES` (a
  results.json is a few KiB), or, on a file:// prefix, one that is a FIFO, a device or a
  folder (a FIFO would block for ever, /dev/zero never end).
"""

from __future__ import annotations

import functools
import json
from urllib.parse import unquote

from entrypoints.shared.results_schema import RESULTS_FILE, SCHEMA, Results, is_newer
from entrypoints.shared.storage import FileStore, StorageError, open_store
from orchestrator.errors import InputError
from orchestrator.locations import RESULTS_DIR, results_uri

MAX_RESULTS_BYTES = 4 * 1024 * 1024


class UnreadableResults(Exception):
    """A results object that exists but cannot be used; the message says why."""


@functools.cache
def _adapter():
    """pydantic's validator of the schema, built once, on the first object read: pydantic
    stays off the start-up of commands that read no results."""
    from pydantic import TypeAdapter

    return TypeAdapter(Results)


def parse(data: bytes) -> Results:
    """Parse one results.json object. Raises `UnreadableResults` with a reason a user can act on."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UnreadableResults(f"not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        truncated = "" if data.rstrip().endswith((b"}", b"]")) else " (truncated?)"
        # json's messages may end in "at" ("Unterminated string starting at"): a colon reads
        # right after every one of them, as in json's own str(exc).
        raise UnreadableResults(f"not valid JSON{truncated}: {exc.msg}: line {exc.lineno} column {exc.colno}") from None
    if not isinstance(doc, dict):
        raise UnreadableResults(f"not a JSON object but {type(doc).__name__}")
    found = doc.get("schema")
    if found != SCHEMA:
        what = ("; a newer orchestrator wrote it: upgrade this one (`git pull` in its checkout) to read it"
                if is_newer(found) else "")
        raise UnreadableResults(f"unknown schema {found!r}; this orchestrator reads {SCHEMA!r}{what}")
    from pydantic import ValidationError

    try:
        return _adapter().validate_python(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise UnreadableResults(f"field {where}: {first['msg']}{more}") from None


# --- where results live -------------------------------------------------------------------


def local_store_uri() -> str:
    """Where local-backend jobs write: file://$ORCHESTRATOR_HOME/store/jobs."""
    from orchestrator.paths import home

    return (home() / "store" / "jobs").as_uri()


def has_results(file_prefix: str) -> bool:
    """Whether a file:// prefix holds any job's results folder."""
    return bool(ResultsPrefix(file_prefix).jobs())


def _store_uri(prefix: str) -> str:
    """`prefix` as `storage.open_store` takes it: a file:// URI's path percent-decoded (as
    `Path.as_uri` encodes it)."""
    if prefix.startswith("file://"):
        return "file://" + unquote(prefix[len("file://"):])
    return prefix


def check_prefix(prefix: str, argument: str = "results prefix") -> str:
    """`prefix` if it can be a results prefix: what `storage.open_store` takes (s3://BUCKET[/key]
    with a valid bucket name, file:///absolute/path) and, for file://, a folder or nothing yet.
    InputError naming `argument` otherwise; nothing is read."""
    hint = "give the jobs' output.uri: s3://bucket/prefix or file:///path (a folder)"
    try:
        store = open_store(_store_uri(prefix))
    except ValueError as exc:
        raise InputError(f"{argument} {prefix!r}: {str(exc).removeprefix(f'{_store_uri(prefix)}: ')}",
                         hint=hint) from None
    if isinstance(store, FileStore):
        from orchestrator.paths import folder_problem

        problem = folder_problem(store.root)
        if problem is not None:
            raise InputError(f"{argument} {prefix!r}: {problem}", hint=hint)
    return prefix


def _segment(job: str) -> str:
    """`job` as one path segment under <prefix>/results/, so no key or path leaves the prefix."""
    if not job or job in (".", "..") or any(c in job for c in "/\\\x00"):
        raise UnreadableResults(f"{job!r} is not a job folder name; not read")
    return job


class ResultsPrefix:
    """The results of one output.uri (see the module docstring): which jobs have a folder,
    and each one's object. Store failures raise `StorageError`; the cause is botocore's error
    on S3."""

    def __init__(self, prefix: str, s3_client=None):
        self.prefix = prefix.rstrip("/")
        self.store = open_store(f"{_store_uri(self.prefix)}/{RESULTS_DIR}", s3_client=s3_client)
        self.local = isinstance(self.store, FileStore)
        self._sizes: dict[str, int] | None = None  # key -> size of each results object listed (S3)

    def uri(self, job: str) -> str:
        return results_uri(self.prefix, job)

    def jobs(self) -> list[str]:
        """The job folders under the prefix, sorted; a local folder counts without a results
        object (its row says it is missing), an S3 "folder" is any key below it."""
        if self.local:
            base = self.store.root
            if not base.is_dir():
                return []
            return sorted(p.name for p in base.iterdir() if p.is_dir())
        names, self._sizes = set(), {}
        for info in self.store.list("", with_etags=False):
            folder, slash, rest = info.key.partition("/")
            if slash:
                names.add(folder)
                if rest == RESULTS_FILE:
                    self._sizes[info.key] = info.size
        return sorted(names)

    def get(self, job: str) -> bytes | None:
        """The job's results object, or None when it has none. `UnreadableResults` when it cannot be
        one (see the module docstring)."""
        key = f"{_segment(job)}/{RESULTS_FILE}"
        if self.local:
            from orchestrator.paths import not_a_file

            kind = not_a_file(self.store.path(key))
            if kind is not None:
                raise UnreadableResults(f"is {kind}, not a regular file; not read")
        if self._sizes is not None:  # listed: no object there was none a moment ago
            size = self._sizes.get(key)
            if size is None:
                return None
        else:
            info = self.store.stat(key)
            size = None if info is None else info.size
        if size is not None and size > MAX_RESULTS_BYTES:
            raise UnreadableResults(f"{size} bytes: too large for a results object")
        try:
            return self.store.get_bytes(key)
        except StorageError:
            if self.local and not self.store.path(key).exists():
                return None  # gone since it was listed
            raise
