"""Anytime-valid sequential statistics: tests on paired outcomes, confidence sequences, stopping rules.

A fixed-n p-value is invalid once the number of episodes depends on what was
seen. Everything here stays valid at *any* stopping time (Ville's inequality for a
non-negative martingale M with M₀ = 1: P(sup_t M_t ≥ 1/α) ≤ α), so a campaign may
look after every batch and stop when the answer is clear. Pure functions over
outcome arrays; nothing here runs a simulator.

Paired binary outcomes (policies A and B on the same seeds). Only discordant
pairs carry information about the difference: under H₀ (P(A only) = P(B only))
each discordant pair is a fair coin, whatever the discordance rate. With ``s``
pairs won by A and ``f`` by B (m = s + f):

* **Mixture e-process** (Robbins' mixture martingale; the binary case of the
  SAVI framework of Snyder et al. 2026, arXiv 2603.13616)::

      E_m = ∫ θ^s (1−θ)^f dBeta(θ; ½, ½) / 2^{−m} = B(s+½, f+½) / B(½, ½) · 2^m

  a non-negative martingale under H₀ for every discordance rate. Anytime
  p-value: ``min(1, 1 / max_{t≤now} E_t)``.
* **Exact lattice test** (in the spirit of STEP, Snyder et al. 2025, arXiv
  2503.10966: a rejection region on the finite outcome lattice, fixed offline
  for a horizon N_max and calibrated exactly): reject when
  ``|s − f| ≥ c + k·m`` for some m ≤ N_max. The slope k is the one of Wald's
  two-sided SPRT for θ₁ = ½(1 + δ/ψ) against ½ (ψ: the assumed discordance,
  default the worst case ½); the intercept c is the smallest for which the exact
  probability under H₀ of ever entering the region by N_max discordant pairs,
  computed by dynamic programming over (m, s − f), is ≤ α. STEP instead solves a
  convex programme for the region's shape; ours keeps Wald's shape and only the
  exact calibration. Its sequential p-value is the exact H₀ probability of
  reaching the observed maximum excess ``max_m (|s − f| − k m)``.

Confidence sequences (time-uniform intervals):

* one success rate — the conjugate Beta(½, ½) mixture of Robbins / Howard et al.
  (2021): {p : ∫ θ^s(1−θ)^f dBeta / (p^s (1−p)^f) < 1/α}, an interval (the
  log-likelihood is concave in p), endpoints by ``scipy.optimize.brentq``;
* the mean of scores in [0, 1] (continuous progress, or (a − b + 1)/2 for a
  paired difference) — the hedged betting capital process of Waudby-Smith &
  Ramdas (2024, JRSS-B, their Theorem 3 with the predictable plug-in bets of
  eq. 26): on a grid of candidate means m, K±(m) = max(½ Π(1 + λᵢ⁺(xᵢ − m)),
  ½ Π(1 − λᵢ⁻(xᵢ − m))), with λᵢ = min(√(2 log(2/α) / (σ̂²ᵢ₋₁ i log(1+i))),
  c/m or c/(1−m)), c = ½; the interval is {m : K±(m) < 1/α}, intersected
  over time. The same process at m = ½ is an e-process for "no paired difference"
  of continuous scores.

Stopping rules (``compare_stop``): after each completed batch, in seed order —
``decided`` when the test rejects at α; ``no difference ≥ delta`` when the
confidence sequence of the paired difference lies inside (−δ, δ); otherwise
``budget reached`` at ``max_pairs``. The fixed-n design of the same α, power and
δ (McNemar, Connor 1987, ``metrics/budget.py``) is the yardstick for episodes
saved.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import betaln

from assay.errors import AssayError
from assay.metrics.budget import episode_budget
from assay.serialize import DictMixin

METHODS = ("mixture", "lattice")
GRID = 201  # candidate means for the betting confidence sequence (step 1/200)
BET_CAP = 0.5


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise AssayError(f"alpha {alpha} is out of range; valid: strictly between 0 and 1 (e.g. 0.05)")


# ---------------------------------------------------------------- paired binary: mixture e-process

def mixture_log_e(a_only: np.ndarray | int, b_only: np.ndarray | int) -> np.ndarray:
    """log E of the Beta(½, ½) mixture martingale on discordant pairs (vectorized)."""
    s, f = np.asarray(a_only, dtype=np.float64), np.asarray(b_only, dtype=np.float64)
    return betaln(s + 0.5, f + 0.5) - betaln(0.5, 0.5) + (s + f) * math.log(2.0)


def mixture_p_value(a_only: Sequence[int], b_only: Sequence[int]) -> float:
    """Anytime-valid p-value after the looks whose cumulative discordant counts are given."""
    log_e = mixture_log_e(np.asarray(a_only), np.asarray(b_only))
    return float(min(1.0, math.exp(-max(0.0, float(np.max(log_e, initial=0.0))))))


# ---------------------------------------------------------------- paired binary: exact lattice test

@dataclass(frozen=True)
class LatticeBoundary:
    """Reject when |s − f| ≥ intercept + slope · m for some m ≤ max_discordant."""

    alpha: float
    delta: float
    discordance: float
    max_discordant: int
    slope: float
    intercept: float
    type_one: float  # exact P_H0(reject by max_discordant), ≤ alpha

    def rejects(self, a_only: int, b_only: int) -> bool:
        """Whether the counts (a_only, b_only) lie in the rejection region."""
        return abs(a_only - b_only) >= self.intercept + self.slope * (a_only + b_only) - 1e-12


def _sprt_slope(delta: float, discordance: float) -> float:
    theta = 0.5 * (1.0 + delta / discordance)
    theta = min(theta, 1.0 - 1e-9)
    return -math.log(4.0 * theta * (1.0 - theta)) / math.log(theta / (1.0 - theta))


def _hit_probability(excess: float, slope: float, max_m: int) -> float:
    """Exact P_H0(max_{m ≤ max_m} (|d_m| − slope·m) ≥ excess) for a ±1 fair walk d."""
    alive = np.zeros(2 * max_m + 3)
    centre = max_m + 1
    alive[centre] = 1.0
    hit = 0.0
    offsets = np.arange(alive.size) - centre
    if excess <= 0.0:
        return 1.0
    for m in range(1, max_m + 1):
        alive = 0.5 * (np.roll(alive, 1) + np.roll(alive, -1))
        crossed = np.abs(offsets) >= excess + slope * m - 1e-12
        hit += float(alive[crossed].sum())
        alive[crossed] = 0.0
    return hit


@lru_cache(maxsize=256)
def lattice_boundary(alpha: float, delta: float, max_discordant: int, discordance: float = 0.5) -> LatticeBoundary:
    """The exact-α lattice region for horizon ``max_discordant`` (see the module docstring)."""
    _check_alpha(alpha)
    if not 0.0 < delta <= discordance <= 1.0:
        raise AssayError(f"delta {delta} with discordance {discordance} is impossible; "
                         "valid: 0 < delta ≤ discordance ≤ 1")
    if max_discordant < 1:
        raise AssayError(f"max_discordant {max_discordant} is out of range; valid: 1 or more")
    slope = _sprt_slope(delta, discordance)
    # the intercepts at which the region changes are |d| − slope·m for lattice points: search them
    candidates = sorted({abs(d) - slope * m for m in range(1, max_discordant + 1)
                         for d in range(-m, m + 1, 2) if abs(d) - slope * m > 0})
    lo, hi = 0, len(candidates) - 1
    if not candidates or _hit_probability(candidates[-1], slope, max_discordant) > alpha:
        return LatticeBoundary(alpha, delta, discordance, max_discordant, slope, math.inf, 0.0)
    while lo < hi:  # smallest candidate intercept whose exact type-I error is ≤ alpha
        mid = (lo + hi) // 2
        if _hit_probability(candidates[mid], slope, max_discordant) <= alpha:
            hi = mid
        else:
            lo = mid + 1
    c = candidates[lo]
    return LatticeBoundary(alpha, delta, discordance, max_discordant, slope, c,
                           _hit_probability(c, slope, max_discordant))


def lattice_p_value(boundary: LatticeBoundary, a_only: Sequence[int], b_only: Sequence[int]) -> float:
    """Exact sequential p-value: P_H0 of an excess at least the largest seen at the given looks."""
    s, f = np.asarray(a_only, dtype=np.float64), np.asarray(b_only, dtype=np.float64)
    if s.size == 0:
        return 1.0
    excess = float(np.max(np.abs(s - f) - boundary.slope * (s + f)))
    return min(1.0, _hit_probability(excess, boundary.slope, boundary.max_discordant))


# ---------------------------------------------------------------- confidence sequences

@dataclass(frozen=True)
class Interval2:
    """A confidence-sequence interval [low, high]."""
    low: float
    high: float

    @property
    def width(self) -> float:
        """high − low."""
        return self.high - self.low


def rate_cs(successes: int, trials: int, alpha: float = 0.05) -> Interval2:
    """Beta(½, ½) mixture confidence sequence for one success rate at (successes, trials)."""
    _check_alpha(alpha)
    if trials < 0 or not 0 <= successes <= trials:
        raise AssayError(f"successes {successes} of trials {trials} is impossible; valid: 0 ≤ successes ≤ trials")
    if trials == 0:
        return Interval2(0.0, 1.0)
    s, f = successes, trials - successes
    log_mix = float(betaln(s + 0.5, f + 0.5) - betaln(0.5, 0.5))
    bound = math.log(1.0 / alpha)

    def excess(p: float) -> float:  # > 0 inside the set
        return s * math.log(p) + f * math.log1p(-p) - log_mix + bound

    eps = 1e-12
    mle = min(max(s / trials, eps), 1 - eps)
    low = 0.0 if s == 0 or excess(eps) > 0 else brentq(excess, eps, mle)
    high = 1.0 if f == 0 or excess(1 - eps) > 0 else brentq(excess, mle, 1 - eps)
    return Interval2(float(low), float(high))


def _check_scores(x: np.ndarray) -> None:
    if x.size and (np.nanmin(x) < 0.0 or np.nanmax(x) > 1.0):
        raise AssayError("scores for a betting confidence sequence must lie in [0, 1]")


def _capital_at_looks(x: np.ndarray, alpha: float, grid: np.ndarray,
                      at: list[int]) -> Iterator[tuple[int, np.ndarray]]:
    """(look index, log K±(m) on ``grid``, (campaigns, grid)) after each prefix in ``at`` (see module docstring)."""
    n_c, n_t = x.shape
    cap_plus = np.minimum(BET_CAP / np.maximum(grid, 1e-12), 1e6)
    cap_minus = np.minimum(BET_CAP / np.maximum(1.0 - grid, 1e-12), 1e6)
    log_plus = np.zeros((n_c, grid.size))
    log_minus = np.zeros((n_c, grid.size))
    column = {v: k for k, v in enumerate(at)}
    total, sq = np.zeros(n_c), np.zeros(n_c)
    for t in range(n_t):
        i = t + 1
        var_prev = (0.25 + sq) / i
        lam = np.sqrt(2.0 * math.log(2.0 / alpha) / (var_prev * i * math.log1p(i)))[:, None]
        diff = x[:, t:t + 1] - grid[None, :]
        log_plus += np.log1p(np.minimum(lam, cap_plus[None, :]) * diff)
        log_minus += np.log1p(-np.minimum(lam, cap_minus[None, :]) * diff)
        total += x[:, t]
        sq += (x[:, t] - (0.5 + total) / (i + 1)) ** 2
        k = column.get(i)
        if k is not None:
            yield k, np.logaddexp(log_plus, log_minus) - math.log(2.0)


def _look_list(n_t: int, looks: Sequence[int] | np.ndarray | None) -> list[int]:
    at = list(range(1, n_t + 1)) if looks is None else [int(v) for v in looks]
    if any(not 1 <= v <= n_t for v in at):
        raise AssayError(f"looks must lie in 1..{n_t}")
    return at


def mean_cs_path(x: np.ndarray, alpha: float = 0.05, grid_size: int = GRID,
                 looks: Sequence[int] | np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Betting CS for the mean of [0, 1] scores after each prefix in ``looks`` (default every one):
    (low, high), each (campaigns, len(looks)); intersected over the looks.

    Row by row the capital K±(m) is updated on a grid of candidate means; the
    reported endpoints are widened by one grid step (the true set is an interval
    whose ends lie between an excluded and an included grid point).
    """
    _check_alpha(alpha)
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    _check_scores(x)
    n_c, n_t = x.shape
    grid = np.linspace(0.0, 1.0, grid_size)
    step = 1.0 / (grid_size - 1)
    threshold = math.log(1.0 / alpha)
    at = _look_list(n_t, looks)
    inside = np.ones((n_c, grid_size), dtype=bool)
    low, high = np.full((n_c, len(at)), np.nan), np.full((n_c, len(at)), np.nan)
    for k, log_k in _capital_at_looks(x, alpha, grid, at):
        inside &= log_k < threshold
        any_in = inside.any(axis=1)
        first = np.argmax(inside, axis=1)
        last = grid_size - 1 - np.argmax(inside[:, ::-1], axis=1)
        low[:, k] = np.where(any_in, np.maximum(grid[first] - step, 0.0), np.nan)
        high[:, k] = np.where(any_in, np.minimum(grid[last] + step, 1.0), np.nan)
    return low, high


def mean_p_path(x: np.ndarray, null: float = 0.5, alpha: float = 0.05,
                looks: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """Anytime-valid p-values for "the mean of the [0, 1] scores is ``null``" after each prefix in ``looks``:
    min(1, 1 / max over the looks so far of K±(null)), the same bets (tuned to ``alpha``) as
    :func:`mean_cs_path`, so p ≤ α exactly when ``null`` has left the confidence sequence on its grid."""
    _check_alpha(alpha)
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    _check_scores(x)
    at = _look_list(x.shape[1], looks)
    best = np.zeros(x.shape[0])
    p = np.ones((x.shape[0], len(at)))
    for k, log_k in _capital_at_looks(x, alpha, np.array([float(null)]), at):
        best = np.maximum(best, log_k[:, 0])
        p[:, k] = np.minimum(1.0, np.exp(-best))
    return p


def mean_cs(scores: Sequence[float], alpha: float = 0.05) -> Interval2:
    """The betting CS for the mean of scores in [0, 1] after all of them (whole interval when empty)."""
    if len(scores) == 0:
        return Interval2(0.0, 1.0)
    low, high = mean_cs_path(np.asarray(scores, dtype=np.float64)[None, :], alpha)
    return Interval2(float(low[0, -1]), float(high[0, -1]))


def paired_difference_cs(a: Sequence[float], b: Sequence[float], alpha: float = 0.05) -> Interval2:
    """CS for E[a − b] with a, b in [0, 1] on the same seeds (betting CS on (a − b + 1) / 2)."""
    if len(a) != len(b):
        raise AssayError(f"paired scores need equal lengths; got {len(a)} and {len(b)}")
    ci = mean_cs([(x - y + 1.0) / 2.0 for x, y in zip(a, b, strict=True)], alpha)
    return Interval2(2.0 * ci.low - 1.0, 2.0 * ci.high - 1.0)


# ---------------------------------------------------------------- stopping rules

DECIDED = "decided"
NO_DIFFERENCE = "no difference ≥ delta"
NARROW = "interval narrow enough"
BUDGET = "budget reached"


@dataclass(frozen=True)
class SequentialComparison(DictMixin):
    """Where and why a sequential paired comparison stopped, with its anytime-valid figures."""
    pairs: int  # pairs used when it stopped
    reason: str
    p_value: float  # anytime-valid
    difference: float  # observed mean of a − b
    ci_low: float  # confidence sequence of the paired difference
    ci_high: float
    a_only: int
    b_only: int
    method: str
    fixed_n: int  # pairs of the fixed-n McNemar design of the same alpha, power, delta


def fixed_n_pairs(alpha: float, power: float, delta: float) -> int:
    """Pairs of the fixed-n design (paired McNemar, worst-case discordance), by Connor's approximation.

    The documented sequential evidence was measured against this yardstick (391 pairs at δ = 0.1);
    the exact McNemar test needs a few percent more (``episode_budget(..., test="exact")``: 408).
    """
    return episode_budget(delta, power, paired=True, alpha=alpha, test="approx").episodes_per_cell


def _looks(n: int, batch: int, max_pairs: int) -> list[int]:
    if batch < 1:
        raise AssayError(f"batch {batch} is out of range; valid: 1 or more")
    ends = list(range(batch, min(n, max_pairs) + 1, batch))
    if min(n, max_pairs) % batch and min(n, max_pairs) == max_pairs:
        ends.append(max_pairs)
    return ends


def compare_stop(a: Sequence[float], b: Sequence[float], *, alpha: float = 0.05, power: float = 0.8,
                 delta: float = 0.1, batch: int = 8, max_pairs: int = 200, method: str = "mixture",
                 futility: bool = True, looks: Sequence[int] | None = None,
                 final: bool = False) -> SequentialComparison | None:
    """Where the sequential comparison of paired outcomes (seed order) stops; None if it has not yet.

    ``a``/``b`` are 0/1 successes (or scores in [0, 1]: the mixture and lattice
    tests then count a pair as discordant only when one side is 1 and the other 0;
    use binary outcomes for them). Looks happen after every full ``batch`` of pairs, or at the
    given prefix lengths ``looks``; ``final`` makes the last look the budget's (``budget reached``
    there if nothing else stopped it).
    """
    _check_alpha(alpha)
    if method not in METHODS:
        raise AssayError(f"method {method!r} is not known; valid: {', '.join(METHODS)}")
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise AssayError(f"paired outcomes need equal lengths; got {x.size} and {y.size}")
    looks = _looks(x.size, batch, max_pairs) if looks is None else sorted({int(v) for v in looks if 0 < v <= x.size})
    if not looks:
        return None
    a_only = np.cumsum((x == 1) & (y == 0))
    b_only = np.cumsum((x == 0) & (y == 1))
    low, high = mean_cs_path(((x[:looks[-1]] - y[:looks[-1]] + 1.0) / 2.0)[None, :], alpha, looks=looks)
    boundary = lattice_boundary(alpha, delta, max_pairs) if method == "lattice" else None
    fixed = fixed_n_pairs(alpha, power, delta)
    seen_s: list[int] = []
    seen_f: list[int] = []
    for k, end in enumerate(looks):
        s, f = int(a_only[end - 1]), int(b_only[end - 1])
        seen_s.append(s)
        seen_f.append(f)
        lo, hi = 2.0 * float(low[0, k]) - 1.0, 2.0 * float(high[0, k]) - 1.0
        if boundary is not None:
            rejected = boundary.rejects(s, f)
            p = lattice_p_value(boundary, seen_s, seen_f)
        else:
            p = mixture_p_value(seen_s, seen_f)
            rejected = p <= alpha
        reason = None
        if rejected:
            reason = DECIDED
        elif futility and -delta < lo and hi < delta:
            reason = NO_DIFFERENCE
        elif end >= max_pairs or (final and k == len(looks) - 1):
            reason = BUDGET
        if reason:
            diff = float(np.mean(x[:end] - y[:end]))
            return SequentialComparison(end, reason, p, diff, lo, hi, s, f, method, fixed)
    return None
