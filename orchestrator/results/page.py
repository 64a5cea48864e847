"""The results report: one self-contained HTML page of a `Collection`, for sharing.

Contract:
- `render_html(collection, sort=...)` returns the page as text: the table of
  `columns.table_columns` (the varied fields and the final loss among them), the rows' notes
  and price sources, and the plots as PNG images inlined as `data:` URIs. The page loads
  nothing (no script, no stylesheet, no font, no image from any address), so it opens the
  same offline, attached to a mail or from a bucket.
- Plots: price-performance and throughput (`render.render_plot`) when a row has a throughput;
  final loss per job (`loss_plot`) when a row has a final loss, against the varied field when
  the rows varied exactly one numeric field. A page with no plot says why.
- Every value is HTML-escaped: a job name, note or varied value is text, never markup.
"""

from __future__ import annotations

import base64
import html
import io
import math
from datetime import datetime, timezone

from orchestrator.errors import InputError
from orchestrator.results import columns, render
from orchestrator.results.rows import Collection, Row

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; }
th { background: #f2f2f2; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.bad td { color: #b00020; }
th.varied, td.varied { background: #eef6ff; }
img { max-width: 100%; margin: 1em 0; border: 1px solid #eee; }
ul { font-size: 13px; }
"""


def _numeric(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def loss_plot(collection: Collection) -> bytes | None:
    """A PNG of the final loss per job (against the varied field when there is exactly one and
    it is numeric); None when no row has a final loss."""
    rows = [r for r in collection.rows if r.final_loss is not None]
    if not rows:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    varied = columns.varied_paths(rows)
    fig = Figure(figsize=(8, max(3.0, 0.4 * len(rows) + 1.5)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    if len(varied) == 1 and all(_numeric(r.varied.get(varied[0])) for r in rows):
        path = varied[0]
        xs = [float(r.varied[path]) for r in rows]
        ax.scatter(xs, [r.final_loss for r in rows], color="#2a7ab0")
        if min(xs) > 0 and max(xs) / min(xs) >= 10:
            ax.set_xscale("log")
        ax.set_xlabel(path)
        ax.set_ylabel("final loss")
    else:
        labels = [", ".join(f"{p}={columns.shown_value(v)}" for p, v in r.varied.items()) or r.job for r in rows]
        ys = list(range(len(rows)))
        ax.barh(ys, [r.final_loss for r in rows], color="#2a7ab0")
        ax.set_yticks(ys, labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("final loss")
    ax.set_title("final loss")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">'


def _row_html(row: Row, shown: list[columns.Column]) -> str:
    cells = []
    for column in shown:
        classes = [c for c in ("num" if column.fmt not in ("s", "v") else "",
                               "varied" if column.varied else "") if c]
        attr = f' class="{" ".join(classes)}"' if classes else ""
        cells.append(f"<td{attr}>{html.escape(render.cell(row, column))}</td>")
    bad = "" if row.ok else ' class="bad"'
    return f"<tr{bad}>{''.join(cells)}</tr>"


def render_html(collection: Collection, *, sort: str = columns.DEFAULT_SORT,
                now: datetime | None = None) -> str:
    """The page (see the module docstring); rows in the collection's order, `sort` named."""
    shown = columns.table_columns(collection.rows)
    marked = ' class="varied"'
    head = "".join(f"<th{marked if c.varied else ''}>{html.escape(c.header)}</th>" for c in shown)
    body = "\n".join(_row_html(row, shown) for row in collection.rows)
    plots = []
    try:
        plots.append(_img(render.render_plot(collection), "samples per dollar and samples/s per job"))
    except InputError as exc:
        plots.append(f"<p>No price-performance plot: {html.escape(exc.message)}.</p>")
    loss = loss_plot(collection)
    plots.append(_img(loss, "final loss per job") if loss else "<p>No loss plot: no job has a final loss.</p>")
    notes = [f"{row.job}: {row.note}" for row in collection.rows if row.note]
    notes += [f"price: {source}" for source in sorted({r.price_source for r in collection.rows if r.price_source})]
    notes_html = ("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>"
                  if notes else "")
    varied = columns.varied_paths(collection.rows)
    varied_text = f"; varied: {', '.join(varied)}" if varied else ""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    title = f"results under {collection.prefix}"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n"
        f"<p>{len(collection.rows)} job(s), sorted by {html.escape(sort)}{html.escape(varied_text)}; "
        f"written {stamp} by python -m orchestrator results.</p>\n"
        f"<table><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>\n"
        f"{notes_html}\n<h2>Plots</h2>\n" + "\n".join(plots) + "\n</body></html>\n"
    )
