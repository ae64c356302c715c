"""CLI: ``assay episodes ls|show``: light commands (a listing imports neither the statistics nor the runner)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, user_errors
from assay.cli.lazy import subgroup
from assay.errors import AssayError
from assay.store import renderer_of

EPISODES_HELP = "Inspect recorded episodes."


def register(app: typer.Typer) -> None:
    """Add ``episodes ls|show`` to the ``assay`` command."""
    episodes_app = subgroup(app, "episodes", EPISODES_HELP)
    episodes_app.command("ls")(episodes_ls)
    episodes_app.command("show")(episodes_show)


def episodes_ls(
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    campaign: Annotated[str | None, typer.Option()] = None,
    task: Annotated[str | None, typer.Option()] = None,
    policy: Annotated[str | None, typer.Option()] = None,
    outcome: Annotated[str | None, typer.Option(help="success | failure | timeout | error")] = None,
    limit: Annotated[int, typer.Option(min=1)] = 50,
    variant: Annotated[str | None, typer.Option(help="Only episodes of this variant (by name).")] = None,
    trials_csv: Annotated[Path | None, typer.Option("--trials-csv", help=(
        "Also write every matching scored episode (all of them, not --limit's; errors left out) to this file as "
        "task,policy,seed,success: per-trial outcomes keyed to seeds, what `assay estimate-real --real` reads. "
        "One variant (seeds repeat across variants)."))] = None,
    json_out: JsonOpt = False,
) -> None:
    """List episodes with their outcome and reason."""
    with user_errors():
        if outcome is not None and outcome not in {"success", "failure", "timeout", "error"}:
            raise AssayError(f"--outcome {outcome!r} is not valid; valid: success, failure, timeout, error")
        with open_store(store, catalog) as opened:
            matching = opened.catalog.episodes(campaign=campaign, task=task, policy=policy, outcome=outcome)
        if variant is not None:
            matching = [r for r in matching if r.variant_name == variant]
        if trials_csv is not None:
            from assay.cli.real_commands import write_trials

            write_trials(trials_csv, matching, outcome)
        found = matching[:limit]
        if json_out:
            render.print_json({"total": len(matching), "shown": len(found), "episodes": [r.to_dict() for r in found]})
        else:
            render.console.print(render.episodes_table(found))
            if len(found) < len(matching):
                render.console.print(f"showing {len(found)} of {len(matching)} episodes (--limit {limit})",
                                     highlight=False)


def episodes_show(
    key: Annotated[str, typer.Argument(help="Episode key or a unique prefix of it.")],
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """One episode's record and a summary of its per-step data."""
    from assay.cli.episode_view import episode_summary, print_episode

    with user_errors():
        with open_store(store, catalog) as opened:
            record = opened.catalog.episode(key)
            summary = episode_summary(opened, record)
        if json_out:
            render.print_json({"episode": record.to_dict(), "renderer": renderer_of(record.provenance),
                               "steps": summary})
        else:
            print_episode(record, summary)
