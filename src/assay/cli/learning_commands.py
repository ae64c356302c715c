"""CLI: ``assay train-bc``, ``assay flywheel``, ``assay export lerobot``, ``assay olcl`` (open- vs closed-loop),
``assay leakage`` (which evaluation episodes a checkpoint was trained on)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, split_list, user_errors
from assay.cli.stats_render import signoff_table
from assay.errors import AssayError, unknown_name
from assay.metrics import GateCell, Signoff, load_calibration, load_thresholds, signoff

if TYPE_CHECKING:
    from assay.learning.bc import TrainResult
    from assay.learning.pixel_bc import PixelTrainResult
    from assay.learning.runs import Score

DataOpt = Annotated[str, typer.Option("--data", help="Data query, e.g. 'campaign=demos,task=metaworld/reach@1' "
                                      "(keys: campaign, task, policy, outcome, demos; '|' for alternatives; "
                                      "outcome defaults to success: outcome=any selects every episode).")]


def train_bc_command(data: DataOpt, out: Annotated[Path, typer.Option("--out", help="Checkpoint file to write.")],
                     store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None,
                     seed: Annotated[int, typer.Option("--seed", help="Training seed (same seed, same weights).")] = 0,
                     epochs: Annotated[int, typer.Option("--epochs")] = 100,
                     hidden: Annotated[str, typer.Option(
                         "--hidden", help="Hidden layer widths, comma separated.")] = "256,256",
                     batch_size: Annotated[int | None, typer.Option(
                         "--batch-size", help="Default 256 (state), 64 (image+proprio).")] = None,
                     lr: Annotated[float | None, typer.Option("--lr", help="Default 1e-3.")] = None,
                     obs: Annotated[str, typer.Option(
                         "--obs", help="'state' (MLP on the recorded state), 'state+environment' (and the recorded "
                                       "environment_state: LIBERO's goal positions) or 'image+proprio' "
                                       "(CNN on recorded camera frames + hand/gripper only).")] = "state",
                     camera: Annotated[str, typer.Option(
                         "--camera", help="Camera whose recorded frames are used (image+proprio).")] = "front",
                     image_size: Annotated[int, typer.Option(
                         "--image-size", help="Network input size in px (image+proprio).")] = 64,
                     augment: Annotated[str, typer.Option(
                         "--augment", help="'none' or 'shift' (random shifts; image+proprio).")] = "none",
                     chunk: Annotated[int, typer.Option(
                         "--chunk", help="Actions predicted per frame (image+proprio): the runner executes the "
                                         "chunk before asking again, so a camera is drawn once per chunk.")] = 1,
                     conditioning: Annotated[str, typer.Option(
                         "--conditioning", help="task (a one-hot) | instruction "
                                                "(MiniLM embedding of each episode's instruction)")] = "task",
                     json_out: JsonOpt = False) -> None:
    """Train a behaviour-cloning policy on the store's data; run it as policy 'bc:OUT' (or 'pixel-bc:OUT')."""
    from assay.learning import TrainConfig, load_demos, train_bc

    with user_errors():
        try:
            widths = tuple(int(w) for w in split_list(hidden))
        except ValueError:
            raise AssayError(f"--hidden {hidden!r} must be comma-separated integers, e.g. 256,256") from None
        if obs not in ("state", "state+environment", "image+proprio"):
            raise AssayError(f"--obs {obs!r} is not one of state, state+environment, image+proprio")
        if chunk != 1 and obs != "image+proprio":
            raise AssayError(f"--chunk {chunk} applies to --obs image+proprio only (a state policy draws no frame)")
        with open_store(store, catalog) as opened:
            demos = load_demos(opened, data)
            result: TrainResult | PixelTrainResult
            if obs != "image+proprio":
                result = train_bc(demos,
                                  TrainConfig(seed=seed, epochs=epochs, hidden=widths, batch_size=batch_size or 256,
                                              lr=lr or 1e-3, conditioning=conditioning, inputs=obs), out)
            else:
                from assay.learning.pixel_bc import PixelTrainConfig, train_pixel_bc

                config = PixelTrainConfig(seed=seed, epochs=epochs, camera=camera, image_size=image_size, hidden=widths,
                                          batch_size=batch_size or 64, lr=lr or 1e-3, augment=augment,
                                          conditioning=conditioning, chunk=chunk)
                result = train_pixel_bc(opened, demos, config, out)
    prefix = "pixel-bc" if obs == "image+proprio" else "bc"
    if json_out:
        render.print_json(result.to_dict())
    else:
        render.console.print(f"trained on {result.demos} demos ({result.frames} frames, tasks "
                             f"{', '.join(result.tasks)}); final loss {result.final_loss:.5f}; wrote {result.path} "
                             f"(version {result.version}); run it as policy {prefix}:{result.path}")


def flywheel_command(task: Annotated[str | None, typer.Option("--task", "-t", help="The legacy recovery-demo "
                                                           "experiment on one task (or give --design).")] = None,
                     design: Annotated[Path | None, typer.Option(
                         "--design", help="A flywheel design file (YAML: "
                                          "slice, arms' budget, replicates; examples/flywheel/)")] = None,
                     base: Annotated[int, typer.Option("--base", help="Expert demos for the base policy.")] = 20,
                     extra: Annotated[int, typer.Option(
                         "--extra", help="Recovery demos added (and fresh demos for the control).")] = 10,
                     probe: Annotated[int, typer.Option(
                         "--probe", help="Episodes of the base policy mined for failures.")] = 20,
                     eval_episodes: Annotated[int, typer.Option(
                         "--eval", help="Held-out evaluation episodes per policy.")] = 50,
                     seeds: Annotated[str, typer.Option("--seeds", help="Training seeds, comma separated.")] = "0",
                     epochs: Annotated[int, typer.Option("--epochs")] = 100,
                     horizon: Annotated[int | None, typer.Option("--horizon", help="Cap the task horizon.")] = None,
                     workers: Annotated[int, typer.Option("--workers")] = 1,
                     out: Annotated[Path | None, typer.Option(
                         "--out", help="Checkpoint folder (default STORE/learning/flywheel).")] = None,
                     store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None,
                     json_out: JsonOpt = False) -> None:
    """The flywheel: --design runs a designed experiment (base on a slice; random, targeted, recovery, ponr and oracle
    arms at an equal budget; replicates); --task runs base vs recovery demos vs fresh demos on one task."""
    from assay.learning import FlywheelConfig, run_flywheel
    from assay.learning.flywheel import pooled

    if design is not None:
        if task is not None:
            with user_errors():
                raise AssayError("give --design or --task, not both (the design file names its task)")
        _flywheel_design(design, store, catalog, workers, json_out)
        return
    with user_errors():
        if task is None:
            raise AssayError("give --design FILE.yaml (a designed experiment) or --task TASK (the recovery-demo run)")
        try:
            seed_list = tuple(int(s) for s in split_list(seeds))
        except ValueError:
            raise AssayError(f"--seeds {seeds!r} must be comma-separated integers") from None
        config = FlywheelConfig(task=task, base=base, extra=extra, probe=probe, eval_episodes=eval_episodes,
                                seeds=seed_list, epochs=epochs, horizon=horizon, workers=workers)
        with open_store(store, catalog, create=True) as opened:
            folder = out or opened.root / "learning" / f"flywheel-{config.tag()}"
            say = (lambda _: None) if json_out else (lambda line: render.console.print(f"[dim]{line}[/]"))
            results = run_flywheel(opened, config, folder, say)
    if json_out:
        render.print_json({"config": {"task": task, "base": base, "extra": extra, "probe": probe, "eval": eval_episodes,
                                      "seeds": list(seed_list), "epochs": epochs, "horizon": horizon},
                           "results": [r.to_dict() for r in results], "pooled": pooled(results)})
        return
    from rich.table import Table

    table = Table(title=f"flywheel on {task}: success on held-out seeds (mid-p 95%)")
    for column in ("seed", "base", "control", "flywheel", "recovery demos (frames)", "control frames",
                   "gain ratio", "McNemar p (fly vs ctrl)", "contaminated"):
        table.add_column(column)

    def cell(s: Score) -> str:
        return f"{s.successes}/{s.trials} = {s.rate:.2f} [{s.low:.2f}, {s.high:.2f}]"

    for r in results:
        table.add_row(str(r.seed), cell(r.base), cell(r.control), cell(r.flywheel),
                      f"{r.recovery_demos} ({r.recovery_frames})", str(r.control_frames),
                      "n/a (control gained nothing)" if r.gain_ratio is None else f"{r.gain_ratio:.2f}",
                      f"{r.mcnemar_p:.3f}", str(sum(r.contaminated.values())))
    render.console.print(table)
    total = pooled(results)
    render.console.print(f"pooled over {len(results)} training seeds ({total['pairs']} paired evaluations): base "
                         f"{total['base']}, control {total['control']}, flywheel {total['flywheel']}; discordant "
                         f"flywheel-only {total['flywheel_only']} vs control-only {total['control_only']}, McNemar "
                         f"exact p = {total['mcnemar_p']:.3f}", highlight=False, soft_wrap=True)


def _flywheel_design(path: Path, store: Path, catalog: str | None, workers: int, json_out: bool) -> None:
    from assay.learning.flywheel_design import load_design
    from assay.learning.flywheel_run import result_path, run_design

    with user_errors():
        design = load_design(path)
        with open_store(store, catalog, create=True) as opened:
            say = (lambda _: None) if json_out else (lambda line: render.console.print(f"[dim]{line}[/]",
                                                                                       highlight=False))
            document = run_design(opened, design, workers, say)
            written = result_path(opened, design.name)
    if json_out:
        render.print_json(document)
        return
    from rich.table import Table

    from assay.report.flywheel import COMPOSITION_HEADER, composition_rows, summary_lines

    analysis = document["analysis"]
    table = Table(title=f"flywheel {design.name} on {design.task}: success on held-out seeds, pooled over "
                        f"{design.replicates} replicates (mid-p 95%)")
    for column in ("arm", "all", "slice", "uncovered", "vs random (McNemar exact)"):
        table.add_column(column)

    def cell(r: dict[str, Any]) -> str:
        if not r["trials"]:
            return "-"
        return f"{r['successes']}/{r['trials']} = {r['rate']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"

    for arm, rate in analysis["rates"].items():
        versus = analysis["against_random"].get(arm)
        table.add_row(arm, cell(rate), cell(document["by_region"]["slice"][arm]),
                      cell(document["by_region"]["uncovered"][arm]),
                      "" if versus is None else f"{versus['difference']:+.3f} (p = {versus['mcnemar_p']:.3g})")
    render.console.print(table)
    composition = Table(title="each arm's extra data, summed over the replicates")
    for column in COMPOSITION_HEADER:
        composition.add_column(column)
    for row in composition_rows(document):
        composition.add_row(*row)
    render.console.print(composition)
    for line in summary_lines(document):
        render.console.print(line, highlight=False, soft_wrap=True)
    render.console.print(f"result: {written}", highlight=False, soft_wrap=True)


def export_lerobot_command(data: DataOpt, out: Annotated[Path, typer.Option("--out", help="New dataset directory.")],
                           store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None,
                           robot_type: Annotated[str, typer.Option("--robot-type")] = "sawyer",
                           gate: Annotated[bool, typer.Option("--gate/--no-gate", help="Drop unstable, jittery or "
                                                              "incomplete episodes first (the quality gate).")] = True,
                           json_out: JsonOpt = False) -> None:
    """Export the episodes a data query selects as a LeRobotDataset v3.0 (data, metadata, stats, videos).

    Only successful episodes unless the query says otherwise: the query's outcome defaults to
    success; add outcome=any (or failure, timeout) to export the others. The quality gate drops
    unstable, jittery or incomplete ones first and says why (--no-gate to skip it)."""
    from assay.errors import DataQueryError
    from assay.failures.safety import quality_gate
    from assay.learning.data import DataQuery, select_records
    from assay.store.export_lerobot import export_lerobot

    with user_errors():
        query = DataQuery.parse(data)
        if query.demos is not None:
            raise DataQueryError("export takes catalog episodes (campaign=...); recovery demos ('demos=') are not "
                                 "exported")
        with open_store(store, catalog) as opened:
            selected = select_records(opened, query)
            checked = quality_gate(
                {r.key: opened.steps(r) for r in selected if r.data_path is not None} if gate else {})
            dropped = checked.dropped
            summary = export_lerobot(opened, [r for r in selected if r.key not in dropped], out, robot_type)
    if json_out:
        render.print_json({**summary.to_dict(), "dropped": dropped})
    else:
        render.console.print(f"wrote LeRobotDataset v3.0 {summary.path}: {summary.episodes} episodes, {summary.frames} "
                             f"frames, {summary.tasks} tasks, {summary.fps} fps, cameras: "
                             f"{', '.join(summary.cameras) or 'none'}")
        for key, why in sorted(dropped.items()):
            render.console.print(f"  dropped {key[:12]} (quality gate): {why}", highlight=False)


def olcl_signoff(task: str, checkpoints: tuple[str, ...], root: Path) -> list[Signoff]:
    """The sign-off gate of the closed-loop ranking of the checkpoints (nominal episodes of the task)."""
    from assay.sim import default_registry

    cell = GateCell(default_registry().get(task).id, ("nominal",), tuple(sorted(checkpoints)))
    return signoff([cell], load_calibration(root), load_thresholds(root))


def olcl_command(task: Annotated[str, typer.Option("--task", "-t")],
                 sizes: Annotated[str, typer.Option(
                     "--sizes", help="Expert demo counts, comma separated.")] = "2,5,10,20",
                 epochs: Annotated[str, typer.Option("--epochs", help="Training epochs, comma separated.")] = "5,50",
                 heldout: Annotated[int, typer.Option(
                     "--heldout", help="Held-out expert demos for open-loop MSE.")] = 10,
                 eval_episodes: Annotated[int, typer.Option(
                     "--eval", help="Closed-loop episodes per checkpoint.")] = 30,
                 seed: Annotated[int, typer.Option("--seed", help="Training seed.")] = 0,
                 horizon: Annotated[int | None, typer.Option("--horizon")] = None,
                 workers: Annotated[int, typer.Option("--workers")] = 1,
                 store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False) -> None:
    """Open-loop action MSE vs closed-loop success over BC checkpoints of different quality: Kendall tau, MMRV."""
    from assay.learning.olcl import OLCLConfig, run_olcl

    with user_errors():
        try:
            size_list, epoch_list = tuple(int(s) for s in split_list(sizes)), tuple(int(e) for e in split_list(epochs))
        except ValueError:
            raise AssayError("--sizes and --epochs must be comma-separated integers") from None
        config = OLCLConfig(task, size_list, epoch_list, heldout, eval_episodes, seed, horizon, workers)
        with open_store(store, catalog, create=True) as opened:
            say = (lambda _: None) if json_out else (lambda line: render.console.print(f"[dim]{line}[/]"))
            result = run_olcl(opened, config, opened.root / "learning" / f"olcl-{config.tag()}-s{seed}", say)
            gate = olcl_signoff(task, result.checkpoints, opened.root)
    if json_out:
        render.print_json({**result.to_dict(), "signoff": [g.to_dict() for g in gate]})
        return
    from rich.table import Table

    table = Table(title=f"open- vs closed-loop on {task}")
    for column in ("checkpoint", "open-loop MSE", "R2", "closed-loop success (mid-p 95%)"):
        table.add_column(column)
    for row in sorted(result.openloop, key=lambda r: r.mse):
        s = result.closed[row.policy]
        table.add_row(row.policy, f"{row.mse:.5f}", "-" if row.r2 is None else f"{row.r2:.3f}",
                      f"{s['successes']}/{s['trials']} = {s['rate']:.2f} [{s['low']:.2f}, {s['high']:.2f}]")
    render.console.print(table)
    def span(interval: tuple[float, float] | None) -> str:
        return "" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]"

    tau = "undefined" if result.kendall is None else f"{result.kendall:.3f}{span(result.kendall_interval)}"
    mmrv = "undefined" if result.mmrv is None else f"{result.mmrv:.3f}{span(result.mmrv_interval)}"
    boot = f" (95% bootstrap over evaluation seeds, {result.resamples} resamples)" if result.resamples else ""
    render.console.print(f"Kendall tau {tau}; MMRV {mmrv}{boot}; misranked pairs (lower MSE, lower success): "
                         + (", ".join(f"{a}>{b}" for a, b in result.misranked) or "none"))
    render.console.print(signoff_table(gate))


def leakage_command(checkpoint: Annotated[Path, typer.Argument(help="A bc checkpoint (assay train-bc --out).")],
                    campaign: Annotated[str, typer.Option("--campaign", "-c", help="The evaluation campaign.")],
                    store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None,
                    json_out: JsonOpt = False) -> None:
    """Which of the checkpoint's own episodes in a campaign are scenes it was trained on (task, seed and the
    factors it perceives by its contract; not the horizon): their successes say nothing about generalisation."""
    from assay.learning.leakage import leakage

    with user_errors(), open_store(store, catalog) as opened:
        known = [c.name for c in opened.catalog.campaigns()]
        if campaign not in known:
            raise AssayError(unknown_name("campaign", campaign, known, opened.root))
        records = opened.catalog.episodes(campaign=campaign)
        try:
            found = leakage(records, str(checkpoint), opened)
        except AssayError as exc:
            raise AssayError(f"campaign {campaign!r}: {exc}") from None
    if json_out:
        render.print_json({"campaign": campaign, **found.to_dict()})
        return
    render.console.print(found.describe(), highlight=False, soft_wrap=True)
    for cell, n in found.by_cell.items():
        render.console.print(f"  {cell}: {n}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add the learning commands (train-bc, flywheel, olcl, leakage, export) to ``app``."""
    app.command("leakage")(leakage_command)
    app.command("olcl")(olcl_command)
    app.command("train-bc")(train_bc_command)
    app.command("flywheel")(flywheel_command)
    export_app = typer.Typer(help="Export episodes to other formats.", no_args_is_help=True)
    export_app.command("lerobot")(export_lerobot_command)
    app.add_typer(export_app, name="export")
