"""``assay estimate-real``: a policy's real success rate from its sim episodes and a few paired real trials."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, user_errors
from assay.cli.scoring import AllowPartialOpt, Scored, scored_campaign, source_document
from assay.errors import AssayError
from assay.metrics.ppi import CLASSICAL, METHOD, RealEstimate, estimate_real, paired_counts
from assay.metrics.rates import success_interval
from assay.metrics.results_csv import read_results_csv
from assay.metrics.trials_csv import Trial, is_trials_csv, read_trials_csv, trials_from_records, write_trials_csv
from assay.store import EpisodeRecord


def register(app: typer.Typer) -> None:
    """Add ``estimate-real`` to the app."""
    app.command("estimate-real")(estimate_real_command)


def _campaign_trials(store: Path, catalog: str | None, value: str, allow_partial: bool
                     ) -> tuple[str, list[Trial], Scored]:
    """A campaign's scored episodes as trials (one variant: seeds repeat across variants), with its scope and
    completeness; a campaign with a cell of that variant that has no episode is refused unless ``allow_partial``."""
    from assay.cli.common import open_store

    name, _, variant = value.partition(":")
    with open_store(store, catalog) as opened:
        known = [c.name for c in opened.catalog.campaigns()]
        if name not in known:
            raise AssayError(f"no campaign {name!r} in {opened.root}; known: {', '.join(known) or 'none'}")
        records = opened.catalog.episodes(campaign=name)
        variants = sorted({r.variant_name for r in records})
        if variant and variant not in variants:
            raise AssayError(f"campaign {name!r} has no variant {variant!r}; valid: {', '.join(variants)}")
        if not variant and len(variants) > 1:
            raise AssayError(f"campaign {name!r} has variants {', '.join(variants)}; a real trial pairs with one sim "
                             f"episode per seed: give --campaign {name}:VARIANT")
        scored = scored_campaign(opened, name, variant or (variants[0] if variants else None))
    scored.require("estimating real success", allow_partial)
    chosen = set(scored.scope.variants)
    return f"campaign {value}", trials_from_records([r for r in records if r.variant_name in chosen]), scored


def write_trials(path: Path, records: Sequence[EpisodeRecord], outcome: str | None) -> None:
    """``episodes ls --trials-csv``: the records' scored episodes as task,policy,seed,success (one line said)."""
    if outcome is not None:
        raise AssayError(f"--trials-csv writes every scored episode as a trial; with --outcome {outcome} it would "
                         "keep only those and bias every rate read from it: drop --outcome")
    variants = sorted({r.variant_name for r in records})
    if len(variants) > 1:
        raise AssayError(f"the episodes are of variants {', '.join(variants)} and seeds repeat across variants: pick "
                         "one with --variant")
    if not records:
        raise AssayError("no episode matches: nothing to write to --trials-csv")
    trials = trials_from_records(records)
    write_trials_csv(path, trials)
    errors = len(records) - len(trials)
    render.err_console.print(f"{len(trials)} trials written to {path} (task,policy,seed,success"
                             + (f"; {errors} error episodes left out" if errors else "") + ")", highlight=False,
                             soft_wrap=True)


def _classical_only(real: Path, confidence: float) -> list[dict[str, Any]]:
    """Aggregate counts have no pairing: the classical interval per cell, and why there is no PPI estimate."""
    rows = []
    for entry in read_results_csv(real):
        if entry.successes is None or entry.trials is None:
            raise AssayError(f"{entry.source} row {entry.row}: estimate-real needs counts (successes,trials) or, for "
                             "the prediction-powered estimate, one row per trial (task,policy,seed,success)")
        interval = success_interval(entry.successes, entry.trials, confidence, "exact")
        assert interval is not None
        rows.append({"task": entry.task, "policy": entry.policy, "real_trials": entry.trials,
                     "real_successes": entry.successes, "classical_estimate": entry.rate,
                     "classical_low": interval.low, "classical_high": interval.high, "classical_method": CLASSICAL,
                     "estimate": None, "reason": "aggregate counts carry no pairing with sim seeds; give one row per "
                     "real trial (task,policy,seed,success) for the prediction-powered estimate"})
    return rows


def estimate_real_command(
    real: Annotated[Path, typer.Option("--real", help="Real trials: one row each, task,policy,seed,success (seed: the "
                                          "sim episode's seed it was run from); a results CSV of counts gives the "
                                          "classical interval only.")],
    campaign: Annotated[str | None, typer.Option("--campaign", help="Sim side: a campaign in --store, NAME or "
                                                    "NAME:VARIANT.")] = None,
    sim: Annotated[Path | None, typer.Option("--sim", help="Or: sim episodes as task,policy,seed,success.")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    confidence: Annotated[float, typer.Option("--confidence", help="Interval level.")] = 0.95,
    joint: Annotated[bool, typer.Option("--joint", help="Bonferroni over the cells: all intervals hold together "
                                        "(each at 1 − α/cells).")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the interval's draws (same seed, same interval).")] = 0,
    allow_partial: AllowPartialOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Prediction-powered estimate and interval of real success from sim episodes and paired real trials, with
    the classical real-only interval beside it and the real trials the sim episodes were worth.

    A campaign's side says how complete it is; one with a cell that has no episode is refused unless
    --allow-partial."""
    with user_errors():
        if not 0.0 < confidence < 1.0:
            raise AssayError(f"--confidence {confidence} is not valid; give a level strictly between 0 and 1")
        if not is_trials_csv(real):
            rows = _classical_only(real, confidence)
            _print(rows, [], confidence, confidence, joint, "", json_out)
            return
        if (sim is None) == (campaign is None):
            raise AssayError("give exactly one sim side: --campaign NAME[:VARIANT] (with --store) or --sim SIM.csv")
        source, sim_trials, scored = (f"sim {sim.name}", read_trials_csv(sim), None) if sim is not None else \
            _campaign_trials(store, catalog, campaign or "", allow_partial)
        counts = paired_counts(sim_trials, read_trials_csv(real))
        level = 1.0 - (1.0 - confidence) / len(counts) if joint else confidence
        estimates = [estimate_real(c, task, policy, level, seed) for (task, policy), c in counts.items()]
        _print([e.to_dict() for e in estimates], estimates, confidence, level, joint, source, json_out, scored)


def _print(rows: list[dict[str, Any]], estimates: list[RealEstimate], confidence: float, level: float, joint: bool,
           source: str, json_out: bool, scored: Scored | None = None) -> None:
    if json_out:
        render.print_json({"sim": source, "confidence": confidence, "joint": joint, "level_per_cell": level,
                           "method": METHOD, "classical_method": CLASSICAL, **source_document(scored),
                           "cells": rows})
        return
    if not estimates:
        table = Table(title=f"real success, classical only ({CLASSICAL}, {confidence:.0%})", title_justify="left")
        for column in ("task", "policy", "real", "rate", "interval"):
            table.add_column(column, justify="right" if column in ("real", "rate", "interval") else "left")
        for row in rows:
            table.add_row(row["task"], row["policy"], f"{row['real_successes']}/{row['real_trials']}",
                          f"{row['classical_estimate']:.3f}",
                          f"[{row['classical_low']:.3f}, {row['classical_high']:.3f}]")
        render.console.print(table)
        render.console.print(rows[0]["reason"] if rows else "", highlight=False, soft_wrap=True)
        return
    scope = f"{level:.2%} each (Bonferroni over {len(estimates)} cells: {confidence:.0%} jointly)" if joint \
        else f"{confidence:.0%}"
    table = Table(title=f"real success from {source} + paired real trials ({scope})", title_justify="left")
    for column in ("task", "policy", "sim", "real", "PPI estimate", "PPI interval", "classical", "classical interval",
                   "real trials worth", "saved"):
        table.add_column(column, justify="left" if column in ("task", "policy") else "right")
    for e in estimates:
        c = e.counts
        worth = "-" if e.effective_real_trials is None else f"{e.effective_real_trials:.1f}"
        saved = "-" if e.trials_saved is None else f"{e.trials_saved:+.1f}"
        table.add_row(e.task, e.policy, f"{c.sim_successes}/{c.sim_episodes}", f"{c.real_successes}/{c.real_trials}",
                      f"{e.estimate:.3f}", f"[{e.ci_low:.3f}, {e.ci_high:.3f}]", f"{e.classical_estimate:.3f}",
                      f"[{e.classical_low:.3f}, {e.classical_high:.3f}]", worth, saved)
    render.console.print(table)
    render.console.print(f"PPI: {METHOD}. Classical: {CLASSICAL}. 'Real trials worth': the real-only trials whose "
                         "interval would be as narrow, n·(classical width / PPI width)²; assumes the real trials' "
                         "seeds are a random sample of the sim seeds within each sim outcome.", highlight=False,
                         soft_wrap=True)
    for e in estimates:
        for note in e.notes:
            render.console.print(f"[yellow]{e.task} {e.policy}: {note}[/]", highlight=False, soft_wrap=True)
    if scored is not None:
        scored.say(prefix=f"{source} ({scored.scope.label}): ")
