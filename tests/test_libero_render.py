"""LIBERO renders only what is read: ``cameras: []`` draws nothing and writes no video, the default video
(4 frames/s) is all a policy that reads no frame costs, and the trajectory is the one every-step rendering gives.

Each test builds a LIBERO simulator (6-12 s on the 2-core CI machine) and renders 224 px frames: slow.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from assay.policies import ExpertPolicy
from assay.run import InlineExecutor, prepare_campaign, rollout, run_campaign
from assay.sim import make_env, perturbed
from assay.sim.render import CameraRenderer
from assay.spec import NOMINAL, campaign_from_data
from assay.store import Store

pytestmark = [pytest.mark.libero, pytest.mark.sim, pytest.mark.slow]

SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket"


@pytest.fixture
def counted(monkeypatch):
    """Every camera frame any LIBERO renderer draws in this process, counted (the real renderer draws it)."""
    calls: list[str] = []
    draw = CameraRenderer.render_camera

    def render_camera(self, data, camera, *args, **kwargs):
        calls.append(camera)
        return draw(self, data, camera, *args, **kwargs)

    monkeypatch.setattr(CameraRenderer, "render_camera", render_camera)
    return calls


def _campaign(name: str, **extra) -> dict:
    return {"name": name, "seed": 0, "episodes": 1, "horizon": 12, "envs_per_worker": 1, "tasks": [SOUP],
            "policies": [{"name": "expert", "builtin": "expert"}], **extra}


def test_cameras_empty_draws_no_frame_and_writes_no_video(tmp_path: Path, counted):
    planned = prepare_campaign(campaign_from_data(_campaign("blind", cameras=[])))
    assert planned.tasks[0].cameras == ()
    with Store(tmp_path / "store") as store:
        run_campaign(planned, store, InlineExecutor(tmp_path / "store"))
        (record,) = store.catalog.episodes(campaign="blind")
        columns = store.steps(record).column_names
    assert record.steps == 12 and counted == []  # not one frame drawn
    assert list((tmp_path / "store").rglob("*.mp4")) == []
    assert not any(c.startswith("observation.images") for c in columns) and "renderer" not in record.provenance


def test_the_default_video_is_4_fps_and_a_policy_reading_no_frame_renders_only_its_frames(counted):
    planned = prepare_campaign(campaign_from_data(_campaign("video")))
    (job,) = planned.jobs
    assert job.video_fps == 4.0 and [c.name for c in job.task.cameras] == ["agentview", "wrist"]
    env = make_env(job.task)
    try:
        runs, draws = [], []
        for on_demand in (False, True):
            counted.clear()
            runs.append(rollout([perturbed(env, NOMINAL)], ExpertPolicy(), [job], render_on_demand=on_demand)[0])
            draws.append(len(counted))
    finally:
        env.close()
    every, lazy = runs
    assert every.steps == lazy.steps == 12
    assert np.array_equal(np.asarray(every.actions), np.asarray(lazy.actions))  # bit-identical
    assert np.array_equal(np.asarray(every.states), np.asarray(lazy.states))
    assert every.trajectory_hash() == lazy.trajectory_hash() and every.frame_indices == lazy.frame_indices
    for camera in ("agentview", "wrist"):
        assert len(lazy.frames[camera]) == 3  # steps 0, 5 and 10 at 4 frames/s of a 20 Hz task
        assert all(np.array_equal(a, b) for a, b in zip(every.frames[camera], lazy.frames[camera], strict=True))
    assert draws == [2 * 13, 2 * 3]  # two cameras: reset and every step, then the video frames only
