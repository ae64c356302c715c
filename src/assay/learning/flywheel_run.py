"""Run a flywheel design end to end, resumably: ``assay flywheel --design FILE.yaml``.

Per replicate ``r`` (each its own demo, probe and evaluation seed streams: campaign seeds
``DEMO_SEED + r``, ``PROBE_SEED + r``, ``EVAL_SEED + r``):

1. the expert runs the demo pool; the base trains on the pool's first successes inside the slice;
2. the base runs the probe; failure mining (:func:`assay.learning.flywheel_design.mine`) finds the
   failure-heavy region from the probe's records;
3. each extra arm's data is selected (:mod:`assay.learning.flywheel_design`), cut to an equal
   budget in episodes and frames, and trained (same training seed ``r`` for every arm);
4. every arm runs the same held-out evaluation seeds; the leakage check proves that no evaluation
   scene is in any arm's data, and that evaluation, probe and pool scenes are disjoint.

Every campaign is an ordinary resumable campaign in the store; a checkpoint file is named by the
hash of its data and training config and reused when it exists, so a rerun retrains nothing and
reruns no episode. The result document goes to ``STORE/learning/flywheel/NAME.json`` (the report's
flywheel section reads it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from assay.errors import AssayError
from assay.failures.priorities import priorities
from assay.learning.bc import TrainConfig, train_bc
from assay.learning.data import Demo, episode_demo
from assay.learning.flywheel_design import (
    FlywheelDesign,
    equal_budget,
    initial,
    mine,
    probe_failures,
    region_agreement,
    select_base,
    select_demos,
)
from assay.learning.flywheel_stats import analyse, by_region
from assay.learning.leakage import contaminated, scene_of
from assay.learning.runs import DEMO_SEED, EVAL_SEED, PROBE_SEED, bc_spec, run_grid
from assay.metrics import episode_budget
from assay.policies import ExpertPolicy, PolicyContext
from assay.spec import PolicySpec, TaskSpec, content_hash
from assay.store import EpisodeRecord, Outcome, Store

RESULT_DIR = "learning/flywheel"  # assay.report.flywheel reads it there (the report may not import learning)
SCHEMA_VERSION = 1


def result_path(store: Store, name: str) -> Path:
    """Where the result document of design ``name`` goes."""
    return store.root / RESULT_DIR / f"{name}.json"


def relabel(store: Store, task: TaskSpec, failures: Sequence[EpisodeRecord]) -> list[Demo]:
    """DAgger relabels: for each failing episode, the expert's action on every state the policy visited."""
    expert = ExpertPolicy()
    demos = []
    for record in failures:
        source = episode_demo(store, record)
        expert.reset(PolicyContext(task, (record.seed,), (record.instruction or task.instruction,)))
        rows = len(source.observations)
        batch = {"state": source.observations, "instruction": [record.instruction or task.instruction] * rows,
                 "env_ids": np.zeros(rows, dtype=np.int64)}
        actions = np.asarray(expert.act(batch), dtype=np.float64)
        demos.append(Demo(f"relabel:{record.key}", record.task_id, record.task_hash, record.variant_key, record.seed,
                          "relabel", source.observations, actions, record.instruction))
    return demos


def _train(demos: Sequence[Demo], config: TrainConfig, folder: Path, arm: str) -> tuple[Path, str]:
    """(checkpoint path, version); an existing checkpoint for the same data and config is reused."""
    from assay.policies.bc import checkpoint_version

    data = [[d.key, len(d.actions), content_hash(d.actions.tolist(), 12)] for d in demos]
    key = content_hash({"config": [config.seed, config.epochs, list(config.hidden), config.batch_size, config.lr],
                        "data": data}, length=12)
    path = folder / f"{arm}-{key}.pt"
    if not path.is_file():
        train_bc(demos, config, path)
    return path, checkpoint_version(path)


def _frames(demos: Sequence[Demo]) -> int:
    return sum(len(d.actions) for d in demos)


def run_replicate(store: Store, design: FlywheelDesign, replicate: int, folder: Path,
                  progress: Callable[[str], None], workers: int) -> dict[str, Any]:
    """One replicate: pool, base, probe, mining, the arms' data and checkpoints, evaluation, leakage."""
    prefix, slice_region = f"fw-{design.name}-{design.tag()}-r{replicate}", design.slice.region()
    expert = [PolicySpec(name="expert", builtin="expert")]
    plan, pool = run_grid(store, f"{prefix}-pool", [design.task], expert, design.pool, DEMO_SEED + replicate,
                          design.horizon, workers)
    task = plan.tasks[0]
    base_records = select_base(pool, slice_region, design.base_demos)
    if len(base_records) < design.base_demos:
        raise AssayError(f"replicate {replicate}: the pool of {design.pool} holds only {len(base_records)} successful "
                         f"expert demos in the slice, {design.base_demos} asked; enlarge 'pool'")
    base_demos = [episode_demo(store, r) for r in base_records]
    train = TrainConfig(seed=replicate, epochs=design.epochs, hidden=design.hidden)
    base_path, base_version = _train(base_demos, train, folder, f"base-r{replicate}")
    progress(f"replicate {replicate}: base on {len(base_demos)} slice demos ({_frames(base_demos)} frames)")
    _, probe = run_grid(store, f"{prefix}-probe-{base_version[-12:]}", [design.task], [bc_spec("base", base_path)],
                        design.probe, PROBE_SEED + replicate, design.horizon, workers)
    mined, account = mine(probe)
    account["priorities"] = [p.advice for p in priorities(list(probe), {}, {})]
    used = {r.key for r in base_records}
    k = design.extra_demos
    extra = {"random": [episode_demo(store, r) for r in select_demos(pool, used, None, k)],
             "targeted": [episode_demo(store, r) for r in select_demos(pool, used, mined, k)],
             "recovery": relabel(store, task, probe_failures(probe)[:k]),
             "oracle": [episode_demo(store, r) for r in select_demos(pool, used, slice_region, k, outside=True)]}
    extra, budget = equal_budget(extra)
    progress(f"replicate {replicate}: mined {account['region']['label'] if account['region'] else 'nothing'} "
             f"({account['why']}); budget {budget['episodes']} episodes, {budget['frames']} frames per arm")
    checkpoints = {"base": (base_path, base_version)}
    for arm, demos in extra.items():
        checkpoints[arm] = _train(base_demos + demos, train, folder, f"{arm}-r{replicate}")
    versions = content_hash([checkpoints[a][1] for a in sorted(checkpoints)], length=8)
    _, evaluation = run_grid(store, f"{prefix}-eval-{versions}", [design.task],
                             [bc_spec(a, p) for a, (p, _) in checkpoints.items()], design.eval_episodes,
                             EVAL_SEED + replicate, design.horizon, workers)
    data = {"base": base_demos, **{a: base_demos + d for a, d in extra.items()}}
    leaks = {a: len(contaminated([r for r in evaluation if r.policy_name == a], [d.provenance() for d in data[a]]))
             for a in checkpoints}
    eval_scenes = {scene_of(r) for r in evaluation}
    overlap = len(eval_scenes & ({scene_of(r) for r in pool} | {scene_of(r) for r in probe}))
    outcomes: dict[str, dict[int, bool]] = {a: {} for a in checkpoints}
    inside: dict[int, bool] = {}
    for record in evaluation:
        if record.outcome is not Outcome.ERROR:
            outcomes[record.policy_name][record.seed] = record.outcome is Outcome.SUCCESS
        inside[record.seed] = slice_region.contains(initial(record))
    shared = set.intersection(*(set(o) for o in outcomes.values()))
    outcomes = {a: {s: o[s] for s in sorted(shared)} for a, o in outcomes.items()}
    scenes = [initial(r) for r in evaluation if r.policy_name == "base"]
    progress(f"replicate {replicate}: " + ", ".join(f"{a} {sum(o.values())}/{len(o)}" for a, o in outcomes.items()))
    agreement = region_agreement(mined, slice_region.complement(), scenes)
    return {"replicate": replicate, "mining": account, "agreement": agreement,
            "budget": budget, "base": {"episodes": len(base_demos), "frames": _frames(base_demos)},
            "checkpoints": {a: {"path": str(p), "version": v} for a, (p, v) in checkpoints.items()},
            "campaigns": {"pool": f"{prefix}-pool", "probe": f"{prefix}-probe-{base_version[-12:]}",
                          "eval": f"{prefix}-eval-{versions}"},
            "data": {a: {"episodes": len(d), "frames": _frames(d)} for a, d in data.items()},
            "contaminated": leaks, "scene_overlap": overlap,
            "outcomes": {a: {str(s): v for s, v in o.items()} for a, o in outcomes.items()},
            "inside": {str(s): v for s, v in inside.items()}}


def power_plan(design: FlywheelDesign) -> dict[str, Any]:
    """What ``assay budget --delta D --power 0.8 --paired --baseline B`` answers, against the design's pairs."""
    budget = episode_budget(design.delta, 0.8, baseline=design.power_baseline, paired=True)
    pairs = design.eval_episodes * design.replicates
    return {**budget.to_dict(), "planned_pairs": pairs, "enough": pairs >= budget.episodes_per_cell}


def run_design(store: Store, design: FlywheelDesign, workers: int = 1,
               progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Every replicate, the analysis, and the result document (also written to the store)."""
    folder = store.root / RESULT_DIR / f"{design.name}-{design.tag()}"
    folder.mkdir(parents=True, exist_ok=True)
    plan = power_plan(design)
    progress(f"power plan: {plan['episodes_per_cell']} pairs detect {design.delta} at power 0.8 "
             f"({plan['formula']}); the design has {plan['planned_pairs']}")
    numbers = range(design.first_replicate, design.first_replicate + design.replicates)
    replicates = [run_replicate(store, design, r, folder, progress, workers) for r in numbers]
    parsed = [{a: {int(s): v for s, v in o.items()} for a, o in rep["outcomes"].items()} for rep in replicates]
    inside = [{int(s): v for s, v in rep["inside"].items()} for rep in replicates]
    analysis = analyse(parsed, design.bootstrap)
    agreement = [rep["agreement"] for rep in replicates]
    document = {"schema_version": SCHEMA_VERSION, "design": design.model_dump(by_alias=True), "tag": design.tag(),
                "power": plan, "analysis": analysis, "by_region": by_region(parsed, inside),
                "mining": {"precision": _mean([a["precision"] for a in agreement]),
                           "recall": _mean([a["recall"] for a in agreement])},
                "leakage": {"contaminated": sum(sum(rep["contaminated"].values()) for rep in replicates),
                            "scene_overlap": sum(rep["scene_overlap"] for rep in replicates)},
                "replicates": replicates}
    path = result_path(store, design.name)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(document, indent=1, sort_keys=True))
    os.replace(tmp, path)
    return document


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None
