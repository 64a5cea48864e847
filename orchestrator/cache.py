"""Inspect and prune compile caches in a store: `orchestrator cache ls | show | prune`.

Reads the layout `entrypoints.shared.compile_cache` writes: under the store URI one folder per
cache key, `<key>/manifest.json` plus content-addressed `<key>/archives/<sha256>.tar`.
Nothing here prints; `cli.py` renders the values these functions return.

Prune is safe against pushes running at the same time. A push uploads its archive first and
publishes the manifest naming it a moment later (seconds, even after conflict retries), so:

- an archive is deleted only when no manifest names it AND it is older than the grace period
  (default one hour); prune lists the archives before it reads the manifest, so an archive
  listed as old was uploaded before that read, and a push that published it in time shows up
  in the manifest;
- deleting a whole key (`--key`, `--older-than`) removes its manifest first, then only the
  archives older than the grace period; younger ones belong to pushes in flight and are left
  for a later prune;
- should a prune still delete an archive a push has just re-uploaded (identical content), the
  push notices after publishing and uploads it again, and a pull meeting a missing archive
  warns and compiles;
- in a file:// store it also removes the temporary files of interrupted writes older than the
  grace period (on S3, the bucket's lifecycle rule aborts unfinished multipart uploads).

Bad URIs (an unknown scheme, a bad bucket name, a relative path, a file:// path that exists
but is not a folder) and unknown keys raise InputError (exit 2), before any store is read;
store failures raise BackendError (exit 1). An s3:// store gets its client here, in the region
of every command that calls AWS (`region.default_region`); an AWS configuration
that cannot be read (an unknown AWS_PROFILE) is an InputError.
"""

from __future__ import annotations

import errno
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from entrypoints.shared import compile_cache
from entrypoints.shared.compile_cache.manifest import manifest_bytes
from entrypoints.shared.storage import FileStore, ObjectInfo, S3Store, StorageError, Store, open_store
from orchestrator.errors import BackendError, InputError

DEFAULT_GRACE_S = 3600.0
_ARCHIVE_PREFIX = f"{compile_cache.ARCHIVE_DIR}/"


def default_uri() -> str:
    """The local store's compile caches: file://$ORCHESTRATOR_HOME/store/compile-cache."""
    from orchestrator.paths import home

    return f"file://{home()}/store/compile-cache"


def default_s3_client():
    """An S3 client in the region every AWS-calling command uses (`default_region`): botocore
    alone reads AWS_DEFAULT_REGION only, so a user who set AWS_REGION would reach us-east-1's
    endpoint (another partition's, for cn-/us-gov- buckets). An AWS config that cannot be
    read (an unknown AWS_PROFILE) is an InputError, as for every other command. The client
    settings are storage.py's own, with the timeouts of every client (`aws.client`)."""
    from entrypoints.shared.storage import s3_client_config
    from orchestrator import aws
    from orchestrator.region import default_region

    return aws.client("s3", default_region(), config=s3_client_config())


def open_cache(uri: str | None, s3_client=None) -> Store:
    """The store of the compile caches at `uri` (default: `default_uri()`), checked before
    anything is read: InputError for a bad URI or a file:// path that is not a folder."""
    uri = uri or default_uri()
    hint = "use s3://bucket/prefix or file:///absolute/path (a folder)"
    try:
        store = open_store(uri, s3_client=s3_client)  # it drops trailing slashes itself
        if isinstance(store, S3Store) and s3_client is None:  # the URI is good: now the client
            store = open_store(uri, s3_client=default_s3_client())
    except ValueError as exc:
        raise InputError(f"bad cache URI: {exc}", hint=hint) from exc
    if isinstance(store, FileStore):
        from orchestrator.paths import folder_problem

        problem = folder_problem(store.root)
        if problem is not None:
            raise InputError(f"bad cache URI {uri!r}: {problem}", hint=hint)
    return store


# A key is one folder name under the store (compile_cache makes them short: <name>-<hex>).
MAX_KEY_BYTES = 255


def _check_key(store: Store, key: str, option: str | None = None) -> str:
    """`key` if it can be a cache key folder of `store`: one non-empty path segment, not `.`
    or `..`, at most MAX_KEY_BYTES bytes. InputError (exit 2) otherwise, before any read."""
    bad = (not key or "/" in key or "\x00" in key or key in (".", "..")
           or len(key.encode("utf-8", "surrogateescape")) > MAX_KEY_BYTES)
    if bad:
        shown = key if len(key) <= 80 else key[:77] + "..."
        raise InputError(f"{option + ': ' if option else ''}bad cache key {shown!r}: a key is one folder name under "
                         f"the store (no '/', not '.' or '..', at most {MAX_KEY_BYTES} bytes)",
                         hint=f"use a key as {_ls_hint(store).removesuffix(' lists the keys there')} shows it")
    return key


def _backend(exc: StorageError) -> BackendError:
    from orchestrator import aws, aws_errors

    silent = aws.describe(exc)
    if silent is not None:
        op = str(exc).split(": ", 1)[0]  # "list s3://bucket/prefix/"
        return BackendError(f"{op}: {silent}; {aws.tries_said(exc)}", hint=aws.NO_ANSWER_HINT)
    # storage.py ends some messages with its own "(hint: ...)": make that the one hint line.
    message, sep, rest = str(exc).partition(" (hint: ")
    if sep and rest.endswith(")"):
        return BackendError(message, hint=rest[:-1])
    cause = exc.__cause__
    if isinstance(cause, OSError) and aws_errors.classify(exc) is None:
        # A file:// store: no credentials or network involved, the folder itself is at fault.
        if cause.errno == errno.EISDIR or (cause.errno == errno.EINVAL and "not a regular file" in str(cause)):
            what = "a folder" if cause.errno == errno.EISDIR else "something that is not a file"
            return BackendError(f"{exc}: {what} stands where the cache keeps a file",
                                hint="the cache was changed by hand: move it away, or drop the key with "
                                     "`python -m orchestrator cache prune URI --key KEY`")
        from orchestrator.paths import write_hint

        return BackendError(str(exc), hint=write_hint(cause, "check the store's folder"))
    return BackendError(str(exc), hint="check the URI, your credentials and the network")


def _ls_hint(store) -> str:
    return f"`python -m orchestrator cache ls {shlex.quote(store.uri_root)}` lists the keys there"


@dataclass
class _KeyObjects:
    manifest: ObjectInfo | None = None
    archives: dict[str, ObjectInfo] = field(default_factory=dict)  # "archives/<name>" -> info
    others: list[ObjectInfo] = field(default_factory=list)


# The archives a push writes: content-addressed, `archives/<sha256>.tar` (manifest.py's names).
_ARCHIVE_NAME = re.compile(rf"^{compile_cache.ARCHIVE_DIR}/[0-9a-f]{{64}}\.tar(\.gz)?$")


def _group(objects: list[ObjectInfo]) -> dict[str, _KeyObjects]:
    keys: dict[str, _KeyObjects] = {}
    for info in objects:
        name, sep, rest = info.key.partition("/")
        if not sep:
            continue  # an object at the root is none of ours
        group = keys.setdefault(name, _KeyObjects())
        if rest == compile_cache.MANIFEST:
            group.manifest = info
        elif rest.startswith(_ARCHIVE_PREFIX) and _ARCHIVE_NAME.match(rest):
            group.archives[rest] = info
        else:
            group.others.append(info)  # never deleted: not a name a push writes
    return keys


def _our_manifest(store: Store, name: str) -> tuple[dict | None, str | None]:
    """(manifest, None) when `name` is a compile-cache key of ours: its manifest reads as one
    (`parse_manifest`) and names the key whose folder `name` is; else (None, why not)."""
    raw = store.get_bytes(f"{name}/{compile_cache.MANIFEST}")
    if raw is None:
        return None, f"no {compile_cache.MANIFEST}"
    try:
        doc, _ = compile_cache.parse_manifest(raw)
        fields = doc.get("key")
        if not isinstance(fields, dict) or compile_cache.CacheKey(**fields).digest() != name:
            return None, "its manifest names another cache key"
    except (ValueError, TypeError) as exc:
        return None, f"unreadable manifest ({str(exc)[:80]})"
    return doc, None


def _manifest(store: Store, key: str) -> tuple[dict | None, str | None]:
    """(manifest, problem): the parsed manifest, or None and why it is unusable."""
    raw = store.get_bytes(f"{key}/{compile_cache.MANIFEST}")
    if raw is None:
        return None, "no manifest"
    try:
        doc, warnings = compile_cache.parse_manifest(raw)
    except ValueError as exc:
        return None, str(exc)
    return doc, "; ".join(warnings) or None


@dataclass(frozen=True)
class KeySummary:
    key: str
    entries: int
    entry_bytes: int
    archives: int
    archive_bytes: int
    updated_at: str | None
    problem: str | None


def list_keys(uri: str | None = None, *, s3_client=None,
              progress: Callable[[int, int], None] | None = None) -> tuple[str, list[KeySummary]]:
    """(store URI, one summary per key folder, sorted by key). `progress(done, total)` is
    called as each key's manifest is read (one read per key: many keys on S3 take a while)."""
    store = open_cache(uri, s3_client)
    try:
        groups = _group(store.list(with_etags=False))
        summaries = []
        for done, (key, group) in enumerate(sorted(groups.items())):
            if progress:
                progress(done, len(groups))
            doc, problem = _manifest(store, key) if group.manifest else (None, "no manifest")
            entries = doc["entries"] if doc else {}
            summaries.append(KeySummary(
                key=key,
                entries=len(entries),
                entry_bytes=sum(entry["bytes"] for entry in entries.values()),
                archives=len(group.archives),
                archive_bytes=sum(info.size for info in group.archives.values()),
                updated_at=doc.get("updated_at") if doc else None,
                problem=problem,
            ))
    except StorageError as exc:
        raise _backend(exc) from exc
    return store.uri_root, summaries


@dataclass(frozen=True)
class KeyDetail:
    key: str
    manifest_uri: str
    fields: dict
    updated_at: str | None
    entries: list[tuple[str, str, int]]  # (entry name, archive, entry bytes)
    archives: list[tuple[str, int, bool]]  # (archive, bytes, referenced by the manifest)
    warnings: list[str]


def show(uri: str | None, key: str, *, s3_client=None) -> KeyDetail:
    """One key's manifest: its key fields, entries, and the archives stored beside it."""
    store = open_cache(uri, s3_client)
    _check_key(store, key)
    manifest_key = f"{key}/{compile_cache.MANIFEST}"
    try:
        raw = store.get_bytes(manifest_key)
        if raw is None:
            raise InputError(f"no manifest for cache key {key!r} under {store.uri_root}",
                             hint=_ls_hint(store))
        try:
            doc, warnings = compile_cache.parse_manifest(raw)
        except ValueError as exc:
            raise BackendError(f"{store.uri(manifest_key)}: {exc}",
                               hint="the next push replaces an unusable manifest; prune --key removes it") from exc
        stored = _group(store.list(f"{key}/", with_etags=False)).get(key, _KeyObjects()).archives
    except StorageError as exc:
        raise _backend(exc) from exc
    referenced = {entry["archive"] for entry in doc["entries"].values()}
    return KeyDetail(
        key=key,
        manifest_uri=store.uri(manifest_key),
        fields=doc.get("key") if isinstance(doc.get("key"), dict) else {},
        updated_at=doc.get("updated_at"),
        entries=sorted((name, entry["archive"], entry["bytes"]) for name, entry in doc["entries"].items()),
        archives=sorted((name, info.size, name in referenced) for name, info in stored.items()),
        warnings=warnings + [f"{name} is named by the manifest but missing" for name in sorted(referenced - set(stored))],
    )


@dataclass(frozen=True)
class PruneAction:
    uri: str
    bytes: int
    reason: str


@dataclass
class PruneReport:
    store_uri: str
    dry_run: bool
    deleted: list[PruneAction] = field(default_factory=list)
    kept_young: int = 0
    skipped: list[str] = field(default_factory=list)  # keys left alone, with why

    @property
    def bytes(self) -> int:
        return sum(action.bytes for action in self.deleted)


def prune(uri: str | None = None, *, key: str | None = None, older_than_days: float | None = None,
          grace_s: float = DEFAULT_GRACE_S, dry_run: bool = False, now: float | None = None,
          s3_client=None, only: set[str] | None = None) -> PruneReport:
    """Delete unreferenced archives older than `grace_s`, and whole keys when asked.

    `key`: delete that key (manifest, then archives past the grace period). `older_than_days`:
    delete every key whose manifest (or, without one, newest object) is older than that.
    Without either, only unreferenced archives go. `dry_run` reports without deleting.
    `only`: delete nothing but these URIs (the plan a dry run showed and the user confirmed).

    Only keys of ours are touched: a folder whose manifest does not read as a compile-cache
    manifest of that very key is left alone (reported in `skipped`), and only the names a push
    writes (the manifest, `archives/<sha256>.tar`) are deleted. A store that holds no key of
    ours is refused (InputError): it is no compile cache (a jobs store, a folder of files).
    """
    if older_than_days is not None and older_than_days < 0:
        raise InputError(f"--older-than must be zero or more days, got {older_than_days}",
                         hint="e.g. --older-than 30 deletes the keys not updated for 30 days")
    if grace_s < 0:
        raise InputError(f"the grace period must be zero or more, got {grace_s}",
                         hint="e.g. --grace-hours 1 (the default): younger archives may belong to a push in flight")
    store = open_cache(uri, s3_client)
    if key is not None:
        _check_key(store, key, "--key")
    now = time.time() if now is None else now
    report = PruneReport(store.uri_root, dry_run)
    try:
        # Listing comes before reading manifests: see the module docstring.
        groups = _group(store.list(f"{key}/" if key else "", with_etags=False))
        if key is not None and key not in groups:
            raise InputError(f"no cache key {key!r} under {store.uri_root}",
                             hint=_ls_hint(store))
        ours: dict[str, dict] = {}
        for name in sorted(groups):
            doc, why = _our_manifest(store, name)
            if doc is not None:
                ours[name] = doc
            elif key is not None:
                raise InputError(f"{store.uri_root}/{key}/ is not a compile-cache key ({why}); nothing was deleted",
                                 hint=f"cache prune deletes only keys whose manifest it can read; {_ls_hint(store)}")
            else:
                report.skipped.append(f"{name}/: not a compile-cache key ({why}); nothing in it deleted")
        if groups and not ours:
            raise InputError(f"{store.uri_root} is not a compile cache: none of its {len(groups)} folder(s) holds a "
                             f"compile-cache manifest ({compile_cache.MANIFEST}); nothing was deleted",
                             hint="give the compile cache's URI (a job spec's compile_cache.uri, e.g. "
                                  "s3://BUCKET/compile-cache); `cache prune` never deletes what a push did not write")
        if only is not None:
            report.skipped.clear()  # said when the plan was shown
        if isinstance(store, FileStore) and key is None and ours:
            for path, size in store.stale_temporaries(grace_s, now=now):
                _delete_file(path, size, report, only)
        for name in sorted(ours):
            group = groups[name]
            whole = key is not None
            if older_than_days is not None and group.manifest is not None:  # None: published since the listing
                whole = whole or now - group.manifest.last_modified > older_than_days * 86400
            if whole:
                _drop_key(store, group, ours[name], now, grace_s, report, only)
            else:
                _drop_unreferenced(store, name, group, ours[name], now, grace_s, report, only)
    except StorageError as exc:
        raise _backend(exc) from exc
    return report


def _delete_file(path, size: int, report: PruneReport, only: set[str] | None) -> None:
    uri = f"file://{path}"
    if only is not None and uri not in only:
        return
    if not report.dry_run:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise BackendError(f"cannot delete {path}: {exc.strerror or exc}") from exc
    report.deleted.append(PruneAction(uri, size, "left by an interrupted write"))


def _delete(store: Store, key: str, size: int, reason: str, report: PruneReport, only: set[str] | None) -> None:
    if only is not None and store.uri(key) not in only:
        return  # not in the plan the user confirmed
    if not report.dry_run:
        store.delete(key)
    report.deleted.append(PruneAction(store.uri(key), size, reason))


def _drop_key(store: Store, group: _KeyObjects, doc: dict, now: float, grace_s: float, report: PruneReport,
              only: set[str] | None) -> None:
    old = [info for info in group.archives.values() if now - info.last_modified > grace_s]
    young = len(group.archives) - len(old)
    manifest_key = group.manifest.key if group.manifest is not None else None
    if manifest_key is not None and not young:
        _delete(store, manifest_key, group.manifest.size, "key removed", report, only)
    elif manifest_key is not None:
        # Young archives may belong to a push in flight: they stay, and so does a manifest of
        # this key, emptied (pulls find nothing, as with none), so that a later prune still
        # knows the folder for ours and removes them once they are old.
        empty = manifest_bytes(compile_cache.new_manifest(compile_cache.CacheKey(**doc["key"])))
        if only is None or store.uri(manifest_key) in only:
            if not report.dry_run:
                store.put_bytes(manifest_key, empty)
            report.deleted.append(PruneAction(store.uri(manifest_key), group.manifest.size,
                                              f"key emptied; {young} archive(s) younger than the grace period are "
                                              "left for a later prune"))
    report.kept_young += young
    for info in old:  # `others` are no names of ours: left alone
        _delete(store, info.key, info.size, "key removed", report, only)


def _drop_unreferenced(store: Store, name: str, group: _KeyObjects, doc: dict, now: float, grace_s: float,
                       report: PruneReport, only: set[str] | None) -> None:
    # `doc` was read after the listing: an archive listed as old and not named there is no
    # push's in flight (see the module docstring).
    referenced = {entry["archive"] for entry in doc["entries"].values()}
    if not group.archives and not referenced and group.manifest is not None:
        # A key a whole-key prune emptied, its last archives gone since: nothing left of it.
        _delete(store, group.manifest.key, group.manifest.size, "empty key removed", report, only)
        return
    for archive, info in sorted(group.archives.items()):
        if archive in referenced:
            continue
        if now - info.last_modified > grace_s:
            _delete(store, info.key, info.size, "not referenced by the manifest", report, only)
        else:
            report.kept_young += 1
