"""TaskSpec.observation_spec() and action_spec(): dm_env-style specs that validate and generate values."""

from __future__ import annotations

import numpy as np
import pytest

from assay.errors import SpecError
from assay.spec import ActionSpec, Array, BoundedArray, CameraSpec
from assay.spec import arrays as A
from assay.testing import fake_task


def _camera_task():
    return fake_task().model_copy(update={"state_dim": 4, "action": ActionSpec(dim=3, low=-2.0, high=0.5),
                                          "cameras": (CameraSpec(name="front", width=32, height=16, depth=True),
                                                      CameraSpec(name="top", width=16, height=16))})


def test_the_observation_spec_names_every_array_a_task_promises_with_its_shape_and_dtype():
    specs = _camera_task().observation_spec()
    assert list(specs) == ["state", "image.front", "depth.front", "image.top"]
    assert (specs["state"].shape, specs["state"].dtype) == ((4,), np.dtype(np.float64))
    assert (specs["image.front"].shape, specs["image.front"].dtype) == ((16, 32, 3), np.dtype(np.uint8))
    assert (specs["depth.front"].shape, specs["depth.front"].dtype) == ((16, 32), np.dtype(np.float32))
    assert all(name == spec.name for name, spec in specs.items())
    assert list(fake_task().observation_spec()) == ["state"]  # no camera: the state alone


def test_the_action_spec_is_bounded_by_the_task_action_box():
    spec = _camera_task().action_spec()
    assert isinstance(spec, BoundedArray)
    assert (spec.shape, spec.minimum, spec.maximum, spec.name) == ((3,), -2.0, 0.5, "action")
    assert spec.generate_value().tolist() == [-2.0, -2.0, -2.0]  # dm_env's: the minimum
    drawn = spec.sample(np.random.default_rng(0))
    assert drawn.shape == (3,) and np.all((drawn >= -2.0) & (drawn <= 0.5))
    np.testing.assert_array_equal(spec.validate(np.array([0.5, -2.0, 0.0])), [0.5, -2.0, 0.0])  # edges included


@pytest.mark.parametrize(("value", "message"), [
    (np.zeros(2), A.SHAPE_MISMATCH.format(name="action", shape=(2,), expected=(3,))),
    (np.zeros(3, dtype=np.int64), A.DTYPE_MISMATCH.format(name="action", dtype="int64", expected="floating point")),
    (np.array([0.0, np.nan, 0.0]), A.NOT_FINITE.format(name="action")),
    (np.array([0.0, 0.6, 0.0]), A.OUT_OF_BOUNDS.format(name="action", minimum=-2.0, maximum=0.5)),
])
def test_validate_names_the_first_thing_that_does_not_fit(value, message):
    with pytest.raises(SpecError) as raised:
        _camera_task().action_spec().validate(value)
    assert str(raised.value) == message


def test_a_floating_spec_takes_any_float_width_and_an_image_only_uint8():
    state, image = Array((2,), np.dtype(np.float64), "state"), _camera_task().observation_spec()["image.top"]
    assert state.conforms(np.zeros(2, np.float32)) and state.conforms(np.zeros(2))
    assert not state.conforms(np.zeros(2, np.int32)) and not state.conforms(np.zeros(3))
    assert image.conforms(image.generate_value()) and image.generate_value().dtype == np.uint8
    assert not image.conforms(np.zeros((16, 16, 3), np.float32))  # a float frame is not a camera frame
    with pytest.raises(SpecError, match="image.top: dtype int16, expected uint8"):
        image.validate(np.zeros((16, 16, 3), np.int16))
