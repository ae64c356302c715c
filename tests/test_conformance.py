"""The conformance kit (assay.testing): it catches broken environments and policies, and every
built-in backend and policy passes it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from assay.errors import AssayError, ConformanceError
from assay.policies import DegradedExpertPolicy, ExpertPolicy, MLPPolicy, PolicyContext, RandomPolicy
from assay.sim import SimEnv, SimEnvWrapper, Transition, default_registry, make_env, perturbed, resolve_variant
from assay.sim.perturbed import PerturbedEnv
from assay.sim.safety import SafetyFilter
from assay.spec import CameraSpec, Variant
from assay.testing import (
    ConstantChunkPolicy,
    ConstantPolicy,
    FunctionEnv,
    check_policy,
    check_sim_env,
    fake_task,
    running,
)
from assay.testing import env_checks as E
from assay.testing import policy_checks as P

REGISTRY = default_registry()
REACH = REGISTRY.get("metaworld/reach@1")


def _message(template: str) -> str:
    """The constant's text before its first placeholder (what every formatted message starts with)."""
    return template.split("{")[0]


# --- the kit catches what it promises to catch -------------------------------------------------


class DriftingResetEnv(FunctionEnv):
    """Each reset shifts the state by how many resets came before: not a function of the seed."""

    resets = 0

    def reset(self, seed: int, variant: Variant | None = None) -> dict[str, np.ndarray]:
        self.resets += 1
        observation = super().reset(seed, variant)
        return {"state": observation["state"] + self.resets}


class LeakyAfterDoneEnv(FunctionEnv):
    """Ends its episodes after 3 steps; once an episode has ended, the next reset does not start afresh."""

    ended = False

    def reset(self, seed: int, variant: Variant | None = None) -> dict[str, np.ndarray]:
        observation = super().reset(seed, variant)
        return {"state": observation["state"] + (100.0 if self.ended else 0.0)}

    def step(self, action: np.ndarray) -> Transition:
        transition = super().step(action)
        self.ended = self.ended or transition.terminated
        return transition


def _ends_at_3(seed: int, t: int, action: np.ndarray) -> Transition:
    return Transition({"state": np.array([float(seed + t)])}, 0.0, t >= 3, False, False)


def test_a_well_behaved_function_env_passes():
    check_sim_env(FunctionEnv(fake_task(horizon=6), _ends_at_3), seeds=(0, 1))
    check_sim_env(FunctionEnv(fake_task(horizon=6)), seeds=(3,))


def test_catches_a_non_deterministic_reset():
    with pytest.raises(ConformanceError, match=r"reset\(0\) is not deterministic: observation 'state' differs"):
        check_sim_env(DriftingResetEnv(fake_task()), seeds=(0, 1))


def test_catches_an_env_that_keeps_state_after_an_episode_ran_to_its_end():
    with pytest.raises(ConformanceError) as caught:
        check_sim_env(LeakyAfterDoneEnv(fake_task(horizon=6), _ends_at_3), seeds=(0, 1))
    assert str(caught.value).startswith(_message(E.RESET_AFTER_DONE))
    assert isinstance(caught.value, AssayError)


def test_catches_an_ignored_seed_a_missing_key_and_non_float_info():
    class SeedBlind(FunctionEnv):
        def reset(self, seed: int, variant: Variant | None = None) -> dict[str, np.ndarray]:
            return super().reset(0, variant)

    with pytest.raises(ConformanceError, match="the seed is ignored"):
        check_sim_env(SeedBlind(fake_task()), seeds=(0, 1))

    class NoState(FunctionEnv):
        def reset(self, seed: int, variant: Variant | None = None) -> dict[str, np.ndarray]:
            return {"pixels": np.zeros(1)}

    with pytest.raises(ConformanceError, match=r"reset\(0\): the observation has no 'state' \(keys: pixels\)"):
        check_sim_env(NoState(fake_task()), seeds=(0,))

    def stringly(seed: int, t: int, action: np.ndarray) -> Transition:
        return Transition({"state": np.array([1.0])}, 0.0, False, False, False, {"phase": "grasp"})  # type: ignore[dict-item]

    with pytest.raises(ConformanceError, match=r"info\['phase'\] is 'grasp', expected a finite float scalar"):
        check_sim_env(FunctionEnv(fake_task(), stringly), seeds=(0,))


def test_catches_an_object_that_is_no_sim_env():
    with pytest.raises(ConformanceError, match="object is not a SimEnv: it lacks reset, step, initial_conditions, close"):
        check_sim_env(object(), seeds=(0,))  # type: ignore[arg-type]


def test_constant_policies_pass_and_a_wrong_action_shape_is_caught():
    task = fake_task()
    check_policy(ConstantPolicy(), task)
    check_policy(ConstantChunkPolicy(horizon=3), task, env=FunctionEnv(task), bounded=True)
    with pytest.raises(ConformanceError) as caught:
        check_policy(ConstantPolicy(dim=2), task)
    assert str(caught.value) == P.WRONG_ACTION_SHAPE.format(shape=(3, 2), rows=3, dim=1)
    with pytest.raises(ConformanceError, match=r"outside the task's action box \[-1.0, 1.0\]"):
        check_policy(ConstantPolicy(value=2.0), task, bounded=True)


class _Unseeded:
    """Draws from one global generator: neither reproducible after reset nor batch-independent."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng()

    def reset(self, context: PolicyContext) -> None:
        pass

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        return self.rng.uniform(-1, 1, (len(observations["env_ids"]), 1))


class _BatchMean:
    """Answers each row with the batch's mean state: a row depends on its batch-mates."""

    def reset(self, context: PolicyContext) -> None:
        pass

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        mean = float(np.mean(observations["state"]))
        return np.full((len(observations["env_ids"]), 1), np.tanh(mean))


class _IntegerActions(ConstantPolicy):
    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        return np.zeros((len(observations["env_ids"]), 1), dtype=np.int64)


class _Raises(ConstantPolicy):
    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        raise KeyError("image.front")


@pytest.mark.parametrize("policy, message", [
    (_Unseeded(), P.NONDETERMINISTIC_ACT),
    (_BatchMean(), P.BATCH_DEPENDENT.format(row=0, rows=3)),
    (_IntegerActions(), P.WRONG_DTYPE.format(dtype="int64")),
    (_Raises(), P.ACT_RAISED.format(error="KeyError: 'image.front'", rows=3)),
])
def test_catches_a_policy_that_breaks_its_contract(policy, message):
    with pytest.raises(ConformanceError) as caught:
        check_policy(policy, fake_task())
    assert str(caught.value) == message


# --- every built-in backend and policy passes -------------------------------------------------


@pytest.fixture(scope="module")
def reach_env():
    env = make_env(REACH)
    yield env
    env.close()


@pytest.mark.sim
def test_the_metaworld_backend_and_its_wrappers_pass(reach_env):
    check_sim_env(reach_env, seeds=(0, 1))
    noisy = resolve_variant({"action.noise": 0.1, "observation.noise": 0.01, "control.latency": 2}, REACH)
    wrapped: SimEnv = perturbed(reach_env, noisy)
    assert isinstance(wrapped, PerturbedEnv) and isinstance(wrapped, SimEnv)
    check_sim_env(wrapped, seeds=(0, 1))
    check_sim_env(SafetyFilter(reach_env), seeds=(2, 3), episode_steps=50)
    # unwrapped (Gymnasium's meaning) reaches through every wrapper to the backend environment, simulator to
    # the backend's simulator object (the Sawyer the safety filter reads)
    assert SafetyFilter(wrapped).unwrapped is wrapped.unwrapped is reach_env.unwrapped is reach_env
    assert SafetyFilter(wrapped).simulator is wrapped.simulator is reach_env.simulator
    assert hasattr(reach_env.simulator, "mocap_low") and not hasattr(reach_env, "mocap_low")


def test_a_wrapper_forwards_what_it_does_not_change_and_unwraps_to_a_backend_without_a_simulator():
    inner = FunctionEnv(fake_task())
    outer = SafetyFilter(perturbed(inner, Variant()))
    assert isinstance(outer, SimEnvWrapper) and isinstance(outer, SimEnv)
    assert outer.unwrapped is inner  # the innermost environment, as Gymnasium's Wrapper.unwrapped
    assert outer.simulator is None  # a backend that hands out no simulator object
    outer.reset(3)
    assert outer.initial_conditions() == inner.initial_conditions() == {"seed": 3}
    outer.skip_next_frames()  # passed on; a no-op for a backend that always renders


@pytest.mark.sim
def test_the_metaworld_backend_with_cameras_passes():
    task = REGISTRY.get("metaworld/push@1").model_copy(
        update={"cameras": (CameraSpec(name="front", width=32, height=32, depth=True),)})
    env = make_env(task)
    try:
        check_sim_env(env, seeds=(0, 1), steps=3, episode_steps=10)
    finally:
        env.close()


def test_the_gymnasium_backend_passes():
    env = make_env(REGISTRY.get("gymnasium/Pendulum-v1"))
    try:
        check_sim_env(env, seeds=(0, 1))
    finally:
        env.close()


@pytest.mark.sim
@pytest.mark.parametrize("policy", [ExpertPolicy(), RandomPolicy(),
                                    DegradedExpertPolicy(action_noise=0.3, action_delay=2, bias=0.1, freeze_prob=0.2)],
                         ids=["expert", "random", "degraded-expert"])
def test_builtin_state_policies_pass(policy, reach_env):
    check_policy(policy, REACH, env=reach_env)


def test_the_mlp_policy_passes():
    pytest.importorskip("torch")
    check_policy(MLPPolicy(hidden=[16], state_dim=39, action_dim=4, chunk=3), REACH, bounded=True)
    check_policy(MLPPolicy(hidden=[16], state_dim=39, action_dim=4), REACH, bounded=True)


def test_the_fake_step_function_runs_forever():
    transition = running(2, 5, np.zeros(1))
    assert transition.observation["state"].tolist() == [7.0] and not transition.terminated


@pytest.fixture(scope="module")
def push_camera():
    task = REGISTRY.get("metaworld/push@1").model_copy(
        update={"cameras": (CameraSpec(name="front", width=64, height=64, depth=True),)})
    env = make_env(task)
    yield task, env
    env.close()


@pytest.mark.sim
def test_the_perception_expert_passes(push_camera):
    from assay.policies.perception import PerceptionExpertPolicy

    task, env = push_camera
    check_policy(PerceptionExpertPolicy(), task, env=env)


@pytest.mark.sim
@pytest.mark.slow
def test_the_router_passes(push_camera):
    pytest.importorskip("sentence_transformers")
    from assay.policies.router import InstructionRouterPolicy

    task, env = push_camera
    check_policy(InstructionRouterPolicy(skills=("push-v3", "reach-v3")), task, env=env)


def test_the_remote_policy_passes():
    from assay.policies.remote import RemotePolicy
    from tests.remote_support import SMALL_MLP, serving, state_task

    pytest.importorskip("torch")
    task = state_task()
    with serving(MLPPolicy(**SMALL_MLP), task) as server:
        policy = RemotePolicy(server.url, timeout_s=10)
        try:
            check_policy(policy, task, bounded=True)
        finally:
            policy.close()


def test_catches_a_trace_hook_that_is_not_json():
    class Traced(ConstantPolicy):
        def step_trace(self, slot: int) -> dict[str, Any]:
            return {"raw": object()}

    with pytest.raises(ConformanceError, match=r"step_trace\(0\) is not a JSON-able mapping"):
        check_policy(Traced(), fake_task())


# --- returned arrays are the caller's: a backend reusing a buffer is caught, and recorded right ------------

class ReusingEnv(FunctionEnv):
    """Hands out one state buffer, rewritten in place at every reset and step (as a render buffer might be)."""

    def __init__(self, task) -> None:
        super().__init__(task)
        self._buffer = np.zeros(task.state_dim)

    def reset(self, seed: int, variant: Variant | None = None) -> dict[str, np.ndarray]:
        self.seed, self.t = seed, 0
        self._buffer[:] = float(seed)
        return {"state": self._buffer}

    def step(self, action: np.ndarray) -> Transition:
        self.t += 1
        self._buffer[:] = float(self.seed + self.t)
        return Transition({"state": self._buffer}, 0.0, False, False, False)


def test_the_kit_catches_an_environment_that_reuses_the_arrays_it_returns():
    with pytest.raises(ConformanceError, match="'state' shares memory with 'state' of reset\\(0\\).*reuses an array"):
        check_sim_env(ReusingEnv(fake_task()), seeds=(0, 1))
    check_sim_env(FunctionEnv(fake_task()), seeds=(0, 1))  # fresh arrays pass


def test_the_recorder_keeps_true_values_from_a_reusing_environment_and_copies_nothing_from_a_fresh_one():
    from assay.run import rollout
    from assay.spec import PolicySpec, ResolvedPolicy, episode_key
    from assay.spec.campaign import EpisodeJob

    task = fake_task(horizon=4)
    policy = ResolvedPolicy(PolicySpec(name="p", builtin="random"), "1")
    job = EpisodeJob("c", task, Variant(), policy, 0, 5, episode_key(task, Variant(), policy, 5), task.instruction)
    [reused] = rollout([ReusingEnv(task)], ConstantPolicy(), [job])
    assert [float(s[0]) for s in reused.states] == [5.0, 6.0, 7.0, 8.0]  # each step as it was, not the last
    fresh_env = FunctionEnv(task)
    returned: list[np.ndarray] = []
    original_step = fresh_env.step

    def step(action: np.ndarray) -> Transition:
        transition = original_step(action)
        returned.append(transition.observation["state"])
        return transition

    fresh_env.step = step
    [fresh] = rollout([fresh_env], ConstantPolicy(), [job])
    assert [float(s[0]) for s in fresh.states] == [5.0, 6.0, 7.0, 8.0]
    assert all(kept is given for kept, given in zip(fresh.states[1:], returned, strict=False))  # kept, not copied
