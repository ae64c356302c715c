"""Interval coverage computed exactly from the binomial pmf (no simulation), and the exact method."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from assay.errors import AssayError
from assay.metrics import newcombe_interval, rate_table, success_interval
from assay.store import EpisodeRecord, Outcome


def coverage(p: float, n: int, method: str) -> float:
    total = 0.0
    for k in range(n + 1):
        interval = success_interval(k, n, 0.95, method)
        if interval.low <= p <= interval.high:
            total += binom.pmf(k, n, p)
    return total


CELLS = [(p, n) for p in (0.05, 0.5, 0.95) for n in (20, 100)]
# The grid of docs/STATISTICS.md (coverage table): 11 rates × 6 episode counts.
GRID_P = (0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99)
GRID_N = (5, 10, 20, 50, 100, 200)


def coverage_table(method: str) -> dict[tuple[float, int], float]:
    """Exact coverage at every grid cell: Σ_k pmf(k; n, p) · 1[p ∈ interval(k, n)], intervals computed once per n."""
    table = {}
    for n in GRID_N:
        ends = np.array([(i.low, i.high) for i in (success_interval(k, n, 0.95, method) for k in range(n + 1))])
        for p in GRID_P:
            inside = (ends[:, 0] <= p) & (p <= ends[:, 1])
            table[(p, n)] = float(binom.pmf(np.arange(n + 1), n, p)[inside].sum())
    return table


def test_default_midp_covers_at_least_093_in_every_cell_where_wilson_does_not():
    midp, wilson, exact = coverage_table("midp"), coverage_table("wilson"), coverage_table("exact")
    assert min(midp.values()) >= 0.93
    assert min(midp.values()) == pytest.approx(0.9347, abs=5e-4)  # at p = 0.05, n = 100 (docs table)
    assert sum(midp.values()) / len(midp) == pytest.approx(0.9647, abs=5e-4)
    # Wilson: mean near nominal, 16 of 66 cells under 0.93, worst 0.904 at p = 0.01, n = 10.
    assert sum(wilson.values()) / len(wilson) == pytest.approx(0.9476, abs=5e-4)
    assert sum(v < 0.93 for v in wilson.values()) == 16
    assert wilson[(0.01, 10)] == pytest.approx(0.9044, abs=5e-4) == min(wilson.values())
    assert min(exact.values()) >= 0.95
    assert success_interval(3, 10).low == success_interval(3, 10, method="midp").low  # midp is the default


def test_jeffreys_is_offered_but_dips_below_093():
    jeffreys = coverage_table("jeffreys")
    assert min(jeffreys.values()) == pytest.approx(0.8853, abs=5e-4)  # p = 0.95, n = 50
    assert success_interval(0, 10, method="jeffreys").low == 0.0
    assert success_interval(10, 10, method="jeffreys").high == 1.0


def test_midp_by_hand():
    # n of n: ½·p^n = 0.025 gives the lower end; 0 of n: ½·(1 − p)^n = 0.025 the upper end.
    assert success_interval(2, 2).low == pytest.approx(0.05 ** 0.5, abs=1e-9)
    assert success_interval(0, 10).high == pytest.approx(1 - 0.05 ** 0.1, abs=1e-9)
    interval = success_interval(3, 10)
    # At the ends the mid-p tail is exactly 0.025.
    assert binom.sf(3, 10, interval.low) + 0.5 * binom.pmf(3, 10, interval.low) == pytest.approx(0.025, abs=1e-9)
    assert binom.cdf(2, 10, interval.high) + 0.5 * binom.pmf(3, 10, interval.high) == pytest.approx(0.025, abs=1e-9)


def test_wilson_coverage_is_near_nominal_in_every_cell():
    values = {cell: coverage(*cell, "wilson") for cell in CELLS}
    assert sum(values.values()) / len(values) >= 0.94
    assert min(values.values()) >= 0.92
    # Wilson's known dip near p = 0.05, n = 20 (about 0.925) is really there: the check is not vacuous.
    assert values[(0.05, 20)] == pytest.approx(0.925, abs=0.005)


def test_clopper_pearson_never_undercovers():
    assert min(coverage(p, n, "exact") for p, n in CELLS) >= 0.95


def test_clopper_pearson_quantiles_equal_scipys_root_search_at_every_k():
    """Blind against scipy's own Clopper–Pearson (binomtest's root search, not used by Assay): every k of n = 1..40
    and a few large n, at three levels; n = 1 and k = 0, n included."""
    from scipy.stats import binomtest

    cases = [(k, n) for n in range(1, 41) for k in range(n + 1)]
    cases += [(0, 1000), (1, 1000), (500, 1000), (99_999, 100_000)]
    for confidence in (0.90, 0.95, 0.99):
        for k, n in cases:
            ours = success_interval(k, n, confidence, "exact")
            theirs = binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
            assert ours is not None, (k, n)
            assert abs(ours.low - theirs.low) < 1e-11 and abs(ours.high - theirs.high) < 1e-11, (k, n, confidence)
    one = success_interval(1, 1, method="exact")  # n = 1 by hand: the low end solves p = 0.025
    assert one is not None and one.low == pytest.approx(0.025, abs=1e-12) and one.high == 1.0


def test_clopper_pearson_by_hand():
    # 0 of 10: upper bound 1 - 0.025**(1/10); 10 of 10: lower bound 0.025**(1/10).
    assert success_interval(0, 10, method="exact").high == pytest.approx(1 - 0.025 ** 0.1, abs=1e-9)
    assert success_interval(10, 10, method="exact").low == pytest.approx(0.025 ** 0.1, abs=1e-9)
    with pytest.raises(AssayError, match="valid: midp, wilson, jeffreys, exact"):
        success_interval(1, 2, method="agresti")


def test_newcombe_coverage_computed_exactly():
    n = 20
    intervals = {(k1, k2): newcombe_interval(k1, n, k2, n) for k1 in range(n + 1) for k2 in range(n + 1)}
    worst, total, cells = 1.0, 0.0, 0
    for p1 in (0.1, 0.5, 0.9):
        for p2 in (0.1, 0.5, 0.9):
            cov = sum(binom.pmf(k1, n, p1) * binom.pmf(k2, n, p2)
                      for (k1, k2), i in intervals.items() if i.low <= p1 - p2 <= i.high)
            worst, total, cells = min(worst, cov), total + cov, cells + 1
    assert total / cells >= 0.94 and worst >= 0.92


def _record(i: int, outcome: Outcome) -> EpisodeRecord:
    return EpisodeRecord(key=f"k{i}", campaign="c", task_id="t@1", task_hash="h", variant_key="nominal",
                         variant_name="nominal", variant={}, policy_name="p", policy_version="1", policy_spec={},
                         seed=i, episode_index=i, instruction="", outcome=outcome, reason="", steps=1,
                         total_return=0.0, success_step=None, trajectory_hash="")


def test_rate_table_offers_clopper_pearson():
    records = [_record(i, Outcome.SUCCESS if i < 3 else Outcome.TIMEOUT) for i in range(10)]
    (wilson,) = rate_table(records, by=("policy",), method="wilson")
    (exact,) = rate_table(records, by=("policy",), method="exact")
    assert exact.ci_low == pytest.approx(0.0667, abs=1e-4) and exact.ci_high == pytest.approx(0.6525, abs=1e-4)
    assert exact.ci_high - exact.ci_low > wilson.ci_high - wilson.ci_low
