"""Coverage certified over every rate: the exact infimum and mean of an interval's coverage over p ∈ (0, 1).

A grid of rates misses the dips between its points (mid-p's documented 0.920 on a fine grid; its
infimum at n = 6 is 0.912, at p = 0.409 and 0.591). For a binomial interval [L_k, U_k] (k = 0..n,
both ends non-decreasing in k, which :func:`certify_ends` checks), the coverage
C(p) = Σ_k pmf(k; n, p)·1[L_k ≤ p ≤ U_k] is exact and the search over p can be too:

* Between two consecutive ends (the **breakpoints**, every L_k and U_k) the covering counts are a
  fixed run a..b, and P(a ≤ X ≤ b) first rises and then falls in p (its derivative
  n[pmf_{n−1}(a − 1; p) − pmf_{n−1}(b; p)] changes sign once: the ratio of the two terms is
  monotone in p). So on each segment the smallest value is at an end, and **the infimum over p is
  the smallest one-sided limit at a breakpoint**: just right of b the counts with L_k ≤ b < U_k
  cover, just left the counts with L_k < b ≤ U_k (0 and 1 count as breakpoints). An infimum, not
  always attained (at an upper end the interval still covers b itself).
* The **mean** over p uniform on [0, 1] is Σ_k ∫_{L_k}^{U_k} pmf(k; n, p) dp
  = Σ_k [I_{U_k}(k + 1, n − k + 1) − I_{L_k}(k + 1, n − k + 1)] / (n + 1) (regularized incomplete beta),
  exact too.

What this certifies, per n ≤ :data:`MAX_N` (``benchmarks/coverage_certificate.py`` prints the tables of
docs/STATISTICS.md; ``tests/test_coverage_certificate.py`` fails when a method drops below
:data:`DOCUMENTED`):

* each rate interval of ``success_interval`` (mid-p, Wilson, Jeffreys, Clopper–Pearson);
* pass^k per cell: [L^k, U^k] covers p^k exactly when [L, U] covers p, so its infimum and its
  coverage at every p are the rate interval's (the test checks the construction at every n and k);
* retention when nominal always succeeds (p₀ = 1, the edge the issue found 0.919 at): the tables are
  (k, n − k, 0, 0), retention is the variant's rate, and its MOVER-R ends are a binomial interval in k.

Retention at p₀ < 1, suite scores, pass^k per policy and PPI depend on several rates (and on the
dependence of paired outcomes): those are searched on fine grids, not certified this way
(``intervals_coverage``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from assay.errors import AssayError
from assay.metrics.intervals import retention_interval
from assay.metrics.rates import INTERVAL_METHODS, success_interval
from assay.serialize import DictMixin

MAX_N = 50
BELOW = 0.93  # an interval whose infimum falls below this is flagged where it is printed
# Each interval's infimum over every rate and every n ≤ MAX_N, rounded down to three decimals (the test
# fails when a method drops below it; docs/STATISTICS.md states the same numbers), with the n it occurs at.
DOCUMENTED = {"midp": 0.912, "wilson": 0.793, "jeffreys": 0.853, "exact": 0.950, "retention-full-nominal": 0.915}
EXACT_METHOD = "exact"
# MOVER-R's lowest coverage found per n = 1..38 pairs (conditional on retention being defined) by the grid search of
# ``benchmarks/coverage_certificate.py --part retention --method mover``: p0 0.05..1 and p_v 0..1 by 0.01, every
# dependence of DEPENDENCE (n 39-50 were not searched: the shared machine's time ran out). A search bounds the
# infimum from above; docs/STATISTICS.md has the table.
MOVER_SEARCHED: tuple[float, ...] = (0.0000, 0.3590, 0.6874, 0.8311, 0.8834, 0.8919, 0.8965, 0.8809, 0.8819, 0.9016,
    0.9017, 0.9011, 0.9013, 0.9042, 0.9035, 0.9022, 0.9050, 0.9028, 0.9001, 0.9013, 0.8989, 0.9088, 0.8971, 0.9141,
    0.9166, 0.9086, 0.9216, 0.9218, 0.9225, 0.9204, 0.9204, 0.9206, 0.9213, 0.9209, 0.9193, 0.9171, 0.9174, 0.9170)


@dataclass(frozen=True)
class Certificate(DictMixin):
    """One interval at one n: its coverage's infimum over p (and a p at which it is approached) and mean."""

    method: str
    n: int
    minimum: float
    at: float  # the breakpoint whose one-sided limit is the infimum
    mean: float  # over p uniform on [0, 1]


def _binomial_pmf(k: np.ndarray, n: int, p: np.ndarray) -> np.ndarray:
    """P(X = k) for X ~ Binomial(n, p), from log-gamma: within 1e-14 of ``scipy.stats.binom.pmf`` for n ≤ 100 (0^0 = 1
    at p = 0 and 1), without importing scipy.stats (``assay results`` prints this module's coverage note)."""
    log_choose = special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)
    return np.exp(log_choose + special.xlogy(k, p) + special.xlog1py(n - k, -p))


def certify_ends(low: np.ndarray, high: np.ndarray) -> tuple[float, float, float]:
    """(infimum over p ∈ (0, 1), a breakpoint where it is approached, mean over p) of the coverage of the
    interval [low[k], high[k]] for k successes of n = len(low) − 1 (module docstring)."""
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    n = low.size - 1
    if n < 1 or high.size != low.size or np.any(low > high):
        raise AssayError("certify_ends needs n + 1 ≥ 2 intervals with low ≤ high")
    if np.any(np.diff(low) < 0) or np.any(np.diff(high) < 0):
        raise AssayError("the breakpoint certificate needs both ends non-decreasing in k")
    points = np.unique(np.concatenate([np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0), [0.0, 1.0]]))
    k = np.arange(n + 1)
    pmf = _binomial_pmf(k[None, :], n, points[:, None])
    at, lo, hi = points[:, None], low[None, :], high[None, :]
    right = (pmf * ((lo <= at) & (at < hi))).sum(axis=1)
    left = (pmf * ((lo < at) & (at <= hi))).sum(axis=1)
    right[points >= 1.0] = np.inf  # no rate right of 1, none left of 0
    left[points <= 0.0] = np.inf
    limits = np.minimum(left, right)
    worst = int(np.argmin(limits))
    clipped_low, clipped_high = np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)
    mass = special.betainc(k + 1, n - k + 1, clipped_high) - special.betainc(k + 1, n - k + 1, clipped_low)
    return float(limits[worst]), float(points[worst]), float(mass.sum() / (n + 1))


@lru_cache(maxsize=1024)
def binomial_ends(n: int, method: str, confidence: float = 0.95) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(lows, highs) of ``success_interval`` for k = 0..n."""
    if method not in INTERVAL_METHODS:
        raise AssayError(f"interval method {method!r} is not valid; valid: {', '.join(INTERVAL_METHODS)}")
    intervals = [success_interval(k, n, confidence, method) for k in range(n + 1)]
    return tuple(i.low for i in intervals if i), tuple(i.high for i in intervals if i)


@lru_cache(maxsize=1024)
def certify_rate(method: str, n: int, confidence: float = 0.95) -> Certificate:
    """The coverage certificate of one rate interval at n trials (exact over every p)."""
    low, high = binomial_ends(n, method, confidence)
    minimum, at, mean = certify_ends(np.array(low), np.array(high))
    return Certificate(method, n, minimum, at, mean)


def certify_full_nominal_retention(n: int, confidence: float = 0.95) -> Certificate:
    """Retention's MOVER-R interval when nominal succeeds on every seed (p₀ = 1): exact over every variant rate."""
    intervals = [retention_interval(k, n - k, 0, 0, confidence) for k in range(n + 1)]
    low = np.array([i.low for i in intervals if i])
    high = np.array([i.high for i in intervals if i])
    minimum, at, mean = certify_ends(low, high)
    return Certificate("retention-full-nominal", n, minimum, at, mean)


def worst_rate(method: str, trials: list[int] | tuple[int, ...], confidence: float = 0.95) -> Certificate | None:
    """The lowest certificate among the trial counts a table shows (those ≤ MAX_N; None when none is)."""
    shown = sorted({n for n in trials if 1 <= n <= MAX_N})
    if not shown:
        return None
    return min((certify_rate(method, n, confidence) for n in shown), key=lambda c: (c.minimum, c.n))


def coverage_note(method: str, trials: list[int] | tuple[int, ...], confidence: float = 0.95) -> str | None:
    """One line for a table whose interval dips below :data:`BELOW` at a trial count it shows (None otherwise):
    where, how low, and the exact construction that does not."""
    if round(confidence, 6) != 0.95:
        return None  # the certificate of DOCUMENTED is for 95% intervals; other levels are computed on request
    worst = worst_rate(method, trials, confidence)
    if worst is None or worst.minimum >= BELOW:
        return None
    return (f"coverage: the {method} 95% interval covers only {worst.minimum:.3f} of the time at n = {worst.n} for "
            f"some rates (p near {worst.at:.3f}; exact over every rate); --interval exact (Clopper–Pearson) "
            "covers ≥ 0.95 at every rate and n")


def retention_note(method: str, pairs: list[int] | tuple[int, ...]) -> str | None:
    """One line for a retention table shown with MOVER-R at pair counts where its searched coverage is below
    :data:`BELOW` (None for the exact construction, or when no count is ≤ MAX_N)."""
    shown = sorted({n for n in pairs if 1 <= n <= min(MAX_N, len(MOVER_SEARCHED))})
    if method != "mover" or not shown:
        return None
    worst = min(shown, key=lambda n: (MOVER_SEARCHED[n - 1], n))
    if MOVER_SEARCHED[worst - 1] >= BELOW:
        return None
    return (f"coverage: MOVER-R's 95% interval covers as little as {MOVER_SEARCHED[worst - 1]:.3f} of the time at "
            f"{worst} pairs for some rates (a grid search over the two rates and their dependence); --interval exact "
            "(Bonferroni Clopper–Pearson) covers ≥ 0.95 at every rate, a table with no nominal success counting as "
            "no claim")


__all__ = ["BELOW", "Certificate", "DOCUMENTED", "EXACT_METHOD", "MAX_N", "binomial_ends", "certify_ends",
           "certify_full_nominal_retention", "certify_rate", "coverage_note", "retention_note", "worst_rate",
           "MOVER_SEARCHED"]
