"""Episode budgets: how many episodes per cell detect a difference ``delta`` with a given power.

By default (``test="exact"``) the budget is for the tests ``assay compare`` runs: Fisher's exact
test unpaired (``compare --unpaired``) and the exact McNemar test paired. Their power at n is
computed exactly (every outcome table weighted by its binomial probability, rejected when the
test's p < α), and n is the smallest one found whose exact power reaches ``power``: starting at the
normal-approximation n below (the z test is more powerful than Fisher's at the same n, so its n is
a lower bound in practice), growing by 5% until the power is reached, then bisecting. Exact power
is a sawtooth in n, so the answer is reported with its exact power; it is the n where power first
crosses the target in the bracket searched. ``test="approx"`` gives the formulas alone:

Unpaired (two independent cells): the two-proportion z test sample size without
continuity correction (Fleiss, Levin & Paik, eq. 4.14)::

    n = ( z_{1-α/2} · sqrt(2 p̄ q̄) + z_{power} · sqrt(p1 q1 + p2 q2) )² / δ²,   p̄ = (p1 + p2) / 2

Paired (same seeds, McNemar's test; Connor 1987)::

    n = ( z_{1-α/2} · sqrt(ψ) + z_{power} · sqrt(ψ − δ²) )² / δ²

where ψ is the probability that a pair is discordant. Unless it is given, ψ is the
value when the two policies' outcomes on a seed are independent,
``p1 q2 + p2 q1`` — the most pessimistic common case; positively correlated
policies (the usual case on shared seeds) need fewer episodes.

p1 is ``baseline`` (default 0.5, the variance-maximising rate) and p2 is
``baseline ± delta``; both directions that stay inside [0, 1] are computed and the
larger n is returned. ``comparisons > 1`` divides α by the number of comparisons
(Bonferroni, the first step of Holm's procedure), so the budget holds under Holm.
Quantiles come from ``scipy.stats.norm``; n is rounded up.

Exact power:

* Fisher (two-sided, scipy's definition: the summed probability of the tables at most as likely
  as the observed one given the total successes; tested equal to ``scipy.stats.fisher_exact``):
  power = Σ_{k₁,k₂} Bin(k₁; n, p₁) Bin(k₂; n, p₂) · 1[p(k₁, k₂) < α].
* McNemar (exact, two-sided binomial test of the discordant pairs at ½): with ψ = P(discordant)
  and P(A only) = (ψ + δ)/2, power = Σ_m Bin(m; n, ψ) · P_θ(reject | m), θ = (ψ + δ)/(2ψ).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln
from scipy.stats import binom, norm

from assay.errors import AssayError
from assay.serialize import DictMixin


@dataclass(frozen=True)
class Budget(DictMixin):
    """The episodes per cell a comparison needs for a power at a level, with the settings and formula that gave it."""

    episodes_per_cell: int
    paired: bool
    baseline: float
    alternative: float
    delta: float
    power: float
    alpha: float
    comparisons: int
    discordance: float | None
    formula: str
    test: str = "exact"  # exact: n for the exact test compare runs; approx: the normal-approximation formula
    approx_episodes: int | None = None  # the formula's n (z test / Connor), for comparison
    achieved_power: float | None = None  # exact power of the exact test at episodes_per_cell


def _unpaired(p1: float, p2: float, z_alpha: float, z_power: float) -> float:
    pbar = (p1 + p2) / 2
    spread = z_alpha * math.sqrt(2 * pbar * (1 - pbar)) + z_power * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return spread**2 / (p1 - p2) ** 2


def _paired(psi: float, delta: float, z_alpha: float, z_power: float) -> float:
    spread = z_alpha * math.sqrt(psi) + z_power * math.sqrt(psi - delta**2)
    return spread**2 / delta**2


def _check(name: str, value: float, low: float, high: float, closed: bool = False) -> None:
    ok = low <= value <= high if closed else low < value < high
    if not ok:
        bounds = f"[{low}, {high}]" if closed else f"({low}, {high})"
        raise AssayError(f"--{name} {value} is out of range; valid: {bounds}")


TESTS = ("exact", "approx")
MAX_EPISODES = 100_000


def _lnchoose(n: int, k: np.ndarray | int) -> np.ndarray:
    k = np.asarray(k, dtype=np.float64)
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def fisher_rejects(n: int, alpha: float) -> np.ndarray:
    """(n + 1, n + 1) booleans: Fisher's two-sided exact test of k₁/n vs k₂/n has p < alpha."""
    reject = np.zeros((n + 1, n + 1), dtype=bool)
    log_choose = _lnchoose(n, np.arange(n + 1))
    for total in range(2 * n + 1):  # given the total, k₁ is hypergeometric
        k1 = np.arange(max(0, total - n), min(n, total) + 1)
        k2 = total - k1
        pmf = np.exp(log_choose[k1] + log_choose[k2] - _lnchoose(2 * n, total))
        ordered = np.sort(pmf)
        cumulative = np.cumsum(ordered)
        at_most = np.searchsorted(ordered, pmf * (1 + 1e-7), side="right") - 1  # scipy/R's relative tolerance
        reject[k1, k2] = cumulative[at_most] < alpha
    return reject


def fisher_power(n: int, p1: float, p2: float, alpha: float = 0.05) -> float:
    """Exact power of Fisher's two-sided test with n episodes per cell."""
    k = np.arange(n + 1)
    return float((np.outer(binom.pmf(k, n, p1), binom.pmf(k, n, p2)) * fisher_rejects(n, alpha)).sum())


def mcnemar_power(n: int, a_only: float, b_only: float, alpha: float = 0.05) -> float:
    """Exact power of the exact McNemar test on n pairs, P(A only) = a_only, P(B only) = b_only."""
    psi = a_only + b_only
    if psi <= 0:
        return 0.0
    m = np.arange(1, n + 1)
    # Largest c with 2·P(X ≤ c) < alpha under X ~ Bin(m, ½); reject b ≤ c or b ≥ m − c.
    c = binom.ppf(alpha / 2, m, 0.5)
    c = np.where(2 * binom.cdf(c, m, 0.5) < alpha, c, c - 1)
    theta = a_only / psi
    rejected = np.where(c >= 0, binom.cdf(c, m, theta) + binom.sf(m - c - 1, m, theta), 0.0)
    return float((binom.pmf(m, n, psi) * rejected).sum())


def _smallest(power_at: Callable[[int], float], target: float, start: int) -> tuple[int, float]:
    """The n where power_at first reaches target, searched upward from ``start`` (see the module doc)."""
    low = max(1, start)
    power = power_at(low)
    if power >= target:  # the approximation was already enough: walk down while it still is
        while low > 1 and (below := power_at(low - 1)) >= target:
            low, power = low - 1, below
        return low, power
    high = low
    while True:
        high = max(high + 1, math.ceil(high * 1.05))
        if high > MAX_EPISODES:
            raise AssayError(f"no n up to {MAX_EPISODES} episodes reaches power {target} with the exact test; "
                             "give a larger --delta or --test approx")
        high_power = power_at(high)
        if high_power >= target:
            break
        low = high
    while high - low > 1:
        middle = (low + high) // 2
        middle_power = power_at(middle)
        if middle_power >= target:
            high, high_power = middle, middle_power
        else:
            low = middle
    return high, high_power


def episode_budget(
    delta: float,
    power: float = 0.8,
    baseline: float | None = None,
    paired: bool = False,
    alpha: float = 0.05,
    comparisons: int = 1,
    discordance: float | None = None,
    test: str = "exact",
) -> Budget:
    """Episodes per cell for ``delta`` at ``power``; ``test`` exact (Fisher / exact McNemar) or approx."""
    if test not in TESTS:
        raise AssayError(f"--test {test!r} is not valid; valid: {', '.join(TESTS)}")
    _check("delta", delta, 0.0, 1.0)
    _check("power", power, 0.0, 1.0)
    _check("alpha", alpha, 0.0, 1.0)
    if comparisons < 1:
        raise AssayError(f"--comparisons {comparisons} is out of range; valid: 1 or more")
    p1 = 0.5 if baseline is None else baseline
    _check("baseline", p1, 0.0, 1.0, closed=True)
    # Rounded to 12 digits: 0.8 + 0.2 is 1.0 and 0.7 + 0.3 must not drop just above 1 by float error.
    alternatives = [p for p in (round(p1 - delta, 12), round(p1 + delta, 12)) if 0.0 <= p <= 1.0]
    if not alternatives:
        raise AssayError(f"--delta {delta} leaves [0, 1] in both directions from --baseline {p1}")
    level = alpha / comparisons
    z_alpha = float(norm.ppf(1 - level / 2))
    z_power = float(norm.ppf(power))
    best: tuple[float, float, float | None] | None = None
    for p2 in alternatives:
        if paired:
            psi = discordance if discordance is not None else _independent_discordance(p1, p2, delta)
            if not delta <= psi <= 1.0:
                raise AssayError(f"--discordance {psi} is impossible for --delta {delta}; valid: [{delta}, 1]")
            n = _paired(psi, delta, z_alpha, z_power)
        else:
            psi = None
            n = _unpaired(p1, p2, z_alpha, z_power)
        if best is None or n > best[0]:
            best = (n, p2, psi)
    assert best is not None
    n, p2, psi = best
    approx = math.ceil(n - 1e-9)
    if test == "approx":
        formula = "McNemar (Connor 1987)" if paired else "two-proportion z test (Fleiss)"
        return Budget(approx, paired, p1, p2, delta, power, alpha, comparisons, psi, formula, test, approx, None)
    exact, achieved = _exact_budget(p1, alternatives, delta, paired, discordance, level, power, approx)
    formula = "exact McNemar test, exact power" if paired else "Fisher's exact test, exact power"
    return Budget(exact, paired, p1, p2, delta, power, alpha, comparisons, psi, formula, test, approx, achieved)


def _independent_discordance(p1: float, p2: float, delta: float) -> float:
    """P(pair discordant) with outcomes independent on a seed, p₁q₂ + p₂q₁.

    It is never below δ = |p₁ − p₂| (the excess is 2·min(p)·(1 − max(p)) ≥ 0), so a value a few ulps
    below δ (0.8 vs 1.0: 0.19999999999999996) is float rounding, not an impossible design.
    """
    return max(delta, p1 * (1 - p2) + p2 * (1 - p1))


def _exact_budget(p1: float, alternatives: list[float], delta: float, paired: bool, discordance: float | None,
                  level: float, target: float, start: int) -> tuple[int, float]:
    """The smallest n whose exact power reaches target against every alternative direction."""
    def power_at(n: int) -> float:
        if paired:
            powers = []
            for p2 in alternatives:
                psi = discordance if discordance is not None else _independent_discordance(p1, p2, delta)
                powers.append(mcnemar_power(n, (psi + delta) / 2, (psi - delta) / 2, level))
            return min(powers)
        reject = fisher_rejects(n, level)
        k = np.arange(n + 1)
        first = binom.pmf(k, n, p1)
        return min(float((np.outer(first, binom.pmf(k, n, p2)) * reject).sum()) for p2 in alternatives)

    return _smallest(power_at, target, start)
