"""Issue 32, what is shown is true and fits: the in-request failover `sweep plan` shows, and job
names and overrides that break at separators at 80 columns, never mid-word."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_harness import run_cli

from orchestrator import names, spec
from orchestrator import sweep as sweeps

ROOT = Path(__file__).resolve().parents[1]
SEPARATORS = "-._=,/ "


def column_cells(table: str, column: int) -> list[list[str]]:
    """The fragments of one column of a `sweep plan` / `sweep status` table, per row."""
    rows: list[list[str]] = []
    for line in table.splitlines():
        parts = [p.strip() for p in line.split("│")]
        if len(parts) <= column or set(line) <= set("─┼ "):
            continue
        if parts[0] and parts[0] != "#":
            rows.append([])
        if rows and parts[column]:
            rows[-1].append(parts[column])
    return rows


def test_sweep_plan_shows_the_failover_a_request_sends(orch_home, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "plan", str(ROOT / "configs" / "sweep-instances.yaml"))
    assert code == 0, err
    planned = sweeps.plan(spec.load_sweep(ROOT / "configs" / "sweep-instances.yaml"))
    big = [t for t in planned.trials if t.trial.spec.instance.type == "ml.trn1.32xlarge"]
    assert big and all(t.preferences == ("ml.trn1.32xlarge", "ml.trn1n.32xlarge") for t in big)
    for t in big:
        sent = [p["InstanceType"] for p in t.prepared.request["ResourceConfig"]["InstancePreferences"]]
        assert sent == list(t.preferences) and t.failover == ("ml.trn1n.32xlarge",)
        row = next(line for line in out.splitlines() if t.job_name in line)
        assert "ml.trn1n.32xlarge (in the request)" in row


def test_sweep_plan_at_80_columns_breaks_names_at_separators(orch_home, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "plan", str(ROOT / "configs" / "sweep-instances.yaml"))
    assert code == 0, err
    assert max(len(line.rstrip()) for line in out.splitlines() if "│" in line) <= 80
    planned = sweeps.plan(spec.load_sweep(ROOT / "configs" / "sweep-instances.yaml"))
    cells = column_cells(out, 1)
    assert ["".join(c) for c in cells] == [t.job_name for t in planned.trials]
    for fragments in cells:
        assert all(f[-1] in SEPARATORS for f in fragments[:-1]), fragments  # never cut mid-word
    from orchestrator.cli.sweep import overrides_text

    for fragments, t in zip(column_cells(out, 2), planned.trials, strict=True):
        lines = overrides_text(t.trial.overrides).splitlines()  # one override a line, each broken at separators
        assert "".join(fragments) == "".join(lines)
        joined = ""
        for f in fragments:
            joined += f
            assert joined in "".join(lines) and (f[-1] in SEPARATORS or any(
                "".join(lines).startswith(joined) and joined.endswith(line) for line in lines)), fragments


@pytest.mark.parametrize("text, width, lines", [
    ("instances-95e94bc6-t9a7f7a3e", 12, ["instances-", "95e94bc6-", "t9a7f7a3e"]),
    ("training.batch_size=16", 12, ["training.", "batch_size=", "16"]),
    ("a" * 20 + "-b", 9, ["a" * 9, "a" * 9, "aa-b"]),
    ("short", 40, ["short"]),
])
def test_shown_lines_breaks_after_separators_and_cuts_nothing(text, width, lines):
    assert names.shown_lines(text, width).split("\n") == lines


def test_the_nightly_figures_in_the_config_and_usage_are_what_schedule_plan_prints(orch_home, monkeypatch, capsys):
    import re

    code, out, err = run_cli(monkeypatch, capsys, "schedule", "plan", str(ROOT / "configs" / "sweep-nightly.yaml"))
    assert code == 0, err
    first, worst = re.search(r"first jobs (\d+\.\d\d) USD", out).group(1), re.search(
        r"at most (\d+\.\d\d) USD a run", out).group(1)
    config = (ROOT / "configs" / "sweep-nightly.yaml").read_text()
    assert f"bound {first} USD" in config and f"worst case ({worst} USD)" in config
    usage = (ROOT / "docs" / "USAGE.md").read_text()
    assert f"its {first} USD of\nfirst jobs ({worst} USD" in usage


def test_sweep_status_of_a_sweep_this_machine_never_ran_says_where_to_look(orch_home, monkeypatch, capsys):
    # Issue 32: the hint was "start it with `sweep run`", which submits a cloud run's paid jobs again.
    nightly = ROOT / "configs" / "sweep-nightly.yaml"
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "status", str(nightly))
    assert code == 2, (out, err)
    hint = err.split("hint: ", 1)[1]
    assert hint.startswith("this machine's ledger has no run of it. If it ran elsewhere")
    assert f"results --sweep nightly --spec {nightly.parent / 'vit-trn1-2xlarge.yaml'}" in hint
    assert hint.index("results --sweep") < hint.index("Only if it never ran: `python -m orchestrator sweep run")


def test_make_demo_table_shows_compile_seconds_and_cache_hits_as_the_docs_say(orch_home, monkeypatch, capsys):
    import shlex

    from test_results import results_doc, write_local

    makefile = (ROOT / "Makefile").read_text()
    demo = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    command = next(line for line in demo.splitlines() if "orchestrator results" in line)
    args = shlex.split(command.split("-m orchestrator ", 1)[1])
    write_local(orch_home, "local-smoke-1", results_doc("local-smoke-1", backend="local", sps=40.0))
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("job"))
    assert "compile s" in header and "cache hit" in header
    usage = (ROOT / "docs" / "USAGE.md").read_text()
    assert "compile_s,cache_hit_ratio" in usage and "the default table has neither" in usage


# --- results and sweep status at 80 columns (issue 32, finding 16) ------------------------------


def _boundary_words(cells: list[str]) -> set[str]:
    """Every run of whole pieces of `cells` (between separators, a space splitting them too):
    what a table that never cuts a word may show as one whitespace-delimited token."""
    import re

    words: set[str] = set()
    for text in cells:
        for line in text.split("\n"):
            cuts = sorted({0, len(line), *(m.end() for m in re.finditer(r"[-._=,/ ]+", line))})
            for i, start in enumerate(cuts):
                for end in cuts[i + 1:]:
                    words.update(line[start:end].split())
    return words


def _sweep_rows():
    """Results rows as a realistic sweep gives them: configs/sweep-instances.yaml's trials (job
    names, overrides as varied values), a failover retry among them, and a local row."""
    from orchestrator import results as res

    planned = sweeps.plan(spec.load_sweep(ROOT / "configs" / "sweep-instances.yaml"))
    rows = []
    for i, t in enumerate(planned.trials):
        big = t.trial.spec.instance.type == "ml.trn1.32xlarge"
        rows.append(res.Row(
            job=t.job_name + ("-r1" if big else ""), status="completed" if i % 2 else "failed", backend="sagemaker",
            sweep=planned.sweep_id, instance="ml.trn1n.32xlarge" if big else t.trial.spec.instance.type, count=1,
            failover_from="ml.trn1.32xlarge" if big else None, samples_per_s=812.5 + i, price_per_hour=1.34,
            price_source="test prices", samples_per_dollar=2_182_835.0 + i, final_loss=2.3456 + i,
            varied=dict(t.trial.overrides)))
    rows.append(res.Row(job="local-smoke-1", status="completed", backend="local", sweep=None, instance="local CPU",
                        samples_per_s=40.0, final_loss=2.5, varied={}))
    return planned, rows


@pytest.mark.parametrize("by_sweep", [True, False])
def test_results_at_80_columns_breaks_names_and_values_only_at_separators(orch_home, monkeypatch, capsys, by_sweep):
    # Issue 32: `results --sweep` folded job names and overrides mid-word at 80 columns.
    from orchestrator import results as res
    from orchestrator.results import render

    planned, rows = _sweep_rows()
    monkeypatch.setattr(res, "collect", lambda where, sweep=None, **_: res.Collection(
        where, [r for r in rows if sweep is None or r.sweep == sweep]))
    monkeypatch.setattr(res, "has_results", lambda uri: True)
    monkeypatch.setenv("COLUMNS", "80")
    args = ["--sweep", planned.sweep_id] if by_sweep else []
    code, out, err = run_cli(monkeypatch, capsys, "results", *args)
    assert code == 0, err
    shown_rows = [r for r in rows if not by_sweep or r.sweep == planned.sweep_id]
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    rule = next(i for i, line in enumerate(lines) if set(line) == {"─"})
    body = []
    for line in lines[rule + 1:]:
        if line.startswith(("varied:", "price:", "MFU peak:", "~ estimated")):
            break
        body.append(line)
    # Every token shown is whole pieces of a cell: no word (a job name's part, an instance type,
    # "completed", a number) is cut.
    columns = res.select_columns(shown_rows)
    allowed = _boundary_words([render.cell(r, c) for r in shown_rows for c in columns])
    assert {t for line in body for t in line.split()} <= allowed, out
    # The job column (the first) read down gives each job name, broken only after a separator.
    fragments = [line.split()[0] for line in body if line and not line[0].isspace()]
    names_seen, current = [], ""
    for fragment in fragments:
        current += fragment
        if current in {r.job for r in shown_rows}:
            names_seen.append(current)
            current = ""
        else:
            assert fragment[-1] in SEPARATORS, (fragment, out)
    assert names_seen == [r.job for r in shown_rows] and current == "", out  # the default sort keeps the order


@pytest.mark.parametrize("config", ["sweep-inf2-vs-trn1.yaml", "sweep-instances.yaml"])
def test_sweep_status_at_80_columns_breaks_names_and_overrides_only_at_separators(orch_home, monkeypatch, capsys,
                                                                                    config):
    from orchestrator.cli.sweep import overrides_text
    from orchestrator.ledger import Ledger

    planned = sweeps.plan(spec.load_sweep(ROOT / "configs" / config))
    sweeps.save(planned, Ledger())
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "status", planned.sweep_id, "--no-refresh")
    assert code == 0, err
    table = [line for line in out.splitlines() if "│" in line or set(line) <= set("─┼")]
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80, out
    header = [p.strip() for p in table[0].split("│")]
    job, overrides = header.index("job"), header.index("overrides")
    cells = column_cells("\n".join(table[1:]), job)
    assert ["".join(c) for c in cells] == [t.job_name for t in planned.trials], out
    for fragments in cells:
        assert all(f[-1] in SEPARATORS for f in fragments[:-1]), fragments  # never cut mid-word
    for fragments, t in zip(column_cells("\n".join(table[1:]), overrides), planned.trials, strict=True):
        words = _boundary_words([overrides_text(t.trial.overrides)])
        assert all(f in words or set(f.split()) <= words for f in fragments), (fragments, out)
    every = _boundary_words([str(c) for t in planned.trials for c in (
        t.trial.trial_id, t.trial.spec.instance.type, t.trial.spec.backend, "planned", t.job_name, 0, t.trial.index)])
    for line in table[2:]:  # the other columns' cells: whole words too
        for i, part in enumerate(line.split("│")):
            if i not in (job, overrides) and part.strip():
                assert set(part.split()) <= every, (part, out)


def test_fitted_widths_give_each_column_its_longest_word_then_the_job_then_the_rest():
    job = ("job", ["instances-95e94bc6-t9a7f7a3e", "instances-95e94bc6-t0f7e786b-r1"], False)
    lr = ("lr", ["0.0003", "0.001"], False)
    loss = ("final loss", ["2.346"], True)
    # Too narrow for every column's least: the least (nothing cut; rich then folds).
    assert names.fitted_widths([job, lr, loss], 10, first=("job",)) == [10, 4, 5]
    # Short values whole ("0.0003", not "0." over "0003") before the job name grows.
    assert names.fitted_widths([job, lr, loss], 21, first=("job",)) == [10, 6, 5]
    # The job name up to whole; what its lines broken at separators leave unused goes on, so
    # the header "final loss" is whole here: "instances-95e94bc6-" is 19 wide, not 24.
    assert names.fitted_widths([job, lr, loss], 35, first=("job",)) == [19, 6, 10]
    # Room for everything: each column its whole length.
    assert names.fitted_widths([job, lr, loss], 60, first=("job",)) == [31, 6, 10]
