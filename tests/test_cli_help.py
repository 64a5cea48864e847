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
    for path, _ in commands():
        result = CliRunner().invoke(cli.app, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, path
        assert "<bool>" not in result.output, path
    shown = CliRunner().invoke(cli.app, ["submit", "--help"], terminal_width=200).output
    assert "--interval" in shown and "<float range>" in shown
