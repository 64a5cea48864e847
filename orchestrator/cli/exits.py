"""From errors to exit codes: the one place the CLI turns an exception into a message.

Exit codes: 0 ok, 2 bad input (spec, flags, files), 1 backend or job failure. Our errors
(`OrchestratorError`) are printed as one message and a hint, with their own exit code;
usage errors (unknown command, missing argument) are typer's own (exit 2); any other
exception (an OSError no command translated, a bug) is one message too: exit 2 for an
OSError about the path given (a name too long, not a folder...), else 1. `--debug` shows
the traceback first, then the hint, and keeps the exit code.
"""

from __future__ import annotations

import errno
import sys

from orchestrator.cli.output import err
from orchestrator.errors import OrchestratorError

_debug = {"on": False}


def set_debug(on: bool) -> None:
    """Whether errors show their traceback (the root `--debug` option)."""
    _debug["on"] = on


# OSErrors no command turned into one of ours: those about the path given (exit 2) and
# what to do about each.
_PATH_ERRNOS = {
    errno.ENAMETOOLONG: "a name in the path is longer than the file system allows (255 bytes a name): use a "
                        "shorter one",
    errno.ELOOP: "the path goes round a loop of symbolic links: fix the links or give another path",
    errno.ENOTDIR: "a part of the path that should be a folder is a file: check the path",
    errno.EISDIR: "the path is a folder where a file was expected: check the path",
    errno.ENOENT: "check the path",
    errno.EACCES: "give a path you can read and write, or change its permissions",
    errno.EPERM: "give a path you can read and write, or change its permissions",
    errno.EROFS: "the file system is read-only: give a path on a writable one (ORCHESTRATOR_HOME for local state)",
}
_OTHER_ERRNOS = {
    errno.ENOSPC: "the disk is full: free some space there (or point ORCHESTRATOR_HOME at another disk) and run "
                  "the command again",
    errno.EDQUOT: "your disk quota is used up: free some space and run the command again",
    errno.EIO: "the disk reported an I/O error: check it, then run the command again",
}


def _last_resort(exc: BaseException) -> int:
    """Print an error that no command turned into ours (an OSError about a path, or a bug) as
    one message and a hint, never a traceback; return the exit code (2 for a bad path)."""
    if isinstance(exc, OSError) and exc.errno in _PATH_ERRNOS | _OTHER_ERRNOS:
        where = f"{exc.filename}: " if exc.filename else ""
        err(f"error: {where}{exc.strerror or exc}")
        err(f"hint: {(_PATH_ERRNOS | _OTHER_ERRNOS)[exc.errno]}")
        return 2 if exc.errno in _PATH_ERRNOS else 1
    err(f"error: internal error: {type(exc).__name__}: {exc}")
    err("hint: this is a bug in the orchestrator: run the command again with --debug before it "
        "(`python -m orchestrator --debug ...`) to see the traceback, and report it")
    return 1


def run(app) -> None:
    """Run `app` (the root typer app) on sys.argv and exit as the module docstring says."""
    from orchestrator import aws
    from orchestrator.errors import set_notes

    set_debug(False)  # until the root callback reads --debug
    aws.set_notifier(err)
    set_notes(err)  # the ledger's wait for another process's lock (importing no ledger here)
    try:
        app()
    except OrchestratorError as exc:
        if _debug["on"]:
            import traceback

            traceback.print_exc(file=sys.stderr)
            if exc.hint:
                err(f"hint: {exc.hint}")
            sys.exit(exc.exit_code)
        err(f"error: {exc.message}")
        if exc.hint:
            err(f"hint: {exc.hint}")
        sys.exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - the last resort: no traceback without --debug
        if _debug["on"]:
            raise
        sys.exit(_last_resort(exc))
