"""Several renderers in one process: closing one never corrupts the frames of another.

A worker keeps environments (each with its own GL contexts) and closes some while others live;
mujoco.Renderer.close alone frees its MjrContext in whichever GL context is current, deleting the
framebuffer objects of another renderer that uses the same ids (its frames turn to noise).
"""

from __future__ import annotations

import numpy as np
import pytest

from assay.sim import default_registry, make_env
from assay.spec import CameraSpec

pytestmark = pytest.mark.sim
CAMERA = (CameraSpec(name="front", width=64, height=64),)


def _renderer_scene():
    import mujoco

    model = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><light pos="0 0 3"/><geom type="plane" size="1 1 .1" rgba=".8 .2 .2 1"/>'
        '<body pos="0 0.6 .1"><geom type="box" size=".05 .05 .05" rgba=".1 .8 .1 1"/></body></worldbody></mujoco>')
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    return model, data


def test_closing_a_renderer_that_is_not_current_leaves_the_current_one_intact():
    from assay.sim.render import VIEWS, CameraRenderer

    model, data = _renderer_scene()
    kept, closed = CameraRenderer(model), CameraRenderer(model)
    try:
        closed.render(data, VIEWS["front"], 64, 64)
        before = kept.render(data, VIEWS["front"], 64, 64)[0]  # `kept` is now the current context
        closed.close()
        after = kept.render(data, VIEWS["front"], 64, 64)[0]
        assert len(np.unique(before.reshape(-1, 3), axis=0)) < 64 * 64 / 4  # a scene, not noise
        assert np.array_equal(before, after)
    finally:
        kept.close()


def test_a_worker_closing_one_camera_environment_keeps_the_frames_of_another():
    task = default_registry().get("metaworld/push@1").model_copy(update={"cameras": CAMERA})
    kept, closed = make_env(task), make_env(task)
    try:
        closed.reset(3)
        before = kept.reset(3)["image.front"]
        closed.close()
        assert np.array_equal(kept.reset(3)["image.front"], before)
    finally:
        kept.close()
