"""CLI: ``assay trace export`` (Perfetto/Chrome trace JSON, OTLP/JSON) and ``assay trace diff`` (which layer
parted first between two runs on paired seeds).

An export is one episode (``KEY``, a unique prefix) or a sample of a campaign (``--campaign``, ``--sample``),
with each failure's point of no return (``assay failures ponr``) marked on it. See ``assay.store.trace`` for
what the trace holds, ``assay.store.trace_export`` for the formats and ``assay.metrics.trace_diff`` for the
comparison.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, user_errors
from assay.errors import AssayError, TraceError, unknown_name
from assay.failures.ponr import load_ponrs
from assay.metrics.trace_diff import ATOL, RTOL, Side, TraceDiff, diff
from assay.store import EpisodeRecord, Store
from assay.store.trace import read_trace
from assay.store.trace_export import FORMATS, Exported, Mark, otlp, perfetto

trace_app = typer.Typer(no_args_is_help=True, help="Per-layer traces: export them, and find where two runs part.")


def sample(records: list[EpisodeRecord], count: int) -> list[EpisodeRecord]:
    """``count`` episodes evenly spaced over ``records`` ordered by policy, task, variant, seed."""
    ordered = sorted((r for r in records if r.data_path is not None),
                     key=lambda r: (r.policy_name, r.task_id, r.variant_name, r.seed, r.key))
    if len(ordered) <= count:
        return ordered
    return [ordered[i * len(ordered) // count] for i in range(count)]


def exported(store: Store, records: list[EpisodeRecord]) -> list[Exported]:
    """Each episode's record, trace and marks (its point of no return, when ``assay failures ponr`` found one)."""
    ponrs = load_ponrs(store.root)
    episodes = []
    for record in records:
        found = ponrs.get(record.key)
        point = found.point if found is not None else None
        marks = (Mark(point, "point of no return"),) if point is not None else ()
        episodes.append(Exported(record, read_trace(store, record), marks))
    return episodes


def _targets(store: Store, key: str | None, campaign: str | None, count: int) -> tuple[str, list[EpisodeRecord]]:
    if (key is None) == (campaign is None):
        raise AssayError("give an episode KEY or --campaign NAME (a sample of its episodes), not both or neither")
    if key is not None:
        record = store.catalog.episode(key)  # one line when the prefix matches nothing or several
        return record.key[:12], [record]
    assert campaign is not None
    if store.campaign(campaign) is None:
        known = (row.name for row in store.catalog.campaigns())
        raise AssayError(unknown_name("campaign", campaign, known, "this store", none="none"))
    chosen = sample(list(store.catalog.episodes(campaign=campaign)), count)
    if not chosen:
        raise TraceError(f"campaign {campaign!r} has no episode with a step file to export")
    return campaign, chosen


def export(key: Annotated[str | None, typer.Argument(help="Episode key (a unique prefix).")] = None,
           fmt: Annotated[str, typer.Option("--format", "-f", help=f"One of {', '.join(FORMATS)}: Chrome/Perfetto "
                                            "trace JSON (opens in ui.perfetto.dev), or OTLP/JSON spans.")] = "perfetto",
           campaign: Annotated[str | None, typer.Option("--campaign", "-c", help="Export a sample of this "
                                                        "campaign's episodes instead of one.")] = None,
           count: Annotated[int, typer.Option("--sample", min=1, help="How many episodes (with --campaign), evenly "
                                              "spaced by policy, task, variant and seed.")] = 8,
           out: Annotated[str | None, typer.Option("--out", "-o", help="Where to write it ('-': stdout; default "
                                                   "NAME.FORMAT.json here).")] = None,
           store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None) -> None:
    """Export an episode's (or a campaign sample's) per-layer trace: one lane per layer (policy, action,
    controller, physics, render, recorder, executor), its point of no return marked."""
    with user_errors():
        if fmt not in FORMATS:
            raise AssayError(f"unknown trace format {fmt!r}; valid: {', '.join(FORMATS)}")
        with open_store(store, catalog) as opened:
            name, records = _targets(opened, key, campaign, count)
            episodes = exported(opened, records)
        document = perfetto(episodes) if fmt == "perfetto" else otlp(episodes)
        text = json.dumps(document, separators=(",", ":"), allow_nan=False)
        if out == "-":
            sys.stdout.write(text + "\n")
            return
        path = Path(out or f"{name}.{fmt}.json")
        path.write_text(text + "\n", encoding="utf-8")
        render.console.print(f"wrote {path} ({len(episodes)} episode{'s' * (len(episodes) != 1)}, {fmt})",
                             highlight=False, soft_wrap=True)


def _print_diff(result: TraceDiff) -> None:
    n = len(result.pairs)
    lines = [f"trace diff {result.a.label} -> {result.b.label}: {n} paired episode{'s' * (n != 1)} (task, seed); "
             f"noise band {result.atol:g} + {result.rtol:g} x |value|"]
    if result.skipped:
        lines.append("left out: " + ", ".join(f"{v} {k}" for k, v in sorted(result.skipped.items())))
    lines.append(f"{'layer':<11} {'first in':>9} {'parts in':>9} {'median step':>12}  first field")
    for row in result.layers():
        if row.layer.value == "executor":
            continue  # per episode, never compared
        field = max(row.columns, key=lambda c: row.columns[c]) if row.columns else "–"
        median = "–" if row.median_step is None else f"{row.median_step:g}"
        lines.append(f"{row.layer.value:<11} {row.first_in:>9} {row.diverged:>9} {median:>12}  {field}")
    if result.timings:
        lines.append("durations (per-episode medians; never used to localise): " + "; ".join(
            f"{t.column} {t.median_a:.3g} -> {t.median_b:.3g} ms (x{t.ratio:.2f}{', beyond noise' if t.beyond else ''})"
            for t in result.timings))
    lines.append(result.verdict())
    render.console.print("\n".join(lines), highlight=False, soft_wrap=True)


def diff_command(a: Annotated[str, typer.Argument(help="Side A: CAMPAIGN, CAMPAIGN:POLICY or "
                                                  "CAMPAIGN:POLICY:VARIANT.")],
                 b: Annotated[str, typer.Argument(help="Side B, the same way.")],
                 atol: Annotated[float, typer.Option("--atol", min=0.0, help="The noise band's absolute part.")] = ATOL,
                 rtol: Annotated[float, typer.Option("--rtol", min=0.0, help="The noise band's relative part.")] = RTOL,
                 store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False) -> None:
    """Which layer's trace parts first between two runs (policy versions, simulator settings) on paired seeds,
    and where success changes: per layer, the first step beyond the noise band, over every pair."""
    with user_errors(), open_store(store, catalog) as opened:
        result = diff(opened, Side.parse(a), Side.parse(b), atol, rtol)
    if json_out:
        document: dict[str, Any] = result.to_dict()
        render.print_json(document)
    else:
        _print_diff(result)


def register(app: typer.Typer) -> None:
    """Add the ``trace`` command group to ``app``."""
    trace_app.command("export")(export)
    trace_app.command("diff")(diff_command)
    app.add_typer(trace_app, name="trace")
