"""CLI: ``assay ladder``: the learning sanity ladder (a BC must first reproduce its own demonstrations)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, split_list, user_errors
from assay.errors import AssayError


def ladder_command(
    tasks: Annotated[str, typer.Option("--tasks", "-t", help="Comma-separated task ids the scripted expert solves.")],
    demos: Annotated[int, typer.Option("--demos", help="Expert demos per task (LIBERO: initial states 0..N-1).")] = 10,
    heldout: Annotated[int, typer.Option(
        "--heldout", help="Held-out episodes per task (LIBERO: the next initial states); 0 skips rung 2.")] = 10,
    epochs: Annotated[int, typer.Option("--epochs")] = 1000,
    obs: Annotated[str, typer.Option("--obs", help="'state' or 'state+environment'.")] = "state",
    own_min: Annotated[float, typer.Option("--own-min", help="Rung 1's gate: the share of its own demos' "
                                                             "initial states the BC must solve.")] = 0.9,
    heldout_min: Annotated[float | None, typer.Option(
        "--heldout-min", help="Rung 2's gate (default: reported, not gated).")] = None,
    horizon: Annotated[int | None, typer.Option("--horizon", help="Cap the task horizon.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Training seed.")] = 0,
    workers: Annotated[int, typer.Option("--workers")] = 1,
    out: Annotated[Path | None, typer.Option("--out", help="Checkpoint folder (default STORE/ladder).")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The learning sanity ladder: expert demos, a BC trained on them, then rung 1 (its own demos' initial states:
    at least --own-min must succeed, else exit 1) and rung 2 (held-out initial states, with intervals)."""
    from assay.learning.ladder import LadderConfig, run_ladder

    with user_errors():
        if obs not in ("state", "state+environment"):
            raise AssayError(f"--obs {obs!r} is not one of state, state+environment (pixel BC has the zoo's rung)")
        config = LadderConfig(tasks=tuple(split_list(tasks)), demos=demos, heldout=heldout, epochs=epochs,
                              inputs=obs, seed=seed, horizon=horizon, workers=workers, own_min=own_min,
                              heldout_min=heldout_min)
        with open_store(store, catalog, create=True) as opened:
            say = (lambda _: None) if json_out else (lambda line: render.console.print(f"[dim]{line}[/]"))
            result = run_ladder(opened, config, Path(out) if out else opened.root / "ladder", say)
    if json_out:
        render.print_json(result.to_dict())
    else:
        for rung in result.rungs:
            gate = "not gated" if rung.passed is None else \
                f"{'PASS' if rung.passed else 'FAIL'} (needs >= {rung.minimum:.0%})"
            p = rung.pooled
            render.console.print(f"rung {rung.name}: {p.successes}/{p.trials} = {p.rate:.2f} "
                                 f"[{p.low:.2f}, {p.high:.2f}] mid-p 95%, over {rung.scope}: {gate}",
                                 highlight=False)
            for task in rung.per_task:
                render.console.print(f"  {task.policy}: {task.successes}/{task.trials}", highlight=False)
        render.console.print(f"checkpoint {result.checkpoint}; CPU s: {result.seconds}", highlight=False)
    if not result.passed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``ladder`` to ``app``."""
    app.command("ladder")(ladder_command)
