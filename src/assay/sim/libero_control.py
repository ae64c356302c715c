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
* the gripper's actuator ids are looked up once per compiled model and gripper (the name-to-id map of a compiled
  MuJoCo model never changes; a hard reset builds a new model and a new gripper, and the ids are looked up
  again). The control ranges themselves are read fresh at each substep.

A policy step's substep is robosuite's own ``control``. Every control, torque, gripper state and simulation state
is bit-identical to robosuite's (``tests/test_libero_control.py``). Installed only where robosuite's own classes
are in place (``SingleArm`` with a gripper, robosuite's ``control``, ``grip_action``, ``torque_limits``,
``action_dim`` and ``action_limits``); elsewhere the robot controls as robosuite wrote it.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def applies(robot: Any) -> bool:
    """Whether ``robot`` is robosuite 1.4's ``SingleArm`` with a gripper and robosuite's own control code."""
    import robosuite
    from robosuite.robots.manipulator import Manipulator
    from robosuite.robots.robot import Robot
    from robosuite.robots.single_arm import SingleArm

    kind = type(robot)
    return robosuite.__version__.startswith("1.4.") and kind is SingleArm and bool(robot.has_gripper) and \
        "grip_action" not in vars(robot) and \
        kind.control is SingleArm.control and kind.grip_action is Manipulator.grip_action and \
        kind.torque_limits is Robot.torque_limits and kind.action_dim is Robot.action_dim and \
        kind.action_limits is SingleArm.action_limits


def install(inner: Any) -> int:
    """Give each robot of ``inner`` (a robosuite environment) to which :func:`applies` says yes the control of the
    module docstring; how many robots have it. Installing twice changes nothing."""
    installed = 0
    for robot in getattr(inner, "robots", None) or []:
        if "control" in vars(robot):
            installed += getattr(robot.control, "assay_cached_lookups", False)
            continue
        if applies(robot):
            robot.control = _control(robot)
            installed += 1
    return installed


def uninstall(inner: Any) -> None:
    """Control ``inner``'s robots as robosuite wrote it again (for comparisons)."""
    for robot in getattr(inner, "robots", None) or []:
        if getattr(vars(robot).get("control"), "assay_cached_lookups", False):
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
    from robosuite.robots.single_arm import SingleArm

    own = SingleArm.control
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

    control.assay_cached_lookups = True  # type: ignore[attr-defined]
    return control


__all__ = ["GripperIds", "applies", "install", "uninstall"]
