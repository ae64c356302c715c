"""The option types, the store default and one-line errors: what every command shares, importing nothing heavy
(a listing such as ``assay tasks`` takes them from here; ``cli.common`` passes them on with the store)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape

from assay.cli import render
from assay.errors import AssayError

DEFAULT_STORE = os.environ.get("ASSAY_STORE", "assay-store")
StoreOpt = Annotated[Path, typer.Option("--store", help="Store directory (env ASSAY_STORE).")]
CatalogOpt = Annotated[str | None, typer.Option("--catalog",
                                                help="Catalog database URL (default: SQLite in the store).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]
# The statistics commands' (compare, leaderboard, correlate, ...)
ConfidenceOpt = Annotated[float, typer.Option("--confidence", help="Interval level.")]
ResamplesOpt = Annotated[int, typer.Option("--resamples", help="Bootstrap resamples.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Bootstrap seed (same seed, same intervals).")]
CampaignOpt = Annotated[str | None, typer.Option("--campaign", help="Campaign name (default: the latest).")]
TasksOpt = Annotated[str | None, typer.Option("--tasks", help="Comma-separated task ids (default: all).")]
AddressOpt = Annotated[str | None, typer.Option(
    "--address", help="Ray cluster to join (ray executor): HOST:PORT as `ray start --head` prints it (on a node of "
    "that cluster), ray://HOST:PORT (Ray Client, from anywhere) or auto (the cluster of this node); default: env "
    "RAY_ADDRESS, else a local Ray.")]

ExecutorOpt = Annotated[Literal["inline", "local", "ray"], typer.Option(
    "--executor", "-x",
    help="Where episodes run: in this process, in local worker processes, or on Ray.")]
SerialExecutorOpt = Annotated[Literal["inline", "local"], typer.Option(
    "--executor", "-x",
    help="Where episodes run: in this process or in local worker processes.")]


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Any AssayError becomes one red line on stderr and exit status 2."""
    try:
        yield
    except AssayError as exc:
        render.err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
ProtocolOpt = Annotated[str | None, typer.Option(
    "--protocol", help="Run a protocol manifest instead of a campaign file: NAME[@VERSION] (`assay protocol list`) or "
    "a manifest FILE.json, with :SUITE,... for some of its suites (openpi-libero:spatial); needs --policy.")]
ProtocolPolicyOpt = Annotated[str | None, typer.Option(
    "--policy", help="With --protocol: the policy to run (a builtin, module:attr, remote:ws://host:port, bc:PATH, or "
    "a mapping like '{name: pi05, remote: ws://127.0.0.1:8000, version: pi05_libero}').")]
UpstreamOpt = Annotated[Path | None, typer.Option(
    "--upstream", help="With a protocol whose variants are a released upstream list (libero-plus): the upstream "
    "checkout, or the list's file itself, checked against the manifest's SHA-256.")]
