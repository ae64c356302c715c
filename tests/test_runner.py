"""The episode loop without a simulator: outcomes, fault isolation, never stepping a finished env."""

from __future__ import annotations

import numpy as np
import pytest

from assay.run import rollout
from assay.sim import Transition
from assay.spec import PolicySpec, ResolvedPolicy, SuccessMode, Variant, episode_key
from assay.spec.campaign import EpisodeJob
from assay.store import Outcome
from tests.helpers import ConstantPolicy, FunctionEnv, fake_task


def _jobs(task, seeds):
    policy = ResolvedPolicy(PolicySpec(name="p", builtin="random"), "1")
    return [EpisodeJob("c", task, Variant(), policy, i, s, episode_key(task, Variant(), policy, s), task.instruction)
            for i, s in enumerate(seeds)]


def _transition(success=False, terminated=False, truncated=False, reward=1.0):
    return Transition({"state": np.zeros(1)}, reward, terminated, truncated, success, {"progress": 0.5})


def test_outcomes_and_finished_envs_are_never_stepped():
    task = fake_task(horizon=6)

    def step(seed, t, action):
        if seed == 1:
            return _transition(success=t == 2)
        if seed == 2:
            return _transition(terminated=t == 3)
        return _transition()  # seed 3 runs to the horizon

    envs = [FunctionEnv(task, step) for _ in range(3)]
    recorders = rollout(envs, ConstantPolicy(), _jobs(task, [1, 2, 3]))
    assert [r.outcome for r in recorders] == [Outcome.SUCCESS, Outcome.FAILURE, Outcome.TIMEOUT]
    assert [env.t for env in envs] == [2, 3, 6]  # none stepped after its end
    assert [r.steps for r in recorders] == [2, 3, 6]
    assert recorders[0].success_step == 1


def test_success_at_end_mode_judges_the_last_step_only():
    task = fake_task(horizon=4, success=SuccessMode.AT_END)
    envs = [FunctionEnv(task, lambda seed, t, a: _transition(success=(t == 2) if seed == 1 else (t == 4)))
            for _ in range(2)]
    recorders = rollout(envs, ConstantPolicy(), _jobs(task, [1, 2]))
    assert [r.outcome for r in recorders] == [Outcome.FAILURE, Outcome.SUCCESS]
    assert [env.t for env in envs] == [4, 4]


class SeedSensitivePolicy:
    """Raises when seed 7 is in the batch; NaN for seed 8; wrong shape for seed 9."""

    def reset(self, context):
        self.seeds = context.seeds

    def act(self, observations):
        seeds = [self.seeds[i] for i in observations["env_ids"]]
        if 7 in seeds:
            raise ValueError("cannot handle seed 7")
        actions = np.zeros((len(seeds), 1))
        actions[[s == 8 for s in seeds]] = np.nan
        if seeds == [9]:
            return np.zeros(3)
        return actions


def test_faults_are_per_episode_outcomes_with_reasons():
    task = fake_task(horizon=5)
    envs = [FunctionEnv(task, lambda seed, t, a: _transition()) for _ in range(4)]
    recorders = rollout(envs, SeedSensitivePolicy(), _jobs(task, [7, 8, 9, 10]))
    outcomes = {r.job.seed: (r.outcome, r.reason) for r in recorders}
    assert outcomes[7][0] is Outcome.ERROR and "ValueError: cannot handle seed 7" in outcomes[7][1]
    assert outcomes[8][0] is Outcome.ERROR and "NaN" in outcomes[8][1]
    assert outcomes[9][0] is Outcome.ERROR and "shape" in outcomes[9][1]
    assert outcomes[10] == (Outcome.TIMEOUT, "")  # its batch-mates' faults did not touch it
    assert envs[3].t == 5


def test_simulator_exceptions_become_error_outcomes():
    task = fake_task(horizon=5)

    def step(seed, t, action):
        if seed == 1 and t == 2:
            raise FloatingPointError("physics diverged")
        return _transition()

    recorders = rollout([FunctionEnv(task, step), FunctionEnv(task, step)], ConstantPolicy(), _jobs(task, [1, 2]))
    assert recorders[0].outcome is Outcome.ERROR
    assert recorders[0].reason == "step 1: simulator raised FloatingPointError: physics diverged"
    assert recorders[1].outcome is Outcome.TIMEOUT


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_infinite_actions_are_rejected(bad):
    task = fake_task(horizon=3)
    recorders = rollout([FunctionEnv(task, lambda s, t, a: _transition())], ConstantPolicy(bad), _jobs(task, [1]))
    assert recorders[0].outcome is Outcome.ERROR and "infinity" in recorders[0].reason
    assert recorders[0].steps == 0


def test_recorded_columns_are_time_aligned():
    task = fake_task(horizon=4)
    recorders = rollout([FunctionEnv(task, lambda s, t, a: _transition(reward=float(t)))], ConstantPolicy(0.25), _jobs(task, [3]))
    columns = recorders[0].columns()
    assert columns["step"].tolist() == [0, 1, 2, 3]
    assert columns["t"].tolist() == [0.0, 0.1, 0.2, 0.3]
    assert columns["reward"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert columns["action"].shape == (4, 1) and np.all(columns["action"] == 0.25)
    assert columns["observation.state"][0].tolist() == [3.0]  # the observation the policy saw first
    assert columns["info.progress"].tolist() == [0.5] * 4
