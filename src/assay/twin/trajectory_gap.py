"""Gap attribution from the recorded episodes themselves: which layer closes the trajectory discrepancy.

Success counts reveal a reality only when it moves success beyond the sampling noise of
a few episodes per cell: a low-friction reality in which the expert still pushes the
puck home is invisible to them, yet every recorded trajectory shows it. This module
scores the same configurations as :mod:`assay.twin.attribution` (``nominal``,
``+layer``, ``calibrated``, ``-layer``) on two *trajectory* measures, each against the
real episodes:

* ``state``: each real episode's actions replayed open loop in the configuration, the
  RMS error (metres) of hand and object displacements against the recorded states
  (:meth:`assay.twin.sysid.OpenLoopReplay.per_trajectory`). Rendering cannot change it.
* ``trace``: a camera policy's recorded steps replayed with the camera rendered, the
  policy asked again at every step: its action RMS plus the fraction of ``detected.*``
  flags that disagree with what it recorded (:meth:`assay.twin.rendering.TraceReplay.per_trajectory`).

A configuration's gap is the mean of the per-episode discrepancies; a layer's closure
and share are formed exactly as for success. The bootstrap resamples the real episodes
(the replays are deterministic, the sample of real episodes is the noise), and a layer
is **named** when the calibrated twin differs from nominal in it and the lower bound of
its closure exceeds the measure's tolerance (the measurement accuracy: sysid's metres
RMS, rendering calibration's mismatch tolerance). The episodes should be held out from
the fit (:func:`assay.twin.blind.blind_attribution` uses the ones calibration did not
see), or the figures are in-sample and say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from assay.errors import TwinError
from assay.serialize import DictMixin
from assay.spec import CameraSpec, TaskSpec, derive_seed
from assay.twin.attribution import LEVEL, configurations
from assay.twin.config import Layer, Twin
from assay.twin.rendering import DEFAULT_TRACE_TOLERANCE, TraceReplay
from assay.twin.sysid import DEFAULT_TOLERANCE, OpenLoopReplay, Trajectory

MEASURES = ("state", "trace")
TOLERANCE = {"state": DEFAULT_TOLERANCE, "trace": DEFAULT_TRACE_TOLERANCE}  # sysid's and rendering's defaults


@dataclass(frozen=True)
class TrajectoryLayer:
    """One layer's closure of a trajectory measure's gap, with its bootstrap interval."""

    layer: str
    changed: bool
    closure: float
    closure_interval: tuple[float, float]
    share: float | None
    named: bool


@dataclass(frozen=True)
class TrajectoryAttribution(DictMixin):
    """A trajectory measure's gap per configuration and each layer's part in closing it."""

    measure: str  # state (metres RMS) or trace (action RMS + detection disagreement)
    episodes: int
    held_out: bool  # the episodes were not used by the calibration
    tolerance: float
    gaps: dict[str, float]  # configuration label -> mean discrepancy against the real episodes
    gap_intervals: dict[str, tuple[float, float]]
    layers: tuple[TrajectoryLayer, ...]
    unexplained: float | None  # gap(calibrated) / gap(nominal)
    named: tuple[str, ...]
    resamples: int


def _percentiles(values: np.ndarray) -> tuple[float, float]:
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def trajectory_attribution(task: TaskSpec, nominal: Twin, calibrated: Twin, episodes: Sequence[Trajectory],
                           measure: str = "state", cameras: Sequence[CameraSpec] = (), held_out: bool = True,
                           tolerance: float | None = None, resamples: int = 1000) -> TrajectoryAttribution:
    """Score every attribution configuration on ``measure`` against the real ``episodes`` (see the module)."""
    if measure not in MEASURES:
        raise TwinError(f"unknown trajectory measure {measure!r}; valid: {', '.join(MEASURES)}")
    if not episodes:
        raise TwinError(f"the {measure} attribution needs at least one recorded real episode")
    if resamples < 100:
        raise TwinError(f"resamples {resamples} is too few for a {LEVEL:.0%} interval; valid: 100 or more")
    tolerance = TOLERANCE[measure] if tolerance is None else tolerance
    labelled = configurations(nominal, calibrated)
    if measure == "state":
        replay: OpenLoopReplay | TraceReplay = OpenLoopReplay(task, episodes)
    else:
        replay = TraceReplay(task.model_copy(update={"cameras": tuple(cameras)}), episodes)
    by_version: dict[str, np.ndarray] = {}
    try:
        for _, twin in labelled:  # configurations with the same values are replayed once
            if twin.version not in by_version:
                by_version[twin.version] = replay.per_trajectory(twin)
    finally:
        replay.close()
    matrix = np.stack([by_version[twin.version] for _, twin in labelled])  # (labels, episodes)
    row = {label: i for i, (label, _) in enumerate(labelled)}
    rng = np.random.default_rng(derive_seed("twin-trajectory-bootstrap", measure, calibrated.version, len(episodes)))
    picks = rng.integers(0, matrix.shape[1], (resamples, matrix.shape[1]))
    boot = matrix[:, picks].mean(axis=2)  # (labels, resamples)
    point = matrix.mean(axis=1)

    def closure(gap: np.ndarray, layer: Layer) -> np.ndarray:
        v = layer.value
        return ((gap[row["nominal"]] - gap[row[f"+{v}"]]) + (gap[row[f"-{v}"]] - gap[row["calibrated"]])) / 2

    total = float(point[row["nominal"]] - point[row["calibrated"]])
    layers = []
    for layer in Layer:
        interval = _percentiles(closure(boot, layer))
        changed = nominal.layer(layer) != calibrated.layer(layer)
        value = float(closure(point, layer))
        layers.append(TrajectoryLayer(layer.value, changed, value, interval,
                                      value / total if total > tolerance else None,
                                      changed and interval[0] > tolerance))
    nominal_gap = float(point[row["nominal"]])
    return TrajectoryAttribution(
        measure, len(episodes), held_out, tolerance, {label: float(point[i]) for label, i in row.items()},
        {label: _percentiles(boot[i]) for label, i in row.items()}, tuple(layers),
        float(point[row["calibrated"]]) / nominal_gap if nominal_gap > tolerance else None,
        tuple(x.layer for x in layers if x.named), resamples)
