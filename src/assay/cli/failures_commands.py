"""CLI: ``assay failures mine|ponr|resample``, ``assay regress add|run``, ``assay priorities``, ``assay boundary``.

The glue that runs episodes (regression reruns, boundary probes, resampling) lives here, as
``assay.failures`` may not import ``assay.run``. A command that runs episodes runs them as a campaign
(:func:`run_jobs`: ``assay.run.job_campaign`` through ``run_campaign``: leases, resume, batched commits, the
fault policy, the campaign's record), holding the store's run lock (:func:`locked_store`): beside a running
campaign it waits, as a second ``assay run`` does, instead of writing at once.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from assay.cli import render
from assay.cli.common import (
    DEFAULT_STORE,
    CatalogOpt,
    JsonOpt,
    StoreOpt,
    open_store,
    policy_option,
    say_latest,
    say_waiting,
    user_errors,
)
from assay.cli.gates import gate_failed
from assay.cli.options import SerialExecutorOpt
from assay.errors import AssayError
from assay.failures import FailureTable, Replayer, attribute, case_from, categorize, coverage, find_ponr, step_arrays
from assay.failures.boundary import bisect_boundary, boundary_interval
from assay.failures.ponr import camera_keyframes, load_ponrs, save_ponr, state_plot
from assay.failures.priorities import priorities
from assay.failures.recovery import gated_recovery_demos
from assay.failures.regression import HELDOUT_SUFFIX, Case, add_sets, load_set, record_run, versions
from assay.run import FaultPolicy, job_campaign, make_executor, phase, run_campaign
from assay.sim import default_registry, resolve_variant
from assay.spec import EpisodeJob, Pipeline, ResolvedPolicy, TaskSpec, Variant, content_hash, episode_key
from assay.store import EpisodeRecord, Outcome, Store, run_lock, step_matrix

NO_EVENTS = ("backend {backend} records no per-step events, and categories are read from them "
             "(Meta-World and LIBERO record them)")
failures_app = typer.Typer(no_args_is_help=True, help="Mine failures: categories, attribution, point of no return.")
regress_app = typer.Typer(no_args_is_help=True, help="Regression sets of failing cases.")


@contextlib.contextmanager
def locked_store(store: Path, catalog: str | None, create: bool = False) -> Iterator[Store]:
    """The store opened under its run lock (its directory's, then its data root's), as ``assay run`` holds it;
    ``create``: the lock is taken before the store is created (two first writers would race to create its
    catalog). Waits, saying so once, while another run holds it."""
    with run_lock(store, on_wait=say_waiting) if create else contextlib.nullcontext(), \
            open_store(store, catalog, create=create) as opened, opened.run_lock(on_wait=say_waiting):
        yield opened


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
    known = [c.name for c in opened.catalog.campaigns()]
    if not known:
        raise AssayError(f"no campaigns in {opened.root}; run one with `assay run`")
    name = campaign or say_latest(opened, known)
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
        label = {r.key: r.policy_name for r in records}
        silent = {r.key: r.task_id.split("/", 1)[0] for r in records if r.key in found
                  and found[r.key].category is None and "missing_events" in found[r.key].evidence}
        counts = Counter(c.category.value if c.category else "uncategorized"
                         for k, c in found.items() if k not in silent)
        by_policy: dict[str, Counter] = {}
        for key, c in found.items():
            if key not in silent:
                by_policy.setdefault(label[key], Counter())[c.category.value if c.category else "uncategorized"] += 1
        no_events = [{"backend": backend, "failures": n, "reason": NO_EVENTS.format(backend=backend)}
                     for backend, n in sorted(Counter(silent.values()).items())]
        document: dict[str, Any] = {
                    "campaign": name, "episodes": len(records), "failures": len(found), "categories": dict(counts),
                    "categories_by_policy": {p: dict(c) for p, c in sorted(by_policy.items())},
                    "not_categorized": no_events, "attribution": coverage(attributions)}
        if json_out:
            render.print_json(document)
            return
        render.console.print(f"[bold]{name}[/]: {len(found)} failures of {len(records)} episodes")
        for row in no_events:
            render.console.print(f"  {row['failures']} failures not categorized: {row['reason']}", highlight=False)
        for policy_name, policy_counts in sorted(by_policy.items()):
            render.console.print(f"  [bold]{policy_name}[/] ({sum(policy_counts.values())} failures)")
            for category, n in policy_counts.most_common():
                render.console.print(f"    {category:<24} {n}")
        render.console.print("[bold]attribution[/] (policy, capability, evidence, failures, share of its failures)")
        for row in document["attribution"]:
            render.console.print(f"  {row['policy']:<16} {row['capability']:<20} {row['confidence']:<9} "
                                 f"{row['failures']:>4}  {row['share']:.0%}", highlight=False)


def ponr_line(found: dict, demos: bool) -> str:
    """One point of no return in words (``t`` None: the reference fails even from the first step)."""
    dropped: dict[str, str] = found.get("demos_dropped") or {}
    if found.get("cached"):
        where = "already found"
    elif demos:
        where = f"plot {found['plot']}; {len(found['demos'])} recovery demos" + (
            f" ({len(dropped)} dropped by the quality gate: {'; '.join(sorted(set(dropped.values())))})"
            if dropped else "")
    else:
        where = f"plot {found['plot']}; no recovery demos written (add --demos)"
    head = f"{found['key'][:12]}: "
    if found.get("verified") is False:
        head += f"no point of no return searched: {found.get('mismatch')}"
    elif found["t"] is None:
        head += (f"no point of no return: the reference cannot recover even from step 0 of {found['steps']} "
                 "(the task is beyond it from the start)")
    else:
        head += f"point of no return t={found['t']} of {found['steps']} steps"
        if found.get("summary"):
            head += f" ({found['summary']})"
    return f"{head} ({found['handoffs']} hand-overs); {where}"


def boundary_line(factor: str, level: float | None, threshold: float, hard: float) -> str:
    """The boundary found, or that none was found up to ``hard``."""
    if level is None:
        return (f"no boundary found: success stays at or above {threshold:g} up to {factor} = {hard:g} "
                "(raise --hard to search further)")
    return f"boundary: {factor} = {level:g} (success < {threshold:g})"


def run_settings(opened: Store, record: EpisodeRecord) -> dict:
    """How the episode's cell ran (safety filter, replan_every, pipeline): from the record, or for
    records written before it carried them, from the campaign that ran it."""
    recorded = record.provenance.get("run") if isinstance(record.provenance, dict) else None
    if isinstance(recorded, dict) and "safety" in recorded:
        return {k: recorded.get(k) for k in ("safety", "replan_every", "pipeline")}
    row = opened.catalog.campaign(record.campaign)
    spec = row.spec if row is not None else None
    source = spec.get("campaign", {}) if isinstance(spec, dict) else {}
    return {"safety": bool(source.get("safety", False)), "replan_every": source.get("replan_every"),
            "pipeline": source.get("pipeline", "lockstep")}


def _ponr_one(opened: Store, record: EpisodeRecord, demos: bool, budget: int | None, method: str, draws: int) -> dict:
    phase(f"point of no return of episode {record.key[:12]} ({record.policy_name} on {record.task_id})")
    table = opened.steps(record)
    arrays = step_arrays(table)
    actions = step_matrix(table, "action")
    task = _task_of(opened, record)
    replayer = Replayer(
        task, Variant.model_validate(record.variant), safety=bool(run_settings(opened, record)["safety"]))
    try:
        found = find_ponr(replayer, record.key, record.seed, actions, record.instruction,
                          states=arrays["observation.state"], budget=budget, method=method, draws=draws)
        written, dropped = gated_recovery_demos(replayer, opened.root, found, record.seed, actions,
                                                instruction=record.instruction) if demos else ([], {})
    finally:
        replayer.close()
    save_ponr(opened.root, found)
    out = opened.root / "failures" / "keyframes"
    plot = state_plot(out / f"{record.key}.png", arrays, found)
    frames = camera_keyframes(opened.data_root, record.key, [c.name for c in task.cameras], found, out)
    return {**found.to_dict(), "summary": found.describe(), "plot": str(plot), "frames": [str(f) for f in frames],
            "demos": written, "demos_dropped": dropped}


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
         budget: Annotated[int | None, typer.Option("--budget", min=1, help="The expert's step budget from "
                                                       "every state (default: the task's horizon).")] = None,
         scan: Annotated[bool, typer.Option("--scan", help="Check every step (exact; one hand-over per step) "
                                            "instead of probing and refining.")] = False,
         draws: Annotated[int, typer.Option("--draws", min=1, max=20, help="Noise draws per probe under a "
                                            "noisy variant.")] = 3,
         json_out: JsonOpt = False) -> None:
    """Find a failed episode's point of no return: verify the replay, hand over to the expert with a fixed
    budget at probed steps, refine; plot keyframes."""
    method = "scan" if scan else "bracket"
    with user_errors():
        with open_store(store, catalog) as opened:
            done = load_ponrs(opened.root) if key is None else {}
            results = [{**done[r.key].to_dict(), "summary": done[r.key].describe(), "cached": True}
                       if r.key in done and not demos and done[r.key].budget is not None
                       else _ponr_one(opened, r, demos, budget, method, draws)
                       for r in _ponr_targets(opened, key, campaign, policy, limit)]
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
        for task in campaign.spec.get("tasks", []) if isinstance(campaign.spec, dict) else []:
            if task.get("hash") == record.task_hash:
                return TaskSpec.model_validate(task["spec"])
    task = default_registry().get(record.task_id)
    if task.content_hash() != record.task_hash:
        raise AssayError(f"cannot find the task {record.task_id} that episode {record.key[:12]} ran (hash "
                         f"{record.task_hash[:12]})")
    return task


def regress_add(name: Annotated[str, typer.Argument(help="Set name.")],
                source: Annotated[str, typer.Option("--from", help="Campaign to mine failing cases from.")],
                store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None,
                task: Annotated[str | None, typer.Option("--task", help="Only this task id.")] = None,
                policy: Annotated[str | None, typer.Option(
                    "--policy", "-p", help="Only this policy's failures.")] = None,
                category: Annotated[str | None, typer.Option("--category", help="Only this failure category.")] = None,
                holdout: Annotated[float, typer.Option(
                    "--holdout", help="Share of cases kept apart as NAME.heldout.")] = 0.25,
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
                failing = [r for r in failing
                           if found[r.key].category is not None and found[r.key].category.value == category]
            cases = [case_from(r, _task_of(opened, r), run_settings(opened, r)) for r in failing]
            mined, held = add_sets(opened.root, name, source, cases, holdout)
        document = {"mined": {"name": mined.name, "version": mined.version, "cases": len(mined.cases)},
                    "heldout": None if held is None else {"name": held.name, "version": held.version,
                                                          "cases": len(held.cases)}}
        if json_out:
            render.print_json(document)
        else:
            render.console.print(f"{mined.name} v{mined.version}: {len(mined.cases)} cases"
                                 + (f"; held out {held.name} v{held.version}: {len(held.cases)} cases" if held else ""))


def case_job(campaign: str, index: int, case: Case, policy: ResolvedPolicy) -> EpisodeJob:
    """The rerun of one case: its task, variant, seed and instruction, and every setting its cell ran with."""
    task, variant, settings = case.task_spec, case.variant_spec, case.run_settings
    replan_every, safety = settings["replan_every"], bool(settings["safety"])
    key = episode_key(task, variant, policy, case.seed, case.instruction, replan_every, safety)
    return EpisodeJob(campaign, task, variant, policy, index, case.seed, key, case.instruction, replan_every,
                      Pipeline(settings["pipeline"]), safety)


def campaign_name(*parts: str) -> str:
    """A campaign name from ``parts`` (characters a name cannot hold become ``_``; a name past the 100 allowed
    keeps its first 87 and a hash of the whole)."""
    name = re.sub(r"[^\w.\-]", "_", "-".join(parts))
    return name if len(name) <= 100 else f"{name[:87]}-{content_hash(name, length=12)}"


def run_jobs(opened: Store, name: str, jobs: list[EpisodeJob], executor: str = "inline", workers: int = 1,
             envs_per_worker: int = 4) -> dict[str, EpisodeRecord]:
    """Run ``jobs`` as campaign ``name`` through the campaign loop (leases, resume, batched commits, the fault
    policy; ``results`` and the dashboard see it); every job's record by key."""
    runner = make_executor(executor, str(opened.data_root), workers, faults=FaultPolicy())
    run_campaign(job_campaign(name, jobs, envs_per_worker=envs_per_worker), opened, runner)
    records = {r.key: r for r in opened.catalog.episodes(campaign=name)}
    return {job.key: records[job.key] for job in jobs}


def _source_policies(opened: Store, source: str) -> dict[str, dict]:
    """The policies of campaign ``source`` by name, as its spec stored them (with their parameters)."""
    row = opened.catalog.campaign(source)
    spec = row.spec if row is not None else None
    policies = spec.get("policies", []) if isinstance(spec, dict) else []
    out = {}
    for entry in policies:
        data = entry.get("spec", entry) if isinstance(entry, dict) else None
        if isinstance(data, dict) and "name" in data:
            out[str(data["name"])] = data
    return out


def _rerun(opened: Store, set_name: str, policy_value: str) -> dict:
    regression_set = load_set(opened.root, set_name)
    known = _source_policies(opened, regression_set.source)
    known.update({c.policy["name"]: c.policy for c in regression_set.cases if c.policy.get("name")})
    policy = policy_option(policy_value, known)
    identity = content_hash(policy.spec.identity(policy.version), length=8)  # another checkpoint: another campaign
    campaign = campaign_name("regress", set_name, f"v{regression_set.version}", policy.name, identity)
    jobs = [(case.id, case_job(campaign, index, case, policy)) for index, case in enumerate(regression_set.cases)]
    records = run_jobs(opened, campaign, [job for _, job in jobs]) if jobs else {}  # a set may hold no case
    run, diff = record_run(opened.root, regression_set, policy.name, {case: records[job.key] for case, job in jobs})
    return {"set": set_name, "split": regression_set.split, "version": regression_set.version, "run": run["run"],
            "passed": sum(run["passed"].values()), "cases": len(jobs), "baseline": diff.baseline, **diff.counts()}


def regress_run(name: Annotated[str, typer.Argument(help="Set name.")],
                policy: Annotated[str, typer.Option("--policy", "-p", help="Policy (builtin, module:attr or remote:ws://...).")],
                store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None,
                fail_under: Annotated[float | None, typer.Option(
                    "--fail-under", min=0.0, max=1.0, metavar="RATE",
                    help="Exit with status 1 when a set's pass rate is below RATE (CI; 1 = every case must "
                         "pass).")] = None,
                json_out: JsonOpt = False) -> None:
    """Rerun a set (and its held-out twin) with a policy: fixed / still failing / newly failing vs the last run."""
    with user_errors():
        with locked_store(store, catalog) as opened:
            rows = [_rerun(opened, name, policy)]
            if versions(opened.root, name + HELDOUT_SUFFIX):
                rows.append(_rerun(opened, name + HELDOUT_SUFFIX, policy))
        if json_out:
            render.print_json(rows)
        else:
            for row in rows:
                render.console.print(f"{row['set']} v{row['version']} ({row['split']}) run {row['run']}: "
                                     f"{row['passed']}/{row['cases']} pass; fixed {row['fixed']}, still failing "
                                     f"{row['still_failing']}, newly failing {row['newly_failing']} (vs "
                                     f"{row['baseline']})")
    failing = [r for r in rows
               if fail_under is not None and (r["passed"] / r["cases"] if r["cases"] else 1.0) < fail_under]
    if failing:
        gate_failed([f"regression set {r['set']} ({r['split']}): {r['passed']}/{r['cases']} pass < {fail_under:g}"
                     for r in failing])


def priorities_command(store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None,
                       campaign: Annotated[str | None, typer.Option("--campaign", "-c")] = None,
                       policy: Annotated[str | None, typer.Option("--policy", "-p", help="Only this policy.")] = None,
                       json_out: JsonOpt = False) -> None:
    """What to collect next, per policy: "collect N demos of task T in region R (why)", by failure mass x
    recoverability over factor and initial-condition regions."""
    with user_errors():
        with open_store(store, catalog) as opened:
            name, records = _campaign_records(opened, campaign)
            if policy is not None:
                valid = sorted({r.policy_name for r in records})
                if policy not in valid:
                    raise AssayError(f"campaign {name!r} has no policy {policy!r}; valid: {', '.join(valid)}")
                records = [r for r in records if r.policy_name == policy]
            found = FailureTable(opened).get([r.key for r in records])
            if not found:
                found = _mine(opened, records)
            rows = priorities(records, found, load_ponrs(opened.root))
        if json_out:
            render.print_json([row.to_dict() for row in rows])
            return
        current = None
        for row in rows:
            if row.policy != current:
                current = row.policy
                render.console.print(f"[bold]{current}[/]")
            score = "   n/a" if row.score is None else f"{row.score:6.3f}"
            render.console.print(f"  {score}  {row.advice}", highlight=False, soft_wrap=True)


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
        resolved = policy_option(policy)
        seeds = [derive_seed("boundary", seed, spec.id, i) for i in range(episodes)]
        probe = content_hash({"task": spec.id, "policy": resolved.spec.identity(resolved.version), "seed": seed,
                              "episodes": episodes}, length=8)
        with locked_store(store, catalog, create=True) as opened:
            def evaluate(level: float) -> tuple[int, int]:  # one campaign per probed level, its seeds paired
                variant = resolve_variant({factor: level}, spec)
                name = campaign_name("boundary", factor, f"{level:.6g}", probe)
                jobs = [EpisodeJob(name, spec, variant, resolved, i, s, episode_key(spec, variant, resolved, s),
                                   spec.instruction) for i, s in enumerate(seeds)]
                outcomes = [r.outcome for r in run_jobs(opened, name, jobs).values()]
                return sum(o is Outcome.SUCCESS for o in outcomes), len(outcomes)

            level, probes = bisect_boundary(evaluate, safe, hard, threshold, iterations)
        where = boundary_interval(probes, safe, hard, threshold)
        document = {"task": spec.id, "factor": factor, "threshold": threshold, "boundary": level,
                    "bracket": where.bracket, "interval": where.interval, "undecided": list(where.undecided),
                    "probes": [p.__dict__ for p in probes]}
        if json_out:
            render.print_json(document)
            return
        for p in probes:
            render.console.print(f"  {factor}={p.level:<10.4g} success {p.successes}/{p.episodes} [{p.low:.2f}, "
                                 f"{p.high:.2f}]")
        render.console.print(boundary_line(factor, level, threshold, hard), highlight=False)
        if where.interval is not None:
            render.console.print(f"  it lies in [{where.interval[0]:.4g}, {where.interval[1]:.4g}] (the bisection "
                                 f"closed {where.bracket}; widened to the nearest levels whose 95% intervals clear the "
                                 "threshold)", highlight=False)


def resample(key: Annotated[str, typer.Argument(help="A failed episode's key (or a unique prefix).")],
             samples: Annotated[int, typer.Option("--samples", min=1, max=50, help="Nearby variants (a nominal "
                                                  "failure: nearby initial conditions per seed).")] = 4,
             seeds: Annotated[int, typer.Option("--seeds", min=1, max=100, help="Nearest initial conditions per "
                                                "variant.")] = 5,
             radius: Annotated[float, typer.Option("--radius", help="Fraction of each factor's range.")] = 0.1,
             executor: SerialExecutorOpt = "inline",
             workers: Annotated[int, typer.Option("--workers", "-w", min=1)] = 2,
             store: StoreOpt = Path(DEFAULT_STORE), catalog: CatalogOpt = None, json_out: JsonOpt = False) -> None:
    """Estimate the failure rate around one failure: nearby factor values and nearby initial conditions,
    run with the failed cell's own settings (safety, replan_every, pipeline)."""
    from assay.failures.resample import nearest_seeds, neighbourhood, variant_request
    from assay.metrics import success_interval
    from assay.spec import derive_seed

    with user_errors():
        with locked_store(store, catalog) as opened:
            record = opened.catalog.episode(key)
            if record.outcome is Outcome.SUCCESS:
                raise AssayError(f"episode {record.key} succeeded; resample around a failure")
            task = _task_of(opened, record)
            policy = policy_option(record.policy_name, {record.policy_name: record.policy_spec})
            settings = run_settings(opened, record)
            original = variant_request(record.variant)
            nearby = neighbourhood(original, radius, samples, derive_seed(record.key)) if original else []
            requests = [original] + nearby
            per_variant = seeds if original else samples * seeds
            target = list(record.initial_conditions.get("rand_vec", []))
            campaign = campaign_name("resample", record.key[:12], f"{samples}x{seeds}", f"r{radius:g}")
            case = Case("", task.model_dump(mode="json"), {}, 0, record.instruction, record.key, settings)
            jobs: list[EpisodeJob] = []
            distances: list[float] = []
            for request in requests:
                variant = resolve_variant(request, task)
                near = nearest_seeds(task, variant, target, per_variant, derive_seed("resample", record.key),
                                     exclude=record.seed)
                distances += [d for _, d in near]
                for seed, _ in near:
                    job = case_job(campaign, len(jobs), Case(case.id, case.task, variant.model_dump(mode="json"), seed,
                                                             record.instruction, record.key, settings), policy)
                    jobs.append(job)
            found = run_jobs(opened, campaign, jobs, executor, workers, envs_per_worker=min(4, per_variant))
            around = [found[j.key] for j in jobs]
        scored = [r for r in around if r.outcome is not Outcome.ERROR]
        failures = sum(r.outcome is not Outcome.SUCCESS for r in scored)
        interval = success_interval(failures, len(scored))
        rows = Counter((r.variant_name, r.outcome is Outcome.SUCCESS) for r in scored)
        names = list(dict.fromkeys(r.variant_name for r in around))
        document: dict[str, Any] = {"episode": record.key, "campaign": campaign, "variants": len(requests),
                    "episodes": len(around), "scored": len(scored), "failures": failures, "settings": settings,
                    "failure_rate": failures / len(scored) if scored else None,
                    "interval": None if interval is None else [interval.low, interval.high],
                    "initial_conditions": {"per_variant": per_variant, "max_distance": max(distances, default=None)},
                    "by_variant": {n: {"failures": rows[(n, False)], "successes": rows[(n, True)]} for n in names}}
        if json_out:
            render.print_json(document)
            return
        render.console.print(f"around {record.key[:12]} ({record.task_id}, {record.variant_name}, seed {record.seed}):",
                             highlight=False)
        if not original:
            render.console.print(f"  nominal failure: no factor to move; {per_variant} nearest initial conditions "
                                 f"(--samples {samples} x --seeds {seeds})", highlight=False)
        for name, counts in document["by_variant"].items():
            render.console.print(f"  {name:<60} failures "
                                 f"{counts['failures']}/{counts['failures'] + counts['successes']}",
                                 highlight=False)
        render.console.print(f"  initial conditions within {document['initial_conditions']['max_distance']} of the "
                             "failure's", highlight=False)
        if interval is not None:
            render.console.print(f"local failure rate {failures}/{len(scored)} = {failures / len(scored):.2f} "
                                 f"[{interval.low:.2f}, {interval.high:.2f}] (mid-p 95%)", highlight=False)


def register(app: typer.Typer) -> None:
    """Add the ``failures`` and ``regress`` command groups to ``app``."""
    failures_app.command("mine")(mine)
    failures_app.command("resample")(resample)
    failures_app.command("ponr")(ponr)
    regress_app.command("add")(regress_add)
    regress_app.command("run")(regress_run)
    app.add_typer(failures_app, name="failures")
    app.add_typer(regress_app, name="regress")
    app.command("priorities")(priorities_command)
    app.command("boundary")(boundary)
