"""The command line. The only module that prints or exits.

Exit codes: 0 ok, 2 bad input (spec, flags, files), 1 backend or job failure. Errors are
printed as one clear message (with a hint); `--debug` shows the traceback instead.
Heavy imports (boto3, torch, matplotlib) happen inside the commands that need them, so
`validate`, `doctor`, `plan` and `schema` start fast and never import torch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from orchestrator.errors import OrchestratorError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Train Vision Transformers on AWS Trainium through Amazon SageMaker.")
_state = {"debug": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors.")) -> None:
    _state["debug"] = debug


def _out(text: str = "") -> None:
    typer.echo(text)


def _err(text: str) -> None:
    typer.echo(text, err=True)


@app.command()
def schema() -> None:
    """Print the job spec's JSON Schema (for editors)."""
    from orchestrator import spec

    _out(json.dumps(spec.json_schema(), indent=2))


@app.command()
def validate(path: Path = typer.Argument(..., help="Job spec YAML.")) -> None:
    """Check a job spec: fields, types and cross-field rules. Exit 2 with locations if wrong."""
    from orchestrator import spec

    loaded = spec.load(path)
    _out(f"{path}: ok ({loaded.name}, {loaded.backend}, {loaded.instance.type} x{loaded.instance.count})")


def main() -> None:
    """Run the CLI, turning our errors into one message and an exit code.

    Usage errors (unknown command, missing argument) are typer's own: exit 2.
    """
    try:
        app()
    except OrchestratorError as exc:
        if _state["debug"]:
            raise
        _err(f"error: {exc.message}")
        if exc.hint:
            _err(f"hint: {exc.hint}")
        sys.exit(exc.exit_code)
