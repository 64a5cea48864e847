"""`results`: the price-performance table of jobs' results.json objects, from any machine
that can read the results prefix."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from orchestrator.cli.options import check_region, job_option
from orchestrator.cli.output import err, out, screen_width
from orchestrator.region import REGION_DEFAULTS

app = typer.Typer()


def _results_prefix(prefix: str | None, spec_path: Path | None, region: str | None) -> tuple[str, str | None]:
    """(results prefix, region): --prefix, else the spec's output.uri, else the local store."""
    from orchestrator import results as res
    from orchestrator.errors import InputError

    if prefix is not None and spec_path is not None:
        raise InputError("--prefix and --spec both say where results live; give one",
                         hint="keep --prefix s3://bucket/jobs (the jobs' output.uri) or --spec job.yaml (its output.uri "
                              "and region), not both")
    if prefix is not None:
        return res.check_prefix(prefix, "--prefix"), region
    if spec_path is not None:
        from orchestrator import locations, spec

        loaded = spec.load(spec_path)
        return locations.output_uri(loaded), region or loaded.region
    local = res.local_store_uri()
    if not res.has_results(local):
        raise InputError(f"no --prefix given, and the local store ({local}) holds no results",
                         hint="for SageMaker jobs pass --prefix with the jobs' output.uri (s3://bucket/jobs) "
                              "or --spec with their job spec")
    return local, region


def _write(path: Path, option: str, data: bytes, example: str) -> None:
    """Write one output file atomically (a failed write leaves no truncated file behind)."""
    from orchestrator.errors import InputError
    from orchestrator.paths import write_hint, write_output_file

    try:
        write_output_file(path, data)
    except OSError as exc:
        what = {"--plot": "plot", "--html": "page"}.get(option, "file")
        raise InputError(f"{option} {path}: cannot write: {exc.strerror or exc}",
                         hint=f"the results above are complete; for the {what}, " + write_hint(
                             exc, f"run again with {option} a file in a folder you can write, e.g. {option} "
                                  f"{example}")) from None
    err(f"wrote {path} ({len(data)} bytes)")


@app.command()
def results(
    sweep: str | None = typer.Option(None, "--sweep", help="Only this sweep's jobs: a sweep id or a sweep name "
                                     "(tag orchestrator:sweep, or named <sweep>-...)."),
    job: str | None = typer.Option(None, "--job", callback=job_option, help="Only this job (exit 2 when it "
                                   "has no results object under the prefix)."),
    prefix: str | None = typer.Option(None, "--prefix", help="The jobs' output.uri (s3://bucket/jobs or "
                                      "file:///...). Default: --spec's, else the local store."),
    spec_path: Path | None = typer.Option(None, "--spec", help="A job spec whose output.uri and region to use."),
    fmt: str = typer.Option("table", "--format", help="table, csv or json."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the --format output to this file "
                                       "instead of stdout (a new file; see --force)."),
    force: bool = typer.Option(False, "--force", help="Let --output, --plot and --html replace an existing "
                               "regular file (never a link, folder or device)."),
    plot: Path | None = typer.Option(None, "--plot", help="Also write a PNG: samples per dollar and samples/s."),
    html: Path | None = typer.Option(None, "--html", help="Also write one self-contained HTML page (the table "
                                     "and the plots inlined; opens offline) for sharing."),
    sort: str = typer.Option("samples_per_dollar", "--sort", help="Order rows by this column: a header, a row "
                             "field (final_loss, samples_per_s...) or a varied field's dotted path; "
                             "optionally :asc or :desc (default: more is better first for throughput and "
                             "samples per dollar, less first for the rest)."),
    region: str | None = typer.Option(None, "--region", callback=check_region, help="Region of the S3 "
                                      "prefix, of jobs whose results name none, and where a sweep's SageMaker jobs "
                                      f"are listed (--spec: the spec's; default: {REGION_DEFAULTS})."),
    workers: int = typer.Option(16, "--workers", min=1, max=128, help="Parallel reads."),
    shown: str | None = typer.Option(None, "--columns", help="The table's columns: a comma-separated list of "
                                     "headers, row fields or varied paths, or all (every column, at its natural "
                                     "width). Default: the varied fields, instance, throughput, cost, samples "
                                     "per dollar, MFU, final loss and status, less those empty for every row, "
                                     "fitted to the terminal (100 columns off a terminal). CSV, JSON and HTML "
                                     "always carry every column."),
    mlflow: str | None = typer.Option(None, "--mlflow", help="Read the jobs' runs back from this MLflow tracking "
                                      "server (a URL, or a SageMaker MLflow ARN with the sagemaker-mlflow plugin) "
                                      "instead of results.json: --experiment, or --sweep, names which."),
    experiment: str | None = typer.Option(None, "--experiment", help="With --mlflow: the experiment (default: "
                                          "the --sweep's name)."),
) -> None:
    """Price-performance table from the jobs' results.json objects, SageMaker and prices.

    Needs no ledger: works from any machine that can read the results prefix. Exit 1 when a
    job's results could not be fetched even after retries (its row says why).
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator import results as res
    from orchestrator.errors import InputError

    if mlflow is not None:
        _mlflow_runs(mlflow, experiment, sweep, fmt)
        return
    if experiment is not None:
        raise InputError("--experiment is for --mlflow", hint="add --mlflow URI, or drop --experiment")
    if shown is not None and fmt != "table":
        raise InputError(f"--columns is for the table; --format {fmt} always carries every column",
                         hint=f"drop --columns, or drop --format {fmt}")
    renderers = {"table": None, "csv": res.render_csv, "json": res.render_json}
    if fmt not in renderers:
        raise InputError(f"--format {fmt!r}: use table, csv or json",
                         hint="table (the default) is for reading; --format csv or --format json for other tools")
    from orchestrator.paths import check_write_targets

    # Before reading anything: a device or FIFO is never replaced, no folder is created.
    check_write_targets([(output, "--output"), (plot, "--plot"), (html, "--html")], force=force)
    where, region = _results_prefix(prefix, spec_path, region)
    stderr = Console(stderr=True)
    with Progress(TextColumn("reading results"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=stderr, transient=True, disable=not stderr.is_terminal) as bar:
        task = bar.add_task("results", total=None)
        collection = res.collect(where, job=job, sweep=sweep, region=region, workers=workers,
                                 progress=lambda done, total: bar.update(task, completed=done, total=total))
    if not collection.rows:
        what = f" for sweep {sweep}" if sweep else ""
        raise InputError(f"no results{what} under {where}",
                         hint="check --sweep / --prefix (results live at <output.uri>/results/<job>/results.json)")
    from dataclasses import replace

    collection = replace(collection, rows=res.sort_rows(collection.rows, sort))
    if fmt == "table":
        chosen = res.select_columns(collection.rows, shown)
        width = None if shown is not None and shown.strip() == "all" else screen_width()
        text = res.render_table(collection, width=width, color=output is None and sys.stdout.isatty(), shown=chosen)
    else:
        text = renderers[fmt](collection)
    if output is None:
        out(text.rstrip("\n"), styled=fmt == "table")
    else:
        _write(output, "--output", text.encode("utf-8"), f"results.{'txt' if fmt == 'table' else fmt}")
    if plot is not None:
        _write(plot, "--plot", res.render_plot(collection), "results.png")
    if html is not None:
        _write(html, "--html", res.render_html(collection, sort=sort).encode("utf-8"), "report.html")
    if collection.errors:
        err(f"error: {len(collection.errors)} job(s) could not be read; their rows say why")
        raise typer.Exit(code=1)


def _mlflow_runs(uri: str, experiment: str | None, sweep: str | None, fmt: str) -> None:
    """`results --mlflow`: the jobs' runs read back from the tracking server."""
    import json

    from orchestrator import names
    from orchestrator.errors import InputError
    from orchestrator.results import mlflow_runs

    if experiment is None:
        if sweep is None:
            raise InputError("--mlflow needs --experiment NAME or --sweep SWEEP",
                             hint="the experiment is the spec's mlflow.experiment (default: the sweep's name)")
        parsed = names.SWEEP_ID.fullmatch(sweep)
        experiment = parsed["name"] if parsed else sweep
    if fmt not in ("table", "json"):
        raise InputError(f"--format {fmt!r} with --mlflow: use table or json", hint="--format json carries every field")
    runs = mlflow_runs.read_runs(uri, experiment, sweep)
    if fmt == "json":
        out(json.dumps({"tracking_uri": uri, "experiment": experiment, "runs": runs}, indent=2, sort_keys=True))
        return
    if not runs:
        err(f"no runs of our jobs in experiment {experiment!r} at {uri}")
        return
    for run in runs:
        metrics = run["metrics"]
        figures = ", ".join(f"{key} {metrics[key]:.4g}" for key in ("final/samples_per_s", "final/samples_per_dollar",
                                                                    "train/loss") if key in metrics)
        out(f"{run['run_id']}  {run['status']:<9} {run['run_name']}  {figures}")
