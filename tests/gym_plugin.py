"""A Gymnasium plugin module, as a campaign names one (``gymnasium/tests.gym_plugin:AssayTest/PushTPixels-v0``).

It registers the real gym-pusht environment with pixel observations: Gymnasium ids carry no keyword
arguments, so a variant of an environment is registered under its own id, the way plugins do.
"""

import gymnasium as gym

if "AssayTest/PushTPixels-v0" not in gym.registry:
    gym.register("AssayTest/PushTPixels-v0", entry_point="gym_pusht.envs:PushTEnv", max_episode_steps=300,
                 kwargs={"obs_type": "pixels_agent_pos"})


class ReachController:
    """FetchReach's textbook controller on Assay's flattened state (achieved_goal, desired_goal, observation)."""

    def reset(self, context) -> None:
        pass

    def act(self, observations):
        import numpy as np

        state = np.asarray(observations["state"])
        actions = np.zeros((len(state), 4))
        actions[:, :3] = np.clip(10.0 * (state[:, 3:6] - state[:, 0:3]), -1.0, 1.0)
        return actions


class StillPolicy:
    """Never moves (a zero action of the task's size)."""

    def reset(self, context) -> None:
        self.dim = context.task.action.dim

    def act(self, observations):
        import numpy as np

        return np.zeros((len(observations["state"]), self.dim))
