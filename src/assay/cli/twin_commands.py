"""``assay twin show|run|sysid|attribute|stability``: the layered digital twin."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from assay.cli import render
from assay.cli.common import (
    DEFAULT_STORE,
    CatalogOpt,
    JsonOpt,
    StoreOpt,
    campaign_file,
    open_store,
    split_list,
    user_errors,
)
from assay.cli.stats_render import signoff_table
from assay.errors import TwinError
from assay.metrics import campaign_signoff
from assay.metrics.results_csv import read_results_csv
from assay.sim import default_registry
from assay.spec import CameraSpec
from assay.twin import (
    DEFAULT_MAX_EVALUATIONS,
    DEFAULT_RENDERING,
    DEFAULT_TOLERANCE,
    DEFAULT_TRACE_TOLERANCE,
    Layer,
    Trajectory,
    Twin,
    asset_stability,
    attribute,
    calibrate_rendering,
    calibrated_twin,
    content_campaign,
    identify,
    load_twin,
    nominal_twin,
    rendering_twin,
    run_twins,
    save_twin,
    settings_from_campaign,
    swap_twins,
    trajectories_from_store,
    write_results_csv,
)
from assay.twin.attribution import Attribution, with_flags
from assay.twin.trajectory_gap import TrajectoryAttribution, trajectory_attribution

twin_app = typer.Typer(help="Layered digital twin: calibrate, attribute the sim-to-real gap, check asset swaps.",
                       no_args_is_help=True)

TwinArg = Annotated[Path, typer.Option("--twin", help="Twin YAML (name, task, control, dynamics, rendering).")]
CampaignArg = Annotated[Path, typer.Argument(help="Campaign YAML: one task, policies, episodes, seed, horizon, "
                                                  "cameras.")]


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _span(interval: tuple[float, float] | None, digits: int = 2) -> str:
    return "" if interval is None else f"[{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"


def _layers_table(document: dict[str, Any], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("layer", "factor", "value"):
        table.add_column(column)
    for layer in Layer:
        values = document[layer.value] or {"(nominal)": ""}
        for factor, value in values.items():
            table.add_row(layer.value, factor, str(value))
    return table


@twin_app.command("show")
def show(path: Annotated[Path, typer.Argument(help="Twin YAML.")], json_out: JsonOpt = False) -> None:
    """A twin's layers and its version (the variant key its episodes record)."""
    with user_errors():
        document = load_twin(path).describe()
        if json_out:
            render.print_json(document)
            return
        render.console.print(_layers_table(document, f"twin {document['name']} of {document['task']}, "
                                                      f"version {document['version']}"))


@twin_app.command("run")
def run(campaign: CampaignArg, twin: TwinArg,
        results_out: Annotated[Path | None, typer.Option(
            "--results-out", help="Write task,policy,successes,trials here.")] = None,
        store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False) -> None:
    """Run the campaign's policies in one twin (e.g. a reality proxy producing 'real' results)."""
    with user_errors():
        spec, chosen = campaign_file(campaign), load_twin(twin)
        settings = settings_from_campaign(spec, chosen.task)
        with open_store(store, catalog, create=True) as opened:
            entries = run_twins(spec.name, [chosen], settings, opened)[chosen.version]
        if results_out is not None:
            write_results_csv(entries, results_out)
        document = {"twin": chosen.describe(), "campaign": spec.name,
                    "results": [{"policy": e.policy, "successes": e.successes, "trials": e.trials} for e in entries],
                    "results_csv": str(results_out) if results_out else None}
        if json_out:
            render.print_json(document)
            return
        table = Table(title=f"twin {chosen.name} ({chosen.version}) on {chosen.task}", title_justify="left")
        for column in ("policy", "successes", "trials", "rate"):
            table.add_column(column)
        for e in entries:
            table.add_row(e.policy, str(e.successes), str(e.trials), _fmt(e.rate))
        render.console.print(table)


@twin_app.command("sysid")
def sysid(
    twin: TwinArg,
    real_campaign: Annotated[str, typer.Option(
        "--real-campaign", help="Campaign whose recorded episodes are the real trajectories.")],
    real_store: Annotated[Path | None, typer.Option(
        "--real-store", help="Store holding the real episodes (default: --store).")] = None,
    parameters: Annotated[str | None, typer.Option(help="Comma-separated factors to fit (default: every control and "
                                                     "dynamics factor that applies to the task).")] = None,
    policy: Annotated[str | None, typer.Option(help="Only this policy's real episodes.")] = None,
    max_trajectories: Annotated[int, typer.Option(
        min=1, help="Fit on the first N real episodes of each policy "
                    "(attribute --fitted-on N leaves the same ones out).")] = 4,
    max_evaluations: Annotated[int, typer.Option(min=1, help="The search's maximum (twin replays): it runs until the "
                                                            "fit is within --tolerance or this is spent.")]
    = DEFAULT_MAX_EVALUATIONS,
    restarts: Annotated[int, typer.Option(min=0, help="Further starts of the refinement, from the next-best "
                                                     "single-factor fits of the screening.")] = 2,
    tolerance: Annotated[float, typer.Option(help="Measurement accuracy, metres RMS: the search's target, and the "
                                                  "intervals hold the values that replay within it of the fit.")]
    = DEFAULT_TOLERANCE,
    out: Annotated[Path | None, typer.Option(help="Write the calibrated twin YAML here.")] = None,
    store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False,
) -> None:
    """Fit control and dynamics factors (integer and noise factors too) by replaying real actions open loop."""
    with user_errors():
        start = load_twin(twin)
        with open_store(real_store or store, catalog if real_store is None else None) as opened:
            trajectories = trajectories_from_store(opened, real_campaign, policy, max_trajectories)
        task = default_registry().get(start.task)
        chosen = None if parameters is None else split_list(parameters)
        result = identify(task, trajectories, start, chosen, max_evaluations, restarts=restarts,
                          tolerance=tolerance)
        calibrated = calibrated_twin(result, start, name=f"{start.name}-calibrated")
        if out is not None:
            save_twin(calibrated, out)
        document = {**result.to_dict(), "calibrated": calibrated.describe(), "out": str(out) if out else None}
        if json_out:
            render.print_json(document)
            return
        status = {"converged": "converged", "stalled": "NOT converged: stalled at a local optimum",
                  "budget": "NOT converged: out of replays"}.get(result.status, result.status)
        table = Table(title=f"system identification on {result.trajectories} real trajectories "
                            f"({result.evaluations} replays of at most {result.max_evaluations}, {result.restarts} "
                            f"restarts; {status})", title_justify="left")
        interval = f"interval (within {result.tolerance:g} m of the fit; conditional on convergence)"
        for column in ("parameter", "start", "fitted", interval if result.converged else f"{interval}: not converged"):
            table.add_column(column)
        for name in result.parameters:
            low, high = result.intervals[name]
            table.add_row(name, f"{result.start[name]:.4g}", f"{result.fitted[name]:.4g}", f"[{low:.4g}, {high:.4g}]")
        render.console.print(table)
        render.console.print(f"RMS state discrepancy {result.residual_before:.4g} m -> {result.residual_after:.4g} m; "
                             f"correlation {_fmt(result.correlation_before, 4)} -> {_fmt(result.correlation_after, 4)}"
                             + (f"; calibrated twin written to {out}" if out else ""))
        if result.screening:
            render.console.print("screening (each factor alone from the start): " + ", ".join(
                f"{name} {fit['value']:.4g} ({fit['rms']:.3g} m)" for name, fit in result.screening.items())
                + f"; found: {', '.join(result.found) or 'none'}", highlight=False, soft_wrap=True)
        for warning in result.warnings:
            search_ended = warning.startswith(("stalled", "the search spent"))
            render.console.print(f"[yellow]{'warning' if search_ended else 'identifiability'}:[/] {warning}",
                                 highlight=False, soft_wrap=True)


@twin_app.command("calibrate-rendering")
def calibrate_rendering_command(
    campaign: Annotated[Path, typer.Argument(help="Campaign YAML whose cameras the camera policy saw.")],
    twin: TwinArg,
    real_campaign: Annotated[str, typer.Option("--real-campaign", help="Campaign whose recorded episodes are real.")],
    policy: Annotated[str, typer.Option(help="The camera policy whose recorded episodes (actions, trace) are used.")],
    real_store: Annotated[Path | None, typer.Option(
        "--real-store", help="Store holding the real episodes (default: --store).")] = None,
    parameters: Annotated[str, typer.Option(
        help="Comma-separated rendering factors to fit.")] = ",".join(DEFAULT_RENDERING),
    max_trajectories: Annotated[int, typer.Option(min=1, help="Fit on the first N real episodes of the policy.")] = 2,
    tolerance: Annotated[float, typer.Option(help="Mismatch within which a value counts as consistent.")]
    = DEFAULT_TRACE_TOLERANCE,
    out: Annotated[Path | None, typer.Option(help="Write the twin with the fitted rendering layer here.")] = None,
    store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False,
) -> None:
    """Fit lighting and camera factors: replay a camera policy's episodes, match its actions and detections."""
    with user_errors():
        spec, start = campaign_file(campaign), load_twin(twin)
        with open_store(real_store or store, catalog if real_store is None else None) as opened:
            trajectories = trajectories_from_store(opened, real_campaign, policy, max_trajectories)
        task = default_registry().get(start.task)
        result = calibrate_rendering(task, spec.cameras or (), trajectories, start, split_list(parameters),
                                     tolerance=tolerance)
        fitted = rendering_twin(result, start, name=start.name if start.rendering == {} else f"{start.name}-rendering")
        if out is not None:
            save_twin(fitted, out)
        document = {**result.to_dict(), "calibrated": fitted.describe(), "out": str(out) if out else None}
        if json_out:
            render.print_json(document)
            return
        table = Table(title=f"rendering calibration from {result.trajectories} episodes of {result.policy} "
                            f"({result.evaluations} replays)", title_justify="left")
        for column in ("parameter", "start", "fitted", "interval"):
            table.add_column(column)
        for name in result.parameters:
            low, high = result.intervals[name]
            table.add_row(name, f"{result.start[name]:.4g}", f"{result.fitted[name]:.4g}", f"[{low:.4g}, {high:.4g}]")
        render.console.print(table)
        render.console.print(f"action RMS {result.action_rms_before:.4g} -> {result.action_rms_after:.4g}; detections "
                             f"disagreeing {result.disagreement_before:.1%} -> {result.disagreement_after:.1%}"
                             + (f"; twin written to {out}" if out else ""))
        for warning in result.warnings:
            render.console.print(f"[yellow]identifiability:[/] {warning}")


@twin_app.command("attribute")
def attribute_command(
    campaign: CampaignArg,
    calibrated: Annotated[Path, typer.Option("--calibrated", help="Calibrated twin YAML (e.g. from twin sysid).")],
    real: Annotated[Path, typer.Option("--real", help="Real results CSV: task,policy,successes,trials.")],
    nominal: Annotated[Path | None, typer.Option(
        "--nominal", help="Nominal twin YAML (default: the untouched simulator).")] = None,
    real_campaign: Annotated[str | None, typer.Option(
        "--real-campaign", help="Also attribute the gap in the real recorded episodes of this campaign: their states "
                                "replayed open loop, and --trace-policy's trace.")] = None,
    real_store: Annotated[Path | None, typer.Option(
        "--real-store", help="Store holding the real episodes (default: --store).")] = None,
    trace_policy: Annotated[str | None, typer.Option("--trace-policy", help="The camera policy whose real episodes' "
                                                     "actions and detections are replayed.")] = None,
    fitted_on: Annotated[int, typer.Option(min=0, help="The first N real episodes of each policy calibrated the twin "
                                                       "(sysid's --max-trajectories N): leave them out.")] = 0,
    store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False,
) -> None:
    """Swap in one calibrated layer at a time (and leave one out): which layer closes the sim-to-real gap."""
    with user_errors():
        spec, fitted = campaign_file(campaign), load_twin(calibrated)
        base = load_twin(nominal) if nominal else nominal_twin(fitted.task)
        real_entries = read_results_csv(real)
        settings = settings_from_campaign(spec, fitted.task)
        measures = {}
        if real_campaign is not None:
            measures = _trajectory_measures(base, fitted, real_store or store, catalog if real_store is None else None,
                                            real_campaign, trace_policy, fitted_on, spec.cameras or ())
        with open_store(store, catalog, create=True) as opened:
            result = attribute(base, fitted, real_entries, settings, opened, campaign=f"{spec.name}-attribution")
        named_by = {"success": result.named, **{m: a.named for m, a in measures.items()}}
        result = with_flags(result, named_by)
        if json_out:
            render.print_json({**result.to_dict(), "trajectories": {m: a.to_dict() for m, a in measures.items()},
                               "named_by": named_by})
            return
        _attribution_tables(result)
        for measure in measures.values():
            _trajectory_table(measure)
        for line in attribution_verdict(result, named_by, settings.episodes):
            render.console.print(line, highlight=False, soft_wrap=True)


def _attribution_tables(result: Attribution) -> None:
    policies = list(result.policies)
    table = Table(title=f"gap attribution on {result.task} (real vs each configuration; sim campaign "
                        f"{result.campaign})", title_justify="left")
    for column in ("configuration", *policies, "gap [95% CI]", "Pearson r", "MMRV"):
        table.add_column(column)
    table.add_row("real", *[_fmt(result.real[p]) for p in policies], "", "", "")
    for score in result.configs:
        table.add_row(score.label, *[_fmt(score.rates[p]) for p in policies],
                      f"{score.gap:.3f} {_span(score.gap_interval, 3)}", _fmt(score.pearson), _fmt(score.mmrv, 3))
    render.console.print(table)
    layers = Table(title=f"layer shares of the gap closed by calibration ({result.resamples} bootstrap resamples)",
                   title_justify="left")
    for column in ("layer", "calibrated differs", "closed by swap-in", "reopened by leave-out",
                   "closure [95% CI]", "share [95% CI]", "beyond noise"):
        layers.add_column(column)
    for share in result.layers:
        layers.add_row(share.layer, "yes" if share.changed else "no", _fmt(share.closed_by_swap_in, 3),
                       _fmt(share.reopened_by_leave_out, 3),
                       f"{share.closure:.3f} {_span(share.closure_interval, 3)}",
                       f"{_fmt(share.share)} {_span(share.share_interval)}",
                       ("yes" if share.named else "no") + (" (flagged)" if share.layer in result.flagged else ""))
    render.console.print(layers)


def attribution_verdict(result: Attribution, named_by: dict[str, tuple[str, ...]], episodes: int) -> list[str]:
    """The lines under ``twin attribute``'s tables: the gap closed, the named layers (by what; a flagged one
    labelled so and never the attributed layer), each flag's reason and the episodes the gap needs."""
    named = [layer.value for layer in Layer if any(layer.value in v for v in named_by.values())]
    labels = [f"{layer} (by " + ", ".join(m if m == "success" else f"{m}s" for m, v in named_by.items() if layer in v)
              + ("; flagged" if layer in result.flagged else "") + ")" for layer in named]
    lines = [f"total gap closed {result.total_gap_closed:.3f}; left unexplained {_fmt(result.unexplained)} "
             f"{_span(result.unexplained_interval)} of the nominal gap",
             f"named layers: [bold]{', '.join(labels) or 'none'}[/]; attributed layer: [bold]"
             + (result.attributed or ("none (every named layer is flagged)" if result.flagged else
                                      "none (no layer closes the gap beyond noise)")) + "[/]"]
    lines += [f"[yellow]flagged, not a clean hit:[/] {layer}: {why}" for layer, why in result.flagged.items()]
    if result.episodes_needed is not None:
        lines.append(f"episodes per policy and configuration to detect the nominal gap at power 0.8: "
                     f"{result.episodes_needed} ({result.budget_command}); this run has {episodes}")
    return lines


def _trajectory_measures(base: Twin, fitted: Twin, store: Path, catalog: str | None, campaign: str,
                         trace_policy: str | None, fitted_on: int, cameras: tuple[CameraSpec, ...]
                         ) -> dict[str, TrajectoryAttribution]:
    task = default_registry().get(fitted.task)
    with open_store(store, catalog) as opened:
        episodes = trajectories_from_store(opened, campaign)
    by_policy: dict[str, list[Trajectory]] = {}
    for episode in episodes:
        by_policy.setdefault(episode.policy, []).append(episode)
    held = [e for group in by_policy.values() for e in group[fitted_on:]]
    out = {"state": trajectory_attribution(task, base, fitted, held, "state", held_out=fitted_on > 0)}
    if trace_policy is not None:
        if trace_policy not in by_policy:
            raise TwinError(f"--trace-policy {trace_policy!r} has no episodes in {campaign!r}; "
                            f"valid: {', '.join(sorted(by_policy))}")
        out["trace"] = trajectory_attribution(task, base, fitted, by_policy[trace_policy][fitted_on:], "trace",
                                              cameras, held_out=fitted_on > 0)
    return out


def _trajectory_table(measure: TrajectoryAttribution) -> None:
    unit = "m RMS" if measure.measure == "state" else "action RMS + detections disagreeing"
    table = Table(title=f"{measure.measure} gap in {measure.episodes} real episodes "
                        f"({'held out from the calibration' if measure.held_out else 'in-sample'}; {unit})",
                  title_justify="left")
    for column in ("layer", "calibrated differs", "closure [95% CI]", "share",
                   f"beyond tolerance {measure.tolerance:g}"):
        table.add_column(column)
    for layer in measure.layers:
        table.add_row(layer.layer, "yes" if layer.changed else "no",
                      f"{layer.closure:.4g} {_span(layer.closure_interval, 4)}", _fmt(layer.share),
                      "yes" if layer.named else "no")
    render.console.print(table)
    render.console.print(f"{measure.measure} gap nominal {measure.gaps['nominal']:.4g} -> calibrated "
                         f"{measure.gaps['calibrated']:.4g} (left unexplained {_fmt(measure.unexplained)}); "
                         f"named by the {measure.measure}s: [bold]{', '.join(measure.named) or 'none'}[/]")


@twin_app.command("stability")
def stability_command(
    campaign: Annotated[Path, typer.Argument(help="Campaign YAML whose non-nominal variants are the asset swaps.")],
    twin: Annotated[Path | None, typer.Option(
        "--twin", help="Base twin YAML (default: the untouched simulator).")] = None,
    resamples: Annotated[int, typer.Option(min=100, help="Bootstrap resamples.")] = 500,
    store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False,
) -> None:
    """Run the policies under K asset swaps of the twin; Kendall τ and MMRV of each leaderboard vs the base."""
    with user_errors():
        spec = campaign_file(campaign)
        if len(spec.tasks) != 1:
            raise TwinError(f"{campaign}: a twin stability campaign has exactly one task; got {len(spec.tasks)}")
        base = load_twin(twin) if twin else nominal_twin(spec.tasks[0])
        settings = settings_from_campaign(spec, base.task)
        swaps = [dict(v) for v in spec.variants if v]
        with open_store(store, catalog, create=True) as opened:
            report = asset_stability(base, swaps, settings, opened, campaign=f"{spec.name}-stability",
                                     n_resamples=resamples)
            # the sign-off gate of each swap's leaderboard (a swap is a variant of the twin)
            ran = content_campaign(f"{spec.name}-stability", [base, *swap_twins(base, swaps)], settings)
            gate = campaign_signoff(opened.catalog.episodes(campaign=ran), opened.root, per_variant=True)
        if json_out:
            render.print_json({**report.to_dict(), "signoff": [g.to_dict() for g in gate]})
            return
        policies = sorted(report.base_rates)
        table = Table(
            title=f"leaderboards under {len(report.swaps)} asset swaps of {report.task}", title_justify="left")
        for column in ("twin", "swap", *policies, "Kendall τ", "MMRV"):
            table.add_column(column)
        table.add_row("base", "", *[_fmt(report.base_rates[p]) for p in policies], "", "")
        for swap in report.swaps:
            label = ", ".join(f"{k}={v}" for k, v in swap.values.items())
            tau = _fmt(swap.kendall) if swap.kendall is not None else (swap.kendall_reason or "n/a")
            table.add_row(swap.name, label, *[_fmt(swap.rates[p]) for p in policies], tau, _fmt(swap.mmrv, 3))
        render.console.print(table)
        render.console.print(f"worst Kendall τ {_fmt(report.min_kendall)}, worst MMRV {_fmt(report.max_mmrv, 3)}")
        render.console.print(signoff_table(gate))


def register(app: typer.Typer) -> None:
    """Add the ``twin`` command group to ``app``."""
    app.add_typer(twin_app, name="twin")
