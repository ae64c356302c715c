"""Campaign glue for the learning experiments: collect expert demos, evaluate checkpoints.

Every experiment campaign is an ordinary campaign in the store (resumable, keyed,
paired seeds). Three disjoint seed streams keep data and evaluation apart: the
campaign seed of demonstrations, of the failure-mining probe, and of held-out
evaluation differ, and the leakage check verifies no evaluation seed is in any
checkpoint's training data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from assay.metrics import success_interval
from assay.run import CampaignPlan, InlineExecutor, LocalExecutor, prepare_campaign, run_campaign
from assay.spec import CameraSpec, CampaignSpec, PolicySpec
from assay.spec.campaign import VariantRequest
from assay.store import EpisodeRecord, Outcome, Store

DEMO_SEED, PROBE_SEED, EVAL_SEED = 1000, 2000, 3000


def bc_spec(name: str, path: Path) -> PolicySpec:
    """The ``bc`` policy spec of the checkpoint at ``path``, named ``name``."""
    return PolicySpec(name=name, builtin="bc", params={"path": str(Path(path).resolve())})


def run_grid(store: Store, name: str, tasks: Sequence[str], policies: Sequence[PolicySpec], episodes: int,
             seed: int, horizon: int | None = None, workers: int = 1, cameras: Sequence[CameraSpec] = (),
             variants: Sequence[VariantRequest] = ({},), video_fps: float | None = None,
             ) -> tuple[CampaignPlan, list[EpisodeRecord]]:
    """Run (or resume) a campaign; return its plan and its records, ordered by policy, task, episode index."""
    spec = CampaignSpec(name=name, seed=seed, episodes=episodes, tasks=tuple(tasks), policies=tuple(policies),
                        horizon=horizon, envs_per_worker=4, cameras=tuple(cameras), variants=tuple(variants),
                        video_fps=video_fps)
    plan = prepare_campaign(spec)
    executor = InlineExecutor(store.data_root) if workers <= 1 else LocalExecutor(store.data_root, workers=workers)
    run_campaign(plan, store, executor)
    return plan, store.catalog.episodes(campaign=name)


@dataclass(frozen=True)
class Score:
    """One policy's success count with its mid-p 95% interval."""

    policy: str
    successes: int
    trials: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        """The success rate (0 with no trials)."""
        return self.successes / self.trials if self.trials else 0.0

    def to_dict(self) -> dict[str, object]:
        """The score as a JSON-ready dict."""
        return {"policy": self.policy, "successes": self.successes, "trials": self.trials, "rate": self.rate,
                "low": self.low, "high": self.high}


def score(records: Sequence[EpisodeRecord], policy: str) -> Score:
    """Success with a mid-p 95% interval; ``error`` episodes are out of the denominator."""
    mine = [r for r in records if r.policy_name == policy and r.outcome is not Outcome.ERROR]
    k = sum(r.outcome is Outcome.SUCCESS for r in mine)
    interval = success_interval(k, len(mine))
    return Score(policy, k, len(mine), interval.low if interval else 0.0, interval.high if interval else 1.0)
