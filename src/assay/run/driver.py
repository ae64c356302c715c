"""One driver loop for every executor with workers: hand out batches, collect records, handle faults.

The loop knows nothing of processes or Ray; it talks to a :class:`WorkerPool` (the way an HTTP
client has one request loop and many transports). The pool starts workers, sends a worker its
batch, and reports what happened as :class:`Event`\\ s; the driver decides everything else, the same
way for every pool:

* a worker runs one batch at a time, so a death or a timeout is attributable to it; a pool that
  ``sends ahead`` (Ray, where each hand-over is two remote calls) also holds the worker's next batch,
  which has not begun while the first runs: a death or a timeout is charged to the running batch
  (the one sent ahead once it has said STARTED: the batch before it was done, though its answer
  died with the worker), and the other goes back to the queue as it was (``Dispatcher.put_back``). A batch is sent
  ahead only to a worker whose last batch took under ``AHEAD_BELOW_S`` (short batches, where the
  hand-over's milliseconds count; a LIBERO batch of a minute gains nothing and could hold its
  successor back for a minute) and only while more batches wait than there are workers. What it
  costs: at the end, a batch sent ahead may wait behind its worker's batch (short, by the first rule)
  while another worker has nothing left; and its wall-clock limit starts when the driver sees the
  batch before it done, a few milliseconds after the worker began it;
* a batch's wall-clock limit starts once its worker is ready (start-up is not the batch's fault); a
  worker says when its batch has started (STARTED: built, reset, and its policy's first ``act``
  returned), so a timeout knows whether the batch hung in its set-up or first inference (recorded
  whole: every job alone would hang the same way) or in its episodes (split and retried);
* a worker that dies, or runs past the limit, is killed and replaced, and :class:`Dispatcher`
  decides whether its batch is retried or recorded as ``error``; half-written files are removed;
* a worker whose batch ended in a resource error, or that the pool finds worn out (resident memory
  above the limit), is retired and replaced before it gets another batch (one that holds a batch sent
  ahead, and may have begun it, is killed, and that batch goes back to the queue);
* the next batches go out before the finished records are passed on, so no worker waits while the
  caller writes catalog rows; workers left with nothing to do are retired at once.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

from assay.errors import AssayError
from assay.run.faults import Batch, Claim, Dispatcher, Failure, FaultPolicy, WorkItem, environment_key, exhausted
from assay.store import EpisodeRecord
from assay.store.roots import remove_stale_temporaries

AHEAD_BELOW_S = 1.0  # send ahead only to a worker whose last batch was this short (the hand-over: ~5 ms on Ray)


class Happened(Enum):
    """What a worker did, as its pool reports it."""

    READY = "ready"  # the worker started and built itself
    STARTED = "started"  # its batch is built and reset and its policy answered once: it is stepping
    DONE = "done"  # its batch is done: ``records``
    DIED = "died"  # it died (killed, its node lost): ``detail`` says how; its batch may be retried


@dataclass(frozen=True)
class Event:
    """One thing one worker did."""

    worker: Hashable
    what: Happened
    records: Sequence[EpisodeRecord] = ()
    detail: str = ""
    batch: Hashable = None  # STARTED and DONE: the name ``assign`` gave the batch (pools that send ahead)


class WorkerPool(Protocol):
    """What the driver needs from a kind of worker. A pool raises :class:`AssayError` for what must stop
    the campaign (a worker that cannot start, an infrastructure error inside one)."""

    reuse_environments: bool  # hand a worker batches of the environments it has built, when there is a choice
    send_ahead: bool  # send a busy worker its next batch, which it runs once its batch is done (see the module)

    def spawn(self) -> Hashable:
        """Start a worker; it reports READY when it is up."""

    def assign(self, worker: Hashable, jobs: Batch) -> Hashable:
        """Send ``worker`` a batch (before it is READY is fine); the batch's name in later events, or None."""

    def wait(self, busy: Sequence[Hashable], timeout: float | None) -> list[Event]:
        """Block until one of ``busy`` (the workers holding a batch) has news, or ``timeout`` seconds."""

    def worn_out(self, worker: Hashable, records: Sequence[EpisodeRecord]) -> bool:
        """Whether ``worker`` must be replaced after its batch, beyond a resource error (``exhausted``)."""

    def kill(self, worker: Hashable) -> None:
        """Stop ``worker`` now, whatever it is doing."""

    def retire(self, worker: Hashable) -> None:
        """Stop ``worker`` politely: it holds no batch."""

    def close(self) -> None:
        """Stop every worker left."""


@dataclass
class _State:
    ready: bool = False
    item: WorkItem | None = None  # the batch it runs
    name: Hashable = None  # ``item``'s name from the pool's ``assign``
    deadline: float | None = None
    started: bool = False  # ``item`` has begun stepping
    environments: set[str] = field(default_factory=set)
    ahead: WorkItem | None = None  # its next batch, sent ahead: not begun while ``item`` runs
    ahead_name: Hashable = None
    ahead_started: bool = False  # the batch sent ahead said STARTED before ``item``'s DONE was handled
    began: float | None = None  # when ``item`` was handed out or took over (monotonic)
    last_s: float | None = None  # how long its last batch took, hand-out or take-over to DONE


class Driver:
    """Runs batches on a pool of ``workers`` workers; ``restarts`` counts workers replaced, ``sent_ahead`` the
    batches sent to a worker while it ran another, ``put_back`` those of them that went back to the queue."""

    def __init__(self, pool: WorkerPool, workers: int, faults: FaultPolicy, store_root: str | Path) -> None:
        self.pool, self.workers, self.faults, self.store_root = pool, workers, faults, store_root
        self.restarts = 0
        self.sent_ahead = 0
        self.put_back = 0
        self._states: dict[Hashable, _State] = {}

    def run(self, batches: Sequence[Batch], claim: Claim | None = None) -> Iterator[EpisodeRecord]:
        """Every batch's records, in the order they finish (each once: done, or error after its retries); with
        ``claim``, each batch runs the jobs it grants just before the batch is handed out (job leases)."""
        dispatcher = Dispatcher(batches, self.faults, claim)
        if not dispatcher.has_work():
            return
        try:
            for _ in range(min(self.workers, len(batches))):
                self._spawn()
            while True:
                self._hand_out(dispatcher)
                busy = [w for w, s in self._states.items() if s.item is not None]
                if not busy:
                    return
                deadlines = [s.deadline for s in self._states.values() if s.deadline is not None]
                timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
                finished: list[EpisodeRecord] = []
                for event in self.pool.wait(busy, timeout):
                    finished += self._handle(event, dispatcher)
                finished += self._expire(dispatcher)
                self._hand_out(dispatcher)  # before the caller writes catalog rows, so no worker waits on it
                yield from finished
        finally:
            self._states.clear()
            self.pool.close()

    def _spawn(self) -> None:
        self._states[self.pool.spawn()] = _State()

    def _replace(self, worker: Hashable, kill: bool, dispatcher: Dispatcher) -> None:
        """Stop ``worker`` and spawn another; a batch sent ahead to it goes back to the queue uncharged: it had
        not begun (the batch before it was running), or the driver stopped it."""
        state = self._states.pop(worker)
        if state.ahead is not None:
            dispatcher.put_back(state.ahead)
            self.put_back += 1
        if kill:
            self.pool.kill(worker)
            remove_stale_temporaries(self.store_root)  # what a dead or killed writer left half-written
        else:
            self.pool.retire(worker)
        self._spawn()
        self.restarts += 1

    def _handle(self, event: Event, dispatcher: Dispatcher) -> list[EpisodeRecord]:
        state = self._states.get(event.worker)
        if state is None:  # already replaced
            return []
        if event.what is Happened.READY:
            state.ready = True
            if state.item is not None:  # its batch starts now: start-up is neither its limit's nor its length's
                state.began = time.monotonic()
                state.deadline = self.faults.deadline(state.began)
            return []
        if event.what is Happened.STARTED:
            if state.ahead is not None and event.batch is not None and event.batch == state.ahead_name:
                state.ahead_started = True
            elif event.batch is None or event.batch == state.name:
                state.started = state.item is not None
            return []  # else: news of a batch already done
        item = state.item
        if event.what is Happened.DIED:
            if state.ahead is not None and state.ahead_started:  # it had finished ``item``, whose answer died with it
                item, state.ahead = state.ahead, item  # the batch it was running is charged; ``item`` goes back
            self._replace(event.worker, kill=True, dispatcher=dispatcher)
            return dispatcher.failed(item, Failure.DIED, event.detail) if item is not None else []
        if event.batch is not None and state.name is not None and event.batch != state.name:
            raise AssayError(f"the worker pool reported batch {event.batch!r} done before batch {state.name!r}, "
                             "which was sent to that worker first: a pool that sends ahead runs its batches in order")
        records = dispatcher.succeeded(event.records)
        now = time.monotonic()
        state.last_s = now - state.began if state.began is not None else None
        if exhausted(event.records) is not None or self.pool.worn_out(event.worker, event.records):
            # a fresh worker for the next batch; one that may have begun the batch sent ahead is killed
            self._replace(event.worker, kill=state.ahead is not None, dispatcher=dispatcher)
            return records
        state.item, state.name, state.started = state.ahead, state.ahead_name, state.ahead_started  # begun now
        state.deadline, state.began = None, now if state.ahead is not None else None
        state.ahead, state.ahead_name, state.ahead_started = None, None, False
        if state.item is not None and state.ready:
            state.deadline = self.faults.deadline(now)
        return records

    def _expire(self, dispatcher: Dispatcher) -> list[EpisodeRecord]:
        now, out = time.monotonic(), []
        for worker, state in list(self._states.items()):
            if state.item is not None and state.deadline is not None and now >= state.deadline:
                item, started = state.item, state.started
                self._replace(worker, kill=True, dispatcher=dispatcher)
                out += dispatcher.failed(item, Failure.TIMED_OUT, "wall-clock limit", started=started)
        return out

    def _hand_out(self, dispatcher: Dispatcher) -> None:
        for worker, state in list(self._states.items()):
            if state.item is not None:
                continue
            item = self._take(dispatcher, state) if dispatcher.has_work() else None
            if item is None:  # nothing left for it, or the claim granted nothing of what was left (other drivers)
                del self._states[worker]
                self.pool.retire(worker)
                continue
            state.item, state.started, state.began = item, False, time.monotonic()
            state.deadline = self.faults.deadline(state.began) if state.ready else None
            state.name = self.pool.assign(worker, item.jobs)
        if not self.pool.send_ahead:
            return
        for worker, state in list(self._states.items()):
            if state.item is None or state.ahead is not None or state.last_s is None or \
                    state.last_s >= AHEAD_BELOW_S or dispatcher.waiting() <= len(self._states):
                continue  # long batches, and the last ones, wait for a free worker rather than behind a batch
            item = self._take(dispatcher, state)
            if item is not None:
                state.ahead, state.ahead_started = item, False
                state.ahead_name = self.pool.assign(worker, item.jobs)
                if state.ahead_name is None or state.ahead_name == state.name:
                    raise AssayError("a worker pool that sends ahead names each batch it is sent")
                self.sent_ahead += 1

    def _take(self, dispatcher: Dispatcher, state: _State) -> WorkItem | None:
        if self.pool.reuse_environments:
            elsewhere = {environment_key(held) for other in self._states.values()
                         for held in (other.item, other.ahead) if held is not None}
            item = dispatcher.take(state.environments, elsewhere)
        else:
            item = dispatcher.take()
        if item is not None:
            state.environments.add(environment_key(item))
        return item
