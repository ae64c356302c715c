"""The SimEnv protocol: the only face of a simulator that the runner sees.

A backend owns its simulator; the task (a TaskSpec) never does. ``reset(seed)``
must set *all* initial conditions from the seed, so that one seed gives the same
episode in a fresh and in a reused environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from assay.spec import TaskSpec, Variant

Observation = dict[str, np.ndarray]


@dataclass(frozen=True)
class Transition:
    """What one step returns. ``info`` holds float scalars only (they are recorded)."""

    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    success: bool
    info: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class SimEnv(Protocol):
    task: TaskSpec

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        """Start an episode whose initial conditions derive from ``seed`` alone, under ``variant``'s
        model factors (restoring nominal first; see ``assay.sim.perturbed`` for the rest)."""

    def step(self, action: np.ndarray) -> Transition:
        """Apply one action; never called again after an episode has ended."""

    def initial_conditions(self) -> dict[str, Any]:
        """JSON-able record of what ``reset`` chose (object and goal positions, ...)."""

    def close(self) -> None: ...
