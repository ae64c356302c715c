"""CLI: ``assay noise RECIPE`` (retraining noise of a training recipe) and ``assay compare --recipes A,B``
(two recipes compared with the retraining noise counted); ``assay.learning.noise`` does the work."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, split_list, user_errors
from assay.errors import AssayError

SeedsOpt = Annotated[str, typer.Option("--seeds", help="Training seeds, comma-separated (at least two).")]


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in split_list(text)]
    except ValueError:
        raise AssayError(f"--seeds {text!r} is not a list of integers, e.g. 0,1,2,3") from None
    if len(set(seeds)) < 2 or len(set(seeds)) != len(seeds):
        raise AssayError(f"--seeds {text!r}: give at least two distinct training seeds, e.g. 0,1,2,3")
    return seeds


def _noise_lines(found: Any) -> list[str]:
    rates = ", ".join(f"s{c.seed} {c.successes}/{c.trials}" for c in found.checkpoints)
    retrain = "n/a" if found.retrain_variance is None else f"{found.retrain_variance:.4f}"
    return [f"{found.recipe.name}: {len(found.checkpoints)} checkpoints, mean success {found.mean:.3f} ({rates})",
            f"  variance of the success rate: harness (binomial, per checkpoint) {found.harness_variance:.4f}, "
            f"retrain {retrain}, renderer 0 (state inputs read no frame)"]


def noise_command(
    recipe: Annotated[Path, typer.Argument(help="A recipe YAML (name, tasks, demos, epochs, eval_episodes, ...).")],
    seeds: SeedsOpt = "0,1,2,3",
    workers: Annotated[int, typer.Option("--workers", "-w", min=1)] = 1,
    out: Annotated[Path | None, typer.Option("--out", help="Checkpoint folder (default STORE/recipes).")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Train a recipe once per training seed on the same demos, evaluate every checkpoint on the same episodes, and
    split its success variance into harness (binomial) and retrain parts."""
    from assay.learning import load_recipe, noise

    with user_errors():
        chosen, loaded = _seeds(seeds), load_recipe(recipe)
        with open_store(store, catalog, create=True) as opened:
            say = (lambda _: None) if json_out else (lambda line: render.err_console.print(f"[dim]{line}[/]"))
            found = noise(opened, loaded, chosen, Path(out) if out else opened.root / "recipes", workers, say)
    if json_out:
        render.print_json(found.to_dict())
        return
    for line in _noise_lines(found):
        render.console.print(line, highlight=False, soft_wrap=True)


def compare_recipes_command(recipes: str, seeds: str, alpha: float, workers: int, out: Path | None, store: Path,
                            catalog: str | None, json_out: bool, beside: bool = False) -> None:
    """``assay compare --recipes A.yaml,B.yaml``: B − A with the retraining noise counted (``beside``: policies,
    ``--campaign`` or ``--bundle`` were given too, which is refused)."""
    from assay.learning import compare_recipes, load_recipe

    with user_errors():
        if beside:
            raise AssayError("--recipes compares two training recipes: give no policies, --campaign or --bundle "
                             "with it")
        paths = split_list(recipes)
        if len(paths) != 2:
            raise AssayError(f"--recipes takes two recipe files, A,B; got {len(paths)}")
        a, b = (load_recipe(p) for p in paths)
        chosen = _seeds(seeds)
        with open_store(store, catalog, create=True) as opened:
            say = (lambda _: None) if json_out else (lambda line: render.err_console.print(f"[dim]{line}[/]"))
            found = compare_recipes(opened, a, b, chosen, chosen, Path(out) if out else opened.root / "recipes",
                                    alpha, workers, say)
    if json_out:
        render.print_json(found.to_dict())
        return
    for line in [*_noise_lines(found.a), *_noise_lines(found.b)]:
        render.console.print(line, highlight=False, soft_wrap=True)
    ships = "ships" if found.checkpoint_only_p < alpha else "does not ship"
    render.console.print(
        f"{b.name} − {a.name}: {found.difference:+.3f} over {len(chosen)} checkpoints each, Welch t p = {found.p:.3g}"
        f": {found.verdict} (alpha {alpha:g}, retraining counted). One checkpoint each (exact McNemar on the paired "
        f"episodes, retraining ignored): {found.checkpoint_only_difference:+.3f}, p = {found.checkpoint_only_p:.3g}, "
        f"{ships}.", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``noise`` to the ``assay`` command (``compare --recipes`` is in ``stats_commands``)."""
    app.command("noise")(noise_command)
