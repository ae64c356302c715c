"""The flywheel experiment: do targeted recovery demos improve a policy faster than more random demos?

For each training seed: (1) train BC on the first ``base`` expert demos; (2) run
it on a probe seed stream, find each failure's point of no return and collect up
to ``extra`` recovery demos (``assay.failures``: the expert takes over just before
it and succeeds); (3) *flywheel*: retrain on base + those recovery demos;
*control*: retrain on base + the same number of fresh expert demos (the next
episodes of the demo campaign); (4) evaluate base, control and flywheel on
held-out seeds (a third seed stream; the leakage check proves no evaluation
episode is in any checkpoint's data), paired by seed. The gain ratio is
(flywheel − base) / (control − base); it is ``None`` when the control gained
nothing. Recovery demos are partial episodes, so their frame count is reported
beside the control's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from assay.errors import AssayError
from assay.failures.ponr import find_ponr
from assay.failures.recovery import recovery_demos
from assay.failures.replay import Replayers
from assay.learning.bc import TrainConfig, train_bc
from assay.learning.data import Demo, episode_demo, recovery_demo
from assay.learning.leakage import contaminated
from assay.learning.runs import DEMO_SEED, EVAL_SEED, PROBE_SEED, Score, bc_spec, run_grid, score
from assay.metrics import mcnemar_exact
from assay.spec import PolicySpec, content_hash
from assay.store import EpisodeRecord, Outcome, Store, step_matrix


@dataclass(frozen=True)
class FlywheelConfig:
    """The recovery-demo flywheel on one task: demo counts, probe and evaluation episodes, seeds and training epochs."""

    task: str
    base: int = 20
    extra: int = 10
    probe: int = 20
    eval_episodes: int = 50
    seeds: tuple[int, ...] = (0,)
    epochs: int = 100
    horizon: int | None = None
    workers: int = 1

    def __post_init__(self) -> None:
        if min(self.base, self.extra, self.probe, self.eval_episodes) < 1 or not self.seeds:
            raise AssayError(
                "flywheel: --base, --extra, --probe and --eval must be at least 1, and give one seed or more")

    def tag(self) -> str:
        """A short hash naming the experiment's campaigns (what changes the episodes they hold)."""
        return content_hash({"task": self.task, "base": self.base, "extra": self.extra, "probe": self.probe,
                             "horizon": self.horizon}, length=8)


@dataclass
class SeedResult:
    """One seed's result: base, control (fresh demos) and flywheel (recovery demos) scores, with their data."""

    seed: int
    base: Score
    control: Score
    flywheel: Score
    recovery_demos: int
    recovery_frames: int
    control_frames: int
    failures_mined: int
    mcnemar_p: float  # flywheel vs control, exact, on the paired evaluation seeds
    contaminated: dict[str, int] = field(default_factory=dict)
    flywheel_only: int = 0  # evaluation seeds the flywheel solved and the control did not
    control_only: int = 0

    @property
    def gain_ratio(self) -> float | None:
        """The flywheel's gain over the control's, both from the base (None when the control gained nothing)."""
        control_gain = self.control.rate - self.base.rate
        return None if control_gain <= 0 else (self.flywheel.rate - self.base.rate) / control_gain

    def to_dict(self) -> dict[str, object]:
        """The result as a JSON-ready dict."""
        return {"seed": self.seed, "base": self.base.to_dict(), "control": self.control.to_dict(),
                "flywheel": self.flywheel.to_dict(), "recovery_demos": self.recovery_demos,
                "recovery_frames": self.recovery_frames, "control_frames": self.control_frames,
                "failures_mined": self.failures_mined, "mcnemar_p": self.mcnemar_p,
                "gain_ratio": self.gain_ratio, "contaminated": self.contaminated,
                "flywheel_only": self.flywheel_only, "control_only": self.control_only}


def pooled(results: list[SeedResult]) -> dict[str, object]:
    """Every training seed's evaluation pairs together: successes per arm and McNemar's exact test on all the
    discordant pairs (each (training seed, evaluation seed) pair is one paired observation)."""
    fly_only, control_only = sum(r.flywheel_only for r in results), sum(r.control_only for r in results)
    return {"pairs": sum(r.flywheel.trials for r in results),
            "base": sum(r.base.successes for r in results), "control": sum(r.control.successes for r in results),
            "flywheel": sum(r.flywheel.successes for r in results), "flywheel_only": fly_only,
            "control_only": control_only, "mcnemar_p": mcnemar_exact(fly_only, control_only)}


def _expert_demos(store: Store, config: FlywheelConfig) -> tuple[list[Demo], list[Demo]]:
    """(base demos: successes among the first ``base`` episodes, fresh demos after them, in index order)."""
    name = f"flywheel-{config.tag()}-expert"
    _, records = run_grid(store, name, [config.task], [PolicySpec(name="expert", builtin="expert")],
                          config.base + 2 * config.extra, DEMO_SEED, config.horizon, config.workers)
    ok = sorted((r for r in records if r.outcome is Outcome.SUCCESS), key=lambda r: r.episode_index)
    return ([episode_demo(store, r) for r in ok if r.episode_index < config.base],
            [episode_demo(store, r) for r in ok if r.episode_index >= config.base])


def mine_recovery(
    store: Store, replayers: Replayers, failures: list[EpisodeRecord], limit: int
) -> tuple[list[Demo], int]:
    """Up to ``limit`` recovery demos, spread over failures: round-robin over the failures (in order) whose
    point of no return is recoverable, searching at most ``limit`` of them; and how many were searched.
    Each failure is replayed in its own variant (``replayers.for_record``)."""
    per_failure: list[list[str]] = []
    searched = 0
    for record in failures:
        if sum(len(paths) > 0 for paths in per_failure) >= limit:
            break
        searched += 1
        replayer = replayers.for_record(record)
        table = store.steps(record)
        actions = step_matrix(table, "action", np.float64)
        states = step_matrix(table, "observation.state", np.float64)
        ponr = find_ponr(replayer, record.key, record.seed, actions, record.instruction, states=states)
        per_failure.append(
            recovery_demos(replayer, store.root, ponr, record.seed, actions, instruction=record.instruction))
    chosen: list[str] = []
    for rank in range(max((len(p) for p in per_failure), default=0)):
        chosen += [paths[rank] for paths in per_failure if rank < len(paths)]
    return [recovery_demo(store, store.root / relpath) for relpath in chosen[:limit]], searched


def run_flywheel(store: Store, config: FlywheelConfig, out_dir: Path,
                 progress: Callable[[str], None] = lambda _: None) -> list[SeedResult]:
    """Per seed: train the base, probe it, mine recovery demos from its failures, train flywheel and control, evaluate.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = config.tag()
    base_demos, fresh = _expert_demos(store, config)
    if not base_demos:
        raise AssayError(f"the expert succeeded in none of the {config.base} base episodes of {config.task}")
    progress(f"expert demos: {len(base_demos)} base, {len(fresh)} fresh")
    results = []
    for seed in config.seeds:
        train = TrainConfig(seed=seed, epochs=config.epochs)
        base = train_bc(base_demos, train, out_dir / f"base-s{seed}.pt")
        progress(f"seed {seed}: base trained ({base.frames} frames, loss {base.final_loss:.4f})")
        plan, probe = run_grid(store, f"flywheel-{tag}-probe-s{seed}-{base.version[-12:]}", [config.task],
                               [bc_spec("base", Path(base.path))], config.probe, PROBE_SEED, config.horizon,
                               config.workers)
        failures = [r for r in probe if r.outcome in (Outcome.FAILURE, Outcome.TIMEOUT)]
        with Replayers(plan.tasks[0]) as replayers:  # each failure in the variant it ran under
            recovery, searched = mine_recovery(store, replayers, failures, config.extra)
        progress(f"seed {seed}: {len(failures)} probe failures, {len(recovery)} recovery demos from {searched}")
        control_extra = fresh[:len(recovery) if recovery else config.extra]  # same count: a fair control
        flywheel = train_bc(base_demos + recovery, train, out_dir / f"flywheel-s{seed}.pt")
        control = train_bc(base_demos + control_extra, train, out_dir / f"control-s{seed}.pt")
        policies = [bc_spec("base", Path(base.path)), bc_spec("control", Path(control.path)),
                    bc_spec("flywheel", Path(flywheel.path))]
        checkpoints = content_hash([base.version, control.version, flywheel.version], length=8)
        _, evaluation = run_grid(store, f"flywheel-{tag}-eval-s{seed}-{checkpoints}",
                                 [config.task], policies, config.eval_episodes, EVAL_SEED, config.horizon,
                                 config.workers)
        provenance = {"base": [d.provenance() for d in base_demos],
                      "control": [d.provenance() for d in base_demos + control_extra],
                      "flywheel": [d.provenance() for d in base_demos + recovery]}
        leaks = {name: len(contaminated([r for r in evaluation if r.policy_name == name], prov))
                 for name, prov in provenance.items()}
        outcome = {(r.policy_name, r.seed): r.outcome is Outcome.SUCCESS for r in evaluation}
        seeds = sorted({r.seed for r in evaluation})
        fly_only = sum(outcome[("flywheel", s)] and not outcome[("control", s)] for s in seeds)
        control_only = sum(outcome[("control", s)] and not outcome[("flywheel", s)] for s in seeds)
        results.append(SeedResult(seed, score(evaluation, "base"), score(evaluation, "control"),
                                  score(evaluation, "flywheel"), len(recovery),
                                  sum(len(d.actions) for d in recovery), sum(len(d.actions) for d in control_extra),
                                  searched, mcnemar_exact(fly_only, control_only), leaks, fly_only, control_only))
        progress(f"seed {seed}: evaluated on {len(seeds)} held-out seeds")
    return results
