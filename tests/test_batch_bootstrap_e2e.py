"""The Batch path end to end without AWS: a batch spec's exact SubmitJob request is run as an
ECS task would run it, through the training image's start script (`eval "$@"`), against S3 on
a loopback moto server: the bootstrap fetches the uploaded source archive, lays out /opt/ml,
execs launch.py, and a tiny ViT trains to the end and writes results.json where `results`
finds it, priced by the EC2 price."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from job_waits import patience

from orchestrator import doctor, request, results, spec
from orchestrator.backends.local import batch_task as local_batch

BUCKET = "batch-e2e-bucket"
# Native eager PyTorch, a one-block ViT on 32x32 synthetic images (as configs/local-tiny.yaml),
# with the workers the doctor wants on inf2.xlarge (N004: one per NeuronCore, 2) as CPU processes.
# `submit --local` runs such a spec against the local store (tests/test_local_batch.py); this test
# keeps the s3:// fetch of the bootstrap, against S3 on moto.
SPEC = f"""\
name: batch-e2e
backend: batch
region: us-east-1
instance: {{type: inf2.xlarge}}
model: {{arch: vit_tiny_patch16_224, patch_embed: linear, image_size: 32, patch_size: 8, depth: 1,
        embed_dim: 64, num_heads: 2, num_classes: 10}}
training: {{runtime: native, steps: 3, warmup_steps: 1, batch_size: 4, precision: fp32, log_every: 1}}
data: {{source: synthetic, num_workers: 0}}
compile_cache: {{mode: "off"}}
output: {{uri: s3://{BUCKET}/jobs}}
max_run_minutes: 10
"""
def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_the_submitjob_request_trains_a_tiny_vit_through_the_bootstrap(moto_server, orch_home, tmp_path, monkeypatch):
    monkeypatch.delenv("ORCHESTRATOR_TRAIN_MODULE", raising=False)
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    prepared = request.prepare(spec.loads(SPEC, str(tmp_path / "job.yaml")))
    assert not doctor.errors(prepared.findings)  # the spec the real submit would send
    bucket, key = prepared.source_uri[5:].split("/", 1)
    s3.put_object(Bucket=bucket, Key=key, Body=prepared.archive)  # what submit uploads

    overrides = prepared.request["containerOverrides"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "ORCHESTRATOR_"))}
    # The container's /opt/ml is this test's folder: the request's SM_* paths are moved there.
    base = str(tmp_path / "opt-ml")
    env.update({e["name"]: e["value"].replace("/opt/ml", base) if e["name"].startswith("SM_") else e["value"]
                for e in overrides["environment"]})
    env.update(SAGEMAKER_BASE_DIR=base, ORCHESTRATOR_SM_TOOLKIT="off", ORCHESTRATOR_MASTER_PORT=str(_free_port()),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               ORCHESTRATOR_HOME=str(orch_home))
    # The local backend's stand-in for the image's start script (eval "$@").
    (tmp_path / "start_with_right_hostname.sh").write_text(local_batch.START_SCRIPT)
    done = subprocess.run(["bash", "-m", str(tmp_path / "start_with_right_hostname.sh"), *overrides["command"]],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=patience(300))
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

    doc = json.loads(s3.get_object(Bucket=BUCKET, Key=f"jobs/results/{prepared.job_name}/results.json")["Body"].read())
    assert (doc["status"], doc["steps_done"], doc["backend"]) == ("completed", 3, "batch")
    assert doc["instance"]["type"] == "inf2.xlarge" and doc["final_loss"] is not None
    assert (tmp_path / "opt-ml" / "code" / "launch.py").is_file()

    rows = {r.job: r for r in results.collect(f"s3://{BUCKET}/jobs", workers=1).rows}
    row = rows[prepared.job_name]
    assert row.status == "completed" and row.backend == "batch"
    assert row.price_per_hour == pytest.approx(0.7582) and row.price_verified
