"""A hang costs one timeout per batch (issue 40): a batch that never began stepping (its policy hung while
being built or reset) is recorded whole as ``wall_timeout`` at once, instead of being split and every job
timed out again alone; a batch that did begin is still split, so its healthy episodes are kept."""

from __future__ import annotations

import pytest

from assay.run import LocalExecutor, prepare_campaign
from assay.run.faults import Dispatcher, Failure, FaultPolicy, WorkItem
from assay.spec import campaign_from_data
from assay.store import Outcome
from tests.test_faults import run_and_collect


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
    assert {r.reason for r in records} == {"wall_timeout: its batch of 4 took no step within the 7 s wall-clock "
                                           "limit (the policy or the environments hung while being built or reset)"}
    stepping = Dispatcher([batch], policy)
    assert stepping.failed(stepping.take(), Failure.TIMED_OUT, "wall-clock limit", started=True) == []
    assert stepping.retries == 4 and [len(stepping.take().jobs) for _ in range(4)] == [1, 1, 1, 1]
    alone = stepping.failed(WorkItem(batch[:1]), Failure.TIMED_OUT, "wall-clock limit", started=True)
    assert [r.reason for r in alone] == ["wall_timeout: episode ran past its 7 s wall-clock limit"]


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
