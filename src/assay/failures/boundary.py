"""Boundary search along one factor: the level where success falls below a threshold.

``evaluate(level) -> (successes, episodes)`` runs the policy at that factor level
(the CLI runs it through the executor, on the campaign's paired seeds).
:func:`bisect_boundary` assumes success falls as the level moves from ``safe``
to ``hard`` and halves the interval ``iterations`` times; each probe's mid-p
interval is kept so the report says how sure each step was, and
:func:`boundary_interval` turns the probes into an interval on the boundary:
the bracket the bisection closed (the last level at or above the threshold and
the first below it), widened to the nearest levels whose mid-p intervals lie
wholly above and wholly below the threshold, since a probe whose interval holds
the threshold decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from assay.metrics import success_interval


@dataclass(frozen=True)
class Probe:
    """One probed factor level: its successes of episodes, the rate and the rate's mid-p interval."""

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


@dataclass(frozen=True)
class BoundaryInterval:
    """Where the success boundary lies along a factor: the bracket the probes found and the interval they support."""

    bracket: tuple[float, float] | None  # (last level >= threshold, first level below), in the search direction
    interval: tuple[float, float] | None  # (last level surely above, first surely below); None ends: unknown
    undecided: tuple[float, ...]  # probed levels whose mid-p interval holds the threshold


def boundary_interval(probes: list[Probe], safe: float, hard: float, threshold: float) -> BoundaryInterval:
    """Where the boundary lies, given the probes (see the module docstring)."""
    span = (hard - safe) or 1.0
    ordered = sorted(probes, key=lambda p: (p.level - safe) / span)
    above = [p for p in ordered if p.rate >= threshold]
    below = [p for p in ordered if p.rate < threshold]
    bracket = None
    if above and below:
        first_below = next(p for p in ordered if p.rate < threshold)
        limit = (first_below.level - safe) / span
        last_above = [p for p in ordered if p.rate >= threshold and (p.level - safe) / span < limit]
        bracket = (last_above[-1].level if last_above else safe, first_below.level)
    surely_above = [p.level for p in ordered if p.low >= threshold]
    surely_below = [p.level for p in ordered if p.high < threshold]
    undecided = tuple(p.level for p in ordered if p.low < threshold <= p.high)
    interval = None
    if bracket is not None:
        lo = [lv for lv in surely_above if (lv - safe) / span <= (bracket[0] - safe) / span]
        hi = [lv for lv in surely_below if (lv - safe) / span >= (bracket[1] - safe) / span]
        interval = (lo[-1] if lo else safe, hi[0] if hi else hard)
    return BoundaryInterval(bracket, interval, undecided)
