"""The root command group: every command of `COMMANDS`, each module imported only when its
command runs (or shows its own `--help`), and the root `--debug` option.

`COMMANDS` is the one table of commands (pip's `commands_dict`): each command's module and the
line the root's `--help` lists for it, so that `orchestrator --help` (and a mistyped command)
imports no command module. The line is the first paragraph of the command's own help
(tests/test_cli_help.py checks that they agree). Loading goes through click's public lazy-group
methods, `list_commands` and `get_command`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import NamedTuple

import typer
from typer.core import TyperCommand, TyperGroup

from orchestrator.cli import exits
from orchestrator.cli.output import reflow_help


class Command(NamedTuple):
    """Where a command lives and what the root's `--help` says of it."""

    module: str  # the module of this package that defines it (its `app`)
    help: str  # the first paragraph of the command's own help


# In the order `--help` lists them. A module defines `app`: its commands, or, when `app` is
# named after the command, that command group.
COMMANDS = {
    "schema": Command("specs", "Print the job spec's JSON Schema (for editors)."),
    "validate": Command("specs", "Check a job spec: fields, types, cross-field and Neuron rules. Exit 2 with "
                        "locations if wrong."),
    "doctor": Command("specs", "Run the Neuron-aware rules on a job spec. Exit 2 when any finding is an error."),
    "plan": Command("specs", "Show the exact request that submit sends (CreateTrainingJob; SubmitJob for batch), its "
                    "cost bound, and a forecast: what the compile cache holds for the job's key, and the duration "
                    "and cost of an earlier completed run of the same spec."),
    "smoke": Command("specs", "Run a few steps of the spec's model here (XLA on PJRT_DEVICE=CPU) and fail, exit 1, if "
                     "graphs are still compiled after warmup (dynamic shapes)."),
    "submit": Command("jobs", "Submit a job: doctor, budget and quota checks, then the spec's backend. Prints the job "
                      "name."),
    "status": Command("jobs", "Show a job's status, secondary status, failure reason and billable seconds."),
    "logs": Command("jobs", "Print the job's log lines from every host, each prefixed by its host (algo-N), in time "
                    "order."),
    "stop": Command("jobs", "Ask the backend to stop a job; `status` then shows stopping, and stopped."),
    "results": Command("results", "Price-performance table from the jobs' results.json objects, SageMaker and "
                       "prices."),
    "tensorboard": Command("tensorboard", "Fetch the TensorBoard event files of a sweep's jobs (or of one job) into "
                           "one folder, one run per job named by what its sweep varied, and print the `tensorboard "
                           "--logdir` command."),
    "infra": Command("infra", "Deploy and read the AWS set-up: bucket, execution role, operator policy and, with "
                     "EnableBatch=true, the inf2 AWS Batch queues (infra/stack.yaml)."),
    "prices": Command("prices", "Instance prices: refresh them from the AWS Price List API."),
    "sweep": Command("sweep", "Sweeps: grid and random trials over a job spec, run with a concurrency cap, retries "
                     "and crash safety."),
    "schedule": Command("schedule", "Run a sweep on its cron schedule, from this machine or from system cron (run, "
                        "tick, crontab), or from AWS with the laptop closed (plan)."),
    "cache": Command("cache", "Compile caches in a store: list keys, show a manifest, prune unreferenced archives and "
                     "old keys."),
    "capacity": Command("capacity", "Training plans (reserved SageMaker capacity): offerings for a spec, reserve one, "
                        "list them."),
}


def _load(name: str):
    """The click command `name`, from its module (imported now): the module's group when its
    `app` is named after the command, else that one command, built alone (typer builds every
    command of the app it is given: `validate` would build `plan`'s and `smoke`'s too)."""
    module = importlib.import_module(f"orchestrator.cli.{COMMANDS[name].module}")
    reflow_help(module.app)
    if module.app.info.name == name:
        command = typer.main.get_group(module.app)
    else:
        alone = typer.Typer()
        alone.registered_commands = [info for info in module.app.registered_commands if _command_name(info) == name]
        command = typer.main.get_group(alone).commands[name]
    for each in _tree(command):
        plain_flags(each)
    return command


def _tree(command) -> Iterator:
    """`command` and, for a group typer built, each of its subcommands, depth first."""
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from _tree(sub)


def _command_name(info) -> str:
    """The name typer gives a registered command: its own, else its function's, dashed."""
    return info.name or info.callback.__name__.lower().replace("_", "-")


def plain_flags(command) -> None:
    """Help shows no value type after a plain flag: typer (0.2x) writes `<bool>` after `--wait`
    and `--help`, which take no value (issue 22). An option's `metavar` is what help shows for
    its value (click's public attribute): an empty one for each flag of `command`, `--help`
    included (the option `get_help_option` makes once per command and keeps). An option with a
    value, or a counting one, keeps its type."""
    help_option = command.get_help_option(typer.Context(command))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False) and not getattr(param, "count", False) and param.metavar is None:
            param.metavar = ""


class _Loaded(Mapping):
    """The root group's commands: every name of COMMANDS, each loaded on first lookup (names
    and membership load nothing; values and items load them all, in COMMANDS' order)."""

    def __init__(self) -> None:
        self._built: dict = {}

    def __getitem__(self, name: str):
        if name not in COMMANDS:
            raise KeyError(name)
        if name not in self._built:
            self._built[name] = _load(name)
        return self._built[name]

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


class _LazyGroup(TyperGroup):
    """The root group: `list_commands` names COMMANDS, `get_command` loads one; while it writes
    its own help, each command is listed from COMMANDS' line, loading none."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commands = _Loaded()
        self._listing = False
        plain_flags(self)

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx, name: str):
        if self._listing and name in COMMANDS:
            return TyperCommand(name, help=COMMANDS[name].help)
        return self.commands.get(name)

    def format_help(self, ctx, formatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(cls=_LazyGroup, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Train Vision Transformers on AWS Neuron hardware: Trainium through Amazon SageMaker, "
                  "Inferentia2 through AWS Batch.")


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors.")) -> None:
    exits.set_debug(debug)
