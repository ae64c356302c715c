"""CLI: ``assay semantic-profile``: language-conditioned BC, the router and the expert under every semantic factor."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, split_list, user_errors


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def semantic_profile_command(
    tasks: Annotated[str, typer.Option("--tasks", help="Meta-World task ids, comma separated.")] =
        "metaworld/reach@1,metaworld/push@1,metaworld/pick-place@1,metaworld/drawer-open@1",
    demos: Annotated[int, typer.Option("--demos", help="Expert demos per task (nominal instructions).")] = 25,
    episodes: Annotated[int, typer.Option("--episodes", help="Held-out seeds per task and variant (paired).")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Training seed.")] = 0,
    epochs: Annotated[int, typer.Option("--epochs")] = 100,
    horizon: Annotated[int, typer.Option("--horizon", help="Cap every task's horizon.")] = 200,
    workers: Annotated[int, typer.Option("--workers")] = 1,
    out: Annotated[Path | None, typer.Option("--out", help="Checkpoint folder (STORE/learning/semantic).")] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Also write the evaluation's HTML report.")] = None,
    store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False,
) -> None:
    """Train BC conditioned on the instruction's MiniLM embedding; its semantic retention beside router and expert."""
    from assay.learning.semantic import SemanticConfig, expert_is_blind, run_semantic_profile

    with user_errors():
        config = SemanticConfig(tasks=tuple(split_list(tasks)), demos=demos, episodes=episodes, seed=seed,
                                epochs=epochs, horizon=horizon, workers=workers)
        with open_store(store, catalog, create=True) as opened:
            folder = out or opened.root / "learning" / "semantic"
            say = (lambda _: None) if json_out else (lambda line: render.console.print(f"[dim]{line}[/]"))
            result = run_semantic_profile(opened, config, folder, say)
            if report is not None:
                from assay.report import write_report

                write_report(opened, result.campaign, report, embed_video=False)
    if json_out:
        render.print_json({**result.to_dict(), "expert_retention_exactly_one": expert_is_blind(result.retention)})
        return
    table = Table(title=f"semantic retention on paired seeds (campaign {result.campaign})", title_justify="left")
    for column in ("policy", "axis", "variant", "pairs", "nominal", "variant", "retention", "95% CI", "McNemar p"):
        table.add_column(column)
    for r in result.retention:
        ci = f"[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]" if r.ci_low is not None else "-"
        table.add_row(r.policy, r.axis, r.variant, str(r.pairs), str(r.nominal_successes), str(r.variant_successes),
                      _fmt(r.retention), ci, f"{r.p_value:.3g}")
    render.console.print(table)
    for policy, (k, n) in result.nominal.items():
        render.console.print(f"{policy}: nominal success {k}/{n}", highlight=False)
    blind = expert_is_blind(result.retention)
    render.console.print(f"expert (ignores language): retention exactly 1.0 on every semantic variant: {blind}",
                         highlight=False)
    render.console.print(f"report: {report}" if report else f"report: assay report {result.campaign} --store {store}",
                         highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``semantic-profile`` to the ``assay`` command."""
    app.command("semantic-profile")(semantic_profile_command)
