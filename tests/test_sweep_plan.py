"""Sweeps: the doctor gate, the budget and `sweep plan` (`sweep.plan`)."""

from __future__ import annotations

import json
import re

import pytest
from sweep_fakes import (
    ROOT,
    SWEEP,
    cli_run,
    line_of,
    load,
    problems_of,
    write,
)

from orchestrator import spec
from orchestrator import sweep as sweeps
from orchestrator.errors import SpecError

# --- plan: the doctor gate and the budget ------------------------------------------------------


def test_plan_prepares_each_trial_with_sweep_tags(tmp_path, orch_home):
    planned = sweeps.plan(load(tmp_path, SWEEP))
    assert len(planned.trials) == 4
    for t in planned.trials:
        tags = {tag["Key"]: tag["Value"] for tag in t.prepared.request["Tags"]}
        assert tags["orchestrator:sweep"] == planned.sweep_id
        assert tags["orchestrator:trial"] == t.trial.trial_id == "t" + t.trial.spec_hash[:8]
        assert tags["orchestrator:spec-hash"] == t.trial.spec_hash
        assert t.prepared.request["TrainingJobName"] == t.job_name == f"{planned.sweep_id}-{t.trial.trial_id}"
        assert t.prepared.request["ResourceConfig"]["InstanceType"] == t.trial.overrides["instance.type"]
    costs = [t.usd_max for t in planned.trials]
    assert costs[0] == costs[1] < costs[2] == costs[3]
    assert planned.total_usd == pytest.approx(sum(costs))


def test_one_trial_failing_the_doctor_refuses_the_sweep(tmp_path):
    text = SWEEP.replace("ml.trn1.32xlarge]", "ml.inf2.xlarge]")
    found = problems_of(tmp_path, text)
    assert {re.match(r"trial (\d+)", p.message).group(1) for p in found} == {"2", "3"}
    assert all("N001" in p.message and p.line == line_of(text, "instance.type") for p in found)


def test_a_failover_type_failing_the_doctor_refuses_the_sweep(tmp_path):
    text = SWEEP + "failover: {instance.type: [ml.trn1n.32xlarge, ml.inf2.xlarge]}\n"
    found = problems_of(tmp_path, text)
    assert len(found) == 4 and all("failing over to ml.inf2.xlarge" in p.message for p in found)
    assert all(p.line == line_of(text, "failover") for p in found)


def test_the_plan_shows_the_worst_case_with_failover_and_retries(tmp_path, orch_home):
    """A trial failing over from trn1.2xlarge to trn1n.32xlarge costs 18x the hour: the plan's
    worst case counts the whole failover chain plus every retry on its dearest type."""
    from orchestrator import cost

    text = ("sweep: demo\nbase: base.yaml\nfailover: {instance.type: [ml.trn1n.32xlarge]}\nmax_retries: 2\n"
            "budget: {max_total_cost_usd: 50}\n")
    planned = sweeps.plan(load(tmp_path, text))
    [trial] = planned.trials
    own = cost.estimate(trial.trial.spec).usd_max
    failover = cost.estimate(spec.with_overrides(trial.trial.spec, {"instance.type": "ml.trn1n.32xlarge"})).usd_max
    assert trial.usd_max == pytest.approx(own)
    assert trial.worst_usd == pytest.approx(own + failover + 2 * failover)
    assert planned.worst_usd == pytest.approx(trial.worst_usd)
    assert planned.to_json()["worst_usd_max"] == pytest.approx(trial.worst_usd, abs=1e-3)
    sweeps.check_budget(planned)  # the budget bounds what is submitted, not the worst case

    from orchestrator.cli import sweep as cli

    lines = cli.plan_summary(planned)
    assert lines[0].startswith(f"total: at most {own:.2f} USD (budget 50 USD)")
    assert (f"worst case: {trial.worst_usd:.2f} USD if trials fail over (ml.trn1n.32xlarge) and use their 2 retries"
            in lines[1])
    assert "past 50 USD is not submitted" in lines[1]
    assert "bound/worst USD" in cli.plan_table(planned)
    assert f"{own:.2f}/{trial.worst_usd:.2f}" in cli.plan_table(planned)
    # Without failover or retries the worst case is the total, and the plan says nothing more.
    plain = sweeps.plan(load(tmp_path, "sweep: demo\nbase: base.yaml\nmax_retries: 0\n"))
    assert plain.worst_usd == pytest.approx(plain.total_usd)
    assert not any(line.startswith("worst case") for line in cli.plan_summary(plain))


def test_budget_refuses_with_the_location(tmp_path):
    text = SWEEP + "budget:\n  max_total_cost_usd: 10\n"
    planned = sweeps.plan(load(tmp_path, text))
    with pytest.raises(SpecError) as info:
        sweeps.check_budget(planned)
    [problem] = info.value.problems
    assert problem.line == line_of(text, "max_total_cost_usd") and "above the budget of 10 USD" in problem.message
    sweeps.check_budget(sweeps.plan(load(tmp_path, text.replace(": 10", ": 100"))))


def test_cli_sweep_plan_prints_trials_and_refuses_above_budget(tmp_path, orch_home):
    import os

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ok = cli_run("sweep", "plan", str(write(tmp_path, SWEEP)), env=env)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("demo-") >= 4 and "total: at most" in ok.stdout
    over = cli_run("sweep", "plan", str(write(tmp_path, SWEEP + "budget: {max_total_cost_usd: 1}\n")), env=env)
    assert over.returncode == 2 and "sweep.yaml:7:" in over.stderr and "above the budget" in over.stderr
    assert "demo-" in over.stdout  # the table is shown before the refusal
    bad = cli_run("sweep", "plan", str(write(tmp_path, SWEEP.replace("batch_size", "bach_size"))), env=env)
    assert bad.returncode == 2 and "sweep.yaml:5:3" in bad.stderr
    as_json = json.loads(cli_run("sweep", "plan", "--json", str(write(tmp_path, SWEEP)), env=env).stdout)
    assert len(as_json["trials"]) == 4 and as_json["total_usd_max"] > 0


def test_shipped_sweep_configs_plan_within_budget(orch_home):
    for name in ("sweep-instances", "sweep-nightly", "sweep-local"):
        planned = sweeps.plan(spec.load_sweep(ROOT / "configs" / f"{name}.yaml"))
        sweeps.check_budget(planned)
        assert planned.trials
    nightly = spec.load_sweep(ROOT / "configs" / "sweep-nightly.yaml")
    assert nightly.schedule is not None and nightly.schedule.cron == "0 3 * * *"
    instances = sweeps.plan(spec.load_sweep(ROOT / "configs" / "sweep-instances.yaml"))
    assert {t.trial.spec.instance.type for t in instances.trials} == {"ml.trn1.2xlarge", "ml.trn1.32xlarge"}
    for t in instances.trials:
        resources = t.prepared.request["ResourceConfig"]
        if t.trial.spec.instance.type == "ml.trn1.32xlarge":
            # On-demand, and trn1n.32xlarge runs the same 32 workers: one preference list, which
            # SageMaker fails over along itself (issue 26).
            assert t.chain == ("ml.trn1.32xlarge",)
            assert [p["InstanceType"] for p in resources["InstancePreferences"]] == [
                "ml.trn1.32xlarge", "ml.trn1n.32xlarge"]
        else:
            # 2 workers on trn1.2xlarge: no trn1n.32xlarge count keeps the global batch, so the
            # failover stays the runner's (a new job on the next type).
            assert t.chain[1:] == ("ml.trn1n.32xlarge",) and "InstancePreferences" not in resources


def test_the_plan_derives_each_trial_and_each_failover_variant_once(tmp_path, orch_home, monkeypatch):
    """One way, once (issue 11): a trial's target and cost are derived by its prepare, each
    failover variant's by one diagnosis; nothing is derived twice."""
    from orchestrator import catalog, cost

    counted = {"resolve": 0, "estimate": 0}
    for module, name in ((catalog, "resolve"), (cost, "estimate")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k: (
            counted.__setitem__(_name, counted[_name] + 1), _real(*a, **k))[1])
    text = "sweep: demo\nbase: base.yaml\nfailover: {instance.type: [ml.trn1n.32xlarge]}\n"
    planned = sweeps.plan(load(tmp_path, text))
    assert len(planned.trials) == 1
    assert counted == {"resolve": 2, "estimate": 2}  # the trial's own type, then its one failover type


@pytest.mark.parametrize("width", ["80", "100"])
def test_the_plan_table_fits_the_screen_and_reads_unset_fields(orch_home, monkeypatch, width):
    """Issue 22, item 8: `sweep plan` fits the screen, overrides one per line, a field a
    variant unsets shown as `unset` (not `role_arn=None` folded over five lines)."""
    from orchestrator.cli import sweep as cli

    monkeypatch.setenv("COLUMNS", width)
    planned = sweeps.plan(spec.load_sweep(ROOT / "configs" / "sweep-inf2-vs-trn1.yaml"))
    table = cli.plan_table(planned)
    assert max(len(line) for line in table.splitlines()) <= int(width)
    assert "None" not in table
    if width == "100":
        assert table.count("role_arn unset") == 2
    assert cli.overrides_text({"backend": "batch", "role_arn": None}) == "backend=batch\nrole_arn unset"
    assert cli.overrides_text({}) == "(base)"
    if width == "100":
        # Job names and override lines are served first, so at 100 columns each shows whole.
        lines = table.splitlines()
        for trial in planned.trials:
            assert any(trial.job_name in line for line in lines)
            for line in cli.overrides_text(trial.trial.overrides).splitlines():
                assert any(line in row for row in lines), line


def test_a_local_sweep_plan_leaves_out_the_columns_that_say_nothing(orch_home, monkeypatch):
    """No failover, no worst case above the bound, no cloud cost: those columns would repeat
    `-` and `0.00 USD` on every row; the title says there is no cloud cost instead."""
    from orchestrator.cli import sweep as cli

    monkeypatch.setenv("COLUMNS", "80")
    table = cli.plan_table(sweeps.plan(spec.load_sweep(ROOT / "configs" / "sweep-local.yaml")))
    header = next(line for line in table.splitlines() if line.startswith("#"))
    assert [c.strip() for c in header.split("│")] == ["#", "job name", "overrides", "instance"]
    assert "no cloud cost" in table.splitlines()[0]


def test_shared_widths_serve_the_first_columns_then_share_what_is_left():
    from orchestrator.cli.output import shared_widths

    wants = {"job name": 31, "overrides": 29, "instance": 22}
    assert shared_widths(wants, 100, first=("job name", "overrides")) == wants  # room for all
    assert shared_widths(wants, 72, first=("job name", "overrides")) == {"job name": 31, "overrides": 29,
                                                                          "instance": 12}
    assert shared_widths(wants, 50, first=("job name", "overrides")) == {"job name": 19, "overrides": 19,
                                                                          "instance": 12}
    assert shared_widths({"a": 3, "b": 40}, 30) == {"a": 3, "b": 27}  # the small one gets what it wants


def test_plan_reports_progress_trial_by_trial(tmp_path, orch_home):
    """Issue 22, item 9: `sweep plan` draws a progress bar from these calls on a terminal."""
    calls: list[tuple[int, int]] = []
    planned = sweeps.plan(load(tmp_path, SWEEP), progress=lambda done, total: calls.append((done, total)))
    n = len(planned.trials)
    assert n == 4 and calls == [(i, n) for i in range(n)] + [(n, n)]


def test_cli_plan_draws_no_progress_bar_off_a_terminal(tmp_path, orch_home):
    import os

    result = cli_run("sweep", "plan", str(write(tmp_path, SWEEP)), env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr
    assert "planning trials" not in result.stderr and "planning trials" not in result.stdout


def test_plan_price_lines_say_which_types_each_prices(orch_home):
    """Issue 22, smaller findings: two bare price lines, '(not checked)' and '(checked)',
    unexplained: each now names the instance types (and backend) it prices."""
    from orchestrator.cli import sweep as cli

    planned = sweeps.plan(spec.load_sweep(ROOT / "configs" / "sweep-instances.yaml"))
    lines = [line for line in cli.plan_summary(planned) if line.startswith("prices")]
    # The trn1.32xlarge trials send [trn1.32xlarge, trn1n.32xlarge] as one preference list
    # (issue 26), bounded by the dearest, trn1n's price: one source "(not checked)" with
    # trn1.2xlarge's, so one line. Without the failover, trn1.32xlarge's own "(checked)" price
    # makes two, each naming its types.
    assert len(lines) == 1 and "(not checked)" in lines[0]
    text = (ROOT / "configs" / "sweep-instances.yaml").read_text()
    plain = spec.loads_sweep(text.replace("failover: {instance.type: [ml.trn1n.32xlarge]}", ""),
                             str(ROOT / "configs" / "sweep-instances.yaml"), base_dir=ROOT / "configs")
    lines = [line for line in cli.plan_summary(sweeps.plan(plain)) if line.startswith("prices")]
    assert len(lines) == 2
    assert lines[0].startswith("prices for ml.trn1.2xlarge (sagemaker): ")
    assert lines[1].startswith("prices for ml.trn1.32xlarge (sagemaker): ")
