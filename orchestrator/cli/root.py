"""The root command group: every command of `COMMANDS`, each module imported only when its
command runs (or for `--help`), and the root `--debug` option."""

from __future__ import annotations

import importlib

import typer
from typer.core import TyperGroup, TyperOption

from orchestrator.cli import exits
from orchestrator.cli.output import reflow_help

# Command -> the module of this package that defines it, in the order `--help` lists them.
# A module defines `app`: its commands, or, when `app` is named after the command, that
# command group.
COMMANDS = {
    "schema": "specs", "validate": "specs", "doctor": "specs", "plan": "specs", "smoke": "specs",
    "submit": "jobs", "status": "jobs", "logs": "jobs", "stop": "jobs",
    "results": "results", "tensorboard": "tensorboard", "infra": "infra", "prices": "prices", "sweep": "sweep", "schedule": "schedule",
    "cache": "cache", "capacity": "capacity",
}


def _flags_without_a_type() -> None:
    """Help shows no value type after a plain flag: typer (0.2x with click 8.2+) writes `<bool>`
    after `--wait` and `--help`, which take no value (issue 22). An option with a value keeps its type."""
    shown = TyperOption.display_type_rich
    if getattr(shown, "plain_flags", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag and not self.count else shown(self, ctx)

    display_type_rich.plain_flags = True
    TyperOption.display_type_rich = display_type_rich


_flags_without_a_type()


def _load(name: str):
    """The click command `name`, from its module (imported now): the module's group when its
    `app` is named after the command, else that one command, built alone (typer builds every
    command of the app it is given: `validate` would build `plan`'s and `smoke`'s too)."""
    module = importlib.import_module(f"orchestrator.cli.{COMMANDS[name]}")
    reflow_help(module.app)
    if module.app.info.name == name:
        return typer.main.get_group(module.app)
    alone = typer.Typer()
    alone.registered_commands = [info for info in module.app.registered_commands if _command_name(info) == name]
    return typer.main.get_group(alone).commands[name]


def _command_name(info) -> str:
    """The name typer gives a registered command: its own, else its function's, dashed."""
    return info.name or info.callback.__name__.lower().replace("_", "-")


class _Commands(dict):
    """The root group's commands: every name of COMMANDS, each loaded on first use. Looking
    one up loads its module only; listing them all (help, completion) loads them all, in
    COMMANDS' order."""

    def _one(self, name: str) -> None:
        if name in COMMANDS and not dict.__contains__(self, name):
            dict.__setitem__(self, name, _load(name))

    def _all(self) -> None:
        loaded = {name: self[name] for name in COMMANDS}
        dict.clear(self)
        dict.update(self, loaded)

    def __getitem__(self, name):
        self._one(name)
        return dict.__getitem__(self, name)

    def get(self, name, default=None):
        self._one(name)
        return dict.get(self, name, default)

    def __contains__(self, name) -> bool:
        return name in COMMANDS or dict.__contains__(self, name)

    def __iter__(self):
        self._all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        return len(COMMANDS)

    def keys(self):
        self._all()
        return dict.keys(self)

    def values(self):
        self._all()
        return dict.values(self)

    def items(self):
        self._all()
        return dict.items(self)


class _LazyGroup(TyperGroup):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commands = _Commands()


app = typer.Typer(cls=_LazyGroup, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Train Vision Transformers on AWS Neuron hardware: Trainium through Amazon SageMaker, "
                  "Inferentia2 through AWS Batch.")


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors.")) -> None:
    exits.set_debug(debug)
