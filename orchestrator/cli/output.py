"""What the commands print: stdout for results, stderr for notes and errors, data shown as
itself in rich output, and help text that wraps to the terminal."""

from __future__ import annotations

import inspect
import re
import sys

from orchestrator.errors import redact, visible


def out(text: str = "", *, styled: bool = False) -> None:
    """A line on stdout, every control character shown as its escape (`errors.visible`), as
    err does: values from results.json, the ledger or AWS never act on the terminal.
    `styled`: text a renderer coloured itself, having passed each value through `visible`."""
    _echo(sys.stdout, text if styled else visible(text))


def err(text: str) -> None:
    _echo(sys.stderr, visible(text))


def _echo(stream, text: str) -> None:
    # What typer.echo (click.echo) does with text: the line, then a flush; written here so that
    # printing needs no click, which `validate`'s fast path never imports (`cli.quick`). The
    # stream is looked up at each call (CliRunner swaps sys.stdout).
    # No line of ours shows a URL's credentials (a proxy's in AWS_ENDPOINT_URL, in a note).
    stream.write(f"{redact(text)}\n")
    stream.flush()


def plain(value):
    """`value` as a rich Text shown verbatim. Every piece of data that goes into a rich Table,
    status line or live display passes through here: rich reads a plain str as markup, so a
    `[/opt/ml/code]` in a failure reason would raise MarkupError and a `[user]` would vanish."""
    from rich.text import Text

    return Text("" if value is None else visible(str(value)))


def columns(*headers: tuple[str, str]):
    """A rich Table without borders: aligned columns under a header line, each (header,
    justify); a cell too wide for the terminal folds, never cut."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style=None)
    for header, justify in headers:
        table.add_column(header, justify=justify, overflow="fold")
    return table


# The width of output that is not on a terminal (a pipe, a file, a CI log).
OFF_TERMINAL_WIDTH = 100


def screen_width() -> int:
    """The width tables fit: $COLUMNS when set to a number (as `shutil.get_terminal_size`
    reads it), else the terminal's, else OFF_TERMINAL_WIDTH off a terminal."""
    import os
    import shutil

    text = os.environ.get("COLUMNS", "")
    if text.isdigit() and int(text) > 0:
        return int(text)
    if sys.stdout.isatty():
        return shutil.get_terminal_size((OFF_TERMINAL_WIDTH, 24)).columns
    return OFF_TERMINAL_WIDTH


def _fill(wants: dict[str, int], total: int) -> dict[str, int]:
    """Max-min fair shares of `total`: a column that wants less than an equal share gets what it
    wants, the others share the rest equally."""
    widths: dict[str, int] = {}
    rest = sorted(wants, key=wants.get)
    while rest:
        share = max(total, 0) // len(rest)
        if wants[rest[0]] > share:
            widths.update(dict.fromkeys(rest, share))
            break
        column = rest.pop(0)
        widths[column] = wants[column]
        total -= wants[column]
    return widths


def shared_widths(wants: dict[str, int], total: int, first: tuple[str, ...] = (), floor: int = 12) -> dict[str, int]:
    """Widths for columns that want `wants` characters within `total`. The `first` columns are
    served first (the others keep `floor` each, or what they want if less), fairly among
    themselves (`_fill`); what is left goes to the others. Rich's own sharing narrows every
    column in proportion, which folds a job name that would have fitted whole."""
    others = {c: min(w, floor) for c, w in wants.items() if c not in first}
    widths = _fill({c: wants[c] for c in first if c in wants}, total - sum(others.values()))
    left = total - sum(widths.values())
    widths.update(_fill({c: wants[c] for c in others}, left))
    return {c: max(widths[c], min(wants[c], 4)) for c in wants}


def fitted_table(title, gap: int = 3):
    """A rich Table for a screen of `screen_width()`: a rule under the header and between
    columns, no outer frame, so the cells get the room. `gap`: the characters between two
    columns' text, the rule among them (3: " │ ", 2: " │", 1: "│")."""
    from rich import box
    from rich.table import Table

    padding = {3: (0, 1), 2: (0, 1, 0, 0), 1: 0}[gap]
    return Table(title=title, title_justify="left", box=box.MINIMAL, show_edge=False, pad_edge=False,
                 padding=padding)


def fitting(columns: list[tuple[str, list[str], bool]], first: tuple[str, ...]) -> tuple[int, list[int]]:
    """(gap, widths) of a `fitted_table` of `columns` ((header, cells, kept whole), as
    `names.fitted_widths` takes them) on the screen: the widest gap between columns (3, then
    2, then 1) with which every column gets at least its least width (no word cut)."""
    from orchestrator.names import fitted_widths

    width = screen_width()
    for gap in (3, 2, 1):
        total = width - gap * (len(columns) - 1)
        widths = fitted_widths(columns, total, first=first)
        if sum(widths) <= total:
            break
    return gap, widths


def table_text(table, min_width: int = 0) -> str:
    """A rich Table as text at `screen_width()`, at least `min_width` columns (0: exactly the
    screen's; cells fold): never coloured, trailing newline dropped."""
    from rich.console import Console

    console = Console(width=max(min_width, screen_width()), force_terminal=False)
    with console.capture() as captured:
        console.print(table)
    return captured.get().rstrip("\n")


def finding_text(loaded, finding) -> str:
    """A doctor finding as one located line and its fix."""
    file, line, column = loaded.locate(finding.path)
    where = f"{file}:{line}:{column}" if line else (file or "<spec>")
    return f"{finding.severity}: {finding.rule} {where} {finding.path}: {finding.message}\n  fix: {finding.fix}"


_LIST_ITEM = re.compile(r"^(?:[-*]|\d+[.)])\s")


def reflowed(doc: str) -> str:
    """A docstring as help text: each paragraph's wrapped lines joined into one, list items kept
    one per line. Typer's rich help keeps every newline of a docstring, so lines wrapped at the
    source's width would show as ragged breaks in any other terminal width."""
    paragraphs = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            line = line.strip()
            if lines and not _LIST_ITEM.match(line):
                lines[-1] += " " + line
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def reflow_help(app) -> None:
    """Give each of `app`'s commands its docstring, reflowed, as help."""
    for info in app.registered_commands:
        if info.help is None and info.callback is not None and info.callback.__doc__:
            info.help = reflowed(info.callback.__doc__)


def fitted_text(headers: tuple[tuple[str, str], ...], rows: list[tuple[str, ...]], whole: tuple[str, ...] = (),
                first: tuple[str, ...] = ()) -> str:
    """A borderless table (`columns`) at `screen_width()`: the `whole` columns as wide as their
    values, the others sharing the rest (`shared_widths`, `first` served first), each cell
    broken at separators to its width (`names.shown_lines`), never folded mid-word."""
    from orchestrator.names import shown_lines

    names = [h for h, _ in headers]
    texts = [[visible(str(v)) for v in row] for row in rows]
    fixed = {h: max([len(h), *(len(r[i]) for r in texts)]) for i, h in enumerate(names) if h in whole}
    wants = {h: max([len(h), *(len(line) for r in texts for line in r[i].splitlines())])
             for i, h in enumerate(names) if h not in whole}
    widths = {**fixed, **shared_widths(wants, screen_width() - sum(fixed.values()) - 2 * (len(names) - 1), first)}
    table = columns(*headers)
    for column, name in zip(table.columns, names, strict=True):
        column.width, column.no_wrap = widths[name], name in whole
    for row in texts:
        table.add_row(*(plain(v if names[i] in whole else shown_lines(v, widths[names[i]])) for i, v in enumerate(row)))
    return table_text(table)


def grid_text(title: str, columns: list[str], widths: dict[str, int], rows: list[list[str]]) -> str | None:
    """What `table_text` writes for a `fitted_table` at gap 3 (rich's MINIMAL box, no edge, no
    edge padding, title on the left) of these `columns`, each `widths` wide, whose `rows` hold
    each cell as its lines, written directly: rich measures and wraps every cell again, most of
    a 1,000-trial `sweep status`'s time (docs/BENCHMARKS.md). None when rich would lay the table
    out otherwise (a line wider than its column, a table wider than the screen, a title longer
    than the table, a cell with a tab or a control character): the caller uses rich then."""
    total = sum(widths[c] for c in columns) + 3 * (len(columns) - 1)
    if total > screen_width() or len(title) > total or any(ord(ch) < 32 for ch in title):
        return None
    header = [[c] for c in columns]
    for cells in (header, *rows):
        for column, lines in zip(columns, cells, strict=True):
            if any(len(line) > widths[column] or not line.isprintable() for line in lines):
                return None
    out_lines = [title.ljust(total)]

    def emit(cells: list[list[str]]) -> None:
        for i in range(max(1, *(len(lines) for lines in cells))):
            out_lines.append(" │ ".join((lines[i] if i < len(lines) else "").ljust(widths[c])
                                        for c, lines in zip(columns, cells, strict=True)))

    emit(header)
    last = len(columns) - 1
    # A cell's padding is one space on each side that has a neighbour (no edge padding).
    out_lines.append("┼".join("─" * (widths[c] + (i > 0) + (i < last)) for i, c in enumerate(columns)))
    for cells in rows:
        emit(cells)
    return "\n".join(out_lines)
