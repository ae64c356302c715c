"""The Meta-World and Gymnasium backends against the real simulators."""

from __future__ import annotations

import numpy as np
import pytest

from assay.errors import UnknownTaskError, UnsupportedError
from assay.policies import ExpertPolicy, PolicyContext
from assay.sim import TaskRegistry, default_registry, make_env, metaworld_task
from assay.spec.metaworld_catalog import METAWORLD_TASKS

pytestmark = pytest.mark.sim
REGISTRY = default_registry()


def test_registry_holds_all_fifty_metaworld_tasks_with_instructions():
    tasks = REGISTRY.list(backend="metaworld")
    assert len(tasks) == 50
    assert all(t.instruction and t.family and t.skill for t in tasks)
    import metaworld

    assert {t.env_name for t in tasks} == set(metaworld.env_dict.ALL_V3_ENVIRONMENTS)


def test_registry_rejects_duplicates_and_suggests_close_matches():
    registry = TaskRegistry([metaworld_task("reach-v3")])
    with pytest.raises(Exception, match="already registered"):
        registry.register(metaworld_task("reach-v3"))
    with pytest.raises(UnknownTaskError, match="did you mean metaworld/pick-place"):
        REGISTRY.get("metaworld/pick-plac@1")
    with pytest.raises(UnknownTaskError, match="no version 7"):
        REGISTRY.get("metaworld/reach@7")
    assert REGISTRY.get("metaworld/reach").version == 1  # no version: the latest


def _initial_state(env, seed):
    return env.reset(seed)["state"].copy()


def test_one_seed_gives_one_initial_state_fresh_or_reused_and_seeds_differ():
    task = REGISTRY.get("metaworld/pick-place@1")
    reused = make_env(task)
    _initial_state(reused, 11)  # use it for other episodes first
    _initial_state(reused, 12)
    first_reuse = _initial_state(reused, 5)
    fresh = make_env(task)
    first_fresh = _initial_state(fresh, 5)
    np.testing.assert_array_equal(first_fresh, first_reuse)
    assert fresh.initial_conditions() == reused.initial_conditions()
    others = [_initial_state(fresh, s) for s in (6, 7, 8)]
    for other in others:  # object/goal positions (dims 4:7 and 36:39) change with the seed
        assert np.linalg.norm(other[4:7] - first_fresh[4:7]) + np.linalg.norm(other[36:] - first_fresh[36:]) > 1e-3
    reused.close()
    fresh.close()


@pytest.mark.parametrize("env_name", sorted(METAWORLD_TASKS))
def test_every_metaworld_task_resets_and_steps(env_name):
    task = REGISTRY.get(f"metaworld/{env_name.removesuffix('-v3')}@1")
    env = make_env(task)
    observation = env.reset(seed=3)
    assert observation["state"].shape == (task.state_dim,)
    for _ in range(3):
        transition = env.step(np.zeros(task.action.dim))
        assert transition.observation["state"].shape == (task.state_dim,)
        assert np.isfinite(transition.reward)
    env.close()


def _mt1_setup(env_name: str):
    """The Sawyer environment as Meta-World's own MT1 gym.make builds it (what the backend did before)."""
    import gymnasium as gym
    import metaworld  # noqa: F401

    wrapped = gym.make("Meta-World/MT1", env_name=env_name, seed=0, disable_env_checker=True)
    wrapped.reset(seed=0)
    return wrapped.unwrapped


def _expert_trajectory(env, seed: int, variant, steps: int = 40) -> np.ndarray:
    expert = ExpertPolicy()
    observation = env.reset(seed, variant)
    expert.reset(PolicyContext(env.task, (seed,), (env.task.instruction,)))
    rows = [observation["state"]]
    for _ in range(steps):
        action = expert.act({"state": observation["state"][None], "env_ids": np.array([0]), "instruction": [""]})[0]
        transition = env.step(action)
        observation = transition.observation
        rows.append(np.concatenate([observation["state"], [transition.reward], list(transition.info.values())]))
    return np.concatenate(rows)


@pytest.mark.parametrize("name", ["pick-place", "push"])
def test_the_direct_sawyer_build_gives_the_episodes_of_metaworlds_mt1_setup(name, monkeypatch):
    from assay.sim import metaworld_env, resolve_variant

    task = REGISTRY.get(f"metaworld/{name}@1")
    direct = make_env(task)
    monkeypatch.setattr(metaworld_env, "sawyer_env", _mt1_setup)
    reference = make_env(task)
    variant = resolve_variant({"object.mass": 2.0, "friction": 0.5, "light.intensity": 0.5}, task)
    for seed, chosen in ((3, None), (8, variant)):
        expected = _expert_trajectory(reference, seed, chosen)
        assert np.array_equal(_expert_trajectory(direct, seed, chosen), expected)
        assert direct.initial_conditions() == reference.initial_conditions()
    step = direct.step(np.zeros(4)).observation["state"]
    assert np.all(step[36:39] != 0.0)  # the goal is observed in steps too (MT1's observation space, not the hidden one)
    direct.close()
    reference.close()


@pytest.mark.parametrize("name", ["reach", "drawer-open", "button-press", "pick-place", "door-open", "window-close"])
def test_expert_succeeds(name):
    task = REGISTRY.get(f"metaworld/{name}@1")
    env, expert = make_env(task), ExpertPolicy()
    for seed in (1, 2):
        observation = env.reset(seed)
        expert.reset(PolicyContext(task, (seed,), (task.instruction,)))
        for _ in range(task.horizon):
            action = expert.act({"state": observation["state"][None], "env_ids": np.array([0]), "instruction": [""]})[0]
            transition = env.step(action)
            observation = transition.observation
            if transition.success:
                break
        assert transition.success, f"expert failed {task.id} seed {seed}"
    env.close()


def test_gymnasium_backend_runs_any_box_env_reproducibly():
    task = REGISTRY.get("gymnasium/Pusher-v5@1")
    assert task.action.dim == 7 and task.backend == "gymnasium"
    a, b = make_env(task), make_env(task)
    np.testing.assert_array_equal(a.reset(4)["state"], b.reset(4)["state"])
    assert a.step(np.zeros(7)).observation["state"].shape == (task.state_dim,)
    with pytest.raises(UnsupportedError, match="not a 1-D Box"):
        REGISTRY.get("gymnasium/CartPole-v1")
    with pytest.raises(UnknownTaskError, match="gymnasium cannot make"):
        REGISTRY.get("gymnasium/NoSuchEnv-v0")
