"""Leaderboards with uncertainty: suite scores, bootstrap rank intervals, P(A better than B).

The suite score of a policy is the mean of its per-task success rates (``error``
episodes excluded). Its interval is ``metrics.intervals.mean_rate_interval``: the
default binomial interval for one task, and for several the mid-p interval of the
pooled episodes at the effective sample size (exactly the pooled mid-p interval with
equal episodes per task; a bootstrap of 8 of 8 on every task would say [1, 1]).
The rank intervals and the pairwise probabilities come from one seeded bootstrap:
in each resample, for every
task, the rows of the task's seed × policy table are drawn with replacement
(whole rows, so the pairing of policies on a seed is kept), rates are recomputed,
and scores averaged over tasks. The rows are drawn as one multinomial draw over the
table's counted patterns (``bootstrap.resampled_pattern_rates``): the same resampling,
in memory of the few hundred patterns a campaign has rather than of its episodes.

* Rank: competition ranking (1 + the number of policies with a strictly higher
  score), so tied policies share the better rank.
* Rank interval: the central ``confidence`` range of a policy's resampled ranks
  (values that occur, never fractions).
* ``P(A better than B)``: the share of resamples with score(A) > score(B), ties
  counting one half, so P(A>B) + P(B>A) = 1.

A policy with no scored episode on some task has no suite score; it is listed
with ``score=None`` and left out of ranks and probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from assay.metrics.bootstrap import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    check_settings,
    chunks,
    generator,
    pattern_rates,
    resampled_pattern_rates,
)
from assay.metrics.intervals import mean_rate_interval
from assay.metrics.outcomes import OutcomeGrid
from assay.serialize import DictMixin


@dataclass(frozen=True)
class LeaderboardRow(DictMixin):
    """One policy's leaderboard line: mean success over tasks, its interval, and its rank with the rank's interval."""

    policy: str
    score: float | None
    ci_low: float | None
    ci_high: float | None
    rank: int | None
    rank_low: int | None
    rank_high: int | None
    task_rates: dict[str, float | None]
    scored: int
    errors: int

    @property
    def rank_text(self) -> str:
        """The rank as printed: ``3``, ``3 [2–4]`` when the rank interval is wider than one, ``-`` when unranked."""
        if self.rank is None:
            return "-"
        return str(self.rank) if self.rank_low == self.rank_high else f"{self.rank} [{self.rank_low}–{self.rank_high}]"


@dataclass(frozen=True)
class Leaderboard:
    """A bootstrap leaderboard: rows best first, pairwise probabilities of being better, and the resampling settings."""

    rows: tuple[LeaderboardRow, ...]  # best first; unranked last
    p_better: dict[str, dict[str, float]]  # p_better[a][b] = P(a better than b)
    confidence: float
    n_resamples: int
    seed: int
    tasks: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        """The leaderboard as a JSON-ready dict."""
        return {"rows": [r.to_dict() for r in self.rows], "p_better": self.p_better, "confidence": self.confidence,
                "n_resamples": self.n_resamples, "seed": self.seed, "tasks": list(self.tasks)}


def competition_ranks(scores: np.ndarray) -> np.ndarray:
    """1 + the number of strictly higher scores, along the last axis."""
    return 1 + (scores[..., None, :] > scores[..., :, None]).sum(axis=-1)


def leaderboard(
    grid: OutcomeGrid, confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
) -> Leaderboard:
    """Rank the grid's policies by mean success over tasks, with seed-resampled score and rank intervals."""
    check_settings(confidence, n_resamples)
    rng = generator(seed)
    observed = np.stack([pattern_rates(t.patterns, t.weights) for t in grid.tasks])  # (tasks, policies)
    complete = ~np.isnan(observed).any(axis=0)
    scores = np.where(complete, np.where(np.isnan(observed), 0.0, observed).mean(axis=0), np.nan)
    boot_parts = []
    for size in chunks(n_resamples):
        per_task = np.stack([resampled_pattern_rates(rng, t.patterns, t.weights, size)
                             for t in grid.tasks])  # (tasks, size, policies)
        boot_parts.append(per_task.mean(axis=0))
    boot = np.concatenate(boot_parts)[:, complete]  # (n_resamples, ranked policies)
    ranked = [p for p, ok in zip(grid.policies, complete, strict=True) if ok]
    ranks = competition_ranks(boot)
    point = competition_ranks(scores[complete])
    tail = (1.0 - confidence) / 2.0
    rows = []
    for j, policy in enumerate(grid.policies):
        task_rates = {t.task: (None if np.isnan(observed[i, j]) else float(observed[i, j]))
                      for i, t in enumerate(grid.tasks)}
        scored = sum(t.counts(policy)[1] for t in grid.tasks)
        errors = sum(t.errors[j] for t in grid.tasks)
        if not complete[j]:
            rows.append(LeaderboardRow(policy, None, None, None, None, None, None, task_rates, scored, errors))
            continue
        k = ranked.index(policy)
        interval = mean_rate_interval([t.counts(policy) for t in grid.tasks], confidence)
        low, high = np.quantile(ranks[:, k], [tail, 1.0 - tail], method="inverted_cdf")
        rows.append(LeaderboardRow(policy, float(scores[j]), interval.low if interval else None,
                                   interval.high if interval else None, int(point[k]), int(low), int(high),
                                   task_rates, scored, errors))
    p_better = {
        a: {b: float((boot[:, i] > boot[:, j]).mean() + 0.5 * (boot[:, i] == boot[:, j]).mean())
            for j, b in enumerate(ranked) if b != a}
        for i, a in enumerate(ranked)
    }
    rows.sort(key=lambda r: (r.score is None, -(r.score or 0.0), r.policy))
    return Leaderboard(tuple(rows), p_better, confidence, n_resamples, seed, grid.task_ids)
