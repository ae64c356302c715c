"""CLI: ``assay zoo build`` (BC checkpoints of graded skill), ``assay zoo campaign`` (their evaluation) and
``assay zoo grade`` (each member's held-out success, the best of each kind gated)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, split_list, user_errors
from assay.errors import AssayError

# The visual factors of the zoo's robustness profile: one level each, chosen to change what the camera sees.
VISUAL_VARIANTS: tuple[dict[str, object], ...] = (
    {"light.intensity": 0.3},
    {"camera.yaw": 15.0},
    {"table.color": [0.35, 0.55, 0.9]},
    {"distractor.count": 3},
)


def build_command(
    preset: Annotated[str, typer.Option(
        "--preset", help="metaworld (the pixel zoo on reach, button-press-topdown, drawer-open) or libero (three "
                         "LIBERO-Object and three LIBERO-Spatial tasks; state and pixel members on 2-20 demos "
                         "per task) or libero-state (the same six tasks, no camera: state-20 and state-50, the latter "
                         "on 30 more demos per task from LIBERO's sampled layouts).")] = "metaworld",
    tasks: Annotated[str | None, typer.Option("--tasks", help="Comma-separated task ids (default: the preset's).")]
    = None,
    demos: Annotated[int | None, typer.Option("--demos", help="Expert episodes per task (default: the preset's).")]
    = None,
    epochs: Annotated[int | None, typer.Option(
        "--epochs", help="Epochs of the longest-trained member without its own (default: the preset's).")] = None,
    camera_size: Annotated[int | None, typer.Option("--camera-size", help="Recorded frame size in px.")] = None,
    horizon: Annotated[int | None, typer.Option("--horizon", help="Cap the task horizon.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Training seed.")] = 0,
    workers: Annotated[int, typer.Option("--workers")] = 1,
    out: Annotated[Path | None, typer.Option("--out", help="Zoo directory (default STORE/zoo/TAG).")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Collect the scripted expert's demos and train the zoo's checkpoints; writes STORE/zoo/TAG/zoo.json."""
    from dataclasses import replace

    from assay.learning.zoo import PRESETS, build_zoo

    with user_errors():
        if preset not in PRESETS:
            raise AssayError(f"--preset {preset!r} is not one of {', '.join(PRESETS)}")
        given: dict[str, Any] = {"tasks": tuple(split_list(tasks)) if tasks else None, "demos": demos,
                                 "epochs": epochs, "camera_size": camera_size, "horizon": horizon}
        config = replace(PRESETS[preset], seed=seed, workers=workers,
                         **{k: v for k, v in given.items() if v is not None})
        with open_store(store, catalog, create=True) as opened:
            say = (lambda _: None) if json_out else (lambda line: render.console.print(f"[dim]{line}[/]"))
            manifest = build_zoo(opened, config, say, out)
            folder = manifest["dir"]
    if json_out:
        render.print_json(manifest)
        return
    render.console.print(
        f"zoo {manifest['tag']}: {len(manifest['members'])} checkpoints in {folder} "
        f"(demos {manifest['collect_cpu_s']:.0f} CPU s, whole build {manifest['build_s']:.0f} s); "
        f"evaluate with: assay zoo campaign {folder} -o zoo.yaml && assay run zoo.yaml --store {store}"
    )


def campaign_command(
    zoo: Annotated[Path, typer.Argument(help="A zoo directory (STORE/zoo/TAG) or its zoo.json.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Campaign YAML to write.")],
    name: Annotated[
        str | None, typer.Option("--name", help="Campaign name (default zoo-TAG-nominal or zoo-TAG-visual).")
    ] = None,
    episodes: Annotated[int, typer.Option("--episodes", help="Episodes per (policy, task, variant).")] = 20,
    visual: Annotated[
        bool,
        typer.Option(
            "--visual", help="Add the visual factors (lighting, camera pose, table colour, distractors) to nominal."
        ),
    ] = False,
    tasks: Annotated[str | None, typer.Option("--tasks", help="A subset of the zoo's tasks.")] = None,
    members: Annotated[str | None, typer.Option("--members", help="A subset of the zoo's checkpoints.")] = None,
    kind: Annotated[str | None, typer.Option(
        "--kind", help="Only the zoo's state or pixel members (a state-only campaign renders no camera).")] = None,
    expert: Annotated[bool, typer.Option(
        "--expert/--no-expert", help="Add the scripted expert (its reference needs no camera: --no-expert leaves it "
                                     "out of a pixel campaign whose initial states a state campaign already runs)."
    )] = True,
) -> None:
    """Write the campaign that evaluates every zoo checkpoint and the state expert on held-out seeds."""
    import yaml

    from assay.learning.zoo import load_manifest, zoo_campaign

    with user_errors():
        manifest = load_manifest(zoo)
        variants = [{}, *VISUAL_VARIANTS] if visual else [{}]
        spec = zoo_campaign(
            manifest,
            name or f"zoo-{manifest['tag']}-{'visual' if visual else 'nominal'}",
            episodes,
            variants,
            split_list(tasks) if tasks else None,
            split_list(members) if members else None,
            kind,
            expert,
        )
        out.write_text(yaml.safe_dump(spec, sort_keys=False))
    render.console.print(
        f"wrote {out}: {len(spec['policies'])} policies x {len(spec['tasks'])} tasks x "
        f"{len(variants)} variants x {episodes} episodes; run it with assay run {out}"
    )


def grade_command(
    zoo: Annotated[Path, typer.Argument(help="A zoo directory (STORE/zoo/TAG) or its zoo.json.")],
    campaign: Annotated[str, typer.Option("--campaign", "-c", help="The evaluation campaign (assay zoo campaign).")],
    minimum: Annotated[list[str] | None, typer.Option(
        "--min", help="KIND=RATE: the best member of that kind must reach RATE on the campaign's held-out episodes "
                      "(e.g. --min state=0.7 --min pixel=0.4); exit 1 if not.")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Each zoo member's held-out success in an evaluation campaign, per task and pooled, with mid-p 95%
    intervals and its scenes in training; gate the best of each kind with --min."""
    from assay.learning.zoo import grade_zoo, load_manifest

    with user_errors():
        manifest = load_manifest(zoo)
        gates: dict[str, float] = {}
        for item in minimum or ():
            kind, sep, rate = item.partition("=")
            try:
                gates[kind] = float(rate)
            except ValueError:
                raise AssayError(f"--min {item!r} is not KIND=RATE (e.g. state=0.7)") from None
            if not sep or kind not in ("state", "pixel") or not 0.0 <= gates[kind] <= 1.0:
                raise AssayError(f"--min {item!r} is not KIND=RATE with KIND state or pixel and RATE in [0, 1]")
        with open_store(store, catalog) as opened:
            known = [c.name for c in opened.catalog.campaigns()]
            if campaign not in known:
                raise AssayError(f"no campaign {campaign!r} in {opened.root}; known: {', '.join(known) or 'none yet'}")
            grades = grade_zoo(manifest, opened.catalog.episodes(campaign=campaign), gates)
    if json_out:
        render.print_json({"campaign": campaign, "grades": [g.to_dict() for g in grades]})
    else:
        for g in grades:
            p = g.pooled
            gate = "" if g.passed is None else f"  {'PASS' if g.passed else 'FAIL'} (best {g.kind}: >= {g.minimum:.0%})"
            render.console.print(f"{g.member} ({g.kind}): {p.successes}/{p.trials} = {p.rate:.2f} "
                                 f"[{p.low:.2f}, {p.high:.2f}] mid-p 95%; training scenes evaluated: {g.leaked}"
                                 f"{gate}", highlight=False)
            for task in g.per_task:
                render.console.print(f"  {task.policy}: {task.successes}/{task.trials}", highlight=False)
    if any(g.passed is False for g in grades):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the ``zoo`` command group to the app."""
    zoo_app = typer.Typer(help="The policy zoo: BC checkpoints of graded skill (Meta-World pixels; LIBERO state "
                               "and pixels).", no_args_is_help=True)
    zoo_app.command("build")(build_command)
    zoo_app.command("campaign")(campaign_command)
    zoo_app.command("grade")(grade_command)
    app.add_typer(zoo_app, name="zoo")
