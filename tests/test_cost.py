"""Cost estimates: upper bounds from the catalog's prices, with their source."""

from __future__ import annotations

import json
import math

import pytest

from orchestrator import catalog, cost, spec

BASE = """
name: cost-test
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {type: ml.trn1.2xlarge}
compile_cache: {uri: s3://orchestrator-example-bucket/cc}
output: {uri: s3://orchestrator-example-bucket/jobs}
max_run_minutes: 90
"""


@pytest.fixture(autouse=True)
def _isolated_prices(orch_home):
    """No refreshed price file from the developer's home leaks into these numbers."""
    return orch_home


def _spec(**overrides):
    return spec.with_overrides(spec.loads(BASE), overrides)


# The shipped prices are EC2's, lower than SageMaker's: until `prices refresh`, estimates use
# them times the stated markup (data/prices.json sagemaker_markup).
MARKUP = 1.5


def test_upper_bound_is_minutes_times_count_times_catalog_price():
    est = cost.estimate(_spec())
    price = catalog.price("ml.trn1.2xlarge", "us-east-1")
    assert est.price == price
    assert est.usd_per_hour == pytest.approx(1.34375 * MARKUP)
    assert est.hours_max == pytest.approx(1.5)
    assert est.usd_max == pytest.approx(1.5 * 1.34375 * MARKUP)
    assert est.instance_count == 1 and not est.spot and est.known


def test_multi_node_multiplies_by_count():
    est = cost.estimate(_spec(**{"instance.type": "ml.trn1n.32xlarge", "instance.count": 2,
                                 "max_run_minutes": 120}))
    assert est.usd_max == pytest.approx(2 * 2 * 24.78 * MARKUP)
    assert est.instance_hours == pytest.approx(4)


def test_describe_names_the_price_source_and_date():
    est = cost.estimate(_spec())
    line = est.describe()
    assert "\n" not in line
    assert f"{est.usd_max:.2f} USD" in line
    assert est.price.source in line and est.price.as_of in line
    assert "EC2" in est.note and "upper bound" in est.note


def test_spot_is_still_bounded_by_on_demand_and_says_so():
    est = cost.estimate(_spec(**{"instance.spot": True, "instance.max_wait_minutes": 600}))
    assert est.spot
    # Waiting for capacity is not billed: the bound stays max_run_minutes of on-demand.
    assert est.usd_max == pytest.approx(1.5 * 1.34375 * MARKUP)
    assert "spot" in est.note


def test_local_backend_costs_nothing():
    local = spec.loads("name: local-cost\nbackend: local\n")
    est = cost.estimate(local)
    assert est.usd_max == 0 and est.price is None and est.usd_per_hour is None
    assert est.note == "local backend: no cloud cost"
    assert "0 USD" in est.describe()


def test_unknown_price_is_infinite_and_serialises_as_null():
    est = cost.estimate(_spec(**{"instance.type": "ml.trn2.48xlarge"}))
    assert math.isinf(est.usd_max) and not est.known
    assert est.usd_per_hour is None and est.price is None
    assert "unknown" in est.describe() and "prices refresh" in est.note
    as_json = est.to_json()
    assert as_json["usd_max"] is None
    json.dumps(as_json, allow_nan=False)


def test_other_region_falls_back_to_us_east_1_and_says_so():
    est = cost.estimate(_spec(region="eu-west-1"))
    assert est.usd_per_hour == pytest.approx(1.34375 * MARKUP)
    assert "us-east-1 price used for eu-west-1" in est.describe()


def test_refreshed_price_file_in_orchestrator_home_wins(orch_home):
    rows = [{"type": "ml.trn2.48xlarge", "region": "us-east-1", "usd_per_hour": 50.0,
             "source": "AWS Price List API (AmazonSageMaker)", "as_of": "2026-09-01", "kind": "sagemaker-training"}]
    (orch_home / "prices.json").write_text(json.dumps({"prices": rows}))
    est = cost.estimate(_spec(**{"instance.type": "ml.trn2.48xlarge"}))
    assert est.usd_max == pytest.approx(1.5 * 50.0)
    assert "EC2" not in est.note
    assert "AWS Price List API" in est.describe() and "2026-09-01" in est.describe()


def test_to_json_round_trips_the_numbers():
    est = cost.estimate(_spec())
    data = json.loads(json.dumps(est.to_json()))
    assert data["usd_max"] == pytest.approx(est.usd_max)
    assert data["price"]["source"] == est.price.source
    assert data["describe"] == est.describe()


def test_an_unverified_price_is_marked_up_by_the_stated_factor_and_every_line_says_so():
    """An EC2 price never makes a budget pass silently: the bound carries the markup the data
    file states (with its source), and the line says the price is unverified and how to fix
    it, instead of "upper bound" beside "SageMaker prices are higher"."""
    markup = catalog.sagemaker_markup()
    assert markup.factor == MARKUP and markup.source and markup.as_of
    est = cost.estimate(_spec())
    assert not est.verified and est.markup == MARKUP
    line = est.describe()
    assert "x 1.5, an assumed SageMaker markup" in line and "1.3438 USD/h" in line and "2.0156 USD/h" in line
    assert "unverified price" in line and "prices refresh" in line
    assert "SageMaker ml.* prices are higher" not in line
    data = est.to_json()
    assert data["verified"] is False and data["markup"] == MARKUP
    assert data["price"]["usd_per_hour"] == pytest.approx(1.34375)  # the source price, as the catalog has it


def test_sagemakers_own_price_is_used_as_is(orch_home):
    rows = [{"type": "ml.trn1.2xlarge", "region": "us-east-1", "usd_per_hour": 1.6,
             "source": "AWS Price List API (AmazonSageMaker)", "as_of": "2026-12-01", "kind": "sagemaker-on-demand"}]
    (orch_home / "prices.json").write_text(json.dumps({"prices": rows}))
    est = cost.estimate(_spec())
    assert est.verified and est.markup == 1.0
    assert est.usd_max == pytest.approx(1.5 * 1.6)
    assert "unverified" not in est.describe() and "SageMaker's on-demand price" in est.note
