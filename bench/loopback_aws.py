"""What every benchmark that talks to moto sets first: fake credentials and no real profile,
so nothing can reach AWS; each benchmark then points AWS_ENDPOINT_URL at its own moto server
on 127.0.0.1 (`start_moto` in a child process, `moto_process` the same for a block with its
own ORCHESTRATOR_HOME, `threaded_moto` in this process)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true",
}


def use_fake_credentials() -> None:
    """Put the fake credentials in this process's environment (children inherit them)."""
    os.environ.pop("AWS_PROFILE", None)
    os.environ.update(FAKE_AWS)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str]:
    """A moto server in a child process on 127.0.0.1 (its own process, so that it does not
    share the benchmark's GIL), and its URL, once it answers; the caller kills it."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=2).read()
            return proc, url
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("moto server exited at start") from None
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto server did not start within 60 s")


@contextmanager
def moto_process(home_prefix: str) -> Iterator[subprocess.Popen]:
    """For the block: the fake credentials, a temporary ORCHESTRATOR_HOME and a moto server in
    its own process (`start_moto`) that every AWS client uses (AWS_ENDPOINT_URL); its process is
    given (its CPU can be read); after, the server is stopped and the home removed."""
    import tempfile

    use_fake_credentials()
    home = tempfile.TemporaryDirectory(prefix=home_prefix)
    os.environ["ORCHESTRATOR_HOME"] = home.name
    proc, url = start_moto()
    try:
        os.environ["AWS_ENDPOINT_URL"] = url
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        home.cleanup()


@contextmanager
def threaded_moto(*, set_endpoint: bool = True) -> Iterator[str]:
    """A moto server in this process on 127.0.0.1, quiet (werkzeug logs one line per request,
    and a benchmark prints one JSON object), for the block; its URL, which `set_endpoint` also
    makes every AWS client's endpoint (AWS_ENDPOINT_URL)."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        if set_endpoint:
            os.environ["AWS_ENDPOINT_URL"] = url
        yield url
    finally:
        server.stop()
