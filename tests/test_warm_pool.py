"""Warm pools: inside the job, the persistent cache directory holds the compile cache and
pip's cache, so a job on a reused instance pulls nothing it already has and starts warm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_harness import Host, make_job

from entrypoints.launcher import environment, persistent_cache
from entrypoints.shared import compile_cache, storage


def _manifest(job: dict, digest: str) -> dict:
    data = storage.open_store(job["compile_cache"]["uri"]).get_bytes(f"{digest}/{compile_cache.MANIFEST}")
    return json.loads(data)["entries"] if data else {}


def test_a_job_given_a_prefilled_persistent_cache_pulls_nothing_and_starts_warm(orch_home, tmp_path, fake_train):
    job = make_job(workers=1)
    pool = tmp_path / "warmpoolcache"  # what SageMaker mounts at /opt/ml/sagemaker/warmpoolcache
    pool.mkdir()
    first = Host(tmp_path / "first", job)
    done = first.run(FAKE_TRAIN_NEW_ENTRY="fxgraph/aa/entry-one", **{persistent_cache.PERSISTENT_CACHE_ENV: str(pool)})
    assert done.returncode == 0, done.stdout + done.stderr
    digest = first.cache_key().digest()
    folder = pool / "orchestrator" / "compile-cache" / digest
    assert first.results["cache"]["persistent_dir"] == str(folder)
    assert (folder / "fxgraph/aa/entry-one/graph.bin").is_file()  # left for the next job, not deleted
    assert "fxgraph/aa/entry-one/graph.bin" in _manifest(job, digest)  # and pushed as ever

    # The next job on the same (reused) instance: a fresh container, the same persistent directory.
    second = Host(tmp_path / "second", job)
    done = second.run(FAKE_TRAIN_NEW_ENTRY="fxgraph/bb/entry-two", **{persistent_cache.PERSISTENT_CACHE_ENV: str(pool)})
    assert done.returncode == 0, done.stdout + done.stderr
    cache = second.results["cache"]
    assert (cache["pull_bytes"], cache["hit_entries"], cache["local_entries"]) == (0, 0, 1)  # nothing downloaded
    assert "fxgraph/aa/entry-one/graph.bin" in second.rank(0)["seen_cache"]  # warm from its first step
    assert second.rank(0)["cache_dir"] == str(folder)
    assert second.rank(0)["env"]["PIP_CACHE_DIR"] == str(pool / "pip")
    # What it compiled anew still goes to the store for every other instance.
    assert cache["new_entries"] == 1 and "fxgraph/bb/entry-two/graph.bin" in _manifest(job, digest)
    assert "warm pool: persistent cache" in done.stdout


def test_without_a_persistent_directory_nothing_changes(orch_home, tmp_path, fake_train):
    host = Host(tmp_path / "h", make_job(workers=1))
    done = host.run(FAKE_TRAIN_NEW_ENTRY="fxgraph/aa/x", **{persistent_cache.PERSISTENT_CACHE_ENV: str(tmp_path / "absent")})
    assert done.returncode == 0, done.stdout + done.stderr
    cache = host.results["cache"]
    assert cache["persistent_dir"] is None and cache["local_entries"] == 0
    assert host.rank(0)["env"]["PIP_CACHE_DIR"] is None
    assert not Path(host.rank(0)["cache_dir"]).exists()  # the job's own temporary cache dir, removed


def test_persistent_root_takes_the_variable_then_the_documented_path(tmp_path):
    opt_ml = tmp_path / "opt-ml"
    assert persistent_cache.persistent_root({}, opt_ml) is None
    mounted = opt_ml / "sagemaker" / "warmpoolcache"
    mounted.mkdir(parents=True)
    assert persistent_cache.persistent_root({}, opt_ml) == mounted
    named = tmp_path / "named"
    named.mkdir()
    assert persistent_cache.persistent_root({persistent_cache.PERSISTENT_CACHE_ENV: str(named)}, opt_ml) == named
    assert persistent_cache.persistent_root({persistent_cache.PERSISTENT_CACHE_ENV: str(tmp_path / "gone")}, opt_ml) == mounted


def test_only_the_orchestrators_default_neuron_cache_dir_moves_to_the_persistent_one():
    from orchestrator import catalog

    assert persistent_cache.DEFAULT_NEURON_CACHE_DIR == catalog.NEURON_CACHE_DIR
    assert persistent_cache.replaceable_cache_dir(Path(catalog.NEURON_CACHE_DIR))
    assert not persistent_cache.replaceable_cache_dir(Path("/home/me/my-cache"))
    env = {"NEURON_CC_FLAGS": f"--model-type=transformer --cache_dir={catalog.NEURON_CACHE_DIR} -O1"}
    moved = environment.with_cache_dir("xla", environment.without_cache_dir("xla", env), Path("/pool/cc/abc"))
    assert moved["NEURON_CC_FLAGS"] == "--model-type=transformer -O1 --cache_dir=/pool/cc/abc"


# --- the laptop side: spec, doctor, request, cost, sweep order, status ------------------------------

SAGEMAKER = (Path(__file__).resolve().parents[1] / "configs" / "vit-trn1-2xlarge.yaml").read_text()


def _spec(instance: str = "{type: ml.trn1.2xlarge, count: 1, keep_alive_minutes: 30}", text: str = SAGEMAKER):
    from orchestrator import spec

    return spec.loads(text.replace("{type: ml.trn1.2xlarge, count: 1, spot: false}", instance), "job.yaml")


def _rules(loaded) -> dict[str, str]:
    from orchestrator import doctor

    return {f.rule: f.severity for f in doctor.findings(loaded)}


def test_keep_alive_plans_a_warm_pool_and_tensorboard_free_request(orch_home):
    from orchestrator import request

    prepared = request.prepare(_spec())
    assert prepared.request["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 1800
    rules = _rules(prepared.spec)
    assert rules.get("N051-warm-pool-quota") == "info" and "N050-keep-alive-too-long" not in rules
    quota = next(f for f in prepared.findings if f.rule == "N051-warm-pool-quota")
    assert "ml.trn1.2xlarge for training warm pool usage" in quota.message
    # Off by default: no keep-alive in the request, no finding.
    plain = request.prepare(_spec("{type: ml.trn1.2xlarge, count: 1}"))
    assert "KeepAlivePeriodInSeconds" not in plain.request["ResourceConfig"]
    assert not any(f.rule.startswith("N05") for f in plain.findings)


def test_the_keep_alive_names_botocores_field_within_its_limits():
    """The field and its bounds as botocore's SageMaker model has them; the doctor's 60 minutes
    is the developer guide's maximum, inside the model's."""
    import botocore.session

    from orchestrator.doctor import keep_alive as rules

    model = botocore.session.get_session().get_service_model("sagemaker")
    member = model.shape_for("ResourceConfig").members["KeepAlivePeriodInSeconds"]
    assert member.type_name == "integer" and member.metadata["min"] == 0
    assert rules.MAX_KEEP_ALIVE_MINUTES * 60 <= member.metadata["max"]
    assert set(model.shape_for("WarmPoolStatus").members) >= {"Status", "ResourceRetainedBillableTimeInSeconds",
                                                              "ReusedByJob"}


def test_more_than_60_minutes_or_with_spot_is_refused_negative_is_a_spec_error(orch_home, tmp_path, monkeypatch,
                                                                               capsys):
    from cli_harness import run_cli

    from orchestrator.errors import SpecError

    assert _rules(_spec("{type: ml.trn1.2xlarge, count: 1, keep_alive_minutes: 61}"))[
        "N050-keep-alive-too-long"] == "error"
    spot = _spec("{type: ml.trn1.2xlarge, count: 1, spot: true, max_wait_minutes: 240, keep_alive_minutes: 5}")
    assert _rules(spot)["N053-warm-pool-spot"] == "error"
    import pytest

    with pytest.raises(SpecError, match="keep_alive_minutes"):
        _spec("{type: ml.trn1.2xlarge, count: 1, keep_alive_minutes: -1}")
    path = tmp_path / "job.yaml"
    path.write_text(SAGEMAKER.replace("spot: false}", "spot: false, keep_alive_minutes: 90}"))
    code, _, err = run_cli(monkeypatch, capsys, "plan", str(path))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "keep_alive_minutes" in text)
    assert code == 2 and "N050-keep-alive-too-long" in err and f"job.yaml:{line}:" in err


def test_keep_alive_on_the_local_backend_is_a_note_ignored(orch_home):
    local = (Path(__file__).resolve().parents[1] / "configs" / "local-tiny.yaml").read_text()
    loaded = _spec("{type: ml.trn1.2xlarge, count: 1, keep_alive_minutes: 10}",
                   local.replace("{type: ml.trn1.2xlarge, count: 1}", "{type: ml.trn1.2xlarge, count: 1, spot: false}"))
    assert _rules(loaded) == {"N052-keep-alive-local": "info"}


def test_the_cost_bound_counts_the_keep_alive(orch_home):
    from orchestrator import cost

    plain = cost.estimate(_spec("{type: ml.trn1.2xlarge, count: 1}"))
    kept = cost.estimate(_spec())
    assert kept.keep_alive_hours == 0.5 and plain.keep_alive_hours == 0
    # max_run_minutes 120 + 30 kept: 150 minutes billed at most.
    assert kept.usd_max == plain.usd_max * 150 / 120
    assert kept.keep_alive_usd == plain.usd_max * 30 / 120
    assert "30 h" not in kept.describe() and "0.5 h warm pool" in kept.describe()


SWEEP = """\
sweep: pools
base: base.yaml
grid:
  instance.type: [ml.trn1.2xlarge, ml.trn1.32xlarge]
  training.optimizer.lr: [1.0e-4, 1.0e-3, 1.0e-2]
concurrency: {concurrency}
"""


def test_a_sweep_chains_trials_that_share_a_warm_pool_and_counts_one_keep_alive_per_chain(orch_home, tmp_path):
    from orchestrator import cost
    from orchestrator import spec as specs
    from orchestrator import sweep as sweeps

    base = SAGEMAKER.replace("spot: false}", "spot: false, keep_alive_minutes: 30}").replace(
        "budget: {max_cost_usd: 40}", "")
    (tmp_path / "base.yaml").write_text(base)
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.format(concurrency=1))
    plan = sweeps.plan(specs.load_sweep(path))
    # Each type's trials run one after another (whatever order the grid expands in).
    types = [t.trial.spec.instance.type for t in plan.trials]
    assert types == ["ml.trn1.2xlarge"] * 3 + ["ml.trn1.32xlarge"] * 3
    small = cost.estimate(plan.trials[0].trial.spec)
    big = cost.estimate(plan.trials[3].trial.spec)
    runs = 3 * (small.usd_max - small.keep_alive_usd) + 3 * (big.usd_max - big.keep_alive_usd)
    # One chain per instance type at concurrency 1: one keep-alive each, not six.
    assert plan.total_usd == pytest.approx(runs + small.keep_alive_usd + big.keep_alive_usd)
    path.write_text(SWEEP.format(concurrency=2))
    two = sweeps.plan(specs.load_sweep(path))
    assert two.total_usd == pytest.approx(runs + 2 * small.keep_alive_usd + 2 * big.keep_alive_usd)


def test_trials_without_a_warm_pool_keep_their_order():
    from orchestrator import warm_pool as pools

    items = [("a", None), ("b", "k1"), ("c", None), ("d", "k2"), ("e", "k1"), ("f", "k2")]
    assert [i for i, _ in pools.grouped(items, lambda item: item[1])] == ["a", "b", "e", "c", "d", "f"]
    request = {"RoleArn": "r", "ResourceConfig": {"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1,
                                                  "VolumeSizeInGB": 100, "KeepAlivePeriodInSeconds": 600}}
    assert pools.pool_key(request) == pools.pool_key({**request, "HyperParameters": {"x": "1"}})
    assert pools.pool_key(request) != pools.pool_key({**request, "RoleArn": "other"})
    assert pools.pool_key({"ResourceConfig": {"InstanceType": "ml.trn1.2xlarge"}}) is None


def test_status_shows_the_warm_pool():
    from orchestrator.backends.sagemaker import SageMakerBackend
    from orchestrator.cli.job_view import status_lines

    described = {"TrainingJobName": "j-1", "TrainingJobStatus": "Completed", "SecondaryStatus": "Completed",
                 "ResourceConfig": {"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1,
                                    "KeepAlivePeriodInSeconds": 1800},
                 "WarmPoolStatus": {"Status": "Reused", "ResourceRetainedBillableTimeInSeconds": 95,
                                    "ReusedByJob": "j-2"}}
    st = SageMakerBackend._job_status(None, described, {})
    assert (st.warm_pool, st.warm_pool_retained_s, st.warm_pool_reused_by) == ("Reused", 95, "j-2")
    assert "warm pool Reused, kept 95 s (billed), reused by j-2" in status_lines(st)


def test_a_sweep_grouping_trials_by_pool_reorders_an_interleaved_grid(orch_home, tmp_path):
    from orchestrator import spec as specs
    from orchestrator import sweep as sweeps

    base = SAGEMAKER.replace("spot: false}", "spot: false, keep_alive_minutes: 30}").replace(
        "budget: {max_cost_usd: 40}", "")
    (tmp_path / "base.yaml").write_text(base)
    path = tmp_path / "sweep.yaml"
    # The type varies fastest: expansion interleaves the two types; the plan does not.
    path.write_text("sweep: mix\nbase: base.yaml\ngrid:\n  training.optimizer.lr: [1.0e-4, 1.0e-3]\n"
                    "  instance.type: [ml.trn1.2xlarge, ml.trn1.32xlarge]\nconcurrency: 1\n")
    plan = sweeps.plan(specs.load_sweep(path))
    assert [t.trial.index for t in plan.trials] == [0, 2, 1, 3]
    assert [t.trial.spec.instance.type for t in plan.trials] == ["ml.trn1.2xlarge"] * 2 + ["ml.trn1.32xlarge"] * 2
