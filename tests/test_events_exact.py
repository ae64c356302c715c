"""The per-step event tracker's fast path gives exactly what its plain reading gives, step for step.

``EventTracker`` runs on every Meta-World step, so it reads MuJoCo's arrays in bulk (the contacts' geom pairs at
once, the scene joints by index arrays, the joint limits with their tolerance applied once). ``_Plain`` below is
the straightforward reading it replaced: one contact struct at a time, one joint at a time, the tolerance applied
each step, NumPy's ``norm`` and ``sum``. Both run on the same MuJoCo state of real episodes (the scripted expert,
and random actions pressing the hand into the table, for robot-scene contact forces) on tasks with a free
object, a slide, hinges and a button; every event of every step must be bit-identical (NaN where both are NaN).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from assay.sim import default_registry, make_env
from assay.sim.events import COLLISION_N, JOINT_LIMIT_TOL, LIFT_M, SATURATION, EventTracker

pytestmark = [pytest.mark.sim, pytest.mark.filterwarnings("ignore:Constant\\(s\\) may be too high")]


class _Plain(EventTracker):
    """The tracker's readings as first written: per contact, per joint, the tolerance each step, NumPy's own
    ``norm`` and ``sum``, and a step of its own on NumPy arrays throughout."""

    def __init__(self, env: object, action_bound: float = 1.0) -> None:
        super().__init__(env, action_bound)
        self.bound = action_bound
        self._qpos0 = np.zeros(len(self._scene_joints) * 3)

    def reset(self, object_body: int | None, state: np.ndarray) -> None:
        super().reset(object_body, state)
        self._qpos0 = self._joint_values()

    def _joint_values(self) -> np.ndarray:
        qpos = self.env.data.qpos
        out = np.zeros(len(self._scene_joints) * 3)
        for i, (adr, kind, _) in enumerate(self._scene_joints):
            out[3 * i: 3 * i + (3 if kind == 0 else 1)] = qpos[adr: adr + (3 if kind == 0 else 1)]
        return out

    def _moved(self) -> float:
        if not self._scene_joints:
            return float("nan")
        delta = (self._joint_values() - self._qpos0).reshape(-1, 3)
        return float(np.linalg.norm(delta, axis=1).max())

    def _contacts(self) -> tuple[bool, bool, float]:
        import mujoco

        model, data = self.env.model, self.env.data
        left = right = False
        force = 0.0
        wrench = np.zeros(6)
        for i in range(data.ncon):
            contact = data.contact[i]
            a, b = int(model.geom_bodyid[contact.geom1]), int(model.geom_bodyid[contact.geom2])
            if a in self._object or b in self._object:
                other = b if a in self._object else a
                left |= other in self._left
                right |= other in self._right
                continue
            if (a in self._robot) != (b in self._robot):
                mujoco.mj_contactForce(model, data, i, wrench)
                force = max(force, abs(float(wrench[0])))
        return left, right, force

    def _at_limit(self) -> int:
        qpos = self.env.data.qpos[self._joint_qpos]
        low, high = self._joint_range[:, 0], self._joint_range[:, 1]
        return int(np.count_nonzero((qpos <= low + JOINT_LIMIT_TOL) | (qpos >= high - JOINT_LIMIT_TOL)))

    def _finite(self, state: np.ndarray) -> bool:
        data = self.env.data
        return math.isfinite(float(data.qpos.sum()) + float(data.qvel.sum()) + float(np.sum(state)))

    def _warning_count(self) -> int:
        return int(sum(int(w.number) for w in self.env.data.warning))

    def _object_pos(self, state: np.ndarray) -> np.ndarray:
        if self._root is None or self._from_state:
            return np.asarray(state[4:7], dtype=np.float64)
        return self.env.data.xpos[self._root].copy()

    def step(self, action: np.ndarray, state: np.ndarray) -> dict[str, float]:
        """The step as first written: on NumPy arrays throughout, NumPy's ``abs`` and ``count_nonzero``."""
        left, right, force = self._contacts()
        grasped = left and right
        has_object = self._root is not None
        nan = float("nan")
        position = self._object_pos(state)
        goal = getattr(self.env, "_target_pos", None)
        goal_dist = math.dist(position, goal) if has_object and goal is not None else nan
        lifted = has_object and float(position[2]) > self._z0 + LIFT_M
        dropped = self._held and not grasped
        self._held = grasped and lifted
        warnings = self._warning_count()
        unstable = warnings > self._warnings or not self._finite(state)
        self._warnings = warnings
        return {
            "ee_obj_dist": math.dist(state[0:3], position) if has_object else nan,
            "contact": float(left or right) if has_object else nan,
            "grasped": float(grasped) if has_object else nan,
            "lifted": float(lifted) if has_object else nan,
            "dropped": float(dropped) if has_object else nan,
            "obj_goal_dist": goal_dist,
            "goal_progress": 1.0 - goal_dist / self._goal_d0 if has_object else nan,
            "object_moved": self._moved(),
            "collision_force": force,
            "collision": float(force > COLLISION_N),
            "joint_limit": float(self._at_limit()),
            "action_saturated": float(np.count_nonzero(np.abs(action) >= SATURATION * self.bound)),
            "unstable": float(unstable),
        }


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return a.keys() == b.keys() and all(
        (math.isnan(a[k]) and math.isnan(b[k])) or np.float64(a[k]).tobytes() == np.float64(b[k]).tobytes()
        for k in a)


@pytest.mark.parametrize("name", ["pick-place", "drawer-open", "door-open", "button-press", "reach"])
def test_the_fast_event_tracker_equals_the_plain_one_at_every_step(name):
    from metaworld.policies import ENV_POLICY_MAP

    task = default_registry().get(f"metaworld/{name}@1")
    env = make_env(task)
    sawyer = env.simulator
    fast = env._events
    plain = _Plain(sawyer, task.action.high)
    expert = ENV_POLICY_MAP[task.env_name]()
    rng = np.random.default_rng(11)
    forces, contacts, moved = [], [], []
    steps = 0
    try:
        for seed, scripted in ((0, True), (1, False), (2, True)):
            state = env.reset(seed)["state"]
            plain.reset(env._perturber.object_body, np.asarray(state))
            for _ in range(60):
                # unscripted: random actions pressing down, so the hand meets the table (robot-scene forces)
                action = expert.get_action(state) if scripted else rng.uniform(-1.0, 1.0, task.action.dim) * (
                    1.0, 1.0, 0.0, 1.0) - (0.0, 0.0, 1.0, 0.0)
                transition = env.step(action)  # the environment's own tracker (the fast one) made its info
                state = transition.observation["state"]
                expected = plain.step(action, state)
                assert _same({k: transition.info[k] for k in expected}, expected), (name, seed, steps)
                forces.append(expected["collision_force"])
                contacts.append(expected["contact"])
                moved.append(expected["object_moved"])
                steps += 1
    finally:
        env.close()
    assert steps == 180 and isinstance(fast, EventTracker) and not isinstance(fast, _Plain)
    # the paths that matter were taken: robot-scene contacts with a force, and (where an expert touches the object)
    # finger contacts on the object
    assert sum(force > 0 for force in forces) >= 5, name
    assert (np.nanmax(contacts) == 1.0) == (name in ("pick-place", "door-open", "button-press")), name


def test_a_joint_exactly_at_a_limit_and_a_nan_position_read_alike():
    """The edges no episode reaches: an arm joint exactly at its limit (tolerance applied), a scene joint's value
    NaN (``object_moved`` is NaN, ``unstable`` 1), and an action exactly at the saturation bound."""
    task = default_registry().get("metaworld/pick-place@1")
    env = make_env(task)
    try:
        state = np.asarray(env.reset(0)["state"])
        fast, plain = env._events, _Plain(env.simulator, task.action.high)
        plain.reset(env._perturber.object_body, state)
        data = env.simulator.data
        joint, (low, _) = fast._joint_qpos[0], fast._joint_range[0]
        action = np.array([SATURATION, -SATURATION, np.nextafter(SATURATION, 0.0), 0.0])
        for value in (low + JOINT_LIMIT_TOL, np.nextafter(low + JOINT_LIMIT_TOL, np.inf)):
            data.qpos[joint] = value
            assert _same(fast.step(action, state), plain.step(action, state))
        assert fast._at_limit() == 0 and plain._at_limit() == 0  # just past the tolerance: not at the limit
        data.qpos[joint] = low + JOINT_LIMIT_TOL
        assert fast._at_limit() == 1
        data.qpos[fast._scene_from[1]] = np.nan
        events = fast.step(action, state)
        assert _same(events, plain.step(action, state))
        assert math.isnan(events["object_moved"]) and events["unstable"] == 1.0 and events["action_saturated"] == 2.0
    finally:
        env.close()


def test_actions_of_another_dtype_or_shape_and_a_step_before_reset_read_as_numpy_reads_them():
    """Saturation compares in the action's own precision (a float32 action against a float threshold compares in
    float32 under NumPy 2), a 2-D action is counted element by element, and a step before any reset measures the
    scene joints from zero, as the NumPy tracker did."""
    task = default_registry().get("metaworld/pick-place@1")
    env = make_env(task)
    try:
        fast, plain = EventTracker(env.simulator, 0.7), _Plain(env.simulator, 0.7)
        state = np.asarray(env.reset(0)["state"])
        assert _same(fast.step(np.zeros(4), state), plain.step(np.zeros(4), state))  # before their own reset
        fast.reset(env._perturber.object_body, state)
        plain.reset(env._perturber.object_body, state)
        for action in (np.array([0.6993, -0.6993, 0.7, 0.0], dtype=np.float32),
                       np.array([0.6993, -0.6993, 0.7, 0.0]), np.array([[0.7, 0.1], [-0.9, 0.0]])):
            events = fast.step(action, state)
            assert _same(events, plain.step(action, state)), action.dtype
        float32 = np.array([0.6993, -0.6993, 0.7, 0.0], dtype=np.float32)
        assert fast.step(float32, state)["action_saturated"] == float(
            np.count_nonzero(np.abs(float32) >= SATURATION * 0.7))
    finally:
        env.close()
