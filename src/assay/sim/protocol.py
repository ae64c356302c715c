"""The SimEnv protocol: the only face of a simulator that the runner sees.

A backend owns its simulator; the task (a TaskSpec) never does. ``reset(seed)``
must set *all* initial conditions from the seed, so that one seed gives the same
episode in a fresh and in a reused environment.

A backend that renders its camera frames itself may offer ``skip_next_frames()``
(:class:`SupportsFramesOnDemand`): the runner calls it before a step whose
observation neither the policy (no replan follows) nor a video (not one of its
frames) will read, and that observation then has no ``image.*``/``depth.*`` keys.
Rendering never changes the physics, so trajectories are the same either way.

A backend (or wrapper) may also tell what its layers did in the latest step
(:class:`SupportsLayerTrace`): the controller's target and tracking error, physics'
contacts and warnings, the time it spent drawing. It reads the simulator and never
writes it, so tracing changes no trajectory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from assay.annotations import public_api
from assay.spec import TaskSpec, Variant

Observation = dict[str, np.ndarray]


@public_api
@dataclass(frozen=True)
class Transition:
    """What one step returns. ``info`` holds float scalars only (they are recorded)."""

    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    success: bool
    info: dict[str, float] = field(default_factory=dict)


@public_api
@runtime_checkable
class SimEnv(Protocol):
    """A simulator backend as the runner sees it: ``reset(seed)``, ``step(action)``, and what ``reset`` chose."""

    task: TaskSpec

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        """Start an episode whose initial conditions derive from ``seed`` alone, under ``variant``'s
        model factors (restoring nominal first; see ``assay.sim.perturbed`` for the rest)."""

    def step(self, action: np.ndarray) -> Transition:
        """Apply one action; never called again after an episode has ended."""

    def initial_conditions(self) -> dict[str, Any]:
        """JSON-able record of what ``reset`` chose (object and goal positions, ...)."""

    def close(self) -> None:
        """Release the simulator (and its renderer); the environment is not used again."""


@public_api
@runtime_checkable
class SupportsFramesOnDemand(Protocol):
    """A backend (or wrapper) that can leave the camera frames out of the next step's observation."""

    def skip_next_frames(self) -> None:
        """The next ``step``'s observation carries no ``image.*``/``depth.*`` keys (it is not rendered);
        ``calib.*`` and the state stay. Applies to that one step only; ``reset`` always renders."""


@public_api
@runtime_checkable
class SupportsSimulator(Protocol):
    """A backend that hands out its simulator object (Meta-World's Sawyer, LIBERO's robosuite environment),
    for scripted experts and the safety filter; a wrapper's ``simulator`` is its innermost environment's.

    ``unwrapped`` keeps Gymnasium's meaning: the innermost environment (a backend is its own), not the
    simulator object inside it."""

    @property
    def simulator(self) -> Any:
        """The backend's own simulator object."""


LayerValue = float | np.ndarray  # a trace field's value at one step: a number or a small vector


@public_api
@runtime_checkable
class SupportsLayerTrace(Protocol):
    """A backend (or wrapper) that tells what its layers did in the latest step: the per-layer trace."""

    def layer_trace(self, groups: frozenset[str]) -> Mapping[str, LayerValue]:
        """Called after each ``step``: the step's trace fields by name without ``layer.`` (``controller.target``,
        ``physics.contacts``, ``render.ms``, ...; ``assay.store.trace`` declares them), the opt-in ones of
        ``groups`` (``spec.tracing.TRACE_GROUPS``) too. Reads the simulator, never changes it; a field the
        backend has no notion of is left out. The mapping is the caller's to keep (a fresh one each call)."""
