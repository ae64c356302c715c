"""What a BC network reads and predicts: rotations in 6-D form, floors relative to each quantity's scale,
action dimensions the data never varies kept exact, and the state layouts they are computed from."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from assay.errors import AssayError
from assay.learning.bc import check_demos, input_rows
from assay.learning.data import Demo
from assay.policies.features import (
    FIXED_TOLERANCE,
    REL_FLOOR,
    ActionHead,
    InputFeatures,
    expand,
    matrix_from_axis_angle,
    matrix_from_quaternion,
)
from assay.sim.libero_env import quat_to_axis_angle
from assay.spec.state_layout import LAYOUTS, Quantity, Segment, StateLayout, environment_layout, state_layout


def _pointing_down(yaw_deg: np.ndarray, tilt_deg: float = 0.0) -> np.ndarray:
    """(x, y, z, w) quaternions of a hand pointing down (180 degrees about x), turned about z and tilted."""
    down = Rotation.from_euler("x", 180, degrees=True)
    yaw = Rotation.from_euler("z", np.asarray(yaw_deg, dtype=float).reshape(-1, 1), degrees=True)
    return (yaw * Rotation.from_euler("y", tilt_deg, degrees=True) * down).as_quat()


def test_rotation_matrices_are_scipys_for_axis_angles_of_any_angle_and_quaternions_of_either_sign():
    quats = Rotation.random(200, random_state=3).as_quat()
    truth = Rotation.from_quat(quats).as_matrix()
    openpi = np.array([quat_to_axis_angle(q) for q in quats])  # angles above pi where w < 0, as openpi's data
    flipped = np.array([quat_to_axis_angle(-q) for q in quats])
    assert (np.linalg.norm(openpi, axis=1) > np.pi).any()
    for matrices in (matrix_from_axis_angle(openpi), matrix_from_axis_angle(flipped),
                     matrix_from_quaternion(quats), matrix_from_quaternion(-quats)):
        np.testing.assert_allclose(matrices, truth, atol=1e-12)
    assert np.array_equal(matrix_from_axis_angle(np.zeros((1, 3)))[0], np.eye(3))
    assert np.array_equal(matrix_from_quaternion(np.zeros((2, 4))), np.zeros((2, 3, 3)))  # a padded, absent object


def test_libero_orientation_is_continuous_in_6d_where_openpis_axis_angle_jumps():
    """The hand pointing down is where openpi's axis-angle passes its wrap: two poses 0.2 degrees apart give
    rotation vectors ~2 pi apart, and 6-D features 0.004 apart."""
    quats = _pointing_down(np.array([-0.1, 0.1]), tilt_deg=0.5)
    quats[quats[:, 3] < 0] *= -1  # robosuite reports either sign; make the two differ in the sign of x only
    vectors = np.array([quat_to_axis_angle(q) for q in quats])
    layout = state_layout("libero", 8)
    states = np.zeros((2, 8))
    states[:, 3:6] = vectors
    features, owners = expand(states, layout)
    assert features.shape == (2, 3 + 6 + 2) and owners == [0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2]
    rotation = features[:, 3:9]
    assert np.abs(vectors[0] - vectors[1]).max() > 1.0  # the raw input jumps (here across the wrap)
    assert np.abs(rotation[0] - rotation[1]).max() < 0.01  # the learner's input does not


def test_floors_are_relative_to_each_quantitys_scale_not_absolute():
    """An orientation the data barely moves (the expert never turns the hand) gets the rotation's floor, so a
    10-degree turn at run time is a moderate input; position dims keep their own spread; a constant dim is 0."""
    rng = np.random.default_rng(0)
    n = 400
    yaw = rng.normal(0.0, 0.2, n)  # ~0.004 rad of orientation spread, as in LIBERO's demos
    states = np.zeros((n, 8))
    states[:, 0:3] = rng.normal([0.0, 0.1, 1.0], [0.1, 0.05, 0.002], (n, 3))
    states[:, 3:6] = np.array([quat_to_axis_angle(q) for q in _pointing_down(yaw)])
    states[:, 6] = 0.04  # a constant finger
    states[:, 7] = rng.uniform(-0.04, -0.02, n)
    fitted = InputFeatures.fit(states, state_layout("libero", 8))
    position, rotation, fingers = fitted.scale[0:3], fitted.scale[3:9], fitted.scale[9:11]
    np.testing.assert_allclose(position[:2], states[:, :2].std(0))  # above the floor: their own spread
    assert position[2] == pytest.approx(REL_FLOOR * states[:, 0].std())  # floored at 5% of x's spread (metres)
    assert np.all(rotation[fitted.used[3:9]] >= REL_FLOOR) and fitted.used[9] == np.False_ and fitted.used[10]
    assert fingers[1] == pytest.approx(states[:, 7].std())
    turned = states[:1].copy()
    turned[0, 3:6] = quat_to_axis_angle(_pointing_down(np.array([10.0]))[0])
    z = fitted.apply(turned)[0]
    assert np.abs(z[3:9]).max() < 5.0  # with an absolute 1e-3 floor the same turn gave ~170
    legacy = (turned[0, 3:6] - states[:, 3:6].mean(0)) / np.maximum(states[:, 3:6].std(0), 1e-3)
    assert np.abs(legacy).max() > 50
    assert z[9] == 0.0  # the constant finger is fed as 0, whatever its value at run time
    wide = states[:1].copy()
    wide[0, 6] = 0.0
    assert fitted.apply(wide)[0, 9] == 0.0


def test_action_dims_the_data_never_varies_are_kept_at_their_value():
    rng = np.random.default_rng(1)
    actions = np.zeros((300, 7))
    actions[:, :3] = rng.uniform(-1, 1, (300, 3))
    actions[:, 3:5] = 0.0  # never turned
    actions[:, 5] = 0.25 + rng.normal(0, FIXED_TOLERANCE / 10, 300)  # near-constant
    actions[:, 6] = np.where(rng.random(300) < 0.5, -1.0, 1.0)
    head = ActionHead.fit(actions)
    assert head.fixed.tolist() == [False] * 3 + [True] * 3 + [False] and head.learned == 4
    np.testing.assert_array_equal(head.targets(actions), actions[:, [0, 1, 2, 6]])
    out = head.assemble(np.full((2, 4), 0.5, np.float32))
    assert out[:, 3:5].tolist() == [[0.0, 0.0]] * 2 and out[0, 5] == pytest.approx(actions[:, 5].mean(), abs=1e-6)
    assert out[:, [0, 1, 2, 6]].tolist() == [[0.5] * 4] * 2
    constant = ActionHead.fit(np.ones((5, 3)))  # nothing would be learned: learn every dim (n = 1 edge case)
    assert constant.learned == 3
    again = ActionHead.from_checkpoint(head.to_checkpoint())
    assert np.array_equal(again.fixed, head.fixed) and np.array_equal(again.values, head.values)


def test_fitted_inputs_round_trip_through_a_checkpoint_and_rows_are_independent():
    rng = np.random.default_rng(2)
    states = rng.normal(size=(50, 39))
    states[:, 14:18] = 0.0  # Meta-World pads an absent second object with zeros
    fitted = InputFeatures.fit(states, state_layout("metaworld", 39))
    again = InputFeatures.from_checkpoint(fitted.to_checkpoint())
    assert np.array_equal(again.apply(states), fitted.apply(states))
    assert np.array_equal(np.concatenate([fitted.apply(states[i:i + 1]) for i in range(50)]), fitted.apply(states))
    assert fitted.width == 39 - 4 * 4 + 4 * 6
    assert not fitted.used[[f for f, o in enumerate(expand(states, fitted.layout)[1]) if o == 5]].any()


def test_layouts_are_declared_per_backend_and_select_keeps_rotations_whole():
    assert state_layout("libero", 8) == LAYOUTS["libero"] and state_layout("metaworld", 39).dim == 39
    other = state_layout("gymnasium", 11)
    assert other.segments == (Segment("state", Quantity.OTHER, 0, 11),)
    proprio = state_layout("metaworld", 39).select((0, 1, 2, 3, 18, 19, 20, 21))
    assert [(s.name, s.quantity, s.start, s.stop) for s in proprio.segments] == [
        ("hand", Quantity.POSITION, 0, 3), ("gripper", Quantity.GRIPPER, 3, 4),
        ("previous_hand", Quantity.POSITION, 4, 7), ("previous_gripper", Quantity.GRIPPER, 7, 8)]
    with pytest.raises(ValueError, match="cut the rotation eef_axis_angle"):
        state_layout("libero", 8).select((0, 1, 2, 3))
    both = state_layout("libero", 8).then(environment_layout("libero", 6), "environment.")
    assert both.dim == 14 and both.segments[-1].name == "environment.goal_positions"
    assert StateLayout.from_list(both.to_list()) == both


def _demo(key: str, task: str, state_dim: int, action_dim: int, environment: int | None = None) -> Demo:
    env = None if environment is None else np.zeros((3, environment))
    return Demo(key, task, "h", "nominal", 0, "episode", np.zeros((3, state_dim)), np.zeros((3, action_dim)),
                environment=env)


def test_bad_demonstrations_are_one_line_errors():
    with pytest.raises(AssayError, match=r"^no demonstrations to train on$"):
        check_demos([])
    mixed = [_demo("a" * 20, "metaworld/reach@1", 39, 4), _demo("b" * 20, "libero/object/x@2", 8, 7)]
    with pytest.raises(AssayError, match=r"state 8 and action 7 \(e.g. bbbb.*state 39 and action 4 \(e.g. aaaa.*"
                                         r"train one model per embodiment") as info:
        check_demos(mixed)
    assert "\n" not in str(info.value)
    blind = [_demo("c" * 20, "libero/object/x@2", 8, 7, 6), _demo("d" * 20, "libero/object/x@2", 8, 7)]
    with pytest.raises(AssayError, match=r"1 of 2 demos recorded no observation.environment_state \(e.g. dddd"):
        input_rows(blind, "state+environment")
    uneven = [_demo("e" * 20, "libero/object/x@2", 8, 7, 6), _demo("f" * 20, "libero/10/y@2", 8, 7, 12)]
    with pytest.raises(AssayError, match=r"disagree on the environment_state's width: \[6, 12\]"):
        input_rows(uneven, "state+environment")
    with pytest.raises(AssayError, match="inputs 'pixels' are not valid; valid: state, state\\+environment"):
        input_rows(blind[:1], "pixels")
    raw, layout = input_rows(blind[:1], "state+environment")
    assert raw.shape == (3, 14) and layout.dim == 14
