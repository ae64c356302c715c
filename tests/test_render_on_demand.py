"""Render on demand: a frame is drawn only when the policy (at a replan) or the video reads it.

Rendering never moves the physics, so a camera policy with chunks gets bit-identical actions
and outcomes whether every step is rendered or only the ones somebody reads; the video keeps
one frame per period of ``video_fps`` and the step column ``observation.images.<camera>`` names
the frame that shows each step (-1 where the video has none).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from assay.run import InlineExecutor, prepare_campaign, rollout, run_campaign
from assay.run.recorder import records_frame
from assay.sim import SupportsFramesOnDemand, default_registry, make_env, perturbed
from assay.spec import (
    NOMINAL,
    CameraSpec,
    EpisodeJob,
    Pipeline,
    PolicySpec,
    ResolvedPolicy,
    campaign_from_data,
    episode_key,
)
from assay.store import Store, read_video, video_relpath
from assay.testing import ImageChunkPolicy

CAMERA = (CameraSpec(name="front", width=32, height=32),)
HORIZON = 30


@pytest.mark.parametrize(("fps", "control_hz", "steps"), [
    (16.0, 80.0, [0, 5, 10, 15]),
    (30.0, 80.0, [0, 3, 6, 8, 11, 14, 16, 19]),  # floor(i * 30 / 80) advances there
    (None, 80.0, list(range(20))),
    (80.0, 80.0, list(range(20))),
    (200.0, 80.0, list(range(20))),  # above the control rate: every step, never more
    (1.0, 80.0, [0]),
])
def test_a_video_keeps_the_first_step_of_each_frame_period(fps, control_hz, steps):
    assert [i for i in range(20) if records_frame(i, fps, control_hz)] == steps


def _jobs(task, seeds, video_fps, replan_every=None, pipeline=Pipeline.LOCKSTEP):
    policy = ResolvedPolicy(PolicySpec(name="pixels", entrypoint="assay.testing.fakes:ImageChunkPolicy"), "1")
    return [EpisodeJob("c", task, NOMINAL, policy, i, s, episode_key(task, NOMINAL, policy, s, video_fps=video_fps),
                       task.instruction, replan_every, pipeline, video_fps=video_fps) for i, s in enumerate(seeds)]


class _CountingRenders:
    """Counts the frames a Meta-World environment's renderer draws (the real renderer does the work)."""

    def __init__(self, env):
        self.count = 0
        renderer = env._renderer
        draw = renderer.render

        def counted(*args, **kwargs):
            self.count += 1
            return draw(*args, **kwargs)

        renderer.render = counted


def _run(envs, jobs, on_demand, pipeline=None):
    policy = ImageChunkPolicy(camera="front", horizon=5, dim=4)
    recorders = rollout(envs, policy, jobs, pipeline=pipeline, render_on_demand=on_demand)
    return policy, recorders


@pytest.mark.sim
@pytest.mark.parametrize(("pipeline", "replan_every"), [(Pipeline.LOCKSTEP, None), (Pipeline.DECOUPLED, 3)])
def test_render_on_demand_gives_the_actions_and_outcomes_of_rendering_every_step(pipeline, replan_every):
    task = default_registry().get("metaworld/push@1").model_copy(update={"cameras": CAMERA, "horizon": HORIZON})
    raw = [make_env(task) for _ in range(2)]
    try:
        counters = [_CountingRenders(env) for env in raw]
        envs = [perturbed(env, NOMINAL) for env in raw]  # as a worker wraps them: the wrapper passes it on
        assert all(isinstance(env, SupportsFramesOnDemand) for env in envs)
        jobs = _jobs(task, [11, 12], video_fps=16.0, replan_every=replan_every, pipeline=pipeline)
        every_policy, every = _run(envs, jobs, on_demand=False)
        rendered_every = [c.count for c in counters]
        for counter in counters:
            counter.count = 0
        lazy_policy, lazy = _run(envs, jobs, on_demand=True)
        rendered_lazy = [c.count for c in counters]
    finally:
        for env in raw:
            env.close()
    assert every_policy.requests == lazy_policy.requests > len(jobs)
    for a, b in zip(every, lazy, strict=True):
        assert a.steps == b.steps == HORIZON
        assert np.array_equal(np.asarray(a.actions), np.asarray(b.actions))  # bit-identical
        assert np.array_equal(np.asarray(a.states), np.asarray(b.states))
        assert a.outcome == b.outcome and a.rewards == b.rewards and a.trajectory_hash() == b.trajectory_hash()
        assert a.frame_indices == b.frame_indices
        assert all(np.array_equal(x, y) for x, y in zip(a.frames["front"], b.frames["front"], strict=True))
        assert len(a.frames["front"]) == HORIZON // 5  # a video at 16 frames/s of steps at 80 Hz
    assert rendered_every == [1 + HORIZON] * 2  # the reset and every step
    every_r = replan_every or 5
    read = {i for i in range(1, HORIZON) if i % every_r == 0 or i % 5 == 0}  # replans and video frames
    assert rendered_lazy == [1 + len(read)] * 2  # the reset, then only the frames somebody reads


@pytest.mark.sim
def test_a_campaign_records_its_video_at_video_fps_and_the_frame_of_each_step(tmp_path: Path):
    data = {"name": "fps", "seed": 3, "episodes": 1, "horizon": 12, "video_fps": 20,
            "cameras": [{"name": "front", "width": 32, "height": 32}], "tasks": ["metaworld/reach@1"],
            "policies": [{"name": "pixels", "entrypoint": "assay.testing.fakes:ImageChunkPolicy",
                          "params": {"horizon": 5}}]}
    with Store(tmp_path / "store") as store:
        campaign = prepare_campaign(campaign_from_data(data))
        run_campaign(campaign, store, InlineExecutor(tmp_path / "store"))
        (record,) = store.catalog.episodes(campaign="fps")
        table = store.steps(record)
        frames = read_video(Path(store.data_root), video_relpath(record.key, "front"))
    assert record.steps == 12 and record.provenance["run"]["video_fps"] == 20
    assert table.column("observation.images.front").to_pylist() == [0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1]
    assert frames.shape == (3, 32, 32, 3)
    assert campaign.jobs[0].key != prepare_campaign(campaign_from_data({**data, "video_fps": None})).jobs[0].key


class _ExpertSeeingKeys:
    """The Meta-World expert (reads no frame), keeping every observation key it was given."""

    def __init__(self):
        from assay.policies import ExpertPolicy

        self.expert, self.keys = ExpertPolicy(), set()

    def reset(self, context):
        self.expert.reset(context)

    def reads_frames(self):
        return self.expert.reads_frames()

    def act(self, observations):
        self.keys |= set(observations)
        return self.expert.act(observations)


@pytest.mark.sim
def test_a_policy_that_reads_no_frame_renders_only_the_videos_frames_with_the_same_trajectory():
    task = default_registry().get("metaworld/push@1").model_copy(update={"cameras": CAMERA, "horizon": HORIZON})
    env = make_env(task)
    try:
        counter = _CountingRenders(env)
        policy = ResolvedPolicy(PolicySpec(name="expert", builtin="expert"), "1")
        jobs = [EpisodeJob("c", task, NOMINAL, policy, 0, 7, episode_key(task, NOMINAL, policy, 7, video_fps=16.0),
                           task.instruction, video_fps=16.0)]
        runs, counts, seen = [], [], []
        for on_demand in (False, True):
            counter.count, expert = 0, _ExpertSeeingKeys()
            runs.append(rollout([perturbed(env, NOMINAL)], expert, jobs, render_on_demand=on_demand)[0])
            counts.append(counter.count)
            seen.append(expert.keys)
    finally:
        env.close()
    every, lazy = runs
    assert every.steps == lazy.steps == HORIZON  # the expert answers one action a step: a replan every step
    assert np.array_equal(np.asarray(every.actions), np.asarray(lazy.actions))  # bit-identical
    assert np.array_equal(np.asarray(every.states), np.asarray(lazy.states))
    assert every.trajectory_hash() == lazy.trajectory_hash() and every.frame_indices == lazy.frame_indices
    assert all(np.array_equal(x, y) for x, y in zip(every.frames["front"], lazy.frames["front"], strict=True))
    assert counts == [1 + HORIZON, 1 + HORIZON // 5 - 1]  # the reset (frame 0), then frames 5, 10, 15, 20, 25 only
    assert all(not any(k.startswith(("image.", "depth.")) for k in keys) for keys in seen)  # never given a frame
    assert all("state" in keys for keys in seen)


def test_a_policy_without_the_hook_reads_frames_and_the_builtins_say_what_they_read():
    from assay.policies import ExpertPolicy, RandomPolicy, reads_frames

    assert reads_frames(ImageChunkPolicy()) is True  # no hook: assumed to read them
    assert reads_frames(ExpertPolicy()) is False and reads_frames(RandomPolicy()) is False
