"""Interval coverage computed exactly from the binomial pmf (no simulation), and the exact method."""

from __future__ import annotations

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


def test_wilson_coverage_is_near_nominal_in_every_cell():
    values = {cell: coverage(*cell, "wilson") for cell in CELLS}
    assert sum(values.values()) / len(values) >= 0.94
    assert min(values.values()) >= 0.92
    # Wilson's known dip near p = 0.05, n = 20 (about 0.925) is really there: the check is not vacuous.
    assert values[(0.05, 20)] == pytest.approx(0.925, abs=0.005)


def test_clopper_pearson_never_undercovers():
    assert min(coverage(p, n, "exact") for p, n in CELLS) >= 0.95


def test_clopper_pearson_by_hand():
    # 0 of 10: upper bound 1 - 0.025**(1/10); 10 of 10: lower bound 0.025**(1/10).
    assert success_interval(0, 10, method="exact").high == pytest.approx(1 - 0.025 ** 0.1, abs=1e-9)
    assert success_interval(10, 10, method="exact").low == pytest.approx(0.025 ** 0.1, abs=1e-9)
    with pytest.raises(AssayError, match="valid: wilson, exact"):
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
    (wilson,) = rate_table(records, by=("policy",))
    (exact,) = rate_table(records, by=("policy",), method="exact")
    assert exact.ci_low == pytest.approx(0.0667, abs=1e-4) and exact.ci_high == pytest.approx(0.6525, abs=1e-4)
    assert exact.ci_high - exact.ci_low > wilson.ci_high - wilson.ci_low
