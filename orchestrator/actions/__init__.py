"""What the commands do, below the command line (torchx's `runner/api.py`): `jobs` finds the
backend that holds a job, submits one (a dry run, then the submit) and claims `--rerun` names;
`quota_check` reads a spec's quotas and admits a sweep by them; `sweeps` drives a saved sweep
and builds the laptop's scheduler, admitting both by the one admission (`sweep.admission`).

Contract: nothing here prints or exits. Each function returns values, raises the project's
errors (orchestrator/errors.py: the CLI turns them into messages and exit codes), or says notes
and progress through the callbacks it is given (`say`, `report`, `watch`); `cli/` parses, calls,
prints and exits. The layer sits below `cli/` and above `schedule/` and `sweep/`
(pyproject.toml's import-linter contracts).
"""
