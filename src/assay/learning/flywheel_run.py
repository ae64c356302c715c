"""Run a flywheel design end to end, resumably: ``assay flywheel --design FILE.yaml``.

Per replicate ``r`` (each its own demo, probe and evaluation seed streams: campaign seeds
``DEMO_SEED + r``, ``PROBE_SEED + r``, ``EVAL_SEED + r``):

1. the expert runs the demo pool (``pool`` episodes in each of the design's variants); the base
   trains on the pool's first successes inside the slice (region and/or variants);
2. the base runs the probe over every variant; failure mining
   (:func:`assay.learning.flywheel_design.mine`) finds the failure-heavy variants and region from
   the probe's records; the recovery and ponr arms replay each failure in its own variant
   (:class:`assay.failures.replay.Replayers`); the random, targeted and oracle arms draw by one blind
   rule (seeded by ``DEMO_SEED + r``) from the pool episodes after the base's last one, each inside its
   region (:func:`assay.learning.flywheel_design.draw_demos`);
3. each extra arm's data is selected (:mod:`assay.learning.flywheel_design`), cut to an equal
   budget in episodes and frames (the primary pair, targeted and random, on its own; the secondary arms
   among themselves), and trained (same training seed ``r`` for every arm);
4. every arm runs the same held-out evaluation seeds in every variant (a scene is ``variant|seed``;
   the secondary endpoints include each variant's success per arm); the leakage check proves that no evaluation
   scene is in any arm's data, and that evaluation, probe and pool scenes are disjoint.

Every campaign is an ordinary resumable campaign in the store; a checkpoint file is named by the
hash of its data and training config and reused when it exists, so a rerun retrains nothing and
reruns no episode. The result document goes to ``STORE/learning/flywheel/NAME.json`` (the report's
flywheel section reads it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from assay.errors import AssayError, ReplayMismatch
from assay.failures.priorities import priorities
from assay.failures.replay import Replayers
from assay.learning.bc import TrainConfig, train_bc
from assay.learning.data import Demo, episode_demo
from assay.learning.flywheel import mine_recovery
from assay.learning.flywheel_design import (
    EXTRA_ARMS,
    FlywheelDesign,
    Where,
    agreement,
    budget_shortfall,
    draw_demos,
    equal_budget,
    mine,
    probe_failures,
    scene_primary_refusal,
    select_base,
)
from assay.learning.flywheel_stats import analyse, by_region, by_variant, ttest_power, ttest_replicates
from assay.learning.leakage import contaminated, scene_of
from assay.learning.pixel_bc import PixelTrainConfig, train_pixel_bc
from assay.learning.runs import DEMO_SEED, EVAL_SEED, PROBE_SEED, bc_spec, run_grid
from assay.metrics import episode_budget
from assay.metrics.budget import mcnemar_power
from assay.policies import ExpertPolicy, PolicyContext
from assay.run import CampaignPlan, phase
from assay.sim.factors import resolve_variant
from assay.spec import CameraSpec, PolicySpec, content_hash
from assay.store import EpisodeRecord, Outcome, Store, write_blob

RESULT_DIR = "learning/flywheel"  # assay.report.flywheel reads it there (the report may not import learning)
SCHEMA_VERSION = 4  # 4: the primary as recorded when the run started (primary.changed_after_run, design_hash),
# the power plan in the primary's unit with the gain ratio's ceiling; 2: variants (outcomes keyed by
# 'variant|seed', by_variant), the ponr arm; 3: blind draws for
# every arm, the primary pair's own budget (budget.secondary), the declared primary, gain-ratio intervals with
# unbounded sides, in_target in each arm's composition


def result_path(store: Store, name: str) -> Path:
    """Where the result document of design ``name`` goes."""
    return store.root / RESULT_DIR / f"{name}.json"


def relabel(store: Store, replayers: Replayers, failures: Sequence[EpisodeRecord]) -> list[Demo]:
    """DAgger relabels: each failing episode replayed in its own variant (the replay must reproduce the
    recording, :class:`ReplayMismatch` otherwise), and the expert's action on every state the policy visited."""
    expert = ExpertPolicy()
    demos = []
    for record in failures:
        source = episode_demo(store, record)
        replayer = replayers.for_record(record)
        check = replayer.verify(record.seed, source.actions, source.observations)
        if not check.ok:
            raise ReplayMismatch(f"episode {record.key} (variant {record.variant_name}): {check.describe()}; "
                                 "its states cannot be relabelled")
        task = replayer.task
        expert.reset(PolicyContext(task, (record.seed,), (record.instruction or task.instruction,)))
        rows = len(source.observations)
        batch = {"state": source.observations, "instruction": [record.instruction or task.instruction] * rows,
                 "env_ids": np.zeros(rows, dtype=np.int64)}
        actions = np.asarray(expert.act(batch), dtype=np.float64)
        demos.append(Demo(f"relabel:{record.key}", record.task_id, record.task_hash, record.variant_key, record.seed,
                          "relabel", source.observations, actions, record.instruction))
    return demos


def training_slice(design: FlywheelDesign, plan: CampaignPlan) -> Where:
    """The design's slice over the campaign's resolved variants (their keys: what records carry)."""
    task, requests = plan.tasks[0], design.slice.variants
    if requests is None:
        return Where(design.slice.region())
    variants = [resolve_variant(dict(request), task) for request in requests]
    return Where(design.slice.region(), frozenset(v.key for v in variants), tuple(v.name for v in variants))


def scene_id(record: EpisodeRecord) -> str:
    """One evaluation scene of a replicate: its variant and seed (every variant runs the same seeds)."""
    return f"{record.variant_name}|{record.seed}"


@dataclass(frozen=True)
class Learner:
    """How a design's arms learn and run: state BC (``bc``) or pixel BC (``pixel-bc`` on the recorded front
    camera); a checkpoint for the same data and config is reused, never retrained."""

    store: Store
    design: FlywheelDesign
    seed: int  # the training seed: the replicate

    @property
    def cameras(self) -> tuple[CameraSpec, ...]:
        """The camera every campaign records (none for state BC)."""
        size = self.design.camera_size
        return () if self.design.obs == "state" else (CameraSpec(name="front", width=size, height=size),)

    def spec(self, name: str, path: Path) -> PolicySpec:
        """The policy that runs a checkpoint."""
        if self.design.obs == "state":
            return bc_spec(name, path)
        return PolicySpec(name=name, builtin="pixel-bc", params={"path": str(Path(path).resolve())})

    def train(self, demos: Sequence[Demo], folder: Path, arm: str) -> tuple[Path, str]:
        """(checkpoint path, version) of ``demos`` trained with the design's settings."""
        from assay.policies.bc import CHECKPOINT_FORMAT, checkpoint_version

        design = self.design
        config: TrainConfig | PixelTrainConfig
        described: object  # what of the config names the checkpoint (a state design's as before pixel designs)
        if design.obs == "state":
            config = TrainConfig(seed=self.seed, epochs=design.epochs, hidden=design.hidden, inputs=design.inputs)
            described = [config.seed, config.epochs, list(config.hidden), config.batch_size, config.lr,
                         config.inputs, CHECKPOINT_FORMAT]  # a checkpoint of another trainer is not reused
        else:
            config = PixelTrainConfig(seed=self.seed, epochs=design.epochs, hidden=design.hidden,
                                      image_size=design.camera_size)
            described = {"obs": design.obs, **asdict(config)}
        data = [[d.key, len(d.actions), content_hash(d.actions.tolist(), 12)] for d in demos]
        key = content_hash({"config": described, "data": data}, length=12)
        path = folder / f"{arm}-{key}.pt"
        if not path.is_file():
            phase(f"training {arm} on {len(demos)} demos ({_frames(demos)} frames)")
            if isinstance(config, PixelTrainConfig):
                train_pixel_bc(self.store, demos, config, path)
            else:
                train_bc(demos, config, path)
        return path, checkpoint_version(path)


def _frames(demos: Sequence[Demo]) -> int:
    return sum(len(d.actions) for d in demos)


def _arms_data(store: Store, design: FlywheelDesign, plan: CampaignPlan, pool: Sequence[EpisodeRecord],
               probe: Sequence[EpisodeRecord], base: Sequence[EpisodeRecord], target: Where,
               training: Where, seed: int) -> dict[str, list[Demo]]:
    """Every extra arm's data before the equal budget cut (see :mod:`assay.learning.flywheel_design`)."""
    k = design.extra_demos
    failures = probe_failures(probe)
    arms = {"random": [episode_demo(store, r) for r in draw_demos(pool, base, k, seed)],
            "targeted": [episode_demo(store, r) for r in draw_demos(pool, base, k, seed, target)]}
    if design.recovery or design.ponr:
        with Replayers(plan.tasks[0]) as replayers:  # every failure replayed in its own variant
            if design.recovery:
                arms["recovery"] = relabel(store, replayers, failures[:k])
            if design.ponr:
                arms["ponr"] = mine_recovery(store, replayers, failures, k)[0]
    arms["oracle"] = [episode_demo(store, r) for r in draw_demos(pool, base, k, seed, training, outside=True)]
    return {arm: arms[arm] for arm in EXTRA_ARMS if arm in arms}


def run_replicate(store: Store, design: FlywheelDesign, replicate: int, folder: Path,
                  progress: Callable[[str], None], workers: int) -> dict[str, Any]:
    """One replicate: pool, base, probe, mining, the arms' data and checkpoints, evaluation, leakage."""
    prefix, variants = f"fw-{design.name}-{design.tag()}-r{replicate}", design.variants
    expert = [PolicySpec(name="expert", builtin="expert")]
    learner = Learner(store, design, replicate)
    cameras = learner.cameras
    plan, pool = run_grid(store, f"{prefix}-pool", [design.task], expert, design.pool, DEMO_SEED + replicate,
                          design.horizon, workers, cameras, variants)
    training = training_slice(design, plan)
    base_records = select_base(pool, training, design.base_demos)
    if len(base_records) < design.base_demos:
        raise AssayError(f"replicate {replicate}: the pool of {design.pool} holds only {len(base_records)} successful "
                         f"expert demos in the slice, {design.base_demos} asked; enlarge 'pool'")
    base_demos = [episode_demo(store, r) for r in base_records]
    base_path, base_version = learner.train(base_demos, folder, f"base-r{replicate}")
    progress(f"replicate {replicate}: base on {len(base_demos)} slice demos ({_frames(base_demos)} frames)")
    _, probe = run_grid(store, f"{prefix}-probe-{base_version[-12:]}", [design.task],
                        [learner.spec("base", base_path)], design.probe, PROBE_SEED + replicate, design.horizon,
                        workers, cameras, variants)
    target, account = mine(probe)
    account["priorities"] = [p.advice for p in priorities(list(probe), {}, {})]
    extra, budget = equal_budget(_arms_data(store, design, plan, pool, probe, base_records, target, training,
                                            DEMO_SEED + replicate))
    secondary = budget["secondary"]
    progress(f"replicate {replicate}: mined {target.label} ({account['why']}); budget {budget['episodes']} episodes, "
             f"{budget['frames']} frames for targeted and random"
             + ("" if secondary is None else f", {secondary['episodes']} episodes, {secondary['frames']} frames for "
                f"the secondary arms" + "".join(f" ({a} found none)" for a in secondary["empty"])))
    shortfall = budget_shortfall(budget, design.extra_demos)
    if shortfall is not None:
        progress(f"replicate {replicate}: {shortfall}")
    checkpoints = {"base": (base_path, base_version)}
    for arm, demos in extra.items():
        checkpoints[arm] = learner.train(base_demos + demos, folder, f"{arm}-r{replicate}")
    versions = content_hash([checkpoints[a][1] for a in sorted(checkpoints)], length=8)
    _, evaluation = run_grid(store, f"{prefix}-eval-{versions}", [design.task],
                             [learner.spec(a, p) for a, (p, _) in checkpoints.items()], design.eval_episodes,
                             EVAL_SEED + replicate, design.horizon, workers, cameras, variants)
    data = {"base": base_demos, **{a: base_demos + d for a, d in extra.items()}}
    sources = {**{r.key: r for r in pool}, **{r.key: r for r in probe}}
    leaks = {a: len(contaminated([r for r in evaluation if r.policy_name == a], [d.provenance() for d in data[a]]))
             for a in checkpoints}
    eval_scenes = {scene_of(r) for r in evaluation}
    overlap = len(eval_scenes & ({scene_of(r) for r in pool} | {scene_of(r) for r in probe}))
    outcomes: dict[str, dict[str, bool]] = {a: {} for a in checkpoints}
    inside: dict[str, bool] = {}
    variant_of: dict[str, str] = {}
    for record in evaluation:
        scene = scene_id(record)
        if record.outcome is not Outcome.ERROR:
            outcomes[record.policy_name][scene] = record.outcome is Outcome.SUCCESS
        inside[scene], variant_of[scene] = training.contains(record), record.variant_name
    shared = set.intersection(*(set(o) for o in outcomes.values()))
    outcomes = {a: {s: o[s] for s in sorted(shared)} for a, o in outcomes.items()}
    scenes = [r for r in evaluation if r.policy_name == "base"]
    progress(f"replicate {replicate}: " + ", ".join(f"{a} {sum(o.values())}/{len(o)}" for a, o in outcomes.items()))
    return {"replicate": replicate, "mining": account,
            "agreement": agreement([target.contains(r) for r in scenes], [not training.contains(r) for r in scenes]),
            "budget": budget, "base": {"episodes": len(base_demos), "frames": _frames(base_demos)},
            "checkpoints": {a: {"path": str(p), "version": v} for a, (p, v) in checkpoints.items()},
            "campaigns": {"pool": f"{prefix}-pool", "probe": f"{prefix}-probe-{base_version[-12:]}",
                          "eval": f"{prefix}-eval-{versions}"},
            "data": {a: {"episodes": len(d), "frames": _frames(d)} for a, d in data.items()},
            "composition": {a: composition(d, sources, training, target) for a, d in extra.items()},
            "shortfall": shortfall,
            "contaminated": leaks, "scene_overlap": overlap, "outcomes": outcomes, "inside": inside,
            "variant_of": variant_of}


def composition(demos: Sequence[Demo], sources: dict[str, EpisodeRecord], training: Where,
                target: Where) -> dict[str, Any]:
    """Where an arm's extra demos came from: per variant, how many lie outside the training slice and how many
    inside the mined target (a relabel counts as its failure's episode; a demo with no episode in the pool or
    probe, a PoNR recovery demo, counts as ``unresolved`` for both)."""
    names = {r.variant_key: r.variant_name for r in sources.values()}
    variants: dict[str, int] = {}
    outside = in_target = unresolved = 0
    for demo in demos:
        name = names.get(demo.variant_key, demo.variant_key)
        variants[name] = variants.get(name, 0) + 1
        record = sources.get(demo.key.removeprefix("relabel:"))
        if record is None:
            unresolved += 1
        else:
            outside += not training.contains(record)
            in_target += target.contains(record)
    return {"variants": dict(sorted(variants.items())), "outside_slice": outside, "in_target": in_target,
            "unresolved": unresolved}


def _replicate_plan(design: FlywheelDesign, effect: float) -> dict[str, Any]:
    """The t test over the design's replicates at ``effect``: its power and the replicates 0.8 needs (noncentral t,
    sd ``power_sd``); without ``power_sd``, what is missing."""
    alpha = design.primary.alpha
    if design.power_sd is None:
        return {"sd": None, "effect": effect, "alpha": alpha, "replicates": design.replicates, "power": None,
                "missing": "power_sd (the sd of the replicate differences a pilot showed): the replicate-level power "
                           "cannot be planned without it"}
    return {"sd": design.power_sd, "effect": effect, "alpha": alpha, "replicates": design.replicates,
            "power": ttest_power(design.replicates, effect, design.power_sd, alpha),
            "replicates_for_0.8": ttest_replicates(effect, design.power_sd, 0.8, alpha)}


def _ratio_plan(design: FlywheelDesign, pairs: int) -> dict[str, Any] | None:
    """The largest gain ratio the design can reach, (1 − base) / (random − base) (targeted at a rate of 1), and the
    declared primary test's power at ``goal_ratio`` (the difference (goal − 1)(random − base)); None without a goal.
    """
    if design.goal_ratio is None:
        return None
    random = design.power_baseline
    if design.power_base is None:
        return {"goal": design.goal_ratio, "random": random, "base": None, "ceiling": None, "reachable": None,
                "effect": None, "power": None,
                "missing": "power_base (the base arm's expected rate): the ceiling and the power cannot be stated"}
    base = design.power_base
    ceiling = (1.0 - base) / (random - base)
    effect = (design.goal_ratio - 1.0) * (random - base)
    reachable = design.goal_ratio <= ceiling + 1e-12
    power: float | None = None
    if reachable and design.primary.test == "ttest":
        power = _replicate_plan(design, effect)["power"]
    elif reachable:
        targeted = random + effect  # outcomes independent on a scene: the pessimistic discordance
        power = mcnemar_power(pairs, targeted * (1 - random), random * (1 - targeted), design.primary.alpha)
    return {"goal": design.goal_ratio, "random": random, "base": base, "ceiling": ceiling, "reachable": reachable,
            "effect": effect, "power": power}


def power_plan(design: FlywheelDesign) -> dict[str, Any]:
    """The plan in the declared primary's unit (``unit``, ``primary_plan``): for the replicate t test, its power over
    the design's replicates at ``delta`` (``power_sd`` needed); for scene McNemar (one replicate), what ``assay
    budget --delta D --power 0.8 --paired --baseline B [--discordance Q]`` answers against the design's pairs.
    The pooled-scene budget is kept beside it (its fields at the top level; secondary under a t test), and with
    ``goal_ratio`` the ``gain_ratio`` plan: the largest ratio the design can reach and the power at the goal."""
    budget = episode_budget(design.delta, 0.8, baseline=design.power_baseline, paired=True,
                            discordance=design.power_discordance)
    pairs = design.eval_episodes * len(design.variants) * design.replicates
    plan: dict[str, Any] = {**budget.to_dict(), "planned_pairs": pairs, "enough": pairs >= budget.episodes_per_cell,
                            "unit": design.primary.unit}
    replicate = _replicate_plan(design, design.delta)
    if design.power_sd is not None:
        plan["replicate_plan"] = replicate
    plan["primary_plan"] = replicate if design.primary.test == "ttest" else {
        "pairs_for_0.8": budget.episodes_per_cell, "planned_pairs": pairs, "effect": design.delta,
        "power": mcnemar_power(pairs, *_discordant(design.power_baseline, design.delta), design.primary.alpha)}
    plan["gain_ratio"] = _ratio_plan(design, pairs)
    return plan


def _discordant(random: float, delta: float) -> tuple[float, float]:
    targeted = min(1.0, random + delta)
    return targeted * (1 - random), random * (1 - targeted)


def plan_line(design: FlywheelDesign, plan: dict[str, Any]) -> str:
    """The power plan in one line, in the declared primary's unit."""
    primary = plan["primary_plan"]
    if plan["unit"] == "replicate":
        head = (f"power plan (primary unit: replicates): {primary['missing']}" if primary["power"] is None else
                f"power plan (primary unit: replicates): t test power {primary['power']:.2f} for {design.delta} at sd "
                f"{design.power_sd} over {design.replicates} replicates ({primary['replicates_for_0.8']} for 0.8)")
    else:
        head = (f"power plan (primary unit: scenes): McNemar power {primary['power']:.2f} for {design.delta} over "
                f"{plan['planned_pairs']} pairs ({plan['episodes_per_cell']} for 0.8, {plan['formula']})")
    ratio = plan.get("gain_ratio")
    if ratio is None:
        return head
    if ratio["ceiling"] is None:
        return f"{head}; gain ratio goal {ratio['goal']}: {ratio['missing']}"
    reach = (f"the largest gain ratio this design can reach is {ratio['ceiling']:.2f} (random {ratio['random']}, base "
             f"{ratio['base']}, targeted at 1)")
    if not ratio["reachable"]:
        return f"{head}; {reach}: the goal {ratio['goal']} is out of reach"
    power = "not planned (power_sd missing)" if ratio["power"] is None else f"{ratio['power']:.2f}"
    return f"{head}; {reach}; power at the goal ratio {ratio['goal']} (difference {ratio['effect']:.3f}): {power}"


DECLARATION = "declared.json"


def declare(folder: Path, design: FlywheelDesign) -> dict[str, Any]:
    """The primary endpoint as recorded when this design's run first started (written now, exclusively, when no
    run has started: a second process finds the first one's record)."""
    path = folder / DECLARATION
    record = {"primary": design.primary.model_dump(), "design_hash": design.design_hash(), "tag": design.tag(),
              "recorded_at": datetime.now(UTC).isoformat(timespec="seconds")}
    try:
        with path.open("x") as handle:
            json.dump(record, handle, indent=1, sort_keys=True)
        return record
    except FileExistsError:
        recorded: dict[str, Any] = json.loads(path.read_text())
        return recorded


def primary_change(recorded: dict[str, Any], design: FlywheelDesign) -> dict[str, Any] | None:
    """None when the design's primary is the one recorded at the run's start; else what changed."""
    if recorded["primary"] == design.primary.model_dump():
        return None
    return {"recorded": recorded["primary"], "now": design.primary.model_dump(),
            "recorded_at": recorded.get("recorded_at"), "recorded_hash": recorded.get("design_hash"),
            "hash_now": design.design_hash()}


def run_design(store: Store, design: FlywheelDesign, workers: int = 1,
               progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Every replicate, the analysis, and the result document (also written to the store)."""
    folder = store.root / RESULT_DIR / f"{design.name}-{design.tag()}"
    folder.mkdir(parents=True, exist_ok=True)
    refusal = scene_primary_refusal(design)
    if refusal is not None and not (folder / DECLARATION).exists():  # a run recorded before the rule keeps going
        raise AssayError(refusal)
    recorded = declare(folder, design)
    changed = primary_change(recorded, design)
    if changed is not None:
        progress(f"primary changed after the run: recorded {changed['recorded']} at {changed['recorded_at']}, the "
                 f"design now says {changed['now']}; the recorded primary is analysed as primary")
    plan = power_plan(design)
    progress(plan_line(design, plan))
    numbers = range(design.first_replicate, design.first_replicate + design.replicates)
    replicates = [run_replicate(store, design, r, folder, progress, workers) for r in numbers]
    parsed = [rep["outcomes"] for rep in replicates]
    analysis = analyse(parsed, design.bootstrap, primary=recorded["primary"])
    analysis["primary"]["changed_after_run"] = changed
    analysis["primary"]["design_hash"] = recorded.get("design_hash")
    agreement = [rep["agreement"] for rep in replicates]
    document = {"schema_version": SCHEMA_VERSION, "design": design.model_dump(by_alias=True), "tag": design.tag(),
                "power": plan, "analysis": analysis,
                "by_region": by_region(parsed, [rep["inside"] for rep in replicates]),
                "by_variant": by_variant(parsed, [rep["variant_of"] for rep in replicates]),
                "mining": {"precision": _mean([a["precision"] for a in agreement]),
                           "recall": _mean([a["recall"] for a in agreement])},
                "leakage": {"contaminated": sum(sum(rep["contaminated"].values()) for rep in replicates),
                            "scene_overlap": sum(rep["scene_overlap"] for rep in replicates)},
                "replicates": replicates}
    path = result_path(store, design.name)
    write_blob(path.parent, path.name, json.dumps(document, indent=1, sort_keys=True).encode())
    return document


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None
