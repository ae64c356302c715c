"""``assay store verify`` (every step file against its catalog row) and ``assay episodes replay``
(re-simulate one episode from its record and compare it step by step)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, user_errors
from assay.cli.lazy import subgroup
from assay.store import EpisodeRecord, Outcome
from assay.store.store import summary_of
from assay.store.validation import seal_problem

if TYPE_CHECKING:
    from assay.sim import Transition
    from assay.spec import TaskSpec

store_app = typer.Typer(no_args_is_help=True, help="Check the store itself.")


def register(app: typer.Typer) -> None:
    """Add ``store verify`` and ``episodes replay`` to the ``assay`` command."""
    app.add_typer(store_app, name="store")
    store_app.command("verify")(store_verify)
    subgroup(app, "episodes", "Inspect recorded episodes.").command("replay")(episodes_replay)


def store_verify(store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False) -> None:
    """Check every episode's step file (in the store's data root) against its catalog row: checksum, schema
    version, key, columns, rows, and the summary sealed in the file (outcome, steps, total return, success
    step); exit 1 when any fails. `assay run` re-runs the failing ones."""
    with user_errors():
        with open_store(store, catalog) as opened:
            records = opened.catalog.episodes()
            with_data = sorted({r.key for r in records if r.data_path is not None})
            episodes = len({r.key for r in records})
            unsealed: set[str] = set()
            problems = opened.damaged(with_data, unsealed)
        document = {"store": str(opened.root), "data_root": str(opened.data_root), "episodes": episodes,
                    "files": len(with_data), "ok": len(with_data) - len(problems), "failed": len(problems),
                    "unsealed": len(unsealed),
                    "problems": [{"key": k, "problem": problems[k]} for k in sorted(problems)]}
    if json_out:
        render.print_json(document)
    else:
        for key in sorted(problems):
            render.console.print(f"  {key[:12]}  {problems[key]}", highlight=False)
        render.console.print(f"{document['files']} step files checked in {document['data_root']} "
                             f"({document['episodes']} episodes): {document['ok']} ok, {document['failed']} failed"
                             + (f"; {len(unsealed)} written before summaries were sealed (their outcome, return and "
                                "success step are not checked)" if unsealed else ""), highlight=False, soft_wrap=True)
    if problems:
        raise typer.Exit(1)


def episodes_replay(
    key: Annotated[str, typer.Argument(help="Episode key or a unique prefix of it.")],
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Re-simulate an episode from its record (seed, variant, recorded actions) and check every step's
    state and reward for exact equality, and the replay's outcome, steps, total return and success step
    against the catalog row; exit 1 at any difference."""
    from assay.cli.failures_commands import _task_of
    from assay.failures import Replayer
    from assay.sim import SafetyFilter
    from assay.spec import Variant

    with user_errors():
        with open_store(store, catalog) as opened:
            record = opened.catalog.episode(key)
            table = opened.steps(record, check_seal=False)  # the seal is compared below, with the replay
            task = _task_of(opened, record)
        sealed = seal_problem(table.schema.metadata or {}, summary_of(record))
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
        summary = summary_differences(record, task, replayed.transitions)
    document = {"key": record.key, "steps": n, "replayed": len(replayed.transitions),
                "identical": first is None and not summary and sealed is None, "first_difference": first,
                "summary_differences": summary, "seal_problem": sealed}
    if json_out:
        render.print_json(document)
    elif document["identical"]:
        render.console.print(f"episode {record.key[:12]}: {n} steps replayed, every state and reward identical, "
                             "and the outcome, return and success step the catalog records", highlight=False)
    else:
        if first is not None:
            render.console.print(f"episode {record.key[:12]}: differs at step {first['step']}: {first['what']}",
                                 highlight=False)
        lines = [f"{d['field']} {d['replayed']!r} in the replay, {d['recorded']!r} in the catalog row" for d in summary]
        for line in lines + ([f"step file: {sealed}"] if sealed is not None else []):
            render.console.print(f"episode {record.key[:12]}: {line}", highlight=False, soft_wrap=True)
    if not document["identical"]:
        raise typer.Exit(1)


def summary_differences(record: EpisodeRecord, task: TaskSpec, transitions: Sequence[Transition]) -> list[dict]:
    """The fields of the record's summary the replay contradicts (outcome, steps, total return, success step).

    An ``error`` episode's outcome came from outside the simulation (a policy fault, a wall-clock limit), so
    only its steps, return and success step are compared.
    """
    from assay.run.rollout import outcome_after

    outcome = None
    for step, transition in enumerate(transitions, start=1):
        outcome = outcome_after(task, transition, step)
        if outcome is not None:
            break
    successes = [i for i, t in enumerate(transitions) if t.success]
    replayed: dict[str, Any] = {
        "steps": len(transitions),
        "outcome": outcome.value if outcome is not None else "unfinished",
        "total_return": float(np.sum([t.reward for t in transitions])) if transitions else 0.0,
        "success_step": successes[0] if successes else None}
    recorded = {"steps": record.steps, "outcome": record.outcome.value, "total_return": record.total_return,
                "success_step": record.success_step}
    fields = ["steps", "total_return", "success_step"] + ([] if record.outcome is Outcome.ERROR else ["outcome"])
    return [{"field": name, "recorded": recorded[name], "replayed": replayed[name]}
            for name in fields if recorded[name] != replayed[name]]


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
