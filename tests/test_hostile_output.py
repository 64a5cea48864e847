"""Issue 32, output that cannot destroy or attack: output files never written through a link nor
over an existing file without --force (one rule for --plot, --html, --output and infra outputs
--write), CSV cells no spreadsheet runs, and no value from a results.json acting on the terminal."""

from __future__ import annotations

import csv
import io

import pytest
from cli_harness import run_cli
from test_results import prices, results_doc, write_local  # noqa: F401  (prices is a fixture)

from orchestrator import infra, paths
from orchestrator.errors import InputError, visible

ATTACK = "\x1b]0;PWNED\x07\x1b[2J"


@pytest.fixture
def one_result(prices):  # noqa: F811
    write_local(prices, "c-1", results_doc("c-1", backend="local", sps=40.0))
    return prices


@pytest.mark.parametrize("option", ["--html", "--plot", "--output"])
def test_an_output_is_never_written_through_a_link(one_result, tmp_path, monkeypatch, capsys, option):
    target = tmp_path / "precious.txt"
    target.write_text("mine")
    link = tmp_path / "out.file"
    link.symlink_to(target)
    for extra in ([], ["--force"]):
        code, out, err = run_cli(monkeypatch, capsys, "results", option, str(link), *extra)
        assert code == 2 and out == "", err
        assert f"error: {option} {link}: is a symbolic link (to {target}); output is never written through" in err
        assert target.read_text() == "mine" and link.is_symlink()


@pytest.mark.parametrize("option", ["--html", "--plot", "--output"])
def test_an_existing_file_is_replaced_only_with_force(one_result, tmp_path, monkeypatch, capsys, option):
    existing = tmp_path / "notes.txt"
    existing.write_text("my notes")
    code, out, err = run_cli(monkeypatch, capsys, "results", option, str(existing))
    assert code == 2 and out == ""
    assert f"error: {option} {existing}: exists; it was left as it is" in err
    assert "pass --force to replace this one" in err
    assert existing.read_text() == "my notes"
    code, _, err = run_cli(monkeypatch, capsys, "results", option, str(existing), "--force")
    assert code == 0, err
    assert existing.read_bytes() != b"my notes"


def test_format_to_a_file_writes_what_stdout_would_show(one_result, tmp_path, monkeypatch, capsys):
    code, shown, _ = run_cli(monkeypatch, capsys, "results", "--format", "csv")
    assert code == 0
    target = tmp_path / "r.csv"
    code, out, err = run_cli(monkeypatch, capsys, "results", "--format", "csv", "--output", str(target))
    assert code == 0 and out == "" and f"wrote {target}" in err
    assert target.read_text() == shown


def test_infra_outputs_write_shares_the_rule(tmp_path):
    target = tmp_path / "elsewhere.yaml"
    target.write_text("role_arn: x\n")
    link = tmp_path / "infra.yaml"
    link.symlink_to(target)
    for force in (False, True):
        with pytest.raises(InputError, match="is a symbolic link"):
            infra.check_outputs_target(link, force)
    # A file an earlier --write made is ours to refresh; anything else needs --force.
    infra.check_outputs_target(target)
    notes = tmp_path / "notes.yaml"
    notes.write_text("mine: 1\n")
    with pytest.raises(InputError, match="exists and is not an infra outputs file .*; it was left as it is"):
        infra.check_outputs_target(notes)
    infra.check_outputs_target(notes, force=True)


def test_a_link_planted_after_the_check_is_replaced_not_followed(tmp_path):
    target = tmp_path / "victim"
    target.write_text("mine")
    path = tmp_path / "out.png"
    paths.check_output_file(path, "--plot")
    path.symlink_to(target)  # a race: planted between the check and the write
    paths.write_output_file(path, b"png")
    assert target.read_text() == "mine" and not path.is_symlink() and path.read_bytes() == b"png"


@pytest.mark.parametrize("payload", ["=HYPERLINK(\"http://x\",\"y\")", "@SUM(1+1)", "+cmd|' /C calc'!A0",
                                     "-2+3", "\tx", "\rx"])
def test_csv_cells_never_run_as_formulas(prices, monkeypatch, capsys, payload):  # noqa: F811
    doc = results_doc("c-1", backend="local", sps=40.0, status="failed")
    doc["failure_reason"] = payload
    doc["instance"]["type"] = payload
    write_local(prices, "c-1", doc)
    code, out, err = run_cli(monkeypatch, capsys, "results", "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    cells = [value for row in rows for value in row.values()] + list(rows[0])
    assert "'" + payload.replace("\r", "\\r") in cells or "'" + payload in cells
    # OWASP's list: no cell begins with = + - @ tab or CR, whatever its column.
    assert not [c for c in cells if c and c[0] in "=+-@\t\r"], cells


def test_csv_keeps_numbers_numbers(prices, monkeypatch, capsys):  # noqa: F811
    write_local(prices, "c-1", results_doc("c-1", backend="local", sps=40.0))
    code, out, _ = run_cli(monkeypatch, capsys, "results", "--format", "csv")
    row = next(csv.DictReader(io.StringIO(out)))
    assert row["samples_per_s"] == "40.0" and row["job"] == "c-1"


def test_results_values_never_act_on_the_terminal(prices, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setenv("COLUMNS", "80")
    job = "c-1"
    doc = results_doc(job, backend="local", sps=40.0, status="failed")
    doc["failure_reason"] = f"boom {ATTACK}"
    doc["instance"]["type"] = f"ml.x{ATTACK}"
    write_local(prices, job, doc)
    for fmt in ("table", "csv"):
        code, out, err = run_cli(monkeypatch, capsys, "results", "--format", fmt)
        assert "\x1b" not in out and "\x07" not in out and "\x1b" not in err, (fmt, out)
        assert "\\x1b" in out or "\\x1b" in err


def test_visible_is_the_one_escaping_of_err_and_out():
    from orchestrator.cli import output

    assert output.visible is visible
    assert visible(ATTACK) == "\\x1b]0;PWNED\\x07\\x1b[2J"


def test_every_printed_line_is_escaped(monkeypatch, capsys):
    from orchestrator.cli.output import out, plain

    out(f"job {ATTACK}")
    assert capsys.readouterr().out == "job \\x1b]0;PWNED\\x07\\x1b[2J\n"
    assert str(plain(ATTACK)) == visible(ATTACK)

