"""A worker keeps the environments it built, up to its backend's limit of tasks (``sim.tasks_kept``).

A LIBERO environment holds ~1.1 GB, so a worker keeps one LIBERO task's environments at a time: moving
to the next task closes the last. Which environments a worker kept never changes an episode.
"""

from __future__ import annotations

import dataclasses

import pytest

from assay.run import Worker
from assay.sim import default_registry, tasks_kept
from assay.sim.backends import backends
from assay.spec import NOMINAL, EpisodeJob, PolicySpec, ResolvedPolicy, episode_key

EXPERT = ResolvedPolicy(PolicySpec(name="expert", builtin="expert"), "builtin-1")


def _job(name: str, seed: int) -> EpisodeJob:
    task = default_registry().get(name).model_copy(update={"horizon": 15})
    return EpisodeJob("c", task, NOMINAL, EXPERT, 0, seed, episode_key(task, NOMINAL, EXPERT, seed), task.instruction)


def test_libero_keeps_one_task_and_other_backends_keep_all():
    soup = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket"
    assert tasks_kept(default_registry().get(soup)) == 1
    assert tasks_kept(default_registry().get("metaworld/reach@1")) is None


@pytest.mark.sim
def test_a_worker_closes_the_least_recently_used_task_beyond_its_limit_with_the_same_episodes(tmp_path, monkeypatch):
    order = [_job("metaworld/reach@1", 3), _job("metaworld/push@1", 4), _job("metaworld/reach@1", 5)]
    unlimited = Worker(tmp_path / "a")
    try:
        free = [unlimited.roll([job])[0].trajectory_hash() for job in order]
        assert len(unlimited._envs) == 2
    finally:
        unlimited.close()
    registry = backends()  # the backend registry's rows: Meta-World as if it kept one task's environments
    monkeypatch.setitem(registry, "metaworld", dataclasses.replace(registry["metaworld"], tasks_kept=1))
    limited = Worker(tmp_path / "b")
    closed: list[str] = []
    try:
        kept_after, hashes = [], []
        for job in order:
            for pool in limited._envs.values():
                for env in pool:  # record each close as it happens
                    close = env.close
                    env.close = lambda close=close, env=env: (closed.append(env.task.id), close())
            hashes.append(limited.roll([job])[0].trajectory_hash())
            kept_after.append([key[0] for key in limited._envs])
    finally:
        limited.close()
    assert kept_after == [["metaworld/reach@1"], ["metaworld/push@1"], ["metaworld/reach@1"]]
    assert closed[:2] == ["metaworld/reach@1", "metaworld/push@1"]  # each closed when the next task came
    assert hashes == free  # rebuilding never changes an episode


@pytest.mark.sim
def test_the_asset_cache_is_turned_off_only_before_the_first_compile_and_a_freed_spec_leaves_the_model_working():
    import subprocess
    import sys

    code = ("from assay.sim.mujoco_memory import disable_asset_cache, release_compiler_memory\n"
            "first, second = disable_asset_cache(), disable_asset_cache()\n"
            "import mujoco\n"
            "m = mujoco.MjModel.from_xml_string('<mujoco><worldbody><body><freejoint/><geom size=\".1\"/></body>"
            "</worldbody></mujoco>')\n"
            "freed = release_compiler_memory()\n"
            "d = mujoco.MjData(m)\n"
            "mujoco.mj_step(m, d)\n"
            "print(first, second, freed, d.qpos[2] < 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False", "True", "True"]  # once (mujoco is imported after), freed, and it still falls
