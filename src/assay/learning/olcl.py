"""Open-loop vs closed-loop: does action error on held-out demos rank checkpoints like success does?

Trains one BC checkpoint per (demo count, epochs) pair (checkpoints of different
quality), then scores each two ways: open-loop action MSE on held-out expert demos
(``assay.metrics.openloop``: the policy sees the recorded states) and closed-loop
success on held-out seeds (a campaign). ``rank_agreement`` gives Kendall τ and MMRV
of the two orders; ``misranked`` lists the pairs the open-loop order gets wrong
(lower MSE, strictly lower success).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np

from assay.errors import AssayError
from assay.learning.bc import TrainConfig, train_bc
from assay.learning.data import episode_demo
from assay.learning.runs import DEMO_SEED, EVAL_SEED, bc_spec, run_grid, score
from assay.metrics import load_trajectories, openloop_table, rank_agreement
from assay.metrics.openloop import OpenLoopRow, Trajectory, closed_outcomes
from assay.policies.bc import BCPolicy
from assay.sim import default_registry
from assay.spec import PolicySpec, content_hash
from assay.store import Outcome, Store

HELDOUT_SEED = 4000  # expert demos for the open-loop score: neither training data nor closed-loop seeds


@dataclass(frozen=True)
class OLCLConfig:
    """The open- vs closed-loop experiment: demo counts and epochs to train over, held-out and evaluation episodes."""

    task: str
    sizes: tuple[int, ...] = (2, 5, 10, 20)
    epochs: tuple[int, ...] = (5, 50)
    heldout: int = 10
    eval_episodes: int = 30
    seed: int = 0
    horizon: int | None = None
    workers: int = 1

    def __post_init__(self) -> None:
        if len(self.sizes) * len(self.epochs) < 5:
            raise AssayError(f"open- vs closed-loop needs at least 5 checkpoints; {len(self.sizes)} sizes x "
                             f"{len(self.epochs)} epochs give {len(self.sizes) * len(self.epochs)}")
        if min(*self.sizes, *self.epochs, self.heldout, self.eval_episodes) < 1:
            raise AssayError("sizes, epochs, --heldout and --eval must be at least 1")

    def tag(self) -> str:
        """A short hash naming the experiment's campaigns."""
        return content_hash({"task": self.task, "horizon": self.horizon}, length=8)


@dataclass(frozen=True)
class OLCLResult:
    """Whether open-loop error ranks the checkpoints as closed-loop success does (Kendall, MMRV, misranked pairs)."""

    checkpoints: tuple[str, ...]
    closed: dict[str, dict[str, object]]
    openloop: tuple[OpenLoopRow, ...]
    kendall: float | None
    kendall_reason: str | None
    mmrv: float | None  # None with fewer than two checkpoints
    misranked: tuple[tuple[str, str], ...]  # (ranked higher open-loop, but strictly lower success)
    # bootstrap over evaluation seeds and held-out demos (metrics.openloop.rank_agreement)
    kendall_interval: tuple[float, float] | None = None
    mmrv_interval: tuple[float, float] | None = None
    resamples: int = 0

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {"checkpoints": list(self.checkpoints), "closed_loop": self.closed,
                "open_loop": [r.to_dict() for r in self.openloop], "kendall_tau": self.kendall,
                "kendall_reason": self.kendall_reason, "mmrv": self.mmrv,
                "misranked": [list(p) for p in self.misranked],
                "kendall_interval": self.kendall_interval, "mmrv_interval": self.mmrv_interval,
                "resamples": self.resamples}


def predictor(path: str) -> Callable[[Sequence[Trajectory]], list[np.ndarray]]:
    """A checkpoint's open-loop predictor: its action at every recorded step of each trajectory."""
    policy = BCPolicy(path=path)

    def predict(trajectories: Sequence[Trajectory]) -> list[np.ndarray]:
        return [policy.predict(t.observations, policy.task_onehot(t.record.task_id)).astype(np.float64)
                for t in trajectories]
    return predict


def misranked(names: Sequence[str], mse: dict[str, float], success: dict[str, float]) -> list[tuple[str, str]]:
    """The pairs of checkpoints open-loop error ranks one way and closed-loop success strictly the other."""
    out = []
    for a, b in combinations(sorted(names), 2):
        better_open, other = (a, b) if mse[a] < mse[b] else (b, a)
        if mse[a] != mse[b] and success[better_open] < success[other]:
            out.append((better_open, other))
    return out


def run_olcl(
    store: Store, config: OLCLConfig, out_dir: Path, progress: Callable[[str], None] = lambda _: None
) -> OLCLResult:
    """Train checkpoints over demo counts and epochs, score them open-loop on held-out demos and closed-loop, compare.
    """
    tag = config.tag()
    expert = [PolicySpec(name="expert", builtin="expert")]
    _, demos = run_grid(
        store, f"olcl-{tag}-demos", [config.task], expert, max(config.sizes), DEMO_SEED, config.horizon, config.workers)
    ok = sorted((r for r in demos if r.outcome is Outcome.SUCCESS), key=lambda r: r.episode_index)
    _, heldout = run_grid(
        store, f"olcl-{tag}-heldout", [config.task], expert, config.heldout, HELDOUT_SEED, config.horizon,
        config.workers)
    trajectories = load_trajectories(store, [r for r in heldout if r.outcome is Outcome.SUCCESS])
    paths: dict[str, str] = {}
    for size in config.sizes:
        for epochs in config.epochs:
            name = f"n{size}-e{epochs}"
            result = train_bc([episode_demo(store, r) for r in ok[:size]], TrainConfig(seed=config.seed, epochs=epochs),
                              out_dir / f"{name}.pt")
            paths[name] = result.path
            progress(f"trained {name}: {result.frames} frames, loss {result.final_loss:.5f}")
    policies = [bc_spec(name, Path(path)) for name, path in paths.items()]
    versions = content_hash(sorted(p.params["path"] for p in policies) + [BCPolicy.version], length=8)
    _, evaluation = run_grid(store, f"olcl-{tag}-eval-{versions}", [config.task], policies, config.eval_episodes,
                             EVAL_SEED, config.horizon, config.workers)
    scores = {name: score(evaluation, name) for name in paths}
    task = default_registry().get(config.task)
    bounds = {task.id: (task.action.low, task.action.high)}
    rows = openloop_table(trajectories, {name: predictor(path) for name, path in paths.items()}, bounds)
    (agreement,) = rank_agreement(rows, {(name, config.task): s.rate for name, s in scores.items()},
                                  closed_outcomes(evaluation), seed=config.seed)
    mse = {r.policy: r.mse for r in rows}
    return OLCLResult(tuple(paths), {n: s.to_dict() for n, s in scores.items()}, tuple(rows), agreement.kendall,
                      agreement.kendall_reason, agreement.mmrv,
                      tuple(misranked(list(paths), mse, {n: s.rate for n, s in scores.items()})),
                      agreement.kendall_interval, agreement.mmrv_interval, agreement.resamples)
