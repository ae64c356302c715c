"""System identification: fit a twin's control and dynamics parameters to real trajectories.

Each real trajectory is (seed, actions, states): the states the robot was in when
it took each action. The twin replays the actions open loop from the same initial
condition (the Meta-World backend sets it from the seed, and the perturbation
wrapper seeds its noise from it, so a replay in the twin that recorded the
trajectory reproduces it exactly) and the discrepancy is the mean squared error
over the compared state dimensions. ``scipy.optimize.minimize`` (bounded Powell,
derivative-free because a replay is not differentiable) searches the parameters
in log space: every fitted factor is a multiplicative scale of its nominal value.

Rendering cannot be identified this way (an open-loop replay never looks at an
image); it comes from measurement (a twin file) instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.stats import pearsonr

from assay.sim import FACTORS, make_env, perturbed
from assay.spec import TaskSpec
from assay.store import EpisodeRecord, Store
from assay.twin.config import Layer, Twin, TwinError, layer_of

DEFAULT_PARAMETERS = ("control.gain", "object.mass", "friction", "joint.damping")
# Hand position (0:3) and object position (4:7) of a Meta-World state: what a real cell measures.
DEFAULT_DIMS = (0, 1, 2, 4, 5, 6)


@dataclass(frozen=True)
class Trajectory:
    seed: int
    actions: np.ndarray  # (T, action_dim)
    states: np.ndarray  # (T, state_dim): the state before each action


def trajectories_from_store(store: Store, campaign: str, policy: str | None = None,
                            limit: int | None = None) -> list[Trajectory]:
    """The recorded (seed, actions, states) of a campaign's episodes that have step data."""
    records: list[EpisodeRecord] = [r for r in store.catalog.episodes(campaign=campaign, policy=policy)
                                    if r.data_path is not None]
    if not records:
        raise TwinError(f"campaign {campaign!r} has no episodes with step data in {store.root}"
                        + (f" for policy {policy!r}" if policy else ""))
    out = []
    for record in records[:limit]:
        table = store.steps(record)
        out.append(Trajectory(record.seed, _matrix(table, "action"), _matrix(table, "observation.state")))
    return out


def _matrix(table, name: str) -> np.ndarray:
    column = table.column(name).combine_chunks()
    return column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), -1)


@dataclass(frozen=True)
class SysIdResult:
    task: str
    parameters: tuple[str, ...]
    start: dict[str, float]
    fitted: dict[str, float]
    residual_before: float  # RMS state discrepancy of the starting twin, metres
    residual_after: float
    correlation_before: float | None  # Pearson r of replayed vs real state displacements
    correlation_after: float | None
    evaluations: int
    trajectories: int
    twin: dict[str, object]  # the calibrated twin (start twin with the fitted values)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class OpenLoopReplay:
    """One environment of the task, reused for every candidate twin."""

    def __init__(self, task: TaskSpec, trajectories: Sequence[Trajectory], dims: Sequence[int] = DEFAULT_DIMS) -> None:
        if not trajectories:
            raise TwinError("system identification needs at least one real trajectory")
        self.task = task
        self.trajectories = list(trajectories)
        self.dims = list(dims)
        self._env = make_env(task)
        self.evaluations = 0

    def close(self) -> None:
        self._env.close()

    def replay(self, twin: Twin) -> list[np.ndarray]:
        """Each trajectory's states as the twin produces them under the recorded actions."""
        env = perturbed(self._env, twin.variant(self.task))
        out = []
        for trajectory in self.trajectories:
            state = env.reset(trajectory.seed)["state"]
            states = [state]
            for action in trajectory.actions[:-1]:
                state = env.step(np.asarray(action, dtype=np.float64)).observation["state"]
                states.append(state)
            out.append(np.asarray(states))
        self.evaluations += 1
        return out

    def discrepancy(self, twin: Twin) -> tuple[float, float | None]:
        """(RMS error over compared dims, Pearson r of displacements from the initial state)."""
        sim, real = [], []
        for replayed, trajectory in zip(self.replay(twin), self.trajectories, strict=True):
            n = min(len(replayed), len(trajectory.states))
            sim.append(replayed[:n, self.dims] - replayed[0, self.dims])
            real.append(trajectory.states[:n, self.dims] - trajectory.states[0, self.dims])
        s, r = np.concatenate(sim).ravel(), np.concatenate(real).ravel()
        rms = float(np.sqrt(np.mean((s - r) ** 2)))
        corr = float(pearsonr(s, r).statistic) if np.ptp(s) > 0 and np.ptp(r) > 0 else None
        return rms, corr


def _check_parameters(parameters: Sequence[str]) -> None:
    for name in parameters:
        layer = layer_of(name)
        factor = FACTORS[name]
        if layer is Layer.RENDERING or factor.kind.value != "float" or factor.default != 1.0:
            fittable = ", ".join(DEFAULT_PARAMETERS)
            raise TwinError(f"cannot fit {name}: system identification fits multiplicative control and dynamics "
                            f"scales; valid: {fittable}")


def identify(task: TaskSpec, trajectories: Sequence[Trajectory], start: Twin,
             parameters: Sequence[str] = DEFAULT_PARAMETERS, max_evaluations: int = 120,
             dims: Sequence[int] = DEFAULT_DIMS) -> SysIdResult:
    """Fit ``parameters`` of ``start`` (other values kept) to the trajectories; see the module docstring."""
    parameters = tuple(parameters)
    _check_parameters(parameters)
    bounds = [(np.log(FACTORS[p].low), np.log(FACTORS[p].high)) for p in parameters]
    base = start.values()
    x0 = np.array([np.log(float(base.get(p, 1.0))) for p in parameters])
    replay = OpenLoopReplay(task, trajectories, dims)

    def twin_at(x: np.ndarray) -> Twin:
        values = dict(base)
        for name, logv, (low, high) in zip(parameters, x, bounds, strict=True):
            values[name] = round(float(np.exp(np.clip(logv, low, high))), 4)  # 4 digits: stable variant keys
        layers = {layer.value: {k: v for k, v in values.items() if layer_of(k) is layer} for layer in Layer}
        return start.model_copy(update={**layers, "name": f"{start.name}-fit"})

    cache: dict[tuple[float, ...], float] = {}

    def objective(x: np.ndarray) -> float:
        twin = twin_at(x)
        key = tuple(twin.values().get(p, 1.0) for p in parameters)
        if key not in cache:
            cache[key] = replay.discrepancy(twin)[0]
        return cache[key]

    try:
        before, corr_before = replay.discrepancy(start)
        result = minimize(objective, x0, method="Powell", bounds=bounds,
                          options={"maxfev": max_evaluations, "xtol": 1e-3, "ftol": 1e-6})
        best = twin_at(result.x)
        after, corr_after = replay.discrepancy(best)
        if after > before:  # never report a fit worse than where it started
            best, after, corr_after = start, before, corr_before
    finally:
        replay.close()
    return SysIdResult(
        task=start.task, parameters=parameters,
        start={p: float(base.get(p, 1.0)) for p in parameters},
        fitted={p: float(best.values().get(p, 1.0)) for p in parameters},
        residual_before=before, residual_after=after, correlation_before=corr_before, correlation_after=corr_after,
        evaluations=replay.evaluations, trajectories=len(trajectories), twin=best.describe())


def calibrated_twin(result: SysIdResult, start: Twin, name: str = "calibrated") -> Twin:
    """``start`` with the fitted control and dynamics values."""
    values = {**start.values(), **result.fitted}
    values = {k: v for k, v in values.items() if not (k in result.fitted and v == 1.0)}
    layers = {layer.value: {k: v for k, v in values.items() if layer_of(k) is layer} for layer in Layer}
    return start.model_copy(update={**layers, "name": name})
