"""`prices`: instance prices, refreshed from the AWS Price List API."""

from __future__ import annotations

import typer

from orchestrator.cli.options import check_region
from orchestrator.cli.output import columns, err, out, plain, table_text
from orchestrator.region import REGION_DEFAULTS

app = typer.Typer(name="prices", no_args_is_help=True,
                  help="Instance prices: refresh them from the AWS Price List API.")


@app.command("refresh")
def prices_refresh(
    region: list[str] = typer.Option([], "--region", callback=check_region, help="Region to price "
                                     f"(repeatable; default: {REGION_DEFAULTS})."),
    types: list[str] = typer.Option([], "--types", help="Instance types (repeatable or comma-separated; "
                                    "default: the catalog's training types)."),
) -> None:
    """Fetch SageMaker training prices and write $ORCHESTRATOR_HOME/prices.json (atomic, merged)."""
    from orchestrator import prices
    from orchestrator.errors import BackendError
    from orchestrator.region import default_region

    wanted = [t.strip() for item in types for t in item.split(",") if t.strip()] or prices.default_types()
    regions = region or [default_region()]
    prices.check_known(wanted, regions)
    refresh = prices.fetch(prices.client(), wanted, regions)
    if refresh.found:
        table = columns(("TYPE", "left"), ("REGION", "left"), ("PRICE", "right"), ("SKU", "left"))
        for found in refresh.found:
            table.add_row(*map(plain, (found.type, found.region, f"{found.usd_per_hour:.4f} USD/h", found.sku)))
        out(table_text(table, 80))
    for type_, where in refresh.missing:
        err(f"warning: no SageMaker training price for {type_} in {where}; its price is unchanged")
    for note in refresh.notes:
        err(f"note: {note}")
    if not refresh.found:
        raise BackendError("the Price List API returned no training price for any type asked; nothing written",
                           hint="check --types and --region")
    path = prices.write(refresh)
    out(f"wrote {path} ({len(refresh.found)} price(s), source {prices.SOURCE}, as of {refresh.as_of})")
