"""``libero-faulty-expert``: the LIBERO pick-and-place expert with one injected fault, each with a known failure
category, for validating failure mining (``assay failures mine``) against ground truth.

=====================  =====================================================  ==========================
fault                  what the expert does instead                           the category it must get
=====================  =====================================================  ==========================
``none``               nothing: the expert as it is                           success
``no_grip``            the gripper never closes                               grasp_failure
``inverted_gripper``   the gripper command's sign flipped: the hand comes     grasp_failure
                       down closed and opens where it should close
``drop``               opens a few steps into the carry, then goes away       drop_during_transport
``short``              lets go ``SHORT_M`` before the target                  placement_miss
``hover``              circles 15 cm above the object, never goes down        approach_failure
``freeze``             never moves                                            stagnation
``slam``               drives the open hand into the table beside the object  collision
``wrong``              picks ``distractor()`` instead (a callable giving an   wrong_object
                       object the goal never names; only from Python)
=====================  =====================================================  ==========================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from assay.policies.libero_expert import LiberoExpert, libero_expert_support
from assay.policies.protocol import PolicyContext
from assay.spec import TaskSpec

Fault = Literal["none", "no_grip", "inverted_gripper", "drop", "short", "hover", "freeze", "slam", "wrong"]
FAULTS: tuple[str, ...] = ("none", "no_grip", "inverted_gripper", "drop", "short", "hover", "freeze", "slam", "wrong")
EXPECTED: dict[str, str] = {"none": "success", "no_grip": "grasp_failure", "inverted_gripper": "grasp_failure",
                            "drop": "drop_during_transport", "short": "placement_miss", "hover": "approach_failure",
                            "freeze": "stagnation", "slam": "collision", "wrong": "wrong_object"}


class FaultParams(BaseModel):
    """The fault to inject."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fault: Fault = Field(description="one of " + ", ".join(FAULTS) + " ('wrong' needs a distractor: Python only)")


class LiberoFaultyExpert:
    """The scripted LIBERO expert with one injected fault (the module docstring's table)."""

    Params = FaultParams
    version = "1"
    SHORT_M = 0.12

    def __init__(self, fault: str = "none", distractor: Callable[[], np.ndarray] | None = None) -> None:
        self.fault = FaultParams(fault=fault).fault  # type: ignore[arg-type]  # validated by the Literal
        if self.fault == "wrong" and distractor is None:
            raise ValueError("fault 'wrong' needs distractor(): the position of an object the goal never names")
        self.distractor = distractor
        self._expert = LiberoExpert()
        self._steps = 0

    @staticmethod
    def supports(task: TaskSpec) -> str | None:
        """The expert's own limits (pick and place on LIBERO only)."""
        if task.backend != "libero":
            return f"libero-faulty-expert runs LIBERO tasks only, not {task.id}"
        return libero_expert_support(task)

    def reset(self, context: PolicyContext) -> None:
        """A fresh plan per slot."""
        self._expert.reset(context)
        self._steps = 0

    def reads_frames(self) -> bool:
        """No camera frame is read."""
        return False

    def _privileged(self, privileged: np.ndarray) -> np.ndarray:
        goal = np.array(privileged, dtype=np.float64)
        if self.fault == "short":  # the target moved SHORT_M towards where the object starts
            towards = goal[0:2] - goal[3:5]
            goal[3:5] += self.SHORT_M * towards / max(float(np.linalg.norm(towards)), 1e-9)
        elif self.fault == "wrong" and self.distractor is not None:
            goal[0:3] = self.distractor()
        return goal

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """The expert's actions with the fault applied."""
        self._steps += 1
        state = np.asarray(observations["state"])
        privileged = np.stack([self._privileged(p) for p in observations["privileged.goal"]])
        actions = self._expert.act({**observations, "privileged.goal": privileged})
        for row, slot in enumerate(observations["env_ids"]):
            plan = self._expert._plans[slot]
            phase = plan.PHASES[plan.phase]
            if self.fault == "no_grip":
                actions[row, 6] = -1.0
            elif self.fault == "inverted_gripper":
                actions[row, 6] = -actions[row, 6]
            elif self.fault == "drop" and phase == "carry" and plan.steps > 3:
                actions[row, 6] = -1.0
                plan.phase = plan.PHASES.index("retreat")  # and goes away, as a slip would leave it
            elif self.fault == "hover":
                circle = np.array([0.03 * np.cos(self._steps / 3), 0.03 * np.sin(self._steps / 3), 0.15])
                move = np.clip((privileged[row, 0:3] + circle - state[row, :3]) * 20, -1, 1)
                actions[row] = np.concatenate([move, np.zeros(3), [-1.0]])
            elif self.fault == "freeze":
                actions[row] = np.array([0.0] * 6 + [-1.0])
            elif self.fault == "slam":
                beside = privileged[row, 0:3] + np.array([0.0, 0.12, -0.2])
                actions[row] = np.concatenate([np.clip((beside - state[row, :3]) * 20, -1, 1), np.zeros(3), [-1.0]])
        return actions
