"""``assay reproduce`` (a campaign against a published protocol and rate) and ``assay lint-rate``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, user_errors
from assay.cli.scoring import AllowPartialOpt
from assay.errors import AssayError
from assay.metrics.reproduction import Registry, Reproduction, lint_rate, load_registry, reproduce

RegistryOpt = Annotated[Path | None, typer.Option("--registry", help="Another registry file of the same schema "
                                                     "(default: the one shipped with Assay).")]
VERDICT_STYLE = {"reproduced": "green", "not reproduced": "red", "protocol differs": "yellow"}


def register(app: typer.Typer) -> None:
    """Add ``reproduce`` and ``lint-rate`` to the app."""
    app.command("reproduce")(reproduce_command)
    app.command("lint-rate")(lint_rate_command)


def reproduce_command(
    entry: Annotated[str | None, typer.Argument(help="Registry entry, e.g. openpi/pi05_libero/libero_spatial "
                                                   "(omit with --list).")] = None,
    campaign: Annotated[str | None, typer.Option("--campaign", help="The campaign that ran the checkpoint.")] = None,
    policy: Annotated[str | None, typer.Option("--policy", help="The campaign's policy that is the checkpoint "
                                                  "(default: its only one).")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    registry: RegistryOpt = None,
    alpha: Annotated[float, typer.Option("--alpha", help="Level of the exact test of measured vs published.")] = 0.05,
    list_entries: Annotated[bool, typer.Option("--list", help="List the registry's entries and protocols.")] = False,
    allow_partial: AllowPartialOpt = False,
    record: Annotated[Path | None, typer.Option("--record", help="Record the run in the store's 'reproduced' column, "
                                                "with this bundle of the campaign as its evidence (assay bundle C -o "
                                                "DIR; it must verify and be reportable).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Check a campaign against a published evaluation: its protocol field by field, its rate by an exact test
    against the published one; says "reproduced", "not reproduced" or "protocol differs".

    Scored in the nominal variant; a campaign with a cell of the policy that has no episode yet is refused unless
    --allow-partial."""
    from assay.run.adaptive import load_state

    with user_errors():
        known = load_registry(registry)
        if list_entries:
            _list(known, json_out, Path(store))
            return
        if entry is None or campaign is None:
            raise AssayError("give a registry ENTRY and --campaign NAME (or --list to see the entries)")
        with open_store(store, catalog) as opened:
            found = {c.name: c for c in opened.catalog.campaigns()}
            if campaign not in found:
                raise AssayError(f"no campaign {campaign!r} in {opened.root}; known: {', '.join(found) or 'none'}")
            records = opened.catalog.episodes(campaign=campaign)
            adaptive = load_state(opened, campaign)
        result = reproduce(known, entry, found[campaign].spec, records, policy, alpha, allow_partial, adaptive)
        recorded = _record(known, result, campaign, record, Path(store)) if record is not None else None
        if json_out:
            render.print_json({"campaign": campaign, "registry": known.source, **result.to_dict(),
                               "recorded": recorded})
            return
        _print(result, campaign)
        if recorded is not None:
            render.console.print(f"recorded in {Path(store) / 'reproduced.json'}: {entry} reproduced here by "
                                 f"{recorded['policy']} (bundle {recorded['bundle_sha256'][:12]}…)", highlight=False)


def _record(known: Registry, result: Reproduction, campaign: str, bundle: Path, store: Path) -> dict[str, Any]:
    from assay.metrics.bundle import verify_bundle
    from assay.metrics.reproduced import reproduced_record, save_reproduced
    from assay.metrics.stamp import store_manifests

    found = reproduced_record(known, result, verify_bundle(bundle), campaign, store_manifests(store)[0])
    save_reproduced(store, result.entry, found)
    return found


def _print(result: Reproduction, campaign: str) -> None:
    table = Table(title=f"{result.entry} ({result.checkpoint}) against campaign {campaign}, policy {result.policy} "
                        f"({result.scope.get('label', 'nominal only')})", title_justify="left")
    for column in ("field", "published", "campaign", ""):
        table.add_column(column)
    for f in result.fields:
        table.add_row(f.name, str(f.published), str(f.campaign), "[green]same[/]" if f.matches else "[red]differs[/]")
    if result.fields:
        render.console.print(table)
    n = f" of {result.published_n}" if result.published_n is not None else " (n unknown)"
    render.console.print(
        f"measured {result.successes}/{result.trials} = {result.measured_rate:.1%} (mid-p 95% "
        f"[{result.measured_low:.1%}, {result.measured_high:.1%}]"
        + (f"; {result.errors} error episodes left out" if result.errors else "") + f"), published "
        f"{result.published_text}{n} ({'inside' if result.published_in_interval else 'outside'} the interval); "
        f"{result.test}: p = {result.p_value:.3g}", highlight=False, soft_wrap=True)
    style = VERDICT_STYLE[result.verdict]
    render.console.print(f"[bold {style}]{result.verdict}[/]: {'; '.join(result.reasons)}", highlight=False,
                         soft_wrap=True)
    for note in result.notes:
        style = "yellow" if note.startswith("the campaign is incomplete") else "dim"
        render.console.print(f"[{style}]{note}[/]", highlight=False, soft_wrap=True)


def _list(known: Registry, json_out: bool, store: Path) -> None:
    from assay.metrics.reproduced import latest, load_reproduced

    here = load_reproduced(store)
    results = {name: {**r, "reproduced": latest(here, name) or r.get("reproduced")}
               for name, r in known.results.items()}
    if json_out:
        render.print_json({"registry": known.source, "store": str(store), "protocols": known.protocols,
                           "results": results})
        return
    table = Table(title=f"published results in {known.source}; reproduced: runs recorded in {store}",
                  title_justify="left")
    for column in ("entry", "checkpoint", "protocol", "rate", "n", "source", "reproduced"):
        table.add_column(column, justify="right" if column in ("rate", "n") else "left")
    for name, r in sorted(results.items()):
        done = r.get("reproduced")
        shown = (f"{done['rate']:.1%} [{done['low']:.1%}, {done['high']:.1%}] of {done['trials']}, {done['verdict']} "
                 f"({done['policy']}, bundle {str(done['bundle_sha256'])[:8]}…)" if done else "-")
        table.add_row(name, str(r["checkpoint"]), str(r.get("protocol") or "-"), str(r["rate"]),
                      "?" if r.get("n") is None else str(r["n"]), str(r.get("source", "")), shown)
    render.console.print(table)


def lint_rate_command(
    rate: Annotated[str, typer.Argument(help="The rate as reported: 43.9%, 43.9 (percent) or 0.439.")],
    trials: Annotated[int, typer.Option("--trials", "-n", help="The number of trials it was reported from.")],
    json_out: JsonOpt = False,
) -> None:
    """Whether a reported success rate can come from that many trials (rate × n near a whole number); exit 1 if not."""
    with user_errors():
        result = lint_rate(rate, trials)
    if json_out:
        render.print_json(result.to_dict())
    else:
        render.console.print(result.message, highlight=False, soft_wrap=True)
    if not result.possible:
        raise typer.Exit(1)
