"""CLI: ``assay zoo build`` (pixel BC checkpoints of graded quality) and ``assay zoo campaign`` (their evaluation)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, split_list, user_errors

# The visual factors of the zoo's robustness profile: one level each, chosen to change what the camera sees.
VISUAL_VARIANTS: tuple[dict[str, object], ...] = (
    {"light.intensity": 0.3},
    {"camera.yaw": 15.0},
    {"table.color": [0.35, 0.55, 0.9]},
    {"distractor.count": 3},
)


def build_command(
    tasks: Annotated[
        str | None,
        typer.Option("--tasks", help="Comma-separated task ids (default: reach, button-press-topdown, drawer-open)."),
    ] = None,
    demos: Annotated[int, typer.Option("--demos", help="Expert camera episodes per task.")] = 20,
    epochs: Annotated[int, typer.Option("--epochs", help="Epochs of the longest-trained member.")] = 30,
    camera_size: Annotated[int, typer.Option("--camera-size", help="Recorded frame size in px.")] = 64,
    horizon: Annotated[int, typer.Option("--horizon")] = 100,
    seed: Annotated[int, typer.Option("--seed", help="Training seed.")] = 0,
    workers: Annotated[int, typer.Option("--workers")] = 1,
    out: Annotated[Path | None, typer.Option("--out", help="Zoo directory (default STORE/zoo/TAG).")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Collect camera demos with the expert and train the zoo's pixel checkpoints; writes STORE/zoo/TAG/zoo.json."""
    from assay.learning.zoo import ZOO_TASKS, ZooConfig, build_zoo

    with user_errors():
        config = ZooConfig(
            tasks=tuple(split_list(tasks)) if tasks else ZOO_TASKS,
            demos=demos,
            epochs=epochs,
            camera_size=camera_size,
            horizon=horizon,
            seed=seed,
            workers=workers,
        )
        with open_store(store, catalog, create=True) as opened:
            say = (lambda _: None) if json_out else (lambda line: render.console.print(f"[dim]{line}[/]"))
            manifest = build_zoo(opened, config, say, out)
            folder = manifest["dir"]
    if json_out:
        render.print_json(manifest)
        return
    render.console.print(
        f"zoo {manifest['tag']}: {len(manifest['members'])} checkpoints in {folder} "
        f"(demos {manifest['collect_s']:.0f} s, whole build {manifest['build_s']:.0f} s); "
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
        )
        out.write_text(yaml.safe_dump(spec, sort_keys=False))
    render.console.print(
        f"wrote {out}: {len(spec['policies'])} policies x {len(spec['tasks'])} tasks x "
        f"{len(variants)} variants x {episodes} episodes; run it with assay run {out}"
    )


def register(app: typer.Typer) -> None:
    """Add the ``zoo`` command group to the app."""
    zoo_app = typer.Typer(help="The policy zoo: pixel BC checkpoints of graded quality.", no_args_is_help=True)
    zoo_app.command("build")(build_command)
    zoo_app.command("campaign")(campaign_command)
    app.add_typer(zoo_app, name="zoo")
