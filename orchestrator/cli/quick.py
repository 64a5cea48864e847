"""The CLI's fast path: `validate PATH`, the command editors and pre-commit hooks run on every
save, runs without typer. Importing typer (with click) is about a tenth of that command's
time (`docs/BENCHMARKS.md`, "CLI latency"), so `main` asks `command(argv)` first: for the
plain form, exactly `validate PATH` with no option, it returns the command's work as a
callable, which `exits.run` runs with the same error handling as any command; anything else
(an option, `--help`, a mistake in the arguments) returns None and goes to typer, whose
usage errors stay its own. The work itself is `check_spec`, which the typer command calls
too, so both paths print the same and exit the same (a test runs both).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from orchestrator.cli.output import err, finding_text, out


def command(argv: list[str]) -> Callable[[], None] | None:
    """The work of `argv` when it is the plain `validate PATH`; None for anything else."""
    if len(argv) == 2 and argv[0] == "validate" and not argv[1].startswith("-"):
        return lambda: _interruptible(check_spec, Path(argv[1]))
    return None


def _interruptible(work: Callable[[Path], None], path: Path) -> None:
    # As typer (click's standalone mode) ends a command: SystemExit(0) when it returns, and
    # Ctrl-C answered by "Aborted!" and exit 1, no traceback.
    try:
        work(path)
    except KeyboardInterrupt:
        err("Aborted!")
        sys.exit(1)
    sys.exit(0)


def check_spec(path: Path) -> None:
    """`validate`: load the spec (SpecError, exit 2, on a wrong field), run the doctor's rules,
    print warnings and notes to stderr, raise for errors (exit 2), else print one ok line."""
    from orchestrator import doctor as doctor_rules
    from orchestrator import spec

    loaded = spec.load(path)
    findings = doctor_rules.findings(loaded)
    for finding in findings:
        if finding.severity != "error":
            err(finding_text(loaded, finding))
    doctor_rules.raise_for(loaded, findings)
    # The S3 keys the job would derive from its prefixes, against S3's limit (no botocore).
    from orchestrator import aws_contract, locations

    aws_contract.check_uris(loaded, locations.object_uris(loaded))
    out(f"{path}: ok ({loaded.name}, {loaded.backend}, {loaded.instance.type} x{loaded.instance.count})")
