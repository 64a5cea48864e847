"""Price-performance results: read `results.json` objects, join the jobs' backends and prices,
render.

- `read`: a results.json object validated against `entrypoints.shared.results_schema`, and where
  results live;
- `rows`: one row per job, the arithmetic, the ranking, sweep membership;
- `collect`: every job under a prefix, in parallel, into a `Collection`;
- `render`: table, CSV, JSON and PNG (they never print: the CLI does);
- `columns`: the table's columns (the fields a sweep varied among them) and `--sort`;
- `page`: the self-contained HTML report.
"""

from orchestrator.results.collect import DEFAULT_WORKERS, client_config, collect
from orchestrator.results.columns import (
    COLUMNS,
    DEFAULT_SORT,
    select_columns,
    sort_rows,
    table_columns,
    varied_paths,
)
from orchestrator.results.page import render_html
from orchestrator.results.read import (
    RESULTS_DIR,
    RESULTS_FILE,
    SCHEMA,
    ResultsPrefix,
    UnreadableResults,
    check_prefix,
    has_results,
    local_store_uri,
    parse,
)
from orchestrator.results.render import render_csv, render_json, render_plot, render_table
from orchestrator.results.rows import ERROR, MISSING, UNREADABLE, Collection, Row, build_row, in_sweep, rank

__all__ = [
    "COLUMNS", "DEFAULT_SORT", "DEFAULT_WORKERS", "ERROR", "MISSING", "RESULTS_DIR", "RESULTS_FILE", "SCHEMA", "UNREADABLE",
    "Collection", "ResultsPrefix", "Row", "UnreadableResults", "build_row", "check_prefix", "client_config",
    "collect", "has_results", "in_sweep", "local_store_uri", "parse", "rank", "render_csv", "render_json",
    "render_html", "render_plot", "render_table", "select_columns", "sort_rows", "table_columns", "varied_paths",
]
