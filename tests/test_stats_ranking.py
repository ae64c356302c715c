"""Leaderboards: suite scores, bootstrap rank intervals and P(A better than B)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from assay.metrics import leaderboard, outcome_grid, success_interval
from assay.metrics.intervals import central, mean_rate_interval, rate_draws
from assay.metrics.intervals_coverage import suite_coverage
from assay.metrics.ranking import competition_ranks
from tests.stats_fixtures import records


def test_competition_ranks_share_the_better_rank():
    assert competition_ranks(np.array([0.5, 0.9, 0.5, 0.1])).tolist() == [2, 1, 2, 4]


def test_clear_order_has_point_intervals_and_certain_probabilities():
    table = {("a", "t1@1"): "S" * 10, ("b", "t1@1"): "SSSSSFFFFF", ("c", "t1@1"): "F" * 10,
             ("a", "t2@1"): "S" * 10, ("b", "t2@1"): "SSSSSSSFFF", ("c", "t2@1"): "F" * 10}
    board = leaderboard(outcome_grid(records(table)))
    rows = {r.policy: r for r in board.rows}
    assert [r.policy for r in board.rows] == ["a", "b", "c"]
    assert rows["b"].score == pytest.approx((0.5 + 0.7) / 2)
    assert rows["b"].task_rates == {"t1@1": 0.5, "t2@1": 0.7}
    assert (rows["a"].rank_low, rows["a"].rank_high) == (1, 1)
    assert (rows["c"].rank, rows["c"].rank_low, rows["c"].rank_high) == (3, 3, 3)
    assert rows["b"].ci_low < rows["b"].score < rows["b"].ci_high
    assert board.p_better["a"]["c"] == 1.0 and board.p_better["c"]["a"] == 0.0


def test_close_policies_get_overlapping_rank_intervals_and_probabilities_sum_to_one():
    table = {("a", "t@1"): "SSSSSSFFFF", ("b", "t@1"): "SSSSSFSFFF", ("c", "t@1"): "SSFSSFSFFF"}
    board = leaderboard(outcome_grid(records(table)), seed=3)
    rows = {r.policy: r for r in board.rows}
    assert rows["a"].rank == 1 and rows["b"].rank == 1  # tied at 0.6: shared rank
    assert rows["c"].rank == 3 and rows["c"].rank_low == 1  # 0.5 could well be first
    for x in "abc":
        for y in "abc":
            if x != y:
                assert board.p_better[x][y] + board.p_better[y][x] == pytest.approx(1.0)
    assert board.p_better["a"]["b"] == pytest.approx(0.5, abs=0.1)
    assert leaderboard(outcome_grid(records(table)), seed=3) == board


def test_errors_leave_the_denominator_and_a_policy_without_scored_task_is_unranked():
    table = {("a", "t1@1"): "SSEE", ("a", "t2@1"): "SFSF", ("b", "t1@1"): "EEEE", ("b", "t2@1"): "SSSS"}
    board = leaderboard(outcome_grid(records(table)))
    rows = {r.policy: r for r in board.rows}
    assert rows["a"].score == pytest.approx((1.0 + 0.5) / 2) and rows["a"].errors == 2 and rows["a"].scored == 6
    assert rows["b"].score is None and rows["b"].rank is None and board.rows[-1].policy == "b"
    assert board.p_better == {"a": {}}


def test_suite_interval_never_collapses_at_eight_of_eight():
    table = {("a", "t1@1"): "S" * 8, ("a", "t2@1"): "S" * 8, ("b", "t1@1"): "SSSSFFFF", ("b", "t2@1"): "SSSSSSFF"}
    rows = {r.policy: r for r in leaderboard(outcome_grid(records(table))).rows}
    assert rows["a"].score == 1.0 and rows["a"].ci_high == 1.0
    assert 0.7 < rows["a"].ci_low < 0.9  # mean of two draws from 8/8's mid-p confidence distribution
    # One task: the suite interval is the task's own (default mid-p) interval.
    one = {r.policy: r for r in leaderboard(outcome_grid(records({("a", "t@1"): "S" * 8,
                                                                  ("b", "t@1"): "F" * 8}))).rows}
    assert one["a"].ci_low == pytest.approx(0.05 ** (1 / 8), abs=1e-9) and one["b"].ci_high < 0.35


def test_one_task_confidence_draws_reproduce_the_mid_p_interval():
    draws = rate_draws(np.random.default_rng(0), 3, 10, 400_000)
    interval, exact = central(draws, 0.95), success_interval(3, 10)
    assert (interval.low, interval.high) == pytest.approx((exact.low, exact.high), abs=0.002)


def test_suite_interval_coverage_computed_exactly_over_two_tasks():
    # Every outcome (k1, k2) of two tasks with 8 episodes each, weighted by its probability; the interval
    # of the mean rate must cover the true mean >= 0.93 of the time (Jeffreys draws fell to 0.85 at 0.99).
    n = 8
    intervals = {(a, b): mean_rate_interval([(a, n), (b, n)]) for a in range(n + 1) for b in range(n + 1)}
    for p1, p2 in ((0.5, 0.5), (0.99, 0.99), (0.05, 0.5), (0.2, 0.8), (0.7, 0.9), (0.95, 0.95)):
        truth = (p1 + p2) / 2
        coverage = sum(binom.pmf(a, n, p1) * binom.pmf(b, n, p2) for (a, b), i in intervals.items()
                       if i.low <= truth <= i.high)
        assert coverage >= 0.93, (p1, p2, coverage)
        assert coverage == pytest.approx(suite_coverage((p1, p2), (n, n)), abs=1e-9)


@pytest.mark.parametrize(("rates", "episodes"), [
    ((0.01, 0.02, 0.05), (6, 6, 6)),  # the mid-p draws covered 0.919 here
    ((0.01, 0.02, 0.05), (10, 10, 10)), ((0.95, 0.98, 0.99), (6, 6, 6)), ((1.0, 1.0, 0.9), (20, 20, 20)),
    ((0.99, 0.99, 0.99), (20, 20, 20)), ((0.01, 0.01, 0.01), (30, 30, 30)), ((0.02,) * 4, (8,) * 4),
    ((0.0, 0.0, 0.05), (6, 9, 12)), ((1.0, 0.95), (24, 30)), ((0.99, 0.01), (15, 15)), ((0.5, 0.5, 0.5), (8, 8, 8)),
])
def test_suite_interval_covers_at_the_edges_exactly(rates, episodes):
    assert suite_coverage(rates, episodes) >= 0.93


def test_suite_interval_golden_cases():
    # 8/8 twice: the pooled mid-p end of 16/16 is 0.05^(1/16) = 0.829 (½ p^16 = 0.025); square-and-add of the
    # two tasks' own ends, 1 − √2 (1 − 0.05^(1/8)) / 2 = 0.779, is lower: the interval takes the outer end
    got = mean_rate_interval([(8, 8), (8, 8)])
    assert (got.low, got.high) == pytest.approx((1 - 2 ** 0.5 * (1 - 0.05 ** (1 / 8)) / 2, 1.0), abs=1e-9)
    # equal episodes: never narrower than the mid-p interval of all the episodes pooled
    pooled = success_interval(9, 30)
    got = mean_rate_interval([(2, 10), (3, 10), (4, 10)])
    assert got.low <= pooled.low + 1e-9 and got.high >= pooled.high - 1e-9
    # unequal episodes: the effective size K² / Σ 1/n and the mean of the rates, the point always inside
    got = mean_rate_interval([(0, 6), (3, 12)])
    assert got.low <= 0.125 <= got.high and got.low > 0.0
