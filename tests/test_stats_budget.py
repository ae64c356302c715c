"""Episode budgets: published values, and the power they promise checked exactly from binomial pmfs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom, binomtest, norm

from assay.errors import AssayError
from assay.metrics import episode_budget


def test_unpaired_budget_matches_the_textbook_value():
    # p1 = 0.6, p2 = 0.5, alpha 0.05, power 0.8: 387.3 -> 388 per group (Fleiss, no continuity correction).
    budget = episode_budget(0.1, 0.8, baseline=0.6)
    assert budget.episodes_per_cell == 388 and budget.alternative == pytest.approx(0.5)
    # Default baseline 0.5: 0.5 vs 0.4 is the mirror image of 0.6 vs 0.5; a baseline near 1 needs far fewer.
    assert episode_budget(0.1).episodes_per_cell == 388
    assert episode_budget(0.1, baseline=0.95).episodes_per_cell < 200


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
    budget = episode_budget(0.2, 0.8, baseline=0.7)
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


def test_paired_budget_delivers_its_power_with_the_exact_mcnemar_test():
    budget = episode_budget(0.2, 0.8, baseline=0.7, paired=True, discordance=0.3)
    assert budget.discordance == 0.3
    n = budget.episodes_per_cell
    assert n == math.ceil((norm.ppf(0.975) * math.sqrt(0.3) + norm.ppf(0.8) * math.sqrt(0.3 - 0.04)) ** 2 / 0.04)
    # discordant pairs split 0.25 / 0.05 gives the difference 0.2
    assert 0.75 <= _mcnemar_power(n, 0.25, 0.05) <= 0.85
    # Correlated policies (low discordance) need fewer episodes than independent ones.
    assert n < episode_budget(0.2, 0.8, baseline=0.7, paired=True).episodes_per_cell


def test_holm_family_raises_the_budget_and_bad_input_is_refused():
    assert episode_budget(0.1, comparisons=5).episodes_per_cell > episode_budget(0.1).episodes_per_cell
    with pytest.raises(AssayError, match=r"--delta 0.0 is out of range; valid: \(0.0, 1.0\)"):
        episode_budget(0.0)
    with pytest.raises(AssayError, match="--discordance 0.1 is impossible for --delta 0.2"):
        episode_budget(0.2, paired=True, discordance=0.1)
    with pytest.raises(AssayError, match="--baseline"):
        episode_budget(0.1, baseline=1.5)
