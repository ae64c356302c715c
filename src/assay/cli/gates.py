"""What makes a command fit a CI pipeline: gates that exit 1, ``-`` for stdout, plain help, ``--version``,
and Assay's own warnings as one line on stderr.

Exit statuses: 0 passed, 1 a gate failed (``--fail-under``, ``--require-signoff``), 2 a user error.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import click
import typer
import typer.core

from assay.cli import render

if TYPE_CHECKING:  # an annotation only: `assay --version` imports no statistics
    from assay.metrics import RateRow

STDOUT = Path("-")
FailUnderOpt = Annotated[float | None, typer.Option(
    "--fail-under", min=0.0, max=1.0, metavar="RATE",
    help="Exit with status 1 when any policy × task success rate is below RATE (a CI gate).")]


def is_stdout(path: Path | None) -> bool:
    """Whether an output path is ``-`` (standard output)."""
    return path is not None and str(path) == "-"


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
    """``warnings.showwarning`` for the ``assay`` command: a warning class of ``assay.errors`` (a campaign wider
    than its policy server, a contract range mismatch) is one line, ``warning: MESSAGE``, without the file, line
    number and source line Python prints; any other warning as Python shows it."""
    if category.__module__ == "assay.errors":
        print(f"warning: {message}", file=file if file is not None else sys.stderr, flush=True)
        return
    file = file if file is not None else sys.stderr
    file.write(warnings.formatwarning(message, category, filename, lineno, line))


def gate_failed(lines: Sequence[str]) -> None:
    """Print why a gate failed, one line each on stderr, and exit with status 1."""
    for line in lines:
        render.err_console.print(f"gate failed: {line}", highlight=False, soft_wrap=True, markup=False)
    raise typer.Exit(1)


def check_rates(rows: Sequence[RateRow], fail_under: float | None) -> None:
    """``--fail-under``: every group's success rate must reach it (a group with no scored episode fails)."""
    if fail_under is None:
        return
    failing = []
    for row in rows:
        group = ", ".join(f"{k} {v}" for k, v in row.group.items())
        if row.rate is None and row.episodes == 0:  # a planned group with nothing recorded yet
            failing.append(f"{group}: no episode recorded yet (the campaign is incomplete) < {fail_under:g}")
        elif row.rate is None:
            failing.append(f"{group}: no scored episode (all {row.episodes} are errors) < {fail_under:g}")
        elif row.rate < fail_under:
            failing.append(f"{group}: success rate {row.rate:.3f} ({row.successes}/{row.scored}) < {fail_under:g}")
    if not rows:
        failing.append("no episode to score")
    if failing:
        gate_failed(failing)


def _metavar(param: Any, ctx: click.Context) -> str | None:
    """Help shows a flag bare and a value as TEXT, INTEGER, PATH... (not ``<bool>``, ``<str>``)."""
    if param.metavar is not None:
        return param.metavar
    if getattr(param, "is_flag", False):
        return None
    label = param.display_type(ctx).strip("<>").split()[0]
    word = {"str": "TEXT", "int": "INTEGER", "bool": "BOOLEAN"}.get(label, label.upper())
    return word + ("..." if param.nargs != 1 else "")


def plain_help() -> None:
    """Typer's help without angle-bracket type placeholders, for options and arguments alike."""
    typer.core.TyperOption.display_type_rich = _metavar
    typer.core.TyperArgument.display_type_rich = _metavar


def version_callback(value: bool) -> None:
    """``--version``: print ``assay VERSION`` and exit."""
    if value:
        from assay import __version__

        typer.echo(f"assay {__version__}")
        raise typer.Exit()
