"""Per-step events computed from MuJoCo state: what happened physically, recorded as ``info.<name>``.

An :class:`EventTracker` belongs to one Meta-World environment. ``reset`` is told
the manipulated object's body (found once by ``ModelPerturber.locate_object``) and
the first observation; ``step`` returns float scalars for the step just taken:

=====================  ==========================================================
``ee_obj_dist``        distance (m) from the hand (obs[0:3]) to the object
``contact``            1 if a finger pad or claw touches the object
``grasped``            1 if fingers on *both* sides touch the object
``lifted``             1 if the object is ``LIFT_M`` above where it started
``dropped``            1 on the step a lifted, grasped object is let go of
``obj_goal_dist``      distance (m) from the object to the task's goal
``goal_progress``      1 - obj_goal_dist / (its value at reset); 1 = at goal
``object_moved``       how far the object's own joints moved from reset: metres for
                       slide and free joints (a drawer, a puck), radians for hinges
                       (a door, a faucet, a lever); the largest over its joints
``collision_force``    largest normal force (N) of a robot-scene contact
``collision``          1 if that force exceeds ``COLLISION_N``
``joint_limit``        number of arm joints at a limit (fingers excluded)
``action_saturated``   number of action dimensions at the bound
``unstable``           1 on NaN/inf in the state or a new MuJoCo warning
=====================  ==========================================================

Robot-object contacts (a grasp) are not collisions; nor are the object's own
contacts. Articulated tasks (drawer, door, button, window, faucet, handle, lever)
have no free object near ``obs[4:7]``; their object is the body of the scene's
first non-robot joint (the drawer link, the door, the button), and positions come
from ``obs[4:7]`` (the handle Meta-World tracks toward the goal). With no object
at all, object events are NaN (a missing value, not 0).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

NAN = float("nan")

LIFT_M = 0.02  # above the initial height: off the table, not jitter
COLLISION_N = 200.0  # normal force of a robot-scene contact counted as a collision
JOINT_LIMIT_TOL = 1e-3  # rad (or m) from a limit counts as at the limit
SATURATION = 0.999  # fraction of the action bound counted as saturated
EVENT_NAMES = ("ee_obj_dist", "contact", "grasped", "lifted", "dropped", "obj_goal_dist", "goal_progress",
               "object_moved", "collision_force", "collision", "joint_limit", "action_saturated", "unstable")

_LEFT = ("leftpad", "leftclaw")
_RIGHT = ("rightpad", "rightclaw")
_ROBOT = ("right_", "leftclaw", "rightclaw", "leftpad", "rightpad")


def is_robot_body(name: str) -> bool:
    """The Sawyer's bodies: ``hand`` exactly (a ``handle_link`` is the scene's), the arm, the fingers."""
    return name == "hand" or name.startswith(_ROBOT)


def object_bodies(model: Any, root: int | None) -> frozenset[int]:
    """The object's body and its descendants (handles, lids)."""
    if root is None:
        return frozenset()
    bodies = {root}
    for i in range(model.nbody):  # bodies are numbered parents first
        if int(model.body_parentid[i]) in bodies:
            bodies.add(i)
    return frozenset(bodies)


class EventTracker:
    """Computes the events of each step of one Sawyer environment (see module docstring)."""

    def __init__(self, env: Any, action_bound: float = 1.0) -> None:
        self.env = env
        model = env.model
        names = [model.body(i).name for i in range(model.nbody)]
        self._left = frozenset(i for i, n in enumerate(names) if n.startswith(_LEFT))
        self._right = frozenset(i for i, n in enumerate(names) if n.startswith(_RIGHT))
        self._robot = frozenset(i for i, n in enumerate(names) if is_robot_body(n))
        # Arm joints only: the fingers sit at their limits whenever the gripper is fully open or closed.
        arm = frozenset(i for i, n in enumerate(names) if n.startswith("right_"))
        robot_joints = [j for j in range(model.njnt) if int(model.jnt_bodyid[j]) in arm and model.jnt_limited[j]]
        self._joint_qpos = np.array([model.jnt_qposadr[j] for j in robot_joints], dtype=np.int64)
        self._joint_range = np.array([model.jnt_range[j] for j in robot_joints], dtype=np.float64).reshape(-1, 2)
        # The scene's own joints (drawer slides, door hinges, free objects): what "the object moved" reads.
        scene = [j for j in range(model.njnt) if not is_robot_body(names[int(model.jnt_bodyid[j])])
                 and int(model.jnt_type[j]) != 1]  # ball joints carry no displacement we can read
        self._scene_joints = [(int(model.jnt_qposadr[j]), int(model.jnt_type[j]), int(model.jnt_bodyid[j]))
                              for j in scene]
        # where each scene joint's displacement comes from in qpos (three values for a free joint, one otherwise)
        widths = [3 if kind == 0 else 1 for _, kind, _ in self._scene_joints]
        self._scene_from = np.array([adr + k for (adr, _, _), w in zip(self._scene_joints, widths, strict=True)
                                     for k in range(w)], dtype=np.int64)
        # each step reads these: the geoms' bodies as plain ints, the joint limits with their tolerance applied
        self._geom_body: list[int] = [int(b) for b in model.geom_bodyid]
        self._at_low = self._joint_range[:, 0] + JOINT_LIMIT_TOL
        self._at_high = self._joint_range[:, 1] - JOINT_LIMIT_TOL
        self._wrench = np.zeros(6)
        import mujoco  # the environment that owns ``env`` imported it already

        self._contact_force = mujoco.mj_contactForce
        # each scene joint's width in ``_scene_from``'s values, the arm joints' limits as floats, the saturation
        # threshold: ``step`` reads these in plain Python, which at a handful of values costs less than NumPy
        self._widths = widths
        self._low, self._high = self._at_low.tolist(), self._at_high.tolist()
        self._saturated = SATURATION * action_bound
        self._q0: list[float] = [0.0] * len(self._scene_from)  # the scene joints at reset (zeros before one)
        self._bind()
        self._from_state = False
        self._object: frozenset[int] = frozenset()
        self._root: int | None = None
        self._z0 = 0.0
        self._goal_d0 = 1.0
        self._warnings = 0
        self._held = False

    def _bind(self) -> None:
        """Keep views of the MuJoCo arrays every step reads (each attribute read of ``data`` builds a new view);
        taken again if the environment's ``data`` is ever another object."""
        data = self.env.data
        self._data = data
        self._qpos, self._qvel, self._xpos, self._warning = data.qpos, data.qvel, data.xpos, data.warning.number

    def _warning_count(self) -> int:
        return sum(self._warning.tolist())  # MuJoCo's warning counters, summed

    def _object_pos(self, state: np.ndarray) -> np.ndarray:
        """The object's position now: a view, read at once by every caller (MuJoCo's, or the observation's)."""
        if self._root is None or self._from_state:
            return np.asarray(state[4:7], dtype=np.float64)
        return self._xpos[self._root]

    def _moved(self) -> float:
        """The largest of the scene joints' distances from reset: ``max(norm(values - at reset, axis=1))`` over
        the three values a joint has (a slide's or hinge's two zeros add nothing), with NumPy's rounding (its
        sum over three is left to right; ``math.sqrt`` and ``np.sqrt`` are both correctly rounded) and NaN
        when any is NaN (``tests/test_events_exact.py``)."""
        if not self._scene_joints:
            return NAN
        values, q0 = self._qpos[self._scene_from].tolist(), self._q0
        largest, i = 0.0, 0
        for width in self._widths:
            a = values[i] - q0[i]
            if width == 3:
                b, c = values[i + 1] - q0[i + 1], values[i + 2] - q0[i + 2]
                norm = math.sqrt(a * a + b * b + c * c)
            else:
                norm = math.sqrt(a * a)
            if norm != norm:
                return NAN
            largest = norm if norm > largest else largest
            i += width
        return largest

    def _goal_dist(self, state: np.ndarray) -> float:
        goal = getattr(self.env, "_target_pos", None)
        if goal is None or self._root is None:
            return float("nan")
        return float(np.linalg.norm(self._object_pos(state) - np.asarray(goal)))

    def reset(self, object_body: int | None, state: np.ndarray) -> None:
        """Start an episode: remember the object, its joints' and height's starting values, and the goal distance."""
        self._from_state = object_body is None and bool(self._scene_joints)
        self._root = self._scene_joints[0][2] if self._from_state else object_body
        if self.env.data is not self._data:
            self._bind()
        self._q0 = self._qpos[self._scene_from].tolist()
        self._object = object_bodies(self.env.model, self._root)
        self._z0 = float(self._object_pos(state)[2])
        self._goal_d0 = max(self._goal_dist(state), 1e-6)
        self._warnings = self._warning_count()
        self._held = False

    def _contacts(self) -> tuple[bool, bool, float]:
        """(left finger on object, right finger on object, largest robot-scene normal force)."""
        model, data = self.env.model, self._data
        if not data.ncon:
            return False, False, 0.0
        body, touched, robot = self._geom_body, self._object, self._robot
        left = right = False
        force = 0.0
        # the contacts' geom pairs in one array read (a struct per contact cost ~1 µs each)
        for i, (geom1, geom2) in enumerate(data.contact.geom.tolist()):
            a, b = body[geom1], body[geom2]
            if a in touched or b in touched:
                other = b if a in touched else a
                left |= other in self._left
                right |= other in self._right
                continue
            if (a in robot) != (b in robot):  # robot against the scene, not against itself
                self._contact_force(model, data, i, self._wrench)
                force = max(force, abs(float(self._wrench[0])))
        return left, right, force

    def _at_limit(self) -> int:
        """How many arm joints sit within ``JOINT_LIMIT_TOL`` of a limit."""
        count = 0
        for q, low, high in zip(self._qpos[self._joint_qpos].tolist(), self._low, self._high, strict=True):
            if q <= low or q >= high:
                count += 1
        return count

    def _finite(self, state: np.ndarray) -> bool:
        """Whether MuJoCo's positions and velocities and the observation sum to a finite number."""
        total = np.add.reduce  # what ndarray.sum and np.sum call, without their wrappers
        return math.isfinite(float(total(self._qpos)) + float(total(self._qvel)) + float(total(state)))

    def step(self, action: np.ndarray, state: np.ndarray) -> dict[str, float]:
        """The step's events from MuJoCo state: contact, grasp, lift, drop, collision, joint limits, instability,
        progress.
        """
        if self.env.data is not self._data:
            self._bind()
        left, right, force = self._contacts()
        grasped = left and right
        has_object = self._root is not None
        nan = NAN
        # once per step, as floats (math.dist reads the same doubles from a list as from an array, faster)
        position = self._object_pos(state).tolist()
        goal = getattr(self.env, "_target_pos", None)
        if isinstance(goal, np.ndarray):
            goal = goal.tolist()
        goal_dist = math.dist(position, goal) if has_object and goal is not None else nan
        lifted = has_object and position[2] > self._z0 + LIFT_M
        dropped = self._held and not grasped
        self._held = grasped and lifted
        warnings = self._warning_count()
        unstable = warnings > self._warnings or not self._finite(state)
        self._warnings = warnings
        array = np.asarray(action)
        if array.dtype == np.float64 and array.ndim == 1:  # the runner's actions: plain floats, same comparisons
            saturated = 0
            for value in array.tolist():
                if abs(value) >= self._saturated:
                    saturated += 1
        else:  # another dtype compares in its own precision (NumPy's rule for a Python float threshold)
            saturated = int(np.count_nonzero(np.abs(array) >= self._saturated))
        return {
            "ee_obj_dist": math.dist(state[0:3].tolist(), position) if has_object else nan,
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
            "action_saturated": float(saturated),
            "unstable": float(unstable),
        }
