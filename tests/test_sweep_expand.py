"""Sweeps: the sweep spec's located errors, trial expansion and identity (`sweep.expand`)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sweep_fakes import (
    BASE,
    SWEEP,
    line_of,
    load,
    problems_of,
    write,
)

from orchestrator import spec
from orchestrator import sweep as sweeps
from orchestrator.errors import SpecError

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
    ('"abc"', "expected a number, got the text 'abc'"),
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


def test_empty_and_dot_variant_keys_are_not_fields_not_duplicates(tmp_path):
    """Issue 22, smaller findings: keys '' and '.' were reported as each other's duplicate axis."""
    text = SWEEP.split("grid:")[0] + "variants:\n  - {'': 1, '.': 2}\n"
    problems = problems_of(tmp_path, text)
    assert not any("duplicate axis" in p.message for p in problems)
    assert {p.path for p in problems if "empty part" in p.message} == {"", "."}


def test_a_failover_type_listed_twice_is_refused(tmp_path):
    """Issue 22, smaller findings: duplicate failover types were accepted."""
    text = SWEEP + "failover:\n  instance.type: [ml.trn1.32xlarge, ml.trn1n.32xlarge, ml.trn1.32xlarge]\n"
    [problem] = problems_of(tmp_path, text)
    assert "already in the failover order (item 1)" in problem.message and problem.path == "failover.instance.type"
