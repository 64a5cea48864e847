"""What a local job reads must be there and readable before anything is laid out or copied."""

from __future__ import annotations

import os
from pathlib import Path

from entrypoints.shared import contract
from orchestrator.backends.local.layout import channels_of
from orchestrator.errors import BackendError, InputError


def check_channels(request: dict, store_of) -> None:
    """Each data channel of a local job's request (not the code channel, which the submit
    uploads) lists objects in its store (`store_of(uri)`), and a file:// channel's files can all
    be read: InputError (exit 2) at data.source otherwise, BackendError when the store fails."""
    for channel, uri in channels_of(request).items():
        if channel == contract.CODE_CHANNEL:
            continue  # the source archive: this submit uploads it
        from entrypoints.shared.storage import StorageError

        try:
            listed = store_of(uri).list(with_etags=False)
            empty = not listed
        except ValueError as exc:  # a URI the store cannot take: the spec's fault
            raise InputError(f"data channel {channel!r}: {exc}", hint="check data.source") from exc
        except StorageError as exc:  # the store failed (S3 error, network): not bad input
            raise BackendError(f"cannot read data channel {channel!r} at {uri}: {exc}",
                               hint="check your credentials and the network, then submit again") from exc
        if empty:
            raise InputError(f"data channel {channel!r}: no objects under {uri}",
                             hint="data.source must hold an ImageFolder tree (class/image files)")
        if uri.startswith("file://"):
            check_readable(channel, Path(uri[len("file://"):]), [info.key for info in listed])


def check_readable(channel: str, root: Path, keys: list[str]) -> None:
    """InputError (exit 2) naming the first file of a local data folder this user cannot read,
    before anything is copied (issue 32: one unreadable file ended a job after gigabytes were
    copied, as a platform error). Each file is opened (not `os.access`, which says yes to root
    whatever the file system says) and closed at once."""
    for key in keys:
        path = root / key
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            continue  # gone since the listing: the copy skips it too
        except OSError as exc:
            import shlex

            raise InputError(f"data channel {channel!r}: {path} cannot be read: {exc.strerror or exc}; nothing was "
                             "copied or submitted",
                             hint=f"make it readable for you (chmod u+r {shlex.quote(str(path))}) or move it out of "
                                  "data.source") from None
        os.close(fd)
