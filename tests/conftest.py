"""Shared fixtures. AWS is faked by moto on 127.0.0.1 only, with fake credentials.

- `orch_home`: a fresh ORCHESTRATOR_HOME per test (ledger and local store live there).
- `aws_env`: fake credentials and region; no endpoint (use with `mock_aws`).
- `moto_server`: one ThreadedMotoServer on 127.0.0.1 per session; the test's environment
  points every boto3 client at it through botocore's own AWS_ENDPOINT_URL. State is reset
  before each test that uses it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import moto_shim
import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The sweep tests' fixtures (`rig`, `bucket`), shared by their modules; the AWS contract check
# on every call the tests make (aws_contract_hook).
pytest_plugins = ["sweep_fakes", "aws_contract_hook", "mlflow_server"]

# Fuzzing (tests marked `fuzz`): 100 examples a test in `make test`, 700 in `make test-slow`
# (HYPOTHESIS_PROFILE=full). Derandomized either way, so a run is repeatable.
settings.register_profile("fast", max_examples=100)
settings.register_profile("full", max_examples=700)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


def pytest_configure(config):
    """Each test process (each pytest-xdist worker too) gets an ORCHESTRATOR_HOME of its own, for
    the tests that use the home without the `orch_home` fixture: never the developer's."""
    import shutil
    import tempfile

    home = tempfile.mkdtemp(prefix=f"orch-home-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-")
    os.environ["ORCHESTRATOR_HOME"] = home
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))


FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    # Never read the developer's real profile or config.
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.fixture(autouse=True)
def _no_real_aws(monkeypatch):
    """Every test runs with fake credentials and no endpoint but what a fixture sets."""
    for key, value in FAKE_AWS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


@pytest.fixture
def orch_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "orch-home"
    home.mkdir()
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(home))
    return home


@pytest.fixture
def aws_env(monkeypatch):
    for key, value in FAKE_AWS.items():
        monkeypatch.setenv(key, value)
    return FAKE_AWS


@pytest.fixture(scope="session")
def _moto_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    assert host == "127.0.0.1"
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def moto_server(_moto_server, monkeypatch) -> str:
    """The moto server's URL, with AWS_ENDPOINT_URL set to it and moto's state reset."""
    import urllib.request

    monkeypatch.setenv("AWS_ENDPOINT_URL", _moto_server)
    request = urllib.request.Request(f"{_moto_server}/moto-api/reset", method="POST")
    urllib.request.urlopen(request, timeout=10).read()
    return _moto_server


@pytest.fixture
def moto_change_set_outputs(monkeypatch):
    """moto's CloudFormation change sets and updates as CloudFormation's (tests/moto_shim.py)."""
    moto_shim.cloudformation_change_set_outputs(monkeypatch)


FAKE_TRAIN_SOURCE = '''
"""A stand-in for entrypoints.trainer.train: the launcher's contract without torch.

Writes <stats-dir>/rank-<RANK>.json with fixed step times, records what it saw at start
(the compile cache dir's files, some variables), and obeys:
FAKE_TRAIN_FAIL_RANK (that rank raises), FAKE_TRAIN_NEW_ENTRY (a cache entry name written
into the compile cache dir at start), FAKE_TRAIN_SLEEP (seconds, after that, then continue).
Like train.py, the host's first rank reports progress when ORCHESTRATOR_PROGRESS_REPORT_S is set:
once "warm" (steps_done FAKE_TRAIN_BEAT_STEPS, default 3, after the first entry), then
FAKE_TRAIN_LATER_ENTRY (another entry) is written FAKE_TRAIN_LATER_AFTER seconds later.
FAKE_TRAIN_IGNORE_SIGTERM makes the rank deaf to torchrun's stop. In neuron_parallel_compile's
graph-extraction mode (NEURON_EXTRACT_GRAPHS_ONLY=1) rank 0 writes FAKE_TRAIN_EXTRACT_GRAPH
(a `neuronxcc-<v>/MODULE_<n>` folder) with the extracted graph, model.hlo.pb, and nothing else.
"""
import argparse, json, os, pathlib, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--job", required=True)
parser.add_argument("--stats-dir", required=True)
args = parser.parse_args()
rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
flags = os.environ.get("NEURON_CC_FLAGS", "")
cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or next(
    (f.split("=", 1)[1] for f in flags.split() if f.startswith("--cache_dir=")), None)
seen = sorted(str(p.relative_to(cache)) for p in pathlib.Path(cache).rglob("*") if p.is_file()) if cache else []
stats = {"rank": rank, "world_size": world, "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
         "steps_done": 0, "start_step": 0, "resumed_from": None,
         "step_times_s": [0.1, 0.3, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
         "time_to_first_step_s": 2.5 + rank, "compile_s": 2.0, "final_loss": 1.25, "samples_per_s": 10.0,
         "flops_per_sample": 1.5e6,
         "runtime": "native", "precision": "fp32", "batch_size": 4, "versions": {"torch": "fake-9.9"},
         "compiler_cache": {"fxgraph_hit": 3, "fxgraph_miss": 1, "aotautograd_hit": 2}, "ddp_split_graphs": False,
         "seen_cache": seen, "cache_dir": cache,
         "env": {k: os.environ.get(k) for k in ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "NEURON_CC_FLAGS",
                 "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "SM_CURRENT_HOST", "SM_HOSTS", "SM_NUM_CPUS",
                 "SM_CHANNELS", "SAGEMAKER_BASE_DIR", "MASTER_ADDR",
                 "MASTER_PORT", "GROUP_RANK", "SM_CHANNEL_TRAIN", "PJRT_DEVICE",
                 "TORCHINDUCTOR_COMPILE_THREADS", "ORCHESTRATOR_PRECOMPILE_STEPS", "NEURON_EXTRACT_GRAPHS_ONLY",
                 "ORCHESTRATOR_PROGRESS_REPORT_S", "PIP_CACHE_DIR")},
         "inductor_env": {k: v for k, v in os.environ.items() if k.startswith(("TORCHINDUCTOR_", "TORCHDYNAMO_"))}}
if os.environ.get("FAKE_TRAIN_IGNORE_SIGTERM"):
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"fake-train rank {rank}/{world} started", flush=True)
extract = os.environ.get("FAKE_TRAIN_EXTRACT_GRAPH")
if os.environ.get("NEURON_EXTRACT_GRAPHS_ONLY") == "1":
    if extract and cache and rank == 0:
        (pathlib.Path(cache) / extract).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(cache) / extract / "model.hlo.pb").write_bytes(b"hlo-" + extract.encode())
    pathlib.Path(args.stats_dir).mkdir(parents=True, exist_ok=True)
    (pathlib.Path(args.stats_dir) / f"rank-{rank}.json").write_text(json.dumps(stats))
    sys.exit(0)
entry = os.environ.get("FAKE_TRAIN_NEW_ENTRY")
if entry and cache and rank == 0:
    target = pathlib.Path(cache) / entry
    target.mkdir(parents=True, exist_ok=True)
    (target / "graph.bin").write_bytes(b"compiled-" + entry.encode() * 100)
print(f"fake-train rank {rank} compiled", flush=True)
out = pathlib.Path(args.stats_dir)
out.mkdir(parents=True, exist_ok=True)
if os.environ.get("ORCHESTRATOR_PROGRESS_REPORT_S") and os.environ.get("LOCAL_RANK", "0") == "0":
    beat = dict(stats, steps_done=int(os.environ.get("FAKE_TRAIN_BEAT_STEPS", "3")),
                step_times_s=stats["step_times_s"][:1])
    (out / f".rank-{rank}.beat").write_text(json.dumps(beat))
    os.replace(out / f".rank-{rank}.beat", out / f"rank-{rank}.json")
    print(f"fake-train rank {rank} warm", flush=True)
later = os.environ.get("FAKE_TRAIN_LATER_ENTRY")
if later and cache and rank == 0:
    time.sleep(float(os.environ.get("FAKE_TRAIN_LATER_AFTER", "0")))
    target = pathlib.Path(cache) / later
    target.mkdir(parents=True, exist_ok=True)
    (target / "graph.bin").write_bytes(b"compiled-" + later.encode() * 100)
    print(f"fake-train rank {rank} compiled more", flush=True)
time.sleep(float(os.environ.get("FAKE_TRAIN_SLEEP", "0")))
model_dir = os.environ.get("SM_MODEL_DIR")
if rank == 0 and model_dir:
    pathlib.Path(model_dir).mkdir(parents=True, exist_ok=True)
    (pathlib.Path(model_dir) / "model.pt").write_bytes(b"weights")
if os.environ.get("FAKE_TRAIN_FAIL_RANK") == str(rank):
    if entry and cache and rank != 0:
        # The crash comes after rank 0's compile, as the tests say: on a loaded machine rank 0
        # may still be starting when this rank fails, and torchrun would stop it first.
        deadline = time.time() + 60 * float(os.environ.get("TEST_PATIENCE", "4"))  # as job_waits.patience
        while not (pathlib.Path(cache) / entry / "graph.bin").exists() and time.time() < deadline:
            time.sleep(0.05)
    stats["error"] = "RuntimeError: boom on purpose"
    (out / f"rank-{rank}.json").write_text(json.dumps(stats))
    print("Traceback (most recent call last):", file=sys.stderr)
    print("RuntimeError: boom on purpose", file=sys.stderr, flush=True)
    sys.exit(1)
stats["steps_done"] = 12
(out / f"rank-{rank}.json").write_text(json.dumps(stats))
print(f"fake-train rank {rank} done", flush=True)
'''


STANDINS = ROOT / "tests" / "standins"


@pytest.fixture
def fake_train(tmp_path, monkeypatch, request) -> str:
    """A fake per-rank module (no torch) that launch.py runs instead of entrypoints.trainer.train:
    sets ORCHESTRATOR_TRAIN_MODULE and PYTHONPATH for this test; returns the module name.
    torchrun is the stand-in `tests/standins/torchrun_standin.py` (no torch import either),
    unless the test is marked `real_torchrun`. TMPDIR points into the test's folder, so what a
    killed launcher leaves stays there."""
    folder = tmp_path / "fake-train-module"
    folder.mkdir()
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (folder / "fake_train.py").write_text(FAKE_TRAIN_SOURCE)
    monkeypatch.setenv("ORCHESTRATOR_TRAIN_MODULE", "fake_train")
    if request.node.get_closest_marker("real_torchrun") is None:
        monkeypatch.setenv("ORCHESTRATOR_TORCHRUN_MODULE", "torchrun_standin")
    else:
        monkeypatch.delenv("ORCHESTRATOR_TORCHRUN_MODULE", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(folder), str(STANDINS), str(ROOT),
                                                                 os.environ.get("PYTHONPATH", "")) if p))
    return "fake_train"


@pytest.fixture
def moto_bucket(moto_server, monkeypatch) -> str:
    """A bucket ("test-bucket") on the moto server, with conditional PUTs made atomic.

    Real S3 checks IfMatch/IfNoneMatch and writes as one step; moto checks, then writes,
    without a lock, so two concurrent conditional writers could both win there. The server
    runs in this process, so serialising its PUT handler restores S3's behaviour.
    """
    import boto3

    moto_shim.s3_atomic_conditional_put(monkeypatch)
    boto3.client("s3").create_bucket(Bucket="test-bucket")
    return "test-bucket"
