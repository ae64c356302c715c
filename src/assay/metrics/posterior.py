"""Beta-binomial posteriors of success rates and P(A > B) per task and for the suite.

As TRI's LBM evaluation reports them (Barreiros et al. 2025, "A careful examination
of large behavior models for multitask dexterous manipulation"): each cell's rate has
the posterior Beta(1 + successes, 1 + failures) under a uniform prior, cells
independent.

* Per task, P(θ_A > θ_B) is exact for integer parameters (Cook 2005; the sum is
  over the smaller side)::

      P(θ_B > θ_A) = Σ_{i=0}^{α_B − 1} B(α_A + i, β_A + β_B) / ((β_B + i) B(1 + i, β_B) B(α_A, β_A))

  computed in log space with ``scipy.special.betaln``; the tests check it against
  numerical integration.
* Suite: the suite score is the mean over tasks of the per-task rates, so
  P(suite_A > suite_B) has no closed form; it is the share of ``draws`` seeded
  joint posterior draws with mean_A > mean_B (ties count ½).
* ``error`` episodes are not trials (as everywhere in Assay): pass scored counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, logsumexp
from scipy.stats import beta as beta_dist

from assay.errors import AssayError
from assay.serialize import DictMixin

DEFAULT_DRAWS = 20000


@dataclass(frozen=True)
class Posterior(DictMixin):
    """A cell's Beta posterior: mean and central credible interval."""
    successes: int
    trials: int
    mean: float
    low: float  # central credible interval
    high: float


def _check(successes: int, trials: int) -> None:
    if trials < 0 or not 0 <= successes <= trials:
        raise AssayError(f"successes {successes} of trials {trials} is impossible; valid: 0 ≤ successes ≤ trials")


def posterior(successes: int, trials: int, credibility: float = 0.95) -> Posterior:
    """Beta(1 + s, 1 + f) with its mean and central ``credibility`` interval."""
    _check(successes, trials)
    if not 0.0 < credibility < 1.0:
        raise AssayError(f"credibility {credibility} is out of range; valid: strictly between 0 and 1")
    a, b = 1 + successes, 1 + trials - successes
    tail = (1.0 - credibility) / 2.0
    low, high = beta_dist.ppf([tail, 1.0 - tail], a, b)
    return Posterior(successes, trials, a / (a + b), float(low), float(high))


def prob_greater(successes_a: int, trials_a: int, successes_b: int, trials_b: int) -> float:
    """Exact P(θ_A > θ_B) for independent Beta(1 + s, 1 + f) posteriors."""
    _check(successes_a, trials_a)
    _check(successes_b, trials_b)
    a1, b1 = 1 + successes_a, 1 + trials_a - successes_a
    a2, b2 = 1 + successes_b, 1 + trials_b - successes_b
    if a2 <= a1:  # sum over the shorter side: P(θ_B > θ_A) has a2 terms
        i = np.arange(a2)
        terms = betaln(a1 + i, b1 + b2) - np.log(b2 + i) - betaln(1 + i, b2) - betaln(a1, b1)
        return float(min(1.0, max(0.0, 1.0 - math.exp(logsumexp(terms)))))
    i = np.arange(a1)
    terms = betaln(a2 + i, b2 + b1) - np.log(b1 + i) - betaln(1 + i, b1) - betaln(a2, b2)
    return float(min(1.0, max(0.0, math.exp(logsumexp(terms)))))


@dataclass(frozen=True)
class PosteriorComparison(DictMixin):
    """P(θ_A > θ_B) per task and for the suite mean."""
    per_task: dict[str, float]  # P(θ_A > θ_B) per task
    suite: float  # P(mean over tasks of θ_A > that of θ_B)
    draws: int
    seed: int


def posterior_comparison(counts: Mapping[str, tuple[int, int, int, int]], draws: int = DEFAULT_DRAWS,
                         seed: int = 0) -> PosteriorComparison:
    """``counts[task] = (successes_a, trials_a, successes_b, trials_b)``; tasks in sorted order."""
    if not counts:
        raise AssayError("posterior comparison needs at least one task with counts")
    if draws < 100:
        raise AssayError(f"draws {draws} is too small; give at least 100")
    rng = np.random.default_rng(seed)
    per_task = {}
    mean_a = np.zeros(draws)
    mean_b = np.zeros(draws)
    for task in sorted(counts):
        sa, na, sb, nb = counts[task]
        per_task[task] = prob_greater(sa, na, sb, nb)
        mean_a += rng.beta(1 + sa, 1 + na - sa, draws)
        mean_b += rng.beta(1 + sb, 1 + nb - sb, draws)
    suite = float(np.mean((mean_a > mean_b) + 0.5 * (mean_a == mean_b)))
    return PosteriorComparison(per_task, suite, draws, seed)
