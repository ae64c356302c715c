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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from assay.sim import default_registry
from assay.store import Store
from assay.twin.attribution import Attribution, attribute
from assay.twin.config import Layer, Twin, nominal_twin
from assay.twin.rendering import calibrate_rendering, rendering_twin
from assay.twin.running import TwinSettings, run_twins
from assay.twin.sysid import Trajectory, calibrated_twin, identify, trajectories_from_store


@dataclass(frozen=True)
class BlindBudget:
    """What the pipeline may spend: real and sim episodes per cell, trajectories and search budgets."""

    state_policy: str = "expert"
    camera_policy: str | None = "perception"
    lab_seed: int = 1000  # the reality's episodes are drawn on seeds the sim never uses
    sysid_trajectories: int = 2
    sysid_evaluations: int = 100
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
    named: tuple[str, ...]
    attributed: str | None

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-able data."""
        return asdict(self)


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
        states = trajectories_from_store(lab, "lab", budget.state_policy, budget.sysid_trajectories)
        cameras = (trajectories_from_store(lab, "lab", budget.camera_policy, 1) if budget.camera_policy else [])
    # From here on: counts and episodes only.
    start = nominal_twin(reality.task)
    fit = identify(task, states, start, None, budget.sysid_evaluations, restarts=budget.restarts)
    calibrated = calibrated_twin(fit, start)
    rendering = None
    if cameras and budget.rendering_parameters:
        render_fit = calibrate_rendering(task, settings.cameras, [_head(t, budget.rendering_steps) for t in cameras],
                                         calibrated, budget.rendering_parameters)
        calibrated = rendering_twin(render_fit, calibrated)
        rendering = render_fit.to_dict()
    with Store(workdir / "sim") as sim:
        result: Attribution = attribute(start, calibrated, entries, settings, sim, resamples=budget.resamples)
    changed = tuple(layer.value for layer in Layer if reality.layer(layer))
    return BlindResult(reality.describe(), changed, {e.policy: e.rate for e in entries}, calibrated.describe(),
                       fit.to_dict(), rendering, result.to_dict(), result.named, result.attributed)
