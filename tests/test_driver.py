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

from assay.errors import AssayError
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.run import driver as driver_module
from assay.run.driver import Driver, Event, Happened
from assay.run.faults import Dispatcher, FaultPolicy
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
    time in the order sent, names each batch (1, 2, ... in the order sent), and names it in STARTED and DONE.
    ``sent`` logs (worker, name, job keys) of every batch sent; ``die_at``: names of batches that kill their
    worker; ``worn``: names of batches after which their worker reads as worn out."""

    send_ahead = True

    def __init__(self, root: str, die_at: Sequence[int] = (), worn: Sequence[int] = (), **kwargs) -> None:
        super().__init__(root, **kwargs)
        self.die_at, self.worn = set(die_at), set(worn)
        self.queues: dict[Hashable, deque[tuple[int, list]]] = {}
        self.sent: list[tuple[Hashable, int, tuple[str, ...]]] = []
        self.begun: set[int] = set()  # hung batches (by name) that reported STARTED
        self.last: dict[Hashable, int] = {}  # each worker's last batch done
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
            if name in self.die_at:
                events.append(Event(worker, Happened.DIED, detail="killed by SIGKILL"))
            else:
                self.last[worker] = name
                events.append(Event(worker, Happened.DONE, self.workers[worker].run_batch(jobs), batch=name))
            return events
        time.sleep(timeout or 0)
        return events

    def worn_out(self, worker: Hashable, records: Sequence[EpisodeRecord]) -> bool:
        return self.last.get(worker) in self.worn

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


LONGER = {**CAMPAIGN, "episodes": 12}  # six batches of two: enough waiting for a worker to be sent ahead
# How AheadPool plays LONGER on two workers: batch 1 (jobs 0-1) to worker 1 and 2 (jobs 2-3) to worker 2; once
# batch 1 is done (a short batch: the worker qualifies), 3 (jobs 4-5) to worker 1, and 4 (jobs 6-7) sent ahead
# to it while 3 runs (three wait, more than the two workers); no more are sent ahead (two or fewer wait).


def _keys(plan, *indexes: int) -> tuple[str, ...]:
    return tuple(plan.jobs[i].key for i in indexes)


def test_a_batch_is_sent_ahead_to_a_worker_with_a_short_last_batch_while_more_wait_than_workers(tmp_path):
    plan, records, pool, driver = _drive(tmp_path, {}, FaultPolicy(), campaign=LONGER, pool_class=AheadPool)
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)
    assert {r.key: (r.outcome, r.steps, r.trajectory_hash) for r in records} == _reference(tmp_path, LONGER)
    assert pool.sent[:4] == [(1, 1, _keys(plan, 0, 1)), (2, 2, _keys(plan, 2, 3)), (1, 3, _keys(plan, 4, 5)),
                             (1, 4, _keys(plan, 6, 7))]
    assert len(pool.sent) == 6 and driver.sent_ahead == 1 and driver.put_back == 0
    assert driver.restarts == 0 and pool.workers == {}


def test_no_batch_is_sent_ahead_to_a_worker_whose_last_batch_was_long(tmp_path, monkeypatch):
    monkeypatch.setattr(driver_module, "AHEAD_BELOW_S", 0.0)  # every batch counts as long
    plan, records, pool, driver = _drive(tmp_path, {}, FaultPolicy(), campaign=LONGER, pool_class=AheadPool)
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)
    assert driver.sent_ahead == 0 and all(len(pool.queues.get(w, ())) <= 1 for w in pool.queues)


def test_a_worker_that_dies_holding_a_batch_sent_ahead_is_charged_only_the_batch_it_ran(tmp_path):
    plan, records, pool, driver = _drive(tmp_path, {"die_at": [3]}, FaultPolicy(max_attempts=2, episode_timeout_s=60),
                                         campaign=LONGER, pool_class=AheadPool)
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)  # each job exactly once
    assert {r.key: (r.outcome, r.steps, r.trajectory_hash) for r in records} == _reference(tmp_path, LONGER)
    assert driver.restarts == 1 and ("kill", 1) in pool.log and driver.put_back == 1
    again = [keys for _, _, keys in pool.sent[4:]]
    assert again.count(_keys(plan, 6, 7)) == 1  # the batch sent ahead: sent again once, whole (not charged)
    assert again.count(_keys(plan, 4)) == again.count(_keys(plan, 5)) == 1  # the batch that ran: split, charged


def test_a_timed_out_batch_is_charged_and_the_batch_sent_ahead_of_it_runs_once_elsewhere(tmp_path):
    plan = prepare_campaign(campaign_from_data(LONGER))
    hung = plan.jobs[5].key  # batch 3, running on worker 1 with batch 4 sent ahead
    _, records, pool, driver = _drive(tmp_path, {"hang": [hung]}, FaultPolicy(max_attempts=1, episode_timeout_s=0.05),
                                      campaign=LONGER, pool_class=AheadPool)
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)  # each job exactly once
    assert [r.key for r in records if r.outcome is Outcome.ERROR] == [hung]
    reference = _reference(tmp_path, LONGER)
    assert all((r.outcome, r.steps, r.trajectory_hash) == reference[r.key] for r in records if r.key != hung)
    assert pool.sent[3] == (1, 4, _keys(plan, 6, 7)) and driver.put_back == 1
    assert [keys for _, _, keys in pool.sent].count(_keys(plan, 6, 7)) == 2  # sent again, once, whole


def test_a_worn_out_worker_holding_a_batch_sent_ahead_is_killed_and_that_batch_runs_once_elsewhere(tmp_path):
    plan, records, pool, driver = _drive(tmp_path, {"worn": [3]}, FaultPolicy(), campaign=LONGER,
                                         pool_class=AheadPool)
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)  # each job exactly once
    assert {r.key: (r.outcome, r.steps, r.trajectory_hash) for r in records} == _reference(tmp_path, LONGER)
    assert ("kill", 1) in pool.log and ("retire", 1) not in pool.log  # it may have begun batch 4: killed
    assert driver.put_back == 1 and [keys for _, _, keys in pool.sent].count(_keys(plan, 6, 7)) == 2


def test_a_pool_that_reports_a_batch_sent_ahead_done_first_is_refused(tmp_path):
    class OutOfOrder(AheadPool):
        def wait(self, busy, timeout):
            for worker in busy:
                queue = self.queues[worker]
                if len(queue) == 2:
                    queue.rotate()  # the batch sent ahead runs first
            return super().wait(busy, timeout)

    with pytest.raises(AssayError, match="reported batch 4 done before batch 3"):
        _drive(tmp_path, {}, FaultPolicy(), campaign=LONGER, pool_class=OutOfOrder)


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
    """Batch 4 (jobs 6-7), sent ahead to worker 1, hangs once it runs. Having said STARTED while the batch before
    it ran, its timeout splits it and only the hung episode is an error; never having said it, it is recorded
    whole (a timed-out batch that took no step)."""
    plan = prepare_campaign(campaign_from_data(LONGER))
    hung = plan.jobs[7].key
    _, records, pool, driver = _drive(tmp_path, {"hang": [hung], "hang_before_start": not began},
                                      FaultPolicy(max_attempts=1, episode_timeout_s=0.05), campaign=LONGER,
                                      pool_class=EarlyAhead)
    assert pool.sent[3] == (1, 4, _keys(plan, 6, 7))
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)
    errors = sorted(r.key for r in records if r.outcome is Outcome.ERROR)
    assert errors == ([hung] if began else sorted(_keys(plan, 6, 7)))


def test_a_started_that_names_the_batch_sent_ahead_is_not_given_to_the_running_one(tmp_path):
    """Batch 3 (jobs 4-5) hangs before it steps while batch 4, sent ahead, says STARTED: batch 3 is still not
    started, and is recorded whole."""

    class AheadSaysStarted(AheadPool):
        def wait(self, busy, timeout):
            for worker in busy:
                queue = self.queues[worker]
                if len(queue) == 2 and queue[1][0] not in self.begun and any(j.key in self.hang for j in queue[0][1]):
                    self.begun.add(queue[1][0])
                    return [Event(worker, Happened.STARTED, batch=queue[1][0])]
            return super().wait(busy, timeout)

    plan = prepare_campaign(campaign_from_data(LONGER))
    hung = plan.jobs[5].key
    _, records, pool, driver = _drive(tmp_path, {"hang": [hung], "hang_before_start": True},
                                      FaultPolicy(max_attempts=1, episode_timeout_s=0.05), campaign=LONGER,
                                      pool_class=AheadSaysStarted)
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)
    errors = sorted(r.key for r in records if r.outcome is Outcome.ERROR)
    assert errors == sorted(_keys(plan, 4, 5))  # recorded whole: it never began stepping


def test_a_late_started_of_a_batch_already_done_is_not_given_to_the_batch_that_took_over(tmp_path):
    """Each batch's STARTED arrives only after its DONE (reports can come out of order); batch 4 (jobs 6-7), sent
    ahead to worker 1, then hangs before it steps: it is still not started, and is recorded whole."""

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
    hung = plan.jobs[7].key
    _, records, pool, driver = _drive(tmp_path, {"hang": [hung], "hang_before_start": True},
                                      FaultPolicy(max_attempts=1, episode_timeout_s=0.05), campaign=LONGER,
                                      pool_class=LateStarted)
    assert pool.sent[3] == (1, 4, _keys(plan, 6, 7))
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)
    assert sorted(r.key for r in records if r.outcome is Outcome.ERROR) == sorted(_keys(plan, 6, 7))


def test_an_item_put_back_goes_first_as_it_was_and_is_not_a_retry():
    jobs = list(prepare_campaign(campaign_from_data(LONGER)).jobs)
    dispatcher = Dispatcher(batch_jobs(jobs, 2), FaultPolicy())
    assert dispatcher.waiting() == 6
    first, second = dispatcher.take(), dispatcher.take()
    assert dispatcher.waiting() == 4
    dispatcher.put_back(second)
    assert dispatcher.waiting() == 5 and dispatcher.retries == 0
    assert dispatcher.take() is second and second.attempt == first.attempt
    assert [item.jobs for item in iter(dispatcher.take, None)] == [tuple(jobs[i:i + 2]) for i in range(4, 12, 2)]


def test_a_death_after_the_batch_sent_ahead_said_started_is_charged_to_that_batch(tmp_path):
    """Batch 4, sent ahead to worker 1, says STARTED (so batch 3 was done) and the worker dies before batch 3's
    answer arrives: batch 4 is charged (split and retried), batch 3 goes back whole."""

    class DiesAfterAheadStarted(AheadPool):
        def wait(self, busy, timeout):
            for worker in busy:
                queue = self.queues[worker]
                if len(queue) == 2 and queue[1][0] in self.die_at:
                    if queue[1][0] not in self.begun:
                        self.begun.add(queue[1][0])
                        return [Event(worker, Happened.STARTED, batch=queue[1][0])]
                    queue.clear()
                    return [Event(worker, Happened.DIED, detail="killed by SIGKILL")]
            return super().wait(busy, timeout)

    plan, records, pool, driver = _drive(tmp_path, {"die_at": [4]}, FaultPolicy(max_attempts=2, episode_timeout_s=60),
                                         campaign=LONGER, pool_class=DiesAfterAheadStarted)
    assert sorted(r.key for r in records) == sorted(j.key for j in plan.jobs)  # each job exactly once
    assert {r.key: (r.outcome, r.steps, r.trajectory_hash) for r in records} == _reference(tmp_path, LONGER)
    again = [keys for _, _, keys in pool.sent[4:]]
    assert again.count(_keys(plan, 4, 5)) == 1  # batch 3: back whole, uncharged
    assert again.count(_keys(plan, 6)) == again.count(_keys(plan, 7)) == 1  # batch 4: charged, split
