"""CLI: ``assay validity``: probes of the benchmark's own validity for a campaign's policies."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, split_list, user_errors


def validity_command(
    campaign: Annotated[str, typer.Argument(help="A campaign in the store (its tasks, seeds and policies).")],
    policies: Annotated[str | None, typer.Option("--policies", "-p", help="Some of its policies (default all).")]
    = None,
    workers: Annotated[int, typer.Option("--workers")] = 1,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Probes of the benchmark's own validity: the same episodes with the instruction withheld (empty, and another
    task's: a policy that keeps its success was not tested on language) and, on tasks with fixed initial states,
    with layouts resampled (a policy that does worse learned the fixed set); paired intervals."""
    from assay.learning.validity import rate_text, run_validity

    with user_errors(), open_store(store, catalog) as opened:
        results, skipped = run_validity(opened, campaign, split_list(policies) if policies else None, workers)
    if json_out:
        render.print_json({"campaign": campaign, "probes": [r.to_dict() for r in results], "skipped": skipped})
        return
    for r in results:
        kind = "paired" if r.paired else "unpaired"
        band = f"[{r.low:+.2f}, {r.high:+.2f}]" if r.low is not None and r.high is not None else "-"
        render.console.print(f"{r.policy}, {r.probe}: {rate_text(*r.probed)} against nominal {rate_text(*r.nominal)}; "
                             f"difference {r.difference:+.2f} {band} ({kind}, Newcombe 95%): {r.verdict}"
                             if r.difference is not None else f"{r.policy}, {r.probe}: {r.verdict}", highlight=False)
    for name, why in skipped.items():
        render.console.print(f"{name}: {why}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``validity`` to ``app``."""
    app.command("validity")(validity_command)
