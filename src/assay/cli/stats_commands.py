"""Statistics commands: compare, leaderboard, budget, correlate, stability, openloop.

Every command takes ``--json`` and prints one JSON document with the figures of
its tables (per task and averaged). ``results_extras`` adds the leaderboard with
rank intervals and the sign-off gate to ``assay results``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.text import Text

from assay.cli import render
from assay.cli import stats_render as show
from assay.cli.adaptive_render import adaptive_render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, user_errors
from assay.cli.gates import gate_failed
from assay.cli.scoring import (
    AllowPartialOpt,
    Scored,
    VariantScopeOpt,
    campaign_name,
    planned_tasks,
    scored_campaign,
    source_document,
)
from assay.errors import AssayError
from assay.metrics import (
    INSUFFICIENT,
    INTERVAL_METHODS,
    MmrvConvention,
    Pairing,
    PosteriorComparison,
    RateEntry,
    Thresholds,
    campaign_signoff,
    compare,
    compare_returns,
    correlate,
    entries_of,
    episode_budget,
    evidence_gap,
    gate_cells_of,
    interval_label,
    leaderboard,
    load_thresholds,
    posterior_comparison,
    rate_table,
    read_results_csv,
    records_from_report,
    routing_rows,
    save_calibration,
    save_real_results,
    stability,
    totals_signoff,
)
from assay.metrics.adaptive_power import equal_power_view
from assay.run.adaptive import load_state
from assay.store import Store
from assay.store.aggregates import CellTotals, renderer_totals, routing_totals
from assay.store.provenance import renderer_counts_of, renderer_notes_of

ConfidenceOpt = Annotated[float, typer.Option("--confidence", help="Interval level.")]
ResamplesOpt = Annotated[int, typer.Option("--resamples", help="Bootstrap resamples.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Bootstrap seed (same seed, same intervals).")]
CampaignOpt = Annotated[str | None, typer.Option("--campaign", help="Campaign name (default: the latest).")]
TasksOpt = Annotated[str | None, typer.Option("--tasks", help="Comma-separated task ids (default: all).")]
VariantOpt = VariantScopeOpt


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _thresholds(root: Path | None, min_pearson: float | None, max_mmrv: float | None,
                min_policies: int | None, min_pearson_low: float | None = None,
                max_permutation_p: float | None = None) -> Thresholds:
    base = load_thresholds(root)
    given = {"min_pearson": min_pearson, "max_mmrv": max_mmrv, "min_policies": min_policies,
             "min_pearson_low": min_pearson_low, "max_permutation_p": max_permutation_p}
    return Thresholds(**{**asdict(base), **{k: v for k, v in given.items() if v is not None}})


@dataclass
class Extras:
    """What ``assay results`` shows beside its rate table."""

    document: dict[str, Any]
    tables: list[Any] = field(default_factory=list)

    def print(self) -> None:
        """Print every extra table."""
        for table in self.tables:
            render.console.print(table)


def results_extras(store: Store, scored: Scored, allow_partial: bool = False) -> Extras:
    """Leaderboard (suite score, CI, rank interval; in the campaign's scope, refused over cells with no
    episode unless ``allow_partial``) and sign-off status of each task of a campaign; routing, safety and
    leakage over all its episodes. Counts from the database; rows are decoded for bc policies' leakage only."""
    from assay.failures.safety import campaign_interventions
    from assay.learning.leakage import stored_leakage

    gate = totals_signoff(scored.scoped, store.root)
    leaks = stored_leakage(store, scored.name)
    safety = campaign_interventions(store, scored.name)
    routing = routing_rows(routing_totals(store.catalog, scored.name))
    document: dict[str, Any] = {"leaderboard": None}
    tables: list[Any] = []
    try:
        scored.within().refuse_missing(f"the leaderboard of campaign {scored.name}", allow_partial)
    except AssayError as exc:
        document["leaderboard_withheld"] = str(exc)
        tables.append(f"[yellow]{escape(str(exc))}[/]")
    else:
        board = leaderboard(scored.grid())
        document["leaderboard"] = {**board.to_dict(), "rows": [r.to_dict() | scored.within([r.policy]).summary()
                                                               for r in board.rows]}
        tables.append(show.leaderboard_table(board, scored.title(f"campaign {scored.name}: leaderboard "
                                                                 "(rank [95% interval])")))
    tables.append(show.signoff_table(gate))
    if routing:
        tables.append(show.routing_table(routing))
    if safety:
        tables.append(show.safety_table(safety))
    if leaks:
        tables.append(show.leakage_table(leaks))
    renderers = renderer_totals(store.catalog, scored.name)
    notes = renderer_notes_of(renderers)  # frames drawn by several renderers, or in software on a GPU host
    tables += [Text(note, style="yellow") for note in notes]
    extras = Extras({**document, "signoff": [s.to_dict() for s in gate],
                     "safety": safety, "leakage": [leak.to_dict() for leak in leaks],
                     "routing": [r.to_dict() for r in routing], "renderers": renderer_counts_of(renderers),
                     "notes": notes}, tables)
    _add_adaptive(extras, store.root, scored.name)
    return extras


def add_pass_k(extras: Extras, totals: Sequence[CellTotals], k: int, by: Sequence[str], title: str,
               method: str = "midp") -> None:
    """pass^k per cell of ``by`` and per policy (``pass_k`` in the JSON), for ``assay results --pass-k K``."""
    from assay.cli.passk_render import pass_k_tables
    from assay.metrics.passk import pass_k_rows

    table = pass_k_rows(totals, k, by, method=method)
    extras.document["pass_k"] = table.to_dict()
    extras.tables.extend(pass_k_tables(table, title))


def interval_document(method: str, trials: Sequence[int]) -> dict[str, Any]:
    """The rate interval a table prints (``method``, ``label``) and, when it dips below 0.93 at a trial count the
    table shows, the line that says so (``coverage_note``; ``metrics.coverage_certificate``)."""
    from assay.metrics.coverage_certificate import coverage_note

    if method not in INTERVAL_METHODS:
        raise AssayError(f"--interval {method!r} is not valid; valid: {', '.join(INTERVAL_METHODS)}")
    return {"method": method, "label": interval_label(method), "coverage_note": coverage_note(method, list(trials))}


def _add_adaptive(extras: Extras, root: Path, campaign: str) -> None:
    """An adaptive campaign's stopping reasons, sequential p-values/intervals and episodes saved."""
    state = load_state(root, campaign)
    if state is not None:
        extras.document["adaptive"] = state
        extras.document["adaptive_equal_power"] = equal_power_view(state)
        extras.tables.extend(adaptive_render(state))


def _posterior(grid: Any, a: str, others: Sequence[str], seed: int) -> list[PosteriorComparison]:
    out = []
    for b in others:
        counts = {t.task: (*t.counts(a), *t.counts(b)) for t in grid.tasks}
        out.append(posterior_comparison(counts, seed=seed))
    return out


def register(app: typer.Typer) -> None:
    """Add the statistics commands (compare, leaderboard, budget, correlate, stability, openloop, ...) to ``app``."""
    app.command("compare")(compare_command)
    app.command("leaderboard")(leaderboard_command)
    app.command("budget")(budget_command)
    app.command("correlate")(correlate_command)
    app.command("stability")(stability_command)
    app.command("openloop")(openloop_command)


def compare_command(
    a: Annotated[str | None, typer.Argument(help="Policy A (the checkpoint under test).")] = None,
    others: Annotated[list[str] | None, typer.Argument(help="Policy B, or several (Holm-corrected).")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    campaign: CampaignOpt = None,
    tasks: TasksOpt = None,
    variant: VariantOpt = None,
    unpaired: Annotated[bool, typer.Option("--unpaired", help="Newcombe/Fisher instead of paired tests.")] = False,
    alpha: Annotated[float, typer.Option("--alpha", help="Significance level after Holm.")] = 0.05,
    confidence: ConfidenceOpt = 0.95,
    resamples: Annotated[int, typer.Option("--resamples", help="Posterior draws behind a suite interval.")] = 20000,
    seed: SeedOpt = 0,
    allow_partial: AllowPartialOpt = False,
    bundles: Annotated[list[str] | None, typer.Option("--bundle", help="Compare across result bundles instead of a "
                       "store: [LABEL=]DIR, repeated; policies are LABEL:policy (LABEL: the directory name).")] = None,
    recipes: Annotated[str | None, typer.Option("--recipes", help="Compare two training recipes instead, A.yaml,B.yaml "
                       "(assay noise's recipes): each trained with --seeds, retraining noise counted.")] = None,
    recipe_seeds: Annotated[str, typer.Option("--seeds", help="With --recipes: training seeds.")] = "0,1,2,3",
    json_out: JsonOpt = False,
) -> None:
    """Per-task and suite differences A − B with intervals, p-values and verdicts. Tasks without a
    success signal (gymnasium ids) are compared on paired mean return instead (``returns`` in --json)."""
    if recipes is not None:
        from assay.cli.noise_commands import compare_recipes_command

        beside = a is not None or bool(others) or bool(bundles) or campaign is not None
        compare_recipes_command(recipes, recipe_seeds, alpha, 1, None, store, catalog, json_out, beside)
        return
    if a is None or not others:
        with user_errors():
            raise AssayError("compare needs policies A and B (or --recipes A.yaml,B.yaml)")
    if bundles:
        from assay.cli.protocol_commands import compare_bundles

        compare_bundles(a, others, bundles, alpha, confidence, resamples, seed, json_out)
        return
    with user_errors(), Store(store, catalog, create=False) as opened:
        scored = scored_campaign(opened, campaign, variant)
        root = opened.root
        name = scored.name
        covered = scored.within([a, *others], planned_tasks(scored, tasks))
        covered.refuse_missing(f"comparing {a} with {', '.join(others)} on campaign {name}", allow_partial)
        grid = scored.grid(scored.tasks(_split(tasks) if tasks else None))
        grid.require([a, *others])
        by_return = [t for t in grid.task_ids if return_scored(t)]
        by_success = [t for t in grid.task_ids if t not in by_return]
        success_grid = scored.grid(by_success) if by_success else None
        rows = compare(success_grid, a, others, Pairing.UNPAIRED if unpaired else Pairing.PAIRED, alpha, confidence,
                       resamples, seed) if success_grid is not None else []
        returns = compare_returns(scored.episodes(by_return, [a, *others]), a, others, by_return, alpha,
                                  confidence) if by_return else []
        posteriors = _posterior(success_grid, a, others, seed) if success_grid is not None else []
        gate = totals_signoff(scored.ranked(grid.task_ids, [a, *others]), root)
        extras = Extras({"signoff": [g.to_dict() for g in gate]})
        _add_adaptive(extras, root, name)
        if json_out:
            render.print_json({"campaign": name, "a": a, "others": others, "alpha": alpha, "confidence": confidence,
                               "seed": seed, "n_resamples": resamples, **scored.document(covered),
                               "comparisons": [r.to_dict() | covered.select([a, r.b], [r.task] if r.task != "suite"
                                                                            else None).summary() for r in rows],
                               "returns": [r.to_dict() for r in returns],
                               "posterior": [{"b": b, **p.to_dict()} for b, p in zip(others, posteriors, strict=False)],
                               **extras.document})
            return
        title = scored.title(f"campaign {name}: {a} (A) vs {', '.join(others)} (B)")
        if rows:
            render.console.print(show.comparison_table(rows, title))
            render.console.print(show.posterior_table(a, others, posteriors))
        if returns:
            render.console.print(show.return_comparison_table(
                returns, f"{title}, mean return (no success signal: {', '.join(by_return)})", confidence))
        scored.say(covered)
        render.console.print(show.signoff_table(gate))
        if extras.tables:
            render.console.print("[yellow]adaptive campaign: the fixed-n p-values above are not valid after optional "
                                 "stopping; use the sequential p-values below[/]")
            extras.print()


def return_scored(task_id: str) -> bool:
    """Whether a task has no success signal (``SuccessMode.NONE``), so return is its endpoint."""
    from assay.sim import default_registry
    from assay.spec import SuccessMode

    try:
        return default_registry().get(task_id).success is SuccessMode.NONE
    except AssayError:
        return False


def leaderboard_command(
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    campaign: CampaignOpt = None,
    tasks: TasksOpt = None,
    variant: VariantOpt = None,
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
                                          scored.tasks(_split(tasks) if tasks else None))
        board = leaderboard(grid, confidence, 2000 if resamples is None else resamples, seed)
        thresholds = _thresholds(root, min_pearson, max_mmrv, min_policies, min_pearson_low, max_permutation_p)
        gate = totals_signoff(scored.ranked(grid.task_ids), root, thresholds)
        extras = Extras({})
        _add_adaptive(extras, root, name)
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
        source, board, gate, scoring = model_board(model, store, catalog, campaign, _split(tasks) if tasks else None,
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


def budget_command(
    delta: Annotated[float, typer.Option("--delta", help="Difference in success rate to detect.")],
    power: Annotated[float, typer.Option("--power", help="Probability of detecting it.")] = 0.8,
    baseline: Annotated[float | None, typer.Option("--baseline", help="Expected rate (default 0.5).")] = None,
    paired: Annotated[bool, typer.Option("--paired", help="Same seeds for both (McNemar).")] = False,
    alpha: Annotated[float, typer.Option("--alpha")] = 0.05,
    comparisons: Annotated[int, typer.Option("--comparisons", help="Comparisons in the family (Holm).")] = 1,
    discordance: Annotated[float | None, typer.Option(help="Paired: P(pair discordant), if known.")] = None,
    test: Annotated[str, typer.Option("--test", help="exact: n for the exact test compare runs (Fisher unpaired, "
                                      "McNemar paired), by exact power; approx: the normal-approximation "
                                      "formula.")] = "exact",
    json_out: JsonOpt = False,
) -> None:
    """How many episodes per cell detect a difference of --delta with --power."""
    with user_errors():
        budget = episode_budget(delta, power, baseline, paired, alpha, comparisons, discordance, test)
        if json_out:
            render.print_json(budget.to_dict())
            return
        mode = "paired (same seeds)" if paired else "unpaired"
        render.console.print(
            f"{budget.episodes_per_cell} episodes per cell detect {budget.baseline:.2f} vs {budget.alternative:.2f} "
            f"(delta {delta}) with power {power}, alpha {alpha}"
            + (f" over {comparisons} comparisons" if comparisons > 1 else "") + f"; {mode}, {budget.formula}"
            + (f", discordance {budget.discordance:.3f}" if budget.discordance is not None else "")
            + (f"; exact power {budget.achieved_power:.3f} (the normal approximation says {budget.approx_episodes})"
               if budget.achieved_power is not None else ""),
            highlight=False, soft_wrap=True)


def _campaign_entries(store: Path, catalog: str | None, campaign: str, variant: str | None = None,
                      variants: dict[str, tuple[str, ...]] | None = None) -> tuple[list[RateEntry], Scored, list[Any]]:
    """A campaign's (task, policy) rates in the variant scope (nominal by default), its scope and completeness,
    and the sign-off gate of its tasks; ``variants`` is filled with each task's variant keys."""
    with Store(store, catalog, create=False) as opened:
        scored = scored_campaign(opened, campaign, variant)
        gate = totals_signoff(scored.scoped, opened.root)
    if variants is not None:
        for cell in gate_cells_of(scored.scoped):
            variants[cell.task] = cell.variants
    return entries_of(scored.scoped, f"campaign {scored.name}" + (f":{variant}" if variant else "")), scored, gate


def correlate_command(
    real: Annotated[Path, typer.Option("--real", help="Real-world results CSV (task,policy,successes,trials).")],
    sim: Annotated[Path | None, typer.Option("--sim", help="Sim results CSV.")] = None,
    campaign: Annotated[str | None, typer.Option("--campaign", help="Or: a campaign in --store, NAME or "
                                                    "NAME:VARIANT (e.g. quickstart:nominal).")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    record: Annotated[bool, typer.Option("--record", help="Save per-task calibration records (and the real results, "
                                         "for reports) in --store.")] = False,
    mmrv_weight: Annotated[str, typer.Option("--mmrv-weight", help="Gap a rank violation costs: real (SIMPLER's "
                                             "published form) or sim.")] = "real",
    mmrv_ties: Annotated[str, typer.Option("--mmrv-ties", help="Strict comparison defining a violation: '<' "
                                           "(SIMPLER) or '>' (a sim tie is charged at the higher real rate).")] = "<",
    confidence: ConfidenceOpt = 0.95,
    resamples: ResamplesOpt = 2000,
    seed: SeedOpt = 0,
    allow_partial: AllowPartialOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Pearson, Spearman, Kendall and MMRV between real and sim success rates, per task and averaged, with
    what limits them: k, a Fisher-z interval, drop-one leverage and the exact permutation p-value (floor 1/k!).

    A campaign's side says how complete it is; one with a cell that has no episode is refused unless
    --allow-partial (its missing cells are not missing at random)."""
    with user_errors():
        if (sim is None) == (campaign is None):
            raise AssayError("give exactly one of --sim SIM.csv or --campaign NAME (with --store)")
        reference = read_results_csv(real)
        variants: dict[str, tuple[str, ...]] = {}
        scored: Scored | None = None
        if sim is not None:
            other = read_results_csv(sim)
        else:
            assert campaign is not None  # exactly one of the two was given
            other, scored, _ = _campaign_entries(store, catalog, *_name_and_variant(campaign), variants=variants)
            scored.require("correlating real with sim", allow_partial)  # before anything is recorded
        convention = MmrvConvention(mmrv_weight, mmrv_ties)
        report = correlate(reference, other, ("real", "sim"), confidence, resamples, seed, convention)
        saved = None
        evidence: dict[str, str | None] = {}
        if record:
            source = f"real {real.name} vs " + (f"sim {sim.name}" if sim is not None else f"campaign {campaign}")
            if scored is not None and not scored.within().complete:
                source += f" ({scored.within().describe()})"
            root = Store(store, catalog, create=True).root
            recorded = records_from_report(report, source, variants=variants)
            saved = save_calibration(root, recorded)
            save_real_results(root, reference)
            thresholds = load_thresholds(root)
            evidence = {r.task: evidence_gap(r, thresholds) for r in recorded}
        if json_out:
            render.print_json({**report.to_dict(), **source_document(scored),
                               "calibration_file": str(saved) if saved else None,
                               "signoff_evidence": {task: gap or "sufficient" for task, gap in evidence.items()}})
            return
        render.console.print(show.correlation_table(report, "real-to-sim agreement (95% bootstrap intervals)"
                                                    + (f", sim: {scored.scope.label}" if scored else "")))
        if scored is not None:
            scored.say(prefix=f"campaign {scored.name}: ")
        for line in show.left_out_lines(report):
            render.console.print(line, highlight=False, soft_wrap=True)
        render.console.print(show.correlation_checks_table(report))
        if report.unmatched:
            render.console.print(f"sim cells without a real counterpart (ignored): {', '.join(report.unmatched)}",
                                 highlight=False, soft_wrap=True)
        if saved:
            render.console.print(f"calibration records saved to {saved}", highlight=False)
        for task, gap in evidence.items():
            render.console.print(f"sign-off evidence on {task}: " + ("sufficient (the gate then checks r, its "
                                 "interval and MMRV)" if gap is None else f"[yellow]{INSUFFICIENT}[/]: {gap}"),
                                 highlight=False, soft_wrap=True)


def _name_and_variant(value: str) -> tuple[str, str | None]:
    name, _, variant = value.partition(":")
    return name, variant or None


def _source(value: str, store: Path, catalog: str | None, allow_partial: bool
            ) -> tuple[list[RateEntry], list[Any], Scored | None]:
    """A leaderboard source (a results CSV, CAMPAIGN or CAMPAIGN:VARIANT): its rates, a campaign's sign-off gate
    and scoring (none for a CSV); a campaign with a cell that has no episode is refused unless ``allow_partial``."""
    if value.endswith(".csv"):
        return read_results_csv(value), [], None
    name, _, variant = value.partition(":")
    entries, scored, gate = _campaign_entries(store, catalog, name, variant or None)
    scored.require(f"ranking stability of {value}", allow_partial)
    return entries, gate, scored


def stability_command(
    first: Annotated[str, typer.Argument(help="Reference leaderboard: CAMPAIGN, CAMPAIGN:VARIANT or a results CSV.")],
    second: Annotated[str, typer.Argument(help="The other leaderboard, in the same forms.")],
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    confidence: ConfidenceOpt = 0.95,
    resamples: ResamplesOpt = 2000,
    seed: SeedOpt = 0,
    allow_partial: AllowPartialOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Kendall τ and MMRV between two leaderboards (two seed sets, variants or twin versions).

    A campaign says how complete it is; one with a cell that has no episode is refused unless --allow-partial."""
    with user_errors():
        sources = [_source(value, store, catalog, allow_partial) for value in (first, second)]
        result = stability(sources[0][0], sources[1][0], (first, second), confidence, resamples, seed)
        gate = [g for _, gates, _ in sources for g in gates]
        if json_out:
            render.print_json({**result.to_dict(), "signoff": [g.to_dict() for g in gate],
                               "sources": [{"source": value, **source_document(scored)}
                                           for value, (_, _, scored) in zip((first, second), sources, strict=True)]})
            return
        render.console.print(show.correlation_table(result.report, f"ranking stability: {first} vs {second}"))
        for value, (_, _, scored) in zip((first, second), sources, strict=True):
            if scored is not None:
                scored.say(prefix=f"{value} ({scored.scope.label}): ")
        for line in show.left_out_lines(result.report):
            render.console.print(line, highlight=False, soft_wrap=True)
        suite = ", ".join(f"{k} {v['value']:.3f}" if v["value"] is not None else f"{k} {v['reason']}"
                          for k, v in result.suite.items())
        render.console.print(f"suite scores over {len(result.suite_policies)} policies: {suite}", highlight=False,
                             soft_wrap=True)
        if gate:
            render.console.print(show.signoff_table(gate))


def openloop_command(
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    campaign: CampaignOpt = None,
    reference: Annotated[str, typer.Option(
        "--reference", help="Policy whose recorded episodes are replayed.")] = "expert",
    policies: Annotated[str | None, typer.Option("--policies", help="Policies to score (default: all).")] = None,
    episodes: Annotated[int | None, typer.Option("--episodes", min=1, help="At most this many recorded episodes "
                                                  "per task (first seeds first).")] = None,
    variant: Annotated[str, typer.Option("--variant", help="The variant whose recorded episodes are replayed and "
                                                           "whose closed-loop rates are ranked.")] = "nominal",
    resamples: ResamplesOpt = 2000,
    seed: SeedOpt = 0,
    json_out: JsonOpt = False,
) -> None:
    """Action MSE and R² of policies on recorded observations, beside the closed-loop ranking (one variant)."""
    from assay.cli.stats_openloop import predictor
    from assay.metrics import load_trajectories, openloop_table, rank_agreement, save_openloop
    from assay.metrics.openloop import closed_outcomes, first_per_task
    from assay.spec import PolicySpec, TaskSpec

    with user_errors():
        with Store(store, catalog, create=False) as opened:
            name = campaign_name(opened, campaign)
            resolved = next(c.spec for c in opened.catalog.campaigns() if c.name == name)
            specs = {p["name"]: PolicySpec(**p["spec"]) for p in resolved["policies"]}
            tasks = {t["id"]: TaskSpec(**t["spec"]) for t in resolved["tasks"]}
            if reference not in specs:
                raise AssayError(f"--reference {reference!r} is not a policy of campaign {name}; valid: "
                                 f"{', '.join(specs)}")
            chosen = _split(policies) if policies else list(specs)
            unknown = [p for p in chosen if p not in specs]
            if unknown:
                raise AssayError(f"unknown policy {', '.join(unknown)} in campaign {name}; valid: {', '.join(specs)}")
            everything = opened.catalog.episodes(campaign=name)
            records = [r for r in everything if r.variant_name == variant]
            if not records:
                known = sorted({r.variant_name for r in everything})
                raise AssayError(f"--variant {variant!r} has no episodes in campaign {name}; valid: {', '.join(known)}")
            recorded = [r for r in records if r.policy_name == reference]
            if episodes is not None:
                recorded = first_per_task(recorded, episodes)
            cameras = sorted({c.name for task in tasks.values() for c in task.cameras})
            trajectories = load_trajectories(opened, recorded, cameras)
            bounds = {task_id: (task.action.low, task.action.high) for task_id, task in tasks.items()}
            rows = openloop_table(trajectories, {p: predictor(specs[p], tasks) for p in chosen}, bounds)
            closed = {(r.group["policy"], r.group["task"]): r.rate for r in rate_table(records) if r.rate is not None}
            agreement = rank_agreement(rows, closed, closed_outcomes(records), resamples, seed)
            saved = save_openloop(opened, name, reference, rows, closed, agreement, variant)
            gate = campaign_signoff([r for r in records if r.policy_name in chosen], opened.root)
        if json_out:
            render.print_json({"campaign": name, "reference": reference, "variant": variant,
                               "openloop": [r.to_dict() for r in rows],
                               "closed_loop": [{"policy": p, "task": t, "rate": v}
                                               for (p, t), v in sorted(closed.items())],
                               "agreement": [asdict(a) for a in agreement], "saved": saved,
                               "signoff": [g.to_dict() for g in gate]})
            return
        for table in show.openloop_tables(rows, agreement, f"{reference}'s recorded trajectories ({variant})"):
            render.console.print(table)
        render.console.print(show.signoff_table(gate))
        render.console.print(f"saved to {saved} (shown in `assay report`)", highlight=False, soft_wrap=True)
