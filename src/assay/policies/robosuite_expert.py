"""A scripted, privileged grasp for robosuite 1.5's Lift: above the cube, down, close, lift.

It reads ``privileged.goal`` (the cube's true position, from the backend) and the state's end-effector
position; each environment slot keeps its own phase. Actions are OSC_POSE deltas (position only) and the
gripper (+1 closes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from assay.policies.protocol import PolicyContext
from assay.spec import TaskSpec

SCRIPTED = ("Lift",)
GAIN = 12.0
ABOVE = 0.08  # m above the cube before descending
LIFT = 0.15  # m the cube is carried up


@dataclass
class _Grasp:
    phase: str = "above"
    steps: int = 0

    LIMITS = {"above": 60, "descend": 60, "close": 12, "lift": 10_000}
    ORDER = ("above", "descend", "close", "lift")

    def advance(self) -> None:
        self.phase = self.ORDER[min(self.ORDER.index(self.phase) + 1, len(self.ORDER) - 1)]
        self.steps = 0


def robosuite_expert_support(task: TaskSpec) -> str | None:
    """None when the scripted grasp covers ``task``, else why not."""
    if task.env_name in SCRIPTED:
        return None
    return f"the robosuite scripted expert covers {', '.join(SCRIPTED)} only"


def grasp_action(plan: _Grasp, eef: np.ndarray, cube: np.ndarray) -> np.ndarray:
    """One action of the grasp ``plan`` from the hand's and the cube's positions."""
    target = {"above": cube + [0.0, 0.0, ABOVE], "descend": cube + [0.0, 0.0, -0.005], "close": eef,
              "lift": cube + [0.0, 0.0, LIFT]}[plan.phase]
    gripper = -1.0 if plan.phase in ("above", "descend") else 1.0
    error = target - eef
    plan.steps += 1
    reached = plan.phase in ("above", "descend") and np.linalg.norm(error) < 0.01
    if reached or plan.steps >= _Grasp.LIMITS[plan.phase]:
        plan.advance()
    return np.concatenate([np.clip(error * GAIN, -1.0, 1.0), np.zeros(3), [gripper]])


class RobosuiteExpert:
    """Per-slot grasp phase machines over a batch."""

    def __init__(self) -> None:
        self._plans: list[_Grasp] = []

    def reset(self, context: PolicyContext) -> None:
        """One fresh grasp per environment slot."""
        self._plans = [_Grasp() for _ in context.seeds]

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """One action per row, from its slot's grasp."""
        states, goals = np.asarray(observations["state"]), np.asarray(observations["privileged.goal"])
        return np.stack([grasp_action(self._plans[slot], states[row][:3], goals[row])
                         for row, slot in enumerate(observations["env_ids"])])
