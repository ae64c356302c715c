"""System identification: fit a twin's control and dynamics factors to real trajectories.

Each real trajectory is (seed, actions, states): the states the robot was in when
it took each action. The twin replays the actions open loop from the same initial
condition (the Meta-World backend sets it from the seed, and the perturbation
wrapper seeds its noise from it, so a replay in the twin that recorded the
trajectory reproduces it exactly) and the discrepancy is the RMS error over the
compared state dimensions.

Every control and dynamics factor can be fitted, each in the coordinate that suits
it (:class:`Coordinate`): multiplicative scales with a positive lower bound
(``control.gain``, ``object.mass``, ``friction``) in log space; factors whose range
starts at 0 (``joint.damping``, ``action.noise``) in linear space (a log of 0 is
undefined); integer factors (``control.latency``, ``control.frame_skip``) by a
profile over every value in their range. The search alternates profiles (every
integer value; 9 points across a continuous factor's range) and bounded Powell
runs (derivative-free: a replay has no gradient) over the continuous factors from
the best point so far and from ``restarts`` seeded random starts, until a round
improves nothing; the first round screens one factor at a time from the start twin
and keeps the best single change. Among fits consistent with the data (within the measurement
tolerance), the one that moves the fewest factors from the start twin is kept: each
moved factor is put back and the others re-fitted. :mod:`assay.twin.identifiability`
then gives each fitted value an interval and names the parameters the trajectories
cannot tell apart.

The search is long work (up to :data:`DEFAULT_MAX_EVALUATIONS` replays): it is announced to the
run observers (:func:`assay.run.observers.advanced`: replays done of the stated maximum), so
``assay twin sysid`` shows its progress as the CLI shows every command's.

Rendering cannot be identified this way (an open-loop replay never looks at an
image); :mod:`assay.twin.rendering` fits it from a camera policy's trace instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.stats import pearsonr

from assay.errors import TwinError
from assay.run.observers import advanced
from assay.sim import FACTORS, make_env, perturbed
from assay.sim.factors import not_applicable
from assay.spec import TaskSpec, derive_seed
from assay.store import EpisodeRecord, Store
from assay.twin.config import Layer, Twin, layer_of
from assay.twin.identifiability import intervals

# Every factor of the control and dynamics layers, integer and noise factors included.
DEFAULT_PARAMETERS = ("control.gain", "control.latency", "control.frame_skip", "action.noise",
                      "object.mass", "friction", "joint.damping")
# Hand position (0:3) and object position (4:7) of a Meta-World state: what a real cell measures.
DEFAULT_DIMS = (0, 1, 2, 4, 5, 6)
COARSE_POINTS = 9  # the coarse profile of a continuous factor before the local search
PRUNE_EVALUATIONS = 25  # the re-fit after putting one factor back at its start value
# The measurement accuracy (metres RMS) every command and doc defaults to: within it a replay matches the data.
DEFAULT_TOLERANCE = 0.0005
# The stated maximum of the search (replays): it stops earlier once the fit is within the tolerance and a round
# improves nothing; 240 left a two-factor reality (pick-place gain 0.6 + damping 5) at 9x the tolerance; 800 fits
# it on 80-step episodes, not on 100-step ones (1.2x, warned: docs/TWIN.md, set c).
DEFAULT_MAX_EVALUATIONS = 800
MAX_ROUNDS = 60
CONDITIONAL = ("conditional on convergence: the values whose replay stays within the tolerance of the fit, which "
               "say where the truth is only if the fit itself reached the tolerance")


@dataclass(frozen=True)
class Trajectory:
    """One recorded real episode for system identification: its seed, actions, states and the policy's trace."""

    seed: int
    actions: np.ndarray  # (T, action_dim)
    states: np.ndarray  # (T, state_dim): the state before each action
    policy: str = ""
    instruction: str = ""
    policy_spec: dict[str, Any] = field(default_factory=dict)  # the recorded PolicySpec (to run it again)
    trace: dict[str, np.ndarray] = field(default_factory=dict)  # the policy's per-step trace.* columns


def first_per_policy(records: Sequence[EpisodeRecord], limit: int | None) -> list[EpisodeRecord]:
    """At most ``limit`` episodes of each policy, the first episode indices first (policies in name order).

    What ``twin sysid --max-trajectories N`` fits on and ``twin attribute --fitted-on N`` leaves out: the same
    first N episodes of each policy."""
    by_policy: dict[str, list[EpisodeRecord]] = {}
    for record in sorted(records, key=lambda r: (r.policy_name, r.episode_index, r.key)):
        by_policy.setdefault(record.policy_name, []).append(record)
    return [r for name in sorted(by_policy) for r in by_policy[name][:limit]]


def trajectories_from_store(store: Store, campaign: str, policy: str | None = None,
                            limit: int | None = None) -> list[Trajectory]:
    """The recorded (seed, actions, states, policy trace) of a campaign's episodes that have step data:
    with ``limit``, the first ``limit`` of each policy (:func:`first_per_policy`)."""
    records: list[EpisodeRecord] = [r for r in store.catalog.episodes(campaign=campaign, policy=policy)
                                    if r.data_path is not None]
    if not records:
        raise TwinError(f"campaign {campaign!r} has no episodes with step data in {store.root}"
                        + (f" for policy {policy!r}" if policy else ""))
    out = []
    for record in first_per_policy(records, limit):
        table = store.steps(record)
        trace = {name[len("trace."):]: table.column(name).to_numpy(zero_copy_only=False)
                 for name in table.column_names if name.startswith("trace.")}
        out.append(Trajectory(record.seed, _matrix(table, "action"), _matrix(table, "observation.state"),
                              record.policy_name, record.instruction,
                              dict(record.policy_spec), trace))
    return out


def _matrix(table, name: str) -> np.ndarray:
    column = table.column(name).combine_chunks()
    return column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), -1)


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
        self.announce: tuple[str, int] | None = None  # (what, stated maximum): observers hear each replay

    def close(self) -> None:
        """Close the replay environment."""
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
        if self.announce is not None:  # never "done" before identify says so (pruning may pass the maximum)
            what, maximum = self.announce
            advanced(what, self.evaluations, max(maximum, self.evaluations + 1), "replays")
        return out

    def residuals(self, twin: Twin) -> tuple[np.ndarray, np.ndarray]:
        """(sim − real, real) displacements from each trajectory's initial state, flattened over steps and dims."""
        sim, real = [], []
        for replayed, trajectory in zip(self.replay(twin), self.trajectories, strict=True):
            n = min(len(replayed), len(trajectory.states))
            sim.append(replayed[:n, self.dims] - replayed[0, self.dims])
            real.append(trajectory.states[:n, self.dims] - trajectory.states[0, self.dims])
        s, r = np.concatenate(sim).ravel(), np.concatenate(real).ravel()
        return s - r, r

    def per_trajectory(self, twin: Twin) -> np.ndarray:
        """Each trajectory's own RMS error over the compared dims (displacements from its initial state)."""
        out = []
        for replayed, trajectory in zip(self.replay(twin), self.trajectories, strict=True):
            n = min(len(replayed), len(trajectory.states))
            error = (replayed[:n, self.dims] - replayed[0, self.dims]) - (
                trajectory.states[:n, self.dims] - trajectory.states[0, self.dims])
            out.append(float(np.sqrt(np.mean(error ** 2))))
        return np.asarray(out)

    def discrepancy(self, twin: Twin) -> tuple[float, float | None]:
        """(RMS error over compared dims, Pearson r of displacements from the initial state)."""
        error, r = self.residuals(twin)
        s = error + r
        rms = float(np.sqrt(np.mean(error ** 2)))
        corr = float(pearsonr(s, r).statistic) if np.ptp(s) > 0 and np.ptp(r) > 0 else None
        return rms, corr


@dataclass(frozen=True)
class Coordinate:
    """How the search moves one factor: ``log`` (positive scales), ``linear`` (ranges from 0), ``integer``."""

    name: str
    space: str

    @staticmethod
    def of(name: str) -> Coordinate:
        """The coordinate of factor ``name``: integer steps, a log scale for a positive range, else linear."""
        factor = FACTORS[name]
        if factor.kind.value == "int":
            return Coordinate(name, "integer")
        return Coordinate(name, "log" if factor.low > 0 else "linear")

    @property
    def bounds(self) -> tuple[float, float]:
        """The search range in this coordinate's space."""
        factor = FACTORS[self.name]
        if self.space == "log":
            return float(np.log(factor.low)), float(np.log(factor.high))
        return float(factor.low), float(factor.high)

    def to_search(self, value: float) -> float:
        """A factor value in the search space."""
        return float(np.log(value)) if self.space == "log" else float(value)

    def to_value(self, x: float) -> float | int:
        """A point of the search space as a factor value (clipped, rounded to 4 digits for stable variant keys)."""
        low, high = self.bounds
        x = float(np.clip(x, low, high))
        if self.space == "integer":
            return int(round(x))
        return round(float(np.exp(x)) if self.space == "log" else x, 4)  # 4 digits: stable variant keys

    def grid(self) -> list[float | int]:
        """Every value of an integer factor; 9 points evenly spaced in the search space of a continuous one."""
        factor = FACTORS[self.name]
        if self.space == "integer":
            return list(range(int(factor.low), int(factor.high) + 1))
        return [self.to_value(x) for x in np.linspace(*self.bounds, COARSE_POINTS)]


def default_parameters(task: TaskSpec) -> tuple[str, ...]:
    """Every factor of :data:`DEFAULT_PARAMETERS` that can change ``task`` (no ``object.mass`` on a task
    without an object body)."""
    return tuple(name for name in DEFAULT_PARAMETERS if not_applicable(FACTORS[name], task) is None)


def check_parameters(parameters: Sequence[str], task: TaskSpec | None = None) -> tuple[Coordinate, ...]:
    """The parameters' coordinates, or a TwinError naming what can be fitted."""
    if task is not None:
        for name in parameters:
            why = not_applicable(FACTORS[name], task) if name in FACTORS else None
            if why is not None:
                raise TwinError(f"cannot fit {name} on {task.id}: {why}; "
                                f"valid: {', '.join(default_parameters(task))}")
    if not parameters:
        raise TwinError(f"no parameters to fit; valid: {', '.join(DEFAULT_PARAMETERS)}")
    out = []
    for name in parameters:
        layer = layer_of(name)
        if layer is Layer.RENDERING or FACTORS[name].kind.value not in ("float", "int"):
            raise TwinError(f"cannot fit {name} from state trajectories: system identification fits control and "
                            f"dynamics factors; valid: {', '.join(DEFAULT_PARAMETERS)}")
        out.append(Coordinate.of(name))
    if len({c.name for c in out}) != len(out):
        raise TwinError(f"parameters {', '.join(parameters)} name a factor twice")
    return tuple(out)


@dataclass(frozen=True)
class SysIdResult:
    """A fit: the parameters, their start and fitted values, the residual and correlation before and after."""

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
    restarts: int = 0
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # see assay.twin.identifiability
    tolerance: float = 0.0  # the RMS (metres) within which a value counts as consistent with the data
    warnings: tuple[str, ...] = ()  # parameters that trade off or do not affect the trajectories; no convergence
    correlations: dict[str, float] = field(default_factory=dict)  # "a|b" -> correlation of the two estimates
    converged: bool = True  # the fit's residual reached the tolerance
    max_evaluations: int = 0  # the stated maximum of the search
    intervals_are: str = CONDITIONAL  # what the intervals mean

    def to_dict(self) -> dict[str, object]:
        """The result as a JSON-ready dict."""
        return asdict(self)


class _Search:
    """The cached objective over a twin's values, with the start twin's other values kept."""

    def __init__(self, replay: OpenLoopReplay, start: Twin, coordinates: Sequence[Coordinate]) -> None:
        self.replay, self.start, self.coordinates = replay, start, tuple(coordinates)
        self.cache: dict[tuple[float | int, ...], float] = {}

    def twin(self, point: dict[str, float | int]) -> Twin:
        values = {**self.start.values(), **point}
        values = {k: v for k, v in values.items() if v != FACTORS[k].default}  # nominal values are absent
        layers = {layer.value: {k: v for k, v in values.items() if layer_of(k) is layer} for layer in Layer}
        return self.start.model_copy(update={**layers, "name": f"{self.start.name}-fit"})

    def rms(self, point: dict[str, float | int]) -> float:
        key = tuple(point[c.name] for c in self.coordinates)
        if key not in self.cache:
            self.cache[key] = self.replay.discrepancy(self.twin(point))[0]
        return self.cache[key]


def _powell(search: _Search, point: dict[str, float | int], free: Sequence[Coordinate], x0: np.ndarray,
            budget: int) -> tuple[dict[str, float | int], float]:
    def at(x: np.ndarray) -> dict[str, float | int]:
        return {**point, **{c.name: c.to_value(v) for c, v in zip(free, x, strict=True)}}

    def objective(x: np.ndarray) -> float:
        return search.rms(at(x))

    result = minimize(objective, x0, method="Powell", bounds=[c.bounds for c in free],
                      options={"maxfev": max(budget, 1), "xtol": 1e-3, "ftol": 1e-6})
    best = at(result.x)
    return best, search.rms(best)


def _search(search: _Search, point: dict[str, float | int], max_evaluations: int, restarts: int,
            seed: int, tolerance: float) -> dict[str, float | int]:
    """Alternate profiles (every integer value, a coarse grid of each continuous factor) and multi-start
    Powell over the continuous factors. Within the tolerance it stops when a round improves nothing; above
    it, it keeps going with fresh random starts (one more each round) until the residual reaches the
    tolerance or the maximum ``max_evaluations`` is spent (or a whole round finds no replay it had not run)."""
    continuous = [c for c in search.coordinates if c.space != "integer"]
    rng = np.random.default_rng(derive_seed("sysid-restarts", seed))
    best = search.rms(point)
    for round_index in range(MAX_ROUNDS if best > 0 else 0):  # rounds (none when the start replays exactly)
        before, ran = best, search.replay.evaluations
        # The first round screens one factor at a time from the start (the best single change wins: a
        # latency is found as a latency, not as the gain that a first gain profile would settle on);
        # later rounds are coordinate descent from the best point.
        origin = dict(point)
        for coordinate in search.coordinates:
            for value in coordinate.grid():
                if search.replay.evaluations >= max_evaluations:
                    break
                candidate = {**(origin if round_index == 0 else point), coordinate.name: value}
                if search.rms(candidate) < best:
                    point, best = candidate, search.rms(candidate)
        if continuous and best > 0:
            fresh = restarts + (round_index if best > tolerance else 0)  # above the tolerance: widen the search
            starts = [np.array([c.to_search(point[c.name]) for c in continuous])]
            starts += [np.array([rng.uniform(*c.bounds) for c in continuous]) for _ in range(fresh)]
            for index, x0 in enumerate(starts):
                left = max_evaluations - search.replay.evaluations
                if left <= 0 or best == 0.0:
                    break
                fit, fit_rms = _powell(search, point, continuous, x0, left // (len(starts) - index) + 1)
                if fit_rms < best:
                    point, best = fit, fit_rms
        if best == 0.0 or search.replay.evaluations >= max_evaluations:
            break
        if best >= before and (best <= tolerance or search.replay.evaluations == ran):
            break  # within the tolerance and no better, or nothing left to try
    return point


def _prune(search: _Search, point: dict[str, float | int], start: dict[str, float | int], tolerance: float,
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
            trial, rms = _powell(search, trial, free, x0, min(left, PRUNE_EVALUATIONS))
        if rms <= best or rms ** 2 <= best ** 2 + tolerance ** 2:
            point, best = trial, rms
    return point


def identify(task: TaskSpec, trajectories: Sequence[Trajectory], start: Twin,
             parameters: Sequence[str] | None = None, max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
             dims: Sequence[int] = DEFAULT_DIMS, restarts: int = 2, tolerance: float = DEFAULT_TOLERANCE,
             seed: int = 0) -> SysIdResult:
    """Fit ``parameters`` of ``start`` (other values kept; None: :func:`default_parameters` of the task) to
    the trajectories; see the module docstring.

    ``tolerance`` (metres RMS) is the measurement accuracy: the search runs until the residual reaches it
    or ``max_evaluations`` replays are spent, and warns when it ends above it (``converged`` False). The
    intervals hold the values whose replays stay within it of the best fit
    (:func:`assay.twin.identifiability.intervals`): conditional on convergence.
    """
    coordinates = check_parameters(default_parameters(task) if parameters is None else tuple(parameters), task)
    if tolerance <= 0:
        raise TwinError(f"tolerance {tolerance} is not valid; valid: a positive RMS in metres (e.g. 0.001)")
    base = start.values()
    point: dict[str, float | int] = {c.name: c.to_value(c.to_search(base.get(c.name, FACTORS[c.name].default)))
                                     for c in coordinates}
    replay = OpenLoopReplay(task, trajectories, dims)
    search = _Search(replay, start, coordinates)
    what = (f"system identification of {len(coordinates)} factor{'s' * (len(coordinates) != 1)} on "
            f"{len(trajectories)} trajectories (until {tolerance:g} m RMS)")
    advanced(what, 0, max_evaluations, "replays")
    replay.announce = (what, max_evaluations)
    try:
        before, corr_before = replay.discrepancy(start)
        best_point = _search(search, dict(point), max_evaluations, restarts, seed, tolerance)
        searched = search.replay.evaluations
        prune_budget = max_evaluations + PRUNE_EVALUATIONS * len(coordinates)  # the pruning pass has its own
        best_point = _prune(search, best_point, point, tolerance, prune_budget)
        best = search.twin(best_point)
        after, corr_after = replay.discrepancy(best)
        if after > before:  # never report a fit worse than where it started
            best, best_point, after, corr_after = start, point, before, corr_before
        region = intervals(search, best_point, tolerance)
    finally:
        replay.close()
    advanced(what, replay.evaluations, replay.evaluations, "replays")  # done
    warnings = list(region.warnings)
    converged = after <= tolerance
    if not converged:
        warnings.append(f"the fit ended at {after:.3g} m RMS, above the tolerance {tolerance:g} m "
                        f"({after / tolerance:.1f}x) after {searched} replays (maximum {max_evaluations}): it has not "
                        "converged, so its values and intervals (conditional on convergence) may exclude the truth; "
                        "raise max_evaluations (--max-evaluations), fit fewer factors or record trajectories that "
                        "separate them")
    return SysIdResult(
        task=start.task, parameters=tuple(c.name for c in coordinates),
        start={c.name: float(base.get(c.name, FACTORS[c.name].default)) for c in coordinates},
        fitted={c.name: float(best_point[c.name]) for c in coordinates},
        residual_before=before, residual_after=after, correlation_before=corr_before, correlation_after=corr_after,
        evaluations=replay.evaluations, trajectories=len(trajectories), twin=best.describe(), restarts=restarts,
        intervals=region.intervals, tolerance=tolerance, warnings=tuple(warnings), correlations=region.correlations,
        converged=converged, max_evaluations=max_evaluations)


def calibrated_twin(result: SysIdResult, start: Twin, name: str = "calibrated") -> Twin:
    """``start`` with the fitted control and dynamics values (values at their nominal default left out)."""
    fitted = {k: (int(v) if FACTORS[k].kind.value == "int" else v) for k, v in result.fitted.items()}
    values = {**start.values(), **fitted}
    values = {k: v for k, v in values.items() if not (k in fitted and v == FACTORS[k].default)}
    layers = {layer.value: {k: v for k, v in values.items() if layer_of(k) is layer} for layer in Layer}
    return start.model_copy(update={**layers, "name": name})
