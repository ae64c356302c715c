"""The blind attribution protocol: a hidden reality, and the twin pipeline that sees only its data.

A "lab" runs the study's policies in a reality (a twin the pipeline never reads)
on its own seeds and keeps what a real cell would: per-policy success counts and
the recorded episodes. The pipeline then calibrates from those alone, in a
separate store: :func:`~assay.twin.sysid.identify` on the state policy's episodes
(every control and dynamics factor), :func:`~assay.twin.rendering.calibrate_rendering`
on the camera policy's episodes (from the calibrated twin), and
:func:`~assay.twin.attribution.attribute` on the sim's own seeds. The same steps
run for every reality, whatever layer it changed; ``benchmarks/twin_blind.py``
runs it over a set of realities and the slow test over one per layer.

Two kinds of evidence name a layer. The success attribution says which layer's
calibration closes the gap in the lab's success counts beyond their noise; the
trajectory attribution (:mod:`assay.twin.trajectory_gap`) says which closes the gap
between the lab's recorded episodes and their replays: the states, on the episodes
sysid did not fit, and the camera policy's trace, on the episodes the rendering
calibration did not fit. A reality that moves success by less than the noise of a
few episodes (low friction the expert shrugs off) still shows in every trajectory.
A layer is named when either says so; the result keeps which said what. A named layer whose
calibration closes none of the success gap beyond noise (its closure or the closure interval's
lower bound ≤ 0) is flagged (``flagged``, with the reason: a wrong fit of the right layer looks
like that): it stays in ``named``, but it is not a clean hit (``clean``) and never ``attributed``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from assay.sim import default_registry
from assay.store import Store
from assay.twin.attribution import Attribution, attribute, with_flags
from assay.twin.config import Layer, Twin, nominal_twin
from assay.twin.rendering import calibrate_rendering, rendering_twin
from assay.twin.running import TwinSettings, run_twins
from assay.twin.sysid import DEFAULT_MAX_EVALUATIONS, Trajectory, calibrated_twin, identify, trajectories_from_store
from assay.twin.trajectory_gap import TrajectoryAttribution, trajectory_attribution


@dataclass(frozen=True)
class BlindBudget:
    """What the pipeline may spend: real and sim episodes per cell, trajectories and search budgets."""

    state_policy: str = "expert"
    camera_policy: str | None = "perception"
    lab_seed: int = 1000  # the reality's episodes are drawn on seeds the sim never uses
    sysid_trajectories: int = 2
    sysid_evaluations: int = DEFAULT_MAX_EVALUATIONS  # the search's maximum; it stops at the tolerance
    restarts: int = 1
    rendering_parameters: tuple[str, ...] = ("light.intensity", "camera.yaw")
    rendering_steps: int = 30  # the first steps of one camera episode are replayed
    resamples: int = 1000


@dataclass(frozen=True)
class BlindResult:
    """The reality (for the report), what the pipeline fitted, its attribution and the layers it named."""

    reality: dict[str, Any]  # for the report only; the pipeline never reads it
    changed: tuple[str, ...]  # the layers the reality changed
    real: dict[str, float]
    calibrated: dict[str, Any]
    sysid: dict[str, Any]
    rendering: dict[str, Any] | None
    attribution: dict[str, Any]
    named: tuple[str, ...]  # named by the success counts or by the trajectories
    attributed: str | None  # the named, unflagged layer that closes most of the success gap
    trajectories: dict[str, Any] = field(default_factory=dict)  # measure -> TrajectoryAttribution as a dict
    named_by: dict[str, tuple[str, ...]] = field(default_factory=dict)  # success / state / trace -> layers
    flagged: dict[str, str] = field(default_factory=dict)  # named layers whose calibration closes no success gap
    converged: bool = True  # sysid's fit reached its tolerance

    @property
    def clean(self) -> tuple[str, ...]:
        """The named layers that are not flagged: the clean hits."""
        return tuple(layer for layer in self.named if layer not in self.flagged)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-able data (with ``clean``)."""
        return {**asdict(self), "clean": list(self.clean)}


def _head(trajectory: Trajectory, steps: int) -> Trajectory:
    return replace(trajectory, actions=trajectory.actions[:steps], states=trajectory.states[:steps],
                   trace={k: v[:steps] for k, v in trajectory.trace.items()})


def blind_attribution(reality: Twin, settings: TwinSettings, workdir: str | Path,
                      budget: BlindBudget | None = None) -> BlindResult:
    """Run the lab in ``reality``, then calibrate and attribute from its counts and episodes only."""
    budget = budget or BlindBudget()
    workdir = Path(workdir)
    task = default_registry().get(reality.task)
    with Store(workdir / "lab") as lab:  # the only place the reality runs
        entries = run_twins("lab", [reality], replace(settings, seed=budget.lab_seed), lab)[reality.version]
        states = trajectories_from_store(lab, "lab", budget.state_policy)
        cameras = (trajectories_from_store(lab, "lab", budget.camera_policy) if budget.camera_policy else [])
    # From here on: counts and episodes only.
    start = nominal_twin(reality.task)
    fitted_on = states[:budget.sysid_trajectories]
    fit = identify(task, fitted_on, start, None, budget.sysid_evaluations, restarts=budget.restarts)
    calibrated = calibrated_twin(fit, start)
    rendering = None
    heads = [_head(t, budget.rendering_steps) for t in cameras]
    if cameras and budget.rendering_parameters:
        render_fit = calibrate_rendering(task, settings.cameras, heads[:1], calibrated, budget.rendering_parameters)
        calibrated = rendering_twin(render_fit, calibrated)
        rendering = render_fit.to_dict()
    with Store(workdir / "sim") as sim:
        result: Attribution = attribute(start, calibrated, entries, settings, sim, resamples=budget.resamples)
    others = cameras if budget.camera_policy != budget.state_policy else []  # never one episode twice
    held_states = states[budget.sysid_trajectories:] + others
    measures: dict[str, TrajectoryAttribution] = {
        "state": trajectory_attribution(task, start, calibrated, held_states or fitted_on, "state",
                                        held_out=bool(held_states), resamples=budget.resamples)}
    if cameras:
        held_heads = heads[1:] if budget.rendering_parameters else heads
        measures["trace"] = trajectory_attribution(task, start, calibrated, held_heads or heads[:1], "trace",
                                                   settings.cameras, held_out=bool(held_heads),
                                                   resamples=budget.resamples)
    named_by = {"success": tuple(result.named), **{m: a.named for m, a in measures.items()}}
    named = tuple(layer.value for layer in Layer if any(layer.value in v for v in named_by.values()))
    changed = tuple(layer.value for layer in Layer if reality.layer(layer))
    result = with_flags(result, named_by)  # the same flags and attributed layer as `twin attribute` prints
    return BlindResult(reality.describe(), changed, {e.policy: e.rate for e in entries}, calibrated.describe(),
                       fit.to_dict(), rendering, result.to_dict(), named, result.attributed,
                       {m: a.to_dict() for m, a in measures.items()}, named_by, dict(result.flagged),
                       fit.converged)
