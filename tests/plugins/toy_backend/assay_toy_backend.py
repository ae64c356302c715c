"""A backend added from outside Assay (tests/test_backend_plugin.py): a point on a line that must reach its goal.

It is what a third-party package ships: a SimEnv, its tasks, and a :class:`assay.sim.Backend` named by an entry
point in the group ``assay.backends`` (``assay_toy_backend-1.0.dist-info/entry_points.txt`` beside this file).
"""

from __future__ import annotations

import numpy as np

from assay.sim import Backend, Transition
from assay.spec import ActionSpec, SuccessMode, TaskSpec


def point_task() -> TaskSpec:
    return TaskSpec(name="toy/point-reach", version=1, backend="toy", env_name="point",
                    instructions=("move the point to the goal",), horizon=40, control_hz=10.0,
                    observations=("state",), state_dim=2, action=ActionSpec(dim=1, low=-1.0, high=1.0, kind="box"),
                    success=SuccessMode.ANY_STEP, skill="reach", family="toy", tags=("toy",))


class PointEnv:
    """x moves by a tenth of the action each step; success within 0.05 of the goal; the seed draws the goal."""

    def __init__(self, task: TaskSpec) -> None:
        self.task = task
        self.x = self.goal = 0.0

    def _observation(self) -> dict[str, np.ndarray]:
        return {"state": np.array([self.x, self.goal])}

    def reset(self, seed: int, variant=None) -> dict[str, np.ndarray]:
        self.x, self.goal = 0.0, float(np.random.default_rng(seed).uniform(-1.0, 1.0))
        return self._observation()

    def step(self, action: np.ndarray) -> Transition:
        self.x += 0.1 * float(np.clip(action[0], -1.0, 1.0))
        distance = abs(self.x - self.goal)
        return Transition(self._observation(), -distance, False, False, distance < 0.05, {"distance": distance})

    def initial_conditions(self) -> dict[str, float]:
        return {"goal": self.goal}

    def close(self) -> None:
        pass


BACKEND = Backend("toy", PointEnv, lambda: [point_task()], packages=("numpy",))


class Still:
    """A policy that never moves the point."""

    def reset(self, context=None) -> None:
        pass

    def act(self, observations: dict[str, np.ndarray]) -> np.ndarray:
        return np.zeros((len(observations["state"]), 1))
