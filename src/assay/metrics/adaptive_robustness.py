"""The ``robustness`` goal of an adaptive campaign: retention intervals, and batches to the widest.

Per policy × task, each non-nominal variant's *retention* (its success rate over the
nominal one) gets an anytime-valid interval from the two cells' Beta-mixture
confidence sequences at α/2 each (a union bound, so both hold at once at any
stopping time): [low_v / high_0, high_v / low_0], the upper end capped at
``RETENTION_CAP`` (it is unbounded while the nominal interval reaches 0). A variant
stops with ``interval narrow enough`` when the half-width is ≤ ``width``, or
``budget reached`` at the horizon. Allocation: of the variants still open, only
the widest half (⌈open / 2⌉, ties in variant-key order) run the next batch — the
others wait, neither stopped nor run — and the nominal cell runs while any of its
variants is open (it is every retention's denominator). Everything is computed from
the completed batches in seed order, so the allocation is deterministic.

The fixed-n yardstick (``retention_fixed_n``): episodes per cell, both cells at the
same n, for a Wald interval of the ratio p_v / p_0 with half-width ``width`` by the
delta method, Var(R̂) ≈ [p_v(1 − p_v) + R² p_0(1 − p_0)] / (p_0² n) (cells taken as
independent), at planning rates p_0 = p_v = ½ unless given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import norm

from assay.metrics.sequential import BUDGET, NARROW, rate_cs

NOMINAL_KEY = "nominal"
RETENTION_CAP = 10.0
ALL_RETAINED = "every retention interval narrow enough or at the budget"


def retention_cs(nominal: Sequence[float] | np.ndarray, variant: Sequence[float] | np.ndarray,
                 alpha: float) -> tuple[float, float, float]:
    """(point, low, high) of rate(variant) / rate(nominal) from both confidence sequences at α/2 (errors left out)."""
    x, y = np.asarray(nominal, dtype=np.float64), np.asarray(variant, dtype=np.float64)
    n0, v = x[~np.isnan(x)], y[~np.isnan(y)]
    c0, cv = rate_cs(int(n0.sum()), int(n0.size), alpha / 2), rate_cs(int(v.sum()), int(v.size), alpha / 2)
    low = cv.low / c0.high if c0.high > 0 else 0.0
    high = min(RETENTION_CAP, cv.high / c0.low) if c0.low > 0 else RETENTION_CAP
    point = float(v.mean() / n0.mean()) if n0.size and v.size and n0.sum() > 0 else math.nan
    return point, float(low), float(high)


def retention_fixed_n(alpha: float, width: float, nominal_rate: float = 0.5, variant_rate: float = 0.5) -> int:
    """Episodes per cell (both cells at the same n) a fixed-n delta-method interval of the retention
    p_v / p_0 needs for half-width ``width`` at the planning rates; at least 1."""
    if not 0 < nominal_rate <= 1 or not 0 <= variant_rate <= 1:
        raise ValueError(f"planning rates must be 0 < nominal <= 1 and 0 <= variant <= 1, got "
                         f"{nominal_rate}, {variant_rate}")
    if width <= 0:
        raise ValueError(f"width must be > 0, got {width}")
    z = float(norm.ppf(1 - alpha / 2))
    ratio = variant_rate / nominal_rate
    spread = (variant_rate * (1 - variant_rate) + ratio * ratio * nominal_rate * (1 - nominal_rate)) / nominal_rate**2
    return max(1, math.ceil(z * z * spread / (width * width) - 1e-9))


def robustness_round(alpha: float, width: float, max_episodes: int, policy: str, task: str,
                     arrays: Mapping[tuple[str, str, str], np.ndarray],
                     ) -> tuple[list[tuple[str, int, str | None, float, float, float]], list[str], str | None]:
    """For one policy × task: per variant (key, episodes, reason, point, low, high), the variant keys that
    run next, and the nominal cell's reason (None while it runs)."""
    nominal = arrays[(policy, task, NOMINAL_KEY)]
    rows: list[tuple[str, int, str | None, float, float, float]] = []
    for key in sorted(k for p, t, k in arrays if p == policy and t == task and k != NOMINAL_KEY):
        values = arrays[(policy, task, key)]
        point, low, high = retention_cs(nominal, values, alpha)
        reason = NARROW if (high - low) / 2 <= width + 1e-12 else BUDGET if values.size >= max_episodes else None
        rows.append((key, int(values.size), reason, point, low, high))
    open_rows = sorted((r for r in rows if r[2] is None), key=lambda r: (-(r[5] - r[4]), r[0]))
    widest = [r[0] for r in open_rows[:math.ceil(len(open_rows) / 2)]]
    nominal_reason = None if widest and nominal.size < max_episodes else (
        BUDGET if nominal.size >= max_episodes and widest else ALL_RETAINED)
    return rows, widest, nominal_reason


__all__ = ["ALL_RETAINED", "NOMINAL_KEY", "RETENTION_CAP", "retention_cs", "retention_fixed_n", "robustness_round"]
