"""Rendering results: a rich table, CSV, JSON and a PNG plot of a `Collection`.

Each renderer returns a string (or PNG bytes) and never prints; the CLI does. Cell values
are data, never rich markup. The table shows `columns.table_columns` (the fields a sweep
varied and the final loss among them); CSV and JSON carry every Row field and name the varied
fields as columns too. Rows keep the collection's order (`columns.sort_rows` sorts them).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, fields

from orchestrator import cost, names
from orchestrator.errors import InputError, visible
from orchestrator.names import shown_lines
from orchestrator.results import columns
from orchestrator.results.rows import Collection, Row

# Columns computed from the price: marked "~" when the price is unverified (cost.rate).
_PRICED = frozenset({"price_per_hour", "cost_per_million_samples", "samples_per_dollar", "relative",
                     "tflop_per_dollar"})


def _cell(row: Row, attr: str, fmt: str) -> str:
    if attr.startswith("varied:"):
        value = row.varied.get(attr.removeprefix("varied:"))
        return "-" if value is None else columns.shown_value(value)
    value = getattr(row, attr)
    if value is None:
        return row.backend if attr == "price_per_hour" and not row.cloud else "-"
    text = format(value, fmt) if fmt != "s" else str(value)
    if attr == "host_vcpu" and row.input_bound:
        return f"{text} input-bound"
    if attr == "instance" and row.failover_from:
        return f"{text} (failover from {row.failover_from})"
    return f"~{text}" if attr in _PRICED and row.price_verified is False else text


def render_table(collection: Collection, width: int | None = None, color: bool = False,
                 shown: list[columns.Column] | None = None) -> str:
    """A rich table (as text) of the rows, then one line per note and the price sources.
    `shown` are its columns (default: every `columns.table_columns` column). With `width`, every
    line fits it (a compact table, number columns whole, text folded, notes wrapped); without,
    the table takes its natural width with rules between columns (`--columns all`)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Values are data, never rich markup (an instance type or prefix with "[/x]" in it): Text.
    if shown is None:
        shown = columns.table_columns(collection.rows)
    fitted = width is not None
    if fitted:
        # Fitted to a screen: no vertical rules and one space between columns (the box's blank
        # divider, no padding), so cells get the room.
        from rich import box

        table = Table(title=Text(visible(f"results under {collection.prefix}")), title_justify="left",
                      box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0)
    else:
        table = Table(title=Text(visible(f"results under {collection.prefix}")), title_justify="left")
    # Values are data from results.json objects: shown, never acting on the terminal.
    cells = [[visible(cell(row, column)) for column in shown] for row in collection.rows]
    headers = [visible(_short_header(column, shown) if fitted else column.header) for column in shown]
    numbers = [column.fmt not in ("s", "v") for column in shown]
    # Fitted: each column gets its width from `names.fitted_widths` (numbers whole, no word cut),
    # and its text is broken at separators to that width (`names.shown_lines`), so rich never
    # folds a job name, an instance type or a header mid-word.
    widths = names.fitted_widths([(header, [row[i] for row in cells], numbers[i]) for i, header in enumerate(headers)],
                                 width - (len(headers) - 1), first=_FIRST) if fitted else None
    for i, header in enumerate(headers):
        table.add_column(shown_lines(header, widths[i]) if widths else header,
                         justify="right" if numbers[i] else "left", overflow="fold",
                         width=widths[i] if widths else None)
    for row, texts in zip(collection.rows, cells, strict=True):
        style = None if row.ok else "red"
        table.add_row(*(Text(shown_lines(text, widths[i]) if widths else text) for i, text in enumerate(texts)),
                      style=style)
    buffer = io.StringIO()
    # Every column squeezed into a narrow terminal becomes unreadable: the CLI passes a width
    # with a few columns (`columns.select_columns`); without one the table takes its natural
    # width (a ceiling, not a target), which `--columns all` shows.
    console = Console(file=buffer, width=width or 400, force_terminal=color, no_color=not color,
                      color_system="auto" if color else None)
    console.print(table)
    shortened = [(_short_header(c, shown), c.header) for c in shown if fitted and _short_header(c, shown) != c.header]
    if shortened:
        console.print(visible("varied: " + ", ".join(f"{short} = {full}" for short, full in shortened)), markup=False,
                      highlight=False)
    for row in collection.rows:
        if row.note:
            console.print(visible(f"{row.job}: {row.note}"), markup=False, highlight=False)
    sources = sorted({r.price_source for r in collection.rows if r.price_source})
    for source in sources:
        console.print(visible(f"price: {source}"), markup=False, highlight=False)
    for source in sorted({r.peak_source for r in collection.rows if r.peak_source}):
        console.print(visible(f"MFU peak: {source}"), markup=False, highlight=False)
    if any(r.price_verified is False for r in collection.rows):
        console.print(f"~ estimated: an EC2 price times an assumed SageMaker markup, not SageMaker's own price "
                      f"({cost.UNVERIFIED})", markup=False, highlight=False)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


# The column a fitted table serves first with what is left: the job's name, whole if it can be.
_FIRST = ("job",)


def _short_header(column: columns.Column, shown: list[columns.Column]) -> str:
    """A varied field's header in a fitted table: its last dotted segment (`lr`), unless another
    shown column has that header too."""
    if not column.varied:
        return column.header
    last = column.header.rsplit(".", 1)[-1]
    clash = [c for c in shown if c is not column and (c.header == last or c.header.rsplit(".", 1)[-1] == last)]
    return column.header if clash else last


def cell(row: Row, column: columns.Column) -> str:
    """The text of one table cell."""
    return _cell(row, column.key, column.fmt)


def _record(row: Row) -> dict:
    return asdict(row)


# OWASP, CSV Injection (https://owasp.org/www-community/attacks/CSV_Injection): "Ensure that no
# cells begin with any of the following characters: Equals to (=), Plus (+), Minus (-), At (@),
# Tab (0x09), Carriage return (0x0D)"; the fix it gives prepends a single quote to such a cell
# (and quotes cells, which the csv module does for any cell holding a separator or quote).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """A CSV cell a spreadsheet shows as text: a string from results.json beginning with a
    formula character gets a leading single quote (OWASP's fix); numbers stay numbers."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def render_csv(collection: Collection) -> str:
    """CSV with a header of Row field names, the varied fields (`varied`) as one column per
    dotted path right after `job`; unknown values are empty cells. No cell (header included)
    can run as a spreadsheet formula (`csv_cell`)."""
    buffer = io.StringIO()
    varied = columns.varied_paths(collection.rows)
    names = [f.name for f in fields(Row) if f.name != "varied"]
    names[1:1] = varied
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([csv_cell(name) for name in names])
    for row in collection.rows:
        record = _record(row)
        values = record.pop("varied")
        record.update({path: values.get(path) for path in varied})
        writer.writerow([csv_cell(_csv_value(record[name])) for name in names])
    return buffer.getvalue()


def _csv_value(value):
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return str(value)  # as csv.DictWriter wrote it
    return value


def render_json(collection: Collection) -> str:
    """{"prefix", "varied": [dotted paths], "rows": [Row fields...]}; unknown values are null;
    each row's `varied` holds its values of those paths."""
    return json.dumps({"prefix": collection.prefix, "varied": columns.varied_paths(collection.rows),
                       "rows": [_record(r) for r in collection.rows]}, indent=2)


def _label(row: Row) -> str:
    parts = [", ".join(f"{path.rsplit('.', 1)[-1]}={columns.shown_value(v)}" for path, v in row.varied.items())]
    parts = [p for p in parts if p]
    # A local row's instance already says its CPUs ("local CPU x2"): no "x1" count after it.
    counted = row.cloud and row.count is not None
    parts.append((f"{row.instance} x{row.count}" if counted else row.instance) if row.instance else "?")
    if row.failover_from:
        parts.append(f"(failover from {row.failover_from})")
    if row.global_batch is not None:
        parts.append(f"b{row.global_batch}")
    if row.precision:
        parts.append(row.precision)
    if row.runtime:
        parts.append(row.runtime)
    return f"{row.job}\n{' '.join(parts)}"


def render_plot(collection: Collection) -> bytes:
    """A PNG: samples per dollar (left) and samples/s (right) per job and configuration.

    Raises InputError when no row has a throughput to plot.
    """
    rows = [r for r in collection.rows if r.samples_per_s is not None]
    if not rows:
        raise InputError("nothing to plot: no job has a measured samples/s",
                         hint="wait for jobs to complete, or check the rows' status and notes")
    # The Agg canvas directly, not pyplot: no global backend switch, no GUI, thread-safe enough.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels = [_label(r) for r in rows]
    ys = list(range(len(rows)))
    height = max(3.0, 0.6 * len(rows) + 1.5)
    fig = Figure(figsize=(13, height), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, sharey=True)
    per_dollar = [r.samples_per_dollar or 0.0 for r in rows]
    bars = left.barh(ys, per_dollar, color=["#2a7ab0" if r.samples_per_dollar else "#cccccc" for r in rows])
    for bar, row in zip(bars, rows, strict=True):
        text = (f"{row.samples_per_dollar:,.0f} ({row.relative:.2f})" if row.relative is not None
                else f"{row.samples_per_dollar:,.0f}" if row.samples_per_dollar else
                (f"{row.backend} job: no cloud cost" if not row.cloud else "no price known"))
        left.annotate(text, (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(3, 0),
                      textcoords="offset points", va="center", fontsize=8)
    left.set_yticks(ys, labels, fontsize=8)
    left.invert_yaxis()
    if any(per_dollar):
        left.set_xlim(0, max(per_dollar) * 1.4)  # room for the labels right of the bars
    else:
        left.set_xlim(0, 1)
        left.set_xticks([])
    left.set_xlabel("samples per dollar (relative to best)")
    left.set_title("price-performance")
    throughput = [r.samples_per_s for r in rows]
    right.barh(ys, throughput, color="#e08a2c")
    for y, value in zip(ys, throughput, strict=True):
        right.annotate(f"{value:,.1f}", (value, y), xytext=(3, 0), textcoords="offset points", va="center",
                       fontsize=8)
    right.set_xlabel("samples/s (global)")
    right.set_title("throughput")
    right.set_xlim(0, max(throughput) * 1.25 or 1.0)
    fig.suptitle(f"results under {collection.prefix}", fontsize=9)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
