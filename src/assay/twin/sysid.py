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
profile over every value in their range. The search (:mod:`assay.twin.search`) **screens** each factor
alone from the start twin (a coarse grid, then a bounded 1-D refinement between grid points), **refines
the factors it found** together (coordinate steps and a Powell run over them), **multi-starts** from the
best single-factor fits, and re-screens the factors left out when the fit is still above the tolerance.
It stops at the tolerance (``status`` converged), or reports that it **stalled at a local optimum**
(the residual stopped improving: the competing optima and their residuals are listed, and more replays
will not help) or that it **ran out of replays while still improving** (then, and only then, a larger
``max_evaluations`` is the advice). Among fits consistent with the data (within the measurement
tolerance), the one that moves the fewest factors from the start twin is kept. :mod:`assay.twin.identifiability`
then gives each fitted value its profile interval (linearised at the fit: the other factors re-fitted)
and names the parameters the trajectories cannot tell apart.

The search is long work (up to :data:`DEFAULT_MAX_EVALUATIONS` replays): it is announced to the
run observers (:func:`assay.run.observers.advanced`: replays done of the stated maximum), so
``assay twin sysid`` shows its progress as the CLI shows every command's.

Rendering cannot be identified this way (an open-loop replay never looks at an
image); :mod:`assay.twin.rendering` fits it from a camera policy's trace instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import pearsonr

from assay.errors import TwinError
from assay.run.observers import advanced
from assay.serialize import DictMixin
from assay.sim import FACTORS, make_env, perturbed
from assay.sim.factors import not_applicable
from assay.spec import TaskSpec
from assay.store import EpisodeRecord, Store, step_matrix
from assay.twin.config import Layer, Twin, layer_of
from assay.twin.identifiability import intervals
from assay.twin.search import PRUNE_EVALUATIONS, Optimum, Search, find, prune

# Every factor of the control and dynamics layers, integer and noise factors included.
DEFAULT_PARAMETERS = ("control.gain", "control.latency", "control.frame_skip", "action.noise",
                      "object.mass", "friction", "joint.damping")
# Hand position (0:3) and object position (4:7) of a Meta-World state: what a real cell measures.
DEFAULT_DIMS = (0, 1, 2, 4, 5, 6)
COARSE_POINTS = 9  # the coarse profile of a continuous factor before the local search
# The measurement accuracy (metres RMS) every command and doc defaults to: within it a replay matches the data.
DEFAULT_TOLERANCE = 0.0005
# The stated maximum of the search (replays): it stops earlier at the tolerance or at a local optimum (docs/TWIN.md).
DEFAULT_MAX_EVALUATIONS = 800
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
        out.append(Trajectory(record.seed, step_matrix(table, "action"), step_matrix(table, "observation.state"),
                              record.policy_name, record.instruction,
                              dict(record.policy_spec), trace))
    return out


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
class SysIdResult(DictMixin):
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
    status: str = "converged"  # converged | stalled (a local optimum: more replays will not help) | budget
    optima: tuple[dict[str, Any], ...] = ()  # every local optimum refined: moved factors, residual, where it began
    screening: dict[str, dict[str, float]] = field(default_factory=dict)  # factor -> its single-factor fit
    found: tuple[str, ...] = ()  # the factors screening (or re-screening) found and the refinement fitted


def identify(task: TaskSpec, trajectories: Sequence[Trajectory], start: Twin,
             parameters: Sequence[str] | None = None, max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
             dims: Sequence[int] = DEFAULT_DIMS, restarts: int = 2, tolerance: float = DEFAULT_TOLERANCE,
             seed: int = 0) -> SysIdResult:
    """Fit ``parameters`` of ``start`` (other values kept; None: :func:`default_parameters` of the task) to
    the trajectories; see the module docstring.

    ``tolerance`` (metres RMS) is the measurement accuracy: the search runs until the residual reaches it, a
    local optimum stops it, or ``max_evaluations`` replays are spent, and warns when it ends above it
    (``converged`` False; ``status`` says which). The intervals hold the values whose replays stay within it of
    the best fit (:func:`assay.twin.identifiability.intervals`): conditional on convergence. ``restarts``: how
    many further single-factor fits of the screening the refinement starts from; ``seed`` is kept for callers
    (the search draws no random numbers).
    """
    coordinates = check_parameters(default_parameters(task) if parameters is None else tuple(parameters), task)
    if tolerance <= 0:
        raise TwinError(f"tolerance {tolerance} is not valid; valid: a positive RMS in metres (e.g. 0.001)")
    replay = OpenLoopReplay(task, trajectories, dims)
    try:
        return fit(replay, start, coordinates, max_evaluations, restarts, tolerance)
    finally:
        replay.close()


def fit(replay: Any, start: Twin, coordinates: Sequence[Coordinate], max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
        restarts: int = 2, tolerance: float = DEFAULT_TOLERANCE) -> SysIdResult:
    """:func:`identify` on any replay (``OpenLoopReplay``, or a known-answer one in the tests): it needs
    ``discrepancy(twin)``, ``residuals(twin)``, ``evaluations``, ``trajectories`` and an ``announce`` slot."""
    base = start.values()
    point: dict[str, float | int] = {c.name: c.to_value(c.to_search(base.get(c.name, FACTORS[c.name].default)))
                                     for c in coordinates}
    search = Search(replay, start, coordinates)
    what = (f"system identification of {len(coordinates)} factor{'s' * (len(coordinates) != 1)} on "
            f"{len(replay.trajectories)} trajectories (until {tolerance:g} m RMS)")
    advanced(what, 0, max_evaluations, "replays")
    replay.announce = (what, max_evaluations)
    try:
        before, corr_before = replay.discrepancy(start)
        outcome = find(search, dict(point), max_evaluations, restarts, tolerance)
        best_point = outcome.point
        searched = search.replay.evaluations
        prune_budget = max_evaluations + PRUNE_EVALUATIONS * len(coordinates)  # the pruning pass has its own
        best_point = prune(search, best_point, point, tolerance, prune_budget)
        best = search.twin(best_point)
        after, corr_after = replay.discrepancy(best)
        if after > before:  # never report a fit worse than where it started
            best, best_point, after, corr_after = start, point, before, corr_before
        region = intervals(search, best_point, tolerance)
    finally:
        replay.announce = None
    advanced(what, replay.evaluations, replay.evaluations, "replays")  # done
    warnings = list(region.warnings)
    converged = after <= tolerance
    status = "converged" if converged else "budget" if searched >= max_evaluations and not outcome.stalled \
        else "stalled"
    optima = sorted(outcome.optima, key=lambda o: o.rms)
    if status == "stalled":
        competing = "; ".join(f"{_optimum_text(o)}: {o.rms:.3g} m" for o in optima) or "none"
        warnings.append(f"stalled at a local optimum: the fit ended at {after:.3g} m RMS, {after / tolerance:.1f}x "
                        f"the tolerance {tolerance:g} m, and stopped improving after {searched} replays (maximum "
                        f"{max_evaluations}); competing optima: {competing}. More replays will not lower it: its "
                        "values and intervals (conditional on convergence) may exclude the truth; fit fewer factors "
                        "or record trajectories that separate them")
    elif status == "budget":
        warnings.append(f"the search spent its maximum of {max_evaluations} replays while the residual was still "
                        f"falling ({after:.3g} m RMS, {after / tolerance:.1f}x the tolerance {tolerance:g} m): it has "
                        "not converged, so its values and intervals (conditional on convergence) may exclude the "
                        "truth; raise max_evaluations (--max-evaluations)")
    return SysIdResult(
        task=start.task, parameters=tuple(c.name for c in coordinates),
        start={c.name: float(base.get(c.name, FACTORS[c.name].default)) for c in coordinates},
        fitted={c.name: float(best_point[c.name]) for c in coordinates},
        residual_before=before, residual_after=after, correlation_before=corr_before, correlation_after=corr_after,
        evaluations=replay.evaluations, trajectories=len(replay.trajectories), twin=best.describe(), restarts=restarts,
        intervals=region.intervals, tolerance=tolerance, warnings=tuple(warnings), correlations=region.correlations,
        converged=converged, max_evaluations=max_evaluations, status=status,
        optima=tuple({"moved": o.moved, "rms": o.rms, "start": o.start} for o in optima),
        screening=outcome.screening, found=tuple(outcome.found))


def _optimum_text(optimum: Optimum) -> str:
    moved = ", ".join(f"{name} {value:.4g}" for name, value in sorted(optimum.moved.items()))
    return "{" + (moved or "the start") + "}"


def calibrated_twin(result: SysIdResult, start: Twin, name: str = "calibrated") -> Twin:
    """``start`` with the fitted control and dynamics values (values at their nominal default left out)."""
    fitted = {k: (int(v) if FACTORS[k].kind.value == "int" else v) for k, v in result.fitted.items()}
    values = {**start.values(), **fitted}
    values = {k: v for k, v in values.items() if not (k in fitted and v == FACTORS[k].default)}
    layers = {layer.value: {k: v for k, v in values.items() if layer_of(k) is layer} for layer in Layer}
    return start.model_copy(update={**layers, "name": name})
