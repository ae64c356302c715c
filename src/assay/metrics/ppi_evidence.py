"""Coverage of the sim + real intervals by simulation (no simulator): ``simulate_ppi``.

Each simulated campaign has k policies. Policy i has a real success rate θᵢ and a sim success rate
θᵢ + bias (clipped to [0.02, 0.98]); on every seed the sim and real outcomes are Bernoulli with those
rates and correlation ρ (the phi coefficient of the 2 × 2 table, clipped to what the margins allow),
so ρ = 0 is a simulator that says nothing about real and ρ near 1 one that mirrors it. N sim episodes
per policy; n of their seeds, drawn at random, get a real trial. Each campaign gives every policy the
prediction-powered interval (``ppi.estimate_real``), the classical real-only Clopper–Pearson interval
and the PPI++ normal interval, at ``confidence`` each, or at 1 − α/k each with ``joint`` (Bonferroni,
so the k intervals hold together). The interval of a cell depends only on its counts, so intervals are
cached by counts: the draws are the ones ``estimate_real`` makes for those counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from assay.metrics.ppi import DRAWS, PairedCounts, estimate_real
from assay.serialize import DictMixin


@dataclass(frozen=True)
class PpiCoverage(DictMixin):
    """Realised coverage and mean width of each interval on one grid point."""

    rates: tuple[float, ...]  # real success rate per policy
    bias: float
    rho: float
    real_trials: int  # n per policy
    sim_episodes: int  # N per policy
    campaigns: int
    joint: bool
    ppi_coverage: float  # min over policies of the per-policy coverage
    classical_coverage: float
    clt_coverage: float
    ppi_all_covered: float  # share of campaigns where every policy's interval covered
    ppi_width: float  # mean over campaigns and policies
    classical_width: float
    clt_width: float
    effective_real_trials: float  # n·(mean classical width / mean PPI width)²


def joint_table(sim_rate: float, real_rate: float, rho: float) -> tuple[float, float]:
    """(P(real | sim success), P(real | sim failure)) for margins and a phi correlation (clipped to feasible)."""
    both = sim_rate * real_rate + rho * math.sqrt(sim_rate * (1 - sim_rate) * real_rate * (1 - real_rate))
    both = min(max(both, max(0.0, sim_rate + real_rate - 1.0)), min(sim_rate, real_rate))
    return both / sim_rate, (real_rate - both) / (1.0 - sim_rate)


@lru_cache(maxsize=200_000)
def _interval(counts: PairedCounts, confidence: float, draws: int) -> tuple[float, float, float, float, float, float]:
    e = estimate_real(counts, confidence=confidence, draws=draws)
    return e.ci_low, e.ci_high, e.classical_low, e.classical_high, e.clt_low, e.clt_high


def simulate_ppi(rates: Sequence[float], bias: float, rho: float, real_trials: int, sim_episodes: int,
                 campaigns: int = 1000, seed: int = 0, confidence: float = 0.95, joint: bool = False,
                 draws: int = DRAWS) -> PpiCoverage:
    """Seeded simulation of ``campaigns`` campaigns of ``len(rates)`` policies (module doc)."""
    rng = np.random.default_rng(seed)
    level = 1.0 - (1.0 - confidence) / len(rates) if joint else confidence
    hits = np.zeros((3, len(rates)))
    widths = np.zeros(3)
    all_covered = 0
    for _ in range(campaigns):
        every = True
        for i, theta in enumerate(rates):
            sim_rate = min(0.98, max(0.02, theta + bias))
            on_success, on_failure = joint_table(sim_rate, theta, rho)
            sim = rng.random(sim_episodes) < sim_rate
            real = np.where(sim, rng.random(sim_episodes) < on_success, rng.random(sim_episodes) < on_failure)
            chosen = rng.choice(sim_episodes, real_trials, replace=False)
            s, y = sim[chosen], real[chosen]
            counts = PairedCounts(sim_episodes, int(sim.sum()), (int(y[s].sum()), int(s.sum())),
                                  (int(y[~s].sum()), int((~s).sum())))
            bounds = _interval(counts, level, draws)
            for j in range(3):
                low, high = bounds[2 * j], bounds[2 * j + 1]
                hits[j, i] += low <= theta <= high
                widths[j] += high - low
            every &= bounds[0] <= theta <= bounds[1]
        all_covered += every
    coverage = (hits / campaigns).min(axis=1)
    width = widths / (campaigns * len(rates))
    return PpiCoverage(tuple(rates), bias, rho, real_trials, sim_episodes, campaigns, joint, float(coverage[0]),
                       float(coverage[1]), float(coverage[2]), all_covered / campaigns, float(width[0]),
                       float(width[1]), float(width[2]), real_trials * float((width[1] / width[0]) ** 2))
