"""Any Gymnasium environment with a Box action space, as task ``gymnasium/<ID>@1``.

* **Ids**: a plain id (``gymnasium/Pusher-v5``), a namespaced one (``gymnasium/gym_pusht/PushT-v0``: an
  unregistered namespace is imported as the plugin module of that name, as gym-pusht and gym-aloha name
  theirs), or an explicit plugin import ``module:ID`` (``gymnasium/gymnasium_robotics:FetchReach-v4``),
  Gymnasium's own syntax, for packages whose ids carry no namespace.
* **Success**: when the environment reports ``info['is_success']`` or ``info['success']`` (probed on one
  reset and one step when the task is described), the task says so (``success: any_step``) and the first
  step that reports it ends the episode as a success; otherwise ``success: none`` and only the return is scored.
* **Observations**: a Dict observation (nested or not) is split by leaf: every ``uint8`` Box of shape
  ``(H, W, 3)`` is a camera (``image.<path>``, recorded as video like a Meta-World camera), every other leaf is
  flattened, in order, into ``state``. An environment that observes images only gets a 1-D ``state`` of 0.0
  (a task always has a state).

Gymnasium's own ``reset(seed=...)`` is reproducible, fresh or reused, so this backend passes the episode seed
straight through.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from typing import Any

import numpy as np

from assay.errors import UnknownTaskError, UnsupportedError
from assay.sim.protocol import Observation, Transition
from assay.spec import ActionSpec, CameraSpec, SuccessMode, TaskSpec, Variant

SUCCESS_KEYS = ("is_success", "success")
Leaf = tuple[tuple[str, ...], Any]  # (path in the Dict observation, its space)


def _import_plugin(env_id: str) -> str:
    """Import the module that registers ``env_id`` where one is named or implied; return the id to make."""
    import gymnasium as gym

    module, colon, bare = env_id.rpartition(":")
    if colon:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UnsupportedError(f"gymnasium/{env_id}: cannot import the plugin module {module!r} ({exc}); "
                                   "install the package that registers it") from None
        return bare
    namespace, slash, _ = env_id.rpartition("/")
    registered = {spec.namespace for spec in gym.registry.values()}
    if slash and namespace not in registered and importlib.util.find_spec(namespace) is not None:
        importlib.import_module(namespace)
    return env_id


def _make(env_id: str) -> Any:
    import gymnasium as gym

    try:
        return gym.make(_import_plugin(env_id), disable_env_checker=True)
    except gym.error.Error as exc:
        raise UnknownTaskError(f"gymnasium/{env_id}: gymnasium cannot make it: {exc}") from None
    except ImportError as exc:
        raise UnsupportedError(f"gymnasium/{env_id}: a dependency is missing: {exc}") from None


def _leaves(space: Any, path: tuple[str, ...] = ()) -> list[Leaf]:
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in _leaves(sub, (*path, str(key)))]
    return [(path, space)]


def _is_image(space: Any) -> bool:
    import gymnasium as gym

    box = isinstance(space, gym.spaces.Box) and space.dtype == np.uint8
    return box and len(space.shape) == 3 and space.shape[2] == 3


def camera_name(path: tuple[str, ...]) -> str:
    """An image leaf's camera name: its path, lower case, ``_``-joined (``pixels/top`` -> ``pixels_top``)."""
    name = re.sub(r"[^a-z0-9_]+", "_", "_".join(path).lower()).strip("_") or "image"
    return name if name[0].isalpha() else f"cam_{name}"


class _Layout:
    """Which observation leaves are cameras and which are flattened into the state."""

    def __init__(self, observation_space: Any) -> None:
        import gymnasium as gym

        leaves = _leaves(observation_space)
        self.images = [(path, camera_name(path)) for path, space in leaves if path and _is_image(space)]
        self.state = [(path, space) for path, space in leaves if not (path and _is_image(space))]
        self.state_dim = sum(int(gym.spaces.flatdim(space)) for _, space in self.state) or 1
        shapes = {camera_name(path): space.shape for path, space in leaves if path and _is_image(space)}
        self.cameras = tuple(CameraSpec(name=name, height=shapes[name][0], width=shapes[name][1])
                             for _, name in self.images)

    def split(self, observation: Any) -> Observation:
        import gymnasium as gym

        parts = [np.asarray(gym.spaces.flatten(space, _get(observation, path)), dtype=np.float64)
                 for path, space in self.state]
        result: Observation = {"state": np.concatenate(parts) if parts else np.zeros(1)}
        for path, name in self.images:
            result[f"image.{name}"] = np.asarray(_get(observation, path), dtype=np.uint8)
        return result


def _get(observation: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        observation = observation[key]
    return observation


def _reports_success(env: Any) -> bool:
    """Whether the environment's info carries a success flag, after one seeded reset and one mid-range step."""
    _, info = env.reset(seed=0)
    space = env.action_space
    middle = np.clip(np.zeros(space.shape), space.low, space.high).astype(space.dtype)
    *_, step_info = env.step(middle)
    return any(key in info or key in step_info for key in SUCCESS_KEYS)


def gymnasium_task(env_id: str, version: int = 1) -> TaskSpec:
    """Describe a Gymnasium id as a TaskSpec (builds the environment once to read its spaces and success flag)."""
    import gymnasium as gym

    env = _make(env_id)
    try:
        space = env.action_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise UnsupportedError(f"gymnasium/{env_id}: action space {space} is not a 1-D Box")
        try:
            layout = _Layout(env.observation_space)
        except ValueError as exc:  # an image leaf of an odd size (videos need even sizes)
            raise UnsupportedError(f"gymnasium/{env_id}: an image observation cannot be a camera: {exc}") from None
        # gym-pusht's dt is its physics step (10 per control step); it names its control rate control_hz.
        dt = getattr(env.unwrapped, "dt", None)
        fps = env.metadata.get("render_fps")
        control_hz = getattr(env.unwrapped, "control_hz", None) or (1.0 / dt if dt else float(fps or 50.0))
        horizon = env.spec.max_episode_steps if env.spec and env.spec.max_episode_steps else 1000
        return TaskSpec(
            name=f"gymnasium/{env_id}",
            version=version,
            backend="gymnasium",
            env_name=env_id,
            instructions=(f"solve {env_id.rpartition(':')[2]}",),
            horizon=int(horizon),
            control_hz=float(control_hz),
            observations=("state", *(f"image.{c.name}" for c in layout.cameras)),
            cameras=layout.cameras,
            state_dim=layout.state_dim,
            action=ActionSpec(dim=int(space.shape[0]), low=float(np.min(space.low)), high=float(np.max(space.high)),
                              kind="box"),
            success=SuccessMode.ANY_STEP if _reports_success(env) else SuccessMode.NONE,
            skill="control",
            family="gymnasium",
            tags=("gymnasium",),
        )
    finally:
        env.close()


class GymnasiumEnv:
    """A Gymnasium Box-action environment as a :class:`SimEnv`: Dict and image observations split into state and
    cameras.
    """

    def __init__(self, task: TaskSpec) -> None:
        self.task = task
        self._env = _make(task.env_name)
        self._layout = _Layout(self._env.observation_space)
        if tuple(task.cameras) != self._layout.cameras:
            have = ", ".join(c.name for c in self._layout.cameras) or "none"
            raise UnsupportedError(f"{task.id}: a Gymnasium task's cameras are its image observations ({have}); "
                                   "campaign cameras are for Meta-World tasks only")
        self._seed: int | None = None

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        """Reset with ``seed``; only backend-independent factors (applied by ``PerturbedEnv``) reach this backend."""
        # Only backend-independent factors (applied by PerturbedEnv) reach this backend.
        observation, _ = self._env.reset(seed=seed)
        self._seed = seed
        return self._layout.split(observation)

    def step(self, action: np.ndarray) -> Transition:
        """One step; success is the first of ``SUCCESS_KEYS`` in ``info``, and numeric ``info`` entries are recorded."""
        observation, reward, terminated, truncated, info = self._env.step(action)
        flag = next((info[key] for key in SUCCESS_KEYS if key in info), False)
        scalars = {k: float(v) for k, v in info.items()
                   if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)}
        return Transition(self._layout.split(observation), float(reward), bool(terminated), bool(truncated),
                          bool(flag), scalars)

    def initial_conditions(self) -> dict[str, Any]:
        """The seed ``reset`` passed to Gymnasium (its initial conditions derive from it alone)."""
        return {"gymnasium_seed": self._seed}

    def close(self) -> None:
        """Close the Gymnasium environment."""
        self._env.close()
