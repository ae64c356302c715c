"""Exact coverage of the aggregate intervals (retention, suite score), from the sampling distribution itself.

No simulation: every outcome is weighted by its probability and the interval computed for it.

* Retention: every paired table (both, nominal only, variant only, neither) of n pairs, weighted by
  its multinomial probability at cell probabilities fixed by the two rates and their dependence on a
  seed (``DEPENDENCE``), given that retention is defined (nominal succeeded at least once);
  coverage = P(p_v / p_0 ∈ interval | defined).
* Suite score: every combination of per-task successes (independent binomials, zero-probability
  counts skipped) weighted by its probability; coverage = P(mean of the rates ∈ interval).

``benchmarks/interval_coverage.py`` prints the tables of docs/STATISTICS.md from these; the tests
pin the edge cells.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from scipy import special
from scipy.stats import binom, multinomial

from assay.errors import AssayError
from assay.metrics.intervals import mean_rate_interval, retention_interval

# P(both succeed) on a seed, from the two rates: independent, half-way to nested, nested (one succeeds only
# where the other does), and the most negative dependence the rates allow.
DEPENDENCE = ("independent", "positive", "nested", "negative")


def paired_cells(p_nominal: float, p_variant: float, dependence: str) -> np.ndarray:
    """(both, nominal only, variant only, neither) probabilities for two rates and a dependence."""
    if dependence not in DEPENDENCE:
        raise AssayError(f"dependence {dependence!r} is not known; valid: {', '.join(DEPENDENCE)}")
    independent, nested = p_nominal * p_variant, min(p_nominal, p_variant)
    both = {"independent": independent, "positive": (independent + nested) / 2, "nested": nested,
            "negative": max(0.0, p_nominal + p_variant - 1.0)}[dependence]
    cells = np.clip([both, p_nominal - both, p_variant - both, 1.0 - p_nominal - p_variant + both], 0.0, 1.0)
    return cells / cells.sum()


def paired_tables(n: int) -> np.ndarray:
    """Every (both, nominal only, variant only, neither) table of n pairs, (tables, 4)."""
    return np.array([(a, b, c, n - a - b - c) for a in range(n + 1) for b in range(n + 1 - a)
                     for c in range(n + 1 - a - b)])


def retention_coverage(n: int, p_nominal: float, p_variant: float, dependence: str = "independent",
                       confidence: float = 0.95, method: str = "mover") -> float:
    """Exact P(p_v / p_0 ∈ retention_interval | nominal succeeded at least once) at n pairs."""
    if not 0.0 < p_nominal <= 1.0 or not 0.0 <= p_variant <= 1.0:
        raise AssayError(f"rates must be 0 < nominal <= 1 and 0 <= variant <= 1; got {p_nominal}, {p_variant}")
    tables = paired_tables(n)
    weights = multinomial.pmf(tables, n, paired_cells(p_nominal, p_variant, dependence))
    truth = p_variant / p_nominal
    covered = defined = 0.0
    for (both, nominal_only, variant_only, neither), weight in zip(tables.tolist(), weights.tolist(), strict=True):
        interval = retention_interval(both, nominal_only, variant_only, neither, confidence, method)
        if interval is None:
            continue
        defined += weight
        covered += weight * (interval.low - 1e-12 <= truth <= interval.high + 1e-12)
    return covered / defined


def retention_intervals(n: int, confidence: float = 0.95, method: str = "mover"
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tables, lows, highs) of every paired table of n pairs on which retention is defined (nominal succeeded),
    each interval from :func:`~assay.metrics.intervals.retention_interval` (computed once per table)."""
    tables = paired_tables(n)
    tables = tables[tables[:, 0] + tables[:, 1] > 0]
    ends = [retention_interval(a, b, c, d, confidence, method) for a, b, c, d in tables.tolist()]
    return tables, np.array([e.low for e in ends if e]), np.array([e.high for e in ends if e])


def retention_coverage_grid(n: int, p_nominal: Sequence[float], p_variant: Sequence[float], dependence: str,
                            confidence: float = 0.95, method: str = "mover", conditional: bool = True) -> np.ndarray:
    """:func:`retention_coverage` on every (p_nominal, p_variant) of a grid at once, (len(p_nominal),
    len(p_variant)): the tables and their intervals are enumerated once, the multinomial weights in log space.
    ``conditional`` False: P(covered or undefined), a table where nominal never succeeded counting as no claim
    (the exact construction's guarantee is of this kind)."""
    tables, low, high = retention_intervals(n, confidence, method)
    log_count = special.gammaln(n + 1) - special.gammaln(tables + 1).sum(axis=1)
    variants = np.asarray(p_variant, dtype=np.float64)
    out = np.empty((len(p_nominal), variants.size))
    for i, p0 in enumerate(p_nominal):
        cells = np.array([paired_cells(float(p0), float(pv), dependence) for pv in variants])
        with np.errstate(divide="ignore"):
            log_cells = np.log(cells)
        impossible = ((tables[None, :, :] > 0) & (cells[:, None, :] <= 0)).any(axis=2)
        finite = np.where(np.isinf(log_cells), 0.0, log_cells)
        log_weight = log_count[None, :] + (tables[None, :, :] * finite[:, None, :]).sum(axis=2)
        weight = np.where(impossible, 0.0, np.exp(log_weight))
        truth = (variants / float(p0))[:, None]
        covered = (low[None, :] - 1e-12 <= truth) & (truth <= high[None, :] + 1e-12)
        hit, defined = (weight * covered).sum(axis=1), weight.sum(axis=1)
        out[i] = hit / defined if conditional else hit + (1.0 - defined)
    return out


def suite_coverage(rates: Sequence[float], episodes: Sequence[int], confidence: float = 0.95) -> float:
    """Exact P(mean of the rates ∈ mean_rate_interval) for independent tasks at ``rates`` with ``episodes``
    (every combination of counts enumerated: keep Π(n_i + 1) to a few hundred thousand)."""
    if len(rates) != len(episodes) or not rates:
        raise AssayError("suite coverage needs one episode count per rate")
    truth = float(np.mean(rates))
    pmfs = [binom.pmf(np.arange(n + 1), n, p) for p, n in zip(rates, episodes, strict=True)]
    covered = 0.0
    for counts in itertools.product(*[np.flatnonzero(pmf > 0).tolist() for pmf in pmfs]):
        weight = float(np.prod([pmf[k] for pmf, k in zip(pmfs, counts, strict=True)]))
        interval = mean_rate_interval(list(zip(counts, episodes, strict=True)), confidence)
        assert interval is not None
        covered += weight * (interval.low - 1e-12 <= truth <= interval.high + 1e-12)
    return covered


__all__ = ["DEPENDENCE", "paired_cells", "paired_tables", "retention_coverage", "retention_coverage_grid",
           "retention_intervals", "suite_coverage"]
