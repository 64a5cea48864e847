"""`tensorboard`: a sweep's (or a job's) TensorBoard event files in one local folder, one run
per job, and the command that shows them."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from orchestrator.cli.options import check_region
from orchestrator.cli.output import err, out

app = typer.Typer()


@app.command()
def tensorboard(
    target: str = typer.Argument(..., help="A sweep id or sweep name, or a job name."),
    folder: Path | None = typer.Option(None, "--dir", help="Where the runs go (default: "
                                       "$ORCHESTRATOR_HOME/tensorboard/<target>)."),
    prefix: str | None = typer.Option(None, "--prefix", help="The jobs' output.uri (s3://bucket/jobs or "
                                      "file:///...). Default: --spec's, else the local store."),
    spec_path: Path | None = typer.Option(None, "--spec", help="A job spec whose output.uri and region to use."),
    region: str | None = typer.Option(None, "--region", callback=check_region, help="Region of the S3 prefix."),
) -> None:
    """Fetch the TensorBoard event files of a sweep's jobs (or of one job) into one folder, one
    run per job named by what its sweep varied, and print the `tensorboard --logdir` command.

    Exit 2 for a sweep or job with no results under the prefix.
    """
    from orchestrator import names
    from orchestrator.cli.results import _results_prefix
    from orchestrator.errors import InputError
    from orchestrator.paths import home
    from orchestrator.results import tensorboard as boards

    if not target.strip():
        # Before collect's own check, which speaks of `results --sweep`, an option this command lacks.
        raise InputError("the sweep or job to show is empty",
                         hint="give a sweep id (e.g. instances-1a2b3c4d), a sweep name or a job name")
    where, region = _results_prefix(prefix, spec_path, region)
    folder = folder or home() / "tensorboard" / target
    try:
        runs = boards.fetch(where, folder, sweep=target, region=region)
    except InputError as not_a_sweep:
        if not names.is_job_name(target):
            raise
        try:
            runs = boards.fetch(where, folder, job=target, region=region)  # one job, not a sweep
        except InputError:
            raise not_a_sweep from None
    for run in runs:
        err(f"{run.name}: {run.found} file(s), {run.fetched} fetched ({run.job})")
    if not any(run.found for run in runs):
        err("no event files yet: jobs write them from their first logged step (SageMaker uploads them while "
            "the job runs; Batch jobs and the local backend when they end)")
    out(f"tensorboard --logdir {shlex.quote(str(folder))}")
