"""Perturbation factors: each provably changes the simulation, is undone before the next episode,
replays identically, and bad requests are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from assay.errors import SpecError, UnsupportedError
from assay.sim import FACTORS, default_registry, make_env, perturbed, resolve_variant
from assay.sim.factors import Stage
from assay.sim.paraphrase import paraphrase
from assay.spec import CameraSpec

pytestmark = pytest.mark.sim
REGISTRY = default_registry()
CAMERA = (CameraSpec(name="front", width=64, height=64, depth=True),)
PUSH = REGISTRY.get("metaworld/push@1").model_copy(update={"cameras": CAMERA})


@pytest.fixture(scope="module")
def push_env():
    env = make_env(PUSH)
    yield env
    env.close()


def _rollout(env, seed, steps=5):
    observation = env.reset(seed)
    first = {k: v.copy() for k, v in observation.items()}
    states = [observation["state"]]
    for _ in range(steps):
        transition = env.step(np.array([0.5, 0.5, -0.5, 0.5]))
        states.append(transition.observation["state"])
    return first, np.array(states)


VISUAL_LEVELS = {
    "light.intensity": 3.0, "light.azimuth": 90.0, "light.color": [1.0, 0.2, 0.2], "camera.yaw": 25.0,
    "camera.pitch": -20.0, "camera.distance": 0.4, "camera.fovy": 70.0, "table.color": [0.1, 0.5, 0.9],
    "object.color": [0.1, 0.1, 0.9], "background.color": [0.9, 0.1, 0.1],
}
DYNAMICS_LEVELS = {
    "object.init_range": 2.0, "object.mass": 8.0, "friction": 0.1, "joint.damping": 8.0, "control.gain": 3.0,
    "control.frame_skip": 15, "action.noise": 0.5, "observation.noise": 0.05, "control.latency": 3,
}


def test_every_factor_has_a_test_level():
    assert all(f.stage is Stage.RESET for f in FACTORS.values())
    physical = {name for name, f in FACTORS.items() if f.axis.value != "semantic" and f.backends != {"libero"}}
    assert physical == set(VISUAL_LEVELS) | set(DYNAMICS_LEVELS) | {"distractor.count"}
    # LIBERO-PRO's scene factors are tested on LIBERO (tests/test_libero.py), LIBERO-Plus's in test_libero_plus.py
    assert {name for name, f in FACTORS.items() if f.backends == {"libero"}} == {
        "libero.object", "libero.environment", "libero.swap", "libero.language", "libero.task", "libero.init",
        "libero_plus.layout", "libero_plus.camera", "libero_plus.robot_init", "libero_plus.language",
        "libero_plus.light", "libero_plus.background", "libero_plus.noise", "libero_plus.corruption"}


@pytest.mark.parametrize("factor, level", sorted(VISUAL_LEVELS.items()))
def test_visual_factors_change_the_image_and_are_undone(push_env, factor, level):
    nominal, _ = _rollout(push_env, 4, steps=0)
    variant = resolve_variant({factor: level}, PUSH)
    changed, _ = _rollout(perturbed(push_env, variant), 4, steps=0)
    difference = np.abs(changed["image.front"].astype(float) - nominal["image.front"]).max(axis=-1)
    changed_pixels = int((difference > 30).sum())  # the puck alone covers ~8 pixels at 64 x 64
    # A small object changes a few pixels a lot; a light changes many pixels a little.
    assert changed_pixels >= 5 or difference.mean() > 1.0, f"{factor}={level} barely changed the image"
    np.testing.assert_array_equal(changed["state"], nominal["state"])  # a visual factor leaves the state alone
    again, _ = _rollout(push_env, 4, steps=0)  # the next nominal episode sees no trace of it
    np.testing.assert_array_equal(again["image.front"], nominal["image.front"])


@pytest.mark.parametrize("factor, level", sorted(DYNAMICS_LEVELS.items()))
def test_behavioral_factors_change_the_dynamics_and_are_undone(push_env, factor, level):
    _, nominal = _rollout(push_env, 5)
    _, changed = _rollout(perturbed(push_env, resolve_variant({factor: level}, PUSH)), 5)
    assert np.abs(changed - nominal).max() > 1e-4, f"{factor}={level} left the trajectory unchanged"
    _, again = _rollout(push_env, 5)
    np.testing.assert_array_equal(again, nominal)


def test_model_parameters_really_change(push_env):
    model = push_env.simulator.model
    base_friction, base_damping = model.geom_friction[:, 0].copy(), model.dof_damping.copy()
    perturbed(push_env, resolve_variant({"friction": 0.5, "joint.damping": 2.0}, PUSH)).reset(1)
    np.testing.assert_allclose(model.geom_friction[:, 0], base_friction * 0.5)
    np.testing.assert_allclose(model.dof_damping, base_damping * 2.0)
    push_env.reset(1)
    np.testing.assert_array_equal(model.geom_friction[:, 0], base_friction)


def test_distractors_are_seen_and_never_touched(push_env):
    nominal, states = _rollout(push_env, 2)
    variant = resolve_variant({"distractor.count": 3}, PUSH)
    cluttered, cluttered_states = _rollout(perturbed(push_env, variant), 2)
    np.testing.assert_array_equal(cluttered_states, states)  # no physics: the trajectory is the same
    difference = np.abs(cluttered["image.front"].astype(float) - nominal["image.front"]).max(axis=-1)
    assert (difference > 30).sum() >= 10


def test_same_variant_and_seed_replay_identically(push_env):
    variant = resolve_variant({"action.noise": 0.3, "light.intensity": 0.5, "object.mass": 2.0}, PUSH)
    first, one = _rollout(perturbed(push_env, variant), 9, steps=8)
    _rollout(push_env, 3)  # something else in between
    second, two = _rollout(perturbed(push_env, variant), 9, steps=8)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(first["image.front"], second["image.front"])


def test_paraphrases_are_fixed_and_graded():
    instruction = "pick up the puck and place it at the goal"
    assert paraphrase(instruction, "nominal") == instruction
    assert paraphrase(instruction, "synonym") == "grab up the disc and put it at the target"
    assert paraphrase(instruction, "reorder") == "place it at the goal, once you pick up the puck"
    assert paraphrase(instruction, "terse") == "pick up puck and place at goal"
    assert paraphrase(instruction, "typos") == paraphrase(instruction, "typos") != instruction
    assert paraphrase(instruction, "indirect", "pick-place") == "that thing on the table belongs somewhere else"


@pytest.mark.parametrize(
    "request_, message",
    [
        ({"light.intensty": 2}, "unknown factor 'light.intensty'; did you mean light.intensity"),
        ({"light.intensity": 9}, r"factor light.intensity: value 9 is not valid; valid: \[0, 5\] x nominal"),
        ({"object.color": [1, 0]}, r"valid: \[r, g, b\] with each in \[0, 1\]"),
        ({"control.latency": 1.5}, "factor control.latency: value 1.5 is not valid"),
        ({"instruction.paraphrase": "shouty"}, "valid: one of nominal, synonym"),
    ],
)
def test_bad_factor_requests_name_the_factor_and_the_valid_range(request_, message):
    with pytest.raises(SpecError, match=message) as info:
        resolve_variant(request_, PUSH)
    assert "\n" not in str(info.value)


def test_a_factor_that_does_not_apply_to_the_backend_is_refused():
    pusher = REGISTRY.get("gymnasium/Pusher-v5")
    with pytest.raises(UnsupportedError, match="factor light.intensity does not apply to gymnasium/Pusher-v5@1"):
        resolve_variant({"light.intensity": 2.0}, pusher)
    assert resolve_variant({"action.noise": 0.1}, pusher).perturbations[0].factor == "action.noise"


def test_object_factors_are_refused_on_a_task_without_an_object_body():
    drawer = REGISTRY.get("metaworld/drawer-open@1")
    for factor, value in (("object.mass", 2.0), ("object.color", [0.0, 0.0, 1.0])):
        with pytest.raises(UnsupportedError, match=f"factor {factor} does not apply to metaworld/drawer-open@1: the "
                                                   "task has no object body") as info:
            resolve_variant({factor: value}, drawer)
        assert "\n" not in str(info.value)
        assert resolve_variant({factor: value}, PUSH).perturbations[0].factor == factor
    assert resolve_variant({"friction": 0.5}, drawer).perturbations[0].factor == "friction"


def _finds_an_object(env_name: str) -> bool:
    env = make_env(REGISTRY.get(f"metaworld/{env_name.removesuffix('-v3')}@1"))
    try:
        found = []
        for seed in range(2):
            env._perturber.object_body = None  # locate afresh on each seed
            env.reset(seed)
            found.append(env._perturber.object_body is not None)
        assert len(set(found)) == 1
        return found[0]
    finally:
        env.close()


@pytest.mark.parametrize("env_name", ["drawer-open-v3", "button-press-v3", "push-v3", "window-close-v3"])
def test_the_object_free_list_is_what_the_simulator_finds(env_name):
    from assay.spec.metaworld_catalog import NO_OBJECT_BODY

    assert _finds_an_object(env_name) == (env_name not in NO_OBJECT_BODY)


@pytest.mark.slow
def test_the_object_free_list_holds_on_all_fifty_tasks():
    from assay.spec.metaworld_catalog import METAWORLD_TASKS, NO_OBJECT_BODY

    free = {name for name in METAWORLD_TASKS if not _finds_an_object(name)}
    assert free == NO_OBJECT_BODY and len(free) == 19


def test_light_azimuth_changes_the_image_only_slightly_with_shadows_off(push_env):
    # Documented in the factor's description: shading moves, no shadow does (rendering has shadows off).
    nominal = push_env.reset(0)["image.front"].astype(float)
    turned = perturbed(push_env, resolve_variant({"light.azimuth": 120.0}, PUSH)).reset(0)["image.front"].astype(float)
    difference = float(np.abs(turned - nominal).mean())
    assert 0.0 < difference < 5.0
