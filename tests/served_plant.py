"""A Gymnasium plugin with a planted difference (``gymnasium/tests.served_plant:AssayTest/Planted-v0``).

A point that moves by a tenth of each action. In a process where ``ASSAY_PLANTED_STEP`` is set (the served
simulator of tests/test_served.py), step number ``ASSAY_PLANTED_STEP`` moves it one part in 10^12 further:
the difference ``assay sim-parity`` must find, and nothing else differs.
"""

import os

import gymnasium as gym
import numpy as np


class PlantedEnv(gym.Env):
    """A 3-D point pushed by actions; success when it reaches (0.5, 0.5, 0.5)."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (3,), np.float64)
    action_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.point = self.np_random.uniform(-1.0, 1.0, 3)
        self.steps = 0
        return self.point.copy(), {}

    def step(self, action):
        self.point = self.point + 0.1 * np.asarray(action, dtype=np.float64)
        if os.environ.get("ASSAY_PLANTED_STEP") == str(self.steps):
            self.point[1] += 1e-12 * max(1.0, abs(self.point[1]))
        self.steps += 1
        distance = float(np.linalg.norm(self.point - 0.5))
        return self.point.copy(), -distance, distance < 0.05, False, {"is_success": distance < 0.05}


if "AssayTest/Planted-v0" not in gym.registry:
    gym.register("AssayTest/Planted-v0", entry_point=PlantedEnv, max_episode_steps=50)
