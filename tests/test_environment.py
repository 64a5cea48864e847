"""entrypoints.launcher.environment: what every rank's environment holds (EFA, compile cache dir, compile pool)."""

from __future__ import annotations

from pathlib import Path

from launch_harness import contract_for, make_job

from entrypoints.launcher import environment
from entrypoints.shared import contract


def test_efa_variables_for_multi_node_jobs_on_efa_instances_only(orch_home):
    from orchestrator import catalog

    with_efa = {t for t in catalog.training_instance_types() if (facts := catalog.instance(t)) and facts.efa_gbps > 0}
    assert set(environment.EFA_INSTANCE_TYPES) == with_efa
    two = ["algo-1", "algo-2"]
    for itype in environment.EFA_INSTANCE_TYPES:
        job = make_job(itype=itype, count=2, workers=1)
        env = environment.runtime_environment(job, contract_for(two, "algo-2", itype), {"PATH": "/bin"})
        for key, value in contract.EFA_ENV.items():
            assert env[key] == value
    single = environment.runtime_environment(make_job(itype="ml.trn1n.32xlarge", workers=1),
                                        contract_for(["algo-1"], "algo-1"), {})
    assert "FI_PROVIDER" not in single
    small = environment.runtime_environment(make_job(workers=1), contract_for(two, "algo-1", "ml.trn1.2xlarge"), {})
    assert "FI_PROVIDER" not in small
    job = make_job(itype="ml.trn2.48xlarge", count=2, workers=1)
    job["environment"] = {"FI_PROVIDER": "tcp"}
    assert environment.runtime_environment(job, contract_for(two, "algo-1"), {})["FI_PROVIDER"] == "tcp"


def test_cache_dir_settings_per_runtime(tmp_path):
    xla = environment.with_cache_dir("xla", {"NEURON_CC_FLAGS": "--model-type=transformer"}, tmp_path)
    assert xla["NEURON_CC_FLAGS"] == f"--model-type=transformer --cache_dir={tmp_path}"
    assert "TORCHINDUCTOR_CACHE_DIR" not in xla
    mine = {"NEURON_CC_FLAGS": "--cache_dir=/mine -O1"}
    assert environment.with_cache_dir("xla", mine, tmp_path) == mine
    assert environment.cache_directory("xla", mine) == (Path("/mine"), False)
    native = environment.with_cache_dir("native", {}, tmp_path)
    assert native["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path)
    assert native["TRITON_CACHE_DIR"] == str(tmp_path / "triton")
    fresh, ours = environment.cache_directory("native", {})
    try:
        assert ours and fresh.is_dir() and not any(fresh.iterdir())
        again, _ = environment.cache_directory("native", {})
        assert again != fresh
        again.rmdir()
    finally:
        fresh.rmdir()


def test_compile_pool_is_the_ranks_share_of_the_host():
    assert environment.with_compile_threads("native", {}, 8, 2)["TORCHINDUCTOR_COMPILE_THREADS"] == "4"
    assert environment.with_compile_threads("native", {}, 2, 4)["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    mine = {"TORCHINDUCTOR_COMPILE_THREADS": "7"}
    assert environment.with_compile_threads("native", mine, 2, 2) == mine
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in environment.with_compile_threads("xla", {}, 8, 2)
