"""A hang costs one timeout per batch (issue 40): a batch that never began stepping (its policy hung while
being built, reset, or answering its first request) is recorded whole as ``wall_timeout`` at once, instead
of being split and every job timed out again alone; a batch that did begin is still split, so its healthy
episodes are kept."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from assay.policies import PolicyContext
from assay.run import LocalExecutor, prepare_campaign, rollout
from assay.run.faults import Dispatcher, Failure, FaultPolicy, WorkItem
from assay.sim import Transition
from assay.spec import Pipeline, campaign_from_data
from assay.store import Outcome
from tests.helpers import FunctionEnv
from tests.remote_support import jobs_for, state_task
from tests.test_faults import run_and_collect

NO_STEP = ("wall_timeout: its batch of 4 took no step within the 7 s wall-clock limit (the policy or the "
           "environments hung while being built or reset, or in the policy's first inference)")


class HangingFirstAct:
    """Built and reset at once; its first ``act`` sleeps an hour (a model that deadlocks warming up)."""

    def reset(self, context: PolicyContext) -> None:
        self.calls = 0

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        self.calls += 1
        if self.calls == 1:
            time.sleep(3600)
        return np.zeros((len(observations["state"]), 1))


class Logged:
    """Writes what happens into ``log``; its very first ``act`` raises when ``first_raises``."""

    def __init__(self, log: list[str], first_raises: bool = False) -> None:
        self.log, self.first_raises, self.calls = log, first_raises, 0

    def reset(self, context: PolicyContext) -> None:
        self.log.append("reset")

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        self.calls += 1
        self.log.append(f"act {len(observations['state'])}")
        if self.first_raises and self.calls == 1:
            raise RuntimeError("not warmed up")
        return np.zeros((len(observations["state"]), 4))


class BrokenReset(FunctionEnv):
    def reset(self, seed: int, variant: Any = None) -> Any:
        raise RuntimeError("no scene")


def _batch_of(count: int):
    data = {"name": "four", "seed": 3, "episodes": count, "envs_per_worker": count, "horizon": 5,
            "tasks": ["gymnasium/Pendulum-v1"], "policies": ["random"]}
    jobs = prepare_campaign(campaign_from_data(data)).jobs
    return tuple(jobs)


def test_a_batch_that_never_started_is_recorded_whole_and_one_that_started_is_split():
    batch = _batch_of(4)
    policy = FaultPolicy(episode_timeout_s=7.0)
    hung = Dispatcher([batch], policy)
    item = hung.take()
    records = hung.failed(item, Failure.TIMED_OUT, "wall-clock limit", started=False)
    assert [r.outcome for r in records] == [Outcome.ERROR] * 4 and not hung.has_work() and hung.retries == 0
    assert {r.reason for r in records} == {NO_STEP}
    stepping = Dispatcher([batch], policy)
    assert stepping.failed(stepping.take(), Failure.TIMED_OUT, "wall-clock limit", started=True) == []
    assert stepping.retries == 4 and [len(stepping.take().jobs) for _ in range(4)] == [1, 1, 1, 1]
    alone = stepping.failed(WorkItem(batch[:1]), Failure.TIMED_OUT, "wall-clock limit", started=True)
    assert [r.reason for r in alone] == ["wall_timeout: episode ran past its 7 s wall-clock limit"]


@pytest.mark.parametrize("pipeline", [Pipeline.LOCKSTEP, Pipeline.DECOUPLED])
@pytest.mark.parametrize("first_raises", [False, True])
def test_a_batch_is_started_once_its_policys_first_act_has_returned(pipeline, first_raises):
    """STARTED (``on_started``) comes after the first answer (or the first raise, and the rows asked again
    alone), before the first step: a hang in the first inference is the batch's, like one in its reset."""
    task = state_task(horizon=3)
    log: list[str] = []

    def step(seed: int, t: int, action: np.ndarray) -> Transition:
        log.append("step")
        return Transition({"state": np.zeros(39)}, 0.0, False, False, False)

    envs = [FunctionEnv(task, step) for _ in range(2)]
    recorders = rollout(envs, Logged(log, first_raises), jobs_for(task, [1, 2], pipeline=pipeline),
                        on_started=lambda: log.append("started"))
    first = {  # lockstep asks both rows at once (and each alone after a raise); decoupled asks one group first
        (Pipeline.LOCKSTEP, False): ["act 2"], (Pipeline.LOCKSTEP, True): ["act 2", "act 1", "act 1"],
        (Pipeline.DECOUPLED, False): ["act 1"], (Pipeline.DECOUPLED, True): ["act 1"]}[pipeline, first_raises]
    assert log[: len(first) + 2] == ["reset", *first, "started"] and log.count("started") == 1
    assert "step" in log
    # only an answer that raised for a row asked alone fails its episode: decoupled's first group of one
    failed = pipeline is Pipeline.DECOUPLED and first_raises
    assert [r.outcome for r in recorders] == [Outcome.ERROR if failed else Outcome.TIMEOUT, Outcome.TIMEOUT]


def test_a_batch_whose_every_reset_failed_never_starts():
    task = state_task()
    log: list[str] = []
    recorders = rollout([BrokenReset(task)], Logged(log), jobs_for(task, [1]), on_started=lambda: log.append("started"))
    assert recorders[0].outcome is Outcome.ERROR and recorders[0].reason.startswith("reset failed")
    assert log == ["reset"], "the policy is reset, never asked, and the batch never said it started"


@pytest.mark.slow
def test_a_constructor_hang_in_a_batch_of_four_costs_one_timeout(tmp_path):
    data = {"name": "hang-build", "seed": 3, "episodes": 4, "envs_per_worker": 4, "horizon": 5,
            "tasks": ["gymnasium/Pendulum-v1"],
            "policies": [{"name": "stuck", "entrypoint": "tests.faulty_policies:HangingConstructor"}]}
    executor = LocalExecutor(tmp_path, workers=1, faults=FaultPolicy(episode_timeout_s=3.0))
    _, _, records = run_and_collect(tmp_path, executor, data)
    assert len(records) == 4 and all(r.outcome is Outcome.ERROR for r in records)
    assert all(r.reason.startswith("wall_timeout: its batch of 4 took no step") for r in records)
    assert executor.restarts == 1, "one timeout (one worker killed) for the whole batch, not 1 + 4"


@pytest.mark.slow
def test_a_hang_in_the_first_inference_of_a_batch_of_four_costs_one_timeout(tmp_path):
    """The policy is built and reset at once and hangs in its first ``act``: before, STARTED had been sent after
    the reset, so the batch was split and each of its 4 jobs hung again alone (1 + 4 timeouts)."""
    data = {"name": "hang-first-act", "seed": 3, "episodes": 4, "envs_per_worker": 4, "horizon": 5,
            "tasks": ["gymnasium/Pendulum-v1"],
            "policies": [{"name": "stuck", "entrypoint": "tests.test_batch_timeout:HangingFirstAct"}]}
    executor = LocalExecutor(tmp_path, workers=1, faults=FaultPolicy(episode_timeout_s=3.0))
    _, _, records = run_and_collect(tmp_path, executor, data)
    assert len(records) == 4 and all(r.outcome is Outcome.ERROR for r in records)
    assert all(r.reason.startswith("wall_timeout: its batch of 4 took no step") for r in records)
    assert all(r.reason.endswith("or in the policy's first inference)") for r in records)
    assert executor.restarts == 1, "one timeout (one worker killed) for the whole batch, not 1 + 4"
