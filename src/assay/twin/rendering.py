"""Rendering calibration: fit a twin's lighting and camera from a camera policy's own trace.

A state trajectory says nothing about the images, but a camera policy's recorded
episode does: at every step it looked at a frame and answered with an action,
and a policy with a ``step_trace`` hook said what it saw (the perception expert
records ``detected.<target>``, 1 if that frame showed it). With the control and
dynamics layers calibrated, replaying the recorded actions open loop reproduces
the states; rendering each state under a candidate rendering layer and asking the
same policy (rebuilt from the recorded spec) what it would do gives its actions and
trace under that rendering. The mismatch is the RMS difference between those
actions and the recorded ones plus the fraction of steps whose ``detected.*``
flags disagree; in the twin whose rendering matches the cell it is 0.

The mismatch is piecewise constant (a detection flips at a threshold), so the
search is a profile over a grid of each factor's values with the others fixed,
two rounds, then a bounded scalar refinement between the best value's grid
neighbours. The interval of a factor brackets the grid values whose mismatch is
within ``tolerance`` of the best, the others at the fit, out to the nearest grid
values that are not (the boundary lies between); a factor whose whole grid
is within it is named as not identifiable from these episodes (a dark frame hides
the goal the same way at 0.0 and at 0.1 intensity). A policy that sees no camera
cannot identify rendering at all: every factor comes out not identifiable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from assay.errors import TwinError
from assay.policies import PolicyContext, SupportsStepTrace, make_policy
from assay.serialize import DictMixin
from assay.sim import FACTORS, make_env, perturbed
from assay.spec import CameraSpec, PolicySpec, TaskSpec
from assay.twin.config import Layer, Twin, layer_of
from assay.twin.sysid import Trajectory

# The scalar rendering factors a camera policy's trace can reveal, and the values each profile visits.
GRIDS: dict[str, tuple[float, ...]] = {
    "light.intensity": (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0),
    "camera.yaw": tuple(float(v) for v in range(-60, 61, 10)),
    "camera.pitch": tuple(float(v) for v in range(-30, 31, 10)),
    "camera.distance": (-0.6, -0.4, -0.2, -0.1, 0.0, 0.1, 0.2, 0.4, 0.6, 0.8),
    "camera.fovy": (20.0, 30.0, 40.0, 45.0, 50.0, 60.0, 75.0, 90.0),
    "light.azimuth": tuple(float(v) for v in range(-180, 181, 45)),
}
DEFAULT_RENDERING = ("light.intensity", "camera.yaw", "camera.pitch", "camera.distance")
DEFAULT_TRACE_TOLERANCE = 0.01  # the mismatch (action RMS + detections disagreeing) within which a value fits


@dataclass(frozen=True)
class RenderingFit(DictMixin):
    """Start and fitted rendering values, the mismatch before and after, intervals and warnings."""

    task: str
    policy: str
    parameters: tuple[str, ...]
    start: dict[str, float]
    fitted: dict[str, float]
    mismatch_before: float  # action RMS + fraction of detection flags that disagree
    mismatch_after: float
    action_rms_before: float
    action_rms_after: float
    disagreement_before: float
    disagreement_after: float
    intervals: dict[str, tuple[float, float]]
    warnings: tuple[str, ...]
    evaluations: int
    trajectories: int
    twin: dict[str, object]


class TraceReplay:
    """The recorded actions replayed with the camera rendered, and the policy asked again at every step."""

    def __init__(self, task: TaskSpec, trajectories: Sequence[Trajectory]) -> None:
        if not trajectories:
            raise TwinError("rendering calibration needs at least one recorded camera-policy episode")
        specs = {str(t.policy_spec) for t in trajectories}
        if len(specs) != 1 or not trajectories[0].policy_spec:
            raise TwinError("rendering calibration replays one policy's episodes; choose one with --policy "
                            f"(got {len(specs)} policy specs)")
        if not task.cameras:
            raise TwinError(f"{task.id}: rendering calibration needs the camera the policy saw; give the study's "
                            "cameras (e.g. cameras: [{name: front, width: 128, height: 128, depth: true}])")
        self.task, self.trajectories = task, list(trajectories)
        self.spec = PolicySpec(**trajectories[0].policy_spec)
        self.policy = make_policy(self.spec)
        supports = getattr(self.policy, "supports", None)
        reason = supports(task) if supports is not None else None
        if reason is not None:
            raise TwinError(f"policy {self.spec.name!r} cannot replay on {task.id}: {reason}")
        self._env = make_env(task)
        self.evaluations = 0

    def close(self) -> None:
        """Close the replay environment."""
        self._env.close()

    def mismatch(self, twin: Twin) -> tuple[float, float]:
        """(RMS of the policy's actions vs the recorded ones, fraction of ``detected.*`` flags that differ)."""
        parts = self._parts(twin)
        squares, count = sum(p[0] for p in parts), sum(p[1] for p in parts)
        flips, flags = sum(p[2] for p in parts), sum(p[3] for p in parts)
        return float(np.sqrt(squares / count)), (flips / flags if flags else 0.0)

    def per_trajectory(self, twin: Twin) -> np.ndarray:
        """Each trajectory's own mismatch: its action RMS plus its fraction of disagreeing detections."""
        return np.asarray([np.sqrt(squares / count) + (flips / flags if flags else 0.0)
                           for squares, count, flips, flags in self._parts(twin)])

    def _parts(self, twin: Twin) -> list[tuple[float, int, int, int]]:
        """Per trajectory: (sum of squared action errors, their count, disagreeing flags, compared flags)."""
        env = perturbed(self._env, twin.variant(self.task))
        out = []
        for trajectory in self.trajectories:
            observation = env.reset(trajectory.seed)
            self.policy.reset(PolicyContext(self.task, (trajectory.seed,), (trajectory.instruction,)))
            recorded = {k: v for k, v in trajectory.trace.items() if k.startswith("detected.")}
            squares, count, flips, flags = 0.0, 0, 0, 0
            for t, action in enumerate(trajectory.actions):
                batch: dict[str, object] = {name: np.stack([value]) for name, value in observation.items()}
                batch["instruction"] = [trajectory.instruction]
                batch["env_ids"] = np.asarray([0])
                answer = np.asarray(self.policy.act(batch), dtype=np.float64).reshape(-1, len(action))
                squares += float(np.sum(np.square(answer[0] - action)))
                count += len(action)
                if recorded and isinstance(self.policy, SupportsStepTrace):
                    trace = self.policy.step_trace(0)
                    for key, values in recorded.items():
                        if np.isfinite(values[t]):
                            flags += 1
                            flips += float(trace.get(key, np.nan)) != float(values[t])
                if t + 1 < len(trajectory.actions):
                    observation = env.step(np.asarray(action, dtype=np.float64)).observation
            out.append((squares, count, flips, flags))
        self.evaluations += 1
        return out


def _check(parameters: Sequence[str]) -> tuple[str, ...]:
    for name in parameters:
        if layer_of(name) is not Layer.RENDERING or name not in GRIDS:
            raise TwinError(f"cannot fit {name} from a camera policy's trace; valid: {', '.join(GRIDS)}")
    if not parameters:
        raise TwinError(f"no rendering parameters to fit; valid: {', '.join(GRIDS)}")
    return tuple(parameters)


def calibrate_rendering(task: TaskSpec, cameras: Sequence[CameraSpec], trajectories: Sequence[Trajectory],
                        start: Twin, parameters: Sequence[str] = DEFAULT_RENDERING,
                        tolerance: float = DEFAULT_TRACE_TOLERANCE, refine: int = 8) -> RenderingFit:
    """Fit ``parameters`` of ``start``'s rendering layer (control and dynamics kept) to the episodes."""
    parameters = _check(tuple(parameters))
    task = task.model_copy(update={"cameras": tuple(cameras)})
    base = start.values()
    point = {p: float(base.get(p, FACTORS[p].default)) for p in parameters}
    replay = TraceReplay(task, trajectories)
    cache: dict[tuple[float, ...], tuple[float, float]] = {}

    def twin_at(values: dict[str, float]) -> Twin:
        rendering = {**start.rendering, **{k: round(v, 4) for k, v in values.items()}}
        rendering = {k: v for k, v in rendering.items() if v != FACTORS[k].default}
        return start.with_layer(Layer.RENDERING, rendering, f"{start.name}-rendering")

    def score(values: dict[str, float]) -> float:
        key = tuple(round(values[p], 4) for p in parameters)
        if key not in cache:
            cache[key] = replay.mismatch(twin_at(values))
        return sum(cache[key])

    try:
        before = score(point)
        best = before
        for _ in range(2):
            changed = False
            for name in parameters:
                for value in GRIDS[name]:
                    candidate = {**point, name: value}
                    if score(candidate) < best:
                        point, best, changed = candidate, score(candidate), True
            if not changed or best == 0.0:
                break
        for name in parameters if refine and best > 0 else ():
            grid = sorted({*GRIDS[name], point[name]})
            i = grid.index(point[name])
            low, high = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
            if high > low:
                found = minimize_scalar(lambda v, n=name, at=point: score({**at, n: float(v)}), bounds=(low, high),
                                        method="bounded", options={"maxiter": refine, "xatol": 1e-3})
                if score({**point, name: float(found.x)}) < best:
                    point = {**point, name: round(float(found.x), 4)}
                    best = score(point)
        intervals, warnings = {}, []
        for name in parameters:
            values = sorted({*GRIDS[name], point[name]})
            ok = [score({**point, name: v}) <= best + tolerance for v in values]
            lo, hi = ok.index(True), len(ok) - 1 - ok[::-1].index(True)
            # The boundary lies between a consistent value and its inconsistent neighbour: bracket it.
            intervals[name] = (values[max(lo - 1, 0)], values[min(hi + 1, len(values) - 1)])
            if all(ok):
                warnings.append(f"{name} is not identifiable from these episodes: every value on its grid gives the "
                                f"policy's recorded actions and detections to within {tolerance:g}")
        first = cache[tuple(round(float(base.get(p, FACTORS[p].default)), 4) for p in parameters)]
        last = cache[tuple(round(point[p], 4) for p in parameters)]
    finally:
        replay.close()
    fitted = twin_at(point)
    return RenderingFit(start.task, replay.spec.name, parameters,
                        {p: float(base.get(p, FACTORS[p].default)) for p in parameters},
                        {p: round(point[p], 4) for p in parameters}, before, best, first[0], last[0], first[1],
                        last[1], intervals, tuple(warnings), replay.evaluations, len(trajectories),
                        fitted.describe())


def rendering_twin(fit: RenderingFit, start: Twin, name: str = "calibrated") -> Twin:
    """``start`` with the fitted rendering values (values at their nominal default left out)."""
    rendering = {**start.rendering, **fit.fitted}
    rendering = {k: v for k, v in rendering.items() if v != FACTORS[k].default}
    return start.with_layer(Layer.RENDERING, rendering, name)
