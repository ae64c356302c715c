"""Per-step events of a LIBERO episode from the simulator's truth, recorded as ``info.<name>`` step columns.

A :class:`LiberoEvents` belongs to one LIBERO scene (a BDDL file). Its goal is the
BDDL ``:goal`` conjunction; the **current subgoal** is the first predicate, in the
file's order, that does not hold yet, and the object events are about its object:
the object a pick-and-place predicate (``in``/``on``) moves, or the object (or the
parent of the region) an ``open``/``close``/``turnon``/``turnoff`` predicate names.

=====================  ==========================================================
``subgoal``            index of the current subgoal (the goal's predicates that hold before it count)
``ee_obj_dist``        distance (m) from the gripper's grasp site to the object's nearest geom
                       (the surface of its bounding sphere; 0 inside it): a bowl held by its rim is 0
``contact``            1 if the gripper (a finger or the hand) touches the object
``grasped``            1 if it is held: both fingers touch it, more than ``GRASP_MIN_OPENING_M`` apart
                       around it, and either each finger's contact pushes towards the other finger
                       (a pinch from opposing sides) or the object is lifted off its support between
                       them (a bowl held by its thin rim, whose convex collision hull the inner finger
                       sits inside, gives contact normals of no use); a closed hand pressing on top of
                       an object touches it with both fingertips and holds nothing
``lifted``             1 if it is ``LIFT_M`` above where it started (pick-and-place)
``dropped``            1 on the step a lifted, grasped object is let go of farther than
                       ``PLACE_NEAR_M`` (horizontally) from its target or higher than
                       ``RELEASE_HIGH_M`` above it (a release near and low is a placement)
``obj_goal_dist``      distance (m) from the object to its target (the region's site or
                       the object it goes on); NaN for the other predicates
``goal_progress``      the goal's share done: each predicate that holds counts 1, the
                       current pick-and-place one ``1 - obj_goal_dist / (its value at the
                       episode's start)`` (clipped to [0, 1]), every other 0; divided by their number
``object_moved``       how far the object moved from its start: metres for its body, or the
                       largest joint displacement of an articulated one (metres or radians)
``wrong_object``       1 if the gripper touches a movable object the goal never names
``collision_force``    largest normal force (N) of a contact between the robot and what
                       cannot move (table, walls, fixtures)
``collision``          1 if that force exceeds ``COLLISION_N``
``unstable``           1 on NaN/inf in the state or a new MuJoCo warning
=====================  ==========================================================

Events are read after the control step's last physics substep (the truth), not at
robosuite's observation instant.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

LIFT_M = 0.02  # above the start height: off its support, not jitter
PLACE_NEAR_M = 0.15  # a release this close (horizontally) to the target ...
RELEASE_HIGH_M = 0.10  # ... and at most this high above it is a placement, not a drop (the expert: ~0.06)
GRASP_MIN_OPENING_M = 0.003  # finger joints this far apart (at least) around a held object: a bowl's rim gives
# 0.0036-0.0042, a closed hand pressing on a can 0.001-0.002
COLLISION_N = 80.0  # normal force of a robot-fixture contact counted as a collision (the expert: 0 N)
PICK_PLACE = ("in", "on")
LIBERO_EVENT_NAMES = ("subgoal", "ee_obj_dist", "contact", "grasped", "lifted", "dropped", "obj_goal_dist",
                      "goal_progress", "object_moved", "wrong_object", "collision_force", "collision", "unstable")

_SCENE, _LEFT, _RIGHT, _HAND, _ARM, _MOVABLE = 0, 1, 2, 3, 4, 5  # what a body is; objects are _MOVABLE + k


def _descendants(model: Any, root: int) -> set[int]:
    bodies = {root}
    for body in range(root + 1, model.nbody):  # bodies are numbered parents first
        if int(model.body_parentid[body]) in bodies:
            bodies.add(body)
    return bodies


class _Subgoal:
    """One goal predicate: the object it is about, its body and joints, and its target (pick-and-place)."""

    def __init__(self, inner: Any, predicate: tuple[str, ...], kinds: dict[str, int]) -> None:
        self.predicate = predicate
        self.pick_place = predicate[0] in PICK_PLACE and len(predicate) == 3
        name = predicate[1]
        site = inner.object_sites_dict.get(name)  # a region: its parent object is what the gripper touches
        self.object = getattr(inner.object_states_dict[name], "parent_name", name) if site is not None else name
        self.target = predicate[2] if self.pick_place else None
        self.kind = kinds[self.object]
        self.body = int(inner.obj_body_id[self.object])
        model = inner.sim.model._model
        geoms = np.flatnonzero(np.isin(model.geom_bodyid, sorted(_descendants(model, self.body))))
        self.geoms, self.radii = geoms, np.asarray(model.geom_rbound[geoms], dtype=np.float64)
        joints = getattr(site if site is not None else inner.get_object(self.object), "joints", None) or ()
        addresses = [inner.sim.model.get_joint_qpos_addr(joint) for joint in joints]
        self.joints = [int(a if isinstance(a, (int, np.integer)) else a[0]) for a in addresses]


class LiberoEvents:
    """The events of each step of one LIBERO scene (see the module docstring)."""

    def __init__(self, inner: Any, goal: list[tuple[str, ...]]) -> None:
        self.inner = inner
        model = inner.sim.model._model
        names = [model.body(i).name for i in range(model.nbody)]
        self._movable = list(inner.objects_dict)
        kind = np.full(model.nbody, _SCENE, dtype=np.int64)
        for body, name in enumerate(names):
            if name.startswith("gripper0_"):
                kind[body] = _LEFT if "leftfinger" in name or "joint1_tip" in name else \
                    _RIGHT if "rightfinger" in name or "joint2_tip" in name else _HAND
            elif name.startswith("robot0_"):
                kind[body] = _ARM
        # Movable objects, then the fixtures a goal names (a cabinet, a stove): each its own kind, so touching
        # the drawer a goal opens is contact, not a collision.
        parents = [getattr(inner.object_states_dict[p[1]], "parent_name", p[1]) for p in goal]
        fixtures = [name for name in dict.fromkeys(parents) if name not in self._movable]
        kinds = {name: _MOVABLE + k for k, name in enumerate([*self._movable, *fixtures])}
        for name, value in kinds.items():
            for body in _descendants(model, int(inner.obj_body_id[name])):
                kind[body] = value
        self._geom_kind = kind[model.geom_bodyid]
        self._subgoals = [_Subgoal(inner, tuple(p), kinds) for p in goal]
        named = {s.object for s in self._subgoals} | {s.target for s in self._subgoals if s.target}
        named |= {getattr(inner.object_states_dict[t], "parent_name", t) for t in named}
        self._unnamed = np.array([kinds[n] for n in self._movable if n not in named], dtype=np.int64)
        self._grip_site = int(inner.robots[0].eef_site_id)
        self._finger_bodies = (np.flatnonzero(kind == _LEFT), np.flatnonzero(kind == _RIGHT))
        self._start: list[tuple[np.ndarray, np.ndarray, float]] = []
        self._warnings = 0
        self._held = False

    def _object_pos(self, subgoal: _Subgoal) -> np.ndarray:
        return np.asarray(self.inner.sim.data._data.xpos[subgoal.body], dtype=np.float64)

    def _target_pos(self, subgoal: _Subgoal) -> np.ndarray:
        return np.asarray(self.inner.object_states_dict[subgoal.target].get_geom_state()["pos"], dtype=np.float64)

    def _reach(self, subgoal: _Subgoal) -> float:
        data = self.inner.sim.data._data
        if not len(subgoal.geoms):
            return math.dist(data.site_xpos[self._grip_site], data.xpos[subgoal.body])
        gaps = np.linalg.norm(data.geom_xpos[subgoal.geoms] - data.site_xpos[self._grip_site], axis=1) - subgoal.radii
        return max(float(gaps.min()), 0.0)

    def _holds(self) -> list[bool]:
        return [bool(self.inner._eval_predicate(s.predicate)) for s in self._subgoals]

    def reset(self) -> None:
        """Remember where everything starts (call once the episode's state is restored and settled)."""
        data = self.inner.sim.data._data
        self._start = []
        for subgoal in self._subgoals:
            position = self._object_pos(subgoal).copy()
            joints = np.array([data.qpos[a] for a in subgoal.joints], dtype=np.float64)
            distance = math.dist(position, self._target_pos(subgoal)) if subgoal.pick_place else 1.0
            self._start.append((position, joints, max(distance, 1e-6)))
        self._warnings = int(data.warning.number.sum())
        self._held = False

    def _contacts(self, obj: int) -> tuple[bool, bool, bool, bool, bool, bool, float]:
        """(left finger pushing on the object towards the right finger, the right towards the left, the left
        finger touching it, the right touching it, any part of the gripper on it, the gripper on an unnamed
        movable object, largest robot-fixture normal force)."""
        import mujoco

        model, data = self.inner.sim.model._model, self.inner.sim.data._data
        count = int(data.ncon)
        if not count:
            return False, False, False, False, False, False, 0.0
        kinds = self._geom_kind[np.stack([data.contact.geom1[:count], data.contact.geom2[:count]])]
        gripper = (kinds >= _LEFT) & (kinds <= _HAND)
        touched = np.where(gripper[::-1], kinds, -1)  # what each gripper contact's other side is
        on_object = touched == obj
        left, right = self._opposing(on_object, kinds, count)
        touch_left = bool((on_object & (kinds[::-1] == _LEFT)).any())
        touch_right = bool((on_object & (kinds[::-1] == _RIGHT)).any())
        wrong = bool(np.isin(touched, self._unnamed).any())
        robot = (kinds >= _LEFT) & (kinds <= _ARM)
        fixture = robot[0] & (kinds[1] == _SCENE) | robot[1] & (kinds[0] == _SCENE)
        force, wrench = 0.0, np.zeros(6)
        for i in np.flatnonzero(fixture):
            mujoco.mj_contactForce(model, data, int(i), wrench)
            force = max(force, abs(float(wrench[0])))
        return left, right, touch_left, touch_right, bool(on_object.any()), wrong, force

    def _opposing(self, on_object: np.ndarray, kinds: np.ndarray, count: int) -> tuple[bool, bool]:
        """Whether the left finger touches the object pushing towards the right finger, and the right towards
        the left (a contact's normal runs from geom1 to geom2: from the finger into the object when the finger
        is geom1)."""
        data = self.inner.sim.data._data
        left_at = data.xpos[self._finger_bodies[0]].mean(axis=0)
        right_at = data.xpos[self._finger_bodies[1]].mean(axis=0)
        axis = right_at - left_at
        axis /= max(float(np.linalg.norm(axis)), 1e-9)
        normals = np.asarray(data.contact.frame[:count, :3], dtype=np.float64)
        pushes = []
        for side, inward in ((_LEFT, axis), (_RIGHT, -axis)):
            first = on_object[1] & (kinds[0] == side)  # the finger is geom1: the normal points into the object
            second = on_object[0] & (kinds[1] == side)  # the finger is geom2: the normal points into the finger
            push = np.concatenate([normals[first] @ inward, -(normals[second] @ inward)])
            pushes.append(bool((push > 0.0).any()))
        return pushes[0], pushes[1]

    def step(self, state: np.ndarray) -> dict[str, float]:
        """The events of the step just taken (``state``: the observation's, for the instability check)."""
        data = self.inner.sim.data._data
        holds = self._holds()
        current = next((i for i, held in enumerate(holds) if not held), len(holds) - 1)
        subgoal = self._subgoals[current]
        start, joints0, distance0 = self._start[current]
        position = self._object_pos(subgoal)
        left, right, touch_left, touch_right, touch, wrong, force = self._contacts(subgoal.kind)
        around = touch_left and touch_right and float(state[6] - state[7]) > GRASP_MIN_OPENING_M  # finger joints
        off_support = subgoal.pick_place and float(position[2]) > float(start[2]) + LIFT_M
        grasped = around and ((left and right) or off_support)
        nan = float("nan")
        if subgoal.pick_place:
            target = self._target_pos(subgoal)
            goal_dist = math.dist(position, target)
            lifted = float(position[2]) > float(start[2]) + LIFT_M
            far = math.dist(position[:2], target[:2]) > PLACE_NEAR_M or position[2] - target[2] > RELEASE_HIGH_M
            moved = math.dist(position, start)
            partial = min(max(1.0 - goal_dist / distance0, 0.0), 1.0) if not holds[current] else 0.0
        else:
            goal_dist, lifted, far, partial = nan, False, True, 0.0
            displacement = [abs(float(data.qpos[a]) - float(q)) for a, q in zip(subgoal.joints, joints0, strict=True)]
            moved = max(displacement, default=math.dist(position, start))
        dropped = self._held and not grasped and far
        self._held = grasped and lifted
        warnings = int(data.warning.number.sum())
        finite = math.isfinite(float(data.qpos.sum()) + float(data.qvel.sum()) + float(np.sum(state)))
        unstable = warnings > self._warnings or not finite
        self._warnings = warnings
        return {
            "subgoal": float(current),
            "ee_obj_dist": self._reach(subgoal),
            "contact": float(touch),
            "grasped": float(grasped),
            "lifted": float(lifted),
            "dropped": float(dropped),
            "obj_goal_dist": goal_dist,
            "goal_progress": (sum(holds) + partial) / len(holds),
            "object_moved": moved,
            "wrong_object": float(wrong),
            "collision_force": force,
            "collision": float(force > COLLISION_N),
            "unstable": float(unstable),
        }
