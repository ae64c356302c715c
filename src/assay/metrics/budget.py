"""Episode budgets: how many episodes per cell detect a difference ``delta`` with a given power.

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
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from scipy.stats import norm

from assay.errors import AssayError


@dataclass(frozen=True)
class Budget:
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

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


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


def episode_budget(
    delta: float,
    power: float = 0.8,
    baseline: float | None = None,
    paired: bool = False,
    alpha: float = 0.05,
    comparisons: int = 1,
    discordance: float | None = None,
) -> Budget:
    _check("delta", delta, 0.0, 1.0)
    _check("power", power, 0.0, 1.0)
    _check("alpha", alpha, 0.0, 1.0)
    if comparisons < 1:
        raise AssayError(f"--comparisons {comparisons} is out of range; valid: 1 or more")
    p1 = 0.5 if baseline is None else baseline
    _check("baseline", p1, 0.0, 1.0, closed=True)
    alternatives = [p for p in (p1 - delta, p1 + delta) if 0.0 <= p <= 1.0]
    if not alternatives:
        raise AssayError(f"--delta {delta} leaves [0, 1] in both directions from --baseline {p1}")
    z_alpha = float(norm.ppf(1 - alpha / comparisons / 2))
    z_power = float(norm.ppf(power))
    best: tuple[float, float, float | None] | None = None
    for p2 in alternatives:
        if paired:
            psi = discordance if discordance is not None else p1 * (1 - p2) + p2 * (1 - p1)
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
    formula = "McNemar (Connor 1987)" if paired else "two-proportion z test (Fleiss)"
    return Budget(math.ceil(n - 1e-9), paired, p1, p2, delta, power, alpha, comparisons, psi, formula)
