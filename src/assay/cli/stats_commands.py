"""Statistics commands: compare, budget, correlate, stability, openloop (``leaderboard_commands``: the leaderboard).

Every command takes ``--json`` and prints one JSON document with the figures of
its tables (per task and averaged). What ``assay results`` adds beside its rate table
(the leaderboard with rank intervals, the sign-off gate) is ``results_view``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from assay.cli import render
from assay.cli import stats_render as show
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, split_list, user_errors
from assay.cli.options import CampaignOpt, ConfidenceOpt, ResamplesOpt, SeedOpt, TasksOpt
from assay.cli.results_view import Extras, add_adaptive, return_scored
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
    MmrvConvention,
    Pairing,
    PosteriorComparison,
    RateEntry,
    campaign_signoff,
    compare,
    compare_returns,
    correlate,
    entries_of,
    episode_budget,
    evidence_gap,
    gate_cells_of,
    load_thresholds,
    posterior_comparison,
    rate_table,
    read_results_csv,
    records_from_report,
    save_calibration,
    save_real_results,
    stability,
    totals_signoff,
)
from assay.store import Store

VariantOpt = VariantScopeOpt


def _posterior(grid: Any, a: str, others: Sequence[str], seed: int) -> list[PosteriorComparison]:
    out = []
    for b in others:
        counts = {t.task: (*t.counts(a), *t.counts(b)) for t in grid.tasks}
        out.append(posterior_comparison(counts, seed=seed))
    return out


def register(app: typer.Typer) -> None:
    """Add the statistics commands (compare, budget, correlate, stability, openloop) to ``app``."""
    app.command("compare")(compare_command)
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
        grid = scored.grid(scored.tasks(split_list(tasks) if tasks else None))
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
        add_adaptive(extras, root, name)
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
            chosen = split_list(policies) if policies else list(specs)
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
