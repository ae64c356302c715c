"""Fakes to build tests on: a simulator made of functions and policies that answer constants.

``FunctionEnv`` (after Gymnasium's ``GenericTestEnv``) runs the episode loop
without a simulator: its state is the seed, and ``step_fn(seed, t, action)``
decides each transition. ``ConstantPolicy`` and ``ConstantChunkPolicy`` answer
the same action for every row, as ``(B, A)`` and ``(B, H, A)``. ``ImageChunkPolicy``
reads a camera at every request and answers a chunk that depends on every pixel
(the mean colour of each image quadrant), so a changed frame changes its actions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from assay.annotations import developer_api
from assay.policies.protocol import ENV_IDS, PolicyContext
from assay.sim.protocol import Observation, Transition
from assay.spec import ActionSpec, SuccessMode, TaskSpec, Variant

StepFn = Callable[[int, int, np.ndarray], Transition]


@developer_api
def fake_task(horizon: int = 10, success: SuccessMode = SuccessMode.ANY_STEP, action_dim: int = 1) -> TaskSpec:
    """A one-dimensional task for :class:`FunctionEnv` (state: the seed)."""
    return TaskSpec(name="fake/counter", version=1, backend="gymnasium", env_name="Fake-v0", instructions=("count",),
                    horizon=horizon, control_hz=10.0, state_dim=1, action=ActionSpec(dim=action_dim), success=success)


@developer_api
def running(seed: int, t: int, action: np.ndarray) -> Transition:
    """A step function whose episodes never end on their own (the horizon ends them)."""
    return Transition({"state": np.array([float(seed + t)])}, 0.0, False, False, False)


@developer_api
class FunctionEnv:
    """A SimEnv made of functions: the runner without a simulator."""

    def __init__(self, task: TaskSpec, step_fn: StepFn = running) -> None:
        self.task = task
        self.step_fn = step_fn
        self.seed = -1
        self.t = 0

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        """Start an episode: the state is ``seed`` in every dimension."""
        self.seed, self.t = seed, 0
        return {"state": np.array([float(seed)] * self.task.state_dim)}

    def step(self, action: np.ndarray) -> Transition:
        """Advance one step through ``step_fn(seed, t, action)``."""
        self.t += 1
        return self.step_fn(self.seed, self.t, action)

    def initial_conditions(self) -> dict[str, Any]:
        """The episode's initial conditions: its seed."""
        return {"seed": self.seed}

    def close(self) -> None:
        """Nothing to release."""
        pass


@developer_api
class ConstantPolicy:
    """Answers ``value`` in every action dimension of every row: ``(B, dim)``."""

    def __init__(self, value: float = 0.5, dim: int = 1) -> None:
        self.value, self.dim = value, dim

    def reset(self, context: PolicyContext) -> None:
        """Keep the context (seeds, task) for inspection."""
        self.context = context

    def reads_frames(self) -> bool:
        """No camera frame is read (the runner renders none for it)."""
        return False

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """The constant action for every row: ``(B, dim)``."""
        return np.full((len(observations[ENV_IDS]), self.dim), self.value)


@developer_api
class ConstantChunkPolicy(ConstantPolicy):
    """Answers a chunk of ``horizon`` constant actions per row: ``(B, horizon, dim)``."""

    def __init__(self, value: float = 0.5, dim: int = 1, horizon: int = 4) -> None:
        super().__init__(value, dim)
        self.horizon = horizon

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """The constant chunk for every row: ``(B, horizon, dim)``."""
        return np.full((len(observations[ENV_IDS]), self.horizon, self.dim), self.value)


@developer_api
class ImageChunkPolicy:
    """A camera policy answering chunks ``(B, horizon, dim)``: a fixed random linear map of the mean
    colour of each quadrant of ``image.<camera>`` (and of the state), squashed into [-scale, scale].

    Keyword arguments come from a campaign's ``params`` (``entrypoint: assay.testing.fakes:ImageChunkPolicy``).
    """

    def __init__(self, camera: str = "front", horizon: int = 5, dim: int = 4, scale: float = 0.5) -> None:
        self.camera, self.horizon, self.dim, self.scale = camera, horizon, dim, scale
        rng = np.random.default_rng(0)
        self._weights = rng.normal(0.0, 1.0, (horizon * dim, 12)) / 40.0
        self._bias = rng.normal(0.0, 0.3, horizon * dim)
        self.requests = 0

    def reset(self, context: PolicyContext) -> None:
        """Keep the context (seeds, task) for inspection."""
        self.context = context

    def features(self, frames: np.ndarray) -> np.ndarray:
        """Mean colour (0-255) of the four quadrants of each frame: (B, 12)."""
        half_h, half_w = frames.shape[1] // 2, frames.shape[2] // 2
        quadrants = [frames[:, :half_h, :half_w], frames[:, :half_h, half_w:],
                     frames[:, half_h:, :half_w], frames[:, half_h:, half_w:]]
        return np.concatenate([q.reshape(len(frames), -1, 3).mean(axis=1) for q in quadrants], axis=1)

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """One chunk per row from the camera's quadrant colours; a KeyError names the missing ``image.<camera>``."""
        key = f"image.{self.camera}"
        if key not in observations:
            raise KeyError(f"ImageChunkPolicy reads {key!r}; the observation has {sorted(observations)}")
        self.requests += 1
        frames = np.asarray(observations[key], dtype=np.float64)
        out = np.tanh((self.features(frames) - 128.0) @ self._weights.T + self._bias) * self.scale
        return out.reshape(len(frames), self.horizon, self.dim)
