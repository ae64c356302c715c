"""``assay store verify`` (every step file against its catalog row, the kept counts against the rows),
``assay store prune`` (delete old step files and videos, keep the rows) and ``assay episodes replay``
(re-simulate one episode from its record and compare it step by step)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, user_errors
from assay.cli.lazy import subgroup
from assay.store import EpisodeRecord, Outcome, step_matrix
from assay.store.store import summary_of
from assay.store.validation import seal_problem

STORE_HELP = "Check the store itself, and prune old step files and videos."

if TYPE_CHECKING:
    from assay.failures.replay import Rollout
    from assay.sim import Transition
    from assay.spec import TaskSpec
    from assay.store.retention import PrunePlan

store_app = typer.Typer(no_args_is_help=True, help=STORE_HELP)


def register(app: typer.Typer) -> None:
    """Add ``store verify``, ``store prune`` and ``episodes replay`` to the ``assay`` command."""
    app.add_typer(store_app, name="store")
    store_app.command("verify")(store_verify)
    store_app.command("prune")(store_prune)
    subgroup(app, "episodes", "Inspect recorded episodes.").command("replay")(episodes_replay)


def store_verify(store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False,
                 recount: Annotated[bool, typer.Option(
                     "--recount", help="Count every cell's kept counts anew from the rows (after showing the cells "
                     "that differ); refused while any episode fails.")] = False) -> None:
    """Check every episode's step file (in the store's data root) against its catalog row: checksum (a row without
    one fails), schema version, key, columns, rows, the summary sealed in the file (outcome, steps, total return,
    success step; a file without a seal fails in a sealed store), and the summary recomputed from the steps
    themselves; a row without a file unless it is an error before the first step or was pruned; and the per-cell
    counts and paired seed patterns results read against a fresh count of the rows. Exit 1 when any fails. The
    failed episodes are kept: results of a campaign linking one are refused and `assay run` re-runs them;
    --recount counts the cells and patterns anew, only when no episode failed."""
    from assay.store.aggregates import count_differences, pattern_differences
    from assay.store.retention import orphan_packs

    with user_errors():
        with open_store(store, catalog) as opened:
            keys = opened.recorded_keys()
            check = opened.check_files(keys, _registry_lookup())
            problems = check.problems
            opened.record_verdicts(problems)  # results refuse the campaigns of these until they are repaired
            sealed_now = not check.sealed_store and not problems and not check.unsealed and check.files > 0
            if sealed_now:
                opened.require_seals()
            cells, differences = count_differences(opened.catalog)
            paired = pattern_differences(opened.catalog)  # the kept paired seed patterns, against the rows
            orphaned = orphan_packs(opened.catalog, opened.files)
            leases = len(opened.live_leases()) if orphaned else 0
            drifted = bool(differences or paired)
            recounted = bool(recount and drifted and not problems)  # never count a row its steps contradict
            if recounted:
                opened.catalog.rebuild_counts()
        document = {"store": str(opened.root), "data_root": str(opened.data_root), "episodes": len(keys),
                    "files": check.files, "ok": check.files - check.file_problems, "failed": len(problems),
                    "sealed_store": check.sealed_store or sealed_now, "unsealed": len(check.unsealed),
                    "unjudged": len(check.unjudged), "pruned": check.pruned, "without_steps": check.without_steps,
                    "orphan_packs": len(orphaned), "orphan_bytes": sum(b for _, b in orphaned),
                    "live_leases": leases,
                    "problems": [{"key": k, "problem": problems[k]} for k in sorted(problems)],
                    "counts": {"cells": cells, "recounted": recounted,
                               "refused": bool(recount and drifted and problems),
                               "patterns_differ": paired,
                               "differ": [{"campaign": d.campaign, "policy": d.policy, "task": d.task,
                                           "variant": d.variant,
                                           "fields": {k: {"kept": v[0], "counted": v[1]} for k, v in d.fields.items()}}
                                          for d in differences]}}
    if json_out:
        render.print_json(document)
    else:
        _print_verify(document, problems, [d.describe() for d in differences] + [f"(paired) {p}" for p in paired])
    if problems or (drifted and not recounted):
        raise typer.Exit(1)


def _registry_lookup() -> Callable[[str], TaskSpec | None]:
    """A task id -> its spec in the default registry (None where it holds none), built on first use: the horizon and
    success mode of a task no campaign of the store names (an episode of `boundary` or `resample`)."""
    registry: list[Any] = []

    def lookup(task_id: str) -> TaskSpec | None:
        from assay.errors import AssayError
        from assay.sim import default_registry

        if not registry:
            registry.append(default_registry())
        try:
            task: TaskSpec = registry[0].get(task_id)
        except AssayError:
            return None
        return task

    return lookup


def _print_verify(document: dict[str, Any], problems: dict[str, str], differences: list[str]) -> None:
    for key in sorted(problems):
        render.console.print(f"  {key[:12]}  {problems[key]}", highlight=False, soft_wrap=True)
    extras = [f"{document['pruned']} pruned" if document["pruned"] else "",
              f"{document['without_steps']} errors before the first step (no file)"
              if document["without_steps"] else "",
              f"{document['unsealed']} written before summaries were sealed (a legacy store; their summaries are "
              "recomputed from their steps)" if document["unsealed"] else "",
              f"{document['unjudged']} outcomes judged without their task's horizon and success mode (no campaign "
              "or registry names the task)" if document["unjudged"] else "",
              f"{document['orphan_packs']} pack files no row names ({document['orphan_bytes']:,} bytes, never read; "
              "`assay store prune --orphans` deletes them" + (
                  f"; a run holds {document['live_leases']} job leases now, and its packs in flight are counted "
                  "here until their rows are committed)" if document["live_leases"] else ")")
              if document["orphan_packs"] else ""]
    render.console.print(f"{document['files']} step files checked in {document['data_root']} "
                         f"({document['episodes']} episodes): {document['ok']} ok, {document['failed']} failed"
                         + "".join(f"; {extra}" for extra in extras if extra), highlight=False, soft_wrap=True)
    for line in differences:
        render.console.print(f"  counts  {line}", highlight=False, soft_wrap=True)
    counts = document["counts"]
    repair = ("repair the failed episodes first (`assay run CAMPAIGN.yaml` re-runs them), then `assay store verify "
              "--recount`")
    told = ("counted anew from the rows (--recount)" if counts["recounted"] else
            f"not counted anew: {len(problems)} episodes failed, and a recount never counts a row its step data "
            f"contradicts; {repair}" if counts["refused"] else
            repair if problems else "run `assay store verify --recount` to count them anew from the rows") \
        if differences else "equal to a fresh count of the rows"
    paired = f"; paired seed patterns: {len(counts['patterns_differ'])} differ" if counts["patterns_differ"] else ""
    render.console.print(f"cell counts: {counts['cells']} cells, {len(counts['differ'])} differ{paired}; {told}",
                         highlight=False, soft_wrap=True)
    if problems:
        render.console.print(f"{len(problems)} failed episodes: the results of every campaign that links one are "
                             "refused until they are repaired (`assay run CAMPAIGN.yaml` re-runs them; then `assay "
                             "store verify` again)", highlight=False, soft_wrap=True)


def store_prune(
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    campaign: Annotated[list[str] | None, typer.Option(
        "--campaign", "-c", help="Prune this campaign's episodes (repeatable); an episode another campaign also "
        "links is kept.")] = None,
    older_than: Annotated[str | None, typer.Option(
        "--older-than", metavar="AGE", help="Prune episodes recorded longer ago than AGE: 90s, 45m, 12h, 30d, 2w "
        "(with --campaign: of those campaigns).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the files and bytes it would free; "
                                          "delete nothing.")] = False,
    orphans: Annotated[bool, typer.Option("--orphans", help="Also delete the pack files (storage: {pack: batch}) "
                                          "no catalog row names: left by a run killed between writing a pack "
                                          "and recording its episodes, never read. Alone, prunes only them.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Delete the step files and videos of chosen campaigns' episodes and/or old ones, keeping their catalog
    rows and summaries: results, comparisons and the report are unchanged, a rerun of the campaign runs
    nothing, and `episodes replay` says the step file was pruned. --orphans deletes the packs no row names."""
    from assay.store.retention import PrunePlan, parse_age

    with user_errors():
        age = parse_age(older_than) if older_than is not None else None
        with open_store(store, catalog) as opened:
            plan = opened.prune(campaign or (), age, dry_run=dry_run, on_wait=_say_waiting) \
                if campaign or age is not None or not orphans else PrunePlan((), (), ())
            if orphans and not dry_run:  # a crashed driver's leases would hold the prune off until they expire
                from assay.run.leases import release_gone

                release_gone(opened)
            lost = opened.prune_orphans(dry_run=dry_run, on_wait=_say_waiting) if orphans else []
            busy = opened.run_in_progress() if orphans and dry_run else None
    if busy is not None:  # the real prune waits for the run; its dry run lists the run's packs in flight
        render.err_console.print(f"a campaign run ({busy}) holds this store: packs it is writing are named by no row "
                                 "until it records them, so some listed here may be in flight; `store prune "
                                 "--orphans` waits for the run to finish and deletes only the packs no row names "
                                 "then", highlight=False, soft_wrap=True)
    if orphans:
        _print_orphans(lost, dry_run, json_out)
        if not (campaign or age is not None):
            if json_out:
                render.print_json({**_orphan_document(lost, dry_run), "run_in_progress": busy})
            return
    document = {"dry_run": dry_run, "episodes": len(plan.episodes), "newly_pruned": len(plan.fresh),
                "step_files": plan.count("episodes"), "packs": plan.count("packs"), "videos": plan.count("videos"),
                "bytes": plan.bytes, "kept_shared": plan.shared, "kept_packs": plan.kept_packs,
                "files": [{"path": p, "bytes": b} for p, b in plan.files]}
    if orphans:
        document["orphans"] = {**_orphan_document(lost, dry_run), "run_in_progress": busy}
    if json_out:
        render.print_json(document)
        return
    if dry_run:
        for path, size in plan.files:
            render.console.print(f"  {size:>12,}  {path}", highlight=False, soft_wrap=True)
    verb = "would delete" if dry_run else "deleted"
    render.console.print(f"{len(plan.episodes)} episodes ({len(plan.fresh)} not pruned before): {verb} "
                         f"{plan.count('episodes')} step files{_packs(plan)} and {plan.count('videos')} videos, "
                         f"{plan.bytes:,} bytes; their catalog rows and summaries are kept", highlight=False,
                         soft_wrap=True)
    for name, count in sorted(plan.shared.items()):
        render.console.print(f"kept {count} episodes campaign {name} also links (add --campaign {name} to prune "
                             "them)", highlight=False, soft_wrap=True)
    if plan.kept_packs:
        render.console.print(f"kept {plan.kept_packs} pack files that episodes not pruned still read from (each "
                             "goes with the last of its episodes)", highlight=False, soft_wrap=True)


def _orphan_document(lost: list[tuple[str, int]], dry_run: bool) -> dict[str, Any]:
    return {"dry_run": dry_run, "orphan_packs": len(lost), "bytes": sum(b for _, b in lost),
            "files": [{"path": p, "bytes": b} for p, b in lost]}


def _print_orphans(lost: list[tuple[str, int]], dry_run: bool, json_out: bool) -> None:
    if json_out:
        return
    if dry_run:
        for path, size in lost:
            render.console.print(f"  {size:>12,}  {path}", highlight=False, soft_wrap=True)
    verb = "would delete" if dry_run else "deleted"
    render.console.print(f"orphaned packs (named by no catalog row): {verb} {len(lost)} files, "
                         f"{sum(b for _, b in lost):,} bytes", highlight=False, soft_wrap=True)


def _packs(plan: PrunePlan) -> str:
    """``, N pack files`` where the plan has or keeps packs."""
    return f", {plan.count('packs')} pack files" if plan.count("packs") or plan.kept_packs else ""


def _say_waiting(holder: str) -> None:
    render.err_console.print(f"a campaign run ({holder}) holds this store; pruning waits for it to finish",
                             highlight=False, soft_wrap=True)


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
        states = step_matrix(table, "observation.state")
        actions = step_matrix(table, "action")
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
    from assay.run.closed_loop import outcome_after

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


def _first_difference(states: np.ndarray, rewards: np.ndarray, replayed: Rollout) -> dict | None:
    seen = np.asarray(replayed.states[: len(replayed.transitions)])
    got = np.asarray([t.reward for t in replayed.transitions])
    for step in range(len(states)):
        if step >= len(seen):
            return {"step": step, "what": f"the replay ended after {len(seen)} steps (terminated)"}
        if not np.array_equal(seen[step], states[step]):
            gap = float(np.max(np.abs(seen[step] - states[step])))
            return {"step": step, "what": f"state differs (max |difference| {gap:.3g})"}
        if got[step] != rewards[step]:
            return {"step": step, "what": f"reward {got[step]!r}, recorded {rewards[step]!r}"}
    return None
