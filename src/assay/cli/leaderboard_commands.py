"""``assay leaderboard``: suite scores with bootstrap intervals, rank intervals, P(A better than B) and the sign-off
gate; ``--model irt|bt`` hands over to ``ranking_commands``.

Apart from the other statistics commands so that it loads neither the comparisons nor the correlation (scipy.stats).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from assay.cli import render
from assay.cli import stats_render as show
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, split_list, user_errors
from assay.cli.gates import gate_failed
from assay.cli.options import CampaignOpt, ConfidenceOpt, SeedOpt, TasksOpt
from assay.cli.results_view import Extras, add_adaptive
from assay.cli.scoring import AllowPartialOpt, VariantScopeOpt, planned_tasks, scored_campaign
from assay.errors import AssayError
from assay.metrics import Thresholds, leaderboard, load_thresholds, totals_signoff
from assay.store import Store


def register(app: typer.Typer) -> None:
    """Add ``leaderboard`` to the ``assay`` command."""
    app.command("leaderboard")(leaderboard_command)


def _thresholds(root: Path | None, min_pearson: float | None, max_mmrv: float | None,
                min_policies: int | None, min_pearson_low: float | None = None,
                max_permutation_p: float | None = None) -> Thresholds:
    base = load_thresholds(root)
    given = {"min_pearson": min_pearson, "max_mmrv": max_mmrv, "min_policies": min_policies,
             "min_pearson_low": min_pearson_low, "max_permutation_p": max_permutation_p}
    return Thresholds(**{**asdict(base), **{k: v for k, v in given.items() if v is not None}})


def leaderboard_command(
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    campaign: CampaignOpt = None,
    tasks: TasksOpt = None,
    variant: VariantScopeOpt = None,
    confidence: ConfidenceOpt = 0.95,
    resamples: Annotated[int | None, typer.Option("--resamples", help="Bootstrap resamples (default 2000; with "
                                                  "--model, 200 refits).")] = None,
    seed: SeedOpt = 0,
    model: Annotated[str | None, typer.Option("--model", help="Rank with a model that tolerates missing cells: irt "
                                              "(2PL item response) or bt (Bradley–Terry on paired wins).")] = None,
    csv_in: Annotated[Path | None, typer.Option("--csv", help="With --model: rank a results CSV "
                                                "(task,policy,successes,trials; absent cells allowed) instead of "
                                                "a campaign.")] = None,
    min_pearson: Annotated[float | None, typer.Option(help="Sign-off: least Pearson r.")] = None,
    max_mmrv: Annotated[float | None, typer.Option(help="Sign-off: largest MMRV.")] = None,
    min_policies: Annotated[int | None, typer.Option(help="Sign-off: fewest calibration policies.")] = None,
    min_pearson_low: Annotated[float | None, typer.Option(
        help="Sign-off: least lower end of r's 95% interval.")] = None,
    max_permutation_p: Annotated[float | None, typer.Option(
        help="Sign-off evidence: largest permutation p of r (default 0.05).")] = None,
    require_signoff: Annotated[bool, typer.Option(
        "--require-signoff", help="Exit with status 1 unless every task passes the sign-off gate (CI).")] = False,
    allow_partial: AllowPartialOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Suite scores with bootstrap intervals, rank intervals, P(A better than B) and the sign-off gate
    (``--model irt|bt``: a ranking model over policies × tasks that tolerates missing cells)."""
    if model is not None or csv_in is not None:
        _model_leaderboard(model, store, catalog, campaign, tasks, variant, csv_in, confidence, resamples, seed,
                           require_signoff, json_out, allow_partial)
        return
    with user_errors(), Store(store, catalog, create=False) as opened:
        scored = scored_campaign(opened, campaign, variant)
        root = opened.root
        name = scored.name
        covered = scored.within(None, planned_tasks(scored, tasks))
        covered.refuse_missing(f"the leaderboard of campaign {name}", allow_partial)
        grid, shared = scored.shared_grid(f"the leaderboard of campaign {name}", allow_partial,
                                          scored.tasks(split_list(tasks) if tasks else None))
        board = leaderboard(grid, confidence, 2000 if resamples is None else resamples, seed)
        thresholds = _thresholds(root, min_pearson, max_mmrv, min_policies, min_pearson_low, max_permutation_p)
        gate = totals_signoff(scored.ranked(grid.task_ids), root, thresholds)
        extras = Extras({})
        add_adaptive(extras, root, name)
        if json_out:
            document = board.to_dict()
            document["rows"] = [r.to_dict() | covered.select([r.policy]).summary() for r in board.rows]
            render.print_json({"campaign": name, **scored.document(covered), "shared_rows": shared.to_dict(),
                               "leaderboard": document,
                               "thresholds": asdict(thresholds), "signoff": [s.to_dict() for s in gate],
                               **extras.document})
        else:
            render.console.print(show.leaderboard_table(board, scored.title(f"campaign {name}: leaderboard")))
            scored.say(covered)
            if not shared.equal:
                render.console.print(f"[yellow]{shared.describe()}[/]", highlight=False, soft_wrap=True)
            render.console.print(show.p_better_table(board))
            render.console.print(show.signoff_table(gate))
            extras.print()
    if require_signoff and not all(s.validated for s in gate):
        gate_failed([f"task {s.task} is not signed off: {s.reason}" for s in gate if not s.validated])


def _model_leaderboard(model: str | None, store: Path, catalog: str | None, campaign: str | None, tasks: str | None,
                       variant: str | None, csv_in: Path | None, confidence: float, resamples: int | None, seed: int,
                       require_signoff: bool, json_out: bool, allow_partial: bool) -> None:
    from assay.cli.ranking_commands import model_board, print_model_board

    with user_errors():
        if model is None:
            raise AssayError("--csv ranks a results table with a model: give --model irt or --model bt")
        chosen = split_list(tasks) if tasks else None
        source, board, gate, scoring = model_board(model, store, catalog, campaign, chosen,
                                                   variant, csv_in, confidence, resamples, seed, allow_partial)
        if json_out:
            per_policy = scoring.pop("policies", {})
            rows = [r.to_dict() | per_policy.get(r.policy, {}) for r in board.rows]
            render.print_json({"source": source, **scoring, "leaderboard": {**board.to_dict(), "rows": rows},
                               "signoff": [s.to_dict() for s in gate]})
        else:
            print_model_board(source, board)
            if gate:
                render.console.print(show.signoff_table(gate))
    if require_signoff and (not gate or not all(s.validated for s in gate)):
        gate_failed([f"task {s.task} is not signed off: {s.reason}" for s in gate if not s.validated]
                    or ["a results CSV carries no sign-off gate (it has no calibration to check)"])
