"""Run the CLI in-process the way `python -m orchestrator` does, capturing its output."""

from __future__ import annotations

import sys

import pytest


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `orchestrator ARGS` run through `cli.main()`."""
    from orchestrator import cli

    monkeypatch.setattr(sys, "argv", ["orchestrator", *args])
    with pytest.raises(SystemExit) as info:
        cli.main()
    captured = capsys.readouterr()
    return info.value.code or 0, captured.out, captured.err
