"""cli/prices: `prices refresh` prints what it found as a table whose columns stay aligned."""

from __future__ import annotations

from cli_harness import run_cli

from orchestrator import prices


def test_prices_refresh_prints_aligned_columns_whatever_the_lengths(orch_home, monkeypatch, capsys):
    found = [prices.Found(type="ml.trn1.2xlarge", region="eu-west-1", usd_per_hour=1.8, sku="SKU1", description=""),
             prices.Found(type="ml.trn1n.32xlarge", region="ap-southeast-2", usd_per_hour=31.2125,
                          sku="SKU-LONGER-2", description="")]
    monkeypatch.setattr(prices, "client", lambda: None)
    monkeypatch.setattr(prices, "fetch", lambda client, types, regions: prices.Refresh(as_of="2026-12-01",
                                                                                       found=found))
    code, out, err = run_cli(monkeypatch, capsys, "prices", "refresh", "--region", "eu-west-1",
                             "--types", "ml.trn1.2xlarge")
    assert code == 0, err
    lines = out.splitlines()
    header, rows = lines[0], lines[1:3]
    assert header.split() == ["TYPE", "REGION", "PRICE", "SKU"]
    assert rows[0].split() == ["ml.trn1.2xlarge", "eu-west-1", "1.8000", "USD/h", "SKU1"]
    assert rows[1].split() == ["ml.trn1n.32xlarge", "ap-southeast-2", "31.2125", "USD/h", "SKU-LONGER-2"]
    # Each column starts where its header does; prices end where theirs does.
    for row, (region, sku) in zip(rows, (("eu-west-1", "SKU1"), ("ap-southeast-2", "SKU-LONGER-2")), strict=True):
        assert row.index(region) == header.index("REGION") and row.index(sku) == header.index("SKU")
        assert row.index("USD/h") + len("USD/h") == header.index("PRICE") + len("PRICE")
    assert lines[3].startswith(f"wrote {prices.override_path()} (2 price(s)")
