"""The LIBERO substep's repeated forward, run from its acceleration stage (``sim.libero_forward``), steps exactly as
robosuite's own step: every MuJoCo state of the scripted expert's episodes and of random-action episodes is
bit-identical with it and without it (positions, velocities, the solver's warm start, controls, sensors, the
observation, reward and success), on two LIBERO-Object scenes."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from assay.policies.builtin import ExpertPolicy
from assay.policies.protocol import PolicyContext
from assay.sim import default_registry, libero_forward, make_env

pytestmark = [pytest.mark.libero, pytest.mark.sim]

REGISTRY = default_registry()
TASKS = ["libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2",
         "libero/object/pick_up_the_cream_cheese_and_place_it_in_the_basket@2"]


def _expert_actions(env, seed: int) -> np.ndarray:
    """The scripted expert's actions of one episode (stepped on ``env`` as it is)."""
    task = env.task
    policy = ExpertPolicy()
    policy.reset(PolicyContext(task, (seed,), (task.instruction,)))
    observation, actions = env.reset(seed), []
    for _ in range(task.horizon):
        batch = {"state": observation["state"][None], "privileged.goal": observation["privileged.goal"][None],
                 "env_ids": np.array([0]), "instruction": [task.instruction]}
        actions.append(policy.act(batch)[0])
        transition = env.step(actions[-1])
        observation = transition.observation
        if transition.success:
            break
    return np.asarray(actions)


def _states(env, seed: int, actions: np.ndarray) -> np.ndarray:
    """Every step's whole record of ``actions`` replayed from ``reset(seed)``."""
    data = env._scene.inner.sim.data._data
    env.reset(seed)
    rows = []
    for action in actions:
        transition = env.step(action)
        rows.append(np.concatenate([data.qpos, data.qvel, data.qacc_warmstart, data.ctrl, data.sensordata,
                                    transition.observation["state"], [transition.reward, transition.success]]))
    return np.asarray(rows)


def with_and_without(record, patch, inner, seed: int, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``record(seed, actions)`` with ``patch`` (a module of ``sim``: install/uninstall) on ``inner``, then without
    it; installed again after."""
    fast = record(seed, actions)
    patch.uninstall(inner)
    try:
        plain = record(seed, actions)
    finally:
        assert patch.install(inner)
    return fast, plain


def _position_stages(env, action: np.ndarray) -> int:
    """How many times MuJoCo computed the positions during one step (its own timer's count)."""
    timer = env._scene.inner.sim.data._data.timer[int(mujoco.mjtTimer.mjTIMER_POSITION)]
    before = int(timer.number)
    env.step(action)
    return int(timer.number) - before


def _continued(env, actions: np.ndarray) -> np.ndarray:
    """Every step's record of ``actions`` from where ``env`` is (NaN-safe bytes: compared with tobytes)."""
    data = env._scene.inner.sim.data._data
    rows = []
    for action in actions:
        transition = env.step(action)
        rows.append(np.concatenate([data.qpos, data.qvel, data.qacc_warmstart, data.ctrl,
                                    transition.observation["state"]]))
    return np.asarray(rows)


@pytest.mark.parametrize("ref", TASKS)
def test_the_repeated_forward_from_its_acceleration_stage_steps_exactly_as_robosuite(ref):
    env = make_env(REGISTRY.get(ref).model_copy(update={"cameras": ()}))
    try:
        inner = env._scene.inner
        assert "_pre_action" in inner.__dict__  # installed on LIBERO's OSC_POSE scenes
        assert libero_forward.install(inner)  # a second install is a no-op (it used to wrap the first and break)
        env.reset(1)
        positions = [_position_stages(env, np.zeros(7))]
        libero_forward.uninstall(inner)
        try:
            positions.append(_position_stages(env, np.zeros(7)))
        finally:
            libero_forward.install(inner)
        substeps = int(round(inner.control_timestep / inner.model_timestep))
        assert positions == [substeps, 3 * substeps]  # it took effect: one position stage a substep, not three
        actions = _expert_actions(env, 1)
        rng = np.random.default_rng(5)
        shaky = np.clip(actions[:60] + rng.normal(0.0, 0.5, actions[:60].shape), -1.0, 1.0)  # other contacts
        for seed, replayed in ((1, actions), (2, shaky)):
            fast, plain = with_and_without(lambda s, a: _states(env, s, a), libero_forward, inner, seed, replayed)
            assert fast.shape == plain.shape and fast.tobytes() == plain.tobytes(), (ref, seed)
            if replayed is actions and ref == TASKS[0]:  # the soup: grasped, carried, placed (its last step succeeded)
                assert plain[-1, -1] == 1.0
        if ref == TASKS[0]:  # a state MuJoCo finds bad mid-step (a NaN velocity): reset and warned alike both ways
            runs = []
            for fast in (True, False):
                if not fast:
                    libero_forward.uninstall(inner)
                try:  # the controller's arithmetic on a bad state warns (inf - inf): both ways alike
                    errors = np.errstate(all="ignore")
                    errors.__enter__()
                    env.reset(1)
                    data = inner.sim.data._data
                    env.step(actions[0])
                    counts, record = [], []
                    # a NaN velocity, an infinite one, then a position beyond mjMAXVAL: MuJoCo resets each (a reset
                    # zeroes the counters, so the second one's counter reads 1 before and after it)
                    for start, (array, index, value) in enumerate(((data.qvel, 0, np.nan), (data.qvel, 2, np.inf),
                                                                   (data.qpos, 3, 1e11))):
                        array[index] = value
                        record.append(_continued(env, actions[1 + 4 * start: 5 + 4 * start]))
                        counts.append([int(w.number) for w in data.warning])
                    runs.append((np.concatenate(record), counts))
                finally:
                    errors.__exit__(None, None, None)
                    libero_forward.install(inner)
            assert runs[0][0].tobytes() == runs[1][0].tobytes() and runs[0][1] == runs[1][1]
            bad_velocity, bad_position = int(mujoco.mjtWarning.mjWARN_BADQVEL), int(mujoco.mjtWarning.mjWARN_BADQPOS)
            counts = runs[0][1]
            assert counts[0][bad_velocity] == 1 and counts[1][bad_velocity] == 1 and counts[2][bad_position] == 1
    finally:
        env.close()


def test_it_is_installed_only_where_its_premise_holds():
    class NotOsc:
        controller = object()

    class Scene:
        robots = [NotOsc()]

    assert not libero_forward.applies(Scene())
    assert not libero_forward.install(Scene())
    assert not libero_forward.applies(type("Empty", (), {"robots": []})())
