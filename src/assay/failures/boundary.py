"""Boundary search along one factor: the level where success falls below a threshold.

``evaluate(level) -> (successes, episodes)`` runs the policy at that factor level
(the CLI runs it through the executor, on the campaign's paired seeds).
:func:`bisect_boundary` assumes success falls as the level moves from ``safe``
to ``hard`` and halves the interval ``iterations`` times; each probe's Wilson
interval is kept so the report says how sure each step was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from assay.metrics import success_interval


@dataclass(frozen=True)
class Probe:
    level: float
    successes: int
    episodes: int
    rate: float
    low: float
    high: float


def _probe(evaluate: Callable[[float], tuple[int, int]], level: float) -> Probe:
    successes, episodes = evaluate(level)
    interval = success_interval(successes, episodes)
    low, high = (interval.low, interval.high) if interval is not None else (0.0, 1.0)
    return Probe(level, successes, episodes, successes / max(1, episodes), low, high)


def bisect_boundary(evaluate: Callable[[float], tuple[int, int]], safe: float, hard: float, threshold: float,
                    iterations: int = 4) -> tuple[float | None, list[Probe]]:
    """(the first level found below ``threshold`` nearest ``safe``, probes); None when ``hard`` is still above."""
    probes = [_probe(evaluate, safe), _probe(evaluate, hard)]
    if probes[1].rate >= threshold:
        return None, probes
    if probes[0].rate < threshold:
        return safe, probes
    lo, hi = safe, hard
    for _ in range(iterations):
        mid = (lo + hi) / 2
        probe = _probe(evaluate, mid)
        probes.append(probe)
        lo, hi = (mid, hi) if probe.rate >= threshold else (lo, mid)
    return hi, probes
