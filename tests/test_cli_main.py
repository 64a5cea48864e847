"""cli.main: every error, ours or not, is one message and an exit code; never a traceback
without --debug."""

from __future__ import annotations

import errno

import pytest
from cli_harness import run_cli
from job_waits import patience

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


# --- start-up: a command loads its own module, not the others' ----------------------------------


def test_validate_loads_the_spec_side_only(tmp_path):
    """The root group imports a command's module when the command runs: `validate` loads no
    other command group, no results reader or its schema, no sweeps, ledger or stores. It asks
    the spec's backend what it needs (the registry and that backend's class, issue 24), and no
    other backend."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = (
        "import json, sys\n"
        "from orchestrator import cli\n"
        "sys.argv = ['orchestrator', 'validate', sys.argv[1]]\n"
        "try:\n    cli.main()\nexcept SystemExit as exc:\n    code = exc.code or 0\n"
        "mods = sorted(m for m in sys.modules if m.startswith(('orchestrator', 'entrypoints', 'typer', 'click', "
        "'rich', 'sqlite3')))\n"
        "print(json.dumps({'code': code, 'modules': mods}), file=sys.stderr)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(root), ORCHESTRATOR_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script, str(root / "configs" / "vit-trn1-2xlarge.yaml")],
                          env=env, capture_output=True, text=True, timeout=patience(120))
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] == 0, done.stderr
    loaded = set(report["modules"])
    # The plain `validate PATH` runs without typer (cli.quick): no CLI framework, no command module.
    assert "orchestrator.cli.quick" in loaded
    unwanted = {"typer", "click", "rich", "orchestrator.cli.root", "orchestrator.cli.specs","orchestrator.results", "orchestrator.results.read", "entrypoints.shared.results_schema",
                "entrypoints.shared.storage", "orchestrator.sweep", "orchestrator.ledger", "orchestrator.backends.batch",
                "orchestrator.backends.local", "sqlite3",
                "orchestrator.cli.jobs", "orchestrator.cli.sweep", "orchestrator.cli.results",
                "orchestrator.cli.cache", "orchestrator.cli.infra", "orchestrator.cli.schedule"}
    assert loaded.isdisjoint(unwanted), sorted(loaded & unwanted)


def test_a_command_is_built_alone_from_a_module_of_several(monkeypatch):
    """typer builds every command of the app it is given: `validate` builds its own command, not
    `schema`'s, `doctor`'s, `plan`'s and `smoke`'s; a group named after its command is built whole."""
    import typer

    from orchestrator.cli import root as cli

    built = []
    get_group = typer.main.get_group

    def recording(app):
        built.append(sorted(cli._command_name(info) for info in app.registered_commands))
        return get_group(app)

    monkeypatch.setattr(typer.main, "get_group", recording)
    command = cli._load("validate")
    assert command.name == "validate" and built == [["validate"]]
    assert [p.name for p in command.params] == ["path"]
    built.clear()
    assert cli._load("status").name == "status" and built == [["status"]]
    built.clear()
    group = cli._load("sweep")
    assert group.name == "sweep" and len(built) == 1 and {"run", "plan", "status"} <= set(built[0])


VALIDATE_CASES = {
    "ok": "name: ok\nrole_arn: arn:aws:iam::123456789012:role/r\ncompile_cache: {mode: \"off\"}\n"
          "output: {uri: s3://my-bucket/jobs}\n",
    "warning": "name: warn\nbackend: batch\ninstance: {type: inf2.xlarge}\ntraining: {runtime: native}\n"
               "compile_cache: {mode: \"off\"}\noutput: {uri: s3://my-bucket/jobs}\n",
    "unknown-field": "name: x\nbogus: 1\n",
    "doctor-error": "name: two\nbackend: batch\ninstance: {type: inf2.xlarge, count: 2}\n"
                    "output: {uri: s3://my-bucket/jobs}\n",
    "not-yaml": "name: [unclosed\n",
}


@pytest.mark.parametrize("case", [*VALIDATE_CASES, "missing", "folder", "not-utf8"])
def test_the_plain_validate_path_prints_and_exits_as_typers_does(monkeypatch, capsys, tmp_path, case):
    """`validate PATH` runs without typer (cli.quick); `validate -- PATH` is the same command
    parsed by typer. Both print the same lines and exit with the same code, for a good spec, a
    warning, each kind of bad input and a bad path."""
    from orchestrator.cli import quick

    path = tmp_path / "job.yaml"
    if case in VALIDATE_CASES:
        path.write_text(VALIDATE_CASES[case])
    elif case == "folder":
        path.mkdir()
    elif case == "not-utf8":
        path.write_bytes(b"name: caf\xe9\n")
    assert quick.command(["validate", str(path)]) is not None and quick.command(["validate", "--", str(path)]) is None
    fast = run_cli(monkeypatch, capsys, "validate", str(path))
    typed = run_cli(monkeypatch, capsys, "validate", "--", str(path))
    assert fast == typed
    code, stdout, stderr = fast
    assert code == (0 if case in ("ok", "warning") else 2)
    assert (stdout.startswith(f"{path}: ok") if code == 0 else stderr.startswith("error: "))
    if case == "warning":
        assert "warning: N046" in stderr


def test_only_the_plain_form_takes_the_fast_path():
    from orchestrator.cli import quick

    assert quick.command(["validate", "job.yaml"]) is not None
    for argv in (["validate"], ["validate", "--help"], ["validate", "a.yaml", "b.yaml"], ["--debug", "validate", "a"],
                 ["doctor", "job.yaml"], ["validate", "-x"], []):
        assert quick.command(argv) is None, argv


def test_control_characters_in_a_value_are_escaped_in_errors(monkeypatch, capsys, tmp_path):
    """A NUL, an escape sequence or a bidi override in a path or a key is shown as its escape,
    never written raw to the terminal (issue 22, smaller findings)."""
    code, _, err = run_cli(monkeypatch, capsys, "validate", str(tmp_path / "x\x01y\x1b[31m\u202e.yaml"))
    assert code == 2
    assert "x\\x01y\\x1b[31m\\u202e.yaml: does not exist" in err
    (tmp_path / "base.yaml").write_text("name: b\nbackend: local\n")
    sweep = tmp_path / "s.yaml"
    sweep.write_text('sweep: s\nbase: base.yaml\ngrid:\n  "training.\\0steps": [1]\n')
    code, _, err = run_cli(monkeypatch, capsys, "sweep", "plan", str(sweep))
    assert code == 2 and "training.\\x00steps" in err
    assert not any(ord(c) < 32 and c not in "\n\t" for c in err), repr(err)
