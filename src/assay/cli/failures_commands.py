"""CLI: ``assay failures mine|ponr``, ``assay regress add|run``, ``assay priorities``, ``assay boundary``.

The glue that runs episodes (regression reruns, boundary probes) lives here, as
``assay.failures`` may not import ``assay.run``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, user_errors
from assay.errors import AssayError
from assay.failures import FailureTable, Replayer, attribute, case_from, categorize, coverage, find_ponr, step_arrays
from assay.failures.boundary import bisect_boundary
from assay.failures.ponr import camera_keyframes, load_ponrs, save_ponr, state_plot
from assay.failures.priorities import priorities
from assay.failures.recovery import recovery_demos
from assay.failures.regression import HELDOUT_SUFFIX, add_sets, load_set, record_run, versions
from assay.policies import resolve_policy
from assay.run import InlineExecutor
from assay.sim import default_registry, resolve_variant
from assay.spec import EpisodeJob, TaskSpec, Variant, batch_jobs, episode_key, policy_from_shorthand
from assay.store import EpisodeRecord, Outcome, Store

failures_app = typer.Typer(no_args_is_help=True, help="Mine failures: categories, attribution, point of no return.")
regress_app = typer.Typer(no_args_is_help=True, help="Regression sets of failing cases.")


def _mine(opened: Store, records: list[EpisodeRecord]) -> dict:
    table = FailureTable(opened)
    found = {}
    for record in records:
        if record.outcome is Outcome.SUCCESS:
            continue
        steps = step_arrays(opened.steps(record)) if record.data_path else None
        found[record.key] = categorize(record, steps)
    table.put(found)
    return found


def _campaign_records(opened: Store, campaign: str | None) -> tuple[str, list[EpisodeRecord]]:
    name = campaign or opened.catalog.latest_campaign()
    if name is None:
        raise AssayError(f"no campaigns in {opened.root}; run one with `assay run`")
    records = opened.catalog.episodes(campaign=name)
    if not records:
        raise AssayError(f"campaign {name!r} has no episodes in {opened.root}")
    return name, records


def mine(store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None,
         campaign: Annotated[str | None, typer.Option("--campaign", "-c")] = None, json_out: JsonOpt = False) -> None:
    """Categorize a campaign's failures (stored on each episode) and attribute them to capabilities."""
    with user_errors():
        with open_store(store, catalog) as opened:
            name, records = _campaign_records(opened, campaign)
            found = _mine(opened, records)
            attributions = attribute(records, found)
        counts = Counter(c.category.value if c.category else "uncategorized" for c in found.values())
        document = {"campaign": name, "episodes": len(records), "failures": len(found), "categories": dict(counts),
                    "attribution": coverage(attributions)}
        if json_out:
            render.print_json(document)
            return
        render.console.print(f"[bold]{name}[/]: {len(found)} failures of {len(records)} episodes")
        for category, n in counts.most_common():
            render.console.print(f"  {category:<24} {n}")
        render.console.print("[bold]attribution[/] (capability, evidence, failures, share)")
        for row in document["attribution"]:
            render.console.print(f"  {row['capability']:<20} {row['confidence']:<9} {row['failures']:>4}  {row['share']:.0%}")


def ponr_line(found: dict, demos: bool) -> str:
    """One point of no return in words (``t`` None: the reference fails even from the first step)."""
    if found.get("cached"):
        where = "already found"
    elif demos:
        where = f"plot {found['plot']}; {len(found['demos'])} recovery demos"
    else:
        where = f"plot {found['plot']}; no recovery demos written (add --demos)"
    head = f"{found['key'][:12]}: "
    if found["t"] is None:
        head += (f"no point of no return: the reference cannot recover even from step 0 of {found['steps']} "
                 "(the task is beyond it from the start)")
    else:
        head += f"point of no return t={found['t']} of {found['steps']} steps"
    return f"{head} ({found['handoffs']} hand-overs); {where}"


def boundary_line(factor: str, level: float | None, threshold: float, hard: float) -> str:
    if level is None:
        return (f"no boundary found: success stays at or above {threshold:g} up to {factor} = {hard:g} "
                "(raise --hard to search further)")
    return f"boundary: {factor} = {level:g} (success < {threshold:g})"


def _ponr_one(opened: Store, record: EpisodeRecord, demos: bool) -> dict:
    table = opened.steps(record)
    arrays = step_arrays(table)
    actions = table.column("action").combine_chunks().flatten().to_numpy().reshape(len(table), -1)
    task = _task_of(opened, record)
    replayer = Replayer(task, Variant.model_validate(record.variant))
    try:
        found = find_ponr(replayer, record.key, record.seed, actions, record.instruction)
        written = recovery_demos(replayer, opened.root, found, record.seed, actions,
                                 instruction=record.instruction) if demos else []
    finally:
        replayer.close()
    save_ponr(opened.root, found)
    out = opened.root / "failures" / "keyframes"
    plot = state_plot(out / f"{record.key}.png", arrays, found)
    frames = camera_keyframes(Path(opened.data_root), record.key, [c.name for c in task.cameras], found, out)
    return {**found.to_dict(), "plot": str(plot), "frames": [str(f) for f in frames], "demos": written}


def _ponr_targets(opened: Store, key: str | None, campaign: str | None, policy: str | None,
                  limit: int) -> list[EpisodeRecord]:
    if key is not None:
        if campaign is not None or policy is not None:
            raise AssayError("give an episode KEY, or --campaign/--policy to pick failures, not both")
        record = opened.catalog.episode(key)
        if record.outcome is Outcome.SUCCESS:
            raise AssayError(f"episode {record.key} succeeded; the point of no return is for failures")
        return [record]
    name, records = _campaign_records(opened, campaign)
    if policy is not None and policy not in {r.policy_name for r in records}:
        valid = ", ".join(sorted({r.policy_name for r in records}))
        raise AssayError(f"campaign {name!r} has no policy {policy!r}; valid: {valid}")
    failed = sorted((r for r in records if r.outcome in (Outcome.FAILURE, Outcome.TIMEOUT) and r.data_path
                     and (policy is None or r.policy_name == policy)),
                    key=lambda r: (r.policy_name, r.task_id, r.variant_name, r.seed, r.key))
    return failed[:limit]


def ponr(key: Annotated[str | None, typer.Argument(help="Episode key (a unique prefix); or pick failures "
                                                      "with --campaign/--policy.")] = None,
         store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None,
         campaign: Annotated[str | None, typer.Option("--campaign", "-c", help="Analyse this campaign's first "
                                                         "--limit failures (by policy, task, variant, seed); "
                                                         "those already analysed are not redone.")] = None,
         policy: Annotated[str | None, typer.Option("--policy", "-p", help="Only this policy's failures.")] = None,
         limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many failures (with no KEY).")] = 3,
         demos: Annotated[bool, typer.Option("--demos", help="Also write recovery demos from just before it.")] = False,
         json_out: JsonOpt = False) -> None:
    """Find a failed episode's point of no return (replay, hand over to the expert, bisect); plot keyframes."""
    with user_errors():
        with open_store(store, catalog) as opened:
            done = load_ponrs(opened.root) if key is None else {}
            results = [{**done[r.key].to_dict(), "cached": True} if r.key in done and not demos
                       else _ponr_one(opened, r, demos) for r in _ponr_targets(opened, key, campaign, policy, limit)]
        if json_out:
            render.print_json(results[0] if key is not None else results)
            return
        if not results:
            render.console.print("no failed episodes with step data to analyse", highlight=False)
        for found in results:
            render.console.print(ponr_line(found, demos), highlight=False, soft_wrap=True)


def _task_of(opened: Store, record: EpisodeRecord) -> TaskSpec:
    """The task exactly as the campaign ran it (with its cameras, horizon), from the resolved campaign."""
    for campaign in opened.catalog.campaigns():
        for task in campaign.get("spec", {}).get("tasks", []) if isinstance(campaign.get("spec"), dict) else []:
            if task.get("hash") == record.task_hash:
                return TaskSpec.model_validate(task["spec"])
    task = default_registry().get(record.task_id)
    if task.content_hash() != record.task_hash:
        raise AssayError(f"cannot find the task {record.task_id} that episode {record.key[:12]} ran (hash {record.task_hash[:12]})")
    return task


def regress_add(name: Annotated[str, typer.Argument(help="Set name.")],
                source: Annotated[str, typer.Option("--from", help="Campaign to mine failing cases from.")],
                store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None,
                task: Annotated[str | None, typer.Option("--task", help="Only this task id.")] = None,
                policy: Annotated[str | None, typer.Option("--policy", "-p", help="Only this policy's failures.")] = None,
                category: Annotated[str | None, typer.Option("--category", help="Only this failure category.")] = None,
                holdout: Annotated[float, typer.Option("--holdout", help="Share of cases kept apart as NAME.heldout.")] = 0.25,
                json_out: JsonOpt = False) -> None:
    """Freeze a campaign's failing (task, variant, seed) cases into a versioned set (and a held-out set)."""
    with user_errors():
        with open_store(store, catalog) as opened:
            _, records = _campaign_records(opened, source)
            if policy is not None and policy not in {r.policy_name for r in records}:
                valid = ", ".join(sorted({r.policy_name for r in records}))
                raise AssayError(f"campaign {source!r} has no policy {policy!r}; valid: {valid}")
            failing = [r for r in records if r.outcome is not Outcome.SUCCESS and (task is None or r.task_id == task)
                       and (policy is None or r.policy_name == policy)]
            if category is not None:
                found = _mine(opened, failing)
                failing = [r for r in failing if found[r.key].category is not None and found[r.key].category.value == category]
            cases = [case_from(r, _task_of(opened, r)) for r in failing]
            mined, held = add_sets(opened.root, name, source, cases, holdout)
        document = {"mined": {"name": mined.name, "version": mined.version, "cases": len(mined.cases)},
                    "heldout": None if held is None else {"name": held.name, "version": held.version, "cases": len(held.cases)}}
        if json_out:
            render.print_json(document)
        else:
            render.console.print(f"{mined.name} v{mined.version}: {len(mined.cases)} cases"
                                 + (f"; held out {held.name} v{held.version}: {len(held.cases)} cases" if held else ""))


def _rerun(opened: Store, set_name: str, policy_value: str) -> dict:
    regression_set = load_set(opened.root, set_name)
    policy = resolve_policy(policy_from_shorthand(policy_value))
    campaign = f"regress-{set_name}-v{regression_set.version}"
    jobs = []
    for index, case in enumerate(regression_set.cases):
        task, variant = case.task_spec, case.variant_spec
        key = episode_key(task, variant, policy, case.seed, case.instruction)
        jobs.append((case.id, EpisodeJob(campaign, task, variant, policy, index, case.seed, key, case.instruction)))
    done = opened.catalog.existing_keys(job.key for _, job in jobs)
    records = {r.key: r for r in InlineExecutor(opened.data_root).run(batch_jobs([j for _, j in jobs if j.key not in done], 4))}
    for record in records.values():
        opened.catalog.add(record)
    opened.catalog.link(campaign, [(job.key, job.policy.name) for _, job in jobs])
    for _, job in jobs:
        if job.key not in records:
            records[job.key] = opened.catalog.episode(job.key)
    run, diff = record_run(opened.root, regression_set, policy.name, {case: records[job.key] for case, job in jobs})
    return {"set": set_name, "split": regression_set.split, "version": regression_set.version, "run": run["run"],
            "passed": sum(run["passed"].values()), "cases": len(jobs), "baseline": diff.baseline, **diff.counts()}


def regress_run(name: Annotated[str, typer.Argument(help="Set name.")],
                policy: Annotated[str, typer.Option("--policy", "-p", help="Policy (builtin, module:attr or remote:ws://...).")],
                store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False) -> None:
    """Rerun a set (and its held-out twin) with a policy: fixed / still failing / newly failing vs the last run."""
    with user_errors():
        with open_store(store, catalog) as opened:
            rows = [_rerun(opened, name, policy)]
            if versions(opened.root, name + HELDOUT_SUFFIX):
                rows.append(_rerun(opened, name + HELDOUT_SUFFIX, policy))
        if json_out:
            render.print_json(rows)
            return
        for row in rows:
            render.console.print(f"{row['set']} v{row['version']} ({row['split']}) run {row['run']}: {row['passed']}/{row['cases']} pass; "
                                 f"fixed {row['fixed']}, still failing {row['still_failing']}, newly failing "
                                 f"{row['newly_failing']} (vs {row['baseline']})")


def priorities_command(store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None,
                       campaign: Annotated[str | None, typer.Option("--campaign", "-c")] = None,
                       json_out: JsonOpt = False) -> None:
    """What to collect next: (task, factor region, category) by failure mass x recoverability."""
    with user_errors():
        with open_store(store, catalog) as opened:
            _, records = _campaign_records(opened, campaign)
            found = FailureTable(opened).get([r.key for r in records])
            if not found:
                found = _mine(opened, records)
            rows = priorities(records, found, load_ponrs(opened.root))
        if json_out:
            render.print_json([row.__dict__ for row in rows])
            return
        for row in rows:
            score = "   n/a" if row.score is None else f"{row.score:6.3f}"
            render.console.print(f"{score}  {row.task:<28} {row.region:<32} {row.category:<22} failures {row.failures}, "
                                 f"recoverable {row.recoverable}/{row.searched} searched")


def boundary(task: Annotated[str, typer.Option("--task", "-t")], factor: Annotated[str, typer.Option("--factor", "-f")],
             safe: Annotated[float, typer.Option("--safe", help="Level where the policy succeeds.")],
             hard: Annotated[float, typer.Option("--hard", help="Level where it fails.")],
             policy: Annotated[str, typer.Option("--policy", "-p")] = "expert",
             threshold: Annotated[float, typer.Option("--threshold")] = 0.5,
             episodes: Annotated[int, typer.Option("--episodes", "-n", min=1)] = 8,
             iterations: Annotated[int, typer.Option("--iterations", min=1, max=10)] = 3,
             seed: Annotated[int, typer.Option("--seed")] = 0,
             store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False) -> None:
    """Bisect one factor for the level where success falls below a threshold (paired seeds at every level)."""
    from assay.spec import derive_seed

    with user_errors():
        spec = default_registry().get(task)
        resolved = resolve_policy(policy_from_shorthand(policy))
        seeds = [derive_seed("boundary", seed, spec.id, i) for i in range(episodes)]
        with open_store(store, catalog, create=True) as opened:
            def evaluate(level: float) -> tuple[int, int]:
                variant = resolve_variant({factor: level}, spec)
                jobs = [EpisodeJob(f"boundary-{factor}", spec, variant, resolved, i, s,
                                   episode_key(spec, variant, resolved, s), spec.instruction) for i, s in enumerate(seeds)]
                done = opened.catalog.existing_keys(j.key for j in jobs)
                for record in InlineExecutor(opened.data_root).run(batch_jobs([j for j in jobs if j.key not in done], 4)):
                    opened.catalog.add(record)
                opened.catalog.link(f"boundary-{factor}", [(j.key, j.policy.name) for j in jobs])
                outcomes = [opened.catalog.episode(j.key).outcome for j in jobs]
                return sum(o is Outcome.SUCCESS for o in outcomes), len(outcomes)

            level, probes = bisect_boundary(evaluate, safe, hard, threshold, iterations)
        document = {"task": spec.id, "factor": factor, "threshold": threshold, "boundary": level,
                    "probes": [p.__dict__ for p in probes]}
        if json_out:
            render.print_json(document)
            return
        for p in probes:
            render.console.print(f"  {factor}={p.level:<10.4g} success {p.successes}/{p.episodes} [{p.low:.2f}, {p.high:.2f}]")
        render.console.print(boundary_line(factor, level, threshold, hard), highlight=False)


def resample(key: Annotated[str, typer.Argument(help="A failed episode's key (or a unique prefix).")],
             samples: Annotated[int, typer.Option("--samples", min=1, max=50, help="Nearby variants.")] = 4,
             seeds: Annotated[int, typer.Option("--seeds", min=1, max=100, help="Fresh seeds per variant.")] = 5,
             radius: Annotated[float, typer.Option("--radius", help="Fraction of each factor's range.")] = 0.1,
             executor: Annotated[str, typer.Option("--executor", "-x", help="inline | local")] = "inline",
             workers: Annotated[int, typer.Option("--workers", "-w", min=1)] = 2,
             store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False) -> None:
    """Estimate the failure rate around one failure: nearby factor values and fresh seeds."""
    from assay.failures.resample import neighbourhood, variant_request
    from assay.metrics import success_interval
    from assay.run import make_executor, prepare_campaign, run_campaign
    from assay.spec import campaign_from_data, derive_seed

    with user_errors():
        with open_store(store, catalog) as opened:
            record = opened.catalog.episode(key)
            source = next(c for c in opened.catalog.campaigns() if c["name"] == record.campaign)["spec"]["campaign"]
            original = variant_request(record.variant)
            variants = [original] + (neighbourhood(original, radius, samples, derive_seed(record.key)) if original else [])
            data = {"name": f"resample-{record.key[:12]}", "seed": derive_seed("resample", record.key) % 100_000,
                    "episodes": seeds, "tasks": [record.task_id], "policies": [record.policy_spec],
                    "variants": variants, "cameras": source.get("cameras", []), "horizon": source.get("horizon"),
                    "envs_per_worker": min(seeds, 4)}
            planned = prepare_campaign(campaign_from_data(data, "<resample>"))
            run_campaign(planned, opened, make_executor(executor, opened.data_root, workers))
            around = opened.catalog.episodes(campaign=planned.spec.name)
        scored = [r for r in around if r.outcome is not Outcome.ERROR]
        failures = sum(r.outcome is not Outcome.SUCCESS for r in scored)
        interval = success_interval(failures, len(scored))
        rows = Counter((r.variant_name, r.outcome is Outcome.SUCCESS) for r in scored)
        document = {"episode": record.key, "campaign": planned.spec.name, "variants": len(variants),
                    "episodes": len(around), "scored": len(scored), "failures": failures,
                    "failure_rate": failures / len(scored) if scored else None,
                    "interval": None if interval is None else [interval.low, interval.high],
                    "by_variant": {v.name: {"failures": rows[(v.name, False)], "successes": rows[(v.name, True)]}
                                   for v in planned.variants}}
        if json_out:
            render.print_json(document)
            return
        render.console.print(f"around {record.key[:12]} ({record.task_id}, {record.variant_name}, seed {record.seed}):")
        for name, counts in document["by_variant"].items():
            render.console.print(f"  {name:<60} failures {counts['failures']}/{counts['failures'] + counts['successes']}",
                                 highlight=False)
        if interval is not None:
            render.console.print(f"local failure rate {failures}/{len(scored)} = {failures / len(scored):.2f} "
                                 f"[{interval.low:.2f}, {interval.high:.2f}] (Wilson 95%)", highlight=False)


def register(app: typer.Typer) -> None:
    failures_app.command("mine")(mine)
    failures_app.command("resample")(resample)
    failures_app.command("ponr")(ponr)
    regress_app.command("add")(regress_add)
    regress_app.command("run")(regress_run)
    app.add_typer(failures_app, name="failures")
    app.add_typer(regress_app, name="regress")
    app.command("priorities")(priorities_command)
    app.command("boundary")(boundary)
