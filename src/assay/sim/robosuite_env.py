"""robosuite 1.5 backend: Lift, Stack, NutAssemblySquare, Door and PickPlaceCan on a Panda arm.

It runs only in robosuite 1.5's own environment (``assay env create robosuite``, from
``requirements/robosuite.lock``: robosuite 1.5.2 with MuJoCo 3.3.2; MuJoCo 4 breaks it in
``get_joint_qpos_addr``), behind ``assay serve-sim robosuite``: robosuite 1.5 conflicts with LIBERO's
robosuite 1.4, so a campaign's own environment never imports it. Anywhere else, building an environment is
refused in one line naming those commands.

* **Seeds**: the environment is built once (``hard_reset=False``: a reset re-samples the scene in the same
  model); each reset first puts robosuite's generator (shared with its placement samplers and the robot's
  initial-joint noise) in the state ``default_rng(seed)`` starts in, so a seed is one initial scene.
* **Observations**: ``state`` is the end-effector position and quaternion and the finger joints (9 numbers);
  ``environment_state`` (and ``privileged.goal``, for scripted policies) the task's object position; cameras
  are robosuite's own offscreen renderer's, flipped to image convention (row 0 at the top).
* **Actions**: robosuite's default Panda controller (OSC_POSE: delta position and orientation in [-1, 1],
  then the gripper, +1 closes). Success is robosuite's own ``_check_success``; the reward its dense reward.
* **Factors**: ``light.intensity`` (visual: every light's diffuse and specular scaled) and ``friction``
  (behavioral: every geom's sliding friction scaled), restored to nominal before each reset's own; the
  backend-independent ones (action and observation noise, latency) apply on the campaign's side.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import numpy as np

from assay.errors import UnsupportedError
from assay.sim.factors import value_of
from assay.sim.protocol import Observation, Transition
from assay.spec import NOMINAL, ActionSpec, CameraSpec, Level, TaskSpec, Variant
from assay.spec.robosuite_catalog import (
    ROBOSUITE_CAMERAS,
    ROBOSUITE_CONTROL_HZ,
    ROBOSUITE_STATE_DIM,
    ROBOSUITE_TASKS,
)

REQUIRED = {"robosuite": "1.5.2", "mujoco": "3.3.2"}
_SAVED = ("light_diffuse", "light_specular", "geom_friction")


def robosuite_task(env_name: str, version: int = 1) -> TaskSpec:
    """The TaskSpec of robosuite 1.5 task ``env_name`` (its catalogue row)."""
    instruction, skill, family, level, horizon, _ = ROBOSUITE_TASKS[env_name]
    slug = "".join(f"-{c.lower()}" if c.isupper() else c for c in env_name).strip("-")
    return TaskSpec(name=f"robosuite/{slug}", version=version, backend="robosuite", env_name=env_name,
                    instructions=(instruction,), horizon=horizon, control_hz=ROBOSUITE_CONTROL_HZ,
                    observations=("state",), state_dim=ROBOSUITE_STATE_DIM,
                    action=ActionSpec(dim=7, low=-1.0, high=1.0, kind="delta_ee_pose+gripper"),
                    skill=skill, family=family, level=Level(level), tags=("robosuite", "panda", family))


def robosuite_tasks() -> list[TaskSpec]:
    """Every robosuite 1.5 task of the catalogue."""
    return [robosuite_task(name) for name in ROBOSUITE_TASKS]


def _refuse_elsewhere(task: TaskSpec) -> None:
    """Refuse, in one line naming the fix, an environment without robosuite 1.5.2 and MuJoCo 3.3.2."""
    found = {}
    for package in REQUIRED:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "absent"
    if found != REQUIRED:
        have = ", ".join(f"{p} {v}" for p, v in found.items())
        raise UnsupportedError(f"{task.id} runs only on a served simulator in robosuite 1.5's own environment (here: "
                               f"{have}): `assay env create robosuite`, `assay serve-sim robosuite`, then "
                               "`simulators: {robosuite: ws://HOST:PORT}` in the campaign")


class RobosuiteEnv:
    """One robosuite 1.5 environment, built once and reset per seed."""

    def __init__(self, task: TaskSpec) -> None:
        _refuse_elsewhere(task)
        if task.env_name not in ROBOSUITE_TASKS:
            raise UnsupportedError(f"{task.id}: {task.env_name!r} is not a robosuite task; valid: "
                                   f"{', '.join(ROBOSUITE_TASKS)}")
        import robosuite

        self.task = task
        cameras = [camera.name for camera in task.cameras]
        unknown = sorted(set(cameras) - set(ROBOSUITE_CAMERAS))
        if unknown:
            raise UnsupportedError(f"{task.id}: unknown camera {', '.join(unknown)}; valid: "
                                   f"{', '.join(ROBOSUITE_CAMERAS)}")
        size = task.cameras[0] if task.cameras else CameraSpec(name="agentview")
        self._env: Any = robosuite.make(
            task.env_name, robots="Panda", has_renderer=False, has_offscreen_renderer=bool(cameras),
            use_camera_obs=bool(cameras), camera_names=cameras or "agentview", camera_heights=size.height,
            camera_widths=size.width, control_freq=int(ROBOSUITE_CONTROL_HZ), horizon=task.horizon + 1,
            hard_reset=False, ignore_done=True, reward_shaping=True, seed=0)
        self._object = ROBOSUITE_TASKS[task.env_name][5]
        model = self._env.sim.model._model
        self._nominal = {name: getattr(model, name).copy() for name in _SAVED}
        self._initial: dict[str, Any] = {}

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        """A scene drawn from ``seed`` under ``variant``'s light and friction."""
        env = self._env
        env.rng.bit_generator.state = np.random.default_rng(seed).bit_generator.state
        self._apply(variant or NOMINAL)
        raw = env.reset()
        self._initial = {"object": [float(v) for v in raw[self._object]],
                         "eef": [float(v) for v in raw["robot0_eef_pos"]]}
        return self._observation(raw)

    def _apply(self, variant: Variant) -> None:
        model = self._env.sim.model._model
        for name, values in self._nominal.items():
            getattr(model, name)[:] = values
        intensity = float(value_of(variant, "light.intensity"))
        model.light_diffuse[:] = self._nominal["light_diffuse"] * intensity
        model.light_specular[:] = self._nominal["light_specular"] * intensity
        model.geom_friction[:, 0] = self._nominal["geom_friction"][:, 0] * float(value_of(variant, "friction"))

    def _observation(self, raw: dict[str, Any]) -> Observation:
        state = np.concatenate([raw["robot0_eef_pos"], raw["robot0_eef_quat"], raw["robot0_gripper_qpos"]])
        goal = np.asarray(raw[self._object], dtype=np.float64)
        observation: Observation = {"state": state.astype(np.float64), "environment_state": goal,
                                    "privileged.goal": goal.copy()}
        for camera in self.task.cameras:
            observation[f"image.{camera.name}"] = np.ascontiguousarray(raw[f"{camera.name}_image"][::-1])
        return observation

    def step(self, action: np.ndarray) -> Transition:
        """One control step (robosuite's controller at 20 Hz); success from robosuite's own check."""
        raw, reward, _, _ = self._env.step(np.asarray(action, dtype=np.float64))
        success = bool(self._env._check_success())
        return Transition(self._observation(raw), float(reward), False, False, success, {})

    def initial_conditions(self) -> dict[str, Any]:
        """The object's and the hand's initial positions."""
        return dict(self._initial)

    @property
    def simulator(self) -> Any:
        """robosuite's environment."""
        return self._env

    @property
    def unwrapped(self) -> Any:
        """This environment: the innermost one (Gymnasium's ``unwrapped``); its simulator object is ``simulator``."""
        return self

    def close(self) -> None:
        """Close robosuite's environment (and its renderer)."""
        self._env.close()
