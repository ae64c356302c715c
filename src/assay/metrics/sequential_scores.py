"""Sequential comparison of bounded continuous scores (progress in [0, 1]), and its seeded simulation.

The ``progress`` endpoint of an adaptive campaign replaces each episode's 0/1
success by a score in [0, 1] (``assay.run.adaptive.progress_score``). Discordant
pairs mean nothing for such scores, so the stopping rule is the betting process of
Waudby-Smith & Ramdas (2024) on d = (a − b + 1) / 2 ∈ [0, 1] (``metrics/sequential.py``):

* ``decided`` when the anytime-valid p-value for E[d] = ½ (no paired difference),
  min(1, 1 / max_t K_t(½)), is ≤ α — equivalently ½ has left the confidence
  sequence, so the interval of E[a − b] excludes 0 (Ville's inequality: P_H0 ≤ α
  at any stopping time, whatever the score distributions; the reported interval is
  one grid step (0.01 in the difference) wider, so at a decision it reaches 0 at most);
* ``no difference ≥ delta`` when the confidence sequence of E[a − b] lies inside (−δ, δ);
* ``budget reached`` at the horizon.

The fixed-n yardstick is the one of the success endpoint (paired design at
var(a − b) = ½, ``fixed_n_pairs``), so savings are comparable across endpoints.
``simulate_scores`` runs the same rule, vectorized, over seeded campaigns of
Beta-distributed scores with known means (no simulator).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from assay.errors import AssayError
from assay.metrics.sequential import (
    BUDGET,
    DECIDED,
    NO_DIFFERENCE,
    SequentialComparison,
    fixed_n_pairs,
    mean_cs_path,
    mean_p_path,
)
from assay.serialize import DictMixin

SCORE_METHOD = "betting"


def _rule(a: np.ndarray, b: np.ndarray, alpha: float, delta: float, looks: np.ndarray,
          futility: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(reject, futile, low, high, p) for E[a − b] at each look, (campaigns, looks) each."""
    d = (a[:, :looks[-1]] - b[:, :looks[-1]] + 1.0) / 2.0
    p = mean_p_path(d, 0.5, alpha, looks=looks)
    low, high = mean_cs_path(d, alpha, looks=looks)
    low, high = 2.0 * low - 1.0, 2.0 * high - 1.0
    reject = p <= alpha
    futile = (low > -delta) & (high < delta) & ~reject if futility else np.zeros_like(reject)
    return reject, futile, low, high, p


def scores_compare_stop(a: Sequence[float], b: Sequence[float], *, alpha: float = 0.05, power: float = 0.8,
                        delta: float = 0.1, max_pairs: int = 200, looks: Sequence[int],
                        final: bool = False, futility: bool = True) -> SequentialComparison | None:
    """Where the sequential comparison of paired [0, 1] scores (seed order) stops; None if it has not yet.

    Looks at the prefix lengths ``looks``; ``final`` makes the last look the budget's.
    ``a_only``/``b_only`` count the pairs where A scored higher / lower.
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise AssayError(f"paired scores need equal lengths; got {x.size} and {y.size}")
    at = np.asarray(sorted({int(v) for v in looks if 0 < v <= x.size}), dtype=np.int64)
    if at.size == 0:
        return None
    reject, futile, low, high, p = _rule(x[None, :], y[None, :], alpha, delta, at, futility)
    fixed = fixed_n_pairs(alpha, power, delta)
    for k, end in enumerate(at.tolist()):
        reason = DECIDED if reject[0, k] else NO_DIFFERENCE if futile[0, k] else (
            BUDGET if end >= max_pairs or (final and k == at.size - 1) else None)
        if reason:
            diff = float(np.mean(x[:end] - y[:end]))
            return SequentialComparison(end, reason, float(p[0, k]), diff, float(low[0, k]), float(high[0, k]),
                                        int(np.sum(x[:end] > y[:end])), int(np.sum(x[:end] < y[:end])),
                                        SCORE_METHOD, fixed)
    return None


@dataclass(frozen=True)
class SimulatedScores(DictMixin):
    """Operating characteristics of the score rule at one (mean A, mean B) over many simulated campaigns."""
    mean_a: float
    mean_b: float
    concentration: float  # of the Beta score distributions (smaller: more spread, closer to 0/1)
    campaigns: int
    rejected: float  # type-I error when mean_a == mean_b
    wrong_sign: float
    futile: float
    budget: float
    mean_pairs: float
    fixed_n: int
    saved: float


def draw_scores(mean_a: float, mean_b: float, campaigns: int, max_pairs: int, seed: int,
                concentration: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """Independent Beta(c·μ, c·(1 − μ)) scores of A and B, (campaigns, max_pairs) each, from one seeded generator."""
    for name, mu in (("mean_a", mean_a), ("mean_b", mean_b)):
        if not 0.0 < mu < 1.0:
            raise AssayError(f"{name} {mu} is out of range; valid: strictly between 0 and 1")
    if concentration <= 0:
        raise AssayError(f"concentration {concentration} is out of range; valid: > 0")
    rng = np.random.default_rng(seed)
    a = rng.beta(concentration * mean_a, concentration * (1 - mean_a), (campaigns, max_pairs))
    b = rng.beta(concentration * mean_b, concentration * (1 - mean_b), (campaigns, max_pairs))
    return a, b


def simulate_scores(mean_a: float, mean_b: float, *, campaigns: int = 2000, seed: int = 0, alpha: float = 0.05,
                    power: float = 0.8, delta: float = 0.1, batch: int = 8, max_pairs: int = 200,
                    concentration: float = 2.0, futility: bool = True) -> SimulatedScores:
    """The score rule of :func:`scores_compare_stop` on ``campaigns`` seeded campaigns at known means."""
    a, b = draw_scores(mean_a, mean_b, campaigns, max_pairs, seed, concentration)
    looks = np.arange(batch, max_pairs + 1, batch)
    if looks.size == 0 or looks[-1] != max_pairs:
        looks = np.append(looks, max_pairs)
    reject, futile, _, _, _ = _rule(a, b, alpha, delta, looks, futility)
    stop = reject | futile
    stop[:, -1] = True
    idx = np.argmax(stop, axis=1)
    rows = np.arange(campaigns)
    reason = np.where(reject[rows, idx], 0, np.where(futile[rows, idx], 1, 2))
    used = looks[idx]
    sign = np.sign(np.cumsum(a - b, axis=1)[rows, used - 1])
    truth = np.sign(mean_a - mean_b)
    wrong = (reason == 0) & (sign != truth) if truth != 0 else np.zeros(campaigns, bool)
    fixed = fixed_n_pairs(alpha, power, delta)
    mean_pairs = float(used.mean())
    return SimulatedScores(mean_a, mean_b, concentration, campaigns, float((reason == 0).mean()),
                           float(wrong.mean()), float((reason == 1).mean()), float((reason == 2).mean()),
                           mean_pairs, fixed, 1.0 - mean_pairs / fixed)


__all__ = ["SCORE_METHOD", "SimulatedScores", "draw_scores", "scores_compare_stop", "simulate_scores"]
