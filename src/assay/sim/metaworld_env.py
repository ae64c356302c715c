"""Meta-World v3 backend: the 50 MT1 tasks, with reproducible initial conditions.

Meta-World's ``reset(seed=...)`` does not make an episode reproducible: object
and goal positions come from a task vector that a task-sampling wrapper cycles
through. This backend builds the Sawyer environment once, as MT1's ``gym.make`` sets it
up but without the 50 goals MT1 samples first (:func:`sawyer_env`), then drives it
directly and, at each reset, samples
the task vector from the environment's own reset space with a generator seeded
by the episode seed (Meta-World's ``seeded_rand_vec`` path, including its
rejection loops), then freezes it for the episode.

Its per-layer trace (``layer_trace``, ``sim.mujoco_trace``) is the mocap controller (target, the box holding
it back, tracking error), physics (contacts, penetration, warnings, Meta-World's unstable-simulation flag)
and the time its cameras took to draw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from assay.errors import UnsupportedError
from assay.sim import metaworld_contacts, metaworld_reset
from assay.sim.events import EventTracker
from assay.sim.metaworld_perturb import ModelPerturber, distractor_geoms, view_for
from assay.sim.mujoco_compile import compiled_once
from assay.sim.mujoco_trace import DrawingTrace, MocapTrace, PhysicsTrace
from assay.sim.protocol import LayerValue, Observation, Transition
from assay.sim.render import VIEWS, CameraRenderer, calibration
from assay.spec import NOMINAL, ActionSpec, Level, TaskSpec, Variant
from assay.spec.metaworld_catalog import METAWORLD_TASKS

CONTROL_HZ = 80.0  # timestep 0.0025 s × frame_skip 5
MAX_PATH_LENGTH = 500
INFO_KEYS = ("near_object", "grasp_success", "grasp_reward", "in_place_reward", "obj_to_target", "unscaled_reward")


def sawyer_env(env_name: str) -> Any:
    """The Sawyer environment of ``env_name`` set up as ``gym.make("Meta-World/MT1", env_name, seed=0)`` then
    ``reset(seed=0)`` sets it up (seeded, the task's arguments, goal observable), without the MT1 benchmark's
    50 sampled goals and the second environment that samples them: each reset draws its own task vector
    from the episode seed anyway. A quarter of the build time; episodes are bit-identical
    (``tests/test_sim.py``). Its hand reset and grasp test are Assay's exact faster ones (``metaworld_reset``,
    ``metaworld_contacts``)."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS, ML1_ARGS_KWARGS

    with compiled_once():  # a worker's second environment of a task: its model copied, not compiled again
        env = ALL_V3_ENVIRONMENTS[env_name]()
    env.seed(0)
    arguments = dict(ML1_ARGS_KWARGS[env_name]["kwargs"])
    del arguments["task_id"]
    env._set_task_called = True
    env._partially_observable = False  # MT1's override: the goal is part of the observation
    del env.sawyer_observation_space  # cached for the hidden goal; set_task drops it the same way
    env._set_task_inner(**arguments)
    env._freeze_rand_vec = False
    metaworld_reset.install(env)  # exact: one mj_step call where Meta-World's hand reset loops 50 times
    env.reset(seed=0)
    env._freeze_rand_vec = True
    metaworld_contacts.install(env)
    return env


def seeded_reset(env: Any, seed: int) -> np.ndarray:
    """Reset a Sawyer environment (``sawyer_env``) to the episode of ``seed``: Meta-World's reset ignores a seed
    argument, so the seed seeds the environment's own generator, which draws the task vector (Meta-World's
    ``seeded_rand_vec`` path), frozen for the episode's steps. The first observation. ``MetaWorldEnv.reset`` and the
    benchmarks' hand-written loops reset through it, so they start the same episodes."""
    env.np_random = np.random.default_rng(seed)
    env._freeze_rand_vec = False
    env.seeded_rand_vec = True
    env._did_see_sim_exception = False
    observation, _ = env.reset()
    env._freeze_rand_vec = True  # the same vector for the rest of the episode
    return np.asarray(observation)


def metaworld_task(env_name: str, version: int = 1, horizon: int = MAX_PATH_LENGTH) -> TaskSpec:
    """The TaskSpec of Meta-World v3 environment ``env_name`` (its instruction, skill, family and level from the
    catalogue).
    """
    instruction, skill, family, level = METAWORLD_TASKS[env_name]
    return TaskSpec(
        name=f"metaworld/{env_name.removesuffix('-v3')}",
        version=version,
        backend="metaworld",
        env_name=env_name,
        instructions=(instruction,),
        horizon=horizon,
        control_hz=CONTROL_HZ,
        observations=("state",),
        state_dim=39,
        action=ActionSpec(dim=4, low=-1.0, high=1.0, kind="delta_ee_xyz+gripper"),
        skill=skill,
        family=family,
        level=Level(level),
        tags=("metaworld", "sawyer", family),
    )


class MetaWorldEnv:
    """One Meta-World MT1 environment, reused across episodes.

    Perturbations come with each ``reset(seed, variant)`` and are undone by the next.
    """

    def __init__(self, task: TaskSpec) -> None:
        if task.env_name not in METAWORLD_TASKS:
            raise UnsupportedError(f"{task.id}: {task.env_name!r} is not a Meta-World v3 environment")
        if task.horizon > MAX_PATH_LENGTH:
            raise UnsupportedError(f"{task.id}: horizon {task.horizon} exceeds Meta-World's {MAX_PATH_LENGTH}")
        self.task = task
        self._env: Any = sawyer_env(task.env_name)
        self._perturber = ModelPerturber(self._env)
        self._events = EventTracker(self._env, task.action.high)
        self._renderer = CameraRenderer(self._env.model) if task.cameras else None
        if task.cameras:  # Meta-World's red fingertip markers are debugging aids a real camera would not see
            for name in ("rightEndEffector", "leftEndEffector"):
                self._env.model.site_rgba[self._env.model.site(name).id, 3] = 0.0
        self._calibration = {c.name: calibration(VIEWS[c.name]) for c in task.cameras}
        self._variant: Variant = NOMINAL
        self._rand_vec: np.ndarray | None = None
        self._skip_frames = False
        self._physics = PhysicsTrace(self._env.model, self._env.data)
        self._controller = MocapTrace(self._env)
        self._drawing = DrawingTrace([self._renderer] if self._renderer is not None else [])

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        """Reset under ``variant`` with the task vector drawn from ``seed`` and frozen for the episode; goal markers
        placed.
        """
        env = self._env
        self._variant = variant or NOMINAL
        self._perturber.apply_before_reset(self._variant)
        observation = seeded_reset(env, seed)
        for site in env._target_site_config:  # Meta-World moves its goal markers only in step()
            env._set_pos_site(*site)
        self._rand_vec = np.array(env._last_rand_vec, dtype=np.float64)
        if self._perturber.object_body is None:
            self._perturber.locate_object(np.asarray(observation[4:7]))
        self._perturber.apply_after_reset(self._variant)
        self._events.reset(self._perturber.object_body, np.asarray(observation))
        self._skip_frames = False
        self._physics.reset()
        first = self._observation(observation)
        self._drawing.reset()  # the reset's frames are not the first step's
        return first

    def skip_next_frames(self) -> None:
        """The next step's observation is not rendered (nobody reads its frames)."""
        self._skip_frames = True

    def _observation(self, state: np.ndarray) -> Observation:
        observation = {"state": np.asarray(state, dtype=np.float64)}
        render, self._skip_frames = not self._skip_frames, False
        for camera in self.task.cameras:
            assert self._renderer is not None
            # The calibration a robot would have: the nominal pose, even when a variant moves the camera.
            observation[f"calib.{camera.name}"] = self._calibration[camera.name]
            if not render:
                continue
            rgb, depth, _ = self._renderer.render(self._env.data, view_for(camera.name, self._variant),
                                                  camera.width, camera.height, camera.depth,
                                                  distractor_geoms(self._variant))
            observation[f"image.{camera.name}"] = rgb
            if depth is not None:
                observation[f"depth.{camera.name}"] = depth
        return observation

    def step(self, action: np.ndarray) -> Transition:
        """One step of the Sawyer environment, with its events as ``info`` and success from Meta-World's own flag."""
        observation, reward, terminated, truncated, info = self._env.step(action)
        events = self._events.step(action, np.asarray(observation))  # recorded as info.<event> step columns
        return Transition(
            observation=self._observation(observation),
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            success=bool(info.get("success", 0.0)),
            info={**{key: float(info[key]) for key in INFO_KEYS if key in info}, **events},
        )

    def layer_trace(self, groups: frozenset[str]) -> Mapping[str, LayerValue]:
        """The latest step's controller, physics and drawing fields (``sim.mujoco_trace``)."""
        fields = self._controller.fields(groups)
        self._physics.fill(fields, groups)
        if self._env._did_see_sim_exception:  # Meta-World stopped integrating: the simulation went unstable
            fields["physics.warnings"] = float(fields["physics.warnings"]) + 1.0
        if self._renderer is not None:
            fields.update(self._drawing.fields())
        return fields

    def initial_conditions(self) -> dict[str, Any]:
        """The task vector ``reset`` drew (object and goal positions)."""
        return {"rand_vec": [] if self._rand_vec is None else [float(v) for v in self._rand_vec]}

    @property
    def simulator(self) -> Any:
        """The Sawyer environment (for scripted experts and, later, perturbations)."""
        return self._env

    @property
    def unwrapped(self) -> Any:
        """This environment: the innermost one (Gymnasium's ``unwrapped``); its simulator object is ``simulator``."""
        return self

    def close(self) -> None:
        """Close the renderer and the Sawyer environment."""
        if self._renderer is not None:
            self._renderer.close()
        self._env.close()
