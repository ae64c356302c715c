"""Policies that fail in a known way (importable by worker processes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from assay.policies import ExpertPolicy, PolicyContext


class OpenGripperExpert:
    """The expert, but the gripper never closes: it reaches the object and cannot pick it up."""

    def __init__(self) -> None:
        self._expert = ExpertPolicy()

    def reset(self, context: PolicyContext) -> None:
        self._expert.reset(context)

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        actions = np.array(self._expert.act(observations), dtype=np.float64)
        actions[:, 3] = -1.0
        return actions


class LiberoFaultyExpert:
    """The LIBERO pick-and-place expert with one injected fault, each with a known failure category:

    ``no_grip`` the gripper never closes (grasp failure); ``drop`` it opens early in the carry (dropped);
    ``short`` it carries the object to a point ``SHORT_M`` before the target and lets go there (placed
    short); ``hover`` it circles above the object and never goes down (never reached); ``freeze`` it never
    moves (stagnation); ``slam`` it drives the open hand down into the table beside the object (collision);
    ``wrong`` it picks ``distractor()`` instead (wrong object: a callable the test gives, the position of an
    object the goal never names); ``none`` is the expert as it is.
    """

    SHORT_M = 0.12
    FAULTS = ("none", "no_grip", "drop", "short", "hover", "freeze", "slam", "wrong")

    def __init__(self, fault: str = "none", distractor: Any = None) -> None:
        from assay.policies.libero_expert import LiberoExpert

        assert fault in self.FAULTS, fault
        self.fault, self.distractor = fault, distractor
        self._expert = LiberoExpert()
        self._steps = 0

    def reset(self, context: PolicyContext) -> None:
        self._expert.reset(context)
        self._steps = 0

    def _privileged(self, privileged: np.ndarray) -> np.ndarray:
        goal = np.array(privileged, dtype=np.float64)
        if self.fault == "short":  # the target moved SHORT_M towards where the object starts
            towards = goal[0:2] - goal[3:5]
            goal[3:5] += self.SHORT_M * towards / max(np.linalg.norm(towards), 1e-9)
        elif self.fault == "wrong":
            goal[0:3] = self.distractor()
        return goal

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        self._steps += 1
        state = np.asarray(observations["state"])
        privileged = np.stack([self._privileged(p) for p in observations["privileged.goal"]])
        actions = self._expert.act({**observations, "privileged.goal": privileged})
        for row, slot in enumerate(observations["env_ids"]):
            plan = self._expert._plans[slot]
            phase = plan.PHASES[plan.phase]
            if self.fault == "no_grip":
                actions[row, 6] = -1.0
            elif self.fault == "drop" and phase == "carry" and plan.steps > 3:
                actions[row, 6] = -1.0
                plan.phase = plan.PHASES.index("retreat")  # and goes away, as a slip would leave it
            elif self.fault == "hover":
                above = privileged[row, 0:3] + np.array([0.03 * np.cos(self._steps / 3), 0.03 * np.sin(self._steps / 3),
                                                          0.15])
                actions[row] = np.concatenate([np.clip((above - state[row, :3]) * 20, -1, 1), np.zeros(3), [-1.0]])
            elif self.fault == "freeze":
                actions[row] = np.array([0.0] * 6 + [-1.0])
            elif self.fault == "slam":
                beside = privileged[row, 0:3] + np.array([0.0, 0.12, -0.2])
                actions[row] = np.concatenate([np.clip((beside - state[row, :3]) * 20, -1, 1), np.zeros(3), [-1.0]])
        return actions
