"""Intervals that never collapse: paired differences, paired ratios (retention) and means of rates.

A percentile bootstrap of pairs returns ``[1, 1]`` whenever every resample is the same: 5 of 5
against 0 of 5, or retention with no discordant pair (4/6 vs 4/6). These intervals stay honest
there.

* **Paired difference** (one task): Newcombe's square-and-add interval for paired proportions
  (Newcombe 1998, Statistics in Medicine 17:2635, method 10), built from the two Wilson intervals
  and the correlation of the paired outcomes, with Newcombe's corrected φ* (0 when
  0 ≤ ad − bc ≤ n/2, φ shrunk by n/2 above it, 0 when a margin is empty). Closed form.
* **Draws for aggregates** (a suite of tasks, a paired ratio): each task's paired table (both
  succeeded, only A, only B, neither) gets the Jeffreys posterior Dirichlet(counts + ½); each
  unpaired cell's rate is drawn from its **mid-p confidence distribution**, the even mixture of
  Beta(k, n − k + 1) and Beta(k + 1, n − k) (Beta(0, ·) is 0 and Beta(·, 0) is 1), whose central
  range *is* the mid-p interval, so one task gives the default interval exactly and a suite of
  tasks the same construction for their mean. The statistic (mean over tasks of the differences, a
  mean of rates, the ratio of the paired rates) is computed per draw and the central
  ``confidence`` range of ``DRAWS`` seeded draws is the interval. A cell with no discordant pair
  still has mass on discordance, and a rate of n of n on 1 − ε, so the interval is never a point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from assay.metrics.rates import Interval, success_interval

DRAWS = 20000
PRIOR = 0.5  # Jeffreys


def newcombe_paired_interval(both: int, a_only: int, b_only: int, neither: int,
                             confidence: float = 0.95) -> Interval | None:
    """Newcombe's method-10 interval for p_A − p_B on paired outcomes; None without pairs."""
    n = both + a_only + b_only + neither
    if n == 0:
        return None
    p1, p2 = (both + a_only) / n, (both + b_only) / n
    first = success_interval(both + a_only, n, confidence, "wilson")
    second = success_interval(both + b_only, n, confidence, "wilson")
    assert first is not None and second is not None
    margins = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    excess = both * neither - a_only * b_only
    if margins == 0 or 0 <= excess <= n / 2:
        phi = 0.0
    else:
        phi = (excess - n / 2 if excess > 0 else excess) / math.sqrt(margins)
    dl1, du1 = p1 - first.low, first.high - p1
    dl2, du2 = p2 - second.low, second.high - p2
    d = p1 - p2
    low = d - math.sqrt(max(0.0, dl1**2 - 2 * phi * dl1 * du2 + du2**2))
    high = d + math.sqrt(max(0.0, dl2**2 - 2 * phi * dl2 * du1 + du1**2))
    return Interval(max(-1.0, low), min(1.0, high))


def central(samples: np.ndarray, confidence: float, point: float | None = None) -> Interval | None:
    """The central ``confidence`` range of the finite draws, stretched to hold ``point``.

    At an edge (every task 8 of 8) the equal-tailed range ends just below the observed 1.0; as
    Jeffreys' interval sets its end to 1 there, the range is widened to the observed value.
    None when there are no finite draws.
    """
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:
        return None
    tail = (1.0 - confidence) / 2.0
    low, high = (float(v) for v in np.quantile(finite, [tail, 1.0 - tail]))
    if point is not None:
        low, high = min(low, point), max(high, point)
    return Interval(low, high)


def paired_draws(rng: np.random.Generator, table: Sequence[int], draws: int = DRAWS) -> np.ndarray:
    """(draws, 4) cell probabilities (both, A only, B only, neither) from Dirichlet(counts + ½)."""
    return rng.dirichlet(np.asarray(table, dtype=np.float64) + PRIOR, size=draws)


def rate_draws(rng: np.random.Generator, successes: int, trials: int, draws: int = DRAWS) -> np.ndarray:
    """Draws of one cell's rate from its mid-p confidence distribution (see the module doc)."""
    k, n = successes, trials
    lower = rng.random(draws) < 0.5  # which half of the mixture each draw comes from
    out = np.empty(draws)
    m = int(lower.sum())
    out[lower] = 0.0 if k == 0 else rng.beta(k, n - k + 1, size=m)
    out[~lower] = 1.0 if k == n else rng.beta(k + 1, n - k, size=draws - m)
    return out


def paired_difference_draws(rng: np.random.Generator, table: Sequence[int], draws: int = DRAWS) -> np.ndarray:
    """Draws of p_A − p_B = P(A only) − P(B only) on one paired table."""
    cells = paired_draws(rng, table, draws)
    return cells[:, 1] - cells[:, 2]


def retention_interval(both: int, nominal_only: int, variant_only: int, neither: int, confidence: float = 0.95,
                       seed: int = 0, draws: int = DRAWS) -> Interval | None:
    """Interval of the paired ratio p_variant / p_nominal; None when nominal never succeeded."""
    if both + nominal_only == 0:
        return None
    cells = paired_draws(np.random.default_rng(seed), (both, nominal_only, variant_only, neither), draws)
    point = (both + variant_only) / (both + nominal_only)
    return central((cells[:, 0] + cells[:, 2]) / (cells[:, 0] + cells[:, 1]), confidence, point)


def mean_rate_interval(counts: Sequence[tuple[int, int]], confidence: float = 0.95, seed: int = 0,
                       draws: int = DRAWS) -> Interval | None:
    """Interval of the mean over cells of their rates; one cell gets its default binomial interval."""
    if not counts or any(n == 0 for _, n in counts):
        return None
    if len(counts) == 1:
        return success_interval(*counts[0], confidence)
    rng = np.random.default_rng(seed)
    point = float(np.mean([k / n for k, n in counts]))
    return central(np.mean([rate_draws(rng, k, n, draws) for k, n in counts], axis=0), confidence, point)
