"""`python -m orchestrator` runs the CLI."""

from orchestrator.cli import main

main()
