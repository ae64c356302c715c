"""Fakes to build tests on: a simulator made of functions and policies that answer constants.

``FunctionEnv`` (after Gymnasium's ``GenericTestEnv``) runs the episode loop
without a simulator: its state is the seed, and ``step_fn(seed, t, action)``
decides each transition. ``ConstantPolicy`` and ``ConstantChunkPolicy`` answer
the same action for every row, as ``(B, A)`` and ``(B, H, A)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from assay.policies.protocol import ENV_IDS, PolicyContext
from assay.sim.protocol import Observation, Transition
from assay.spec import ActionSpec, SuccessMode, TaskSpec, Variant

StepFn = Callable[[int, int, np.ndarray], Transition]


def fake_task(horizon: int = 10, success: SuccessMode = SuccessMode.ANY_STEP, action_dim: int = 1) -> TaskSpec:
    """A one-dimensional task for :class:`FunctionEnv` (state: the seed)."""
    return TaskSpec(name="fake/counter", version=1, backend="gymnasium", env_name="Fake-v0", instructions=("count",),
                    horizon=horizon, control_hz=10.0, state_dim=1, action=ActionSpec(dim=action_dim), success=success)


def running(seed: int, t: int, action: np.ndarray) -> Transition:
    """A step function whose episodes never end on their own (the horizon ends them)."""
    return Transition({"state": np.array([float(seed + t)])}, 0.0, False, False, False)


class FunctionEnv:
    """A SimEnv made of functions: the runner without a simulator."""

    def __init__(self, task: TaskSpec, step_fn: StepFn = running) -> None:
        self.task = task
        self.step_fn = step_fn
        self.seed = -1
        self.t = 0

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        self.seed, self.t = seed, 0
        return {"state": np.array([float(seed)] * self.task.state_dim)}

    def step(self, action: np.ndarray) -> Transition:
        self.t += 1
        return self.step_fn(self.seed, self.t, action)

    def initial_conditions(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def close(self) -> None:
        pass


class ConstantPolicy:
    """Answers ``value`` in every action dimension of every row: ``(B, dim)``."""

    def __init__(self, value: float = 0.5, dim: int = 1) -> None:
        self.value, self.dim = value, dim

    def reset(self, context: PolicyContext) -> None:
        self.context = context

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        return np.full((len(observations[ENV_IDS]), self.dim), self.value)


class ConstantChunkPolicy(ConstantPolicy):
    """Answers a chunk of ``horizon`` constant actions per row: ``(B, horizon, dim)``."""

    def __init__(self, value: float = 0.5, dim: int = 1, horizon: int = 4) -> None:
        super().__init__(value, dim)
        self.horizon = horizon

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        return np.full((len(observations[ENV_IDS]), self.horizon, self.dim), self.value)
