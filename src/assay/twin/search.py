"""The search of system identification: screening, coordinate refinement, multi-start, pruning.

:func:`find` fits a twin's factors to a replay (``sysid.OpenLoopReplay``, or any object with
``discrepancy``, ``residuals`` and ``evaluations``):

1. **Screening**: each factor alone, from the start twin (:func:`line`: every value of an integer
   factor, 9 points across a continuous one's range), then, for the continuous factors whose coarse
   profile explains at least :data:`FOUND_SHARE` of the best one's, a bounded Brent search between the
   best point's neighbours (an answer between two grid points is found, not the grid point next to it).
   A factor is *found* when moving it alone lowers RMS² by more than tol² and by at least
   :data:`FOUND_SHARE` of what the best single factor lowers it by. When one factor alone fits within the
   tolerance, that is the answer.
2. **Coordinate refinement** from the best single-factor fit (:func:`refine`): a 1-D fit of each chosen
   factor in turn, then one Powell run over the continuous ones together (coordinate steps zigzag along a
   valley where two factors trade off), repeated until the residual reaches the tolerance or a cycle lowers
   it by less than :data:`STALL` of itself. Above the tolerance, each other factor is fitted alone from that
   point and the one that explains most of the rest is added to the chosen ones, which are refined again
   (forward selection: pick-place gain 0.6 + damping 5 screens frame skip in too, and refining all found
   factors at once locked frame skip at 4); when no factor explains more than the tolerance, or a
   refinement stops improving, it is a **local optimum** (``stalled``).
3. **Multi-start** from the best single-factor fits of the found factors (1 + ``restarts`` of them).
4. **Pruning** (:func:`prune`): among fits consistent with the data, the one that moves the fewest factors.

Every local optimum reached is kept (:class:`Optimum`), so a fit that ends above the tolerance can say
whether it **stalled** (the residual stopped improving: more replays will not help, and the competing
optima are named) or ran out of replays while still falling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from assay.sim import FACTORS
from assay.twin.config import Layer, Twin, layer_of
from assay.twin.identifiability import Coordinate

PRUNE_EVALUATIONS = 25  # the re-fit after putting one factor back at its start value
FOUND_SHARE = 0.25  # screening finds a factor that alone explains this share of what the best single factor does


class Search:
    """The cached objective over a twin's values, with the start twin's other values kept."""

    def __init__(self, replay: Any, start: Twin, coordinates: Sequence[Coordinate]) -> None:
        self.replay, self.start, self.coordinates = replay, start, tuple(coordinates)
        self.cache: dict[tuple[float | int, ...], float] = {}

    def twin(self, point: dict[str, float | int]) -> Twin:
        """The start twin with ``point``'s values (values at their nominal default left out)."""
        values = {**self.start.values(), **point}
        values = {k: v for k, v in values.items() if v != FACTORS[k].default}  # nominal values are absent
        layers = {layer.value: {k: v for k, v in values.items() if layer_of(k) is layer} for layer in Layer}
        return self.start.model_copy(update={**layers, "name": f"{self.start.name}-fit"})

    def rms(self, point: dict[str, float | int]) -> float:
        """The RMS residual of the twin at ``point`` (each point replayed once)."""
        key = tuple(point[c.name] for c in self.coordinates)
        if key not in self.cache:
            self.cache[key] = self.replay.discrepancy(self.twin(point))[0]
        return self.cache[key]


def powell(search: Search, point: dict[str, float | int], free: Sequence[Coordinate], x0: np.ndarray,
            budget: int) -> tuple[dict[str, float | int], float]:
    """A bounded Powell run over the ``free`` factors from ``x0`` (search space), at most ``budget`` replays."""

    def at(x: np.ndarray) -> dict[str, float | int]:
        return {**point, **{c.name: c.to_value(v) for c, v in zip(free, x, strict=True)}}

    def objective(x: np.ndarray) -> float:
        return search.rms(at(x))

    result = minimize(objective, x0, method="Powell", bounds=[c.bounds for c in free],
                      options={"maxfev": max(budget, 1), "xtol": 1e-3, "ftol": 1e-6})
    best = at(result.x)
    return best, search.rms(best)


LINE_XTOL = 1e-4  # the 1-D refinement's tolerance in the search space (log units: 0.01 %; the values keep 4 digits)
STALL = 0.01  # a cycle that lowers the residual by less than this fraction has stopped improving: a local optimum


@dataclass(frozen=True)
class Optimum:
    """One local optimum the search reached: the factors it moved from the start, and its residual."""

    moved: dict[str, float | int]
    rms: float
    start: str  # where its refinement started: "screening: friction", "re-screened: joint.damping", ...


def line(search: Search, point: dict[str, float | int], coordinate: Coordinate,
          max_evaluations: int, polish: bool = True) -> tuple[dict[str, float | int], float]:
    """The best value of one factor with the others held: every value of an integer factor; for a continuous one
    the coarse grid (9 points) and the current value, then a bounded Brent search between the best point's
    neighbours (a coarse grid point is never the answer by itself: friction 0.12 sat between 0.153 and 0.10)."""
    best_point, best = point, search.rms(point)
    for value in coordinate.grid():
        if search.replay.evaluations >= max_evaluations:
            return best_point, best
        candidate = {**point, coordinate.name: value}
        if search.rms(candidate) < best:
            best_point, best = candidate, search.rms(candidate)
    if coordinate.space == "integer" or best == 0.0 or not polish:
        return best_point, best
    return refine_line(search, best_point, best, coordinate, max_evaluations, point[coordinate.name])


def refine_line(search: Search, best_point: dict[str, float | int], best: float, coordinate: Coordinate,
                max_evaluations: int, origin: float | int | None = None) -> tuple[dict[str, float | int], float]:
    """The bounded Brent search of one continuous factor between the neighbours (on its coarse grid, and
    ``origin``) of its best value so far; never worse than ``(best_point, best)``."""
    if coordinate.space == "integer" or best == 0.0 or search.replay.evaluations >= max_evaluations:
        return best_point, best
    extra = set() if origin is None else {coordinate.to_search(origin)}
    xs = sorted({coordinate.to_search(v) for v in coordinate.grid()} | extra)
    here = coordinate.to_search(best_point[coordinate.name])
    index = min(range(len(xs)), key=lambda i: abs(xs[i] - here))
    low, high = xs[max(index - 1, 0)], xs[min(index + 1, len(xs) - 1)]
    if high <= low:
        return best_point, best

    def objective(x: float) -> float:
        if search.replay.evaluations >= max_evaluations:
            return best + 1.0  # out of replays: nothing further is tried
        return search.rms({**best_point, coordinate.name: coordinate.to_value(x)})

    found = minimize_scalar(objective, bounds=(low, high), method="bounded", options={"xatol": LINE_XTOL})
    candidate = {**best_point, coordinate.name: coordinate.to_value(float(found.x))}
    if search.replay.evaluations <= max_evaluations and search.rms(candidate) < best:
        best_point, best = candidate, search.rms(candidate)
    return best_point, best


def refine(search: Search, point: dict[str, float | int], factors: Sequence[Coordinate], tolerance: float,
            max_evaluations: int) -> tuple[dict[str, float | int], float, bool]:
    """Coordinate refinement of ``factors`` from ``point``: a 1-D fit of each in turn, then a Powell run over the
    continuous ones together (coordinate steps zigzag along a valley where two factors trade off), repeated until
    the residual reaches the tolerance, a cycle lowers it by less than :data:`STALL` of itself (``stalled``: a
    local optimum), or the replays run out (still improving). Returns (point, residual, stalled)."""
    best = search.rms(point)
    continuous = [c for c in factors if c.space != "integer"]
    while best > tolerance and search.replay.evaluations < max_evaluations:
        before = best
        for coordinate in factors:
            point, best = line(search, point, coordinate, max_evaluations)
        left = max_evaluations - search.replay.evaluations
        if len(continuous) >= 2 and best > tolerance and left > 0:
            x0 = np.array([c.to_search(point[c.name]) for c in continuous])
            fit, fit_rms = powell(search, point, continuous, x0, min(left, 40 * len(continuous)))
            if fit_rms < best:
                point, best = fit, fit_rms
        if best > tolerance and before - best <= STALL * before:
            return point, best, True
    return point, best, False


def _moved(point: dict[str, float | int], start: dict[str, float | int]) -> dict[str, float | int]:
    return {name: value for name, value in point.items() if value != start[name]}


@dataclass
class Outcome:
    """What the search found: the best point, every local optimum, the screening and whether it stalled."""

    point: dict[str, float | int]
    optima: list[Optimum]
    screening: dict[str, dict[str, float]]
    found: list[str]
    stalled: bool


def find(search: Search, start: dict[str, float | int], max_evaluations: int, restarts: int,
         tolerance: float) -> Outcome:
    """Screening, then refinement of the factors it found from the best single-factor fits (module docstring)."""
    start_rms = search.rms(start)
    if start_rms == 0.0:  # the start replays the data exactly: nothing to fit
        return Outcome(start, [], {}, [], False)
    # every factor's coarse profile first (so a small budget still screens them all), then the 1-D refinement of
    # the promising ones, best first: those whose coarse profile explains at least FOUND_SHARE of the best one's
    singles = {c.name: line(search, start, c, max_evaluations, polish=False) for c in search.coordinates}
    coarse = {name: start_rms ** 2 - rms ** 2 for name, (_, rms) in singles.items()}
    top = max(coarse.values(), default=0.0)
    for coordinate in sorted(search.coordinates, key=lambda c: singles[c.name][1]):
        if min(rms for _, rms in singles.values()) <= tolerance:
            break  # one factor alone already fits
        if coarse[coordinate.name] >= FOUND_SHARE * top and top > 0:
            singles[coordinate.name] = refine_line(search, *singles[coordinate.name], coordinate, max_evaluations,
                                                   start[coordinate.name])
    screening = {name: {"value": float(p[name]), "rms": rms} for name, (p, rms) in singles.items()}
    # a factor is found when moving it alone explains more than the tolerance (RMS² drops by more than tol²) and at
    # least FOUND_SHARE of what the best single factor explains (a small pull of every factor is not a finding)
    ranked = sorted(singles, key=lambda name: singles[name][1])
    explained = {name: start_rms ** 2 - singles[name][1] ** 2 for name in ranked}
    most = max(explained.values(), default=0.0)
    found = [name for name in ranked if explained[name] > tolerance ** 2 and explained[name] >= FOUND_SHARE * most]
    best_name = ranked[0] if ranked else None
    if best_name is None:
        return Outcome(start, [], screening, [], False)
    if singles[best_name][1] <= tolerance:  # one factor alone explains the data
        point, rms = singles[best_name]
        return Outcome(point, [Optimum(_moved(point, start), rms, f"screening: {best_name}")], screening,
                       found or [best_name], False)
    optima: list[Optimum] = []
    chosen_of: dict[int, list[str]] = {}
    stalled = False
    for name in (found or ranked[:2])[:1 + restarts]:  # multi-start from the best single-factor fits
        if search.replay.evaluations >= max_evaluations:
            break
        point, rms, stalled, chosen = _grow(search, singles[name][0], [name], tolerance, max_evaluations)
        chosen_of[len(optima)] = chosen
        optima.append(Optimum(_moved(point, start), rms, f"screening: {name}, then " + ", ".join(chosen[1:])
                              if len(chosen) > 1 else f"screening: {name}"))
        if rms <= tolerance:
            break
    if not optima:
        return Outcome(singles[best_name][0], [], screening, [best_name], False)
    index = min(range(len(optima)), key=lambda i: optima[i].rms)
    return Outcome({**start, **optima[index].moved}, optima, screening, chosen_of[index], stalled)


def _grow(search: Search, point: dict[str, float | int], chosen: list[str], tolerance: float,
          max_evaluations: int) -> tuple[dict[str, float | int], float, bool, list[str]]:
    """Forward selection from one single-factor fit: refine the chosen factors; while above the tolerance, fit
    each other factor alone from that point and add the one that lowers the residual most (by more than the
    tolerance: RMS² by tol²), then refine again. Stalls when no factor helps or a refinement stops improving."""
    by_name = {c.name: c for c in search.coordinates}
    point, rms, stalled = refine(search, point, [by_name[n] for n in chosen], tolerance, max_evaluations)
    while rms > tolerance and search.replay.evaluations < max_evaluations:
        trials = {c.name: line(search, point, c, max_evaluations) for c in search.coordinates if c.name not in chosen}
        if not trials:
            return point, rms, True, chosen
        name = min(trials, key=lambda n: trials[n][1])
        if trials[name][1] ** 2 >= rms ** 2 - tolerance ** 2:
            return point, rms, search.replay.evaluations < max_evaluations, chosen  # nothing more explains the rest
        chosen = [*chosen, name]
        point, rms, stalled = refine(search, trials[name][0], [by_name[n] for n in chosen], tolerance,
                                     max_evaluations)
    return point, rms, stalled, chosen


def prune(search: Search, point: dict[str, float | int], start: dict[str, float | int], tolerance: float,
           max_evaluations: int) -> dict[str, float | int]:
    """Among fits consistent with the data, prefer the fewest factors moved from the start twin.

    Each moved factor in turn is put back at its start value and the other continuous factors
    re-fitted (a short Powell run); the simpler point is kept when its replay is within the
    tolerance of the best (a mass that mimics a friction change is the usual case)."""
    best = search.rms(point)
    for coordinate in search.coordinates:
        if point[coordinate.name] == start[coordinate.name] or search.replay.evaluations >= max_evaluations:
            continue
        trial = {**point, coordinate.name: start[coordinate.name]}
        free = [c for c in search.coordinates if c.space != "integer" and c.name != coordinate.name]
        rms = search.rms(trial)
        if free and rms > best:
            left = max(max_evaluations - search.replay.evaluations, 1)
            x0 = np.array([c.to_search(trial[c.name]) for c in free])
            trial, rms = powell(search, trial, free, x0, min(left, PRUNE_EVALUATIONS))
        if rms <= best or rms ** 2 <= best ** 2 + tolerance ** 2:
            point, best = trial, rms
    return point
