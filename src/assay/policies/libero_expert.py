"""A scripted, privileged pick-and-place expert for LIBERO (the simulator's true object positions).

For each ``in``/``on`` predicate of the task's BDDL goal, in order, it moves above
the object's grasp point (bowls by the rim), descends, closes the gripper, lifts, carries the object above the
target (the basket's region, the plate, the stove's cook region ...), lowers it and
opens. Actions are proportional end-effector moves for robosuite's OSC_POSE
controller (1.0 = 5 cm per step), orientation held; no learning, no randomness.
It reads ``privileged.goal`` (object and target positions, from the backend) and the
8-d state. Goals with other predicates (open, close, turn on) are not supported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from assay.policies.protocol import PolicyContext
from assay.spec import TaskSpec

GAIN = 1.0 / 0.05  # action per metre of error: OSC_POSE's output_max is 5 cm per unit action
OPEN, CLOSE = -1.0, 1.0
CLEARANCE = 0.12  # height above object or target while travelling
GRASP_DROP = 0.0  # grasp height relative to the object's body origin
RELEASE_ABOVE = 0.08  # height above the target when letting go
CARRY_ABOVE = 0.2  # height above the target while carrying (clears basket rims and bowls)
# Where to grasp, relative to the object's body origin, by a word of the object's name: a bowl is held
# by its rim (one finger inside), so the hand goes 4.5 cm to the side and stays above the bottom.
GRASP_OFFSETS = {"bowl": (0.0, 0.045, 0.02)}


def libero_expert_support(task: TaskSpec) -> str | None:
    """Why the expert cannot run ``task`` (a goal predicate other than in/on), or None."""
    from assay.spec.libero_catalog import libero_entry

    goal = libero_entry(task.env_name)["goal"]
    if not all(p[0] in ("in", "on") and len(p) == 3 for p in goal):
        kinds = sorted({p[0] for p in goal} - {"in", "on"})
        return f"the LIBERO expert only picks and places; {task.id} needs {', '.join(kinds)}"
    return None


class _Plan:
    """One environment's progress through its goal predicates (phase machine)."""

    PHASES = ("above", "descend", "grasp", "lift", "carry", "lower", "release", "retreat")
    LIMITS = {"above": 60, "descend": 30, "grasp": 12, "lift": 30, "carry": 60, "lower": 30, "release": 8,
              "retreat": 15}

    def __init__(self) -> None:
        self.goal = 0
        self.phase = 0
        self.steps = 0

    def advance(self) -> None:
        self.phase += 1
        self.steps = 0
        if self.phase == len(self.PHASES):
            self.phase = 0
            self.goal += 1


def grasp_offsets(task: TaskSpec) -> list[np.ndarray]:
    """One grasp offset per pick-and-place goal predicate of the task (see GRASP_OFFSETS)."""
    from assay.spec.libero_catalog import libero_entry

    offsets = []
    for predicate in libero_entry(task.env_name)["goal"]:
        words = predicate[1].split("_")
        offsets.append(np.array(next((o for word, o in GRASP_OFFSETS.items() if word in words), (0.0, 0.0, 0.0))))
    return offsets


def expert_action(plan: _Plan, state: np.ndarray, privileged: np.ndarray,
                  offsets: list[np.ndarray] | None = None) -> np.ndarray:
    """The next 7-d action of one environment's plan (advances the plan's phase)."""
    eef = state[:3]
    goals = len(privileged) // 6
    if plan.goal >= goals:
        return np.array([0.0] * 6 + [OPEN])
    offset = offsets[plan.goal] if offsets else np.zeros(3)
    obj = privileged[6 * plan.goal: 6 * plan.goal + 3] + offset  # the hand's grasp point
    target = privileged[6 * plan.goal + 3: 6 * plan.goal + 6] + np.array([offset[0], offset[1], 0.0])
    phase = _Plan.PHASES[plan.phase]
    gripper = CLOSE if phase in ("grasp", "lift", "carry", "lower") else OPEN
    carry_z = target[2] + CARRY_ABOVE
    waypoint = {
        "above": np.array([obj[0], obj[1], obj[2] + CLEARANCE]),
        "descend": obj + np.array([0.0, 0.0, GRASP_DROP]),
        "grasp": eef,
        "lift": np.array([eef[0], eef[1], carry_z]),
        "carry": np.array([target[0], target[1], carry_z]),
        "lower": np.array([target[0], target[1], target[2] + RELEASE_ABOVE]),
        "release": eef,
        "retreat": np.array([eef[0], eef[1], target[2] + CARRY_ABOVE]),
    }[phase]
    error = waypoint - eef
    tolerance = 0.01 if phase in ("above", "descend", "carry") else 0.02
    plan.steps += 1
    reached = np.linalg.norm(error) < tolerance if phase not in ("grasp", "release") else False
    if reached or plan.steps >= _Plan.LIMITS[phase]:
        plan.advance()
    move = np.clip(error * GAIN, -1.0, 1.0)
    return np.concatenate([move, np.zeros(3), [gripper]])


class LiberoExpert:
    """Per-environment phase machines over a batch (state is kept per ``env_ids`` slot)."""

    def __init__(self) -> None:
        self._plans: list[_Plan] = []
        self._offsets: list[np.ndarray] = []

    def reset(self, context: PolicyContext) -> None:
        """One fresh plan per environment slot."""
        self._plans = [_Plan() for _ in context.seeds]
        self._offsets = grasp_offsets(context.task)

    def reads_frames(self) -> bool:
        """No camera frame is read (the runner renders none for it)."""
        return False

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """One action per row, from the row's slot's plan."""
        states, privileged = np.asarray(observations["state"]), observations["privileged.goal"]
        return np.stack([expert_action(self._plans[slot], states[row], np.asarray(privileged[row]), self._offsets)
                         for row, slot in enumerate(observations["env_ids"])])
