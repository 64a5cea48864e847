"""A real MLflow tracking server for the tests (a pytest plugin, named in conftest.py).

`mlflow_server` (session-scoped: started once per test process, on first use): `mlflow server`
with a sqlite backend store and a local artifact root in a temporary folder, on 127.0.0.1 at a
free port, one worker. Its start-up waits for /health as long as the server takes (a loaded
machine is slow), and fails with its output if it exits first. Returns the server's URL.
`free_port()`: a port nothing listens on (for a server that is down).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

START_LIMIT_S = 300


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def mlflow_server():
    folder = Path(tempfile.mkdtemp(prefix="mlflow-server-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (folder / "server.log").open("wb")
    mlflow = Path(sys.executable).with_name("mlflow")
    command = [str(mlflow) if mlflow.exists() else "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
               "--artifacts-destination", str(folder / "artifacts")]
    # No job runner: MLflow 3's server otherwise starts seven task-queue consumers (for its
    # GenAI jobs) that the tests never use, on a machine of two cores.
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")},
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=folder, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + START_LIMIT_S
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(folder / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        # The first API call of a fresh server is its slowest (lazy imports, the store's first
        # query): made here, so that no test's request meets it.
        urllib.request.urlopen(f"{url}/api/2.0/mlflow/experiments/search?max_results=1", timeout=START_LIMIT_S).close()
        yield url
    finally:
        try:
            os.killpg(proc.pid, 15)
        except ProcessLookupError:
            pass
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
