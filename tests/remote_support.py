"""Shared pieces for the remote-policy tests: a served policy in a thread, tasks, jobs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from assay.policies.remote import PolicyServer, PolicyServerConfig, ServerThread
from assay.spec import ActionSpec, PolicySpec, ResolvedPolicy, TaskSpec, Variant, episode_key
from assay.spec.campaign import EpisodeJob, Pipeline

SMALL_MLP = {"hidden": [32, 32], "state_dim": 39, "action_dim": 4}


@contextlib.contextmanager
def serving(policy: Any, task: TaskSpec, **config: Any) -> Iterator[PolicyServer]:
    server = PolicyServer(policy, task, PolicyServerConfig(**{"port": 0, **config}), {"policy": "test", "version": "1"})
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


class SeededNoise:
    """Stateful: each slot draws its answers from an RNG seeded by its episode's seed, so an environment asked
    twice for one step walks another trajectory from then on. ``fail_seed``: the episode with this seed raises
    at its ``fail_at``-th request (0: the first)."""

    def __init__(self, fail_seed: int | None = None, fail_at: int = 3) -> None:
        self.fail_seed, self.fail_at = fail_seed, fail_at

    def reset(self, context: Any) -> None:
        self.seeds = list(context.seeds)
        self.rngs = [np.random.default_rng(seed) for seed in context.seeds]
        self.calls = [0] * len(context.seeds)

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        out = []
        for slot in observations["env_ids"]:
            if self.seeds[slot] == self.fail_seed and self.calls[slot] == self.fail_at:
                raise RuntimeError(f"injected failure at request {self.fail_at}")
            self.calls[slot] += 1
            out.append(self.rngs[slot].uniform(-1.0, 1.0, 4))
        return np.asarray(out)


class Integrator:
    """A SimEnv whose state is the seed, plus every action so far in its first dimensions: the trajectory is the
    actions' running sum, so a changed action changes every later state."""

    def __init__(self, task: TaskSpec) -> None:
        self.task, self.state, self.seed = task, np.zeros(task.state_dim), 0

    def reset(self, seed: int, variant: Any = None) -> dict[str, np.ndarray]:
        self.seed, self.state = seed, np.full(self.task.state_dim, float(seed))
        return {"state": self.state.copy()}

    def step(self, action: np.ndarray) -> Any:
        from assay.sim import Transition

        self.state[: len(action)] += action
        return Transition({"state": self.state.copy()}, float(action.sum()), False, False, False)

    def initial_conditions(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def close(self) -> None:
        pass
