"""cli.main: every error, ours or not, is one message and an exit code; never a traceback
without --debug."""

from __future__ import annotations

import errno

import pytest
from cli_harness import run_cli

# --- the last resort: no traceback for anything a command did not turn into our error ---------


@pytest.mark.parametrize("raised, code, error, hint", [
    (OSError(errno.ENAMETOOLONG, "File name too long", "/x/" + "a" * 300), 2,
     "error: /x/" + "a" * 300 + ": File name too long", "hint: a name in the path is longer than the file system allows"),
    (OSError(errno.ENOSPC, "No space left on device", "/full/f"), 1, "error: /full/f: No space left on device",
     "hint: the disk is full: free some space there"),
    (RuntimeError("boom"), 1, "error: internal error: RuntimeError: boom",
     "hint: this is a bug in the orchestrator: run the command again with --debug"),
])
def test_an_error_no_command_translated_is_one_message_not_a_traceback(monkeypatch, capsys, raised, code, error, hint):
    from orchestrator import spec

    def fail(path):
        raise raised

    monkeypatch.setattr(spec, "load", fail)
    got, out, err = run_cli(monkeypatch, capsys, "validate", "x.yaml")
    assert got == code and out == "" and "Traceback" not in err
    assert err.splitlines()[0] == error and err.splitlines()[1].startswith(hint)
    # --debug shows the traceback instead.
    monkeypatch.setattr("sys.argv", ["orchestrator", "--debug", "validate", "x.yaml"])
    from orchestrator import cli

    with pytest.raises(type(raised)):
        cli.main()
