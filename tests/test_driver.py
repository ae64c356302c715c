"""The one driver loop (run/driver.py) over an in-process pool of real Workers, with scripted faults.

The local and Ray executors are thin pools over the same Driver and keep their own fault tests
(tests/test_faults.py, tests/test_chaos.py, tests/test_ray.py); these check the driver's decisions
exactly, with no process or timing noise: who is replaced, what is retried, what becomes an error.
"""

from __future__ import annotations

import time
from collections import deque
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
    send_ahead = False

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


class AheadPool(ScriptedPool):
    """A :class:`ScriptedPool` that sends ahead, as Ray's does: each worker runs the batches sent to it one at a
    time in the order sent, names each batch, and names it in STARTED and DONE. ``sent`` logs (worker, name,
    job keys) of every batch sent."""

    send_ahead = True

    def __init__(self, root: str, **kwargs) -> None:
        super().__init__(root, **kwargs)
        self.queues: dict[Hashable, deque[tuple[int, list]]] = {}
        self.sent: list[tuple[Hashable, int, tuple[str, ...]]] = []
        self.begun: set[int] = set()  # hung batches (by name) that reported STARTED
        self._named = 0

    def assign(self, worker: Hashable, jobs) -> int:
        self._named += 1
        self.queues.setdefault(worker, deque()).append((self._named, list(jobs)))
        self.sent.append((worker, self._named, tuple(job.key for job in jobs)))
        return self._named

    def wait(self, busy: Sequence[Hashable], timeout: float | None) -> list[Event]:
        events = [Event(w, Happened.READY) for w in sorted(self.fresh)]
        self.fresh.clear()
        for worker in busy:
            name, jobs = self.queues[worker][0]
            if any(job.key in self.hang for job in jobs):
                if name not in self.begun and not self.hang_before_start:
                    self.begun.add(name)
                    events.append(Event(worker, Happened.STARTED, batch=name))
                    return events
                continue
            self.queues[worker].popleft()
            if worker in self.die:
                events.append(Event(worker, Happened.DIED, detail="killed by SIGKILL"))
            else:
                events.append(Event(worker, Happened.DONE, self.workers[worker].run_batch(jobs), batch=name))
            return events
        time.sleep(timeout or 0)
        return events

    def kill(self, worker: Hashable) -> None:
        self.queues.pop(worker, None)
        super().kill(worker)


def _drive(tmp_path, pool_args: dict, faults: FaultPolicy, workers: int = 2, campaign: dict = CAMPAIGN,
           pool_class: type = ScriptedPool):
    root = tmp_path / "store"
    Store(root).close()
    plan = prepare_campaign(campaign_from_data(campaign))
    batches = batch_jobs(list(plan.jobs), 2)
    pool = pool_class(str(root), **pool_args)
    driver = Driver(pool, workers, faults, root)
    records = list(driver.run(batches))
    return plan, records, pool, driver


def _reference(tmp_path, campaign: dict = CAMPAIGN) -> dict[str, tuple]:
    root = tmp_path / "inline"
    with Store(root) as store:
        run_campaign(prepare_campaign(campaign_from_data(campaign)), store, InlineExecutor(root))
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


LONGER = {**CAMPAIGN, "episodes": 12}  # six batches of two: enough waiting for two workers to be sent ahead


def test_batches_are_sent_ahead_only_while_more_wait_than_there_are_workers(tmp_path):
    plan, records, pool, driver = _drive(tmp_path, {}, FaultPolicy(), campaign=LONGER, pool_class=AheadPool)
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)
    assert {r.key: (r.outcome, r.steps, r.trajectory_hash) for r in records} == _reference(tmp_path, LONGER)
    # each worker's first batch, then one ahead each while 4 and 3 wait (> 2 workers); then none while 2 wait:
    # those two go out one at a time, each to a worker that finished what it held
    assert [(w, n) for w, n, _ in pool.sent[:4]] == [(1, 1), (2, 2), (1, 3), (2, 4)]
    assert len(pool.sent) == 6 and driver.restarts == 0 and pool.workers == {}


def test_a_worker_that_dies_holding_a_batch_sent_ahead_is_charged_only_the_batch_it_ran(tmp_path):
    plan, records, pool, driver = _drive(tmp_path, {"die": [1]}, FaultPolicy(max_attempts=2, episode_timeout_s=60),
                                         campaign=LONGER, pool_class=AheadPool)
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)  # each job exactly once
    assert {r.key: (r.outcome, r.steps, r.trajectory_hash) for r in records} == _reference(tmp_path, LONGER)
    ran, ahead = pool.sent[0][2], pool.sent[2][2]  # worker 1's batch, and the one sent ahead to it
    assert pool.sent[0][0] == pool.sent[2][0] == 1
    assert driver.restarts == 1 and ("kill", 1) in pool.log
    again = [keys for _, _, keys in pool.sent[3:]]
    assert ahead in again  # sent again whole, as it was: not split, so not charged an attempt
    assert all(len(keys) == 1 for keys in again if set(keys) <= set(ran))  # the batch that ran is split
    assert sum(1 for keys in again if set(keys) <= set(ran)) == 2


def test_a_timed_out_batch_is_charged_and_the_batch_sent_ahead_of_it_runs_once_elsewhere(tmp_path):
    plan = prepare_campaign(campaign_from_data(LONGER))
    hung = plan.jobs[1].key  # worker 1's first batch is jobs[0:2]
    _, records, pool, driver = _drive(tmp_path, {"hang": [hung]}, FaultPolicy(max_attempts=1, episode_timeout_s=0.05),
                                      campaign=LONGER, pool_class=AheadPool)
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)  # each job exactly once
    assert [r.key for r in records if r.outcome is Outcome.ERROR] == [hung]
    reference = _reference(tmp_path, LONGER)
    assert all((r.outcome, r.steps, r.trajectory_hash) == reference[r.key] for r in records if r.key != hung)
    ahead = pool.sent[2]
    assert ahead[0] == 1 and [keys for _, _, keys in pool.sent].count(ahead[2]) == 2  # sent again, once, whole


class EarlyAhead(AheadPool):
    """The batch sent ahead reports STARTED while the batch before it still runs, as a report that overtakes
    the earlier batch's DONE could; ``hang_before_start`` keeps it from ever reporting it."""

    def wait(self, busy, timeout):
        for worker in busy:
            queue = self.queues[worker]
            if len(queue) == 2 and queue[1][0] not in self.begun and any(j.key in self.hang for j in queue[1][1]):
                self.begun.add(queue[1][0])  # STARTED once, now: never again after its promotion
                if not self.hang_before_start:
                    return [Event(worker, Happened.STARTED, batch=queue[1][0])]
        return super().wait(busy, timeout)


@pytest.mark.parametrize("began", [True, False])
def test_the_batch_sent_ahead_keeps_its_own_started_when_it_hangs_after_taking_over(tmp_path, began):
    """Worker 1's batch sent ahead (jobs 4-5) hangs once it runs. Having said STARTED while the batch before it
    ran, its timeout splits it and only the hung episode is an error; never having said it, it is recorded
    whole (a timed-out batch that took no step)."""
    plan = prepare_campaign(campaign_from_data(LONGER))
    hung = plan.jobs[5].key
    _, records, pool, driver = _drive(tmp_path, {"hang": [hung], "hang_before_start": not began},
                                      FaultPolicy(max_attempts=1, episode_timeout_s=0.05), campaign=LONGER,
                                      pool_class=EarlyAhead)
    assert pool.sent[2] == (1, 3, (plan.jobs[4].key, hung))
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)
    errors = sorted(r.key for r in records if r.outcome is Outcome.ERROR)
    assert errors == ([hung] if began else sorted([plan.jobs[4].key, hung]))


def test_a_started_that_names_the_batch_sent_ahead_is_not_given_to_the_running_one(tmp_path):
    """The running batch hangs before it steps while the batch sent ahead says STARTED: the running batch is
    still not started, and is recorded whole."""

    class AheadSaysStarted(AheadPool):
        def wait(self, busy, timeout):
            for worker in busy:
                queue = self.queues[worker]
                if len(queue) == 2 and queue[1][0] not in self.begun and any(j.key in self.hang for j in queue[0][1]):
                    self.begun.add(queue[1][0])
                    return [Event(worker, Happened.STARTED, batch=queue[1][0])]
            return super().wait(busy, timeout)

    plan = prepare_campaign(campaign_from_data(LONGER))
    hung = plan.jobs[1].key
    _, records, pool, driver = _drive(tmp_path, {"hang": [hung], "hang_before_start": True},
                                      FaultPolicy(max_attempts=1, episode_timeout_s=0.05), campaign=LONGER,
                                      pool_class=AheadSaysStarted)
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)
    errors = sorted(r.key for r in records if r.outcome is Outcome.ERROR)
    assert errors == sorted([plan.jobs[0].key, hung])  # recorded whole: it never began stepping


def test_a_late_started_of_a_batch_already_done_is_not_given_to_the_batch_that_took_over(tmp_path):
    """Each batch's STARTED arrives only after its DONE (reports can come out of order); worker 1's batch sent
    ahead (jobs 4-5) then hangs before it steps: it is still not started, and is recorded whole."""

    class LateStarted(AheadPool):
        def __init__(self, root, **kwargs):
            super().__init__(root, **kwargs)
            self.late: list[Event] = []

        def wait(self, busy, timeout):
            if self.late:
                return [self.late.pop(0)]
            events = super().wait(busy, timeout)
            self.late += [Event(e.worker, Happened.STARTED, batch=e.batch) for e in events if e.what is Happened.DONE]
            return events

    plan = prepare_campaign(campaign_from_data(LONGER))
    hung = plan.jobs[5].key
    _, records, pool, driver = _drive(tmp_path, {"hang": [hung], "hang_before_start": True},
                                      FaultPolicy(max_attempts=1, episode_timeout_s=0.05), campaign=LONGER,
                                      pool_class=LateStarted)
    assert pool.sent[2] == (1, 3, (plan.jobs[4].key, hung))
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)
    assert sorted(r.key for r in records if r.outcome is Outcome.ERROR) == sorted([plan.jobs[4].key, hung])
