"""Anytime-valid sequential statistics and posteriors: golden values, exact calibration, seeded simulation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import betaln

from assay.errors import AssayError
from assay.metrics.posterior import posterior, posterior_comparison, prob_greater
from assay.metrics.sequential import (
    BUDGET,
    DECIDED,
    NO_DIFFERENCE,
    compare_stop,
    fixed_n_pairs,
    lattice_boundary,
    lattice_p_value,
    mean_cs,
    mean_cs_path,
    mixture_log_e,
    mixture_p_value,
    paired_difference_cs,
    rate_cs,
)
from assay.metrics.sequential_evidence import draw_pairs, simulate_compare, simulate_methods, stop_looks

# ---------------------------------------------------------------- mixture e-process

def test_mixture_e_value_is_the_beta_mixture_likelihood_ratio() -> None:
    for s, f in [(0, 0), (3, 0), (2, 5), (10, 1)]:
        density = integrate.quad(lambda t, s=s, f=f: t**s * (1 - t) ** f * stats.beta.pdf(t, 0.5, 0.5), 0, 1)[0]
        assert math.exp(mixture_log_e(s, f)) == pytest.approx(density * 2 ** (s + f), rel=1e-7)
    assert mixture_log_e(0, 0) == pytest.approx(0.0)


def test_mixture_p_value_uses_the_running_maximum() -> None:
    # 8 wins then 8 losses: E falls back, the anytime p-value keeps the best look
    best = math.exp(-float(mixture_log_e(8, 0)))
    assert mixture_p_value([8, 8], [0, 8]) == pytest.approx(best)
    assert mixture_p_value([0], [0]) == 1.0


def test_mixture_is_a_martingale_under_the_null() -> None:
    # E[E_{m+1} | E_m] = E_m for a fair coin: check exactly over all paths of length 6
    for s, f in [(0, 0), (2, 1), (4, 2)]:
        step = 0.5 * math.exp(mixture_log_e(s + 1, f)) + 0.5 * math.exp(mixture_log_e(s, f + 1))
        assert step == pytest.approx(math.exp(mixture_log_e(s, f)), rel=1e-12)


# ---------------------------------------------------------------- exact lattice test

def _brute_hit(excess: float, slope: float, n: int) -> float:
    hits = 0
    for path in itertools.product((1, -1), repeat=n):
        d = np.cumsum(path)
        m = np.arange(1, n + 1)
        hits += bool(np.any(np.abs(d) - slope * m >= excess - 1e-12))
    return hits / 2**n


def test_lattice_calibration_matches_enumeration_of_every_path() -> None:
    bd = lattice_boundary(0.2, 0.3, 12)
    assert bd.type_one <= 0.2
    assert bd.type_one == pytest.approx(_brute_hit(bd.intercept, bd.slope, 12), abs=1e-12)
    # the next smaller intercept on the lattice would exceed alpha: the calibration is tight
    smaller = max(abs(d) - bd.slope * m for m in range(1, 13) for d in range(-m, m + 1, 2)
                  if abs(d) - bd.slope * m < bd.intercept - 1e-9)
    assert _brute_hit(smaller, bd.slope, 12) > 0.2


def test_lattice_p_value_is_exact_and_below_alpha_exactly_when_rejecting() -> None:
    bd = lattice_boundary(0.05, 0.1, 200)
    assert bd.type_one <= 0.05
    s, f = 30, 5
    assert bd.rejects(s, f)
    assert lattice_p_value(bd, [s], [f]) <= 0.05
    assert not bd.rejects(12, 10) and lattice_p_value(bd, [12], [10]) > 0.05
    assert lattice_p_value(bd, [], []) == 1.0


def test_lattice_rejects_bad_design() -> None:
    with pytest.raises(AssayError, match="delta"):
        lattice_boundary(0.05, 0.7, 100)
    with pytest.raises(AssayError, match="alpha"):
        lattice_boundary(1.5, 0.1, 100)


# ---------------------------------------------------------------- confidence sequences

def test_rate_cs_endpoints_are_where_the_mixture_ratio_hits_one_over_alpha() -> None:
    ci = rate_cs(7, 20, 0.05)
    mix = betaln(7.5, 13.5) - betaln(0.5, 0.5)
    for p in (ci.low, ci.high):
        assert 7 * math.log(p) + 13 * math.log(1 - p) == pytest.approx(mix - math.log(20), abs=1e-8)
    assert ci.low < 0.35 < ci.high
    # wider than the fixed-n Clopper–Pearson interval: the price of looking at every n
    cp = stats.binomtest(7, 20).proportion_ci(0.95, "exact")
    assert ci.low < cp.low and ci.high > cp.high


def test_rate_cs_edges() -> None:
    assert rate_cs(0, 0).low == 0.0 and rate_cs(0, 0).high == 1.0
    zero, full = rate_cs(0, 24), rate_cs(24, 24)
    assert zero.low == 0.0 and 0 < zero.high < 0.2
    assert full.high == 1.0 and full.low == pytest.approx(1 - zero.high)
    with pytest.raises(AssayError, match="impossible"):
        rate_cs(5, 3)


def test_rate_cs_is_time_uniform_in_simulation() -> None:
    rng = np.random.default_rng(7)
    missed = 0
    for _ in range(300):
        x = rng.random(150) < 0.3
        s = np.cumsum(x)
        missed += any(not (ci.low <= 0.3 <= ci.high)
                      for ci in (rate_cs(int(s[n - 1]), n, 0.1) for n in range(10, 151, 10)))
    assert missed / 300 <= 0.1


def test_betting_cs_covers_the_mean_of_continuous_scores_at_every_time() -> None:
    rng = np.random.default_rng(3)
    x = rng.beta(2.0, 5.0, size=(400, 200))  # mean 2/7
    low, high = mean_cs_path(x, 0.1)
    missed = np.any((low > 2 / 7) | (high < 2 / 7), axis=1).mean()
    assert missed <= 0.1
    assert np.all(np.diff(high - low, axis=1) <= 1e-12)  # running intersection never widens
    assert float(np.mean(high[:, -1] - low[:, -1])) < 0.2


def test_mean_cs_and_paired_difference_edges() -> None:
    assert mean_cs([]).low == 0.0 and mean_cs([]).high == 1.0
    ci = paired_difference_cs([1.0] * 60, [0.0] * 60)
    assert ci.low > 0.75 and ci.high == 1.0
    with pytest.raises(AssayError, match="equal lengths"):
        paired_difference_cs([1.0], [])
    with pytest.raises(AssayError, match=r"\[0, 1\]"):
        mean_cs([1.5])


# ---------------------------------------------------------------- stopping rules

def test_compare_stop_reasons() -> None:
    ones, zeros = [1.0] * 64, [0.0] * 64
    decided = compare_stop(ones, zeros, delta=0.2, batch=8, max_pairs=64)
    assert decided is not None and decided.reason == DECIDED and decided.pairs <= 16
    assert decided.p_value <= 0.05 and decided.fixed_n == fixed_n_pairs(0.05, 0.8, 0.2)
    same = compare_stop(ones * 4, ones * 4, delta=0.2, batch=8, max_pairs=256)
    assert same is not None and same.reason == NO_DIFFERENCE and same.p_value == 1.0
    rng = np.random.default_rng(0)
    a, b = (rng.random(64) < 0.5).astype(float), (rng.random(64) < 0.5).astype(float)
    budget = compare_stop(a, b, delta=0.05, batch=8, max_pairs=64, method="lattice")
    assert budget is not None and budget.reason == BUDGET and budget.pairs == 64
    assert compare_stop(ones[:7], zeros[:7], batch=8) is None  # no full batch yet
    with pytest.raises(AssayError, match="valid: mixture, lattice"):
        compare_stop(ones, zeros, method="t-test")


def test_vectorized_simulation_stops_where_compare_stop_does() -> None:
    a, b = draw_pairs(0.7, 0.5, 24, 96, seed=11)
    for method in ("mixture", "lattice"):
        used, reason = stop_looks(a, b, alpha=0.05, delta=0.2, batch=8, max_pairs=96, method=method)
        codes = {DECIDED: 0, NO_DIFFERENCE: 1, BUDGET: 2}
        for k in range(24):
            one = compare_stop(a[k], b[k], delta=0.2, batch=8, max_pairs=96, method=method)
            assert one is not None and (one.pairs, codes[one.reason]) == (used[k], reason[k])


@pytest.mark.slow
@pytest.mark.parametrize("rate", [0.5, 0.2])
def test_type_one_error_is_at_most_alpha(rate: float) -> None:
    runs = simulate_methods(rate, rate, campaigns=2000, seed=1, delta=0.2, batch=8, max_pairs=144)
    assert [r.method for r in runs] == ["mixture", "lattice"]
    for run in runs:
        assert run.rejected <= 0.05
        assert run.rejected + run.futile + run.budget == pytest.approx(1.0)


@pytest.mark.slow
def test_power_and_episodes_saved_at_the_design_difference_and_beyond() -> None:
    # lattice test, horizon 1.5 × the fixed-n design (96 pairs at delta 0.2): power ≥ 0.8 at delta
    at_delta = simulate_compare(0.7, 0.5, campaigns=2000, seed=2, delta=0.2, batch=8, max_pairs=144, method="lattice")
    assert at_delta.fixed_n == 96
    assert at_delta.rejected >= 0.8 and at_delta.wrong_sign == 0.0
    # a large gap (expert vs degraded) decides in well under half the fixed-n episodes
    for big in simulate_methods(0.9, 0.4, campaigns=2000, seed=3, delta=0.2, batch=8, max_pairs=144):
        assert big.rejected >= 0.99 and big.saved >= 0.5


# ---------------------------------------------------------------- posteriors

def test_prob_greater_matches_integration_and_symmetry() -> None:
    for sa, na, sb, nb in [(3, 10, 5, 10), (7, 20, 12, 30), (0, 5, 5, 5), (24, 24, 0, 24)]:
        def f(x, sa=sa, na=na, sb=sb, nb=nb):
            return stats.beta.pdf(x, 1 + sa, 1 + na - sa) * stats.beta.cdf(x, 1 + sb, 1 + nb - sb)
        assert prob_greater(sa, na, sb, nb) == pytest.approx(integrate.quad(f, 0, 1)[0], abs=1e-9)
        assert prob_greater(sa, na, sb, nb) + prob_greater(sb, nb, sa, na) == pytest.approx(1.0)
    assert prob_greater(0, 0, 0, 0) == pytest.approx(0.5)
    assert prob_greater(3, 10, 5, 10) == pytest.approx(0.19349845201238, abs=1e-12)


def test_posterior_and_suite_comparison() -> None:
    p = posterior(24, 24)
    assert p.mean == pytest.approx(25 / 26) and p.high > 0.99 and p.low == pytest.approx(stats.beta.ppf(0.025, 25, 1))
    same = posterior_comparison({"a": (5, 10, 5, 10), "b": (3, 8, 3, 8)}, seed=0)
    assert same.per_task == {"a": pytest.approx(0.5), "b": pytest.approx(0.5)}
    assert abs(same.suite - 0.5) < 0.02
    clear = posterior_comparison({"a": (20, 20, 2, 20)})
    assert clear.suite > 0.999 and clear.suite == posterior_comparison({"a": (20, 20, 2, 20)}).suite
    with pytest.raises(AssayError, match="impossible"):
        posterior(3, 2)
    with pytest.raises(AssayError, match="at least one task"):
        posterior_comparison({})
