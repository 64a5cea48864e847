"""The command line: the only code that prints or exits.

One module per command group (`root.COMMANDS` maps each command to it), each imported only
when its command runs (or for `--help`), so a command loads no more than it needs; the plain
`validate PATH` runs without typer at all (`quick`). Heavy
imports (boto3, torch, matplotlib) happen inside the commands that need them, so
`validate`, `doctor`, `plan` and `schema` start fast and never import torch. Errors become
messages and exit codes in one place, `exits.run` (0 ok, 2 bad input, 1 backend or job
failure; `--debug` shows tracebacks).
"""

from __future__ import annotations

import sys

from orchestrator.cli.output import reflowed

# The root group, imported on first use (`root` imports typer): `main` runs the plain
# `validate PATH` without it (`quick`).
_FROM_ROOT = ("COMMANDS", "app")


def __getattr__(name: str):
    if name in _FROM_ROOT:
        from orchestrator.cli import root

        return getattr(root, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Run the CLI on sys.argv (`python -m orchestrator`, the `orchestrator` script)."""
    from orchestrator.cli import exits, quick

    call = quick.command(sys.argv[1:])
    if call is None:
        from orchestrator.cli.root import app

        call = app
    exits.run(call)


__all__ = ["COMMANDS", "app", "main", "reflowed"]
