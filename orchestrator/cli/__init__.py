"""The command line: the only code that prints or exits.

One module per command group (`root.COMMANDS` maps each command to it, with the line the
root's `--help` lists), each imported only when its command runs (or for its own `--help`), so a command loads no more than it needs; the plain
`validate PATH` runs without typer at all (`quick`). Heavy
imports (boto3, torch, matplotlib) happen inside the commands that need them, so
`validate`, `doctor`, `plan` and `schema` start fast and never import torch. Errors become
messages and exit codes in one place, `exits.run` (0 ok, 2 bad input, 1 backend or job
failure; `--debug` shows tracebacks).
"""

from __future__ import annotations

import sys

from orchestrator.cli.output import reflowed
from orchestrator.lazy_exports import module_getattr

# The root group, imported on first use (`root` imports typer): `main` runs the plain
# `validate PATH` without it (`quick`).
__getattr__ = module_getattr(__name__, {"COMMANDS": "root", "app": "root"})


def main() -> None:
    """Run the CLI on sys.argv (`python -m orchestrator`, the `orchestrator` script)."""
    from orchestrator.cli import exits, quick

    call = quick.command(sys.argv[1:])
    if call is None:
        from orchestrator.cli.root import app

        call = app
    exits.run(call)


__all__ = ["COMMANDS", "app", "main", "reflowed"]
