"""Plan forecasts: what the compile cache holds for a job's key, and duration and cost from an
earlier completed run of the same spec."""

from __future__ import annotations

import json
from pathlib import Path

from cli_harness import run_cli
from launch_harness import SPEC, Host, make_job

ROOT = Path(__file__).resolve().parents[1]


def test_plan_forecasts_from_an_earlier_run_and_the_cache_manifest(orch_home, tmp_path, fake_train, monkeypatch,
                                                                    capsys):
    spec_text = SPEC.format(name="fc", workers=1, mode="tarball", itype="ml.trn1.2xlarge", count=1, push=60)
    path = tmp_path / "job.yaml"
    path.write_text(spec_text)
    code, out, err = run_cli(monkeypatch, capsys, "plan", str(path))
    assert code == 0, err
    assert "forecast: no completed run of this spec yet" in out
    assert "compile cache: no entries for this job's key yet" in out

    job = make_job(name="fc", workers=1)
    host = Host(tmp_path / "ran", job)
    done = host.run(FAKE_TRAIN_NEW_ENTRY="fxgraph/aa/entry-one")
    assert done.returncode == 0, done.stdout + done.stderr
    ran = host.results
    code, out, err = run_cli(monkeypatch, capsys, "plan", str(path))
    assert code == 0, err
    assert f"forecast: ~{ran['duration_s']:.0f} s, from the completed run {job['job_name']} of the same spec" in out
    assert "compile cache: 1 entries" in out and f"the key of its previous run {ran['cache']['key']}" in out
    code, out, _ = run_cli(monkeypatch, capsys, "plan", str(path), "--json")
    predicted = json.loads(out)["forecast"]
    assert predicted["previous_job"] == job["job_name"] and predicted["duration_s"] == ran["duration_s"]
    assert predicted["usd"] is None  # a local job costs nothing
    assert predicted["cache"]["entries"] == 1 and predicted["cache"]["from_previous_run"] is True

    # Another spec (more steps) with the same runtime and world size: no run of its own yet, but
    # the cache's matching key already holds entries for it.
    path.write_text(spec_text.replace("steps: 12", "steps: 13"))
    code, out, err = run_cli(monkeypatch, capsys, "plan", str(path))
    assert code == 0, err
    assert "forecast: no completed run of this spec yet" in out
    assert f"under a matching key {ran['cache']['key']}" in out


def test_plan_reads_no_s3_store_unless_asked(orch_home, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("plan must not call AWS without --forecast")

    monkeypatch.setattr("orchestrator.aws.client", refuse)
    code, out, err = run_cli(monkeypatch, capsys, "plan", str(ROOT / "configs" / "vit-trn1-2xlarge.yaml"))
    assert code == 0, err
    assert "forecast: not read (s3:// stores are read with --forecast)" in err


def test_sweep_plan_forecasts_its_trials(orch_home, tmp_path, monkeypatch, capsys):
    from sweep_fakes import LOCAL_BASE, write

    path = write(tmp_path, "sweep: fc\nbase: base.yaml\ngrid:\n  training.batch_size: [4, 8]\n", LOCAL_BASE)
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "plan", str(path))
    assert code == 0, err
    assert "forecast: none of the 2 trials has a completed run yet" in out
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "plan", str(path), "--json")
    assert all(t["forecast"]["previous_job"] is None for t in json.loads(out)["trials"])


def test_a_plain_sweep_plan_reads_no_s3_store_a_variant_names(orch_home, tmp_path, monkeypatch, capsys, moto_server):
    """QA: a variant setting s3:// URIs over a local base made `sweep plan` list them (two
    ListObjectsV2), though a plain plan promises no AWS call; with --forecast it reads them."""
    import boto3
    import botocore.handlers
    from sweep_fakes import LOCAL_BASE, write

    sent: list[str] = []
    monkeypatch.setattr(botocore.handlers, "BUILTIN_HANDLERS", [
        *botocore.handlers.BUILTIN_HANDLERS, ("before-parameter-build", lambda model, **_: sent.append(model.name))])
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # sessions made from here on carry the recorder
    boto3.client("s3").create_bucket(Bucket="fc-bucket")
    sent.clear()
    sweep = ("sweep: fc\nbase: base.yaml\nvariants:\n  - {training.batch_size: 8}\n"
             "  - {output.uri: 's3://fc-bucket/jobs', compile_cache.uri: 's3://fc-bucket/cache', "
             "compile_cache.mode: tarball}\n")
    path = write(tmp_path, sweep, LOCAL_BASE)
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "plan", str(path))
    assert code == 0, err
    assert sent == []
    assert "forecast: 1 of 2 trials not read (their s3:// stores are read with --forecast)" in out
    assert "forecast: none of the 1 trials has a completed run yet" in out
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "plan", str(path), "--forecast")
    assert code == 0, err
    assert "ListObjectsV2" in sent
    assert "forecast: none of the 2 trials has a completed run yet" in out


def _no_credentials(monkeypatch) -> None:
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(variable, raising=False)


def test_plan_forecast_without_credentials_says_it_could_not_read_the_stores(orch_home, monkeypatch, capsys,
                                                                             moto_server):
    """Not "no completed run yet" and "no entries yet" first (issue 22): nothing was read."""
    _no_credentials(monkeypatch)
    code, out, err = run_cli(monkeypatch, capsys, "plan", str(ROOT / "configs" / "vit-trn1-2xlarge.yaml"),
                             "--forecast")
    assert code == 0, err
    assert "no completed run" not in out and "no entries" not in out
    assert ("forecast: could not read the results store s3://orchestrator-example-bucket/jobs: " in out
            and "so earlier runs are unknown" in out)
    assert "compile cache: could not read the store s3://orchestrator-example-bucket/compile-cache: " in out
    assert out.count("no AWS credentials: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") == 2
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "plan", str(ROOT / "configs" / "sweep-instances.yaml"),
                             "--forecast")
    assert code == 0, err
    assert "has a completed run" not in out and "no entries" not in out
    assert "forecast: could not read the results store s3://orchestrator-example-bucket/jobs: " in out


def test_a_cache_that_is_off_is_said_to_be_off(orch_home, tmp_path, monkeypatch, capsys):
    from sweep_fakes import LOCAL_BASE, write

    code, out, err = run_cli(monkeypatch, capsys, "plan", str(ROOT / "configs" / "local-tiny.yaml"))
    assert code == 0, err
    assert "compile cache: off (compile_cache.mode: off): every run compiles" in out and "no entries" not in out
    path = write(tmp_path, "sweep: cacheoff\nbase: base.yaml\ngrid:\n  compile_cache.mode: ['off', tarball]\n", LOCAL_BASE)
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "plan", str(path))
    assert code == 0, err
    assert "compile cache: off for 1 of 2 trials (compile_cache.mode: off)" in out
    assert "compile cache: no entries for these trials' keys yet" in out
