"""The array ``touching_object`` gives Meta-World's own answer at every step, and the same episodes."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from assay.policies import PolicyContext
from assay.policies.builtin import ExpertPolicy
from assay.sim import default_registry, make_env, metaworld_contacts, resolve_variant
from assay.spec.metaworld_catalog import METAWORLD_TASKS

REGISTRY = default_registry()


def _tasks_that_ask() -> list[str]:
    """The Meta-World tasks whose class calls ``touching_object`` (found from their source, not listed by hand)."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS

    return sorted(name.removesuffix("-v3") for name in METAWORLD_TASKS
                  if "touching_" in inspect.getsource(ALL_V3_ENVIRONMENTS[name]))


TASKS = _tasks_that_ask()


def _sawyer(env):
    inner = env
    while not hasattr(inner, "_env"):
        inner = inner.env
    return inner._env


def _episode(env, seed: int, variant, check=None) -> np.ndarray:
    expert = ExpertPolicy()
    observation = env.reset(seed, variant)
    expert.reset(PolicyContext(env.task, (seed,), (env.task.instruction,)))
    rows = [observation["state"]]
    for _ in range(env.task.horizon):
        action = expert.act({"state": observation["state"][None], "env_ids": np.array([0]), "instruction": [""]})[0]
        transition = env.step(action)
        observation = transition.observation
        rows.append(np.concatenate([observation["state"], [transition.reward], list(transition.info.values())]))
        if check is not None:
            check()
        if transition.success:
            break
    return np.concatenate(rows)


def test_the_tasks_found_are_the_ones_that_grasp():
    assert len(TASKS) == 14
    assert {"pick-place", "push", "sweep", "soccer", "coffee-pull", "stick-push"} <= set(TASKS)


@pytest.mark.sim
@pytest.mark.parametrize("name", TASKS)
def test_same_answer_at_every_step_and_the_same_episodes(name):
    task = REGISTRY.get(f"metaworld/{name}@1")
    fast, reference = make_env(task), make_env(task)
    sawyer = _sawyer(fast)
    assert "touching_object" in vars(sawyer)  # installed on the instance
    del vars(_sawyer(reference))["touching_object"]  # Meta-World's own method again
    answers: list[bool] = []

    def check() -> None:
        # the main object, and every geom in contact now (a pad, the table, another object): all agree
        ids = {sawyer._get_id_main_object(), *sawyer.data.contact.geom1.tolist(), *sawyer.data.contact.geom2.tolist()}
        for geom in sorted(ids):
            ours, theirs = sawyer.touching_object(geom), type(sawyer).touching_object(sawyer, geom)
            assert (ours, type(ours)) == (theirs, type(theirs)), f"{name}: geom {geom}"
            answers.append(bool(ours))

    variant = resolve_variant({"object.mass": 2.0, "friction": 0.5}, task)
    for seed, chosen in ((3, None), (11, variant)):
        assert np.array_equal(_episode(fast, seed, chosen, check), _episode(reference, seed, chosen))
    assert answers and len(answers) > 20
    fast.close()
    reference.close()


@pytest.mark.sim
def test_some_steps_are_touching_so_the_comparison_can_fail():
    """Pick-place's expert grasps the puck: the answers compared above include True, not only False."""
    task = REGISTRY.get("metaworld/pick-place@1")
    env = make_env(task)
    sawyer = _sawyer(env)
    touching: list[bool] = []
    _episode(env, 3, None, lambda: touching.append(bool(sawyer.touching_main_object)))
    assert any(touching) and not all(touching)
    env.close()


def test_an_environment_without_gripper_pads_keeps_its_own_method():
    class NoPads:
        class model:
            @staticmethod
            def geom(name):
                raise KeyError(name)

    env = NoPads()
    metaworld_contacts.install(env)
    assert not hasattr(env, "touching_object")
