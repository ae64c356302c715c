"""The online safety filter on actions: a SimEnv wrapper, on when a campaign says ``safety: true``.

A non-finite action becomes a zero action (``nan``), components outside the
action box are clipped (``limit``), and a translation that would take the hand
(obs[0:3]) out of the workspace box is zeroed on that axis (``workspace``). The
workspace is the environment's own hand box where it has one (Meta-World's
per-task ``mocap_low``/``mocap_high``; the hand never reaches the generic
Sawyer box, so a check against it never fired) less ``MARGIN_M``, and the test
is on where the step would put the hand (hand + action x ``action_scale``), not
where it is. Each
step's interventions are added to the step's ``info`` as ``safety.<kind>`` (1.0
when it intervened), so they are recorded per step and counted per episode by
summing the column; ``counts`` holds the running totals of the current episode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from assay.sim.protocol import Observation, SimEnv, SupportsSimulator, Transition
from assay.sim.wrapper import SimEnvWrapper
from assay.spec import Variant

WORKSPACE = (np.array([-0.525, 0.348, 0.05]), np.array([0.525, 1.025, 0.7]))  # Sawyer hand box (Meta-World mocap)
MARGIN_M = 0.005  # inside the box by this much: a hand pressed against the limit is stopped before it


def _sawyer(env: SimEnv) -> Any:
    """The innermost environment's Sawyer (Meta-World's ``simulator``), through wrappers; None if there is none."""
    simulator = env.simulator if isinstance(env, SupportsSimulator) else None
    return simulator if hasattr(simulator, "mocap_low") else None


class SafetyFilter(SimEnvWrapper):
    """A :class:`SimEnv` whose actions are made finite, clipped to the action box and kept in the workspace."""

    def __init__(self, env: SimEnv, workspace: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        super().__init__(env)
        sawyer = _sawyer(env)
        self.scale = float(getattr(sawyer, "action_scale", 0.0)) if sawyer is not None else 0.0
        if workspace is None and sawyer is not None:
            workspace = (np.asarray(sawyer.mocap_low, dtype=np.float64) + MARGIN_M,
                         np.asarray(sawyer.mocap_high, dtype=np.float64) - MARGIN_M)
        self.low, self.high = workspace if workspace is not None else WORKSPACE
        self._state: np.ndarray | None = None
        self.counts = {"nan": 0, "limit": 0, "workspace": 0}
        self._hit: dict[str, float] = {}  # the latest step's interventions (after_step writes them into info)

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        """Reset the wrapped environment and this episode's intervention counts."""
        observation = self.env.reset(seed, variant)
        self._state = observation["state"]
        self.counts = {k: 0 for k in self.counts}
        return observation

    def filter(self, action: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        """The safe action for the current state, and which interventions (1.0) it took to make it."""
        action = np.asarray(action, dtype=np.float64).copy()
        hit = {"nan": 0.0, "limit": 0.0, "workspace": 0.0}
        if not np.all(np.isfinite(action)):
            action = np.zeros_like(action)
            hit["nan"] = 1.0
        clipped = np.clip(action, self.task.action.low, self.task.action.high)
        if not np.array_equal(clipped, action):
            hit["limit"] = 1.0
        action = clipped
        if self._state is not None:
            hand = self._state[0:3] + self.scale * action[:3]  # where this step would put it
            outward = ((hand <= self.low) & (action[:3] < 0)) | ((hand >= self.high) & (action[:3] > 0))
            if outward.any():
                action[:3][outward] = 0.0
                hit["workspace"] = 1.0
        return action, hit

    def before_step(self, action: np.ndarray) -> np.ndarray:
        """The filtered action (the step is ``after_step(env.step(before_step(action)))``)."""
        safe, self._hit = self.filter(action)
        for kind, value in self._hit.items():
            self.counts[kind] += int(value)
        return safe

    def after_step(self, transition: Transition) -> Transition:
        """The step's interventions go into ``info`` as ``safety.<kind>``."""
        self._state = transition.observation["state"]
        info = {**transition.info, **{f"safety.{k}": v for k, v in self._hit.items()}}
        return Transition(transition.observation, transition.reward, transition.terminated, transition.truncated,
                          transition.success, info)
