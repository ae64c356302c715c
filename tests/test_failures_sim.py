"""Events from MuJoCo state, exact replay, and the point of no return on real Meta-World episodes."""

from __future__ import annotations

import numpy as np
import pytest

from assay.failures import Category, Replayer, bisect_ponr, categorize, find_ponr, scan_ponr, step_arrays
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


def _matrix(table, name: str):
    column = table.column(name).combine_chunks()
    return column.flatten().to_numpy(zero_copy_only=False).reshape(len(table), -1)


def test_a_late_but_recoverable_state_is_not_a_point_of_no_return():
    """Driving the hand away for the whole episode ruins nothing the expert cannot undo with a full budget;
    only the time-limited reading (budget horizon - t) calls the late states lost."""
    task = default_registry().get("metaworld/reach").model_copy(update={"horizon": 60})
    actions = np.tile(np.array([0.0, -1.0, 1.0, 0.0]), (60, 1))
    replayer = Replayer(task, NOMINAL)
    try:
        found = find_ponr(replayer, "k", 5, actions)
        timed, _ = bisect_ponr(recoverable_fn(replayer, 5, actions, task.horizon), len(actions))
    finally:
        replayer.close()
    assert found.budget == 60 and found.t == 60 and found.lost is False and found.point is None
    assert "never lost" in found.describe()
    assert timed is not None and timed < 60  # the old reading: "lost" only because time ran out
    assert found.t_time_limited is not None and found.t_time_limited < 60


def test_replay_mismatch_is_detected_and_nothing_is_searched_on_it(tmp_path):
    """A safety-filtered episode replayed without the filter is not the recording: detected, reported, unused."""
    task = default_registry().get("metaworld/reach").model_copy(update={"horizon": 40})
    resolved = ResolvedPolicy(PolicySpec(name="sloppy", entrypoint="tests.helpers:SloppyExpert"), "1")
    job = EpisodeJob("t", task, NOMINAL, resolved, 0, 7, episode_key(task, NOMINAL, resolved, 7, safety=True),
                     task.instruction, safety=True)
    store = Store(tmp_path)
    [record] = InlineExecutor(tmp_path).run([[job]])
    table = store.steps(record)
    actions, states = _matrix(table, "action"), _matrix(table, "observation.state")
    raw, filtered = Replayer(task, NOMINAL), Replayer(task, NOMINAL, safety=True)
    try:
        assert filtered.verify(record.seed, actions, states).ok  # the same stack reproduces it exactly
        check = raw.verify(record.seed, actions, states)
        assert not check.ok and 0 < check.first_mismatch < 10 and "diverges" in check.describe()
        unverified = find_ponr(raw, record.key, record.seed, actions, states=states)
        assert unverified.verified is False and unverified.t is None and unverified.handoffs == 1
        assert "diverges from the recording at step" in unverified.describe()
        tampered = states.copy()
        tampered[23, 0] += 1e-6  # one recorded state off by a micrometre
        assert filtered.verify(record.seed, actions, tampered).first_mismatch == 23
    finally:
        raw.close()
        filtered.close()


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


def test_articulated_tasks_record_object_evidence(tmp_path):
    """Drawer and door have no free object: their joint is the evidence (on b6a562f every object event was NaN)."""
    store = Store(tmp_path)
    policy = PolicySpec(name="expert", builtin="expert")
    for name, moved in (("drawer-open", 0.05), ("door-open", 0.3)):  # metres of slide, radians of hinge
        task = default_registry().get(f"metaworld/{name}").model_copy(update={"horizon": 150})
        [record] = InlineExecutor(tmp_path).run([[_job(task, NOMINAL, policy, 2)]])
        arrays = step_arrays(store.steps(record))
        assert record.outcome.value == "success", name
        assert np.isfinite(arrays["info.contact"]).all() and arrays["info.contact"].sum() > 0, name
        assert arrays["info.object_moved"][0] < 0.01 < moved < arrays["info.object_moved"].max(), name
