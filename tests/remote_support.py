"""Shared pieces for the remote-policy tests: a served policy in a thread, tasks, jobs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from assay.policies.remote import PolicyServer, ServerConfig, ServerThread
from assay.spec import ActionSpec, PolicySpec, ResolvedPolicy, TaskSpec, Variant, episode_key
from assay.spec.campaign import EpisodeJob, Pipeline

SMALL_MLP = {"hidden": [32, 32], "state_dim": 39, "action_dim": 4}


@contextlib.contextmanager
def serving(policy: Any, task: TaskSpec, **config: Any) -> Iterator[PolicyServer]:
    server = PolicyServer(policy, task, ServerConfig(**{"port": 0, **config}), {"policy": "test", "version": "1"})
    with ServerThread(server) as running:
        yield running


def state_task(state_dim: int = 39, action_dim: int = 4, horizon: int = 8) -> TaskSpec:
    return TaskSpec(name="fake/state", version=1, backend="gymnasium", env_name="Fake-v0", instructions=("do it",),
                    horizon=horizon, control_hz=10.0, state_dim=state_dim,
                    action=ActionSpec(dim=action_dim, kind="delta_ee_gripper"))


def jobs_for(task: TaskSpec, seeds: list[int], replan_every: int | None = None,
             pipeline: Pipeline = Pipeline.LOCKSTEP) -> list[EpisodeJob]:
    policy = ResolvedPolicy(PolicySpec(name="p", builtin="random"), "1")
    return [EpisodeJob("c", task, Variant(), policy, i, s,
                       episode_key(task, Variant(), policy, s, replan_every=replan_every),
                       task.instruction, replan_every, pipeline) for i, s in enumerate(seeds)]


class RaisingPolicy:
    """Raises for rows whose first state value is above 100; zeros otherwise."""

    def reset(self, context: Any) -> None:
        pass

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        state = observations["state"]
        if np.any(state[:, 0] > 100):
            raise RuntimeError("state out of the training range")
        return np.zeros((len(state), 4))
