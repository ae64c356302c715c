"""Rendering for the CLI: Rich tables for people, one JSON document for scripts."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # annotations only: rendering a table imports neither statistics nor the store
    from assay.metrics import Completeness, RateRow
    from assay.spec import TaskSpec
    from assay.store import EpisodeRecord

# Without a terminal (CI, pipes) Rich would wrap tables at 80 columns; results tables need more.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True)


_json_fd: int | None = None  # the real standard output while json_stdout() holds it


def print_json(document: Any) -> None:
    """Write ``document`` as indented JSON to stdout (the descriptor kept for JSON when stdout is redirected)."""
    text = json.dumps(document, indent=2, sort_keys=True, default=str) + "\n"
    if _json_fd is not None:
        os.write(_json_fd, text.encode())
    else:
        sys.stdout.write(text)


def _real_stdout() -> bool:
    try:
        return sys.stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):  # replaced (a test runner's buffer): nothing to guard
        return False


@contextlib.contextmanager
def json_stdout(enabled: bool = True) -> Iterator[None]:
    """Keep standard output clean JSON from the block on: whatever else reaches file descriptor 1
    (a Ray raylet line after an actor is killed, a C library's print) goes to stderr instead,
    and :func:`print_json` writes to the real standard output. File descriptor 1 stays on stderr
    after the block, for the rest of the process: Ray's log monitor reports a dead actor seconds
    later, after the document is written, and up to the interpreter's exit."""
    global _json_fd
    if not enabled or _json_fd is not None or not _real_stdout():
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    _json_fd = saved
    try:
        yield
    finally:
        sys.stdout.flush()


def rate_table(rows: Sequence[RateRow], title: str, return_scored: frozenset[str] = frozenset(),
               errors_as_failures: bool = False, completeness: Completeness | None = None,
               interval: str = "mid-p 95%") -> Table:
    """Success (mid-p interval) and mean return (t interval) per group; a row whose task has no
    success signal (``return_scored``) shows "n/a" for success: its endpoint is the return. A rate
    with errors left out of its denominator is marked ``*`` and the caption says so. With
    ``completeness``, a ``recorded`` column gives each row's recorded/planned episodes (yellow: incomplete)."""
    group_names = list(rows[0].group) if rows else []
    excluded = sum(row.errors for row in rows) if not errors_as_failures else 0
    caption = None
    if excluded:
        caption = (f"[bold yellow]* {excluded} error episode(s) excluded from the success denominators[/]; "
                   "--errors-as-failures counts them as failures")
    elif errors_as_failures and any(row.errors for row in rows):
        caption = "errors counted as failures (--errors-as-failures)"
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for name in group_names:
        table.add_column(name)
    table.add_column("success", justify="right")
    table.add_column(interval, justify="right")
    table.add_column("succ/n", justify="right")
    table.add_column("timeout", justify="right")
    table.add_column("fail", justify="right")
    table.add_column("error", justify="right")
    table.add_column("steps", justify="right")
    table.add_column("return [95%]", justify="right")
    if completeness is not None:
        table.add_column("recorded", justify="right")
    for row in rows:
        no_success = row.group.get("task") in return_scored
        part = completeness.of(row.group) if completeness is not None else None
        done = [] if part is None else [f"{part.recorded}/{part.planned}" if part.complete
                                        else f"[yellow]{part.recorded}/{part.planned}[/]"]
        table.add_row(
            *[row.group[name] for name in group_names],
            _rate_text(row, no_success, errors_as_failures),
            f"[{row.ci_low:.2f}, {row.ci_high:.2f}]" if row.ci_low is not None else "-",
            f"{row.successes}/{row.scored}",
            str(row.timeouts),
            str(row.failures),
            f"[red]{row.errors}[/red]" if row.errors else "0",
            f"{row.mean_steps:.0f}" if row.mean_steps is not None else "-",
            _return_text(row),
            *done,
        )
    return table


def _rate_text(row: RateRow, no_success: bool, errors_as_failures: bool) -> str:
    if row.episodes == 0:
        return "-"  # a planned group with no episode yet
    if row.rate is None or no_success:
        return "n/a"
    return f"{row.rate:.2f}" + ("[bold yellow]*[/]" if row.errors and not errors_as_failures else "")


def _return_text(row: RateRow) -> str:
    if row.mean_return is None:
        return "-"
    digits = 1 if abs(row.mean_return) >= 10 else 2
    if row.return_ci_low is None or row.return_ci_high is None:
        return f"{row.mean_return:.{digits}f}"
    return f"{row.mean_return:.{digits}f} [{row.return_ci_low:.{digits}f}, {row.return_ci_high:.{digits}f}]"


def task_dict(task: TaskSpec) -> dict[str, Any]:
    """A task as JSON data: its id, content hash and every field."""
    return {"id": task.id, "hash": task.content_hash(), **task.model_dump(mode="json")}


def tasks_table(tasks: Sequence[TaskSpec]) -> Table:
    """The ``assay tasks`` table: one row per task."""
    table = Table(title=f"{len(tasks)} tasks", title_justify="left")
    for column in ("id", "family", "skill", "level", "horizon", "instruction"):
        table.add_column(column)
    for task in tasks:
        table.add_row(task.id, task.family, task.skill, task.level.value, str(task.horizon), task.instruction)
    return table


def episodes_table(records: Sequence[EpisodeRecord]) -> Table:
    """The ``assay episodes`` table: one row per episode, its outcome coloured."""
    table = Table(title=f"{len(records)} episodes", title_justify="left")
    for column in ("key", "policy", "task", "variant", "seed", "outcome", "steps", "return", "reason"):
        table.add_column(column)
    colors = {"success": "green", "failure": "yellow", "timeout": "yellow", "error": "red"}
    for r in records:
        outcome = f"[{colors[r.outcome.value]}]{r.outcome.value}[/]"
        table.add_row(r.key[:12], r.policy_name, r.task_id, r.variant_name, str(r.seed), outcome, str(r.steps),
                      f"{r.total_return:.1f}", r.reason[:60])
    return table
