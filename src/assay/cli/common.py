"""What every command module shares: option types, the store default and one-line errors.

Command modules import this, never ``cli.app`` (which imports them to register).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from assay.cli import render
from assay.errors import AssayError
from assay.store import Store

DEFAULT_STORE = os.environ.get("ASSAY_STORE", "assay-store")
StoreOpt = Annotated[Path, typer.Option("--store", help="Store directory (env ASSAY_STORE).")]
CatalogOpt = Annotated[str | None, typer.Option("--catalog", help="Catalog database URL (default: SQLite in the store).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Any AssayError becomes one red line on stderr and exit status 2."""
    try:
        yield
    except AssayError as exc:
        render.err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


class _CommandStore(Store):
    """A Store that says, when the command is done with it, which catalog rows it had to leave out."""

    def __exit__(self, *exc: object) -> None:
        skipped = self.catalog.skipped
        if skipped:
            key, why = next(iter(skipped.items()))
            render.err_console.print(
                f"[bold yellow]warning:[/] {len(skipped)} damaged catalog row(s) left out (episode {key[:12]}: "
                f"{escape(why)}); rerun their campaign to re-run them", highlight=False, soft_wrap=True)
        super().__exit__(*exc)


def open_store(store: Path, catalog: str | None, create: bool = False, data_url: str | None = None,
               new_catalog: bool = False) -> Store:
    return _CommandStore(store, catalog, create=create, data_url=data_url, new_catalog=new_catalog)


def split_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]
