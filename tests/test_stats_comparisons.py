"""Paired McNemar and bootstrap, Newcombe, Holm and verdicts, against hand-computed values."""

from __future__ import annotations

import pytest

from assay.errors import AssayError
from assay.metrics import Pairing, Verdict, compare, holm, mcnemar_exact, newcombe_interval, outcome_grid
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
    assert (t1.ci_low, t1.ci_high) == (1.0, 1.0)
    # The other direction reads "worse".
    (back, *_) = compare(outcome_grid(records(TABLE)), "b", ["a"])
    assert back.verdict is Verdict.WORSE and back.difference == -1.0


def test_error_pairs_are_dropped_and_counted():
    table = {("a", "t@1"): "SSSEE", ("b", "t@1"): "FFFFE"}
    row = compare(outcome_grid(records(table)), "a", ["b"])[0]
    assert (row.pairs, row.dropped_pairs, row.a_only) == (3, 2, 3)
    assert row.a_rate == 1.0 and row.b_rate == 0.0


def test_bootstrap_interval_is_deterministic_and_seeded():
    table = {("a", "t@1"): "SSFSFSSFSS" * 2, ("b", "t@1"): "SFFSSFFFSF" * 2}
    grid = outcome_grid(records(table))
    one, again = compare(grid, "a", ["b"]), compare(grid, "a", ["b"])
    other_seed = compare(grid, "a", ["b"], seed=1)
    assert one == again
    assert (one[0].ci_low, one[0].ci_high) != (other_seed[0].ci_low, other_seed[0].ci_high)
    assert one[0].ci_low < one[0].difference < one[0].ci_high


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
