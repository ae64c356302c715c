"""Parameter intervals and identifiability of a system-identification fit.

A replay of the true twin reproduces a simulated reality exactly, so a likelihood
built on the fit's own residual would shrink every interval to a point. The
intervals here are instead the values *consistent with the trajectories to within
the measurement tolerance* ``tol`` (metres RMS, e.g. a motion-capture system's
accuracy): the values whose best replay stays within ``sqrt(best² + tol²)``.

* Continuous factors: the Jacobian ``J`` of the residual vector with respect to the
  search coordinates (log or linear, :class:`~assay.twin.sysid.Coordinate`), by
  forward differences, gives ``M = JᵀJ / n`` with RMS²(x + δ) ≈ RMS²(x) + δᵀMδ. The
  profile interval of parameter i (the others re-fitted) is ``x_i ± tol·sqrt((M⁻¹)_ii)``,
  mapped back to the factor's units and clipped to its range. The correlations of
  ``M⁻¹`` say which parameters trade off: at ``|ρ| ≥ 0.9`` the trajectories constrain
  a combination (mass vs friction when the object slides), not each one, and a warning
  names the pair. A parameter that moves the replay less than ``tol`` across its whole
  range is reported as not identifiable from these trajectories.
* Integer factors: the profile over their values with the other parameters at the fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from assay.twin.config import Twin

CORRELATION_WARNING = 0.9


class Coordinate(Protocol):
    """What the intervals read of a search coordinate (``sysid.Coordinate``)."""

    @property
    def name(self) -> str:
        """The factor."""

    @property
    def space(self) -> str:
        """``log``, ``linear`` or ``integer``."""

    @property
    def bounds(self) -> tuple[float, float]:
        """The search range."""

    def to_search(self, value: float) -> float:
        """A factor value in the search space."""

    def to_value(self, x: float) -> float | int:
        """A point of the search space as a factor value."""

    def grid(self) -> list[float | int]:
        """The values profiled."""


class Replay(Protocol):
    """What the intervals read of the replay (``sysid.OpenLoopReplay``)."""

    def residuals(self, twin: Twin) -> tuple[np.ndarray, np.ndarray]:
        """(sim - real, real) displacements, flattened."""


class _Search(Protocol):
    """What the intervals read of the fit's search (``sysid._Search``): this module sits below ``sysid``."""

    @property
    def coordinates(self) -> tuple[Coordinate, ...]:
        """The coordinates searched."""

    @property
    def replay(self) -> Replay:
        """The replay of the trajectories."""

    def twin(self, point: dict[str, float | int]) -> Twin:
        """The twin at ``point``."""

    def rms(self, point: dict[str, float | int]) -> float:
        """The RMS residual at ``point``."""


@dataclass(frozen=True)
class Region:
    """Per-parameter intervals, the identifiability warnings and the estimates' pairwise correlations."""

    intervals: dict[str, tuple[float, float]]
    warnings: tuple[str, ...]
    correlations: dict[str, float]


def _step(coordinate: Coordinate, x: float) -> float:
    low, high = coordinate.bounds
    h = 0.05 if coordinate.space == "log" else 0.02 * (high - low)
    return h if x + h <= high else -h


def _continuous(search: _Search, point: dict[str, float | int], free: list[Coordinate],
                tol: float) -> tuple[dict[str, tuple[float, float]], list[str], dict[str, float]]:
    twin = search.twin(point)
    base, _ = search.replay.residuals(twin)
    columns: list[np.ndarray] = []
    intervals: dict[str, tuple[float, float]] = {}
    warnings: list[str] = []
    for coordinate in free:
        x = coordinate.to_search(point[coordinate.name])
        h = _step(coordinate, x)
        moved = {**point, coordinate.name: coordinate.to_value(x + h)}
        actual = coordinate.to_search(moved[coordinate.name]) - x  # after rounding to stored digits
        error, _ = search.replay.residuals(search.twin(moved))
        columns.append((error - base) / actual if actual else np.zeros_like(base))
    jacobian = np.stack(columns, axis=1)
    m = jacobian.T @ jacobian / len(base)
    # A tiny ridge keeps exactly collinear columns invertible (their correlation then reads -1, not pinv's +1).
    covariance = np.linalg.inv(m + np.eye(len(m)) * max(np.trace(m), 1e-300) * 1e-9)
    effective = []
    for i, coordinate in enumerate(free):
        low, high = coordinate.bounds
        x = coordinate.to_search(point[coordinate.name])
        half = tol * np.sqrt(max(covariance[i, i], 0.0))
        # The RMS change across the whole range (linearised) below the tolerance, or an interval wider than the range.
        if np.sqrt(m[i, i]) * (high - low) < tol or half >= high - low:
            intervals[coordinate.name] = (float(coordinate.to_value(low)), float(coordinate.to_value(high)))
            warnings.append(f"{coordinate.name} is not identifiable from these trajectories: across its whole "
                            f"range the replay stays within the tolerance {tol:g} m (interval = its range)")
            continue
        effective.append(i)
        intervals[coordinate.name] = (float(coordinate.to_value(x - half)), float(coordinate.to_value(x + half)))
    correlations = {}
    for a in effective:
        for b in effective:
            if b <= a:
                continue
            rho = float(covariance[a, b] / np.sqrt(covariance[a, a] * covariance[b, b]))
            correlations[f"{free[a].name}|{free[b].name}"] = round(rho, 3)
            if abs(rho) >= CORRELATION_WARNING:
                warnings.append(f"{free[a].name} and {free[b].name} trade off (correlation {rho:+.2f}): the "
                                "trajectories constrain their combination, not each; fix one or record "
                                "trajectories that separate them")
    return intervals, warnings, correlations


def intervals(search: _Search, point: dict[str, float | int], tol: float) -> Region:
    """Intervals, warnings and estimate correlations at the fitted ``point`` (see the module docstring)."""
    best = search.rms(point)
    limit = float(np.sqrt(best ** 2 + tol ** 2))
    out: dict[str, tuple[float, float]] = {}
    warnings: list[str] = []
    for coordinate in (c for c in search.coordinates if c.space == "integer"):
        consistent = [v for v in coordinate.grid() if search.rms({**point, coordinate.name: v}) <= limit]
        out[coordinate.name] = (float(min(consistent)), float(max(consistent)))
        if len(consistent) == len(coordinate.grid()):
            warnings.append(f"{coordinate.name} is not identifiable from these trajectories: every value in "
                            f"its range replays within the tolerance {tol:g} m")
    free = [c for c in search.coordinates if c.space != "integer"]
    correlations: dict[str, float] = {}
    if free:
        continuous, more, correlations = _continuous(search, point, free, tol)
        out.update(continuous)
        warnings += more
    return Region({c.name: out[c.name] for c in search.coordinates}, tuple(warnings), correlations)
