"""robosuite's arm control looks up, at every substep, what a compiled scene cannot change: look it up once.

robosuite 1.4 runs a LIBERO control step as 25 substeps, and each calls ``SingleArm.control`` for the arm. Past
the policy step's own substep (the first: it sets the controller's goal and fills the robot's history buffers),
``control`` only runs the OSC controller and writes the controls. Around that it rebuilds the action limits to
learn the action's length (two concatenations), reads the joint torque limits through a property (two fancy
indexes), and finds the gripper's actuators by name (a dictionary lookup each, with their names rebuilt).

:func:`install` gives each robot a ``control`` of its own, for the substeps that are not a policy step, that
does robosuite's arithmetic in robosuite's order with three changes of bookkeeping, none of a value:

* the action's length is the controller's limits' length plus the gripper's degrees of freedom, which is what
  ``action_dim`` computes (the length of their concatenation);
* the torque limits are the same two columns of ``actuator_ctrlrange`` at the arm's actuators, read fresh at each
  substep from one fancy index;
* the gripper's actuator ids are looked up once per compiled model and gripper (robosuite builds a model's
  name-to-id map once; ``reset_from_xml_string`` gives the robot a new model, and its ids are looked up again).
  The control ranges themselves are read fresh at each substep.

A policy step's substep is robosuite's own ``control``. Every control, torque, gripper state and simulation state
is bit-identical to robosuite's (``tests/test_libero_control.py``). Installed only where robosuite's own code is in
place when the scene is built (``SingleArm`` with a gripper, and ``control``, ``grip_action``, ``torque_limits``,
``action_dim`` and ``action_limits`` as robosuite's files define them); elsewhere the robot controls as robosuite
wrote it. A hard reset (not Assay's: its scenes reset softly) builds new robots, which then control as robosuite
wrote it; a patch to robosuite's classes after a scene is built is not seen by that scene's robots.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

_OURS: weakref.WeakSet[Any] = weakref.WeakSet()  # the controls this module made (a wrapper that copies attributes
# from one is not one of them)


def _robosuites(value: Any, module: Any, name: str) -> bool:
    """Whether ``value`` (a function, or a property's getter) is ``name`` as ``module``'s file defines it."""
    function = value.fget if isinstance(value, property) else value
    code = getattr(function, "__code__", None)
    return code is not None and code.co_name == name and code.co_filename == module.__file__


def applies(robot: Any) -> bool:
    """Whether ``robot`` is robosuite 1.4's ``SingleArm`` with a gripper and robosuite's own control code."""
    import robosuite
    from robosuite.robots import manipulator, single_arm
    from robosuite.robots import robot as robot_module

    kind = type(robot)
    return robosuite.__version__.startswith("1.4.") and kind is single_arm.SingleArm and \
        bool(robot.has_gripper) and "grip_action" not in vars(robot) and \
        _robosuites(kind.control, single_arm, "control") and \
        _robosuites(kind.action_limits, single_arm, "action_limits") and \
        _robosuites(kind.grip_action, manipulator, "grip_action") and \
        _robosuites(kind.torque_limits, robot_module, "torque_limits") and \
        _robosuites(kind.action_dim, robot_module, "action_dim")


def install(inner: Any) -> int:
    """Give each robot of ``inner`` (a robosuite environment) to which :func:`applies` says yes the control of the
    module docstring; how many robots have it. Installing twice changes nothing."""
    installed = 0
    for robot in getattr(inner, "robots", None) or []:
        if "control" in vars(robot):  # ours already, or another's: left as it is
            installed += vars(robot)["control"] in _OURS
            continue
        if applies(robot):
            robot.control = _control(robot)
            installed += 1
    return installed


def uninstall(inner: Any) -> None:
    """Control ``inner``'s robots as robosuite wrote it again (for comparisons)."""
    for robot in getattr(inner, "robots", None) or []:
        if vars(robot).get("control") in _OURS:
            del robot.control


class GripperIds:
    """A robot's gripper actuator ids, looked up by name once per compiled model and gripper object."""

    def __init__(self) -> None:
        self._model: Any = None
        self._gripper: Any = None
        self._ids: list[int] = []

    def lookup(self, model: Any, gripper: Any) -> list[int]:
        """The ids of ``gripper``'s actuators in ``model`` (looked up again when either is another object)."""
        if model is not self._model or gripper is not self._gripper:
            self._ids = [model.actuator_name2id(name) for name in gripper.actuators]
            self._model, self._gripper = model, gripper
        return self._ids


def _control(robot: Any) -> Any:
    own = type(robot).control  # robosuite's, as applies() found it
    gripper_ids = GripperIds()

    def control(action: Any, policy_step: bool = False) -> None:
        if policy_step:  # the goal and the history buffers: robosuite's own
            return own(robot, action, policy_step=policy_step)
        controller = robot.controller
        dim = len(controller.control_limits[0]) + robot.gripper.dof  # robot.action_dim
        assert len(action) == dim, f"environment got invalid action dimension -- expected {dim}, got {len(action)}"
        gripper_action = action[controller.control_dim:]
        torques = controller.run_controller()
        model, joints = robot.sim.model, robot._ref_joint_actuator_indexes
        limits = model.actuator_ctrlrange[joints]
        robot.torques = np.clip(torques, limits[:, 0], limits[:, 1])
        # Manipulator.grip_action, its actuator ids looked up once
        ids = gripper_ids.lookup(model, robot.gripper)
        actual = robot.gripper.format_action(gripper_action)
        ctrl_range = model.actuator_ctrlrange[ids]
        bias = 0.5 * (ctrl_range[:, 1] + ctrl_range[:, 0])
        weight = 0.5 * (ctrl_range[:, 1] - ctrl_range[:, 0])
        robot.sim.data.ctrl[ids] = bias + weight * actual
        robot.sim.data.ctrl[joints] = robot.torques
        return None

    _OURS.add(control)
    return control


__all__ = ["GripperIds", "applies", "install", "uninstall"]
