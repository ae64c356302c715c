"""``assay sweep`` and the ``results --profile`` tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, split_list, user_errors
from assay.cli.options import SerialExecutorOpt
from assay.cli.scoring import Scored
from assay.cli.stats_render import signoff_table
from assay.errors import AssayError
from assay.metrics import (
    campaign_signoff,
    category_profile,
    rate_table,
    retention_table,
    robustness_profile,
    stored_retention,
)
from assay.run import make_executor, prepare_campaign, run_campaign
from assay.sim import get_factor
from assay.spec import campaign_from_data, content_hash
from assay.spec.libero_catalog import PLUS_LABEL
from assay.store import EpisodeRecord, Store

RETENTION_CI = "95% CI (MOVER-R)"  # metrics.intervals.retention_interval: the method is named where it is shown
EXACT_RETENTION_CI = "95% CI (exact: Bonferroni Clopper–Pearson)"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def profile_document(episodes: list[EpisodeRecord]) -> dict[str, Any]:
    """The retention rows and per-axis profile of ``episodes`` as JSON data."""
    rows = retention_table(episodes)
    return {"retention": [r.to_dict() for r in rows], "profile": [p.to_dict() for p in robustness_profile(rows)],
            "categories": [c.to_dict() for c in category_profile(rows)]}


def stored_profile(opened: Store, scored: Scored, interval: str = "midp") -> dict[str, Any]:
    """``results --profile``: retention and the per-axis profile over every variant of the campaign, from the
    database's seed patterns (no row decoded); ``--interval exact`` gives retention its exact construction."""
    from assay.metrics.coverage_certificate import retention_note

    method = "exact" if interval == "exact" else "mover"
    rows = stored_retention(opened.catalog, scored.name, scored.totals, method=method)
    return {"retention": [r.to_dict() for r in rows], "profile": [p.to_dict() for p in robustness_profile(rows)],
            "categories": [c.to_dict() for c in category_profile(rows, method=method)],
            "retention_interval": {"method": method, "coverage_note": retention_note(method, [r.pairs for r in rows])}}


def print_profile(document: dict[str, Any]) -> None:
    """Print the retention table and the per-axis profile."""
    interval = document.get("retention_interval", {"method": "mover", "coverage_note": None})
    label = RETENTION_CI if interval["method"] == "mover" else EXACT_RETENTION_CI
    table = Table(
        title="robustness retention on paired seeds (variant successes / nominal successes)", title_justify="left",
        caption=f"[yellow]{interval['coverage_note']}[/]" if interval["coverage_note"] else None,
        caption_justify="left")
    for column in ("policy", "axis", "variant", "pairs", "nominal", "variant", "retention", label, "McNemar p"):
        table.add_column(column)
    for r in document["retention"]:
        ci = f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]" if r["ci_low"] is not None else "-"
        table.add_row(r["policy"], r["axis"], r["variant"], str(r["pairs"]), str(r["nominal_successes"]),
                      str(r["variant_successes"]), _fmt(r["retention"]), ci, f"{r['p_value']:.3g}")
    render.console.print(table)
    profile = Table(title="robustness profile (pooled over each axis)", title_justify="left")
    for column in ("policy", "axis", "variants", "pairs", "retention", "worst variant", "worst retention"):
        profile.add_column(column)
    for p in document["profile"]:
        profile.add_row(p["policy"], p["axis"], str(p["variants"]), str(p["pairs"]), _fmt(p["retention"]),
                        p["worst_variant"] or "-", _fmt(p["worst_retention"]))
    render.console.print(profile)
    if document.get("categories"):
        categories = Table(title=f"{PLUS_LABEL}: robustness profile (pooled over each category's levels)",
                           title_justify="left")
        for column in ("policy", "category", "variants", "pairs", "nominal", "variant", "retention", label,
                       "worst variant", "worst retention"):
            categories.add_column(column)
        for c in document["categories"]:
            ci = f"[{_fmt(c['ci_low'])}, {_fmt(c['ci_high'])}]" if c["ci_low"] is not None else "-"
            categories.add_row(c["policy"], c["category"], str(c["variants"]), str(c["pairs"]),
                               str(c["nominal_successes"]), str(c["variant_successes"]), _fmt(c["retention"]), ci,
                               c["worst_variant"] or "-", _fmt(c["worst_retention"]))
        render.console.print(categories)


def _parse_value(text: str) -> Any:
    try:
        return float(text) if any(c in text for c in ".e") else int(text)
    except ValueError:
        return text


def sweep(
    factor: Annotated[str, typer.Option("--factor", help="One factor (see `assay factors`).")],
    values: Annotated[str, typer.Option("--values", help="Comma-separated levels, e.g. 0.2,0.5,2.")],
    task: Annotated[str, typer.Option("--task", help="Task id.")] = "metaworld/push@1",
    policy: Annotated[str, typer.Option("--policy", help="Builtin name or module:attr.")] = "expert",
    episodes: Annotated[int, typer.Option("--episodes", min=1, help="Seeds per level (paired with nominal).")] = 10,
    camera: Annotated[str | None, typer.Option(
        "--camera", help="Render this view (front, top, side) with depth.")] = None,
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    horizon: Annotated[int | None, typer.Option("--horizon", min=1, help="Cap on steps per episode (default: the "
                                                "task's).")] = None,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1)] = 2,
    executor: SerialExecutorOpt = "local",
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run a single-factor sweep (nominal plus each level, on the same seeds) and print the curve."""
    with user_errors():
        spec_factor = get_factor(factor)
        levels = [spec_factor.validate(_parse_value(v)) for v in split_list(values)]
        if not levels:
            raise AssayError("--values needs at least one level")
        data: dict[str, Any] = {
            "seed": seed, "episodes": episodes, "tasks": [task], "policies": [policy],
            "variants": ["nominal", {"sweep": {factor: [list(v) if isinstance(v, tuple) else v for v in levels]}}],
        }
        if camera:
            data["cameras"] = [{"name": camera, "width": 128, "height": 128, "depth": True}]
        if horizon is not None:
            data["horizon"] = horizon
        data["name"] = f"sweep-{factor}-{content_hash(data, length=8)}"
        spec = campaign_from_data(data, "<sweep>")
        planned = prepare_campaign(spec)
        with open_store(store, catalog, create=True) as opened:
            run_campaign(planned, opened, make_executor(executor, opened.data_root, workers))  # its --data, if any
            episodes_run = opened.catalog.episodes(campaign=spec.name)
            gate = campaign_signoff(episodes_run, opened.root, per_variant=True)
        rates = {r.group["variant"]: r for r in rate_table(episodes_run, by=("variant",))}
        retention = {r.variant: r for r in retention_table(episodes_run)}
        curve: list[dict[str, Any]] = []
        for variant in planned.variants:
            rate, kept = rates.get(variant.name), retention.get(variant.name)
            curve.append({"variant": variant.name,
                          "level": None if variant.is_nominal else variant.perturbations[0].value,
                          "successes": rate.successes if rate else 0, "scored": rate.scored if rate else 0,
                          "rate": rate.rate if rate else None, "ci_low": rate.ci_low if rate else None,
                          "ci_high": rate.ci_high if rate else None,
                          "retention": 1.0 if variant.is_nominal else (kept.retention if kept else None),
                          "retention_ci": None if kept is None else [kept.ci_low, kept.ci_high]})
        if json_out:
            render.print_json({"campaign": spec.name, "factor": factor, "task": task, "policy": policy, "curve": curve,
                               "signoff": [g.to_dict() for g in gate]})
            return
        table = Table(
            title=f"{policy} on {task}: sweep of {factor} ({episodes} paired seeds per level)", title_justify="left")
        for column in ("level", "success", "mid-p 95%", "succ/n", "retention", "retention 95% CI", "curve"):
            table.add_column(column)
        for point in curve:
            bar = "█" * round(20 * point["rate"]) if point["rate"] is not None else ""
            ci = point["retention_ci"]
            table.add_row("nominal" if point["level"] is None else str(point["level"]), _fmt(point["rate"]),
                          f"[{_fmt(point['ci_low'])}, {_fmt(point['ci_high'])}]",
                          f"{point['successes']}/{point['scored']}",
                          _fmt(point["retention"]),
                          f"[{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci and ci[0] is not None else "-", bar)
        render.console.print(table)
        render.console.print(signoff_table(gate))
        render.console.print(f"stored as campaign {spec.name} in {Path(store).resolve()}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``sweep`` to the ``assay`` command (``factors`` is a listing: ``listing_commands``)."""
    app.command()(sweep)
