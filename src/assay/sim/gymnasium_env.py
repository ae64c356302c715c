"""Any Gymnasium environment with a Box action space, as task ``gymnasium/<ID>@1``.

Gymnasium's own ``reset(seed=...)`` is reproducible, fresh or reused, so this
backend passes the episode seed straight through. Success is read from
``info['success']`` or ``info['is_success']`` when the environment reports one;
otherwise the task's success mode is ``none`` and only the return is scored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from assay.errors import UnknownTaskError, UnsupportedError
from assay.sim.protocol import Observation, Transition
from assay.spec import ActionSpec, SuccessMode, TaskSpec, Variant


def _make(env_id: str) -> Any:
    import gymnasium as gym

    try:
        return gym.make(env_id, disable_env_checker=True)
    except gym.error.Error as exc:
        raise UnknownTaskError(f"gymnasium/{env_id}: gymnasium cannot make it: {exc}") from None
    except ImportError as exc:
        raise UnsupportedError(f"gymnasium/{env_id}: a dependency is missing: {exc}") from None


def gymnasium_task(env_id: str, version: int = 1) -> TaskSpec:
    """Describe a Gymnasium id as a TaskSpec (builds the environment once to read its spaces)."""
    import gymnasium as gym

    env = _make(env_id)
    try:
        space = env.action_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise UnsupportedError(f"gymnasium/{env_id}: action space {space} is not a 1-D Box")
        observation = gym.spaces.flatten_space(env.observation_space)
        dt = getattr(env.unwrapped, "dt", None)
        fps = env.metadata.get("render_fps")
        control_hz = 1.0 / dt if dt else float(fps or 50.0)
        horizon = env.spec.max_episode_steps if env.spec and env.spec.max_episode_steps else 1000
        return TaskSpec(
            name=f"gymnasium/{env_id}",
            version=version,
            backend="gymnasium",
            env_name=env_id,
            instructions=(f"solve {env_id}",),
            horizon=int(horizon),
            control_hz=float(control_hz),
            state_dim=int(observation.shape[0]),
            action=ActionSpec(dim=int(space.shape[0]), low=float(np.min(space.low)), high=float(np.max(space.high)), kind="box"),
            success=SuccessMode.NONE,
            skill="control",
            family="gymnasium",
            tags=("gymnasium",),
        )
    finally:
        env.close()


class GymnasiumEnv:
    def __init__(self, task: TaskSpec) -> None:
        import gymnasium as gym

        if task.cameras:
            raise UnsupportedError(f"{task.id}: cameras are available for Meta-World tasks only")
        self.task = task
        self._env = _make(task.env_name)
        self._flatten = lambda obs: np.asarray(gym.spaces.flatten(self._env.observation_space, obs), dtype=np.float64)
        self._seed: int | None = None

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        # Only backend-independent factors (applied by PerturbedEnv) reach this backend.
        observation, _ = self._env.reset(seed=seed)
        self._seed = seed
        return {"state": self._flatten(observation)}

    def step(self, action: np.ndarray) -> Transition:
        observation, reward, terminated, truncated, info = self._env.step(action)
        success = bool(info.get("success", info.get("is_success", False)))
        scalars = {k: float(v) for k, v in info.items() if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)}
        return Transition({"state": self._flatten(observation)}, float(reward), bool(terminated), bool(truncated), success, scalars)

    def initial_conditions(self) -> dict[str, Any]:
        return {"gymnasium_seed": self._seed}

    def close(self) -> None:
        self._env.close()
