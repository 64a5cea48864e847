"""The README's and docs/USAGE.md's examples do what they say they do (so they cannot rot)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from orchestrator import spec
from orchestrator import sweep as sweeps

ROOT = Path(__file__).resolve().parents[1]


def docs_text() -> str:
    """The README and the reference it sends readers on to."""
    return (ROOT / "README.md").read_text() + "\n" + (ROOT / "docs" / "USAGE.md").read_text()


def code_blocks(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", text, re.S)


def test_the_readme_sweep_example_plans_within_its_budgets(orch_home, tmp_path):
    readme = docs_text()
    example = next(block for block in code_blocks(readme) if block.startswith("sweep: instances\n"))
    base = re.search(r"^base: (\S+)", example, re.M).group(1)
    shutil.copy(ROOT / "configs" / base, tmp_path / base)
    (tmp_path / "sweep.yaml").write_text(example)
    plan = sweeps.plan(spec.load_sweep(tmp_path / "sweep.yaml"))
    # 2 instance types x 2 batch sizes x 1 run length, crossed with 8 random learning rates.
    assert len(plan.trials) == 32
    assert {t.trial.spec.instance.type for t in plan.trials} == {"ml.trn1.2xlarge", "ml.trn1.32xlarge"}
    assert all(t.trial.spec.max_run_minutes == 60 for t in plan.trials)
    assert sum(t.usd_max for t in plan.trials) <= plan.sweep.budget.max_total_cost_usd
    sweeps.check_budget(plan)


def test_every_orchestrator_command_in_the_readme_exists():
    from typer.main import get_command

    from orchestrator import cli

    root = get_command(cli.app)
    readme = docs_text()
    checked = []
    for block in code_blocks(readme):
        for line in block.splitlines():
            match = re.match(r"\s*python -m orchestrator (\S+)(?: ([a-z|]+))?", line)
            if not match:
                continue
            # "status|logs|stop" and "ls|show|prune" list alternatives: each must exist.
            for name in match.group(1).split("|"):
                assert name in root.commands, line
                command = root.commands[name]
                if hasattr(command, "commands"):
                    assert match.group(2), f"{line}: group {name} needs a subcommand"
                    for sub in match.group(2).split("|"):
                        assert sub in command.commands, line
                checked.append(name)
    assert len(set(checked)) >= 12


def test_every_json_line_in_the_benchmark_figures_parses():
    # docs/BENCHMARKS.md quotes the benchmarks' JSON output; a line broken by an edit is no
    # longer a figure anyone can check.
    text = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", text, re.S)
    lines = [line for block in blocks for line in block.splitlines() if line.strip()]
    assert len(lines) >= 10
    for line in lines:
        json.loads(line)


def test_the_readme_comparison_sweep_is_the_config():
    import yaml

    readme = docs_text()
    example = next(block for block in code_blocks(readme) if block.startswith("sweep: inf2-vs-trn1\n"))
    config = yaml.safe_load((ROOT / "configs" / "sweep-inf2-vs-trn1.yaml").read_text())
    shown = yaml.safe_load(example)
    assert shown == {key: config[key] for key in shown}


def test_the_readme_opens_with_what_a_newcomer_needs():
    """Issue 22, must-hold 9: what it is, the two commands, the first real submit and where to
    read on, in about two screens; every command the README shows is run by a test."""
    readme = (ROOT / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= 100
    first_screen = "\n".join(lines[:24])
    assert "make demo" in first_screen and "make test" in first_screen and "Trainium" in first_screen
    assert "## Setting up AWS (infra/)" in readme and "submit configs/my-first-job.yaml" in readme
    assert "docs/USAGE.md" in readme.split("## Read on", 1)[1]
    for doc in re.findall(r"\]\(([^)]+)\)", readme):
        assert (ROOT / doc).is_file(), doc
    # The commands it shows: the make targets (CI's .ci/run runs `make test`) and the set-up
    # block, which tests/test_infra.py runs as written against moto; nothing else.
    from test_infra import readme_setup_block

    setup = readme_setup_block()
    shown = [line.strip() for block in code_blocks(readme) for line in block.splitlines()
             if line.strip().startswith(("python -m orchestrator", "make "))]
    for line in shown:
        assert line.startswith(("make demo", "make test", "make venv")) or line in setup, line
