"""``assay leaderboard --model irt|bt``: rank policies with a model that tolerates missing cells."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from assay.cli import render
from assay.cli.common import open_store
from assay.cli.scoring import planned_tasks, scored_campaign
from assay.errors import AssayError
from assay.metrics import Completeness, read_results_csv, totals_signoff
from assay.metrics.irt import MODELS, ModelLeaderboard, counts_from_entries, counts_from_grid, model_leaderboard

DEFAULT_MODEL_RESAMPLES = 200
MODEL_NAMES = {"irt": "2PL item response (ability θ)", "bt": "Bradley–Terry (log-strength)"}


def model_board(model: str, store: Path, catalog: str | None, campaign: str | None, tasks: list[str] | None,
                variant: str | None, csv_in: Path | None, confidence: float, resamples: int | None, seed: int,
                allow_partial: bool = False) -> tuple[str, ModelLeaderboard, list[Any], dict[str, Any]]:
    """(source, the model leaderboard, the sign-off gate rows of a campaign or [] for a CSV, and a campaign's
    ``campaign``, ``scope`` and ``completeness`` for the JSON, with ``policies``: each policy's planned/recorded;
    {} for a CSV).

    The model tolerates a missing cell of a task it observes, but not a planned task no policy has reached yet:
    the ranking would be over another suite, and the tasks planned last are not missing at random. Such a
    campaign is refused unless ``allow_partial``; either way its completeness counts every planned task."""
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
        wanted = planned_tasks(scored, ",".join(tasks)) if tasks else None  # planned ids; None: every task
        covered = scored.within(None, wanted)  # planned tasks no policy reached yet count too
        _refuse_unreached(scored.name, covered, allow_partial)
        grid = scored.grid([t for t in scored.tasks() if wanted is None or t in wanted])
        gate = totals_signoff(scored.ranked(grid.task_ids), opened.root)
    board = model_leaderboard(model, counts_from_grid(grid), [t.values for t in grid.tasks], confidence, n_resamples,
                              seed)
    document = {"campaign": scored.name, **scored.document(covered),
                "policies": {r.policy: covered.select([r.policy]).summary() for r in board.rows}}
    return f"campaign {scored.name} ({scored.scope.label}; {covered.describe()})", board, gate, document


def _refuse_unreached(name: str, covered: Completeness, allow_partial: bool) -> None:
    """AssayError when a planned task of ``covered`` has no episode of any policy, unless ``allow_partial``."""
    reached = {c.task for c in covered.cells if c.recorded > 0}
    unreached = sorted({c.task for c in covered.cells if c.planned > 0} - reached)
    if unreached and not allow_partial:
        raise AssayError(
            f"the model leaderboard of campaign {name}: refused, {len(unreached)} planned task(s) have no episode yet "
            f"({', '.join(unreached)}; {covered.recorded} of {covered.planned} planned episodes recorded); a model "
            "tolerates missing cells within a task, not a task nobody ran (tasks run in plan order): finish the "
            "campaign (rerun `assay run`), or pass --allow-partial")


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
