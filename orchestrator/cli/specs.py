"""Commands on one job spec: schema, validate, doctor, plan, smoke. None calls AWS; validate
is on the fast path (its work, `quick.check_spec`, imports only the spec and its rules, and
the plain `validate PATH` runs it without typer)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from orchestrator.cli.output import err, finding_text, out

app = typer.Typer()


@app.command()
def schema() -> None:
    """Print the job spec's JSON Schema (for editors)."""
    from orchestrator import spec

    out(json.dumps(spec.json_schema(), indent=2))


@app.command()
def validate(path: Path = typer.Argument(..., help="Job spec YAML.")) -> None:
    """Check a job spec: fields, types, cross-field and Neuron rules. Exit 2 with locations if wrong."""
    from orchestrator.cli.quick import check_spec

    check_spec(path)


@app.command()
def doctor(
    path: Path = typer.Argument(..., help="Job spec YAML."),
    quotas: bool = typer.Option(False, "--quotas", help="Also read the account's Service Quotas for each instance "
                                "type the job may run on, and the training plan the spec names (read-only AWS "
                                "calls): exit 2 when it fits no quota or cannot run on its plan."),
) -> None:
    """Run the Neuron-aware rules on a job spec. Exit 2 when any finding is an error."""
    from orchestrator import doctor as doctor_rules
    from orchestrator import spec

    loaded = spec.load(path)
    findings = doctor_rules.findings(loaded)
    for finding in findings:
        out(finding_text(loaded, finding))
    bad = doctor_rules.errors(findings)
    out(f"{path}: {len(bad)} error(s), {len(findings) - len(bad)} other finding(s)")
    if bad:
        raise typer.Exit(code=2)
    if quotas:
        from orchestrator.actions import quota_check

        quota_check.run(loaded, out)
        from orchestrator.cli import capacity

        capacity.doctor_plans(loaded, out)


@app.command()
def plan(
    path: Path = typer.Argument(..., help="Job spec YAML."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: request, estimate, findings."),
    read_stores: bool = typer.Option(False, "--forecast", help="Also read an s3:// output and compile cache "
                                     "for the forecast (the local store is always read)."),
    quotas: bool = typer.Option(False, "--quotas", help="Also read the account's Service Quotas for each instance "
                                "type the job may run on (read-only AWS calls): exit 2 when any falls short."),
) -> None:
    """Show the exact request that submit sends (CreateTrainingJob; SubmitJob for batch), its
    cost bound, and a forecast: what the compile cache holds for the job's key, and the
    duration and cost of an earlier completed run of the same spec."""
    from orchestrator import request, spec

    loaded = spec.load(path)
    prepared = request.prepare(loaded)
    if quotas:  # a plain plan stays offline
        from orchestrator import doctor as doctor_rules
        from orchestrator.actions import quota_check

        doctor_rules.raise_for(loaded, prepared.findings)
        quota_check.run(loaded, err)
    print_plan(loaded, prepared, as_json, read_stores)


def print_plan(loaded, prepared, as_json: bool, read_stores: bool = False) -> None:
    """What `plan` prints for a prepared request, its forecast included (`forecast`: the
    local store always, s3:// stores when `read_stores`); exit 2 (raised) on doctor errors."""
    from orchestrator import doctor as doctor_rules
    from orchestrator import forecast, preferences

    choices = prepared.choices
    doctor_rules.raise_for(loaded, prepared.findings)
    for finding in prepared.findings:
        err(finding_text(loaded, finding))
    predicted = None
    if forecast.readable(prepared, read_stores):
        s3 = forecast.s3_client_for(loaded) if read_stores else None
        history = forecast.PriorRuns.read(prepared.locations.output, s3)
        predicted = forecast.forecast(prepared, history, s3)
    elif not as_json:
        err("forecast: not read (s3:// stores are read with --forecast)")
    if as_json:
        out(json.dumps({
            "request": prepared.request,
            "estimate": prepared.estimate.to_json(),
            "findings": [f.to_json(loaded) for f in prepared.findings],
            "source_uri": prepared.source_uri,
            "archive_sha256": prepared.archive_sha256,
            **({"preferences": preferences.to_json(choices)} if choices else {}),
            **({"forecast": predicted.to_json()} if predicted is not None else {}),
        }, indent=2))
        return
    out(json.dumps(prepared.request, indent=2))
    out(f"source archive: {prepared.source_uri} ({len(prepared.archive)} bytes, sha256 {prepared.archive_sha256})")
    for line in preferences.describe(choices):
        out(line)
    out(prepared.estimate.describe())
    for line in predicted.lines() if predicted is not None else []:
        out(line)


@app.command()
def smoke(
    path: Path = typer.Argument(..., help="Job spec YAML."),
    steps: int = typer.Option(5, "--steps", help="Training steps to run (the first 2 may compile)."),
) -> None:
    """Run a few steps of the spec's model here (XLA on PJRT_DEVICE=CPU) and fail, exit 1,
    if graphs are still compiled after warmup (dynamic shapes)."""
    from orchestrator import smoke as smoke_check
    from orchestrator import spec

    loaded = spec.load(path)
    result = smoke_check.run(loaded, steps, on_progress=out)
    out(f"{path}: ok: {result.message}")
