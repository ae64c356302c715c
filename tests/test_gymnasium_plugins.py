"""The generic Gymnasium backend on real plugin packages: gymnasium-robotics (FetchReach) and gym-pusht.

Success is read from the environment's own ``info['is_success']``; namespaced ids import their plugin; a
``module:ID`` id imports the module named; image observations are cameras, recorded as video.
"""

from __future__ import annotations

import numpy as np
import pytest

from assay.errors import SpecError, UnsupportedError
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.sim import default_registry, make_env
from assay.spec import SuccessMode, campaign_from_data
from assay.store import Outcome, Store, read_video, video_relpath
from tests.gym_plugin import ReachController

pytestmark = pytest.mark.sim

FETCH = "gymnasium/gymnasium_robotics:FetchReach-v4"


def run(tmp_path, task: str, policy: str, episodes: int = 4, name: str = "gym"):
    data = {"name": name, "seed": 11, "episodes": episodes, "tasks": [task], "policies": [policy]}
    with Store(tmp_path) as store:
        run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(tmp_path))
        return store, sorted(store.catalog.episodes(campaign=name), key=lambda r: r.seed)


def first_success_in_gymnasium(seed: int) -> int | None:
    """The same episode driven through gymnasium directly: the first step whose info says is_success."""
    import gymnasium as gym
    import gymnasium_robotics  # noqa: F401 - registers FetchReach

    env = gym.make("FetchReach-v4")
    obs, _ = env.reset(seed=seed)
    controller = ReachController()
    for step in range(env.spec.max_episode_steps):
        state = np.concatenate([obs["achieved_goal"], obs["desired_goal"], obs["observation"]])[None]
        obs, _, _, _, info = env.step(controller.act({"state": state})[0])
        if info["is_success"]:
            return step
    return None


def test_fetch_reach_successes_are_counted(tmp_path):
    task = default_registry().get(FETCH)
    assert task.success is SuccessMode.ANY_STEP and task.state_dim == 16 and task.action.dim == 4
    _, records = run(tmp_path, FETCH, "tests.gym_plugin:ReachController")
    assert [r.outcome for r in records] == [Outcome.SUCCESS] * 4
    for record in records:  # golden: the step gymnasium itself first flags
        assert record.success_step == first_success_in_gymnasium(record.seed) == record.steps - 1


def test_a_policy_that_never_reaches_times_out_on_fetch_reach(tmp_path):
    _, records = run(tmp_path / "still", FETCH, "tests.gym_plugin:StillPolicy", episodes=3, name="still")
    for record in records:
        expected = first_success_in_still(record.seed)
        assert record.outcome is (Outcome.SUCCESS if expected is not None else Outcome.TIMEOUT)
        assert record.success_step == expected
    assert any(r.outcome is Outcome.TIMEOUT for r in records)


def first_success_in_still(seed: int) -> int | None:
    import gymnasium as gym
    import gymnasium_robotics  # noqa: F401

    env = gym.make("FetchReach-v4")
    env.reset(seed=seed)
    for step in range(env.spec.max_episode_steps):
        if env.step(np.zeros(4))[4]["is_success"]:
            return step
    return None


def test_a_namespaced_id_imports_its_plugin_and_resolves():
    task = default_registry().get("gymnasium/gym_pusht/PushT-v0")
    assert task.id == "gymnasium/gym_pusht/PushT-v0@1" and task.env_name == "gym_pusht/PushT-v0"
    assert task.success is SuccessMode.ANY_STEP and task.state_dim == 5 and task.action.dim == 2
    assert task.control_hz == 10.0 and task.horizon == 300 and task.action.high == 512.0
    env = make_env(task)
    try:
        first = env.reset(3)["state"]
        np.testing.assert_array_equal(first, make_env(task).reset(3)["state"])
        assert env.step(np.full(2, 256.0)).observation["state"].shape == (5,)
    finally:
        env.close()


def test_a_plugin_module_that_is_missing_is_one_clear_error():
    with pytest.raises(UnsupportedError, match="cannot import the plugin module 'no_such_plugin'"):
        default_registry().get("gymnasium/no_such_plugin:Thing-v0")
    with pytest.raises(SpecError, match="gymnasium/namespace/ID"):
        default_registry().get("gymnasium/:Thing-v0")


def test_image_observations_are_cameras_recorded_as_video(tmp_path):
    ref = "gymnasium/tests.gym_plugin:AssayTest/PushTPixels-v0"
    task = default_registry().get(ref)
    assert [(c.name, c.width, c.height) for c in task.cameras] == [("pixels", 96, 96)]
    assert task.state_dim == 2 and task.observations == ("state", "image.pixels")  # agent_pos, not 27,650 numbers
    data = {"name": "pixels", "seed": 2, "episodes": 1, "horizon": 6, "tasks": [ref],
            "policies": ["tests.gym_plugin:StillPolicy"]}
    with Store(tmp_path) as store:
        plan = prepare_campaign(campaign_from_data(data))
        run_campaign(plan, store, InlineExecutor(tmp_path))
        (record,) = store.catalog.episodes(campaign="pixels")
        assert record.outcome is Outcome.TIMEOUT and record.steps == 6
        frames = read_video(tmp_path, video_relpath(record.key, "pixels"))
    env = make_env(plan.jobs[0].task)
    seen = [env.reset(record.seed)["image.pixels"]]
    seen += [env.step(np.zeros(2)).observation["image.pixels"] for _ in range(5)]
    assert frames.shape == (6, 96, 96, 3)
    assert np.abs(frames.astype(int) - np.asarray(seen, int)).mean() < 6  # H.264: close, not exact
