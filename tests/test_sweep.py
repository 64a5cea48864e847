"""Sweeps: the sweep spec's located errors, trial expansion, identity, the doctor gate, the
budget, and the runner's state machine (concurrency, backoff, failover, retries, stop).

The runner's logic is driven through `FakeCloud`, an in-memory backend that behaves like
SageMaker where it matters (names are unique; a create either happens or is refused), so
every decision can be scripted and counted. The real SageMaker backend is exercised against
the moto server for what needs it: a create whose answer is lost, a job started by another
machine, and two machines running one sweep.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator import spec
from orchestrator import sweep as sweeps
from orchestrator.backends import DamagedStatus, JobStatus, Submitted, UnknownJob
from orchestrator.errors import BackendError, InputError, SpecError
from orchestrator.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]

BASE = """\
name: vit-base
backend: sagemaker
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {type: ml.trn1.2xlarge, count: 1}
image: {neuron_sdk: "2.30.0"}
model: {arch: vit_base_patch16_224, patch_embed: linear}
training:
  runtime: xla
  steps: 100
  warmup_steps: 5
  batch_size: 32
  optimizer: {name: adam, lr: 1.0e-4}
compile_cache: {uri: s3://sweep-bucket/compile-cache, mode: tarball}
output: {uri: s3://sweep-bucket/jobs}
max_run_minutes: 60
"""

SWEEP = """\
sweep: demo
base: base.yaml
grid:
  instance.type: [ml.trn1.2xlarge, ml.trn1.32xlarge]
  training.batch_size: [16, 32]
concurrency: 2
"""


def write(tmp_path: Path, sweep_text: str, base_text: str = BASE) -> Path:
    (tmp_path / "base.yaml").write_text(base_text)
    path = tmp_path / "sweep.yaml"
    path.write_text(sweep_text)
    return path


def load(tmp_path: Path, sweep_text: str, base_text: str = BASE) -> spec.SweepSpec:
    return spec.load_sweep(write(tmp_path, sweep_text, base_text))


def problems_of(tmp_path: Path, sweep_text: str, base_text: str = BASE) -> list:
    with pytest.raises(SpecError) as info:
        sweeps.plan(load(tmp_path, sweep_text, base_text))
    return info.value.problems


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# --- the sweep spec ---------------------------------------------------------------------------


def test_unknown_path_is_located_with_did_you_mean(tmp_path):
    text = SWEEP.replace("training.batch_size", "training.bach_size")
    [problem] = problems_of(tmp_path, text)
    assert problem.file.endswith("sweep.yaml")
    assert (problem.line, problem.column) == (line_of(text, "bach_size"), 3)
    assert "did you mean 'training.batch_size'" in problem.message


def test_unknown_path_without_close_match_lists_the_fields_below(tmp_path):
    [problem] = problems_of(tmp_path, SWEEP.replace("training.batch_size", "training.zzz"))
    assert "fields under 'training'" in problem.message and "training.optimizer.lr" in problem.message


def test_backend_and_region_cannot_vary(tmp_path):
    [problem] = problems_of(tmp_path, SWEEP + "random: {trials: 2, params: {region: {choice: [us-east-1, us-west-2]}}}\n")
    assert problem.path == "region" and "one region" in problem.message


def test_duplicate_and_overlapping_axes_are_refused(tmp_path):
    text = SWEEP + "random:\n  trials: 2\n  params:\n    training.batch_size: {int: [8, 64]}\n"
    [problem] = problems_of(tmp_path, text)
    assert "duplicate axis" in problem.message and problem.line == line_of(text, "batch_size: {int")
    text = SWEEP + "random:\n  trials: 2\n  params:\n    tags: {choice: [{a: b}]}\n    tags.team: {choice: [x]}\n"
    assert any("duplicate axis" in p.message for p in problems_of(tmp_path, text))


def test_zero_trials_are_refused_where_they_come_from(tmp_path):
    text = SWEEP.replace("[16, 32]", "[]")
    [problem] = problems_of(tmp_path, text)
    assert problem.line == line_of(text, "[]") and "zero trials" in problem.message
    text = SWEEP + "random: {trials: 0, params: {training.optimizer.lr: {uniform: [0.1, 0.2]}}}\n"
    [problem] = problems_of(tmp_path, text)
    assert problem.path == "random.trials" and problem.line == line_of(text, "trials: 0")


def test_random_distributions_are_checked(tmp_path):
    cases = {
        "{uniform: [0.2, 0.1]}": "above high",
        "{loguniform: [0, 0.1]}": "above 0",
        "{uniform: [0.1, 0.2], choice: [1]}": "exactly one",
        "{normal: [0, 1]}": "normal",
    }
    for dist, expected in cases.items():
        text = SWEEP + f"random: {{trials: 2, params: {{training.optimizer.lr: {dist}}}}}\n"
        found = problems_of(tmp_path, text)
        assert any(expected in p.message for p in found), (dist, found)
        assert all(p.line == line_of(text, "random:") for p in found)


@pytest.mark.parametrize("cron, reason", [("0 3 * *", "five fields"), ("61 3 * * *", "out of range"),
                                          ("@sometimes", "unknown alias"), ("0 3 * * * *", "five fields")])
def test_unparseable_cron_is_located(tmp_path, cron, reason):
    text = SWEEP + f'schedule: {{cron: "{cron}", catchup: latest}}\n'
    [problem] = problems_of(tmp_path, text)
    assert problem.path == "schedule.cron" and problem.line == line_of(text, "schedule:")
    assert reason in problem.message


def test_bad_timezone_catchup_and_failover_key(tmp_path):
    text = SWEEP + 'schedule: {cron: "0 3 * * *", timezone: Mars/Olympus}\n'
    assert "unknown time zone" in problems_of(tmp_path, text)[0].message
    text = SWEEP + 'schedule: {cron: "0 3 * * *", catchup: sometimes}\n'
    assert problems_of(tmp_path, text)[0].path == "schedule.catchup"
    text = SWEEP + "failover: {training.batch_size: [8]}\n"
    assert problems_of(tmp_path, text)[0].line == line_of(text, "failover")
    text = SWEEP + "failover: {instance.type: [trn1]}\n"
    assert "not an instance type" in problems_of(tmp_path, text)[0].message


def test_missing_base_is_located(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.replace("base.yaml", "nowhere.yaml"))
    with pytest.raises(SpecError) as info:
        spec.load_sweep(path)
    [problem] = info.value.problems
    assert problem.path == "base" and problem.line == 2 and "does not exist" in problem.message


@pytest.mark.timeout(30)
def test_base_that_is_not_a_regular_file_says_what_it_is(tmp_path):
    import os

    def base_problem(base: str):
        path = tmp_path / "sweep.yaml"
        path.write_text(SWEEP.replace("base.yaml", base))
        with pytest.raises(SpecError) as info:
            spec.load_sweep(path)
        [problem] = info.value.problems
        assert (problem.file, problem.line, problem.path) == (str(path), 2, "base")
        return problem.message

    (tmp_path / "adir").mkdir()
    assert "adir is a directory" in base_problem("adir")
    os.mkfifo(tmp_path / "pipe.yaml")  # must not be opened: that would block forever
    assert "not a regular file" in base_problem("pipe.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"name: \xff\n")
    assert "not UTF-8 text (byte 6)" in base_problem("bin.yaml")


@pytest.mark.timeout(30)
def test_sweep_file_that_is_not_a_regular_file_is_refused(tmp_path):
    import os

    os.mkfifo(tmp_path / "sweep.yaml")
    with pytest.raises(SpecError) as info:
        spec.load_sweep(tmp_path / "sweep.yaml")
    assert "not a regular file" in info.value.message


@pytest.mark.parametrize("value, message", [
    (".nan", "must be a finite number, got nan"),
    (".inf", "must be a finite number, got inf"),
    ("-.inf", "must be a finite number, got -inf"),
    ('"abc"', "Input should be a valid number, unable to parse string as a number"),
    ("true", "expected a number, got a boolean"),
])
def test_a_bad_grid_value_is_reported_as_itself_not_as_the_bases_value(tmp_path, value, message):
    # QA: NaN, inf or a wrong type in a grid reported the base spec's value ("got 1.0e-4").
    text = f"sweep: demo\nbase: base.yaml\ngrid:\n  training.optimizer.lr: [1.0e-3, {value}]\n"
    [problem] = problems_of(tmp_path, text)
    assert problem.path == "training.optimizer.lr" and problem.line == 4
    assert problem.message.endswith(message)
    assert "1.0e-4" not in problem.message  # the base's text for this field


def test_a_job_spec_given_as_a_sweep_or_as_a_base_sweep_is_named(tmp_path):
    (tmp_path / "job.yaml").write_text(BASE)
    with pytest.raises(SpecError) as info:
        spec.load_sweep(tmp_path / "job.yaml")
    [problem] = info.value.problems
    assert (problem.line, problem.column) == (1, 1)
    assert "this is a job spec; a sweep needs base: and grid:/random:" in problem.message
    inner = write(tmp_path, SWEEP)
    outer = tmp_path / "outer.yaml"
    outer.write_text(SWEEP.replace("base.yaml", inner.name))
    with pytest.raises(SpecError) as info:
        spec.load_sweep(outer)
    [problem] = info.value.problems
    assert (problem.file, problem.line, problem.path) == (str(outer), 2, "base")
    assert "is itself a sweep spec" in problem.message


@pytest.mark.parametrize("fragment, path, expected", [
    ("random: {trials: 2, params: {training.optimizer.lr: {uniform: [.nan, 0.1]}}}",
     "random.params.training.optimizer.lr.uniform.0", "must be a finite number"),
    ("random: {trials: 2, params: {training.optimizer.lr: {loguniform: [1.0e-5, .inf]}}}",
     "random.params.training.optimizer.lr.loguniform.1", "must be a finite number"),
    ("random: {trials: 2, params: {training.steps: {int: [true, 60]}}}",
     "random.params.training.steps.int.0", "got a boolean"),
    ("random: {trials: true, params: {training.steps: {int: [50, 60]}}}", "random.trials", "got a boolean"),
    ("budget: {max_total_cost_usd: .inf}", "budget.max_total_cost_usd", "must be a finite number"),
])
def test_sweep_numbers_refuse_booleans_and_non_finite_values(tmp_path, fragment, path, expected):
    text = SWEEP.replace("concurrency: 2\n", "") + fragment + "\n"
    [problem] = problems_of(tmp_path, text)
    assert problem.path == path and expected in problem.message and problem.line == line_of(text, fragment[:8])


def test_grid_values_refuse_booleans_for_numbers(tmp_path):
    text = SWEEP.replace("[16, 32]", "[16, true]")
    found = problems_of(tmp_path, text)
    assert found and all(p.path == "training.batch_size" and "boolean" in p.message for p in found)


@pytest.mark.parametrize("cron, expected", [
    ("0 3 31 2 *", "this cron never fires (day 31 never occurs in February?)"),
    ("0 3 30,31 2 *", "days 30, 31 never occur in February"),
    ("0 3 31 4,6 *", "day 31 never occurs in April or June"),
])
def test_a_cron_that_never_fires_is_refused(tmp_path, cron, expected):
    text = SWEEP + f'schedule: {{cron: "{cron}"}}\n'
    [problem] = problems_of(tmp_path, text)
    assert problem.path == "schedule.cron" and problem.line == line_of(text, "schedule:")
    assert expected in problem.message
    load(tmp_path, SWEEP + 'schedule: {cron: "0 3 29 2 *"}\n')  # leap days do come


@pytest.mark.parametrize("cron, field", [("61 3 * * *", "minute field '61'"), ("0 24 * * *", "hour field '24'"),
                                         ("0 3 32 * *", "day of month field '32'"), ("0 3 * 13 *", "month field '13'"),
                                         ("0 3 * * 8", "day of week field '8'"), ("0 3 * x *", "month field 'x'")])
def test_a_bad_cron_field_is_named(tmp_path, cron, field):
    [problem] = problems_of(tmp_path, SWEEP + f'schedule: {{cron: "{cron}"}}\n')
    assert f"the {field} is out of range or malformed" in problem.message


def test_a_plain_string_schedule_shows_the_mapping_shape(tmp_path):
    text = SWEEP + 'schedule: "0 3 * * *"\n'
    [problem] = problems_of(tmp_path, text)
    assert problem.path == "schedule" and problem.line == line_of(text, "schedule:")
    assert 'write schedule: {cron: "0 3 * * *"}' in problem.message


def test_values_failing_validation_name_the_trial_and_the_value(tmp_path):
    text = SWEEP.replace("[16, 32]", "[16, 0]")
    found = problems_of(tmp_path, text)
    # trials 1 and 3 have batch_size 0 (one per instance type); both are listed.
    assert [re.match(r"trial (\d+)", p.message).group(1) for p in found] == ["1", "3"]
    for p in found:
        assert p.path == "training.batch_size" and "greater than or equal to 1" in p.message
        assert (p.line, p.column) == (line_of(text, "[16, 0]"), text.splitlines()[line_of(text, "[16, 0]") - 1].index("0]") + 1)


def test_cross_field_failure_points_at_the_axis(tmp_path):
    text = "sweep: demo\nbase: base.yaml\ngrid:\n  training.steps: [100, 3]\n"
    [problem] = problems_of(tmp_path, text)
    assert problem.path == "training.warmup_steps" and "trial 1" in problem.message
    assert problem.line == 4


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 100), st.floats(allow_nan=True),
                     st.sampled_from(["ml.trn1.2xlarge", "x", "", "0 3 * * *", "bf16", "base.yaml"]))
_PATHS = st.sampled_from(["training.batch_size", "instance.type", "training.optimizer.lr", "tags.team", "nope",
                          "training", "region", "model.depth", "training.steps"])
_DISTS = st.one_of(st.fixed_dictionaries({"uniform": st.lists(_SCALARS, max_size=3)}),
                   st.fixed_dictionaries({"int": st.lists(st.integers(-3, 70), max_size=3)}),
                   st.fixed_dictionaries({"choice": st.lists(_SCALARS, max_size=3)}), _SCALARS)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.fixed_dictionaries({"sweep": st.sampled_from(["s", "bad name", 3]), "base": st.just("base.yaml")}, optional={
    "grid": st.one_of(_SCALARS, st.dictionaries(_PATHS, st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3)),
                                                max_size=3)),
    "random": st.one_of(_SCALARS, st.fixed_dictionaries(
        {"trials": st.one_of(_SCALARS, st.integers(0, 5))},
        optional={"seed": st.integers(-1, 5), "params": st.dictionaries(_PATHS, _DISTS, max_size=3)})),
    "failover": st.one_of(_SCALARS, st.dictionaries(st.sampled_from(["instance.type", "x"]),
                                                    st.lists(_SCALARS, max_size=2), max_size=2)),
    "schedule": st.one_of(_SCALARS, st.fixed_dictionaries({"cron": _SCALARS})),
    "concurrency": _SCALARS,
}))
def test_fuzz_sweep_specs_raise_only_located_spec_errors(tmp_path, orch_home, document):
    import yaml

    path = write(tmp_path, yaml.safe_dump(document))
    try:
        planned = sweeps.plan(spec.load_sweep(path))
    except SpecError as exc:
        assert exc.problems and all(p.file for p in exc.problems)
        return
    assert planned.trials and all(len(t.job_name) <= 63 for t in planned.trials)


# --- expansion and identity -------------------------------------------------------------------


def test_grid_is_the_cross_product_in_file_order(tmp_path):
    trials, duplicates = sweeps.expand(load(tmp_path, SWEEP))
    assert [t.overrides for t in trials] == [
        {"instance.type": "ml.trn1.2xlarge", "training.batch_size": 16},
        {"instance.type": "ml.trn1.2xlarge", "training.batch_size": 32},
        {"instance.type": "ml.trn1.32xlarge", "training.batch_size": 16},
        {"instance.type": "ml.trn1.32xlarge", "training.batch_size": 32},
    ]
    assert duplicates == []
    assert trials[3].spec.instance.type == "ml.trn1.32xlarge" and trials[3].spec.training.batch_size == 32
    assert trials[3].spec.training.optimizer.lr == 1e-4  # the rest comes from the base


def test_random_draws_are_seeded_bounded_and_crossed_with_the_grid(tmp_path):
    params = ("{training.optimizer.lr: {loguniform: [1.0e-5, 1.0e-2]}, training.steps: {int: [50, 52]},"
              " training.optimizer.weight_decay: {uniform: [0.0, 0.1]}, training.precision: {choice: [bf16, fp32]}}")
    text = SWEEP + f"random: {{trials: 40, seed: 7, params: {params}}}\n"
    trials, _ = sweeps.expand(load(tmp_path, text))
    assert len(trials) == 4 * 40
    again, _ = sweeps.expand(load(tmp_path, text))
    assert [t.spec_hash for t in trials] == [t.spec_hash for t in again]
    other, _ = sweeps.expand(load(tmp_path, text.replace("seed: 7", "seed: 8")))
    assert [t.overrides for t in other] != [t.overrides for t in trials]
    draws = [t.overrides for t in trials[:40]]
    assert all(1e-5 <= d["training.optimizer.lr"] <= 1e-2 for d in draws)
    assert {d["training.steps"] for d in draws} == {50, 51, 52}  # both ends included
    assert {d["training.precision"] for d in draws} == {"bf16", "fp32"}
    assert all(0.0 <= d["training.optimizer.weight_decay"] <= 0.1 for d in draws)
    # Every grid point gets the same draws (a paired comparison).
    assert [{k: v for k, v in t.overrides.items() if k.startswith("training.optimizer")} for t in trials[40:80]] == \
        [{k: v for k, v in d.items() if k.startswith("training.optimizer")} for d in draws]
    # loguniform spreads over the decades rather than crowding the top one.
    lrs = [d["training.optimizer.lr"] for d in draws]
    assert sum(lr < 1e-3 for lr in lrs) >= 20


def test_identical_trials_are_merged(tmp_path):
    text = "sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [16, 32, 16]\n"
    trials, duplicates = sweeps.expand(load(tmp_path, text))
    assert len(trials) == 2 and duplicates == [(2, 0)]


def test_sweep_id_follows_the_trials_not_the_run_policy(tmp_path):
    first = sweeps.identify(load(tmp_path, SWEEP))
    assert re.fullmatch(r"demo-[0-9a-f]{8}", first.sweep_id)
    assert sweeps.identify(load(tmp_path, SWEEP)).sweep_id == first.sweep_id
    policy = SWEEP.replace("concurrency: 2", "concurrency: 9") + "budget: {max_total_cost_usd: 999}\nmax_retries: 5\n"
    assert sweeps.identify(load(tmp_path, policy)).sweep_id == first.sweep_id
    assert sweeps.identify(load(tmp_path, SWEEP.replace("[16, 32]", "[16, 64]"))).sweep_id != first.sweep_id
    assert sweeps.identify(load(tmp_path, SWEEP, BASE.replace("steps: 100", "steps: 101"))).sweep_id != first.sweep_id


def test_job_names_fit_sagemaker_and_keep_the_trial_part():
    long_name = "a" * 54
    for tick in (None, "202601050300"):
        ident = sweeps.Identity(long_name, "0123abcd", tick)
        for attempt in (0, 1, 99):
            name = ident.job_name("t89abcdef", attempt)
            assert len(name) <= 63
            assert re.fullmatch(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}", name)
            assert name.endswith("-t89abcdef" + (f"-r{attempt}" if attempt else ""))
            assert ident.suffix in name
            assert ident.owns(name)
    ident = sweeps.Identity("demo", "0123abcd")
    assert ident.job_name("t89abcdef") == "demo-0123abcd-t89abcdef"
    assert not ident.owns("demo-0123abcd-202601050300-t89abcdef")  # a tick of the same sweep
    assert not ident.owns("demo-0123abcd-t89abcdef-extra")


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

    from orchestrator import cli

    lines = cli._plan_summary(planned)
    assert lines[0].startswith(f"total: at most {own:.2f} USD (budget 50 USD)")
    assert (f"worst case: {trial.worst_usd:.2f} USD if trials fail over (ml.trn1n.32xlarge) and use their 2 retries"
            in lines[1])
    assert "past 50 USD is not submitted" in lines[1]
    assert "worst case" in cli._plan_table(planned)
    # Without failover or retries the worst case is the total, and the plan says nothing more.
    plain = sweeps.plan(load(tmp_path, "sweep: demo\nbase: base.yaml\nmax_retries: 0\n"))
    assert plain.worst_usd == pytest.approx(plain.total_usd)
    assert not any(line.startswith("worst case") for line in cli._plan_summary(plain))


def test_budget_refuses_with_the_location(tmp_path):
    text = SWEEP + "budget:\n  max_total_cost_usd: 10\n"
    planned = sweeps.plan(load(tmp_path, text))
    with pytest.raises(SpecError) as info:
        sweeps.check_budget(planned)
    [problem] = info.value.problems
    assert problem.line == line_of(text, "max_total_cost_usd") and "above the budget of 10 USD" in problem.message
    sweeps.check_budget(sweeps.plan(load(tmp_path, text.replace(": 10", ": 100"))))


def _cli(*args, env=None, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


def test_cli_sweep_plan_prints_trials_and_refuses_above_budget(tmp_path, orch_home):
    import os

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ok = _cli("sweep", "plan", str(write(tmp_path, SWEEP)), env=env)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("demo-") >= 4 and "total: at most" in ok.stdout
    over = _cli("sweep", "plan", str(write(tmp_path, SWEEP + "budget: {max_total_cost_usd: 1}\n")), env=env)
    assert over.returncode == 2 and "sweep.yaml:7:" in over.stderr and "above the budget" in over.stderr
    assert "demo-" in over.stdout  # the table is shown before the refusal
    bad = _cli("sweep", "plan", str(write(tmp_path, SWEEP.replace("batch_size", "bach_size"))), env=env)
    assert bad.returncode == 2 and "sweep.yaml:5:3" in bad.stderr
    as_json = json.loads(_cli("sweep", "plan", "--json", str(write(tmp_path, SWEEP)), env=env).stdout)
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
    assert all(t.chain[1:] == ("ml.trn1n.32xlarge",) for t in instances.trials)


# --- the runner, on an in-memory cloud ---------------------------------------------------------


class FakeCloud:
    """A backend with SageMaker's name uniqueness and the intent-first ledger protocol; jobs
    move only when the test says so. `refuse` holds errors the next submits raise."""

    name = "sagemaker"

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.jobs: dict[str, dict] = {}
        self.creates: Counter = Counter()
        self.refuse: list[BackendError] = []
        self.stopped: list[str] = []
        self.max_in_flight = 0
        self.submit_calls = 0

    def submit(self, prepared) -> Submitted:
        self.submit_calls += 1
        name = prepared.job_name
        entry = self.ledger.record_intent(name, backend=self.name, region="us-east-1", spec_hash=prepared.spec_hash,
                                          request=prepared.request)
        if entry.state not in ("planned", "submitting"):
            return Submitted(name, created=False)
        self.ledger.transition(name, "submitting", expect=("planned",))
        if name in self.jobs:
            self.ledger.transition(name, "submitted", expect=("submitting",))
            return Submitted(name, created=False)
        if self.refuse:
            error = self.refuse.pop(0)
            if error.http_status and error.http_status < 500:
                self.ledger.transition(name, "planned", expect=("submitting",))
            raise error
        self.jobs[name] = {"status": "pending", "reason": None, "request": prepared.request}
        self.creates[name] += 1
        self.ledger.transition(name, "submitted", expect=("submitting",))
        self.max_in_flight = max(self.max_in_flight, self.in_flight())
        return Submitted(name, created=True)

    def in_flight(self) -> int:
        return sum(1 for j in self.jobs.values() if j["status"] in ("pending", "starting", "running"))

    def status(self, job_name: str) -> JobStatus:
        if job_name not in self.jobs:
            raise UnknownJob(f"no job {job_name}")
        job = self.jobs[job_name]
        tags = {t["Key"]: t["Value"] for t in job["request"]["Tags"]}
        return JobStatus(job_name, job["status"], failure_reason=job["reason"], tags=tags,
                         instance_type=job["request"]["ResourceConfig"]["InstanceType"],
                         billable_seconds=job.get("billable"))

    def stop(self, job_name: str) -> None:
        self.stopped.append(job_name)
        self.jobs[job_name]["status"] = "stopped"

    def finish(self, job_name: str, status: str = "completed", reason: str | None = None) -> None:
        self.jobs[job_name].update(status=status, reason=reason)

    def finish_all(self) -> None:
        for job in self.jobs.values():
            if job["status"] in ("pending", "running"):
                job["status"] = "completed"

    def instance_of(self, job_name: str) -> str:
        return self.jobs[job_name]["request"]["ResourceConfig"]["InstanceType"]


def refusal(code: str, status: int = 400) -> BackendError:
    return BackendError(f"CreateTrainingJob: {code}", code=code, http_status=status)


class Clock:
    def __init__(self):
        self.now = 1_800_000_000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def rig(tmp_path, orch_home):
    """(runner factory, cloud, clock): a saved sweep on a FakeCloud with a fake clock."""
    ledger = Ledger()
    cloud = FakeCloud(ledger)
    clock = Clock()

    def make(text: str = SWEEP, base: str = BASE, **options) -> sweeps.Runner:
        planned = sweeps.plan(load(tmp_path, text, base))
        definition = sweeps.save(planned, ledger)
        options.setdefault("poll_seconds", 5.0)
        return sweeps.Runner(definition, cloud, ledger, sleep=clock.sleep, clock=clock,
                             rng=random.Random(0), **options)

    return make, cloud, clock


def states(runner: sweeps.Runner) -> dict[str, str]:
    return {v.job_name: v.state for v in runner.views()}


def test_runner_caps_concurrency_and_completes_every_trial(rig):
    make, cloud, clock = rig
    runner = make()
    runner.step()
    assert len(cloud.jobs) == 2 and set(states(runner).values()) == {"submitted", "planned"}
    runner.step()
    assert len(cloud.jobs) == 2  # nothing finished: no room
    first = sorted(cloud.jobs)[0]
    cloud.jobs[first]["status"] = "running"
    runner.step()
    assert states(runner)[first] == "running" and len(cloud.jobs) == 2
    cloud.finish(first)
    runner.step()
    assert states(runner)[first] == "completed" and len(cloud.jobs) == 3
    while not runner.step().done:
        cloud.finish_all()
    assert cloud.max_in_flight == 2
    assert set(cloud.creates.values()) == {1} and len(cloud.creates) == 4
    assert set(states(runner).values()) == {"completed"}


def test_throttling_and_quota_back_off_with_growing_jittered_waits(rig):
    make, cloud, clock = rig
    runner = make(SWEEP.replace("concurrency: 2", "concurrency: 4"), backoff_base=2.0, backoff_cap=60.0)
    cloud.refuse = [refusal("ThrottlingException"), refusal("ResourceLimitExceeded"),
                    refusal("ThrottlingException")]
    progress = runner.step()
    assert progress.waiting_reason and "ThrottlingException" in progress.waiting_reason
    assert cloud.jobs == {} and set(states(runner).values()) == {"planned"}
    waits = []
    while len(cloud.jobs) < 4:
        before = clock.now
        progress = runner.step()
        if progress.waiting_until:
            waits.append(progress.waiting_until - before)
            clock.sleep(progress.waiting_until - clock.now)
    # Ceilings 2, 4, 8 s; each wait is drawn from [ceiling/2, ceiling].
    assert 1.0 <= waits[0] <= 2.0 and 2.0 <= waits[1] <= 4.0 and 4.0 <= waits[2] <= 8.0
    assert cloud.submit_calls == 4 + 3 and set(cloud.creates.values()) == {1}


def _from_botocore(cause: Exception) -> BackendError:
    """Our error for `cause` as the sagemaker backend raises it (translated, `from` it)."""
    from orchestrator.backends.sagemaker import translate

    try:
        raise translate(cause, operation="CreateTrainingJob", region="us-east-1") from cause
    except BackendError as error:
        return error


def _client_error(code: str, status: int):
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "CreateTrainingJob")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cause", ["no credentials", "expired token", "access denied"])
def test_a_permanent_error_stops_the_sweep_at_once_with_its_message(rig, cause):
    # QA: a SageMaker sweep without credentials retried forever (waits growing to 275 s), while
    # `submit` of the same spec exited at once.
    from botocore.exceptions import NoCredentialsError

    make, cloud, clock = rig
    runner = make()
    error = _from_botocore({"no credentials": NoCredentialsError(),
                            "expired token": _client_error("ExpiredTokenException", 400),
                            "access denied": _client_error("AccessDeniedException", 400)}[cause])
    cloud.refuse = [error] * 10
    with pytest.raises(BackendError) as info:
        runner.run()
    assert info.value.message == f"sweep {runner.d.sweep_id} stopped: {error.message}"
    assert info.value.hint.startswith(error.hint)
    assert info.value.hint.endswith(f"then `python -m orchestrator sweep resume {runner.d.sweep_id}` continues it "
                                    "(jobs already submitted keep running)")
    assert cloud.submit_calls == 1 and clock.sleeps == []  # no second try, no wait
    assert "failed" not in states(runner).values()  # no trial is blamed for the account's setup


def test_a_request_the_service_refuses_fails_its_trial_only(rig):
    make, cloud, _ = rig
    runner = make()
    cloud.refuse = [_from_botocore(_client_error("ValidationException", 400))]
    final = runner.run(max_steps=3)
    assert list(states(runner).values()).count("failed") == 1 and len(cloud.jobs) == 2
    assert not final.done  # the others go on


@pytest.mark.timeout(60)
def test_transient_errors_are_retried_a_bounded_number_of_times(rig):
    from botocore.exceptions import EndpointConnectionError

    make, cloud, clock = rig
    runner = make(max_transient_retries=3)
    error = _from_botocore(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"))
    assert sweeps.submit_error_kind(error) == "transient"
    cloud.refuse = [error] * 50
    with pytest.raises(BackendError) as info:
        runner.run()
    assert cloud.submit_calls == 4  # the first try and 3 retries
    assert len([s for s in clock.sleeps if s > 0]) >= 3
    assert "gave up after 3 retries in a row" in info.value.message and error.message in info.value.message
    assert f"sweep resume {runner.d.sweep_id}" in info.value.hint
    # Throttling and 5xx the same way.
    for code, status in (("ThrottlingException", 400), ("InternalServerError", 500)):
        cloud.refuse = [_from_botocore(_client_error(code, status))] * 50
        cloud.submit_calls = 0
        runner = make(max_transient_retries=2)
        with pytest.raises(BackendError, match="gave up after 2 retries in a row"):
            runner.run()
        assert cloud.submit_calls == 3


@pytest.mark.timeout(60)
def test_a_quota_reached_while_the_sweeps_jobs_run_waits_for_them_without_limit(rig):
    make, cloud, clock = rig
    runner = make(SWEEP.replace("concurrency: 2", "concurrency: 4"), max_transient_retries=2)
    runner.step()  # the first is created; then the refusals start
    cloud.refuse = [refusal("ResourceLimitExceeded")] * 10
    runner.run(max_steps=8)
    assert len(cloud.jobs) >= 1 and cloud.submit_calls > 3  # past the bound of 2, still waiting
    # With nothing of the sweep in flight, a quota of 0 is no wait for a job to end: bounded.
    cloud.jobs.clear()
    for entry in runner.ledger.entries(sweep_id=runner.d.sweep_id):
        if entry.state == "submitted":
            runner.ledger.transition(entry.job_name, "planned", expect=("submitted",))
    cloud.refuse = [refusal("ResourceLimitExceeded")] * 10
    runner = make(SWEEP.replace("concurrency: 2", "concurrency: 4"), max_transient_retries=2)
    with pytest.raises(BackendError, match="gave up after 2 retries in a row"):
        runner.run()


@pytest.mark.timeout(120)
def test_cli_sweep_run_without_credentials_exits_1_at_once(tmp_path, orch_home, monkeypatch, capsys):
    from cli_harness import run_cli

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # never reached: nothing to sign with
    path = write(tmp_path, SWEEP)
    code, _, err = run_cli(monkeypatch, capsys, "sweep", "run", str(path), "--poll", "0")
    assert code == 1 and "Traceback" not in err
    assert "stopped: ListTrainingJobs: no usable AWS credentials" in err
    assert "sweep resume demo-" in err and "backing off" not in err


def test_capacity_at_submit_fails_over_to_the_next_type(rig):
    make, cloud, _ = rig
    text = "sweep: demo\nbase: base.yaml\nfailover: {instance.type: [ml.trn1n.32xlarge, ml.trn1.32xlarge]}\n"
    runner = make(text)
    cloud.refuse = [refusal("InsufficientCapacityError")]
    runner.step()
    [view] = runner.views()
    assert view.state == "failed" and not view.final and view.detail.startswith("[capacity]")
    runner.step()
    [view] = runner.views()
    assert view.attempt == 1 and view.job_name.endswith("-r1") and view.state == "submitted"
    assert cloud.instance_of(view.job_name) == "ml.trn1n.32xlarge"
    tags = {t["Key"]: t["Value"] for t in cloud.jobs[view.job_name]["request"]["Tags"]}
    assert tags["orchestrator:trial"] == view.trial.trial_id
    assert tags["orchestrator:spec-hash"] != view.trial.trial_id[1:]  # the failover spec differs
    # Marked, so results can tell it ran another configuration than its trial.
    assert tags["orchestrator:attempt"] == "failover:ml.trn1.2xlarge"


def test_retries_are_tagged_as_retries(rig):
    make, cloud, _ = rig
    runner = make("sweep: demo\nbase: base.yaml\nmax_retries: 1\n")
    runner.step()
    [first] = cloud.jobs
    assert "orchestrator:attempt" not in {t["Key"] for t in cloud.jobs[first]["request"]["Tags"]}
    cloud.finish(first, "failed", "InternalServerError: try again")
    runner.step()
    tags = {t["Key"]: t["Value"] for t in cloud.jobs[first + "-r1"]["request"]["Tags"]}
    assert tags["orchestrator:attempt"] == "retry"


def test_capacity_failures_walk_the_failover_list_then_use_retries(rig):
    make, cloud, _ = rig
    text = ("sweep: demo\nbase: base.yaml\nfailover: {instance.type: [ml.trn1n.32xlarge]}\nmax_retries: 1\n")
    runner = make(text)
    reason = "CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML instance type."
    seen = []
    for _ in range(6):
        runner.step()
        [view] = runner.views()
        if view.state == "submitted":
            seen.append((view.job_name, cloud.instance_of(view.job_name)))
            cloud.finish(view.job_name, "failed", reason)
    [view] = runner.views()
    assert [instance for _, instance in seen] == ["ml.trn1.2xlarge", "ml.trn1n.32xlarge", "ml.trn1n.32xlarge"]
    assert [name.rsplit("-", 1)[-1] for name, _ in seen][1:] == ["r1", "r2"]
    assert view.final and view.state == "failed" and view.attempt == 2


@pytest.mark.parametrize("reason, retried", [
    ("Spot instance interruption: the capacity was reclaimed", True),
    ("InternalServerError: We encountered an internal error. Please try again.", True),
    ("AlgorithmError: ExecuteUserScriptError: RuntimeError: boom", False),
    ("ClientError: Please ensure the S3 path exists", False),
])
def test_job_failures_are_retried_only_when_retryable(rig, reason, retried):
    make, cloud, _ = rig
    runner = make("sweep: demo\nbase: base.yaml\nmax_retries: 2\n")
    runner.step()
    [first] = cloud.jobs
    cloud.finish(first, "failed", reason)
    runner.step()
    [view] = runner.views()
    if retried:
        assert view.job_name == first + "-r1" and view.state == "submitted"
        assert cloud.instance_of(view.job_name) == "ml.trn1.2xlarge"
    else:
        assert view.job_name == first and view.final and view.state == "failed" and len(cloud.jobs) == 1


def test_retries_stop_at_max_retries(rig):
    make, cloud, _ = rig
    runner = make("sweep: demo\nbase: base.yaml\nmax_retries: 2\n")
    for _ in range(10):
        runner.step()
        for name, job in cloud.jobs.items():
            if job["status"] == "pending":
                cloud.finish(name, "failed", "InternalServerError: internal error")
    [view] = runner.views()
    assert len(cloud.jobs) == 3 and view.attempt == 2 and view.final
    assert runner.progress().done


def test_user_errors_at_submit_are_never_retried(rig):
    make, cloud, clock = rig
    runner = make("sweep: demo\nbase: base.yaml\n")
    cloud.refuse = [refusal("ValidationException")]
    final = runner.run(max_steps=5)
    [view] = runner.views()
    assert final.done and view.state == "failed" and view.detail.startswith("[user]")
    assert cloud.submit_calls == 1 and cloud.jobs == {}


def test_a_job_the_backend_lost_is_retried_but_a_damaged_status_is_not_taken_for_lost(rig, monkeypatch):
    make, cloud, _ = rig
    runner = make()
    runner.step()
    damaged, healthy = sorted(cloud.jobs)
    real_status, stops = cloud.status, []
    real_stop = cloud.stop

    def status(name):
        if name == damaged:
            raise DamagedStatus(f"{name}: status.json is damaged", hint="remove the job's folder")
        return real_status(name)

    monkeypatch.setattr(cloud, "status", status)
    monkeypatch.setattr(cloud, "stop", lambda name: (stops.append(name), real_stop(name)))
    # QA: one damaged local status file made every poll, `sweep status` and `sweep stop` exit 2.
    # The runner reports it, leaves that trial as it is (never resubmitted) and goes on.
    cloud.jobs[healthy]["status"] = "completed"
    progress = runner.step()
    assert any(f"{damaged}: status.json is damaged" in e for e in progress.events)
    assert states(runner)[damaged] == "submitted" and states(runner)[healthy] == "completed"
    assert len(cloud.creates) == 3  # the freed slot went to the next trial, nothing was resubmitted
    # sweep stop still stops it (the backend can, while its supervisor runs) and the others.
    report = _sweep_stop(runner)
    assert damaged in report.stopped_jobs and damaged in stops and report.errors == []
    # The backend answering that it has no such job is what makes a trial lost (and retried).
    monkeypatch.setattr(cloud, "status", real_status)
    lost = make("sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [16]\n")
    lost.step()
    [job] = [name for name in cloud.jobs if name.startswith(lost.d.sweep_id)]
    del cloud.jobs[job]
    lost.step()
    assert lost.ledger.get(job).state == "failed" and lost.ledger.get(job).detail.startswith("[lost]")


def test_a_lost_answer_leaves_submitting_and_is_reconciled_not_duplicated(rig):
    make, cloud, clock = rig
    runner = make("sweep: demo\nbase: base.yaml\n")
    cloud.refuse = [refusal("InternalFailure", status=503)]
    runner.step()
    [view] = runner.views()
    assert view.state == "submitting"  # a 5xx: the job may exist; never planned again blindly
    runner.step()
    assert cloud.submit_calls == 1  # backing off
    clock.sleep(10)
    runner.step()
    assert sum(cloud.creates.values()) == 1 and runner.views()[0].state == "submitted"


def test_budget_caps_retries(rig):
    make, cloud, _ = rig
    # One trn1.2xlarge hour is bounded at about 2.02 USD: room for the first job, not for a retry.
    runner = make("sweep: demo\nbase: base.yaml\nmax_retries: 3\nbudget: {max_total_cost_usd: 3}\n")
    runner.step()
    [first] = cloud.jobs
    cloud.finish(first, "failed", "InternalServerError: internal error")
    runner.step()
    [view] = runner.views()
    assert view.final and view.detail.startswith("[budget]") and len(cloud.jobs) == 1


def test_stop_cancels_planned_trials_and_stops_jobs_in_flight(rig):
    make, cloud, _ = rig
    runner = make()
    runner.step()
    report = _sweep_stop(runner)
    assert sorted(report.stopped_jobs) == sorted(cloud.jobs) and len(report.cancelled) == 2
    assert set(states(runner).values()) == {"stopped"}
    assert runner.step().stopped and len(cloud.jobs) == 2  # a runner started later submits nothing


def _sweep_stop(runner):
    """What `python -m orchestrator sweep stop` does to a runner's sweep: the flag, then the stop."""
    sweeps.request_stop(runner.ledger, runner.d.sweep_id)
    return sweeps.stop(runner)


def _one_job_stopped_then_resumed(make, cloud, text: str):
    """(runner, job) for a one-trial sweep whose job `sweep stop` stopped in flight, with the
    stop flag cleared again as `sweep resume` does first."""
    runner = make(text)
    runner.step()
    [job] = cloud.jobs
    _sweep_stop(runner)
    sweeps.clear_stop(runner.ledger, runner.d.sweep_id)
    return runner, job


def _stopped_midway(make, cloud, text: str = SWEEP):
    """A sweep of 4 trials, concurrency 2, stopped with 1 completed, 2 in flight, 1 planned."""
    runner = make(text)
    runner.step()
    first = sorted(cloud.jobs)[0]
    cloud.finish(first)
    runner.step()
    assert Counter(states(runner).values()) == {"completed": 1, "submitted": 2, "planned": 1}
    report = _sweep_stop(runner)
    assert len(report.stopped_jobs) == 2 and len(report.cancelled) == 1
    return runner, first, report


def test_resume_after_stop_reopens_cancelled_trials_and_resubmits_stopped_jobs(rig):
    make, cloud, clock = rig
    runner, first, report = _stopped_midway(make, cloud)
    assert runner.step().stopped and len(cloud.jobs) == 3  # the flag still set: nothing moves
    sweeps.clear_stop(runner.ledger, runner.d.sweep_id)  # what `sweep resume` and `sweep run` do
    progress = runner.step()
    views = {v.trial.trial_id: v for v in runner.views()}
    [cancelled] = report.cancelled
    by_name = {v.job_name: v for v in views.values()}
    # Cancelled before submission: planned again under the same name (attempt 0).
    assert by_name[cancelled].attempt == 0 and by_name[cancelled].state in ("planned", "submitted")
    # Stopped in flight: resubmitted as -r1 of the same trial, on the same instance type.
    for name in report.stopped_jobs:
        trial = runner.ledger.get(name).trial_id
        assert runner.ledger.get(name).state == "stopped"
        assert views[trial].job_name == name + "-r1" and views[trial].state in ("planned", "submitted")
        assert views[trial].instance_type == cloud.instance_of(name)
    assert any("its cost is spent" in e for e in progress.events)
    assert any(f"{cancelled}: planned again" in e for e in progress.events)
    assert by_name[first].state == "completed" and by_name[first].attempt == 0  # left alone
    while not runner.step().done:
        cloud.finish_all()
    assert set(states(runner).values()) == {"completed"} and set(cloud.creates.values()) == {1}
    assert len(cloud.creates) == 6 and cloud.max_in_flight <= 2 and cancelled in cloud.creates
    # A later resume finds nothing to reopen.
    fresh = sweeps.Runner(runner.d, cloud, runner.ledger, sleep=clock.sleep, clock=clock)
    assert fresh.step().done and len(cloud.creates) == 6


def test_a_resubmission_after_stop_does_not_use_up_max_retries(rig):
    make, cloud, _ = rig
    runner, job = _one_job_stopped_then_resumed(make, cloud, "sweep: demo\nbase: base.yaml\nmax_retries: 1\n")
    runner.step()
    cloud.finish(job + "-r1", "failed", "InternalServerError: internal error")
    runner.step()
    runner.step()
    [view] = runner.views()
    assert view.job_name == job + "-r2" and view.state == "submitted"  # the one retry is still there


def test_reopening_killed_halfway_continues_under_the_same_names(rig, monkeypatch):
    make, cloud, clock = rig
    runner, _, report = _stopped_midway(make, cloud)
    sweeps.clear_stop(runner.ledger, runner.d.sweep_id)
    real = Ledger.record_intent

    def killed(self, job_name, **kwargs):
        if job_name.endswith("-r1"):
            raise KeyboardInterrupt  # the process dies after the attempt record, before the row
        return real(self, job_name, **kwargs)

    monkeypatch.setattr(Ledger, "record_intent", killed)
    with pytest.raises(KeyboardInterrupt):
        runner.step()
    monkeypatch.setattr(Ledger, "record_intent", real)
    fresh = sweeps.Runner(runner.d, cloud, runner.ledger, sleep=clock.sleep, clock=clock, poll_seconds=0)
    while not fresh.step().done:
        cloud.finish_all()
    names = {e.job_name for e in runner.ledger.entries(sweep_id=runner.d.sweep_id)}
    assert {n + "-r1" for n in report.stopped_jobs} <= names and len(names) == 6
    assert set(cloud.creates.values()) == {1} and len(cloud.creates) == 6


def test_rows_stopped_by_an_older_version_are_told_apart_by_the_backend(rig):
    make, cloud, _ = rig
    runner, _, report = _stopped_midway(make, cloud)
    for entry in runner.ledger.entries(sweep_id=runner.d.sweep_id, states=("stopped",)):
        runner.ledger.transition(entry.job_name, "stopped", detail=sweeps.STOPPED_LEGACY)
    sweeps.clear_stop(runner.ledger, runner.d.sweep_id)
    runner.step()
    names = {e.job_name: e.state for e in runner.ledger.entries(sweep_id=runner.d.sweep_id)}
    [cancelled] = report.cancelled
    assert cancelled + "-r1" not in names and names[cancelled] in ("planned", "submitted")
    assert all(n + "-r1" in names for n in report.stopped_jobs)


def test_a_resubmission_after_stop_above_budget_is_not_made(rig):
    make, cloud, _ = rig
    # One trn1.2xlarge hour is bounded at about 2.02 USD: the stopped job's bound is spent, no room for another.
    runner, job = _one_job_stopped_then_resumed(make, cloud,
                                                "sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 2}\n")
    first = runner.step()
    second = runner.step()
    [view] = runner.views()
    assert view.job_name == job and view.state == "stopped" and view.final and second.done
    assert "not resubmitted" in view.detail and "above budget.max_total_cost_usd 2" in view.detail
    assert sum("not resubmitted" in e for e in second.events) == 1 == sum("not resubmitted" in e for e in first.events)
    assert list(cloud.jobs) == [job]


def test_a_job_stopped_while_starting_counts_what_it_billed_not_its_bound(rig):
    """SageMaker bills a job stopped while Starting next to nothing: the sweep's budget counts
    the billable seconds it reports (DescribeTrainingJob), not the job's max-run bound."""
    make, cloud, _ = rig
    # Each job's bound is about 2.02 USD (an hour of trn1.2xlarge at EC2's price x 1.5): a budget
    # of 3 has room for the resubmission only if the stopped job counts what it billed.
    runner, job = _one_job_stopped_then_resumed(make, cloud,
                                                "sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 3}\n")
    cloud.jobs[job]["billable"] = 0  # Stopped while Starting: nothing billed
    runner.step()
    assert sorted(cloud.jobs) == [job, job + "-r1"]
    assert runner.ledger.get_value(f"sweep:{runner.d.sweep_id}:billed:{job}") == 0
    # A job that ran half its hour counts half its bound.
    cloud.jobs[job + "-r1"].update(status="failed", reason="InternalServerError: boom", billable=1800)
    runner.step()
    assert runner.ledger.get_value(f"sweep:{runner.d.sweep_id}:billed:{job}-r1") == 1800
    [view] = runner.views()
    # 0 + 1.01 + 2.02 > 3: the retry is refused, by what was billed and the retry's bound.
    assert view.state == "failed" and "cost bound to 3.02 USD" in view.detail


def test_a_stopped_job_without_billable_seconds_counts_its_whole_bound(rig):
    make, cloud, _ = rig
    runner, job = _one_job_stopped_then_resumed(make, cloud,
                                                "sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 3}\n")
    runner.step()  # the fake reports no billable seconds: the bound counts, no room
    [view] = runner.views()
    assert view.state == "stopped" and list(cloud.jobs) == [job]


def test_a_budget_refusal_says_what_to_do_and_resume_takes_the_raised_budget(rig, tmp_path, monkeypatch):
    from orchestrator import cli

    make, cloud, _ = rig
    text = "sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 3}\n"
    runner, job = _one_job_stopped_then_resumed(make, cloud, text)
    runner.step()
    [view] = runner.views()
    assert view.state == "stopped" and "not resubmitted" in view.detail
    sweep_file = tmp_path / "sweep.yaml"
    assert (f"to run it, raise budget.max_total_cost_usd in {sweep_file.resolve()}, then `python -m orchestrator "
            f"sweep resume {runner.d.sweep_id}`") in view.detail
    # The budget raised in the file: `sweep resume` reads it (as `sweep run` would) and resubmits.
    sweep_file.write_text(text.replace(": 3}", ": 10}"))

    def submit_and_finish(prepared, _submit=cloud.submit):
        result = _submit(prepared)
        cloud.finish(prepared.job_name)
        return result

    monkeypatch.setattr(cloud, "submit", submit_and_finish)
    monkeypatch.setattr(cli, "_sweep_backend", lambda definition, ledger: cloud)
    done = _invoke("sweep", "resume", runner.d.sweep_id, "--poll", "0")
    assert done.exit_code == 0, (done.output, done.exception)
    assert f"took budget.max_total_cost_usd 3.0 -> 10.0 from {sweep_file.resolve()}" in done.output
    assert sorted(cloud.jobs) == [job, job + "-r1"] and cloud.jobs[job + "-r1"]["status"] == "completed"
    assert sweeps.load_definition(runner.ledger, runner.d.sweep_id).budget_usd == 10


def test_a_retry_refused_by_the_budget_runs_once_the_budget_is_raised(rig, tmp_path):
    make, cloud, _ = rig
    text = "sweep: demo\nbase: base.yaml\nmax_retries: 1\nbudget: {max_total_cost_usd: 3}\n"
    runner = make(text)
    runner.step()
    [job] = cloud.jobs
    cloud.finish(job, "failed", "InternalServerError: boom")
    runner.step()
    runner.step()
    [view] = runner.views()
    assert view.final and view.detail.startswith("[budget] InternalServerError: boom; a retry would")
    assert "raise budget.max_total_cost_usd" in view.detail and not runner.has_work()
    assert sum("not retried (budget)" in e for e in runner.progress().events) == 1  # said once
    (tmp_path / "sweep.yaml").write_text(text.replace(": 3}", ": 10}"))
    definition, note = sweeps.reload_policy(runner.ledger, runner.d)
    assert definition.budget_usd == 10 and "3.0 -> 10.0" in note
    raised = sweeps.Runner(definition, cloud, runner.ledger, sleep=lambda s: None, poll_seconds=0)
    assert raised.has_work()
    raised.step()
    assert sorted(cloud.jobs) == [job, job + "-r1"]


def test_resume_keeps_the_saved_settings_when_the_file_became_another_sweep(rig, tmp_path):
    make, _, _ = rig
    runner = make("sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 3}\n")
    (tmp_path / "sweep.yaml").write_text("sweep: demo\nbase: base.yaml\ngrid: {training.batch_size: [8, 16]}\n")
    definition, note = sweeps.reload_policy(runner.ledger, runner.d)
    assert definition == runner.d and "now describes another sweep" in note and "sweep run" in note
    (tmp_path / "sweep.yaml").unlink()
    definition, note = sweeps.reload_policy(runner.ledger, runner.d)
    assert definition == runner.d and "could not be read again" in note


def test_a_refused_save_leaves_the_saved_definition_unchanged(tmp_path, orch_home):
    ledger = Ledger()
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    saved = ledger.get_value(f"sweep:{definition.sweep_id}")
    other = tmp_path / "elsewhere"
    other.mkdir()
    changed = sweeps.plan(load(other, SWEEP.replace("concurrency: 2", "concurrency: 3")
                               + "budget: {max_total_cost_usd: 90}\n"))
    assert changed.sweep_id == definition.sweep_id
    with sweeps.runner_lock(definition.sweep_id):  # a detached runner holds the sweep
        with pytest.raises(InputError) as info:
            sweeps.save(changed, ledger)
    assert "being run by another process" in info.value.message and "nothing was changed" in info.value.hint
    assert ledger.get_value(f"sweep:{definition.sweep_id}") == saved
    assert sweeps.save(changed, ledger).concurrency == 3  # once the runner is gone, it saves


def test_cli_sweep_run_refused_by_a_running_sweep_saves_nothing(tmp_path, orch_home):
    import os

    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(orch_home))
    ledger = Ledger()
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    saved = ledger.get_value(f"sweep:{definition.sweep_id}")
    other = tmp_path / "elsewhere"
    other.mkdir()
    path = write(other, SWEEP.replace("concurrency: 2", "concurrency: 3") + "budget: {max_total_cost_usd: 90}\n")
    with sweeps.runner_lock(definition.sweep_id):
        done = _cli("sweep", "run", str(path), env=env)
    assert done.returncode == 2, done.stderr
    assert "being run by another process" in done.stderr and "Traceback" not in done.stderr
    assert ledger.get_value(f"sweep:{definition.sweep_id}") == saved


def test_the_runner_notes_trials_already_completed_under_another_sweep_id(rig):
    make, cloud, _ = rig
    runner = make("sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [16]\n")
    runner.step()
    cloud.finish_all()
    runner.step()
    edited = make("sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [16, 64]\n")
    assert edited.d.sweep_id != runner.d.sweep_id
    progress = edited.step()
    [note] = [e for e in progress.events if "already completed under another sweep id" in e]
    assert f"(as {next(iter(cloud.creates))})" in note and note.count("(as ") == 1
    assert sum("already completed" in e for e in edited.step().events) == 1  # said once


def test_run_resumes_from_the_ledger_alone(rig):
    make, cloud, clock = rig
    runner = make()
    runner.step()
    definition = sweeps.load_definition(runner.ledger, runner.d.sweep_id)
    assert definition.to_json() == runner.d.to_json()
    fresh = sweeps.Runner(definition, cloud, runner.ledger, sleep=clock.sleep, clock=clock, poll_seconds=1)
    cloud.finish_all()
    while not fresh.step().done:
        cloud.finish_all()
    assert len(cloud.creates) == 4 and set(cloud.creates.values()) == {1}


def test_a_definition_of_another_schema_says_how_to_go_on(rig):
    make, _, _ = rig
    runner = make()
    runner.step()
    key = f"sweep:{runner.d.sweep_id}"
    saved = runner.ledger.get_value(key)
    jobs = {v.job_name: v.state for v in runner.views()}
    for schema, advice in ((2, "upgrade this orchestrator to the version that saved the sweep"),
                           (None, "use the orchestrator version that saved the sweep")):
        runner.ledger.put_value(key, {**saved, "schema": schema})
        with pytest.raises(InputError) as info:
            sweeps.load_definition(runner.ledger, runner.d.sweep_id)
        assert f"schema {schema!r}" in info.value.message
        assert info.value.hint == (f"{advice}, or save it again in this version's format: "
                                   f"`python -m orchestrator sweep run {saved['file']}`")
    # What the hint says works: the run saves the definition again and keeps the ledger's jobs.
    sweeps.save(sweeps.plan(spec.load_sweep(saved["file"])), runner.ledger)
    again = sweeps.load_definition(runner.ledger, runner.d.sweep_id)
    assert again.to_json() == saved
    assert {v.job_name: v.state for v in sweeps.Runner(again, None, runner.ledger).views()} == jobs
    # A scheduled tick's definition is written by the schedule only: no `sweep run` to offer.
    runner.ledger.put_value(key, {**saved, "schema": 2, "tick": "202601010300"})
    with pytest.raises(InputError) as info:
        sweeps.load_definition(runner.ledger, runner.d.sweep_id)
    assert info.value.hint == "upgrade this orchestrator to the version that saved the sweep"


def test_unknown_sweep_id_names_the_known_ones(rig):
    make, _, _ = rig
    runner = make()
    with pytest.raises(InputError) as info:
        sweeps.load_definition(runner.ledger, "nope-00000000")
    assert runner.d.sweep_id in info.value.hint


def test_a_sweep_is_found_by_its_id_or_by_a_name_only_one_sweep_has(rig):
    make, _, _ = rig
    runner = make()
    ledger = runner.ledger
    assert sweeps.resolve_id(ledger, runner.d.sweep_id) == runner.d.sweep_id
    assert sweeps.resolve_id(ledger, "demo") == runner.d.sweep_id
    edited = make(SWEEP.replace("concurrency: 2", "concurrency: 3").replace("[16, 32]", "[16, 48]"))
    assert edited.d.sweep_id != runner.d.sweep_id
    with pytest.raises(InputError) as info:
        sweeps.resolve_id(ledger, "demo")
    assert "'demo' names 2 sweeps" in info.value.message
    assert runner.d.sweep_id in info.value.message and edited.d.sweep_id in info.value.message
    assert "give the sweep id" in info.value.hint
    with pytest.raises(InputError) as info:
        sweeps.resolve_id(ledger, "dem")
    assert "no sweep 'dem'" in info.value.message and runner.d.sweep_id in info.value.hint


def test_a_scheduled_ticks_untimed_id_finds_it():
    assert sweeps.sweep_keys("nightly-0123abcd-202611300200") == {
        "nightly-0123abcd-202611300200", "nightly-0123abcd", "nightly"}
    assert sweeps.sweep_keys("odd") == {"odd"}


def test_classify_failure_reasons():
    assert sweeps.classify("[capacity] CreateTrainingJob refused") == "capacity"
    assert sweeps.classify("CapacityError: Unable to provision requested ML compute capacity") == "capacity"
    assert sweeps.classify("Job was interrupted by a spot interruption") == "spot"
    assert sweeps.classify("InternalServerError: We encountered an internal error") == "internal"
    assert sweeps.classify("AlgorithmError: see logs") == "user"
    assert sweeps.classify(None) == "user"


# --- the real SageMaker backend on the moto server --------------------------------------------


class UniqueNames:
    """A sagemaker client that answers a second create of a name with ResourceInUse, as
    SageMaker does (moto overwrites silently), and can lose the answer of the next create."""

    def __init__(self, client, creates: Counter):
        self._client = client
        self.creates = creates
        self.lose_next_answer = False
        self.refuse: list[str] = []  # error codes the next creates answer with

    def __getattr__(self, name):
        return getattr(self._client, name)

    def create_training_job(self, **request):
        from botocore.exceptions import ClientError, EndpointConnectionError

        name = request["TrainingJobName"]
        if self.refuse:
            code = self.refuse.pop(0)
            raise ClientError({"Error": {"Code": code, "Message": f"{code} (scripted)"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "CreateTrainingJob")
        if self.creates[name]:
            raise ClientError({"Error": {"Code": "ResourceInUse", "Message": f"Training job {name} already exists"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "CreateTrainingJob")
        answer = self._client.create_training_job(**request)
        self.creates[name] += 1
        if self.lose_next_answer:
            self.lose_next_answer = False
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1")
        return answer


def moto_backend(ledger: Ledger, creates: Counter):
    import boto3

    from orchestrator.backends.sagemaker import SageMakerBackend

    sm = UniqueNames(boto3.client("sagemaker", region_name="us-east-1"), creates)
    return SageMakerBackend(sm, boto3.client("s3", region_name="us-east-1"),
                            boto3.client("logs", region_name="us-east-1"), ledger=ledger), sm


def set_moto_status(name: str, status: str) -> None:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sagemaker.models import sagemaker_backends

    sagemaker_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].training_jobs[name].training_job_status = status


@pytest.fixture
def bucket(moto_server):
    import boto3

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="sweep-bucket")
    return "sweep-bucket"


def test_moto_lost_create_answer_is_reconciled_by_describe(tmp_path, orch_home, bucket):
    ledger = Ledger()
    creates: Counter = Counter()
    backend, sm = moto_backend(ledger, creates)
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    clock = Clock()
    runner = sweeps.Runner(definition, backend, ledger, sleep=clock.sleep, clock=clock, poll_seconds=1,
                           rng=random.Random(1))
    sm.lose_next_answer = True
    runner.step()
    lost = [v for v in runner.views() if v.state == "submitting"]
    assert len(lost) == 1
    final = runner.run(max_steps=20)
    assert final.done and set(states(runner).values()) == {"completed"}
    assert set(creates.values()) == {1} and len(creates) == 4
    assert any(f"{lost[0].job_name}: reconciled" in line for line in final.events)


def test_moto_quota_and_user_errors_are_told_apart_through_the_backend(tmp_path, orch_home, bucket):
    """The backend's translated errors keep botocore's code: ResourceLimitExceeded and
    throttling wait and succeed, a ValidationException fails the trial for good."""
    ledger = Ledger()
    creates: Counter = Counter()
    backend, sm = moto_backend(ledger, creates)
    text = "sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [16, 32]\nconcurrency: 1\n"
    definition = sweeps.save(sweeps.plan(load(tmp_path, text)), ledger)
    clock = Clock()
    runner = sweeps.Runner(definition, backend, ledger, sleep=clock.sleep, clock=clock, poll_seconds=1,
                           rng=random.Random(2))
    sm.refuse = ["ResourceLimitExceeded", "ThrottlingException"]
    runner.step()
    assert runner.progress().waiting_reason and "service quota" in runner.progress().waiting_reason
    while len(creates) < 1:
        runner.run(max_steps=1)
        clock.sleep(5)
    first = next(iter(creates))
    assert states(runner)[first] in ("submitted", "completed")
    sm.refuse = ["ValidationException"]
    final = runner.run(max_steps=10)
    assert final.done and len(creates) == 1
    [failed] = [v for v in runner.views() if v.state == "failed"]
    assert failed.detail.startswith("[user]") and "ValidationException" in failed.detail


def test_moto_jobs_started_elsewhere_count_against_concurrency(tmp_path, orch_home, bucket):
    """Another machine runs two of this sweep's trials: with concurrency 2 this runner waits,
    adopts those two instead of creating them, and submits the rest as they finish."""
    other, mine = Ledger(tmp_path / "other.sqlite3"), Ledger()
    creates: Counter = Counter()
    planned = sweeps.plan(load(tmp_path, SWEEP))
    theirs, _ = moto_backend(other, creates)
    other_runner = sweeps.Runner(sweeps.save(planned, other), theirs, other, sleep=lambda s: None, poll_seconds=0)
    other_runner.submit_ready()
    started = sorted(creates)
    assert len(started) == 2
    for name in started:
        set_moto_status(name, "InProgress")
    ours, _ = moto_backend(mine, creates)
    runner = sweeps.Runner(sweeps.save(planned, mine), ours, mine, sleep=lambda s: None, poll_seconds=0)
    progress = runner.step()
    assert progress.elsewhere == 0 and progress.in_flight == 2  # adopted: now in this ledger too
    # Adopted from SageMaker at the runner's first step, then refreshed: they are training.
    assert sorted(creates) == started and {states(runner)[n] for n in started} == {"running"}
    assert sum("adopted" in line for line in progress.events) == 2
    runner.step()
    assert sorted(creates) == started  # still no room
    for name in started:
        set_moto_status(name, "Completed")
    final = runner.run(max_steps=10)
    assert final.done and len(creates) == 4 and set(creates.values()) == {1}


def test_moto_foreign_jobs_need_the_sweep_tag_to_count(tmp_path, orch_home, bucket):
    ledger = Ledger()
    creates: Counter = Counter()
    backend, _ = moto_backend(ledger, creates)
    planned = sweeps.plan(load(tmp_path, SWEEP))
    definition = sweeps.save(planned, ledger)
    import boto3

    sm = boto3.client("sagemaker", region_name="us-east-1")
    request = dict(planned.trials[0].prepared.request)
    for suffix, tagged in (("t00000000", True), ("t11111111", False)):
        name = f"{planned.identity.job_prefix}-{suffix}"
        tags = [t for t in request["Tags"] if tagged or t["Key"] != "orchestrator:sweep"]
        sm.create_training_job(**{**request, "TrainingJobName": name, "Tags": tags})
        set_moto_status(name, "InProgress")
    runner = sweeps.Runner(definition, backend, ledger, sleep=lambda s: None, poll_seconds=0)
    progress = runner.step()
    assert progress.elsewhere == 1 and progress.in_flight == 1  # 2 - 1 counted from elsewhere


def test_moto_two_machines_run_one_sweep_and_create_each_job_once(tmp_path, orch_home, bucket):
    creates: Counter = Counter()
    planned = sweeps.plan(load(tmp_path, SWEEP.replace("concurrency: 2", "concurrency: 4")))
    runners = []
    for name in ("laptop-a", "laptop-b"):
        ledger = Ledger(tmp_path / f"{name}.sqlite3")
        backend, _ = moto_backend(ledger, creates)
        runners.append(sweeps.Runner(sweeps.save(planned, ledger), backend, ledger, sleep=lambda s: None,
                                     poll_seconds=0, count_elsewhere=False))
    runners[0].submit_ready()
    runners[1].submit_ready()  # every create answered ResourceInUse, adopted by tag
    for runner in runners:
        assert runner.run(max_steps=10).done
        assert set(states(runner).values()) == {"completed"}
    assert len(creates) == 4 and set(creates.values()) == {1}


def test_moto_a_fresh_home_continues_each_trial_from_its_latest_attempt_in_sagemaker(tmp_path, orch_home, bucket):
    """Laptop A stopped both jobs of a sweep, resumed it (-r1), and one -r1 failed and was
    retried (-r2): every trial completed. Laptop B, with a fresh ledger, runs the same sweep:
    it finds each trial's attempts in SageMaker and reports both completed, creating nothing
    (before, it adopted attempt 0 only and reported them stopped)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sagemaker.models import sagemaker_backends

    creates: Counter = Counter()
    text = "sweep: demo\nbase: base.yaml\ngrid:\n  training.batch_size: [16, 32]\nmax_retries: 2\n"
    planned = sweeps.plan(load(tmp_path, text))
    ledger_a = Ledger(tmp_path / "laptop-a.sqlite3")
    backend_a, _ = moto_backend(ledger_a, creates)
    backend_a.stop = lambda name: set_moto_status(name, "Stopped")  # moto has no StopTrainingJob
    runner_a = sweeps.Runner(sweeps.save(planned, ledger_a), backend_a, ledger_a, sleep=lambda s: None,
                             poll_seconds=0, count_elsewhere=False)
    runner_a.submit_ready()
    firsts = sorted(creates)
    for name in firsts:
        set_moto_status(name, "InProgress")
    sweeps.request_stop(ledger_a, runner_a.d.sweep_id)
    assert len(sweeps.stop(runner_a).stopped_jobs) == 2
    sweeps.clear_stop(ledger_a, runner_a.d.sweep_id)
    runner_a.step()  # both resubmitted as -r1 (moto completes them at once)
    failing = firsts[1] + "-r1"
    fake = sagemaker_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].training_jobs[failing]
    fake.training_job_status, fake.failure_reason = "Failed", "InternalServerError: try again"
    assert runner_a.run(max_steps=10).done
    assert {v.job_name: v.state for v in runner_a.views()} == {firsts[0] + "-r1": "completed",
                                                              firsts[1] + "-r2": "completed"}
    made = dict(creates)

    ledger_b = Ledger(tmp_path / "laptop-b.sqlite3")
    backend_b, _ = moto_backend(ledger_b, creates)
    runner_b = sweeps.Runner(sweeps.save(planned, ledger_b), backend_b, ledger_b, sleep=lambda s: None,
                             poll_seconds=0)
    final = runner_b.run(max_steps=5)
    assert final.done and final.counts == {"completed": 2}
    assert {v.job_name: (v.state, v.attempt) for v in runner_b.views()} == {
        firsts[0] + "-r1": ("completed", 1), firsts[1] + "-r2": ("completed", 2)}
    assert dict(creates) == made  # nothing created twice
    rows = {e.job_name: e.state for e in ledger_b.entries(sweep_id=runner_b.d.sweep_id)}
    assert rows == {firsts[0]: "stopped", firsts[1]: "stopped", firsts[0] + "-r1": "completed",
                    firsts[1] + "-r1": "failed", firsts[1] + "-r2": "completed"}
    assert not runner_b.has_work()


@pytest.mark.parametrize("command", ["resume", "run"])
def test_moto_cli_resume_continues_a_stopped_sweep(tmp_path, orch_home, bucket, command):
    """The QA case: a sweep stopped with jobs in flight and trials not yet submitted; `sweep
    resume` (a new process, the real backend), or `sweep run` of its file, submits the
    cancelled trials under their names and the stopped ones as -r1, and ends with every
    trial completed."""
    import os

    ledger = Ledger()
    creates: Counter = Counter()
    backend, _ = moto_backend(ledger, creates)
    definition = sweeps.save(sweeps.plan(load(tmp_path, SWEEP)), ledger)
    runner = sweeps.Runner(definition, backend, ledger, sleep=lambda s: None, poll_seconds=0,
                           count_elsewhere=False)
    runner.submit_ready()
    for name in creates:
        set_moto_status(name, "InProgress")
    backend.stop = lambda name: set_moto_status(name, "Stopped")  # moto has no StopTrainingJob
    sweeps.request_stop(ledger, definition.sweep_id)
    report = sweeps.stop(runner)
    assert len(report.stopped_jobs) == 2 and len(report.cancelled) == 2
    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(orch_home))
    target = definition.sweep_id if command == "resume" else str(tmp_path / "sweep.yaml")
    done = _cli("sweep", command, target, "--poll", "0", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"sweep {definition.sweep_id}: 4 completed" in done.stdout
    for name in report.stopped_jobs:
        assert f"resubmitting as {name}-r1" in done.stdout
    states_now = {e.job_name: e.state for e in ledger.entries(sweep_id=definition.sweep_id)}
    assert {n: states_now[n] for n in report.stopped_jobs} == {n: "stopped" for n in report.stopped_jobs}
    assert all(states_now[n] == "completed" for n in report.cancelled)
    assert all(states_now[n + "-r1"] == "completed" for n in report.stopped_jobs)


# --- end to end on the local backend -------------------------------------------------------------


@pytest.mark.slow
def test_local_sweep_runs_to_completion_and_results_tabulate_it(tmp_path, orch_home):
    import os

    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(orch_home))
    run = subprocess.run([sys.executable, "-m", "orchestrator", "sweep", "run", "configs/sweep-local.yaml",
                          "--poll", "1"], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    sweep_id = re.search(r"sweep (local-[0-9a-f]{8})", run.stderr + run.stdout).group(1)
    ledger = Ledger(orch_home / "ledger.sqlite3")
    entries = ledger.entries(sweep_id=sweep_id)
    assert len(entries) == 4 and {e.state for e in entries} == {"completed"}
    status = subprocess.run([sys.executable, "-m", "orchestrator", "sweep", "status", sweep_id, "--json"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert status.returncode == 0, status.stderr
    assert {t["state"] for t in json.loads(status.stdout)["trials"]} == {"completed"}
    plot = tmp_path / "out.png"
    results = subprocess.run([sys.executable, "-m", "orchestrator", "results", "--sweep", sweep_id, "--plot",
                              str(plot), "--format", "json"], capture_output=True, text=True, timeout=300,
                             cwd=ROOT, env=env)
    assert results.returncode == 0, results.stderr
    rows = json.loads(results.stdout)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert len(rows) == 4
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


LOCAL_BASE = """\
name: fake
backend: local
instance: {type: ml.trn1.2xlarge, count: 1}
model: {arch: vit_tiny_patch16_224, image_size: 32, patch_size: 8, depth: 1, embed_dim: 64, num_heads: 2, num_classes: 10}
training: {runtime: native, steps: 6, warmup_steps: 1, batch_size: 4, precision: fp32, workers_per_node: 1}
data: {source: synthetic, num_workers: 0}
compile_cache: {mode: "off"}
max_run_minutes: 10
"""


def test_cli_detach_on_a_finished_sweep_reports_in_the_foreground_and_status_takes_the_name(
        tmp_path, orch_home, fake_train):
    import os

    path = write(tmp_path, "sweep: done\nbase: base.yaml\ngrid:\n  training.batch_size: [4, 8]\nconcurrency: 2\n",
                 LOCAL_BASE)
    env = dict(os.environ, ORCHESTRATOR_HOME=str(orch_home))
    first = _cli("sweep", "run", str(path), "--poll", "0.2", env=env)
    assert first.returncode == 0, first.stderr
    sweep_id = re.search(r"sweep (done-[0-9a-f]{8}): 2 completed", first.stdout).group(1)
    again = _cli("sweep", "run", str(path), "--detach", env=env)
    assert again.returncode == 0, again.stderr
    assert "running in the background" not in again.stdout
    assert f"sweep {sweep_id}: nothing left to run, so no background runner was started" in again.stderr
    assert f"sweep {sweep_id}: 2 completed" in again.stdout
    assert not (orch_home / "sweeps" / f"{sweep_id}.log").exists()  # no runner was started
    shown = _cli("sweep", "status", "done", "--json", "--no-refresh", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["sweep_id"] == sweep_id


def test_cli_detach_status_and_stop_on_the_local_backend(tmp_path, orch_home, fake_train, monkeypatch):
    """`sweep run --detach` returns at once; the background runner submits up to the cap;
    `sweep stop` ends the runner, stops the jobs in flight and cancels the rest."""
    import os
    import time

    from orchestrator.backends.local import LocalBackend, process_alive

    monkeypatch.setenv("FAKE_TRAIN_SLEEP", "60")
    path = write(tmp_path, "sweep: bg\nbase: base.yaml\ngrid:\n  training.batch_size: [4, 8, 16]\nconcurrency: 2\n",
                 LOCAL_BASE)
    env = dict(os.environ, ORCHESTRATOR_HOME=str(orch_home))
    started = _cli("sweep", "run", str(path), "--detach", "--poll", "0.2", env=env)
    assert started.returncode == 0, started.stderr
    sweep_id = re.search(r"sweep (bg-[0-9a-f]{8}): running in the background \(pid (\d+)\)", started.stdout)
    sweep_id, pid = sweep_id.group(1), int(sweep_id.group(2))
    log = orch_home / "sweeps" / f"{sweep_id}.log"
    assert str(log) in started.stdout

    def trials():
        shown = _cli("sweep", "status", sweep_id, "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        return json.loads(shown.stdout)["trials"]

    deadline = time.monotonic() + 90
    while sum(t["state"] in ("submitted", "running") for t in trials()) < 2:
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.5)
    assert [t["state"] for t in trials()].count("planned") == 1  # the cap holds
    assert process_alive(pid)
    again = _cli("sweep", "resume", sweep_id, env=env)
    assert again.returncode == 2 and "being run by another process" in again.stderr

    stopped = _cli("sweep", "stop", sweep_id, env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert "2 job(s) stopping, 1 trial(s) cancelled" in stopped.stdout
    assert f"continue it with `python -m orchestrator sweep resume {sweep_id}`" in stopped.stdout
    assert {t["state"] for t in trials()} == {"stopped"}
    deadline = time.monotonic() + 30
    while process_alive(pid):
        assert time.monotonic() < deadline, "the detached runner did not exit"
        time.sleep(0.2)
    assert "submitted" in log.read_text() and "stopped (sweep stop)" in log.read_text()  # it ended cleanly
    ledger = Ledger(orch_home / "ledger.sqlite3")
    jobs = [e.job_name for e in ledger.entries(sweep_id=sweep_id) if e.state == "stopped"]
    backend = LocalBackend(ledger=ledger)
    deadline = time.monotonic() + 60
    for name in jobs:
        if (backend.job_dir(name) / "status.json").exists():
            while backend.status(name).status != "stopped":
                assert time.monotonic() < deadline, f"{name} did not stop"
                time.sleep(0.5)


def test_two_detached_runs_of_one_sweep_at_once_start_one_runner_and_the_other_says_so(
        tmp_path, orch_home, fake_train, monkeypatch):
    # QA: both said "running in the background" and exited 0; one runner exited at once and
    # only the sweep's log said why.
    import os
    import time

    from orchestrator.backends.local import process_alive

    monkeypatch.setenv("FAKE_TRAIN_SLEEP", "60")
    path = write(tmp_path, "sweep: twice\nbase: base.yaml\ngrid:\n  training.batch_size: [4, 8]\nconcurrency: 1\n",
                 LOCAL_BASE)
    env = dict(os.environ, ORCHESTRATOR_HOME=str(orch_home), PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "orchestrator", "sweep", "run", str(path), "--detach", "--poll", "0.2"]
    runs = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    done = [(run.wait(timeout=180), *run.communicate()) for run in runs]
    try:
        assert sorted(code for code, _, _ in done) == [0, 2], done
        (_, won, _), = [d for d in done if d[0] == 0]
        (_, _, lost), = [d for d in done if d[0] == 2]
        found = re.search(r"sweep (twice-[0-9a-f]{8}): running in the background \(pid (\d+)\)", won)
        sweep_id, pid = found.group(1), int(found.group(2))
        assert f"error: sweep {sweep_id} is being run by another process on this machine (pid " in lost, lost
        named = int(re.search(r"\(pid (\d+)\)", lost).group(1))
        assert named == pid or not process_alive(named)  # the runner, or the run that held it for a moment
        assert "Traceback" not in lost and process_alive(pid)
        assert sweeps.lock_holder(sweep_id) == pid
    finally:
        stopped = _cli("sweep", "stop", "twice", "--wait", "60", env=env)
        deadline = time.monotonic() + 60
        while any(process_alive(int(p)) for p in re.findall(r"\(pid (\d+)\)", " ".join(d[1] for d in done))):
            assert time.monotonic() < deadline, "the runner did not exit"
            time.sleep(0.2)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@pytest.mark.timeout(120)
def test_a_detached_runner_that_cannot_start_is_reported_by_the_command(tmp_path, orch_home, monkeypatch, capsys):
    from cli_harness import run_cli

    path = write(tmp_path, "sweep: broken\nbase: base.yaml\ngrid:\n  training.batch_size: [4]\n", LOCAL_BASE)
    # The background `sweep resume` ends before it holds the sweep.
    dies = tmp_path / "python"
    dies.write_text("#!/bin/sh\necho 'error: something it could not do'\nexit 3\n")
    dies.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(dies))
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "run", str(path), "--detach")
    assert code == 1 and "Traceback" not in err and "running in the background" not in out
    assert re.search(r"error: the background runner of sweep broken-[0-9a-f]{8} \(pid \d+\) exited at once "
                     r"\(exit code 3\): error: something it could not do\n", err), err
    assert "hint: its log is" in err


# --- the command line: status, resume and stop of a saved sweep ----------------------------------


def _invoke(*args):
    """The CLI in this process (ORCHESTRATOR_HOME from `orch_home`); our errors stay exceptions."""
    from typer.testing import CliRunner

    from orchestrator import cli

    return CliRunner().invoke(cli.app, list(args))


def test_a_sweep_file_names_its_saved_sweep_or_its_scheduled_ticks(tmp_path, orch_home):
    from datetime import datetime, timezone

    from orchestrator import cli

    path = write(tmp_path, "sweep: nightly\nbase: base.yaml\n")
    ledger = Ledger()
    with pytest.raises(InputError) as info:
        cli._sweep_id_of(str(path), ledger)  # never run
    assert info.value.message.startswith(f"{path}: no saved sweep nightly-")
    assert "edited since it ran" in info.value.message and f"sweep run {path}" in info.value.hint
    tick = sweeps.save(sweeps.plan(spec.load_sweep(path), tick=datetime(2026, 11, 30, 2, 39, tzinfo=timezone.utc)),
                       ledger)
    assert tick.sweep_id.endswith("-202611300239")
    assert cli._sweep_id_of(str(path), ledger) == tick.sweep_id  # what `sweep status nightly.yaml` shows
    later = sweeps.save(sweeps.plan(spec.load_sweep(path), tick=datetime(2026, 12, 1, 2, 39, tzinfo=timezone.utc)),
                        ledger)
    with pytest.raises(InputError) as info:
        cli._sweep_id_of(str(path), ledger)
    assert info.value.exit_code == 2 and info.value.message.startswith(f"{path}: ")
    assert tick.sweep_id in info.value.message and later.sweep_id in info.value.message
    path.write_text("sweep: nightly\nbase: base.yaml\ngrid: {training.batch_size: [8]}\n")  # edited since
    with pytest.raises(InputError) as info:
        cli._sweep_id_of(str(path), ledger)
    assert "no saved sweep" in info.value.message and "edited since it ran" in info.value.message
    assert tick.sweep_id in info.value.hint and later.sweep_id in info.value.hint


def test_a_missing_sweep_file_says_what_to_give_instead(orch_home):
    from orchestrator import cli

    with pytest.raises(SpecError) as info:
        cli._sweep_id_of("nope.yaml", Ledger())
    assert info.value.message == "nope.yaml: does not exist" and info.value.exit_code == 2
    assert info.value.hint.endswith("give a sweep id or name instead (`python -m orchestrator sweep status` lists the sweeps)")


@pytest.mark.parametrize("stopped", [True, False])
def test_sigterm_ends_a_runner_like_a_stop_it_noticed(rig, monkeypatch, capsys, stopped):
    """`sweep stop` from another terminal sets the stop flag, then SIGTERMs this machine's
    runner: it ends cleanly (counts, "stopped", exit 0); a SIGTERM alone exits 143."""
    import os
    import signal

    import typer

    from orchestrator import cli

    make, cloud, _ = rig
    runner = make()
    monkeypatch.setattr(cli, "_sweep_backend", lambda definition, ledger: cloud)
    real_status = cloud.status

    def status(name):  # the runner polls its jobs in flight: the signal comes now
        if stopped:
            sweeps.request_stop(runner.ledger, runner.d.sweep_id)
        os.kill(os.getpid(), signal.SIGTERM)
        return real_status(name)

    cloud.status = status

    def fallback(signum, frame):  # without the runner's own handler, SIGTERM would end pytest
        raise AssertionError("SIGTERM reached the default handler")

    previous = signal.signal(signal.SIGTERM, fallback)
    try:
        if stopped:
            cli._drive(runner.d, runner.ledger, poll=0)
        else:
            with pytest.raises(typer.Exit) as info:
                cli._drive(runner.d, runner.ledger, poll=0)
            assert info.value.exit_code == 143
        assert signal.getsignal(signal.SIGTERM) is fallback  # put back as it was
    finally:
        signal.signal(signal.SIGTERM, previous)
    out = capsys.readouterr()
    assert f"sweep {runner.d.sweep_id}: 2 planned, 2 submitted" in out.out
    if stopped:
        assert "stopped (sweep stop)" in out.out and out.err == ""
    else:
        assert "stopped (sweep stop)" not in out.out
        assert f"terminated (SIGTERM); continue with `python -m orchestrator sweep resume {runner.d.sweep_id}`" in out.err


def _local_sweep(tmp_path, trials: str = "[4, 8]") -> tuple[Path, sweeps.Definition]:
    path = write(tmp_path, f"sweep: loc\nbase: base.yaml\ngrid:\n  training.batch_size: {trials}\nconcurrency: 2\n",
                 LOCAL_BASE)
    return path, sweeps.save(sweeps.plan(spec.load_sweep(path)), Ledger())


def test_cli_sweep_stop_from_another_terminal_ends_a_foreground_run_cleanly(
        tmp_path, orch_home, fake_train, monkeypatch):
    """The QA case: `sweep run` in a terminal (rich's live table), `sweep stop` from another
    one: the run ends with exit 0, says it was stopped, and shows the cursor again."""
    import os
    import pty
    import threading
    import time

    from orchestrator.backends.local import LocalBackend

    monkeypatch.setenv("FAKE_TRAIN_SLEEP", "60")
    path, definition = _local_sweep(tmp_path, "[4, 8, 16]")
    env = dict(os.environ, ORCHESTRATOR_HOME=str(orch_home), TERM="xterm-256color")
    master, slave = pty.openpty()
    run = subprocess.Popen([sys.executable, "-m", "orchestrator", "sweep", "run", str(path), "--poll", "0.2"],
                           stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env)
    os.close(slave)
    chunks: list[bytes] = []

    def drain():  # a terminal that is not read from would block the live display
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    ledger = Ledger()
    try:
        deadline = time.monotonic() + 90
        while sum(e.state in ("submitted", "running") for e in ledger.entries(sweep_id=definition.sweep_id)) < 2:
            assert run.poll() is None and time.monotonic() < deadline, b"".join(chunks).decode(errors="replace")
            time.sleep(0.2)
        stopped = _cli("sweep", "stop", definition.sweep_id, env=env)
        assert stopped.returncode == 0, stopped.stderr
        assert "2 job(s) stopping, 1 trial(s) cancelled" in stopped.stdout
        assert run.wait(timeout=30) == 0, b"".join(chunks).decode(errors="replace")
    finally:
        run.kill()
        reader.join(timeout=5)
        os.close(master)
    output = b"".join(chunks).decode(errors="replace")
    assert "stopped (sweep stop)" in output
    assert output.rfind("\x1b[?25h") > output.rfind("\x1b[?25l") >= 0  # the cursor is shown again
    backend = LocalBackend(ledger=ledger)
    deadline = time.monotonic() + 60
    for entry in ledger.entries(sweep_id=definition.sweep_id, states=("stopped",)):
        if (backend.job_dir(entry.job_name) / "status.json").exists():
            while backend.status(entry.job_name).status != "stopped":
                assert time.monotonic() < deadline, f"{entry.job_name} did not stop"
                time.sleep(0.5)


HOLD_RUNNER_LOCK = """
import os, signal, sys, time
from orchestrator import sweep as sweeps
from orchestrator.ledger import Ledger
if sys.argv[2] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with sweeps.runner_lock(sys.argv[1]):
    sweeps.record_runner(Ledger(), sys.argv[1], os.getpid())
    print("holding", flush=True)
    time.sleep(120)
"""


def _runner_stand_in(sweep_id: str, on_sigterm: str) -> subprocess.Popen:
    """A process holding the sweep's runner lock, recorded as its runner, as `sweep run` is."""
    import os

    holder = subprocess.Popen([sys.executable, "-c", HOLD_RUNNER_LOCK, sweep_id, on_sigterm], stdout=subprocess.PIPE,
                              text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert holder.stdout.readline().strip() == "holding"
    return holder


def test_cli_stop_with_no_wait_still_waits_briefly_for_the_runner_it_signalled(tmp_path, orch_home, monkeypatch):
    from orchestrator import cli

    _, definition = _local_sweep(tmp_path)
    holder = _runner_stand_in(definition.sweep_id, "exit")
    try:
        done = _invoke("sweep", "stop", definition.sweep_id, "--wait", "0")
        assert done.exit_code == 0, (done.output, done.exception)
        assert "0 job(s) stopping, 2 trial(s) cancelled" in done.output
        assert holder.wait(timeout=10) == -15
    finally:
        holder.kill()
    # A runner that does not exit in time: exit 1, saying so, and what running it again does.
    monkeypatch.setattr(cli, "_RUNNER_EXIT_SECONDS", 0.5)
    holder = _runner_stand_in(definition.sweep_id, "ignore")
    try:
        done = _invoke("sweep", "stop", definition.sweep_id, "--wait", "0")
    finally:
        holder.kill()
    assert isinstance(done.exception, BackendError) and done.exception.exit_code == 1
    assert f"runner (pid {holder.pid}) was sent SIGTERM but has not exited after 0.5s" in done.exception.message
    assert "the stop flag is set" in done.exception.hint and "once it has exited" in done.exception.hint


def test_cli_stop_of_a_sweep_with_nothing_in_flight_gives_no_resume_advice(tmp_path, orch_home):
    _, definition = _local_sweep(tmp_path)
    ledger = Ledger()
    for entry in ledger.entries(sweep_id=definition.sweep_id):
        ledger.transition(entry.job_name, "completed")
    done = _invoke("sweep", "stop", definition.sweep_id)
    assert done.exit_code == 0, (done.output, done.exception)
    assert f"sweep {definition.sweep_id}: nothing in flight, nothing stopped: every trial has ended" in done.output
    assert "resume" not in done.output and "job(s) stopping" not in done.output


def test_cli_stop_says_when_a_resume_would_run_nothing(rig, monkeypatch):
    # The budget leaves no room to resubmit the stopped job: no "continue it with resume".
    from orchestrator import cli

    make, cloud, _ = rig
    runner = make("sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 2}\n")
    runner.step()
    monkeypatch.setattr(cli, "_sweep_backend", lambda definition, ledger: cloud)
    done = _invoke("sweep", "stop", runner.d.sweep_id)
    assert done.exit_code == 0, (done.output, done.exception)
    assert "1 job(s) stopping" in done.output and "a resume would run nothing (budget or retries used up" in done.output
    assert "continue it with" not in done.output
    roomy = make("sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 100}\n"
                 "grid:\n  training.batch_size: [16, 32]\n")
    roomy.step()
    done = _invoke("sweep", "stop", roomy.d.sweep_id)
    assert f"continue it with `python -m orchestrator sweep resume {roomy.d.sweep_id}`" in done.output


def test_the_runner_says_whether_a_step_would_act(rig):
    make, cloud, _ = rig
    # One trn1.2xlarge hour is bounded at about 2.02 USD: the stopped job's bound is spent, no room for another.
    text = "sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 2}\n"
    runner = make(text)
    assert runner.has_work()  # planned
    runner.step()
    assert runner.has_work()  # in flight
    [job] = cloud.jobs
    _sweep_stop(runner)
    sweeps.clear_stop(runner.ledger, runner.d.sweep_id)
    assert not runner.has_work()  # its resubmission is above the budget...
    assert runner.step().done and list(cloud.jobs) == [job]  # ...and the runner indeed does nothing
    roomy = make(text.replace(": 2}", ": 10}"))  # the same sweep with a raised budget
    assert roomy.d.sweep_id == runner.d.sweep_id and roomy.has_work()
    roomy.step()
    assert sorted(cloud.jobs) == [job, job + "-r1"]
    cloud.stop(job + "-r1")  # `orchestrator stop JOB`: not the sweep's stop
    roomy.step()
    [view] = roomy.views()
    assert view.state == "stopped" and not roomy.has_work()
    assert roomy.step().done and len(cloud.jobs) == 2


def test_cli_detach_with_nothing_the_runner_would_do_starts_no_background_runner(tmp_path, orch_home):
    import os

    path, definition = _local_sweep(tmp_path)
    ledger = Ledger()
    first, second = (e.job_name for e in ledger.entries(sweep_id=definition.sweep_id))
    ledger.transition(first, "completed")
    ledger.transition(second, "stopped", detail="stopped by the user")  # `orchestrator stop JOB`
    done = _cli("sweep", "run", str(path), "--detach", env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert "running in the background" not in done.stdout
    assert f"sweep {definition.sweep_id}: 1 completed, 1 stopped" in done.stdout
    assert not (orch_home / "sweeps" / f"{definition.sweep_id}.log").exists()


def test_resume_help_says_in_plain_words_what_it_submits_again():
    from orchestrator import cli

    text = cli.reflowed(cli.sweep_resume.__doc__)
    assert "stop cancelled are" not in text
    assert "Trials that `sweep stop` cancelled before submission are submitted under their own names" in text


def _column(table: str, index: int) -> str:
    """The text of a rendered table's body column `index`, its lines joined."""
    cells = [line.split("│")[index + 1].strip() for line in table.splitlines() if line.count("│") > index + 1]
    return "".join(cells)


def test_sweep_tables_fold_long_job_names_and_overrides_instead_of_cutting_them(tmp_path, orch_home, monkeypatch):
    from orchestrator import cli

    monkeypatch.setenv("COLUMNS", "60")
    lr = "training.optimizer.lr"
    text = ("sweep: a-rather-long-sweep-name-for-the-nightly-comparison\nbase: base.yaml\n"
            f"grid:\n  training.batch_size: [16, 32]\n  {lr}: [0.000123456, 0.000654321]\n"
            "  training.warmup_steps: [5, 7]\n")
    planned = sweeps.plan(load(tmp_path, text))
    table = cli._plan_table(planned)
    assert "…" not in table
    assert _column(table, 2) == "".join(t.job_name for t in planned.trials)
    overrides = "".join(", ".join(f"{k}={v}" for k, v in t.trial.overrides.items()) for t in planned.trials)
    assert _column(table, 3) == overrides.replace(" ", "")
    sweeps.save(planned, Ledger())
    shown = _invoke("sweep", "status", planned.sweep_id, "--no-refresh")
    assert shown.exit_code == 0, (shown.output, shown.exception)
    assert "…" not in shown.output
    assert _column(shown.output, 2) == "".join(t.job_name for t in planned.trials)
    assert _column(shown.output, 6) == overrides.replace(" ", "")


@pytest.mark.parametrize("command", ["status", "resume", "stop"])
@pytest.mark.parametrize("name", ["a" * 256, "a" * 300 + ".yaml", "x/" + "b" * 256])
def test_a_sweep_name_too_long_for_the_file_system_is_exit_2(orch_home, monkeypatch, capsys, command, name):
    # QA: any name of 256 or more characters reaching the file system was an ENAMETOOLONG traceback.
    from cli_harness import run_cli

    code, out, err = run_cli(monkeypatch, capsys, "sweep", command, name)
    assert code == 2 and out == "" and "Traceback" not in err, err
    assert err.startswith("error: ") and "\nhint: " in err


def test_a_huge_grid_value_is_shortened_in_messages(tmp_path):
    # A 200 KB value was repeated whole in the error that refused it.
    text = f"sweep: demo\nbase: base.yaml\ngrid:\n  training.optimizer.lr: [\"{'9' * 5000}x\"]\n"
    [problem] = problems_of(tmp_path, text)
    assert f"training.optimizer.lr={'9' * 57}... (5001 characters)" in problem.message
    assert len(problem.message) < 300


@pytest.mark.timeout(60)
def test_detach_refuses_a_sweep_log_that_is_a_fifo_instead_of_blocking(tmp_path, orch_home, monkeypatch, capsys):
    import os

    from cli_harness import run_cli

    path = write(tmp_path, "sweep: piped\nbase: base.yaml\ngrid:\n  training.batch_size: [4]\n", LOCAL_BASE)
    definition = sweeps.save(sweeps.plan(spec.load_sweep(path)), Ledger())
    os.mkfifo(sweeps.log_path(definition.sweep_id))
    code, _, err = run_cli(monkeypatch, capsys, "sweep", "run", str(path), "--detach")
    assert code == 2 and "the sweep's log" in err and "is a FIFO (named pipe), not a regular file" in err
