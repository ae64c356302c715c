"""Built-in policies: the scripted expert, uniform random, and a degraded expert.

The degraded expert turns one expert into a population of graded skill (noise,
latency, bias, frozen steps), so a campaign can rank policies whose true order is
known. All randomness is per environment, seeded from the episode seed.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from assay.policies.protocol import PolicyContext
from assay.spec import TaskSpec, derive_seed


class _NoParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ExpertPolicy:
    """The scripted expert for the task: Meta-World's own, or the LIBERO pick-and-place planner (true state in)."""

    Params = _NoParams
    version = "1"

    def __init__(self) -> None:
        self._expert: Any = None
        self._env_name: str | None = None

    @staticmethod
    def supports(task: TaskSpec) -> str | None:
        """Refuse tasks without a scripted expert (Meta-World and LIBERO have one), saying why."""
        if task.backend == "libero":
            from assay.policies.libero_expert import libero_expert_support

            return libero_expert_support(task)
        if task.backend == "robosuite":
            from assay.policies.robosuite_expert import robosuite_expert_support

            return robosuite_expert_support(task)
        if task.backend == "metaworld":
            return None
        return "the scripted expert exists for Meta-World, LIBERO and robosuite's Lift only"

    def reset(self, context: PolicyContext) -> None:
        """Pick the task's expert (Meta-World's per environment, or the LIBERO planner) and reset it."""
        if context.task.backend == "libero":
            from assay.policies.libero_expert import LiberoExpert

            if not isinstance(self._expert, LiberoExpert):
                self._expert = LiberoExpert()
            self._env_name = None
            self._expert.reset(context)
            return
        if context.task.backend == "robosuite":
            from assay.policies.robosuite_expert import RobosuiteExpert

            self._expert, self._env_name = RobosuiteExpert(), None
            self._expert.reset(context)
            return
        if context.task.env_name != self._env_name:
            from metaworld.policies import ENV_POLICY_MAP

            # The experts' gains are deliberately high; the environment clips actions to [-1, 1].
            warnings.filterwarnings("ignore", message=r"Constant\(s\) may be too high", category=UserWarning)
            self._expert = ENV_POLICY_MAP[context.task.env_name]()
            self._env_name = context.task.env_name

    def reads_frames(self) -> bool:
        """No camera frame is read (the runner renders none for it)."""
        return False

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """The expert's action for every row."""
        if hasattr(self._expert, "act"):
            return np.asarray(self._expert.act(observations))
        # np.array stacks the rows as np.stack does, without its wrapper (a quarter of its cost at two rows)
        return np.array([self._expert.get_action(state) for state in observations["state"]])


class RandomPolicy:
    """Uniform actions in the task's action box, one generator per environment."""

    Params = _NoParams
    version = "1"

    def __init__(self) -> None:
        self._rngs: list[np.random.Generator] = []
        self._low = self._high = 0.0
        self._dim = 0

    @staticmethod
    def supports(task: TaskSpec) -> str | None:
        """Accept every task: the action box is the task's own."""
        return None

    def reset(self, context: PolicyContext) -> None:
        """One generator per slot, seeded from its episode seed."""
        self._rngs = [np.random.default_rng(derive_seed("random-policy", s)) for s in context.seeds]
        self._low, self._high, self._dim = context.task.action.low, context.task.action.high, context.task.action.dim

    def reads_frames(self) -> bool:
        """No camera frame is read (the runner renders none for it)."""
        return False

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """A uniform draw from the action box for every row."""
        return np.stack([self._rngs[i].uniform(self._low, self._high, self._dim) for i in observations["env_ids"]])


class DegradedParams(BaseModel):
    """The ``degraded-expert`` policy's params: noise, delay, bias and freezes added to the expert's actions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action_noise: float = Field(default=0.0, ge=0.0, description="std of Gaussian noise added to each action")
    action_delay: int = Field(default=0, ge=0, le=100, description="actions are applied this many steps late")
    bias: float = Field(default=0.0, ge=-1.0, le=1.0, description="constant offset added to every action dimension")
    freeze_prob: float = Field(default=0.0, ge=0.0, le=1.0, description="probability of repeating the last action")


class DegradedExpertPolicy:
    """The expert, made worse in controlled, reproducible ways."""

    Params = DegradedParams
    version = "1"

    def __init__(self, **params: Any) -> None:
        self.params = DegradedParams(**params)
        self._expert = ExpertPolicy()
        self._rngs: list[np.random.Generator] = []
        self._queues: list[deque[np.ndarray]] = []
        self._last: list[np.ndarray] = []
        self._task: TaskSpec | None = None

    supports = staticmethod(ExpertPolicy.supports)

    def reset(self, context: PolicyContext) -> None:
        """Reset the expert, and each slot's generator, delay queue and last action."""
        self._expert.reset(context)
        self._task = context.task
        dim = context.task.action.dim
        self._rngs = [np.random.default_rng(derive_seed("degraded-expert", s)) for s in context.seeds]
        self._queues = [deque([np.zeros(dim)] * self.params.action_delay) for _ in context.seeds]
        self._last = [np.zeros(dim) for _ in context.seeds]

    def reads_frames(self) -> bool:
        """No camera frame is read (the runner renders none for it)."""
        return False

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """The expert's actions, degraded per slot as the params say, clipped to the action box."""
        assert self._task is not None, "reset() before act()"
        clean = self._expert.act(observations)
        p, low, high = self.params, self._task.action.low, self._task.action.high
        actions = []
        for row, slot in enumerate(observations["env_ids"]):
            rng, queue = self._rngs[slot], self._queues[slot]
            queue.append(np.asarray(clean[row], dtype=np.float64))
            action = queue.popleft() + p.bias + rng.normal(0.0, p.action_noise, clean.shape[1])
            # Draw every random number every step so one knob never shifts another's stream.
            if rng.random() < p.freeze_prob:
                action = self._last[slot]
            action = np.clip(action, low, high)
            self._last[slot] = action
            actions.append(action)
        return np.stack(actions)

