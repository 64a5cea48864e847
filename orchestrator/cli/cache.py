"""`cache`: compile caches in a store (`orchestrator.cache`): list keys, show a manifest,
prune unreferenced archives and old keys."""

from __future__ import annotations

import typer

from orchestrator.cli.output import err, fitted_text, out

app = typer.Typer(name="cache", no_args_is_help=True, help="Compile caches in a store: list keys, show a manifest, "
                  "prune unreferenced archives and old keys.")


def size(n: float) -> str:
    """A size in bytes as people read it (rich's decimal units: 1.5 kB, 3.2 MB)."""
    from rich.filesize import decimal

    return decimal(int(n))


_CACHE_URI = typer.Argument(None, help="Store URI: s3://bucket/prefix or file:///abs/path (default: "
                            "file://$ORCHESTRATOR_HOME/store/compile-cache).")


@app.command("ls")
def cache_ls(uri: str | None = _CACHE_URI) -> None:
    """List cache keys with their entry counts and sizes."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator import cache

    stderr = Console(stderr=True)
    with Progress(TextColumn("reading manifests"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=stderr, transient=True, disable=not stderr.is_terminal) as bar:
        task = bar.add_task("manifests", total=None)
        root, keys = cache.list_keys(uri, progress=lambda done, total: bar.update(task, completed=done, total=total))
    if uri is None:
        # The default is this machine's store; SageMaker jobs' caches are in S3.
        err(f"note: this is the local store ({root}); for the compile caches of SageMaker jobs give their S3 "
             "URI: `python -m orchestrator cache ls s3://BUCKET/compile-cache` (a job spec's compile_cache.uri; "
             "`python -m orchestrator infra outputs` prints the stack's)")
    if not keys:
        out(f"no compile caches under {root}")
        return
    rows = [tuple(map(str, (key.key, key.entries, size(key.entry_bytes), key.archives, size(key.archive_bytes),
                            key.updated_at or "-"))) for key in keys]
    # At the screen's width (COLUMNS): a key too long for what is left breaks after one of its
    # separators (its hex part whole), never mid-word.
    out(fitted_text((("KEY", "left"), ("ENTRIES", "right"), ("SIZE", "right"), ("ARCHIVES", "right"),
                     ("STORED", "right"), ("UPDATED", "left")), rows,
                    whole=("ENTRIES", "SIZE", "ARCHIVES", "STORED", "UPDATED"), first=("KEY",)))
    for key in keys:
        if key.problem:
            err(f"warning: {key.key}: {key.problem}")


@app.command("show")
def cache_show(args: list[str] = typer.Argument(..., metavar="[URI] KEY", help="Store URI (default: the "
                                                "local store, as for `cache ls`) and a key as `cache ls` shows it.")) -> None:
    """Show one key's manifest: key fields, entries and the archives beside it."""
    from orchestrator import cache
    from orchestrator.errors import InputError

    if len(args) > 2:
        raise InputError(f"cache show takes [URI] KEY, got {len(args)} arguments",
                         hint="e.g. `python -m orchestrator cache show s3://bucket/compile-cache KEY`; "
                              "`python -m orchestrator cache ls [URI]` lists the keys")
    uri, key = (None, args[0]) if len(args) == 1 else (args[0], args[1])
    detail = cache.show(uri, key)
    out(f"key: {detail.key}")
    out(f"manifest: {detail.manifest_uri}")
    for name, value in detail.fields.items():
        out(f"  {name}: {value}")
    out(f"updated: {detail.updated_at or '-'}")
    rows = [(name, size(entry_bytes), archive) for name, archive, entry_bytes in detail.entries]
    out(fitted_text((("ENTRY", "left"), ("SIZE", "right"), ("ARCHIVE", "left")), rows, whole=("SIZE",),
                    first=("ENTRY",)))
    referenced = sum(1 for _, _, used in detail.archives if used)
    stored = sum(n for _, n, _ in detail.archives)
    out(f"{len(detail.entries)} entries; {len(detail.archives)} archives ({size(stored)}), "
         f"{len(detail.archives) - referenced} not referenced")
    for warning in detail.warnings:
        err(f"warning: {warning}")


@app.command("prune")
def cache_prune(
    uri: str | None = _CACHE_URI,
    key: str | None = typer.Option(None, "--key", help="Delete this whole key."),
    older_than: float | None = typer.Option(None, "--older-than", min=0.0,
                                            help="Delete whole keys not updated for this many days."),
    grace_hours: float = typer.Option(1.0, "--grace-hours", min=0.0, help="Never delete archives younger "
                                      "than this: they may belong to a push in flight."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be deleted; delete nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Delete what is shown without asking (needed off a "
                             "terminal)."),
) -> None:
    """Delete archives no manifest names (past the grace period), and whole keys when asked.

    Only compile-cache keys whose manifest it can read are touched, and only the files a push
    writes (the manifest and its archives); a URI that holds no such key is refused. It shows
    what it will delete and asks first (--yes: without asking; off a terminal --yes is needed).
    """
    import sys

    from orchestrator import cache
    from orchestrator.errors import InputError

    def plan():
        return cache.prune(uri, key=key, older_than_days=older_than, grace_s=grace_hours * 3600, dry_run=True)

    report = plan()
    for note in report.skipped:
        err(f"warning: {note}")
    will = "would delete" if dry_run else "will delete"
    for action in report.deleted:
        out(f"{will} {action.uri} ({size(action.bytes)}): {action.reason}")
    young = f"; kept {report.kept_young} archive(s) younger than the grace period" if report.kept_young else ""
    if dry_run or not report.deleted:
        out(f"{'would delete' if dry_run else 'deleted'} {len(report.deleted)} object(s), {size(report.bytes)} under "
            f"{report.store_uri}{young}")
        _versions_note(report, dry_run)
        return
    if not yes:
        if not sys.stdin.isatty():
            raise InputError(f"cache prune would delete {len(report.deleted)} object(s) ({size(report.bytes)}) under "
                             f"{report.store_uri}, listed above; nothing was deleted: confirm with --yes "
                             "(stdin is not a terminal, so it cannot ask)",
                             hint="check the list (or run with --dry-run), then run again with --yes")
        if not typer.confirm(f"Delete these {len(report.deleted)} object(s)?", default=False):
            err("nothing deleted")
            raise typer.Exit(code=1)
    confirmed = {action.uri for action in report.deleted}
    done = cache.prune(uri, key=key, older_than_days=older_than, grace_s=grace_hours * 3600, only=confirmed)
    left = len(confirmed) - len(done.deleted)
    kept = f"; {left} of those shown were kept (a push named them since)" if left else ""
    out(f"deleted {len(done.deleted)} object(s), {size(done.bytes)} under {done.store_uri}{young}{kept}")
    _versions_note(done, False)


def _versions_note(report, dry_run: bool) -> None:
    if report.deleted and report.store_uri.startswith("s3://"):
        err(f"note: on a versioned bucket (the stack's is) S3 keeps what is deleted as noncurrent versions: the "
             f"{size(report.bytes)} {'would be' if dry_run else 'are'} freed when they expire (the stack's lifecycle "
             "rule, CompileCacheNoncurrentDays: 30 days unless deployed otherwise), not at once")
