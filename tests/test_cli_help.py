"""The CLI's help text: docstrings reflowed so `--help` wraps to the terminal, not the source."""

from __future__ import annotations

import typer.main
from typer.testing import CliRunner

from orchestrator import cli


def test_reflowed_joins_wrapped_lines_and_keeps_paragraphs_and_list_items():
    doc = """Title line.

        A paragraph wrapped at the
        source's width.

        - one item that
          wraps
        - another
        1. numbered
        """
    assert cli.reflowed(doc) == ("Title line.\n\nA paragraph wrapped at the source's width.\n\n"
                                 "- one item that wraps\n- another\n1. numbered")


def commands():
    def walk(group, path):
        for name, command in getattr(group, "commands", {}).items():
            yield path + [name], command
            yield from walk(command, path + [name])
    return list(walk(typer.main.get_command(cli.app), []))


def test_every_command_has_reflowed_help():
    found = commands()
    assert len(found) > 25
    for path, command in found:
        assert command.help, path
        assert cli.reflowed(command.help) == command.help, path


def test_help_wraps_to_the_terminal_width():
    # "submit"'s docstring breaks after "the spec's hash and"; at 80 columns the text flows on.
    result = CliRunner().invoke(cli.app, ["submit", "--help"], terminal_width=80)
    assert result.exit_code == 0
    assert "spec's hash and the ledger" in " ".join(result.output.split())
    assert not any(line.rstrip().endswith("spec's hash and") for line in result.output.splitlines())



def test_plain_flags_show_no_value_type_and_options_with_a_value_keep_theirs():
    """`--wait  <bool>` read as if --wait took a value (issue 22, smaller findings)."""
    for path in [[], *(path for path, _ in commands())]:
        result = CliRunner().invoke(cli.app, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, path
        assert "<bool>" not in result.output, path
    shown = CliRunner().invoke(cli.app, ["submit", "--help"], terminal_width=200).output
    assert "--interval" in shown and "<float range>" in shown


def test_the_root_table_lists_each_command_by_the_first_paragraph_of_its_own_help():
    """`--help` lists COMMANDS' lines without loading a command: each must be what the loaded
    command would show there (the first paragraph of its help; not hidden, deprecated or in
    another panel), so the listing reads the same either way."""
    from orchestrator.cli import root

    assert len(root.COMMANDS) == len(set(root.COMMANDS)) > 15
    for name, entry in root.COMMANDS.items():
        command = root._load(name)
        assert command.help.split("\n\n")[0] == entry.help, name
        assert not command.short_help and not command.hidden and not command.deprecated, name
        assert not getattr(command, "rich_help_panel", None), name  # a placeholder of None is false


def test_the_root_help_and_a_mistyped_command_load_no_command_module(tmp_path):
    """The root's help (and a typo's "did you mean") come from the table alone."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from job_waits import patience

    root = Path(__file__).resolve().parents[1]
    script = (
        "import json, sys\n"
        "from orchestrator import cli\n"
        "sys.argv = ['orchestrator', *sys.argv[1:]]\n"
        "try:\n    cli.main()\nexcept SystemExit as exc:\n    code = exc.code or 0\n"
        "print(json.dumps({'code': code, 'modules': sorted(m for m in sys.modules if m.startswith('orchestrator.cli.'))}),"
        " file=sys.stderr)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(root), ORCHESTRATOR_HOME=str(tmp_path), COLUMNS="80")
    for argv, code, said in ((["--help"], 0, "tensorboard"), (["statsu"], 2, "Did you mean 'status'")):
        done = subprocess.run([sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True,
                              timeout=patience(120))
        report = json.loads(done.stderr.strip().splitlines()[-1])
        assert report["code"] == code and said in done.stdout + done.stderr, done.stderr
        assert report["modules"] == ["orchestrator.cli.exits", "orchestrator.cli.output", "orchestrator.cli.quick",
                                     "orchestrator.cli.root"], argv
