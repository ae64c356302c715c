"""Rank recovery on simulated sparse leaderboards (no simulator): ``simulate_sparse_ranking``.

The truth is a 2PL model with seed effects: policy i, task j, seed s succeeds with probability
σ(a_j(θ_i − b_j) + e_js), θ ~ N(0, 1), b ~ N(0, 1), log a ~ N(0, 0.3²), e ~ N(0, σ_seed²) shared by every
policy on that seed (some initial conditions are harder for everyone: what pairing removes). Each
(policy, task) cell is observed with probability ``coverage``: ``missing="random"`` draws cells at random;
``missing="informative"`` observes a cell with probability σ(logit(coverage) + 1.5·θ_i·b_j), so strong
policies are mostly run on hard tasks and weak ones on easy tasks, as on leaderboards where new
benchmarks are harder and old models are not rerun. Every policy keeps at least one cell. The statistic
is Spearman's ρ between each method's scores and the true θ: the plain average of observed rates, the
2PL fit and paired Bradley–Terry (``metrics.irt``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from assay.metrics.irt import Counts, average_scores, fit_bt, fit_irt, paired_wins
from assay.serialize import DictMixin

MISSING = ("random", "informative")


@dataclass(frozen=True)
class RankRecovery(DictMixin):
    """Mean (and lowest) Spearman ρ to the truth over replicates, per method."""

    policies: int
    tasks: int
    coverage: float
    episodes: int
    missing: str
    replicates: int
    observed: float  # realised share of cells observed
    average: float
    irt: float
    bt: float
    average_min: float
    irt_min: float
    bt_min: float


def _leaderboard(rng: np.random.Generator, policies: int, tasks: int, coverage: float, episodes: int, missing: str,
                 seed_sd: float) -> tuple[np.ndarray, list[np.ndarray]]:
    """(true θ, per task a seed × policy table with NaN for unobserved cells)."""
    theta = rng.normal(size=policies)
    b = rng.normal(size=tasks)
    a = np.exp(rng.normal(0.0, 0.3, size=tasks))
    logit = special.logit(coverage) + (1.5 * theta[:, None] * b[None, :] if missing == "informative" else 0.0)
    seen = rng.random((policies, tasks)) < special.expit(logit)
    for i in np.flatnonzero(~seen.any(axis=1)):
        seen[i, rng.integers(tasks)] = True
    tables = []
    for j in range(tasks):
        z = a[j] * (theta[None, :] - b[j]) + rng.normal(0.0, seed_sd, size=(episodes, 1))
        table = (rng.random((episodes, policies)) < special.expit(z)).astype(float)
        table[:, ~seen[:, j]] = np.nan
        tables.append(table)
    return theta, tables


def simulate_sparse_ranking(policies: int = 60, tasks: int = 8, coverage: float = 0.6, episodes: int = 20,
                            missing: str = "random", replicates: int = 50, seed: int = 0,
                            seed_sd: float = 1.0) -> RankRecovery:
    """Seeded replicates of a sparse leaderboard; Spearman ρ to the truth of averaging, IRT and BT."""
    if missing not in MISSING:
        raise ValueError(f"missing {missing!r} is not valid; valid: {', '.join(MISSING)}")
    rng = np.random.default_rng(seed)
    rho = np.zeros((3, replicates))
    observed = 0.0
    for r in range(replicates):
        theta, tables = _leaderboard(rng, policies, tasks, coverage, episodes, missing, seed_sd)
        successes = np.stack([np.nansum(t, axis=0) for t in tables], axis=1)
        trials = np.stack([(~np.isnan(t)).sum(axis=0) for t in tables], axis=1).astype(float)
        counts = Counts(tuple(map(str, range(policies))), tuple(map(str, range(tasks))), successes, trials)
        observed += counts.coverage / replicates
        scores = (average_scores(counts), fit_irt(successes, trials)[:policies], fit_bt(paired_wins(tables)))
        for m, score in enumerate(scores):
            rho[m, r] = float(stats.spearmanr(score, theta).statistic)
    means, lows = rho.mean(axis=1), rho.min(axis=1)
    return RankRecovery(policies, tasks, coverage, episodes, missing, replicates, observed, float(means[0]),
                        float(means[1]), float(means[2]), float(lows[0]), float(lows[1]), float(lows[2]))
