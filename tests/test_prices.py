"""prices refresh: the Price List API (faked by botocore's Stubber: moto has no `pricing`),
parsing of PriceList documents, and the merged, atomic override file the catalog reads."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from botocore.stub import Stubber
from typer.testing import CliRunner

from orchestrator import catalog, prices
from orchestrator.cli import app
from orchestrator.errors import BackendError, InputError

TODAY = dt.date(2026, 11, 29)


def product(type_: str, region: str, usd: float | None, *, sku: str = "AAAA1111", component: str = "Training",
            usagetype: str | None = None, unit: str = "Hrs") -> str:
    """One PriceList item as the API returns it: a JSON document in a string."""
    on_demand = {}
    if usd is not None:
        on_demand = {f"{sku}.JRTCKXETXF": {
            "offerTermCode": "JRTCKXETXF", "sku": sku, "effectiveDate": "2026-11-01T00:00:00Z",
            "termAttributes": {},
            "priceDimensions": {f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7", "unit": unit, "beginRange": "0", "endRange": "Inf",
                "appliesTo": [], "description": f"${usd} per {type_} hour for training",
                "pricePerUnit": {"USD": f"{usd:.10f}"},
            }},
        }}
    doc = {
        "product": {
            "productFamily": "ML Instance",
            "attributes": {
                "regionCode": region, "location": "US East (N. Virginia)", "locationType": "AWS Region",
                "instanceName": type_, "instanceType": type_, "component": component,
                "usagetype": usagetype or f"USE1-Train:{type_}", "operation": "RunInstance",
                "servicecode": "AmazonSageMaker", "servicename": "Amazon SageMaker", "vCpu": "8",
                "memory": "32 GiB",
            },
            "sku": sku,
        },
        "serviceCode": "AmazonSageMaker",
        "terms": {"OnDemand": on_demand},
        "version": "20261101000000",
        "publicationDate": "2026-11-01T00:00:00Z",
    }
    return json.dumps(doc)


def expected(type_: str, region: str, token: str | None = None) -> dict:
    params = {"ServiceCode": "AmazonSageMaker", "Filters": prices.filters(type_, region), "FormatVersion": "aws_v1",
              "MaxResults": 100}
    if token:
        params["NextToken"] = token
    return params


def page(items: list[str], token: str | None = None) -> dict:
    response = {"FormatVersion": "aws_v1", "PriceList": items}
    if token:
        response["NextToken"] = token
    return response


@pytest.fixture
def pricing():
    import boto3

    client = boto3.client("pricing", region_name="us-east-1")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def test_filters_ask_for_training_prices_of_one_type_in_one_region():
    fields = {f["Field"]: f["Value"] for f in prices.filters("ml.trn1.2xlarge", "eu-west-1")}
    assert fields == {"productFamily": "ML Instance", "instanceName": "ml.trn1.2xlarge",
                      "regionCode": "eu-west-1", "component": "Training"}
    assert all(f["Type"] == "TERM_MATCH" for f in prices.filters("ml.trn1.2xlarge", "eu-west-1"))


def test_fetch_follows_pages_skips_unpriced_products_and_reports_missing(pricing):
    client, stub = pricing
    # trn1.2xlarge: the first page has a product without an OnDemand price, the second the price.
    stub.add_response("get_products", page([product("ml.trn1.2xlarge", "us-east-1", None, sku="NOPRICE1")],
                                           token="tok-1"), expected("ml.trn1.2xlarge", "us-east-1"))
    stub.add_response("get_products", page([product("ml.trn1.2xlarge", "us-east-1", 1.5)]),
                      expected("ml.trn1.2xlarge", "us-east-1", "tok-1"))
    # trn1.32xlarge: no product at all.
    stub.add_response("get_products", page([]), expected("ml.trn1.32xlarge", "us-east-1"))
    # trn1n.32xlarge: a spot-usage variant, a hosting product that slipped through, and the plain one.
    stub.add_response("get_products", page([
        product("ml.trn1n.32xlarge", "us-east-1", 9.0, sku="SPOT0001", usagetype="USE1-Train-Spot:ml.trn1n.32xlarge"),
        product("ml.trn1n.32xlarge", "us-east-1", 30.0, sku="HOST0001", component="Hosting",
                usagetype="USE1-Host:ml.trn1n.32xlarge"),
        product("ml.trn1n.32xlarge", "us-east-1", 27.5, sku="PLAIN001"),
    ]), expected("ml.trn1n.32xlarge", "us-east-1"))

    refresh = prices.fetch(client, ["ml.trn1.2xlarge", "ml.trn1.32xlarge", "ml.trn1n.32xlarge"], ["us-east-1"],
                           today=TODAY)
    assert refresh.as_of == "2026-11-29"
    assert [(f.type, f.region, f.usd_per_hour, f.sku) for f in refresh.found] == [
        ("ml.trn1.2xlarge", "us-east-1", 1.5, "AAAA1111"),
        ("ml.trn1n.32xlarge", "us-east-1", 27.5, "PLAIN001"),
    ]
    assert refresh.missing == [("ml.trn1.32xlarge", "us-east-1")]
    assert any("NOPRICE1" in n and "no OnDemand USD hourly price" in n for n in refresh.notes)


def test_fetch_accepts_hours_spelled_out_and_ignores_zero_and_other_units(pricing):
    client, stub = pricing
    stub.add_response("get_products", page([
        product("ml.trn2.48xlarge", "us-west-2", 0.0, sku="ZERO0001"),
        product("ml.trn2.48xlarge", "us-west-2", 3.0, sku="GBMO0001", unit="GB-Mo"),
    ]), expected("ml.trn2.48xlarge", "us-west-2"))
    stub.add_response("get_products", page([product("ml.trn2.48xlarge", "us-east-1", 44.7, unit="Hours")]),
                      expected("ml.trn2.48xlarge", "us-east-1"))
    refresh = prices.fetch(client, ["ml.trn2.48xlarge"], ["us-west-2", "us-east-1"], today=TODAY)
    assert refresh.missing == [("ml.trn2.48xlarge", "us-west-2")]
    assert [(f.region, f.usd_per_hour) for f in refresh.found] == [("us-east-1", 44.7)]


def test_a_repeated_page_token_does_not_loop(pricing):
    client, stub = pricing
    stub.add_response("get_products", page([], token="same"), expected("ml.trn1.2xlarge", "us-east-1"))
    stub.add_response("get_products", page([product("ml.trn1.2xlarge", "us-east-1", 1.5)], token="same"),
                      expected("ml.trn1.2xlarge", "us-east-1", "same"))
    refresh = prices.fetch(client, ["ml.trn1.2xlarge"], ["us-east-1"], today=TODAY)
    assert [f.usd_per_hour for f in refresh.found] == [1.5]


def test_api_refusal_is_a_backend_error_naming_what_was_asked(pricing):
    client, stub = pricing
    stub.add_client_error("get_products", service_error_code="AccessDeniedException",
                          service_message="not authorized to perform pricing:GetProducts", http_status_code=400)
    with pytest.raises(BackendError) as info:
        prices.fetch(client, ["ml.trn1.2xlarge"], ["us-east-1"], today=TODAY)
    assert "ml.trn1.2xlarge in us-east-1" in info.value.message and "AccessDeniedException" in info.value.message
    assert "pricing:GetProducts" in info.value.hint


def test_a_server_error_is_one_short_line_without_the_permissions_hint(pricing):
    client, stub = pricing
    page_html = "<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n" + "<p>x</p>\n" * 200
    stub.add_client_error("get_products", service_error_code="500", service_message=page_html, http_status_code=500)
    with pytest.raises(BackendError) as info:
        prices.fetch(client, ["ml.trn1.2xlarge"], ["us-east-1"], today=TODAY)
    message = info.value.message
    assert "\n" not in message and "<" not in message and "500 Internal Server Error" in message
    assert len(message) < 450
    assert "try again later" in info.value.hint and "pricing:GetProducts" not in info.value.hint


def test_without_credentials_the_error_says_how_to_set_them(orch_home, moto_server, monkeypatch):
    """A client with no credentials fails before any request (botocore signs first); the hint says
    how to give it some (issue 22, smaller findings)."""
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    result = CliRunner().invoke(app, ["prices", "refresh", "--types", "ml.trn1.2xlarge"])
    assert result.exit_code == 1
    assert isinstance(result.exception, BackendError)
    assert "no usable AWS credentials" in result.exception.message
    assert "aws configure, AWS_PROFILE, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY" in result.exception.hint


def test_write_merges_into_the_override_atomically_and_the_catalog_reads_it(orch_home):
    shipped = catalog.price("ml.trn1.32xlarge", "us-east-1")
    refresh = prices.Refresh(as_of="2026-11-29", found=[
        prices.Found("ml.trn1.2xlarge", "us-east-1", 1.5, "A", "d"),
        prices.Found("ml.trn1.2xlarge", "eu-west-1", 1.7, "B", "d"),
    ])
    path = prices.write(refresh)
    assert path == orch_home / "prices.json"
    assert [p.name for p in orch_home.iterdir()] == ["prices.json"]  # no temp file left behind
    doc = json.loads(path.read_text())
    assert doc["currency"] == "USD" and doc["unit"] == "instance-hour"

    new = catalog.price("ml.trn1.2xlarge", "us-east-1")
    assert (new.usd_per_hour, new.source, new.as_of, new.kind) == (
        1.5, "AWS Price List API (AmazonSageMaker)", "2026-11-29", "sagemaker-on-demand")
    assert catalog.price("ml.trn1.2xlarge", "eu-west-1").usd_per_hour == 1.7
    # Types not refreshed keep their shipped price.
    assert catalog.price("ml.trn1.32xlarge", "us-east-1") == shipped

    # A second refresh replaces its own rows and keeps the first refresh's others.
    prices.write(prices.Refresh(as_of="2026-11-30", found=[prices.Found("ml.trn1.2xlarge", "us-east-1", 1.6, "A", "d")]))
    assert catalog.price("ml.trn1.2xlarge", "us-east-1").usd_per_hour == 1.6
    assert catalog.price("ml.trn1.2xlarge", "eu-west-1").as_of == "2026-11-29"
    rows = json.loads(path.read_text())["prices"]
    assert len({(r["type"], r["region"]) for r in rows}) == len(rows)


def test_write_refuses_a_corrupt_override(orch_home):
    (orch_home / "prices.json").write_text("{not json")
    with pytest.raises(InputError) as info:
        prices.write(prices.Refresh(as_of="2026-11-29", found=[prices.Found("ml.trn1.2xlarge", "us-east-1", 1.5, "A", "d")]))
    assert "delete" in info.value.hint
    assert (orch_home / "prices.json").read_text() == "{not json"


@pytest.mark.parametrize(("contents", "what"), [
    ('{"prices": [1]}', "prices[0]: expected an object, got the number 1"),
    ('{"prices": [{"type": "ml.trn1.2xlarge"}]}', "prices[0]: missing 'region'"),
    ("[]", "expected a JSON object with a 'prices' list, got a list"),
])
def test_write_refuses_an_override_of_the_wrong_shape_and_leaves_it(orch_home, contents, what):
    path = orch_home / "prices.json"
    path.write_text(contents)
    with pytest.raises(InputError) as info:
        prices.write(prices.Refresh(as_of="2026-11-29", found=[prices.Found("ml.trn1.2xlarge", "us-east-1", 1.5, "A", "d")]))
    assert info.value.exit_code == 2
    assert info.value.message == f"{path}: {what}"
    assert f"delete {path}" in info.value.hint
    assert path.read_text() == contents
    assert [p.name for p in orch_home.iterdir()] == ["prices.json"]


def test_write_where_the_file_cannot_be_written_is_an_input_error(tmp_path):
    blocker = tmp_path / "home"
    blocker.write_text("")  # the folder the file should go in is a file
    path = blocker / "prices.json"
    with pytest.raises(InputError) as info:
        prices.write(prices.Refresh(as_of="2026-11-29", found=[prices.Found("ml.trn1.2xlarge", "us-east-1", 1.5, "A", "d")]),
                     path=path)
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"{path}: cannot write the prices file")
    assert "ORCHESTRATOR_HOME" in info.value.hint
    assert blocker.read_text() == ""


def test_check_names_bad_types_and_regions():
    with pytest.raises(InputError) as info:
        prices.check_known(["ml.inf2.xlarge"], ["us-east-1"])
    assert "not a SageMaker training instance type" in info.value.message
    assert "ml.trn1.2xlarge has the same NeuronCore-v2" in info.value.hint
    with pytest.raises(InputError) as info:
        prices.check_known(["ml.trn1.2xlarg"], ["us-east-1"])
    assert info.value.hint == "did you mean ml.trn1.2xlarge?"
    with pytest.raises(InputError, match="not an AWS region"):
        prices.check_known(["ml.trn1.2xlarge"], ["US East"])


def test_default_types_are_the_catalogs_training_types():
    assert prices.default_types() == ["ml.trn1.2xlarge", "ml.trn1.32xlarge", "ml.trn1n.32xlarge", "ml.trn2.48xlarge"]


def test_cli_prices_refresh(orch_home, monkeypatch, pricing):
    client, stub = pricing
    stub.add_response("get_products", page([product("ml.trn1.2xlarge", "eu-west-1", 1.8)]),
                      expected("ml.trn1.2xlarge", "eu-west-1"))
    stub.add_response("get_products", page([]), expected("ml.trn1.32xlarge", "eu-west-1"))
    monkeypatch.setattr(prices, "client", lambda: client)
    result = CliRunner().invoke(app, ["prices", "refresh", "--region", "eu-west-1",
                                      "--types", "ml.trn1.2xlarge,ml.trn1.32xlarge"])
    assert result.exit_code == 0, result.output
    assert "ml.trn1.2xlarge" in result.stdout and "1.8000 USD/h" in result.stdout
    assert "no SageMaker training price for ml.trn1.32xlarge in eu-west-1" in result.stderr
    assert catalog.price("ml.trn1.2xlarge", "eu-west-1").usd_per_hour == 1.8


def test_cli_prices_refresh_writes_nothing_when_nothing_found(orch_home, monkeypatch, pricing):
    client, stub = pricing
    stub.add_response("get_products", page([]), expected("ml.trn1.2xlarge", "us-east-1"))
    monkeypatch.setattr(prices, "client", lambda: client)
    result = CliRunner().invoke(app, ["prices", "refresh", "--types", "ml.trn1.2xlarge"])
    assert isinstance(result.exception, BackendError)
    assert not (orch_home / "prices.json").exists()
