"""Paired McNemar and bootstrap, Newcombe, Holm and verdicts, against hand-computed values."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from scipy.stats import multinomial

from assay.errors import AssayError
from assay.metrics import Pairing, Verdict, compare, holm, mcnemar_exact, newcombe_interval, outcome_grid
from assay.metrics.intervals import newcombe_paired_interval
from tests.stats_fixtures import records


def test_mcnemar_exact_by_hand():
    assert mcnemar_exact(6, 0) == pytest.approx(2 / 2**6)
    assert mcnemar_exact(0, 0) == 1.0
    # 8 vs 2 discordant: 2 * P(X <= 2), X ~ Bin(10, 1/2) = 2 * 56/1024
    assert mcnemar_exact(2, 8) == pytest.approx(2 * 56 / 1024)


@pytest.mark.parametrize("counts, expected", [
    ((56, 70, 48, 80), (0.0524, 0.3339)),   # Newcombe (1998), Table II, method 10
    ((9, 10, 3, 10), (0.1705, 0.8090)),
])
def test_newcombe_matches_the_published_table(counts, expected):
    interval = newcombe_interval(*counts)
    assert (interval.low, interval.high) == pytest.approx(expected, abs=1e-4)


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 -> 3*0.01, 2*0.03, max(1*0.04, 0.06)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


TABLE = {
    ("a", "t1@1"): "SSSSSSSSSS",
    ("b", "t1@1"): "FFFFFFFFFF",
    ("c", "t1@1"): "SSSSSSSSSF",
    ("a", "t2@1"): "SSSSSSSSSS",
    ("b", "t2@1"): "FFFFFFFFFF",
    ("c", "t2@1"): "SSSSSSSSSS",
}


def _by(rows, b, task):
    return next(r for r in rows if r.b == b and r.task == task)


def test_paired_comparison_figures_and_verdicts():
    rows = compare(outcome_grid(records(TABLE)), "a", ["b", "c"])
    suite_b = _by(rows, "b", "suite")
    assert (suite_b.a_only, suite_b.b_only, suite_b.pairs) == (20, 0, 20)
    assert suite_b.difference == 1.0 and suite_b.p_value == pytest.approx(2 / 2**20)
    assert suite_b.verdict is Verdict.BETTER
    suite_c = _by(rows, "c", "suite")
    assert suite_c.difference == pytest.approx(0.05) and suite_c.p_value == 1.0
    assert suite_c.verdict is Verdict.NO_DIFFERENCE
    # Per task: 4 tests in the family; 2/2**10 * 4 is still < 0.05.
    t1 = _by(rows, "b", "t1@1")
    assert t1.p_adjusted == pytest.approx(4 * 2 / 2**10) and t1.verdict is Verdict.BETTER
    # 10 of 10 against 0 of 10: Newcombe's paired interval, not the bootstrap's [1, 1]. No margin is
    # shared (φ = 0), so the lower end is 1 − √2 · z²/(n + z²) from the two Wilson ends.
    z2 = 1.959963984540054 ** 2
    assert (t1.ci_low, t1.ci_high) == pytest.approx((1 - math.sqrt(2) * z2 / (10 + z2), 1.0), abs=1e-9)
    assert suite_b.ci_low < 1.0 and suite_b.ci_high == 1.0
    # The other direction reads "worse".
    (back, *_) = compare(outcome_grid(records(TABLE)), "b", ["a"])
    assert back.verdict is Verdict.WORSE and back.difference == -1.0


def test_error_pairs_are_dropped_and_counted():
    table = {("a", "t@1"): "SSSEE", ("b", "t@1"): "FFFFE"}
    row = compare(outcome_grid(records(table)), "a", ["b"])[0]
    assert (row.pairs, row.dropped_pairs, row.a_only) == (3, 2, 3)
    assert row.a_rate == 1.0 and row.b_rate == 0.0


def test_task_interval_is_newcombe_paired_and_the_suite_interval_is_seeded():
    table = {("a", "t@1"): "SSFSFSSFSS" * 2, ("b", "t@1"): "SFFSSFFFSF" * 2,
             ("a", "u@1"): "SSSSSFFSSS", ("b", "u@1"): "SSFSSFFSFS"}
    grid = outcome_grid(records(table))
    one, again = compare(grid, "a", ["b"]), compare(grid, "a", ["b"])
    other_seed = compare(grid, "a", ["b"], seed=1)
    assert one == again
    t = _by(one, "b", "t@1")
    # both, A only, B only, neither over the 20 pairs of t@1
    expected = newcombe_paired_interval(6, 8, 2, 4)
    assert (t.a_only, t.b_only) == (8, 2) and (t.ci_low, t.ci_high) == (expected.low, expected.high)
    suite, suite_other = _by(one, "b", "suite"), _by(other_seed, "b", "suite")
    assert (suite.ci_low, suite.ci_high) != (suite_other.ci_low, suite_other.ci_high)
    assert suite.ci_low < suite.difference < suite.ci_high
    assert abs(suite.ci_low - suite_other.ci_low) < 0.02  # 20 000 draws: the seed moves the ends little


def test_five_of_five_against_none_is_not_a_point_interval():
    row = compare(outcome_grid(records({("a", "t@1"): "SSSSS", ("b", "t@1"): "FFFFF"})), "a", ["b"])[0]
    assert row.difference == 1.0 and row.ci_high == 1.0
    assert 0.3 < row.ci_low < 0.5  # 1 − √2 · z²/(5 + z²) = 0.386
    tied = compare(outcome_grid(records({("a", "t@1"): "SSSSF", ("b", "t@1"): "SSSSF"})), "a", ["b"])[0]
    assert tied.difference == 0.0 and tied.ci_low < -0.2 and tied.ci_high > 0.2


@functools.cache
def _paired_intervals(n):
    """Every paired table of n pairs (both, A only, B only, neither) with its Newcombe interval."""
    tables = [(both, a_only, b_only, n - both - a_only - b_only)
              for both in range(n + 1) for a_only in range(n + 1 - both) for b_only in range(n + 1 - both - a_only)]
    return np.array(tables), np.array([tuple(newcombe_paired_interval(*t).__dict__.values()) for t in tables])


@pytest.mark.parametrize("cells", [(0.6, 0.1, 0.1, 0.2), (0.8, 0.15, 0.0, 0.05), (0.3, 0.3, 0.1, 0.3),
                                   (0.9, 0.05, 0.05, 0.0)])
def test_newcombe_paired_coverage_computed_exactly(cells):
    # Every paired table of n = 15 pairs, weighted by its multinomial probability.
    n = 15
    tables, ends = _paired_intervals(n)
    truth = cells[1] - cells[2]
    inside = (ends[:, 0] <= truth + 1e-12) & (truth - 1e-12 <= ends[:, 1])
    assert float(multinomial.pmf(tables, n, cells)[inside].sum()) >= 0.93


def test_unpaired_falls_back_when_no_seed_is_shared():
    table_a = records({("a", "t@1"): "SSSSSSSS"})
    table_b = records({("b", "t@1"): "FFFFFFFS"}, seed_offset=100)
    row = compare(outcome_grid(table_a + table_b), "a", ["b"])[0]
    assert row.pairing is Pairing.UNPAIRED and row.pairs == 0
    expected = newcombe_interval(8, 8, 1, 8)
    assert (row.ci_low, row.ci_high) == (expected.low, expected.high)
    forced = compare(outcome_grid(records(TABLE)), "a", ["c"], pairing=Pairing.UNPAIRED)
    assert all(r.pairing is Pairing.UNPAIRED for r in forced)


def test_bad_input_is_one_clear_error():
    grid = outcome_grid(records(TABLE))
    with pytest.raises(AssayError, match="unknown policy 'zz'; valid: a, b, c"):
        compare(grid, "a", ["zz"])
    with pytest.raises(AssayError, match="distinct"):
        compare(grid, "a", ["a"])
    with pytest.raises(AssayError, match="unknown task 't9'; valid: t1@1, t2@1"):
        outcome_grid(records(TABLE), tasks=["t9"])
    with pytest.raises(AssayError, match="alpha"):
        compare(grid, "a", ["b"], alpha=1.5)
