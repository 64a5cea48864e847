"""Issue 32: answers from AWS are checked before use or storage (quota values and prices finite,
positive, plausible), paginated reads end (pages or seconds), and quota read failures are
worded by kind (server, denied, malformed) with no HTML pasted into a line."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from test_prices import TODAY, expected, page, product

from orchestrator import aws, prices, quotas, spec
from orchestrator.actions import quota_check
from orchestrator.errors import BackendError

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "vit-trn-preferences.yaml"
NAME = "ml.trn1.32xlarge for training job usage"


class Pages:
    """A client whose paginator hands out `pages` (any iterable: an endless one too)."""

    def __init__(self, pages):
        self.pages = pages
        self.asked = 0

    def get_paginator(self, _name):
        return self

    def paginate(self, **_kwargs):
        for item in self.pages:
            self.asked += 1
            yield item


def quota_page(value, token="next") -> dict:
    return {"Quotas": [{"QuotaName": NAME, "QuotaCode": "L-1", "Value": value}], "NextToken": token}


@pytest.mark.parametrize("value", ["lots", float("nan"), float("inf"), -1, 1e12, True])
def test_a_quota_value_that_is_no_plausible_number_is_a_malformed_answer(orch_home, value):
    with pytest.raises(quotas.MalformedAnswer) as info:
        quotas.applied(Pages([quota_page(value)]), "sagemaker", {NAME})
    assert info.value.exit_code == 1
    assert f"malformed value for \"{NAME}\" (L-1)" in info.value.message and "not a number from 0 to" in info.value.message


def test_a_page_without_a_quota_list_is_malformed_not_unknown(orch_home):
    # botocore reads a non-JSON 200 of a JSON protocol as {"message": body}: no Quotas.
    with pytest.raises(quotas.MalformedAnswer, match="without a quota list"):
        quotas.applied(Pages([{"message": "<html>proxy</html>"}]), "sagemaker", {NAME})


def test_quota_pages_that_never_end_stop_with_a_clear_error(orch_home):
    endless = Pages(quota_page(5, token=f"t{n}") for n in itertools.count())
    with pytest.raises(quotas.MalformedAnswer, match=r"did not end after 200 pages"):
        quotas.applied(endless, "sagemaker", {NAME})
    assert endless.asked == aws.MAX_PAGES + 1


def test_bounded_pages_stops_on_seconds_too():
    times = iter([0.0, 0.0, 10.0, 400.0, 400.0])
    with pytest.raises(aws.EndlessPages, match=r"after 2 pages \(400 s\)"):
        list(aws.bounded_pages(iter([1, 2, 3, 4]), "X", clock=lambda: next(times)))


def test_a_malformed_quota_answer_is_exit_1_for_doctor_and_skipped_for_submit(orch_home, monkeypatch, capsys):
    from cli_harness import run_cli

    monkeypatch.setattr(quotas, "clients", lambda region, attempts=None: (Pages([quota_page("lots")]), None))
    code, _, err = run_cli(monkeypatch, capsys, "doctor", str(CONFIG), "--quotas")
    assert code == 1 and "malformed value" in err and "internal error" not in err

    class Backend:
        def quota_clients(self, attempts=None):
            return Pages([quota_page(float("nan"))]), None

    said: list[str] = []
    assert quota_check.run(spec.load(CONFIG), said.append, tolerant=True, backend=Backend()) == []
    assert said[0].startswith("quota: not read (Service Quotas answered a malformed value") and "nan" in said[0]


def _server_error() -> ClientError:
    html = "<!doctype html><html><head><title>500 Internal Server Error</title></head><body>" + "<p>x</p>" * 300
    return ClientError({"Error": {"Code": "500", "Message": html}, "ResponseMetadata": {"HTTPStatusCode": 500}},
                       "ListServiceQuotas")


def test_quota_failures_are_worded_by_kind():
    what, todo = quota_check.failure_text(_server_error())
    assert what.startswith("the Service Quotas endpoint failed (HTTP 500, a server error: 500 Internal Server Error")
    assert "<" not in what and len(what) < 250 and "servicequotas:" not in todo and "try again later" in todo
    denied = ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"},
                          "ResponseMetadata": {"HTTPStatusCode": 400}}, "ListServiceQuotas")
    what, todo = quota_check.failure_text(denied)
    assert "access denied" in what and "servicequotas:ListServiceQuotas" in todo
    from botocore.exceptions import NoCredentialsError

    # No credentials is not a missing grant: said so, and how to set them.
    what, todo = quota_check.failure_text(NoCredentialsError())
    assert what.startswith("no usable AWS credentials") and "access denied" not in what
    assert "aws configure" in todo and "servicequotas:" not in todo
    expired = ClientError({"Error": {"Code": "ExpiredTokenException", "Message": "expired"},
                           "ResponseMetadata": {"HTTPStatusCode": 400}}, "ListServiceQuotas")
    assert quota_check.failure_text(expired)[0].startswith("no usable AWS credentials")


def test_schedule_list_without_credentials_or_with_endless_pages_says_so(monkeypatch, capsys):
    """`schedule list`'s DescribeStacks: no credentials was an internal error ("this is a bug"),
    and its pages were not bounded."""
    from cli_harness import run_cli

    from orchestrator.schedule import in_aws

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # never reached: nothing to sign with
    code, out, err = run_cli(monkeypatch, capsys, "schedule", "list", "--region", "us-east-1")
    assert code == 1, (out, err)
    assert "listing the schedule stacks in us-east-1: no AWS credentials found" in err
    assert "internal error" not in err and "aws configure" in err
    endless = Pages({"Stacks": [], "NextToken": str(n)} for n in itertools.count())
    with pytest.raises(BackendError, match=f"DescribeStacks: the answer did not end after {aws.MAX_PAGES} pages"):
        in_aws.deployed("us-east-1", clients={"cloudformation": endless, "stepfunctions": object()})
    assert endless.asked == aws.MAX_PAGES + 1


# --- prices ---------------------------------------------------------------------------------


@pytest.fixture
def pricing():
    client = boto3.client("pricing", region_name="us-east-1")
    with Stubber(client) as stub:
        yield client, stub


@pytest.mark.parametrize("usd", [float("inf"), 1e-10, 1e9])
def test_an_implausible_price_is_never_stored(pricing, usd):
    client, stub = pricing
    item = json.loads(product("ml.trn1.2xlarge", "us-east-1", 1.0))
    for dim in next(iter(item["terms"]["OnDemand"].values()))["priceDimensions"].values():
        dim["pricePerUnit"]["USD"] = "Infinity" if usd == float("inf") else f"{usd:.12f}"
    stub.add_response("get_products", page([json.dumps(item)]), expected("ml.trn1.2xlarge", "us-east-1"))
    refresh = prices.fetch(client, ["ml.trn1.2xlarge"], ["us-east-1"], today=TODAY)
    assert refresh.found == [] and refresh.missing == [("ml.trn1.2xlarge", "us-east-1")]
    assert "no OnDemand USD hourly price from 0.001 to 10000" in refresh.notes[0]


def test_a_price_item_that_is_not_json_is_a_clear_backend_error(pricing):
    client, stub = pricing
    stub.add_response("get_products", page(["{not json"]), expected("ml.trn1.2xlarge", "us-east-1"))
    with pytest.raises(BackendError, match="an item that is not a JSON object") as info:
        prices.fetch(client, ["ml.trn1.2xlarge"], ["us-east-1"], today=TODAY)
    assert "nothing written" in info.value.message


def test_price_pages_that_never_end_stop(monkeypatch):
    class Endless:
        asked = 0

        def get_products(self, **kwargs):
            Endless.asked += 1
            return page([], token=f"t{Endless.asked}")

    with pytest.raises(BackendError, match="did not end after 200 pages"):
        prices.fetch(Endless(), ["ml.trn1.2xlarge"], ["us-east-1"], today=TODAY)
    assert Endless.asked == aws.MAX_PAGES


# --- a server error is said while botocore retries it -----------------------------------------


@pytest.fixture
def failing_endpoint(monkeypatch):
    """An endpoint on 127.0.0.1 that answers every call with an HTML 500 page; counts the calls."""
    import http.server
    import threading

    seen: list[str] = []

    class Failing(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.headers.get("X-Amz-Target") or self.path)
            body = b"<!doctype html><html><head><title>500 Internal Server Error</title></head><body>oops</body></html>"
            self.send_response(500)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    # Three tries in standard mode: a backoff of at most 1 s and 2 s, not the default ten tries.
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    yield url, seen
    server.shutdown()
    server.server_close()


@pytest.mark.timeout(120)
def test_a_quota_read_that_meets_server_errors_says_so_once_while_it_retries(orch_home, failing_endpoint,
                                                                             monkeypatch, capsys):
    # Issue 32 (13): 13.6 s of silence while botocore retried a 500, then the error.
    from cli_harness import run_cli

    url, seen = failing_endpoint
    code, _, err = run_cli(monkeypatch, capsys, "doctor", str(CONFIG), "--quotas")
    assert code == 1, err
    note = (f"note: the endpoint {url} answered ListServiceQuotas with a server error (HTTP 500); trying again "
            "(up to 2 more tries)")
    lines = err.splitlines()
    assert lines.count(note) == 1, err  # said once, not once per retry
    error = next(i for i, line in enumerate(lines) if line.startswith("error: reading the quotas: "))
    assert lines.index(note) < error  # before the error: while it waited
    assert "a server error" in lines[error] and "<" not in err and "servicequotas:" not in err
    assert lines[error + 1] == "hint: try again later: a server error, not a permissions problem"
    assert len(seen) == 3  # botocore's retries kept: the note does not shorten them
