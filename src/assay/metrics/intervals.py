"""Intervals that never collapse: paired differences, paired ratios (retention) and means of rates.

A percentile bootstrap of pairs returns ``[1, 1]`` whenever every resample is the same: 5 of 5
against 0 of 5, or retention with no discordant pair (4/6 vs 4/6). These intervals stay honest
there, and their exact coverage is checked at the edges robot evaluations live at (nominal always
succeeding, rates near 0 and 1, 6 to 30 episodes; docs/STATISTICS.md has the table).

* **Paired difference** (one task): Newcombe's square-and-add interval for paired proportions
  (Newcombe 1998, Statistics in Medicine 17:2635, method 10), built from the two Wilson intervals
  and the correlation of the paired outcomes, with Newcombe's corrected φ* (0 when
  0 ≤ ad − bc ≤ n/2, φ shrunk by n/2 above it, 0 when a margin is empty). Closed form.
* **Retention** p_variant / p_nominal on paired seeds: the MOVER-R interval (Zou & Donner 2008,
  Stat. Med. 27:1693; Newcombe 2016, Stat. Methods Med. Res. 25:1774) — the limits are the θ at
  which the MOVER interval of p_v − θ·p_0 touches 0, a quadratic in θ — built from the mid-p
  intervals of the two rates, with two choices that keep it covering at the edges: the upper limit
  divides by the nominal rate's **Clopper–Pearson** lower end (a ratio amplifies how low the
  denominator may be; with mid-p there, coverage fell to 0.88 when the variant far exceeds a rare
  nominal success), and the correlation of the paired outcomes is Newcombe's φ* (as in the paired
  difference: the plain φ̂ plugged in made the interval too narrow when the variant succeeds only
  where nominal does, 0.68). Nominal always succeeding (an empty margin: φ* = 0) gives the variant
  rate's own mid-p lower end, as it should (retention is then the variant's rate).
* **Mean of rates** (a suite of K tasks): the outer ends of two intervals. (1) The mid-p interval of
  the pooled rate at the effective sample size n_eff = K² / Σ 1/n_i with k_eff = n_eff · (mean of the
  rates) — with equal episodes per task exactly the mid-p interval of all the suite's episodes
  pooled, since the mean of rates is then Σk / Σn; its ends come from the mid-p confidence
  distribution (the even mixture of Beta(k, n − k + 1) and Beta(k + 1, n − k), regularized
  incomplete beta functions that accept a non-integer k_eff). (2) Square-and-add (MOVER, Zou &
  Donner 2008) of the tasks' own mid-p intervals, mean ∓ √(Σ (rate_i − end_i)²) / K. The pooled
  interval alone inherits mid-p's discreteness dips (0.923 at two tasks of 8 at p = ½, pooled 16
  episodes); square-and-add alone misses at tiny rates (0.89 at four tasks of 8 at p = 0.02); their
  outer ends hold ≥ 0.93 on every cell of docs/STATISTICS.md's grid. One task gives the default
  interval exactly.
* **Draws for paired suite differences** (``compare``'s suite row): each task's paired table
  (both succeeded, only A, only B, neither) gets the Jeffreys posterior Dirichlet(counts + ½),
  each unpaired cell's rate its mid-p confidence distribution, and the central ``confidence``
  range of ``DRAWS`` seeded draws of the mean difference is the interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy import optimize, special

from assay.errors import AssayError
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


@lru_cache(maxsize=4096)
def _rate_ends(successes: int, trials: int, confidence: float) -> tuple[float, float, float]:
    """(mid-p low, mid-p high, Clopper–Pearson low) of one rate."""
    midp = success_interval(successes, trials, confidence)
    exact = success_interval(successes, trials, confidence, "exact")
    assert midp is not None and exact is not None
    return midp.low, midp.high, exact.low


def _lower_root(a: float, b: float, c: float) -> float:
    """The smaller root of a·θ² − 2b·θ + c = 0 (a > 0); 0 when there is none (the limit reaches 0)."""
    disc = b * b - a * c
    return max(0.0, (b - math.sqrt(disc)) / a) if disc >= 0 else 0.0


RETENTION_METHODS = ("mover", "exact")


def exact_retention_interval(nominal: int, variant: int, n: int, confidence: float = 0.95) -> Interval:
    """[L_v / U_0, U_v / L_0] from the two rates' Clopper–Pearson intervals at 1 − α/2 each (Bonferroni): by the
    union bound the ratio p_v / p_0 lies inside with probability ≥ 1 − α at every pair of rates and every
    dependence of the paired outcomes (counting a table where nominal never succeeded, L_0 = 0, as [L_v, ∞):
    no claim). Wide: the price of a guarantee with no approximation. ``nominal`` ≥ 1."""
    level = 1.0 - (1.0 - confidence) / 2.0
    v = success_interval(variant, n, level, "exact")
    o = success_interval(nominal, n, level, "exact")
    assert v is not None and o is not None and o.low > 0
    return Interval(v.low / o.high, v.high / o.low)


def retention_interval(both: int, nominal_only: int, variant_only: int, neither: int,
                       confidence: float = 0.95, method: str = "mover") -> Interval | None:
    """MOVER-R interval of the paired ratio p_variant / p_nominal (see the module doc), or with ``method="exact"``
    the Bonferroni Clopper–Pearson interval (:func:`exact_retention_interval`); None when nominal never
    succeeded."""
    n = both + nominal_only + variant_only + neither
    nominal, variant = both + nominal_only, both + variant_only
    if method not in RETENTION_METHODS:
        raise AssayError(f"retention interval {method!r} is not valid; valid: {', '.join(RETENTION_METHODS)}")
    if nominal == 0:
        return None
    if method == "exact":
        return exact_retention_interval(nominal, variant, n, confidence)
    p0, pv = nominal / n, variant / n
    low_v, high_v, _ = _rate_ends(variant, n, confidence)
    low_0, high_0, exact_low_0 = _rate_ends(nominal, n, confidence)
    margins = nominal * (n - nominal) * variant * (n - variant)
    excess = both * neither - nominal_only * variant_only
    # Newcombe's φ*: shrunk by n/2 when positive (0 up to n/2), as it is; 0 when a margin is empty
    r = 0.0 if margins == 0 or 0 <= excess <= n / 2 else (excess - n / 2 if excess > 0 else excess) / math.sqrt(margins)
    point = pv / p0
    # lower: the θ where the MOVER lower limit of p_v − θ p_0 is 0 (Fieller's form, the quadratic in θ)
    a = high_0 * (2 * p0 - high_0)
    b = pv * p0 - r * (pv - low_v) * (high_0 - p0)
    c = low_v * (2 * pv - low_v)
    low = _lower_root(a, b, c) if a > 0 else 0.0
    # upper: where the MOVER upper limit of p_v − θ p_0 is 0, from the nominal's exact lower end
    a = exact_low_0 * (2 * p0 - exact_low_0)
    b = pv * p0 - r * (high_v - pv) * (p0 - exact_low_0)
    c = high_v * (2 * pv - high_v)
    disc = b * b - a * c
    high = (b + math.sqrt(disc)) / a if disc >= 0 and a > 0 else high_v / exact_low_0
    return Interval(min(low, point), max(high, point))


def _midp_mixture(p: float, k: float, n: float) -> float:
    """P(X > k) + ½ P(X = k) at rate p, written with regularized incomplete beta functions (any real k, n)."""
    at_least = 1.0 if k <= 0 else float(special.betainc(k, n - k + 1, p))
    beyond = 0.0 if k >= n else float(special.betainc(k + 1, n - k, p))
    return 0.5 * (at_least + beyond)


def pooled_midp_interval(successes: float, trials: float, confidence: float = 0.95) -> Interval:
    """The mid-p interval at a possibly non-integer count (equal to ``success_interval`` at integers)."""
    tail = (1.0 - confidence) / 2.0
    k, n = successes, trials
    low = 0.0 if k <= 1e-12 else float(optimize.brentq(lambda p: _midp_mixture(p, k, n) - tail, 0.0, 1.0,
                                                       xtol=1e-13))
    high = 1.0 if k >= n - 1e-12 else float(optimize.brentq(lambda p: _midp_mixture(p, k, n) - (1.0 - tail),
                                                            0.0, 1.0, xtol=1e-13))
    return Interval(low, high)


@lru_cache(maxsize=65536)
def _pooled(mean: float, size: float, confidence: float) -> Interval:
    return pooled_midp_interval(mean * size, size, confidence)


def mean_rate_interval(counts: Sequence[tuple[int, int]], confidence: float = 0.95) -> Interval | None:
    """Interval of the mean over cells of their rates (the outer ends of the pooled mid-p interval at the
    effective size and the square-and-add of the cells' mid-p intervals; see the module doc); one cell
    gets its default binomial interval. None without cells or with an empty cell."""
    if not counts or any(n == 0 for _, n in counts):
        return None
    if len(counts) == 1:
        return success_interval(*counts[0], confidence)
    rates = [k / n for k, n in counts]
    mean = float(np.mean(rates))
    size = len(counts) ** 2 / sum(1.0 / n for _, n in counts)
    pooled = _pooled(round(mean, 12), round(size, 12), confidence)
    ends = [_rate_ends(k, n, confidence) for k, n in counts]
    below = math.sqrt(sum((rate - end[0]) ** 2 for rate, end in zip(rates, ends, strict=True))) / len(counts)
    above = math.sqrt(sum((end[1] - rate) ** 2 for rate, end in zip(rates, ends, strict=True))) / len(counts)
    return Interval(max(0.0, min(pooled.low, mean - below)), min(1.0, max(pooled.high, mean + above)))
