"""The one driver loop (run/driver.py) over an in-process pool of real Workers, with scripted faults.

The local and Ray executors are thin pools over the same Driver and keep their own fault tests
(tests/test_faults.py, tests/test_chaos.py, tests/test_ray.py); these check the driver's decisions
exactly, with no process or timing noise: who is replaced, what is retried, what becomes an error.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence

import pytest

from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.run.driver import Driver, Event, Happened
from assay.run.faults import FaultPolicy
from assay.run.worker import Worker
from assay.spec import batch_jobs, campaign_from_data
from assay.store import EpisodeRecord, Outcome, Store

CAMPAIGN = {"name": "driven", "seed": 9, "episodes": 6, "envs_per_worker": 2, "horizon": 5,
            "tasks": ["gymnasium/Pendulum-v1"], "policies": ["random"]}


class ScriptedPool:
    """Workers are real :class:`Worker` objects in this process. ``die``: the spawn numbers whose first batch
    dies; ``hang``: job keys whose batch never answers (a hung episode). Everything that happens is logged."""

    reuse_environments = True

    def __init__(self, root: str, die: Sequence[int] = (), hang: Sequence[int] = (),
                 hang_before_start: bool = False) -> None:
        self.root, self.die, self.hang = root, set(die), set(hang)
        self.hang_before_start = hang_before_start  # the hang is in the batch's set-up: no STARTED is sent
        self.workers: dict[Hashable, Worker] = {}
        self.jobs: dict[Hashable, list] = {}
        self.fresh: set[Hashable] = set()  # spawned, READY not yet reported
        self.stepping: set[Hashable] = set()  # hung workers whose batch reported STARTED
        self.log: list[tuple[str, int]] = []
        self._next = 0

    def spawn(self) -> int:
        self._next += 1
        self.workers[self._next] = Worker(self.root)
        self.fresh.add(self._next)
        self.log.append(("spawn", self._next))
        return self._next

    def assign(self, worker: Hashable, jobs) -> None:
        self.jobs[worker] = list(jobs)
        self.stepping.discard(worker)

    def wait(self, busy: Sequence[Hashable], timeout: float | None) -> list[Event]:
        events = [Event(w, Happened.READY) for w in sorted(self.fresh)]
        self.fresh.clear()
        for worker in busy:
            if any(job.key in self.hang for job in self.jobs[worker]):
                # the hang is in an episode: the batch began stepping first
                if worker not in self.stepping and not self.hang_before_start:
                    self.stepping.add(worker)
                    events.append(Event(worker, Happened.STARTED))
                    return events
                continue
            jobs = self.jobs.pop(worker)
            if worker in self.die:
                events.append(Event(worker, Happened.DIED, detail="killed by SIGKILL"))
            else:
                events.append(Event(worker, Happened.DONE, self.workers[worker].run_batch(jobs)))
            return events  # one worker's news per call, as a real pool's wait returns on the first
        time.sleep(timeout or 0)  # every busy worker hangs: the deadline passes
        return events

    def worn_out(self, worker: Hashable, records: Sequence[EpisodeRecord]) -> bool:
        return False

    def kill(self, worker: Hashable) -> None:
        self.jobs.pop(worker, None)
        self.workers.pop(worker).close()
        self.log.append(("kill", worker))

    def retire(self, worker: Hashable) -> None:
        self.workers.pop(worker).close()
        self.log.append(("retire", worker))

    def close(self) -> None:
        for worker in list(self.workers):
            self.retire(worker)


def _drive(tmp_path, pool_args: dict, faults: FaultPolicy, workers: int = 2):
    root = tmp_path / "store"
    Store(root).close()
    plan = prepare_campaign(campaign_from_data(CAMPAIGN))
    batches = batch_jobs(list(plan.jobs), 2)
    pool = ScriptedPool(str(root), **pool_args)
    driver = Driver(pool, workers, faults, root)
    records = list(driver.run(batches))
    return plan, records, pool, driver


def _reference(tmp_path) -> dict[str, tuple]:
    root = tmp_path / "inline"
    with Store(root) as store:
        run_campaign(prepare_campaign(campaign_from_data(CAMPAIGN)), store, InlineExecutor(root))
        return {r.key: (r.outcome, r.steps, r.trajectory_hash) for r in store.catalog.episodes(campaign="driven")}


def test_a_death_replaces_the_worker_and_its_batch_runs_again_with_the_same_results(tmp_path):
    plan, records, pool, driver = _drive(tmp_path, {"die": [1]}, FaultPolicy(max_attempts=2, episode_timeout_s=60))
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)  # each job exactly once
    assert {r.key: (r.outcome, r.steps, r.trajectory_hash) for r in records} == _reference(tmp_path)
    assert driver.restarts == 1
    assert pool.log[:3] == [("spawn", 1), ("spawn", 2), ("kill", 1)] and ("spawn", 3) in pool.log
    assert pool.workers == {}  # every worker retired or closed at the end


def test_a_hung_batch_is_split_and_only_the_hung_episode_becomes_an_error(tmp_path):
    hung = prepare_campaign(campaign_from_data(CAMPAIGN)).jobs[1].key  # in the first batch, beside jobs[0]
    plan, records, pool, driver = _drive(tmp_path, {"hang": [hung]},
                                         FaultPolicy(max_attempts=1, episode_timeout_s=0.05))
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)  # each job exactly once
    errors = [r for r in records if r.outcome is Outcome.ERROR]
    assert [r.key for r in errors] == [hung] and "wall_timeout" in (errors[0].reason or "")
    reference = _reference(tmp_path)
    assert all((r.outcome, r.steps, r.trajectory_hash) == reference[r.key] for r in records if r.key != hung)
    assert driver.restarts == 2  # the batch's worker, then the worker of the hung episode alone
    assert [w for what, w in pool.log if what == "kill"][0] == 1


@pytest.mark.parametrize("workers", [1, 3])
def test_workers_left_with_nothing_to_do_are_retired_and_none_is_spawned_beyond_the_batches(tmp_path, workers):
    plan, records, pool, driver = _drive(tmp_path, {}, FaultPolicy(), workers=workers)
    assert len(records) == len(plan.jobs) and driver.restarts == 0
    spawned = [w for what, w in pool.log if what == "spawn"]
    assert len(spawned) == min(workers, 3)  # three batches of two
    assert sorted(w for what, w in pool.log if what == "retire") == spawned and pool.workers == {}


def test_a_batch_hung_before_it_began_stepping_costs_one_timeout_and_is_recorded_whole(tmp_path):
    plan = prepare_campaign(campaign_from_data(CAMPAIGN))
    hung = plan.jobs[1].key  # its batch is jobs[0:2]
    _, records, pool, driver = _drive(tmp_path, {"hang": [hung], "hang_before_start": True},
                                      FaultPolicy(max_attempts=1, episode_timeout_s=0.05))
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)  # each job exactly once
    errors = sorted(r.key for r in records if r.outcome is Outcome.ERROR)
    assert errors == sorted([plan.jobs[0].key, hung])  # the whole batch, not split and timed out again
    assert all("wall_timeout" in (r.reason or "") for r in records if r.outcome is Outcome.ERROR)
    assert driver.restarts == 1  # one timeout: its worker, once
