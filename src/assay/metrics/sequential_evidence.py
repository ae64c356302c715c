"""Seeded simulation of sequential comparisons with known success rates (no simulator).

``simulate_compare`` draws ``campaigns`` independent paired campaigns of
``max_pairs`` seeds at true rates (p_A, p_B) — outcomes independent on a seed
(the worst case for pairing), or with a given discordance — and applies exactly
the stopping rule of :func:`assay.metrics.sequential.compare_stop` to all of them
at once (vectorized). It returns the realised rejection rate (type-I error when
p_A = p_B, power otherwise), the share stopped for futility, the mean pairs used
and the fixed-n design of the same α, power and δ. ``evidence_grid`` runs it over
a grid of (p_A, p_B) for docs/STATISTICS.md. The unit tests check that the
vectorized rule and ``compare_stop`` stop at the same look on the same draws.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from assay.errors import AssayError
from assay.metrics.sequential import (
    METHODS,
    fixed_n_pairs,
    lattice_boundary,
    mean_cs_path,
    mixture_log_e,
)
from assay.serialize import DictMixin


@dataclass(frozen=True)
class SimulatedDesign(DictMixin):
    """Operating characteristics of one (p_A, p_B) point over many simulated campaigns."""
    p_a: float
    p_b: float
    method: str
    campaigns: int
    rejected: float  # share of campaigns that rejected H0 (type-I error when p_a == p_b)
    wrong_sign: float  # share that rejected in the wrong direction
    futile: float  # share stopped with "no difference ≥ delta"
    budget: float  # share that hit max_pairs undecided
    mean_pairs: float
    fixed_n: int
    saved: float  # 1 − mean_pairs / fixed_n


def draw_pairs(p_a: float, p_b: float, campaigns: int, max_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Independent Bernoulli outcomes of A and B, (campaigns, max_pairs) each, from one seeded generator."""
    for name, p in (("p_a", p_a), ("p_b", p_b)):
        if not 0.0 <= p <= 1.0:
            raise AssayError(f"{name} {p} is out of range; valid: [0, 1]")
    rng = np.random.default_rng(seed)
    a = (rng.random((campaigns, max_pairs)) < p_a).astype(np.float64)
    b = (rng.random((campaigns, max_pairs)) < p_b).astype(np.float64)
    return a, b


def look_points(batch: int, max_pairs: int) -> np.ndarray:
    """The look times: every ``batch`` pairs, and the horizon."""
    looks = np.arange(batch, max_pairs + 1, batch)
    if looks.size == 0 or looks[-1] != max_pairs:
        looks = np.append(looks, max_pairs)
    return looks


def difference_cs(a: np.ndarray, b: np.ndarray, alpha: float, looks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The betting CS of the paired difference at every look, (campaigns, looks) each."""
    low, high = mean_cs_path((a - b + 1.0) / 2.0, alpha, looks=looks)
    return 2.0 * low - 1.0, 2.0 * high - 1.0


def stop_looks(a: np.ndarray, b: np.ndarray, *, alpha: float, delta: float, batch: int, max_pairs: int,
               method: str, futility: bool = True,
               cs: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(pairs used, reason code) per campaign: 0 decided, 1 no difference ≥ delta, 2 budget reached.

    ``cs`` is :func:`difference_cs` of the same draws when already computed (it does not depend on the test).
    """
    if method not in METHODS:
        raise AssayError(f"method {method!r} is not known; valid: {', '.join(METHODS)}")
    n_c = a.shape[0]
    looks = look_points(batch, max_pairs)
    s = np.cumsum((a == 1) & (b == 0), axis=1)[:, looks - 1]
    f = np.cumsum((a == 0) & (b == 1), axis=1)[:, looks - 1]
    if method == "lattice":
        bd = lattice_boundary(alpha, delta, max_pairs)
        reject = np.abs(s - f) >= bd.intercept + bd.slope * (s + f) - 1e-12
    else:
        reject = mixture_log_e(s, f) >= np.log(1.0 / alpha)
    if futility:
        lo, hi = cs if cs is not None else difference_cs(a, b, alpha, looks)
        futile = (lo > -delta) & (hi < delta) & ~reject
    else:
        futile = np.zeros_like(reject)
    stop = reject | futile
    stop[:, -1] = True
    idx = np.argmax(stop, axis=1)
    rows = np.arange(n_c)
    reason = np.where(reject[rows, idx], 0, np.where(futile[rows, idx], 1, 2))
    return looks[idx], reason


def simulate_compare(p_a: float, p_b: float, *, campaigns: int = 2000, seed: int = 0, alpha: float = 0.05,
                     power: float = 0.8, delta: float = 0.1, batch: int = 8, max_pairs: int = 400,
                     method: str = "mixture", futility: bool = True) -> SimulatedDesign:
    """The operating characteristics of one test at (p_A, p_B) over ``campaigns`` seeded campaigns."""
    return simulate_methods(p_a, p_b, (method,), campaigns=campaigns, seed=seed, alpha=alpha, power=power,
                            delta=delta, batch=batch, max_pairs=max_pairs, futility=futility)[0]


def simulate_methods(p_a: float, p_b: float, methods: tuple[str, ...] = METHODS, *, campaigns: int = 2000,
                     seed: int = 0, alpha: float = 0.05, power: float = 0.8, delta: float = 0.1, batch: int = 8,
                     max_pairs: int = 400, futility: bool = True) -> list[SimulatedDesign]:
    """simulate_compare for several tests on the same draws (the futility CS is computed once)."""
    a, b = draw_pairs(p_a, p_b, campaigns, max_pairs, seed)
    cs = difference_cs(a, b, alpha, look_points(batch, max_pairs)) if futility else None
    return [_summarise(a, b, p_a, p_b, method, alpha, power, delta, *stop_looks(
        a, b, alpha=alpha, delta=delta, batch=batch, max_pairs=max_pairs, method=method, futility=futility, cs=cs))
        for method in methods]


def _summarise(a: np.ndarray, b: np.ndarray, p_a: float, p_b: float, method: str, alpha: float, power: float,
               delta: float, used: np.ndarray, reason: np.ndarray) -> SimulatedDesign:
    campaigns = a.shape[0]
    rows = np.arange(campaigns)
    sign = np.sign(np.cumsum(a - b, axis=1)[rows, used - 1])
    truth = np.sign(p_a - p_b)
    wrong = (reason == 0) & (sign != truth) if truth != 0 else np.zeros(campaigns, bool)
    fixed = fixed_n_pairs(alpha, power, delta)
    mean_pairs = float(used.mean())
    return SimulatedDesign(p_a, p_b, method, campaigns, float((reason == 0).mean()), float(wrong.mean()),
                           float((reason == 1).mean()), float((reason == 2).mean()), mean_pairs, fixed,
                           1.0 - mean_pairs / fixed)


def evidence_grid(rates: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9), *, campaigns: int = 2000, seed: int = 0,
                  **design: object) -> Iterator[SimulatedDesign]:
    """simulate_methods over every (p_A, p_B) with p_A ≥ p_B from ``rates``; one seed per point (a generator)."""
    for i, p_a in enumerate(rates):
        for j, p_b in enumerate(rates[: i + 1]):
            yield from simulate_methods(p_a, p_b, campaigns=campaigns, seed=seed + 100 * i + j, **design)  # type: ignore[arg-type]
