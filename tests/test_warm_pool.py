"""Warm pools: inside the job, the persistent cache directory holds the compile cache and
pip's cache, so a job on a reused instance pulls nothing it already has and starts warm."""

from __future__ import annotations

import json
from pathlib import Path

from launch_harness import Host, make_job

from entrypoints import compile_cache, environment, storage, warm_pool


def _manifest(job: dict, digest: str) -> dict:
    data = storage.open_store(job["compile_cache"]["uri"]).get_bytes(f"{digest}/{compile_cache.MANIFEST}")
    return json.loads(data)["entries"] if data else {}


def test_a_job_given_a_prefilled_persistent_cache_pulls_nothing_and_starts_warm(orch_home, tmp_path, fake_train):
    job = make_job(workers=1)
    pool = tmp_path / "warmpoolcache"  # what SageMaker mounts at /opt/ml/sagemaker/warmpoolcache
    pool.mkdir()
    first = Host(tmp_path / "first", job)
    done = first.run(FAKE_TRAIN_NEW_ENTRY="fxgraph/aa/entry-one", **{warm_pool.PERSISTENT_CACHE_ENV: str(pool)})
    assert done.returncode == 0, done.stdout + done.stderr
    digest = first.cache_key().digest()
    folder = pool / "orchestrator" / "compile-cache" / digest
    assert first.results["cache"]["persistent_dir"] == str(folder)
    assert (folder / "fxgraph/aa/entry-one/graph.bin").is_file()  # left for the next job, not deleted
    assert "fxgraph/aa/entry-one/graph.bin" in _manifest(job, digest)  # and pushed as ever

    # The next job on the same (reused) instance: a fresh container, the same persistent directory.
    second = Host(tmp_path / "second", job)
    done = second.run(FAKE_TRAIN_NEW_ENTRY="fxgraph/bb/entry-two", **{warm_pool.PERSISTENT_CACHE_ENV: str(pool)})
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
    done = host.run(FAKE_TRAIN_NEW_ENTRY="fxgraph/aa/x", **{warm_pool.PERSISTENT_CACHE_ENV: str(tmp_path / "absent")})
    assert done.returncode == 0, done.stdout + done.stderr
    cache = host.results["cache"]
    assert cache["persistent_dir"] is None and cache["local_entries"] == 0
    assert host.rank(0)["env"]["PIP_CACHE_DIR"] is None
    assert not Path(host.rank(0)["cache_dir"]).exists()  # the job's own temporary cache dir, removed


def test_persistent_root_takes_the_variable_then_the_documented_path(tmp_path):
    opt_ml = tmp_path / "opt-ml"
    assert warm_pool.persistent_root({}, opt_ml) is None
    mounted = opt_ml / "sagemaker" / "warmpoolcache"
    mounted.mkdir(parents=True)
    assert warm_pool.persistent_root({}, opt_ml) == mounted
    named = tmp_path / "named"
    named.mkdir()
    assert warm_pool.persistent_root({warm_pool.PERSISTENT_CACHE_ENV: str(named)}, opt_ml) == named
    assert warm_pool.persistent_root({warm_pool.PERSISTENT_CACHE_ENV: str(tmp_path / "gone")}, opt_ml) == mounted


def test_only_the_orchestrators_default_neuron_cache_dir_moves_to_the_persistent_one():
    from orchestrator import catalog

    assert warm_pool.DEFAULT_NEURON_CACHE_DIR == catalog.NEURON_CACHE_DIR
    assert warm_pool.replaceable_cache_dir(Path(catalog.NEURON_CACHE_DIR))
    assert not warm_pool.replaceable_cache_dir(Path("/home/me/my-cache"))
    env = {"NEURON_CC_FLAGS": f"--model-type=transformer --cache_dir={catalog.NEURON_CACHE_DIR} -O1"}
    moved = environment.with_cache_dir("xla", environment.without_cache_dir("xla", env), Path("/pool/cc/abc"))
    assert moved["NEURON_CC_FLAGS"] == "--model-type=transformer -O1 --cache_dir=/pool/cc/abc"
