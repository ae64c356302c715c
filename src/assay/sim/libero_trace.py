"""The per-layer trace of a LIBERO scene, read from its robosuite environment after each step.

robosuite's OSC_POSE controller sets its goal once per control step (``set_goal``, from the state the step
began in) and then computes joint torques at every physics substep, clipped to the arm's limits. So:

* ``controller.target``: the goal position the step's action set (the command);
* ``controller.saturated``: joints whose torque at the step's first substep (robosuite's ``recent_torques``,
  computed from the state the step began in) sits at its limit;
* ``controller.tracking_error``: the distance from the goal to the end-effector site after the step;
* with ``controller.effort``: the norm of the last substep's torques and how many are at their limit;
* physics and drawing time as for any MuJoCo scene (``sim.mujoco_trace``).

Nothing here writes the simulator. The state it keeps per scene (warning counters, drawing time) lives beside
the scene (a weak mapping), so the backend needs no more than a one-line hook; a new episode is recognised by
robosuite's step counter going back.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from assay.sim.mujoco_trace import EFFORT, DrawingTrace, PhysicsTrace
from assay.sim.protocol import LayerValue


class _SceneTrace:
    """What the trace of one scene remembers between steps."""

    def __init__(self, scene: Any) -> None:
        inner = scene.inner
        self.physics = PhysicsTrace(inner.sim.model._model, inner.sim.data._data)
        self.drawing = DrawingTrace(list(scene.renderers.values()))
        self.timestep = -1


_SCENES: weakref.WeakKeyDictionary[Any, _SceneTrace] = weakref.WeakKeyDictionary()


def _at_limit(torques: np.ndarray, low: np.ndarray, high: np.ndarray) -> float:
    return float(np.count_nonzero((torques <= low) | (torques >= high)))


def scene_fields(scene: Any, groups: frozenset[str]) -> dict[str, LayerValue]:
    """The latest step's controller, physics and drawing fields of a LIBERO scene (``sim.libero_env._Scene``:
    its robosuite environment ``inner`` and its ``renderers``)."""
    kept = _SCENES.get(scene)
    if kept is None:
        kept = _SCENES[scene] = _SceneTrace(scene)
    inner = scene.inner
    if inner.timestep <= kept.timestep:  # robosuite counts steps from its reset: a new episode
        kept.physics.reset()
    kept.timestep = inner.timestep
    fields: dict[str, LayerValue] = {}
    robot = inner.robots[0]
    controller = robot.controller
    target = np.array(controller.goal_pos, dtype=np.float64)
    low, high = robot.torque_limits
    gap = target - np.asarray(inner.sim.data.site_xpos[inner.sim.model.site_name2id(controller.eef_name)])
    fields.update({"controller.target": target,
                   "controller.saturated": _at_limit(np.asarray(robot.recent_torques.current), low, high),
                   "controller.tracking_error": math.sqrt(float(gap @ gap))})
    if EFFORT in groups:
        torques = np.asarray(robot.torques, dtype=np.float64)
        fields.update({"controller.effort": math.sqrt(float(torques @ torques)),
                       "controller.effort_limited": _at_limit(torques, low, high)})
    fields.update(kept.physics.fields(groups))
    fields.update(kept.drawing.fields())
    return fields
