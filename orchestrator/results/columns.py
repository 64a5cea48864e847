"""The columns of a results table, those a sweep varied included, and sorting rows by one.

Contract:
- `table_columns(rows)` is what the table and the HTML page show, in order: the job, one column
  per field the rows' sweeps varied (`Row.varied`, dotted spec paths, in the order first
  met), the fixed `COLUMNS`, the final loss, and the status last.
- `varied_paths(rows)` are those dotted paths; CSV and JSON name them as columns too.
- `sort_rows(rows, key)` orders rows by one column, named by its header (`samples/USD`), its
  Row attribute (`samples_per_dollar`) or a varied path (`training.optimizer.lr`), optionally
  followed by `:asc` or `:desc`. Without a direction, columns where more is better
  (throughput, samples per dollar, cache hits...) sort descending and the others (loss, cost,
  time, the varied values) ascending. Rows without a value follow, in their former order.
  `DEFAULT_SORT` is samples per dollar (`rows.rank`'s order). An unknown column is an
  InputError listing the ones there are.
- `select_columns(rows, spec)` is what the terminal table shows: `spec` None or "default"
  gives `DEFAULT_SHOWN` (the job, the varied fields, then instance, throughput, cost, samples
  per dollar, MFU, final loss, status) less the columns empty for every row; "all" gives every
  `table_columns` column; otherwise a comma-separated list of headers, Row attributes or
  varied paths, in the order given (an unknown name is an InputError listing the known ones).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import InputError
from orchestrator.results.rows import Row

DEFAULT_SORT = "samples_per_dollar"
# Row attributes where a larger value is better: they sort descending unless told otherwise.
HIGHER_IS_BETTER = frozenset({"samples_per_s", "samples_per_dollar", "relative", "cache_hit_ratio",
                              "steps_done", "spot_savings"})


@dataclass(frozen=True)
class Column:
    """One column: its header, what it reads from a row, and how a value is written."""

    header: str
    key: str  # a Row attribute, or "varied:<dotted path>"
    fmt: str

    def value(self, row: Row) -> Any:
        if self.key.startswith("varied:"):
            return row.varied.get(self.key.removeprefix("varied:"))
        return getattr(row, self.key)

    @property
    def varied(self) -> bool:
        return self.key.startswith("varied:")


# The table's fixed columns, in order.
COLUMNS = (
    # (header, Row attribute, format)
    ("job", "job", "s"),
    ("instance", "instance", "s"),
    ("n", "count", "d"),
    ("cores", "cores", "d"),
    ("runtime", "runtime", "s"),
    ("prec", "precision", "s"),
    ("global batch", "global_batch", "d"),  # all workers' samples a step, not batch_size
    ("step p50 s", "step_time_p50_s", ".4f"),
    ("samples/s", "samples_per_s", ",.1f"),
    ("USD/h", "price_per_hour", ".4f"),
    ("USD/M samples", "cost_per_million_samples", ".4f"),
    ("samples/USD", "samples_per_dollar", ",.0f"),
    ("rel.", "relative", ".2f"),
    ("MFU", "mfu", ".1%"),
    ("TFLOP/USD", "tflop_per_dollar", ",.0f"),
    ("NC util", "neuroncore_util", ".0f"),
    ("vCPU", "host_vcpu", ".0f"),
    ("compile s", "compile_s", ".1f"),
    ("precompile s", "precompile_s", ".1f"),
    ("cache hit", "cache_hit_ratio", ".0%"),
    ("queue s", "queue_s", ".0f"),
    ("run s", "run_s", ".0f"),
    ("backend", "backend", "s"),
    ("status", "status", "s"),
)


FINAL_LOSS = Column("final loss", "final_loss", ".4g")


def varied_paths(rows: Iterable[Row]) -> list[str]:
    """The dotted paths the rows' sweeps varied, in the order first met."""
    seen: dict[str, None] = {}
    for row in rows:
        for path in row.varied:
            seen.setdefault(path, None)
    return list(seen)


def table_columns(rows: Iterable[Row]) -> list[Column]:
    """The table's columns for these rows (see the module docstring)."""
    fixed = [Column(header, attr, fmt) for header, attr, fmt in COLUMNS]
    job = [c for c in fixed if c.key == "job"]
    status = [c for c in fixed if c.key == "status"]
    middle = [c for c in fixed if c.key not in ("job", "status")]
    varied = [Column(path, f"varied:{path}", "v") for path in varied_paths(rows)]
    return [*job, *varied, *middle, FINAL_LOSS, *status]


# The default table's columns after the job and the varied fields (Row attributes, in order).
DEFAULT_SHOWN = ("instance", "samples_per_s", "cost_per_million_samples", "samples_per_dollar", "mfu",
                 "final_loss", "status")


def _empty(rows: list[Row], column: Column) -> bool:
    """Whether no row has a value in `column` (the table would show "-" all the way down)."""
    return all(column.value(row) is None for row in rows)


def select_columns(rows: list[Row], spec: str | None = None) -> list[Column]:
    """The columns the terminal table shows for `spec` (see the module docstring)."""
    every = table_columns(rows)
    if spec is None or spec.strip() == "default":
        keep = ("job", *(c.key for c in every if c.varied), *DEFAULT_SHOWN)
        by_key = {c.key: c for c in every}
        return [by_key[key] for key in keep
                if key in ("job", "status") or not _empty(rows, by_key[key])]
    if spec.strip() == "all":
        return every
    names = [name.strip() for name in spec.split(",") if name.strip()]
    if not names:
        raise InputError(f"--columns {spec!r}: no column named",
                         hint="give a comma-separated list such as job,instance,samples/s,status, or all")
    chosen: list[Column] = []
    for name in names:
        column = next((c for c in every if name in (c.header, c.key, c.key.removeprefix("varied:"))), None)
        if column is None:
            raise InputError(f"--columns: no column {name!r}",
                             hint="choose among: " + ", ".join(c.header for c in every)
                                  + " (a header, a row field name such as samples_per_dollar, or a varied "
                                    "field's dotted path), or all")
        if column not in chosen:
            chosen.append(column)
    return chosen


def shown_value(value: Any) -> str:
    """A varied value as a cell shows it: numbers compactly (1e-05, 0.001, 32), the rest as text."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return format(value, "g") if isinstance(value, float) else str(value)


def _sort_key(value: Any) -> tuple:
    """Numbers before text, each in its own order (a sweep may vary a field over mixed types)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def find_column(rows: list[Row], name: str) -> Column:
    """The column `name` names (header, Row attribute or varied path); InputError otherwise."""
    columns = table_columns(rows)
    extra = [Column(attr, attr, "") for attr in Row.__dataclass_fields__ if attr not in ("varied", "note", "uri")]
    for column in [*columns, *extra]:
        if name in (column.header, column.key, column.key.removeprefix("varied:")):
            return column
    known = ", ".join(c.header for c in columns)
    raise InputError(f"--sort {name!r}: no such column",
                     hint=f"sort by one of: {known} (a header, a row field name such as samples_per_dollar, or a "
                          "varied field's dotted path), optionally with :asc or :desc")


def sort_rows(rows: list[Row], key: str = DEFAULT_SORT) -> list[Row]:
    """`rows` ordered by the column `key` names (see the module docstring)."""
    name, _, direction = key.partition(":")
    if direction not in ("", "asc", "desc"):
        raise InputError(f"--sort {key!r}: the direction after ':' is asc or desc",
                         hint="e.g. --sort final_loss:asc or --sort samples/s:desc")
    column = find_column(rows, name)
    if column.key == DEFAULT_SORT and direction in ("", "desc"):
        return list(rows)  # rows.rank's order: best samples per dollar first, then the unranked
    descending = direction == "desc" or (not direction and column.key in HIGHER_IS_BETTER)
    have: list[Row] = []
    lack: list[Row] = []
    for row in rows:
        value = column.value(row)
        missing = value is None or (isinstance(value, float) and not math.isfinite(value))
        (lack if missing else have).append(row)
    keyed: Callable[[Row], tuple] = lambda row: _sort_key(column.value(row))  # noqa: E731
    return sorted(have, key=keyed, reverse=descending) + lack
