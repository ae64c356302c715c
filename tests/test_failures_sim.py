"""Events from MuJoCo state, exact replay, and the point of no return on real Meta-World episodes."""

from __future__ import annotations

import numpy as np
import pytest

from assay.failures import Category, Replayer, bisect_ponr, categorize, scan_ponr, step_arrays
from assay.failures.ponr import recoverable_fn
from assay.run import InlineExecutor
from assay.sim import default_registry, resolve_variant
from assay.spec import NOMINAL, EpisodeJob, PolicySpec, ResolvedPolicy, episode_key
from assay.store import Store

pytestmark = pytest.mark.sim


def _job(task, variant, policy: PolicySpec, seed: int) -> EpisodeJob:
    resolved = ResolvedPolicy(policy, "1")
    return EpisodeJob("t", task, variant, resolved, 0, seed, episode_key(task, variant, resolved, seed), task.instruction)


def test_events_recorded_and_expert_episode_is_clean(tmp_path):
    task = default_registry().get("metaworld/pick-place")
    store = Store(tmp_path)
    [record] = InlineExecutor(tmp_path).run([[_job(task, NOMINAL, PolicySpec(name="expert", builtin="expert"), 3)]])
    arrays = step_arrays(store.steps(record))
    assert record.outcome.value == "success"
    assert arrays["info.grasped"].max() == 1.0 and arrays["info.lifted"].max() == 1.0
    assert arrays["info.contact"].sum() >= arrays["info.grasped"].sum()
    assert arrays["info.collision"].sum() == 0 and arrays["info.unstable"].sum() == 0
    assert arrays["info.goal_progress"][-1] > 0.5 > arrays["info.goal_progress"][0]
    assert categorize(record, arrays).category is None


def test_replay_is_exact_under_a_variant(tmp_path):
    task = default_registry().get("metaworld/pick-place").model_copy(update={"horizon": 60})
    variant = resolve_variant({"action.noise": 0.3, "friction": 0.5}, task)
    store = Store(tmp_path)
    job = _job(task, variant, PolicySpec(name="degraded", builtin="degraded-expert", params={"action_noise": 0.5}), 11)
    [record] = InlineExecutor(tmp_path).run([[job]])
    arrays = step_arrays(store.steps(record))
    actions = store.steps(record).column("action").combine_chunks().flatten().to_numpy().reshape(-1, 4)
    replayer = Replayer(task, variant)
    try:
        replayed = replayer.replay(record.seed, actions)
    finally:
        replayer.close()
    assert np.array_equal(np.stack(replayed.states[:-1]), arrays["observation.state"])
    assert np.array_equal([t.info["ee_obj_dist"] for t in replayed.transitions], arrays["info.ee_obj_dist"])


def test_point_of_no_return_bisection_equals_scan():
    task = default_registry().get("metaworld/reach").model_copy(update={"horizon": 60})
    actions = np.tile(np.array([0.0, -1.0, 1.0, 0.0]), (60, 1))  # drive the hand away from every goal
    replayer = Replayer(task, NOMINAL)
    try:
        fn = recoverable_fn(replayer, 5, actions, task.horizon)
        bisected, calls = bisect_ponr(fn, len(actions))
        scanned = scan_ponr(fn, len(actions))
    finally:
        replayer.close()
    assert bisected == scanned
    assert bisected is not None and 0 < bisected < len(actions)
    assert calls < 10


def test_a_policy_that_never_closes_the_gripper_is_a_grasp_or_approach_failure(tmp_path):
    task = default_registry().get("metaworld/pick-place").model_copy(update={"horizon": 120})
    store = Store(tmp_path)
    job = _job(task, NOMINAL, PolicySpec(name="open-gripper", entrypoint="tests.failure_policies:OpenGripperExpert"), 3)
    [record] = InlineExecutor(tmp_path).run([[job]])
    categorized = categorize(record, step_arrays(store.steps(record)))
    assert record.outcome.value == "timeout"
    assert categorized.category in (Category.GRASP_FAILURE, Category.STAGNATION), categorized
