"""Episode budgets: published values, and the power they promise checked exactly from binomial pmfs
and by seeded simulation of the tests compare runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import binom, binomtest, fisher_exact, norm

from assay.errors import AssayError
from assay.metrics import episode_budget, mcnemar_exact
from assay.metrics.budget import fisher_power, fisher_rejects, mcnemar_power


def test_unpaired_budget_matches_the_textbook_value():
    # p1 = 0.6, p2 = 0.5, alpha 0.05, power 0.8: 387.3 -> 388 per group (Fleiss, no continuity correction).
    budget = episode_budget(0.1, 0.8, baseline=0.6, test="approx")
    assert budget.episodes_per_cell == 388 and budget.alternative == pytest.approx(0.5)
    # Default baseline 0.5: 0.5 vs 0.4 is the mirror image of 0.6 vs 0.5; a baseline near 1 needs far fewer.
    assert episode_budget(0.1, test="approx").episodes_per_cell == 388
    assert episode_budget(0.1, baseline=0.95, test="approx").episodes_per_cell < 200


def _z_test_power(n: int, p1: float, p2: float, alpha: float = 0.05) -> float:
    k = np.arange(n + 1)
    x1, x2 = np.meshgrid(k, k, indexing="ij")
    pooled = (x1 + x2) / (2 * n)
    se = np.sqrt(pooled * (1 - pooled) * 2 / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, np.abs(x1 / n - x2 / n) / se, 0.0)
    reject = z > norm.ppf(1 - alpha / 2)
    return float((np.outer(binom.pmf(k, n, p1), binom.pmf(k, n, p2)) * reject).sum())


def test_unpaired_budget_delivers_its_power_exactly():
    budget = episode_budget(0.2, 0.8, baseline=0.7, test="approx")
    power = _z_test_power(budget.episodes_per_cell, budget.baseline, budget.alternative)
    assert 0.78 <= power <= 0.85
    assert _z_test_power(budget.episodes_per_cell // 2, budget.baseline, budget.alternative) < 0.6


def _mcnemar_power(n: int, p_a_only: float, p_b_only: float, alpha: float = 0.05) -> float:
    psi = p_a_only + p_b_only
    power = 0.0
    for d in range(1, n + 1):
        b = np.arange(d + 1)
        reject = np.array([binomtest(int(x), d, 0.5).pvalue < alpha for x in b])
        power += binom.pmf(d, n, psi) * float((binom.pmf(b, d, p_a_only / psi) * reject).sum())
    return power


def test_paired_formula_is_connor_and_falls_short_with_the_exact_mcnemar_test():
    budget = episode_budget(0.2, 0.8, baseline=0.7, paired=True, discordance=0.3, test="approx")
    assert budget.discordance == 0.3
    n = budget.episodes_per_cell
    assert n == math.ceil((norm.ppf(0.975) * math.sqrt(0.3) + norm.ppf(0.8) * math.sqrt(0.3 - 0.04)) ** 2 / 0.04)
    # discordant pairs split 0.25 / 0.05 gives the difference 0.2; the exact test compare runs falls short.
    assert 0.75 <= _mcnemar_power(n, 0.25, 0.05) < 0.8
    assert mcnemar_power(n, 0.25, 0.05) == pytest.approx(_mcnemar_power(n, 0.25, 0.05), abs=1e-12)
    # Correlated policies (low discordance) need fewer episodes than independent ones.
    assert n < episode_budget(0.2, 0.8, baseline=0.7, paired=True, test="approx").episodes_per_cell


def test_fisher_rejection_region_is_scipys_on_every_table():
    n = 30
    reject = fisher_rejects(n, 0.05)
    expected = np.array([[fisher_exact([[a, n - a], [b, n - b]]).pvalue < 0.05 for b in range(n + 1)]
                         for a in range(n + 1)])
    assert (reject == expected).all() and reject.sum() > 0


@pytest.mark.parametrize("paired, delta, baseline, discordance, expected, approx", [
    (False, 0.1, None, None, 404, 388),   # Fisher at 0.5 vs 0.4: the z test's 388 has power 0.775
    (False, 0.2, 0.7, None, 102, 93),
    (True, 0.1, None, None, 408, 391),    # exact McNemar, independent outcomes on a seed
    (True, 0.3, None, None, 46, 42),
    (True, 0.2, 0.7, 0.3, 61, 57),
])
def test_exact_budget_reaches_its_power_where_the_approximation_does_not(paired, delta, baseline, discordance,
                                                                        expected, approx):
    budget = episode_budget(delta, 0.8, baseline, paired, discordance=discordance)
    assert (budget.episodes_per_cell, budget.approx_episodes, budget.test) == (expected, approx, "exact")
    p1 = budget.baseline
    directions = [p2 for p2 in (p1 - delta, p1 + delta) if 0 <= p2 <= 1]
    discordances = [discordance] if discordance else [p1 * (1 - p2) + p2 * (1 - p1) for p2 in directions]

    def power(n):
        if paired:
            return min(mcnemar_power(n, (s + delta) / 2, (s - delta) / 2) for s in discordances)
        return min(fisher_power(n, p1, p2) for p2 in directions)

    assert budget.achieved_power == pytest.approx(power(expected), abs=1e-12) and budget.achieved_power >= 0.8
    assert power(expected - 1) < 0.8 and power(approx) < 0.8


def test_exact_power_agrees_with_simulating_the_tests_compare_runs():
    rng = np.random.default_rng(0)
    runs = 1000
    # Unpaired: Fisher's test on two independent cells of n, as compare --unpaired computes it.
    fisher = episode_budget(0.3, 0.8)
    n = fisher.episodes_per_cell
    k1, k2 = rng.binomial(n, 0.5, runs), rng.binomial(n, 0.2, runs)
    hits = np.mean([fisher_exact([[a, n - a], [b, n - b]]).pvalue < 0.05 for a, b in zip(k1, k2, strict=True)])
    assert hits == pytest.approx(fisher_power(n, 0.5, 0.2), abs=0.04)
    assert fisher_power(n, 0.5, 0.2) >= 0.8
    # Paired: outcomes independent on a seed, the exact McNemar test on the discordant pairs.
    mcnemar = episode_budget(0.3, 0.8, paired=True)
    n = mcnemar.episodes_per_cell
    a, b = rng.random((runs, n)) < 0.5, rng.random((runs, n)) < 0.2
    wins, losses = (a & ~b).sum(axis=1), (~a & b).sum(axis=1)
    hits = np.mean([mcnemar_exact(int(w), int(v)) < 0.05 for w, v in zip(wins, losses, strict=True)])
    psi = 0.5 * 0.8 + 0.2 * 0.5
    assert hits == pytest.approx(mcnemar_power(n, (psi + 0.3) / 2, (psi - 0.3) / 2), abs=0.04)


def test_mcnemar_region_is_the_exact_binomial_tests():
    # With P(A only) + P(B only) = 1 every pair is discordant, so the power is P(reject | m) itself.
    for m in range(1, 41):
        b = np.arange(m + 1)
        rejected = np.array([binomtest(int(x), m, 0.5).pvalue < 0.05 for x in b])
        assert mcnemar_power(m, 0.7, 0.3) == pytest.approx(float((binom.pmf(b, m, 0.7) * rejected).sum()), abs=1e-12)


def test_holm_family_raises_the_budget_and_bad_input_is_refused():
    assert episode_budget(0.1, comparisons=5).episodes_per_cell > episode_budget(0.1).episodes_per_cell
    with pytest.raises(AssayError, match=r"--delta 0.0 is out of range; valid: \(0.0, 1.0\)"):
        episode_budget(0.0)
    with pytest.raises(AssayError, match="--discordance 0.1 is impossible for --delta 0.2"):
        episode_budget(0.2, paired=True, discordance=0.1)
    with pytest.raises(AssayError, match="--baseline"):
        episode_budget(0.1, baseline=1.5)
    with pytest.raises(AssayError, match="--test 'z' is not valid; valid: exact, approx"):
        episode_budget(0.1, test="z")


@pytest.mark.parametrize(("delta", "baseline"), [(0.2, 0.8), (0.3, 0.7), (0.1, 0.9), (0.2, 0.2)])
def test_an_alternative_at_the_edge_of_zero_one_is_kept_despite_float_rounding(delta, baseline):
    # 0.8 vs 1.0 with independent outcomes: discordance 0.8 * 0 + 1.0 * 0.2 = 0.2 exactly, which float arithmetic
    # gives as 0.19999999999999996 < delta; that used to exit 2 blaming a --discordance never passed.
    for paired in (True, False):
        budget = episode_budget(delta, baseline=baseline, paired=paired)
        edge = round(baseline + delta, 12) if baseline + delta > 0.99 else round(baseline - delta, 12)
        assert edge in (0.0, 1.0)
        at_edge = episode_budget(delta, baseline=baseline, paired=paired, test="approx")
        assert budget.episodes_per_cell >= 1 and at_edge.episodes_per_cell >= 1
    # the edge direction itself (1.0 vs 0.8 from baseline 1.0) is a valid design: discordance = delta exactly
    top = episode_budget(delta, baseline=round(baseline + delta, 12) if baseline + delta > 0.99 else 0.0, paired=True)
    assert top.discordance == pytest.approx(delta) and top.achieved_power >= 0.8


def test_only_truly_impossible_paired_inputs_are_refused():
    # a discordance below delta is impossible (P(A only) − P(B only) = delta needs at least delta discordant)
    with pytest.raises(AssayError, match=r"^--discordance 0.19 is impossible for --delta 0.2; valid: \[0.2, 1\]$"):
        episode_budget(0.2, paired=True, discordance=0.19)
    assert episode_budget(0.2, paired=True, discordance=0.2).episodes_per_cell >= 1
    with pytest.raises(AssayError, match=r"^--delta 0.6 leaves \[0, 1\] in both directions from --baseline 0.5$"):
        episode_budget(0.6, paired=True)


def test_the_budget_command_answers_the_edge_case_and_names_what_is_wrong_otherwise():
    from typer.testing import CliRunner

    from assay.cli.app import app

    runner = CliRunner()
    ok = runner.invoke(app, ["budget", "--paired", "--delta", "0.2", "--baseline", "0.8", "--json"])
    assert ok.exit_code == 0, ok.output
    expected = episode_budget(0.2, baseline=0.8, paired=True).episodes_per_cell
    assert json.loads(ok.stdout)["episodes_per_cell"] == expected
    bad = runner.invoke(app, ["budget", "--paired", "--delta", "0.2", "--discordance", "0.1"])
    assert bad.exit_code == 2 and bad.output.strip().splitlines() == [
        "error: --discordance 0.1 is impossible for --delta 0.2; valid: [0.2, 1]"]
