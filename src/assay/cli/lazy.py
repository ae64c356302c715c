"""Commands loaded on first use: the ``assay`` group imports a command's module only when it runs.

``cli.app`` names every top-level command in one table (name -> its one-line help and the modules that
register it); a listing (``assay --help``) shows the table and imports nothing, and running a command
imports only its own modules. A name the table lacks still runs (every module is loaded to find it), and
``tests/test_cli_lazy.py`` fails until the table names it.

Every loaded command runs watched (:func:`watched`): the episodes its executors run, the phases it announces
and the counted work it does (a checkpoint's epochs) show as progress, with no code in the command itself.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class LazyCommand:
    """One top-level command: the help its listing shows and the ``assay.cli`` modules whose ``register``
    adds it (several when they share a group: ``episodes``)."""

    help: str
    modules: tuple[str, ...]


_LOADED: dict[tuple[str, ...], TyperGroup] = {}

#: Commands whose work progress is not shown by :func:`watched`: the listings run nothing, and ``run`` shows its
#: campaign's own (planned total, episodes already stored).
UNWATCHED = frozenset({"tasks", "policies", "factors", "run"})


def load(modules: tuple[str, ...]) -> TyperGroup:
    """The commands these modules register, on one fresh app (built once per process), each watched."""
    if modules not in _LOADED:
        sub = typer.Typer()
        for module in modules:
            importlib.import_module(f"assay.cli.{module}").register(sub)
        _LOADED[modules] = _watch_all(typer.main.get_group(sub))
    return _LOADED[modules]


def _watch_all(group: TyperGroup, prefix: tuple[str, ...] = ()) -> TyperGroup:
    for name, command in group.commands.items():
        path = " ".join((*prefix, name))
        if isinstance(command, TyperGroup):
            _watch_all(command, (*prefix, name))
        elif path not in UNWATCHED and command.callback is not None:
            command.callback = watched(path, command.callback)
    return group


def watched(name: str, callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback`` with the progress of the episodes, phases and counted work it runs shown on stderr
    (``cli.progress.watch``: a bar on a terminal, plain lines elsewhere; Ctrl-C says how many of the queued
    episodes are stored, counted in the catalog of the command's ``--store``/``--catalog`` when it has them)."""

    @functools.wraps(callback)
    def watching(*args: Any, **kwargs: Any) -> Any:
        from assay.cli import render
        from assay.cli.progress import stored_episodes, watch

        store = kwargs.get("store")
        count = None if store is None else functools.partial(stored_episodes, Path(store), kwargs.get("catalog"))
        with watch(name, render.err_console, count):
            return callback(*args, **kwargs)

    return watching


class LazyGroup(TyperGroup):
    """A Typer group whose commands come from ``lazy`` on first use; help lists them without loading any."""

    lazy: ClassVar[Mapping[str, LazyCommand]] = {}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._listing = False

    def all_modules(self) -> tuple[str, ...]:
        """Every module the table names, in the table's order."""
        return tuple(dict.fromkeys(m for entry in self.lazy.values() for m in entry.modules))

    def list_commands(self, ctx: typer.Context) -> list[str]:
        """The table's commands in its order, then any the group holds besides."""
        return list(dict.fromkeys([*self.lazy, *self.commands]))

    def get_command(self, ctx: typer.Context, cmd_name: str) -> TyperCommand | TyperGroup | None:
        """The command, its modules imported now; while help is being written, a stub with its help."""
        if cmd_name not in self.commands:
            entry = self.lazy.get(cmd_name)
            if self._listing and entry is not None:
                return TyperCommand(cmd_name, help=entry.help)
            loaded = load(entry.modules if entry is not None else self.all_modules()).commands
            if cmd_name in loaded:
                self.commands[cmd_name] = loaded[cmd_name]
            elif entry is None:  # a typo: load every command so that "did you mean" knows them all
                for name, command in loaded.items():
                    self.commands.setdefault(name, command)
        return self.commands.get(cmd_name)

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        """Help lists the table's commands without importing their modules."""
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def subgroup(app: typer.Typer, name: str, help: str) -> typer.Typer:
    """The command group ``name`` on ``app``, created (with ``help``) by the first module that asks for it, so
    that several modules can fill one group (``episodes``)."""
    for info in app.registered_groups:
        if info.name == name and info.typer_instance is not None:
            return info.typer_instance
    group = typer.Typer(no_args_is_help=True, help=help)
    app.add_typer(group, name=name)
    return group
