"""A policy of your own, beside its campaign (``examples/my_policy.yaml``; docs/POLICY.md).

A proportional controller for Meta-World reach: it moves the hand toward the goal, both read from the
39-d state, with an optional noise stream per environment seeded from that environment's episode seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from assay.policies import PolicyContext, PolicyContract
from assay.policies.contract import ActionContract, ActionMode, ArraySpec, GripperPolarity

HAND, GOAL = slice(0, 3), slice(36, 39)  # Meta-World's state: hand xyz first, goal xyz last


class ReachParams(BaseModel):
    """The parameters a campaign may give (``params:``); anything else is refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gain: float = Field(default=10.0, gt=0, description="action per metre between hand and goal")
    noise: float = Field(default=0.0, ge=0, description="standard deviation of Gaussian action noise")


class ProportionalReach:
    """Hand toward goal, clipped to the action box; the gripper stays open."""

    def __init__(self, **params: Any) -> None:
        self.params = ReachParams(**params)
        self.rngs: list[np.random.Generator] = []

    @staticmethod
    def contract(params: Mapping[str, Any]) -> PolicyContract:
        """What it reads and answers, checked against each task before its first episode: a task with
        another state layout or action space is refused in one line instead of being run on garbage."""
        return PolicyContract(
            observations={"observation/state": ArraySpec(shape=(39,), dtype="float64")},
            state_layout="metaworld/state-39",
            action=ActionContract(dim=4, mode=ActionMode.DELTA, gripper=GripperPolarity.POSITIVE_CLOSES,
                                  low=-1.0, high=1.0),
        )

    def reset(self, context: PolicyContext) -> None:
        # one noise stream per environment slot, from its episode seed: the same episode on any batching
        self.rngs = [np.random.default_rng(seed) for seed in context.seeds]

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        state = np.asarray(observations["state"])
        move = self.params.gain * (state[:, GOAL] - state[:, HAND])
        noise = np.stack([self.rngs[slot].normal(0.0, self.params.noise, 3) for slot in observations["env_ids"]])
        gripper = np.full((len(state), 1), -1.0)  # -1 opens
        return np.clip(np.concatenate([move + noise, gripper], axis=1), -1.0, 1.0)
