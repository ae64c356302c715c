"""Pearson, Spearman, Kendall and MMRV by hand; MMRV ties; undefined cases; bootstrap determinism."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kendalltau, pearsonr, spearmanr

from assay.metrics import RateEntry, correlate, correlation, mmrv
from assay.metrics.correlation import _rows


def test_mmrv_hand_checked_case_from_the_issue():
    assert mmrv(real=[0.9, 0.1, 0.5], sim=[0.5, 0.5, 0.2]) == pytest.approx(0.4)


@pytest.mark.parametrize("real, sim, expected", [
    ([0.1, 0.5, 0.9], [0.2, 0.4, 0.8], 0.0),               # same order
    ([0.1, 0.5, 0.9], [0.9, 0.5, 0.1], (0.8 + 0.4 + 0.8) / 3),  # reversed
    ([0.2, 0.6], [0.3, 0.3], 0.4 / 2),                    # sim tie hiding a real gap: counted once
    ([0.5, 0.5], [0.1, 0.9], 0.0),                        # real tie: the gap is 0, so no cost
    ([0.5, 0.5], [0.3, 0.3], 0.0),                        # tied on both sides
    ([0.7], [0.1], 0.0),                                  # one policy
])
def test_mmrv_ties_and_edges(real, sim, expected):
    assert mmrv(real, sim) == pytest.approx(expected)


def test_correlations_by_hand():
    x, y = [0.0, 0.5, 1.0], [0.0, 1.0, 1.0]
    assert correlation("pearson", x, y)[0] == pytest.approx(0.5 / np.sqrt(0.5 * 2 / 3))
    assert correlation("spearman", x, y)[0] == pytest.approx(1.5 / np.sqrt(2 * 1.5))
    assert correlation("kendall", x, y)[0] == pytest.approx(2 / np.sqrt(3 * 2))  # tau-b with one tie in y


@pytest.mark.parametrize("kind", ["pearson", "spearman", "kendall"])
def test_constant_vectors_and_single_policies_are_undefined_not_nan(kind):
    value, reason = correlation(kind, [0.2, 0.2, 0.2], [0.1, 0.5, 0.9])
    assert value is None and reason == "undefined: real success rates are all 0.2 (constant)"
    value, reason = correlation(kind, [0.1, 0.5], [0.3, 0.3])
    assert value is None and "sim success rates are all 0.3" in reason
    assert correlation(kind, [0.1], [0.3]) == (None, "undefined: needs at least 2 policies, got 1")


def test_vectorized_resample_statistics_agree_with_scipy():
    rng = np.random.default_rng(7)
    r = rng.integers(0, 5, size=(50, 4)) / 4
    s = rng.integers(0, 5, size=(50, 4)) / 4
    for kind, reference in (("pearson", pearsonr), ("spearman", spearmanr), ("kendall", kendalltau)):
        got = _rows(kind, r, s)
        for i in range(len(r)):
            if np.ptp(r[i]) == 0 or np.ptp(s[i]) == 0:
                assert np.isnan(got[i])
            else:
                assert got[i] == pytest.approx(reference(r[i], s[i]).statistic)
    assert _rows("mmrv", r, s) == pytest.approx([mmrv(a, b) for a, b in zip(r, s, strict=True)])


def _entries(rates: dict[tuple[str, str], tuple[int, int]], source: str) -> list[RateEntry]:
    return [RateEntry(t, p, k / n, k, n, i + 2, source) for i, ((t, p), (k, n)) in enumerate(rates.items())]


REAL = {("t1", "a"): (18, 20), ("t1", "b"): (10, 20), ("t1", "c"): (2, 20),
        ("t2", "a"): (15, 20), ("t2", "b"): (16, 20), ("t2", "c"): (4, 20)}
SIM = {("t1@1", "a"): (45, 50), ("t1@1", "b"): (30, 50), ("t1@1", "c"): (5, 50),
       ("t2@1", "a"): (40, 50), ("t2@1", "b"): (30, 50), ("t2@1", "c"): (10, 50)}


def test_correlate_per_task_and_averaged_with_episode_resampling():
    report = correlate(_entries(REAL, "real.csv"), _entries(SIM, "sim.csv"))
    t1, t2 = report.tasks
    assert (t1.task, t1.other_task, t1.policies, t1.resampling) == ("t1", "t1@1", ("a", "b", "c"), "episodes")
    assert t1.stats["mmrv"].value == 0.0 and t1.stats["kendall"].value == pytest.approx(1.0)
    # t2: real b (0.8) > a (0.75) but sim a > b: i=a violated by |0.75-0.8|, i=b by the same gap.
    assert t2.stats["mmrv"].value == pytest.approx((0.05 + 0.05 + 0.0) / 3)
    assert t2.stats["pearson"].value == pytest.approx(pearsonr([0.75, 0.8, 0.2], [0.8, 0.6, 0.2]).statistic)
    for kind in ("pearson", "spearman", "kendall", "mmrv"):
        expected = (t1.stats[kind].value + t2.stats[kind].value) / 2
        assert report.average[kind].value == pytest.approx(expected)
        assert report.average[kind].ci_low <= report.average[kind].ci_high
    assert t2.stats["pearson"].ci_low <= t2.stats["pearson"].value <= t2.stats["pearson"].ci_high
    assert correlate(_entries(REAL, "real.csv"), _entries(SIM, "sim.csv")) == report
    assert correlate(_entries(REAL, "real.csv"), _entries(SIM, "sim.csv"), seed=5) != report


def test_rates_without_counts_resample_policies():
    real = [RateEntry("t", p, r, row=i + 2, source="real.csv") for i, (p, r) in enumerate(zip("abcd", [0.9, 0.6, 0.4, 0.1], strict=True))]
    sim = [RateEntry("t", p, r, row=i + 2, source="sim.csv") for i, (p, r) in enumerate(zip("abcd", [0.8, 0.7, 0.2, 0.3], strict=True))]
    report = correlate(real, sim, n_resamples=500)
    (task,) = report.tasks
    assert task.resampling == "policies"
    # Drawing the same policy 4 times gives a constant vector: such resamples are counted, not NaN'd into the CI.
    assert task.stats["pearson"].undefined_resamples > 0
    assert report.unmatched == ()


def test_open_loop_misranked_pairs_golden():
    from assay.metrics.openloop import OpenLoopRow, misranked_pairs, rank_agreement

    # c has the lowest MSE but the lowest success: misranked against every other; b and d tie on success
    names, mse, closed = ("a", "b", "c", "d"), (0.2, 0.3, 0.1, 0.4), (0.9, 0.5, 0.1, 0.5)
    assert misranked_pairs(names, mse, closed) == (("c", "a"), ("c", "b"), ("c", "d"))
    assert misranked_pairs(("x", "y"), (0.1, 0.1), (0.0, 1.0)) == ()  # equal MSE: no order to get wrong
    assert misranked_pairs(("x",), (0.1,), (0.5,)) == ()
    rows = [OpenLoopRow(policy=n, task="t", episodes=1, steps=1, mse=m, r2=None, r2_reason="-", constant_dims=0)
            for n, m in zip(names, mse, strict=True)]
    (agreement,) = rank_agreement(rows, {(n, "t"): c for n, c in zip(names, closed, strict=True)})
    assert agreement.misranked == (("c", "a"), ("c", "b"), ("c", "d"))


def test_a_task_with_one_policy_has_no_mmrv_and_is_left_out_of_the_average():
    # t1 has three policies in the same order (MMRV 0.0 would be fine), t2 has one policy misranked nowhere:
    # averaged in, its "MMRV 0" would halve any real disagreement; it is undefined and excluded instead.
    real = [RateEntry("t1@1", p, r) for p, r in zip("abc", [0.9, 0.5, 0.1], strict=True)]
    sim = [RateEntry("t1@1", p, r) for p, r in zip("abc", [0.1, 0.5, 0.9], strict=True)]
    real.append(RateEntry("t2@1", "a", 0.7))
    sim.append(RateEntry("t2@1", "a", 0.2))
    report = correlate(real, sim, n_resamples=200)
    one = next(t for t in report.tasks if t.task == "t2@1")
    assert one.stats["mmrv"].value is None and one.stats["mmrv"].reason == "undefined: needs at least 2 policies, got 1"
    assert report.tasks_averaged["mmrv"] == 1
    assert report.average["mmrv"].value == pytest.approx((0.8 + 0.4 + 0.8) / 3)  # t1's alone, not halved


def test_an_anti_correlated_task_has_its_estimate_inside_its_interval():
    # Redrawing the episodes of both sides pulls r toward 0: at r = -1 every resample lies above it.
    real = {("t", p): (k, 20) for p, k in zip("abcd", (18, 14, 6, 2), strict=True)}
    sim = {("t", p): (k, 20) for p, k in zip("abcd", (2, 6, 14, 18), strict=True)}  # sim = 1 - real: r = -1
    report = correlate(_entries(real, "real.csv"), _entries(sim, "sim.csv"), n_resamples=500)
    (task,) = report.tasks
    e = task.stats["pearson"]
    assert e.value == pytest.approx(-1.0) and e.ci_low == pytest.approx(-1.0) and e.ci_high > -0.99
    assert e.widened  # the percentile interval alone excluded the estimate
    for e in (*task.stats.values(), *report.average.values()):
        if e.value is not None:
            assert e.ci_low <= e.value <= e.ci_high


def test_two_policy_tasks_are_shown_but_left_out_of_the_averaged_coefficients():
    # t2 has two policies: r = ±1 whatever the rates; averaged in, it would pull the mean toward ±1
    real = {**REAL, ("t3", "a"): (18, 20), ("t3", "b"): (4, 20)}
    sim = {**SIM, ("t3@1", "a"): (30, 50), ("t3@1", "b"): (29, 50)}
    report = correlate(_entries(real, "real.csv"), _entries(sim, "sim.csv"), n_resamples=300)
    two = next(t for t in report.tasks if t.task == "t3")
    why = "±1 by construction with 2 policies: left out of the average"
    for kind in ("pearson", "spearman", "kendall"):
        assert two.stats[kind].value == pytest.approx(1.0) and two.stats[kind].note == why
        assert report.left_out[kind] == {"t3": why} and report.tasks_averaged[kind] == 2
        three = [t.stats[kind].value for t in report.tasks if t.task != "t3"]
        assert report.average[kind].value == pytest.approx(np.mean(three))
    # MMRV is defined at two policies (one pair, ordered right here) and stays in its average
    assert report.tasks_averaged["mmrv"] == 3 and "mmrv" not in report.left_out
    from assay.cli.stats_render import left_out_lines

    assert left_out_lines(report)[0] == f"pearson: left out of the average: t3 ({why})"
