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


def in_mount_namespace(script: str, env: dict, timeout: float = 120):
    """Run `sh -c script` as root of a new user and mount namespace (`unshare -rm`), where it
    may mount a tmpfs (small, to fill up; or remounted read-only) that no one else sees.
    Skips the test where this machine allows no such namespace."""
    import shutil
    import subprocess

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("no user and mount namespaces here (unshare -rm), so no private tmpfs to fill or make read-only")
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], env=env, capture_output=True, text=True,
                          timeout=timeout)
