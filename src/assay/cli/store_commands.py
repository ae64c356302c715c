"""``assay store verify`` (every step file against its catalog row) and ``assay episodes replay``
(re-simulate one episode from its record and compare it step by step)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, user_errors

store_app = typer.Typer(no_args_is_help=True, help="Check the store itself.")


def register(app: typer.Typer, episodes_app: typer.Typer) -> None:
    """Add ``store verify`` and ``episodes replay`` to the ``assay`` command."""
    app.add_typer(store_app, name="store")
    store_app.command("verify")(store_verify)
    episodes_app.command("replay")(episodes_replay)


def store_verify(store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False) -> None:
    """Check every episode's step file against its catalog row (checksum, schema version, key, columns,
    rows); exit 1 when any fails. `assay run` re-runs the failing ones."""
    with user_errors():
        with open_store(store, catalog) as opened:
            records = opened.catalog.episodes()
            with_data = [r.key for r in records if r.data_path is not None]
            problems = opened.damaged(with_data)
        document = {"store": str(opened.root), "episodes": len(records), "files": len(with_data),
                    "ok": len(with_data) - len(problems), "failed": len(problems),
                    "problems": [{"key": k, "problem": problems[k]} for k in sorted(problems)]}
    if json_out:
        render.print_json(document)
    else:
        for key in sorted(problems):
            render.console.print(f"  {key[:12]}  {problems[key]}", highlight=False)
        render.console.print(f"{document['files']} step files checked ({document['episodes']} episodes): "
                             f"{document['ok']} ok, {document['failed']} failed", highlight=False)
    if problems:
        raise typer.Exit(1)


def episodes_replay(
    key: Annotated[str, typer.Argument(help="Episode key or a unique prefix of it.")],
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Re-simulate an episode from its record (seed, variant, recorded actions) and check every step's
    state and reward for exact equality; exit 1 at the first difference."""
    from assay.cli.failures_commands import _task_of
    from assay.failures import Replayer
    from assay.sim import SafetyFilter
    from assay.spec import Variant

    with user_errors():
        with open_store(store, catalog) as opened:
            record = opened.catalog.episode(key)
            table = opened.steps(record)
            task = _task_of(opened, record)
        n = len(table)
        states = table.column("observation.state").combine_chunks().flatten().to_numpy().reshape(n, -1)
        actions = table.column("action").combine_chunks().flatten().to_numpy().reshape(n, -1)
        rewards = table.column("reward").to_numpy()
        replayer = Replayer(task, Variant.model_validate(record.variant))
        if record.provenance.get("run", {}).get("safety"):
            replayer.env = SafetyFilter(replayer.env)  # the recorded actions are the policy's, before the filter
        try:
            replayed = replayer.replay(record.seed, actions)
        finally:
            replayer.close()
        first = _first_difference(states, rewards, replayed)
    document = {"key": record.key, "steps": n, "replayed": len(replayed.transitions), "identical": first is None,
                "first_difference": first}
    if json_out:
        render.print_json(document)
    elif first is None:
        render.console.print(f"episode {record.key[:12]}: {n} steps replayed, every state and reward identical",
                             highlight=False)
    else:
        render.console.print(f"episode {record.key[:12]}: differs at step {first['step']}: {first['what']}",
                             highlight=False)
    if first is not None:
        raise typer.Exit(1)


def _first_difference(states: np.ndarray, rewards: np.ndarray, replayed: object) -> dict | None:
    seen = np.asarray(replayed.states[: len(replayed.transitions)])  # type: ignore[attr-defined]
    got = np.asarray([t.reward for t in replayed.transitions])  # type: ignore[attr-defined]
    for step in range(len(states)):
        if step >= len(seen):
            return {"step": step, "what": f"the replay ended after {len(seen)} steps (terminated)"}
        if not np.array_equal(seen[step], states[step]):
            gap = float(np.max(np.abs(seen[step] - states[step])))
            return {"step": step, "what": f"state differs (max |difference| {gap:.3g})"}
        if got[step] != rewards[step]:
            return {"step": step, "what": f"reward {got[step]!r}, recorded {rewards[step]!r}"}
    return None
