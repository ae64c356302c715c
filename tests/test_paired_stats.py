"""Paired differences and the equivalence test (TOST) of assay.metrics.paired, on constructed outcome vectors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from assay.errors import AssayError
from assay.metrics.intervals import newcombe_paired_interval
from assay.metrics.paired import equivalence, one_sided_p, paired_difference


def vectors(both: int, a_only: int, b_only: int, neither: int, errors: int = 0):
    a = [True] * both + [True] * a_only + [False] * b_only + [False] * neither + [None] * errors
    b = [True] * both + [False] * a_only + [True] * b_only + [False] * neither + [True] * errors
    return ({("t", "v", i): x for i, x in enumerate(a)}, {("t", "v", i): x for i, x in enumerate(b)})


def test_the_paired_difference_is_b_minus_a_with_newcombes_interval_and_mcnemar():
    a, b = vectors(10, 1, 6, 3, errors=2)
    d = paired_difference(a, b)
    assert (d.both, d.a_only, d.b_only, d.neither, d.dropped, d.pairs) == (10, 1, 6, 3, 2, 20)
    assert d.difference == pytest.approx(0.25) and (d.rate_a, d.rate_b) == (0.55, 0.8)
    ci = newcombe_paired_interval(10, 6, 1, 3)
    assert (d.low, d.high) == (ci.low, ci.high)
    assert d.p_value == pytest.approx(stats.binomtest(1, 7, 0.5).pvalue)
    with pytest.raises(AssayError, match="no episode was scored on both sides"):
        paired_difference({("t", "v", 0): None}, {("t", "v", 0): True})


def test_identical_outcomes_are_equivalent_once_there_are_enough_pairs():
    few, many = vectors(5, 0, 0, 1), vectors(160, 0, 0, 40)
    assert not equivalence(*few, margin=0.1).equivalent
    result = equivalence(*many, margin=0.1)
    assert result.equivalent and result.p_value < 0.05 and result.verdict.startswith("equivalent within ±0.1")
    shifted = vectors(120, 0, 40, 40)  # B better by 0.2 on every discordant pair
    assert not equivalence(*shifted, margin=0.1).equivalent
    with pytest.raises(AssayError, match="margin 0.0 is not valid"):
        equivalence(*many, margin=0.0)


def _trinomial(n: int, b: np.ndarray, c: np.ndarray, q10: float, q01: float) -> np.ndarray:
    rest = n - b - c
    return np.exp(stats.multinomial.logpmf(np.stack([b, c, rest], axis=1), n, [q10, q01, 1.0 - q10 - q01]))


@pytest.mark.parametrize("n, margin", [(20, 0.2), (40, 0.1), (60, 0.15)])
def test_the_tost_size_at_the_margin_is_at_most_alpha_at_every_discordance(n, margin):
    """Exact, not simulated: every paired table of n pairs, its decision, and its probability at B − A = +margin
    for discordance shares on and off the test's own grid."""
    b, c = (x.ravel() for x in np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij"))
    keep = b + c <= n
    b, c = b[keep], c[keep]
    decide = np.array([max(one_sided_p(n, int(x), int(y), margin), one_sided_p(n, int(y), int(x), margin)) <= 0.05
                       for x, y in zip(b, c, strict=True)])
    sizes = [float(_trinomial(n, b, c, q, q + margin)[decide].sum())
             for q in np.linspace(0.0, (1.0 - margin) / 2.0 - 1e-9, 137)]
    assert max(sizes) <= 0.05 + 1e-9
