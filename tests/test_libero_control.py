"""The arm's control without robosuite's per-substep lookups (``sim.libero_control``) controls exactly as robosuite:
every control, joint torque, gripper state and MuJoCo state of the scripted expert's episode and of a shaky
random-action episode is bit-identical with it and without it, and it took effect (robosuite's ``grip_action``
runs once a step, on the policy step's substep, not at every substep)."""

from __future__ import annotations

import numpy as np
import pytest

from assay.sim import default_registry, libero_control, libero_env, make_env
from tests.test_libero_forward import TASKS, _expert_actions, with_and_without

pytestmark = [pytest.mark.libero, pytest.mark.sim]

REGISTRY = default_registry()


def _states(env, seed: int, actions: np.ndarray) -> np.ndarray:
    inner = env._scene.inner
    robot, data = inner.robots[0], inner.sim.data._data
    env.reset(seed)
    rows = []
    for action in actions:
        transition = env.step(action)
        rows.append(np.concatenate([data.qpos, data.qvel, data.qacc_warmstart, data.ctrl, data.sensordata,
                                    robot.torques, robot.gripper.current_action, transition.observation["state"],
                                    [transition.reward, transition.success]]))
    return np.asarray(rows)


def test_the_control_without_lookups_is_robosuites_bit_for_bit_and_takes_effect(monkeypatch):
    env = make_env(REGISTRY.get(TASKS[0]).model_copy(update={"cameras": ()}))
    try:
        inner = env._scene.inner
        robot = inner.robots[0]
        ours = vars(robot).get("control")
        assert ours is not None and libero_control.install(inner) == 1  # installed with the scene; again: nothing
        assert vars(robot)["control"] is ours
        with libero_env._quiet():
            from robosuite.robots.manipulator import Manipulator
        calls = []
        grip = Manipulator.grip_action
        monkeypatch.setattr(Manipulator, "grip_action", lambda self, **kw: (calls.append(1), grip(self, **kw))[1])
        env.reset(1)  # its settle steps are policy steps too
        calls.clear()
        env.step(np.zeros(7))
        grouped = len(calls)
        libero_control.uninstall(inner)
        env.step(np.zeros(7))
        assert libero_control.install(inner) == 0  # robosuite's grip_action is patched: not robosuite's own code
        monkeypatch.undo()
        assert libero_control.install(inner) == 1
        substeps = int(round(inner.control_timestep / inner.model_timestep))
        assert (grouped, len(calls) - grouped) == (1, substeps)
        actions = _expert_actions(env, 1)
        rng = np.random.default_rng(7)
        shaky = np.clip(actions[:60] + rng.normal(0.0, 0.7, actions[:60].shape), -1.0, 1.0)  # the gripper flips
        for seed, replayed in ((1, actions), (3, shaky)):
            fast, plain = with_and_without(lambda s, a: _states(env, s, a), libero_control, inner, seed, replayed)
            assert fast.shape == plain.shape and fast.tobytes() == plain.tobytes(), seed
            if replayed is actions:  # the soup: grasped, carried, placed (its last step succeeded)
                assert plain[-1, -1] == 1.0
        env.reset(3)
        saturated = 0
        for action in shaky[:40]:  # the clip is exercised: shaky actions drive joint torques to their limits
            env.step(action)
            low, high = robot.torque_limits
            saturated += int(np.sum((robot.torques == low) | (robot.torques == high)))
        assert saturated > 0
        with pytest.raises(AssertionError, match="expected 7, got 6"):  # the arm's own check, past the policy step
            robot.control(np.zeros(6), policy_step=False)
        with pytest.raises(AssertionError, match="expected 7, got 6"):  # a wrong action: robosuite's own message
            env.step(np.zeros(6))
    finally:
        env.close()


def test_the_gripper_ids_are_looked_up_once_per_model_and_gripper():
    class Model:
        def __init__(self, offset: int) -> None:
            self.offset, self.lookups = offset, 0

        def actuator_name2id(self, name: str) -> int:
            self.lookups += 1
            return self.offset + int(name[-1])

    class Gripper:
        actuators = ["finger0", "finger1"]

    ids, first, second, gripper = libero_control.GripperIds(), Model(10), Model(20), Gripper()
    assert [ids.lookup(first, gripper) for _ in range(3)] == [[10, 11]] * 3 and first.lookups == 2
    assert ids.lookup(second, gripper) == [20, 21] and second.lookups == 2  # a new model: looked up again
    assert ids.lookup(second, Gripper()) == [20, 21] and second.lookups == 4  # a new gripper: again


def test_it_is_installed_only_on_robosuites_own_single_arm_with_a_gripper():
    with libero_env._quiet():
        from robosuite.robots.single_arm import SingleArm

    class Subclass(SingleArm):
        def __init__(self) -> None:  # not built: applies() reads only its class and flags
            self.has_gripper = True

    class Bare(SingleArm):
        pass

    plain = object.__new__(Bare)
    plain.has_gripper = True
    assert not libero_control.applies(Subclass())  # a subclass may control otherwise
    gripperless = object.__new__(SingleArm)
    gripperless.has_gripper = False
    assert not libero_control.applies(gripperless)
    own = object.__new__(SingleArm)
    own.has_gripper = True
    assert libero_control.applies(own)
    own.grip_action = lambda **kw: None  # an instance's own grip_action: robosuite's control would call it
    assert not libero_control.applies(own)
    assert libero_control.install(type("Scene", (), {"robots": [gripperless]})()) == 0


@pytest.mark.parametrize("owner, name", [("SingleArm", "control"), ("SingleArm", "action_limits"),
                                         ("Manipulator", "grip_action"), ("Robot", "torque_limits"),
                                         ("Robot", "action_dim")])
def test_a_patched_robosuite_class_is_not_robosuites_own_code(monkeypatch, owner, name):
    import functools

    with libero_env._quiet():
        from robosuite.robots.manipulator import Manipulator
        from robosuite.robots.robot import Robot
        from robosuite.robots.single_arm import SingleArm
    kind = {"SingleArm": SingleArm, "Manipulator": Manipulator, "Robot": Robot}[owner]
    own = object.__new__(SingleArm)
    own.has_gripper = True
    assert libero_control.applies(own)
    original = vars(kind)[name]
    if isinstance(original, property):
        patched = property(functools.wraps(original.fget)(lambda self: original.fget(self)))
    else:
        patched = functools.wraps(original)(lambda self, *a, **kw: original(self, *a, **kw))
    monkeypatch.setattr(kind, name, patched)  # a wrapper that says it is robosuite's (wraps copies the names)
    assert not libero_control.applies(own)


def test_install_and_uninstall_leave_a_control_that_is_not_theirs():
    with libero_env._quiet():
        from robosuite.robots.single_arm import SingleArm
    robot = object.__new__(SingleArm)
    robot.has_gripper = True

    def theirs(action, policy_step=False):
        return None

    robot.control = theirs
    scene = type("Scene", (), {"robots": [robot]})()
    assert libero_control.install(scene) == 0 and robot.control is theirs
    libero_control.uninstall(scene)
    assert robot.control is theirs
