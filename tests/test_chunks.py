"""Action chunks: replan_every, chunk bookkeeping columns, the key, and decoupled == lockstep."""

from __future__ import annotations

import numpy as np
import pytest

from assay.run import rollout
from assay.sim import Transition
from assay.spec import CampaignSpec, PolicySpec, ResolvedPolicy, Variant, episode_key
from assay.spec.campaign import Pipeline, plan
from assay.store import Outcome
from tests.helpers import FunctionEnv
from tests.remote_support import jobs_for, state_task


class ChunkPolicy:
    """Returns an (H, 1) chunk per row: ``seed*100 + call*10 + index``; counts calls per env."""

    def __init__(self, horizon: int = 4) -> None:
        self.horizon = horizon

    def reset(self, context):
        self.seeds = context.seeds
        self.calls = [0] * len(context.seeds)

    def act(self, observations):
        chunks = []
        for env in observations["env_ids"]:
            base = self.seeds[env] * 100 + self.calls[env] * 10
            chunks.append([[base + i] for i in range(self.horizon)])
            self.calls[env] += 1
        return np.asarray(chunks, dtype=np.float64) / 1000.0


def _env(task):
    return FunctionEnv(task, lambda s, t, a: Transition({"state": np.array([float(t)])}, float(a[0]), False, False, False))


@pytest.mark.parametrize("replan_every, calls, executed", [
    (None, 3, [100, 101, 102, 103, 110, 111, 112, 113, 120, 121]),  # the whole chunk by default
    (2, 5, [100, 101, 110, 111, 120, 121, 130, 131, 140, 141]),
    (1, 10, [100, 110, 120, 130, 140, 150, 160, 170, 180, 190]),
])
def test_runner_executes_the_first_replan_every_actions_of_each_chunk(replan_every, calls, executed):
    task = state_task(state_dim=1, action_dim=1, horizon=10)
    policy = ChunkPolicy()
    recorders = rollout([_env(task)], policy, jobs_for(task, [1], replan_every))
    columns = recorders[0].columns()
    assert recorders[0].outcome is Outcome.TIMEOUT and policy.calls == [calls]
    assert np.round(columns["action"][:, 0] * 1000).astype(int).tolist() == executed
    per_chunk = replan_every or 4
    assert columns["chunk_id"].tolist() == [i // per_chunk for i in range(10)]
    assert columns["chunk_index"].tolist() == [i % per_chunk for i in range(10)]
    latency = columns["policy_latency_ms"]
    assert np.all(latency >= 0) and all(len(set(latency[columns["chunk_id"] == c])) == 1 for c in range(calls))


def test_a_chunk_with_a_nan_ends_the_episode_before_any_of_it_runs():
    class NanChunk(ChunkPolicy):
        def act(self, observations):
            chunks = super().act(observations)
            chunks[:, 2] = np.nan
            return chunks

    task = state_task(state_dim=1, action_dim=1)
    recorders = rollout([_env(task)], NanChunk(), jobs_for(task, [1]))
    assert recorders[0].outcome is Outcome.ERROR and "NaN" in recorders[0].reason and recorders[0].steps == 0


class WrongDtype:
    def reset(self, context):
        pass

    def act(self, observations):
        return np.ones((len(observations["env_ids"]), 1), dtype=np.int32)


def test_integer_actions_are_a_dtype_error():
    task = state_task(state_dim=1, action_dim=1)
    recorders = rollout([_env(task)], WrongDtype(), jobs_for(task, [1]))
    assert recorders[0].outcome is Outcome.ERROR and "dtype int32, expected floating point" in recorders[0].reason


def test_replan_every_is_part_of_the_key_only_when_set():
    task = state_task()
    policy = ResolvedPolicy(PolicySpec(name="p", builtin="random"), "1")
    default = episode_key(task, Variant(), policy, 7)
    assert episode_key(task, Variant(), policy, 7, None) == default
    assert episode_key(task, Variant(), policy, 7, 2) != default
    spec = CampaignSpec(name="c", episodes=1, tasks=("fake/state@1",), policies=(policy.spec,), replan_every=2,
                        pipeline="decoupled")
    job = plan(spec, [task], [policy])[0]
    assert job.replan_every == 2 and job.pipeline is Pipeline.DECOUPLED
    with pytest.raises(ValueError):
        CampaignSpec(name="c", episodes=1, tasks=("t",), policies=(policy.spec,), replan_every=0)


@pytest.mark.parametrize("replan_every", [None, 3])
def test_decoupled_pipeline_gives_the_lockstep_trajectories(replan_every):
    task = state_task(state_dim=1, action_dim=1, horizon=12)
    seeds = [3, 4, 5, 6, 7]

    def step(seed, t, action):  # episodes end at different times
        return Transition({"state": np.array([float(t)])}, float(action[0]), t == seed + 2, False, False)

    runs = {}
    for pipeline in (Pipeline.LOCKSTEP, Pipeline.DECOUPLED):
        envs = [FunctionEnv(task, step) for _ in seeds]
        recorders = rollout(envs, ChunkPolicy(), jobs_for(task, seeds, replan_every, pipeline))
        runs[pipeline] = [(r.outcome, r.steps, r.trajectory_hash(), r.columns()["chunk_id"].tolist()) for r in recorders]
    assert runs[Pipeline.LOCKSTEP] == runs[Pipeline.DECOUPLED]
    assert [steps for _, steps, _, _ in runs[Pipeline.LOCKSTEP]] == [s + 2 for s in seeds]
