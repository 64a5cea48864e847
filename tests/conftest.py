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

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

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
