"""A LIBERO environment keeps at most ``SCENES_KEPT`` LIBERO-PRO scenes (each its own model and GL context, ~0.8 GB):
the least recently used is closed and freed before another is built, and a scene built again gives the same
episode, bit for bit (state, goal positions and camera frames).
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from assay.sim import default_registry, make_env, resolve_variant
from assay.sim.libero_env import SCENES_KEPT
from assay.spec import CameraSpec

pytestmark = [pytest.mark.libero, pytest.mark.sim, pytest.mark.slow]

SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"
ACTIONS = [np.array([0.3, -0.2, 0.1, 0.0, 0.0, 0.05, -1.0]), np.array([0.0, 0.4, -0.3, 0.1, 0.0, 0.0, 1.0])]


def _episode(env, seed, variant=None) -> list[dict[str, np.ndarray]]:
    """The reset's observation and two steps' (the same actions each time), copied."""
    observations = [env.reset(seed, variant)]
    observations += [env.step(action).observation for action in ACTIONS]
    return [{name: np.array(value, copy=True) for name, value in observation.items()} for observation in observations]


def test_scenes_beyond_the_bound_are_closed_and_freed_and_a_rebuilt_scene_repeats_its_episode():
    task = default_registry().get(SOUP).model_copy(
        update={"cameras": (CameraSpec(name="agentview", width=32, height=32),)})
    env = make_env(task)
    try:
        assert list(env._scenes) == [()]  # the nominal scene, built with the environment
        nominal = _episode(env, 3)
        first = weakref.ref(env._scene)
        swapped = _episode(env, 3, resolve_variant({"libero.swap": "pro"}, task))
        assert len(env._scenes) <= SCENES_KEPT and list(env._scenes)[-1] == ("swap",)
        if SCENES_KEPT == 1:
            gc.collect()
            assert first() is None  # closed and collected: its model, data and GL context are gone
        assert not np.array_equal(swapped[0]["privileged.goal"], nominal[0]["privileged.goal"])  # another scene
        again = _episode(env, 3)  # the nominal scene once more: rebuilt if it was closed
        assert len(env._scenes) <= SCENES_KEPT and list(env._scenes)[-1] == ()
        assert [sorted(o) for o in again] == [sorted(o) for o in nominal]
        assert "image.agentview" in nominal[0] and nominal[0]["image.agentview"].std() > 5  # a frame, not a blank
        for before, after in zip(nominal, again, strict=True):
            for name in before:
                assert before[name].tobytes() == after[name].tobytes(), name  # bit-identical
    finally:
        env.close()
    assert not env._scenes
    with pytest.raises(RuntimeError, match="this LIBERO environment is closed"):
        _ = env.simulator
