"""orchestrator.aws: every client's endpoint check and timeouts, a silent endpoint's bounded wait,
and the words for it (what an error means is tests/test_aws_errors.py's).

The silent endpoint is a socket on 127.0.0.1 that accepts connections and never answers; each
test configures a read timeout of a fraction of a second, so no test waits long, and counts the
connections the endpoint saw instead of timing anything."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from cli_harness import run_cli

from orchestrator import aws
from orchestrator.errors import BackendError, InputError
from orchestrator.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]
SAGEMAKER_SPEC = ROOT / "configs" / "vit-trn1-2xlarge.yaml"


class SilentEndpoint:
    """Accepts TCP connections on 127.0.0.1 and never sends a byte; counts the connections."""

    def __init__(self):
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.server.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.accepted.append(conn)  # held open, never read from, never answered

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self.accepted:
            conn.close()
        self.server.close()


@pytest.fixture
def silent(monkeypatch, orch_home):
    endpoint = SilentEndpoint()
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint.url)
    monkeypatch.setenv(aws.READ_TIMEOUT_VARIABLE, "0.3")
    monkeypatch.setenv(aws.CONNECT_TIMEOUT_VARIABLE, "2")
    yield endpoint
    endpoint.close()


SILENT_COMMANDS = {
    "status": ["status", "vit-unknown-1"],
    "status-known": ["status", "vit-1"],
    "submit": ["submit", str(SAGEMAKER_SPEC)],
    "results": ["results", "--prefix", "s3://orchestrator-example-bucket/jobs"],
    "prices": ["prices", "refresh", "--types", "ml.trn1.2xlarge"],
    "cache-ls": ["cache", "ls", "s3://orchestrator-example-bucket/compile-cache"],
    "infra-outputs": ["infra", "outputs"],
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(SILENT_COMMANDS))
def test_a_silent_endpoint_is_exit_1_after_two_tries_with_a_note(silent, monkeypatch, capsys, name):
    # QA: `status` was silent for 708 s and then said "no job" (exit 2); `results --prefix
    # s3://` was still silent after 20 minutes; `prices refresh` and `cache ls` over 5 minutes.
    if name == "status-known":
        Ledger().record_intent("vit-1", backend="sagemaker", region="us-east-1", spec_hash="0" * 64, request={})
    code, out, err = run_cli(monkeypatch, capsys, *SILENT_COMMANDS[name])
    assert code == 1, err
    assert "Traceback" not in err
    assert f"the endpoint {silent.url} does not answer" in err
    assert "(no reply within 0.3 s)" in err and "tried twice" in err
    assert "note: " in err and "trying again (1 more try)" in err  # said while it waited
    assert f"hint: {aws.NO_ANSWER_HINT}" in err
    # Bounded: the first call was tried twice, and the command gave up (no later call).
    assert len(silent.accepted) == aws.NO_ANSWER_ATTEMPTS


def test_an_unknown_job_on_a_silent_endpoint_says_it_is_not_known_here(silent, monkeypatch, capsys, orch_home):
    code, _, err = run_cli(monkeypatch, capsys, "status", "vit-unknown-1")
    assert code == 1
    assert (f"vit-unknown-1 is in neither the ledger ({orch_home / 'ledger.sqlite3'}) nor the local jobs "
            f"({orch_home / 'jobs'}), so only SageMaker in us-east-1 could say whether it exists") in err
    assert "error: no job" not in err  # not "no such job": nobody could say


@pytest.mark.timeout(60)
def test_an_endpoint_that_answers_5xx_keeps_botocores_retries(monkeypatch):
    # Only calls that get no connection or no answer are cut to NO_ANSWER_ATTEMPTS tries.
    import http.server

    seen = []

    class Busy(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            seen.append(self.path)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("AWS_RETRY_MODE", "standard")
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "4")
        client = aws.client("sagemaker", "us-east-1")
        with pytest.raises(ClientError):
            client.describe_training_job(TrainingJobName="vit-1")
    finally:
        server.shutdown()
        server.server_close()
    assert len(seen) == 4


def test_every_client_of_the_orchestrator_has_timeouts(monkeypatch, orch_home, moto_server):
    from orchestrator import backends, cache, infra, prices, results

    monkeypatch.setenv(aws.READ_TIMEOUT_VARIABLE, "7")
    # The cache commands build their S3 client inside: caught where every client is built.
    made = []
    real_client = aws.client

    def recording(*args, **kwargs):
        made.append(real_client(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(aws, "client", recording)
    real_client("s3", "us-east-1").create_bucket(Bucket="timeouts-bucket")
    cache.list_keys("s3://timeouts-bucket/compile-cache")
    cache_clients = list(made)
    assert [c.meta.service_model.service_name for c in cache_clients] == ["s3"]
    built = [
        *vars(backends.create("sagemaker", region="us-east-1")).values(),
        infra.make_client("cloudformation", None),
        prices.client(),
        *cache_clients,
        real_client("s3", "us-east-1", config=results.client_config(4)),
    ]
    clients = [c for c in built if hasattr(c, "meta") and hasattr(c.meta, "config")]
    assert len(clients) == 7
    for client in clients:
        assert client.meta.config.read_timeout == 7.0
        assert client.meta.config.connect_timeout == aws.CONNECT_TIMEOUT_S


def test_the_stores_client_config_has_timeouts():
    from entrypoints.shared.storage import S3_CONNECT_TIMEOUT_S, S3_READ_TIMEOUT_S, s3_client_config

    config = s3_client_config()
    assert (config.connect_timeout, config.read_timeout) == (S3_CONNECT_TIMEOUT_S, S3_READ_TIMEOUT_S)


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "1e9"])
def test_a_bad_timeout_setting_is_an_input_error(monkeypatch, value):
    monkeypatch.setenv(aws.READ_TIMEOUT_VARIABLE, value)
    with pytest.raises(InputError, match=f"{aws.READ_TIMEOUT_VARIABLE}='{value}' is not a number of seconds"):
        aws.timeouts()


# --- a malformed endpoint setting --------------------------------------------------------------

ENDPOINT_COMMANDS = {
    "status": ["status", "vit-1"],
    "submit": ["submit", str(SAGEMAKER_SPEC)],
    "results": ["results", "--prefix", "s3://orchestrator-example-bucket/jobs"],
    "prices": ["prices", "refresh"],
    "infra-outputs": ["infra", "outputs"],
    "cache-ls": ["cache", "ls", "s3://orchestrator-example-bucket/compile-cache"],
}


@pytest.mark.parametrize("name", sorted(ENDPOINT_COMMANDS))
@pytest.mark.parametrize("value, why", [
    ("not-a-url", ": it has no http:// or https://"), ("http://", ": it has no host"), ("http://127.0.0 .1:9", ""),
    ("ftp://127.0.0.1:9", ": the scheme is 'ftp', not http or https"), ("http://[::1", ": Invalid IPv6 URL"),
    ("http://127.0.0.1:99999", ": Port out of range 0-65535"),
])
def test_a_malformed_endpoint_url_is_exit_2_naming_the_variable(orch_home, monkeypatch, capsys, name, value, why):
    # QA: AWS_ENDPOINT_URL=not-a-url was a ValueError traceback (exit 1) in each of these; an ftp://
    # scheme or a port out of range failed only at the first call.
    monkeypatch.setenv("AWS_ENDPOINT_URL", value)
    code, out, err = run_cli(monkeypatch, capsys, *ENDPOINT_COMMANDS[name])
    assert code == 2 and "Traceback" not in err, err
    assert f"error: AWS_ENDPOINT_URL={value!r} is not an endpoint URL{why}\n" in err
    assert "hint: give a URL with a scheme and a host" in err


def test_a_malformed_service_endpoint_names_its_own_variable(orch_home, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER", "nope")
    with pytest.raises(InputError, match=r"^AWS_ENDPOINT_URL_SAGEMAKER='nope' is not an endpoint URL: it has no http"):
        aws.client("sagemaker", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_CLOUDFORMATION", "nope")
    with pytest.raises(InputError, match=r"^AWS_ENDPOINT_URL_CLOUDFORMATION='nope'"):
        aws.client("cloudformation", "us-east-1")


# --- what an error means ------------------------------------------------------------------------


def _client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "CreateTrainingJob")


def test_describe_words_no_answer_and_no_connection(monkeypatch):
    monkeypatch.setenv(aws.READ_TIMEOUT_VARIABLE, "5")
    assert aws.describe(ReadTimeoutError(endpoint_url="http://127.0.0.1:1/"), "GetObject") == \
        "the endpoint http://127.0.0.1:1 does not answer GetObject (no reply within 5 s)"
    assert aws.describe(ConnectTimeoutError(endpoint_url="https://127.0.0.1:1/bucket?list-type=2")) == \
        f"the endpoint https://127.0.0.1:1 does not answer (no connection within {aws.CONNECT_TIMEOUT_S:g} s)"
    assert aws.describe(EndpointConnectionError(endpoint_url="http://127.0.0.1:1/")).startswith(
        "the endpoint http://127.0.0.1:1 cannot be reached (")
    assert aws.describe(_client_error("AccessDenied", 403)) is None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(ENDPOINT_COMMANDS))
def test_credentials_inside_the_endpoint_url_are_never_echoed(orch_home, monkeypatch, capsys, name):
    # QA: a proxy's user and password in AWS_ENDPOINT_URL were printed back in the messages.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "ftp://alice:s3cret@127.0.0.1:9")
    code, out, err = run_cli(monkeypatch, capsys, *ENDPOINT_COMMANDS[name])
    assert code == 2 and "s3cret" not in out + err and "alice" not in out + err
    assert "error: AWS_ENDPOINT_URL='ftp://***@127.0.0.1:9' is not an endpoint URL: the scheme is 'ftp'" in err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["results", "cache-ls"])
def test_credentials_inside_an_unreachable_endpoint_url_are_never_echoed(orch_home, monkeypatch, capsys, name):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://alice:s3cret@127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    code, out, err = run_cli(monkeypatch, capsys, *ENDPOINT_COMMANDS[name])
    assert code != 0 and "s3cret" not in out + err and "alice" not in out + err
    assert "127.0.0.1:9" in err  # the endpoint is still named, by its host


def test_describe_and_our_errors_show_no_credentials_of_a_url():
    assert aws.describe(EndpointConnectionError(endpoint_url="http://u:pw@127.0.0.1:1/b?x=1")).startswith(
        "the endpoint http://127.0.0.1:1 cannot be reached (")
    error = BackendError('could not reach "https://u:pw@127.0.0.1:1/x"', hint="check http://u@127.0.0.1:2")
    assert error.message == 'could not reach "https://***@127.0.0.1:1/x"' and error.hint == "check http://***@127.0.0.1:2"
    assert str(error) == error.message
