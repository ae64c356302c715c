"""``assay leaderboard --model irt|bt``: rank policies with a model that tolerates missing cells."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from assay.cli import render
from assay.cli.common import open_store
from assay.cli.scoring import scored_campaign
from assay.errors import AssayError
from assay.metrics import read_results_csv, totals_signoff
from assay.metrics.irt import MODELS, ModelLeaderboard, counts_from_entries, counts_from_grid, model_leaderboard

DEFAULT_MODEL_RESAMPLES = 200
MODEL_NAMES = {"irt": "2PL item response (ability θ)", "bt": "Bradley–Terry (log-strength)"}


def model_board(model: str, store: Path, catalog: str | None, campaign: str | None, tasks: list[str] | None,
                variant: str | None, csv_in: Path | None, confidence: float, resamples: int | None, seed: int
                ) -> tuple[str, ModelLeaderboard, list[Any], dict[str, Any]]:
    """(source, the model leaderboard, the sign-off gate rows of a campaign or [] for a CSV, and a campaign's
    ``campaign``, ``scope`` and ``completeness`` for the JSON, with ``policies``: each policy's planned/recorded;
    {} for a CSV)."""
    if model not in MODELS:
        raise AssayError(f"--model {model!r} is not valid; valid: {', '.join(MODELS)}")
    n_resamples = DEFAULT_MODEL_RESAMPLES if resamples is None else resamples
    if csv_in is not None:
        if campaign is not None:
            raise AssayError("give --csv RESULTS.csv or --campaign NAME, not both")
        counts = counts_from_entries(read_results_csv(csv_in))
        return f"results {csv_in.name}", model_leaderboard(model, counts, None, confidence, n_resamples, seed), [], {}
    with open_store(store, catalog) as opened:
        scored = scored_campaign(opened, campaign, variant)  # the variant scope every scoring command uses
        grid = scored.grid(scored.tasks(tasks))
        gate = totals_signoff(scored.ranked(grid.task_ids), opened.root)
    board = model_leaderboard(model, counts_from_grid(grid), [t.values for t in grid.tasks], confidence, n_resamples,
                              seed)
    covered = scored.within(None, grid.task_ids)
    document = {"campaign": scored.name, **scored.document(covered),
                "policies": {r.policy: covered.select([r.policy]).summary() for r in board.rows}}
    return f"campaign {scored.name} ({scored.scope.label}; {covered.describe()})", board, gate, document


def print_model_board(source: str, board: ModelLeaderboard) -> None:
    """The model leaderboard as a table, the plain average beside it, and how it was resampled."""
    table = Table(title=f"{source}: {MODEL_NAMES[board.model]} leaderboard, rank [{board.confidence:.0%} interval]",
                  title_justify="left")
    for column in ("policy", "rank", "score", "tasks scored", "plain average", "its rank"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for r in board.rows:
        table.add_row(r.policy, r.rank_text, "-" if r.score is None else f"{r.score:+.2f}", str(r.tasks_scored),
                      "-" if r.average is None else f"{r.average:.3f}",
                      "-" if r.average_rank is None else str(r.average_rank))
    render.console.print(table)
    render.console.print(f"{board.coverage:.0%} of policy × task cells observed; rank intervals from "
                         f"{board.n_resamples} refits on resamples ({board.resampling}), seed {board.seed}.",
                         highlight=False, soft_wrap=True)
