"""A driver's job leases: claim each batch before it runs, renew on a heartbeat, let go once the rows are written.

Many drivers, of one campaign or of several, may run on one store at once (``assay run`` holds the store's
run lock shared). What keeps each job to one of them is its claim in the catalog (:mod:`assay.store.claims`):

* the executor asks :meth:`Leases.claim` for a batch just before it dispatches it; the jobs another live
  driver holds are left out (:attr:`Leases.elsewhere`) and the batch runs with the rest;
* a heartbeat thread renews every lease this driver holds each third of ``ttl_s``, so a lease outlives
  any episode however slow (a LIBERO episode takes a minute) while the driver lives, and runs out
  ``ttl_s`` after it dies (kill -9 included);
* the driver releases a job's claim once its row is committed (:meth:`Leases.release`), and every claim at
  the end (:meth:`Leases.close`);
* at the end the driver waits for the jobs it left out (:meth:`Leases.wait_for_others`): it is done when every
  planned job has a row, and it takes over and runs a job whose lease ran out;
* as it starts, a driver releases the claims of drivers on its own host (and pid namespace) whose process is
  gone (:meth:`Leases.sweep`), so a rerun after a crash does not wait out their leases; a dead driver of
  another host, or one that dies while this one runs, is waited out (``ttl_s``).

A job with a row is done, whoever ran it: rows are never written twice (the episode key is the primary key),
and a claimed job that already has a row is never returned by a claim.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

from assay.errors import AssayError
from assay.run.faults import Batch
from assay.run.observers import phase
from assay.spec import EpisodeJob
from assay.store import Store

DEFAULT_LEASE_S = 300.0  # a driver that dies holds its jobs this long; its heartbeat renews each third of it
POLL_S = 1.0  # how often a driver waiting for other drivers' jobs looks again (at most)
AHEAD_S = 1.0  # a claim takes along the batches the executor will ask for within this long, at its pace so far
PACE_AFTER_S = 0.25  # the pace is read only once asks have come in for this long (the first asks come at once)
PACE_WINDOW_S = 2.0  # the pace is that of the asks of the last this long
AHEAD_JOBS = 256  # at most this many jobs in one claim


def _host() -> str:
    """This host's name, with the pid namespace where Linux shows it (two containers may share a host name)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    except OSError:
        namespace = ""
    return socket.gethostname() + (f"/{namespace}" if namespace else "")


def owner_id() -> str:
    """This driver's name in the claims: ``host:pid:random`` (the random part tells apart a reused pid)."""
    return f"{_host()}:{os.getpid()}:{secrets.token_hex(4)}"


def gone(owner: str) -> bool:
    """Whether ``owner`` is a driver of this host (and pid namespace) whose process no longer exists. A pid reused
    by another process reads as alive: its claims are then waited out, never taken early."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != _host() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: alive
        return False
    return False


def release_gone(store: Store, keep: str | None = None) -> list[str]:
    """Release every claim on ``store`` of a driver of this host whose process is gone (a crash), but ``keep``'s;
    the drivers released."""
    dead = [owner for owner in store.claim_owners() if owner != keep and gone(owner)]
    for owner in dead:
        store.release_claims(owner)
    return dead


class Leases:
    """One driver's claims on the jobs of ``campaign`` in ``store``, leased for ``ttl_s`` seconds.

    Use as a context manager: the heartbeat runs inside it and every claim is released at its end.
    ``clock`` is the wall clock the leases are kept by (for tests)."""

    def __init__(self, store: Store, campaign: str, ttl_s: float = DEFAULT_LEASE_S,
                 clock: Callable[[], float] = time.time) -> None:
        if not ttl_s > 0:
            raise AssayError(f"the lease must be positive seconds, got {ttl_s}")
        self.store, self.campaign, self.ttl_s, self.clock = store, campaign, ttl_s, clock
        self.owner = owner_id()
        self.elsewhere: set[str] = set()  # jobs left out because another driver holds them
        self.finished_elsewhere: list[str] = []  # of the jobs waited for, those another driver finished
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renew_error: str | None = None  # the last heartbeat's failure, if any

    def __enter__(self) -> Leases:
        self.sweep()
        self._thread = threading.Thread(target=self._beat, name="assay-lease-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        try:
            self.close()
        except AssayError:
            if kind is None:  # the error that ended the block (a lost database) is the one to tell
                raise

    def close(self) -> None:
        """Stop the heartbeat and release every claim this driver still holds."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.store.release_claims(self.owner)

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.store.renew_claims(self.owner, self.clock(), self.ttl_s)
                self.renew_error = None
            except AssayError as exc:  # the next beat tries again; a lease runs out only after ttl_s
                self.renew_error = str(exc)

    def sweep(self) -> list[str]:
        """Release every claim of a driver of this host whose process is gone (:func:`gone`); those drivers."""
        return release_gone(self.store, keep=self.owner)

    def claim(self, jobs: Batch) -> Batch:
        """The jobs of ``jobs`` this driver now holds and that have no row; the ones another driver holds are
        remembered in :attr:`elsewhere` (a job with a row is done, and dropped)."""
        keys = [job.key for job in jobs]
        taken = set(self.store.claim(keys, self.campaign, self.owner, self.clock(), self.ttl_s))
        self.elsewhere.update(key for key in keys if key not in taken)
        return tuple(job for job in jobs if job.key in taken)

    def ahead(self, batches: Sequence[Batch], clock: Callable[[], float] = time.monotonic) -> ClaimAhead:
        """:meth:`claim` for ``batches`` asked for in about this order, a transaction for many short batches
        (:class:`ClaimAhead`)."""
        return ClaimAhead(self, batches, clock)

    def release(self, keys: Sequence[str]) -> None:
        """Let go of ``keys`` (their rows are committed)."""
        if keys:
            self.store.release_claims(self.owner, keys)

    def wait_for_others(self, jobs: Sequence[EpisodeJob], poll_s: float = POLL_S) -> Iterator[list[EpisodeJob]]:
        """Wait until every one of ``jobs`` (those left out) has a row; yields the jobs whose lease ran out, claimed
        by this driver, for the caller to run before it looks again. Jobs another driver finishes are counted in
        :attr:`finished_elsewhere`."""
        waiting = {job.key: job for job in jobs}
        if waiting:
            phase(f"waiting for {len(waiting)} episodes of {self.campaign} that another run on this store holds")
        while waiting:
            done = self.store.existing_keys(list(waiting))
            self.finished_elsewhere += [key for key in waiting if key in done]
            for key in done:
                del waiting[key]
            if not waiting:
                return
            now, held = self.clock(), self.store.claims_elsewhere(list(waiting), self.owner)
            free = tuple(job for key, job in waiting.items() if key not in held or held[key][1] <= now)
            taken = self.claim(free) if free else ()  # a write only when some lease ran out
            if taken:
                for job in taken:
                    del waiting[job.key]
                yield list(taken)
                continue
            self._stop.wait(min(poll_s, self.ttl_s / 4))


class ClaimAhead:
    """:meth:`Leases.claim` for an executor that asks for ``batches`` in about the order given (the inline
    executor), or environment by environment in that order (the dispatcher of local and Ray workers), with one
    catalog transaction for many short batches instead of one each.

    An ask for a batch not claimed yet claims it together with the batches right after it in the plan that need
    the same environment (what a worker on that environment is handed next), as many as the executor asks for
    within ``AHEAD_S`` at that environment's pace (its answered asks of the last ``PACE_WINDOW_S``, read once
    they span ``PACE_AFTER_S``: at first every worker asks at once), at most ``AHEAD_JOBS`` jobs. What each was
    granted is handed over when it is asked for. So a batch of a minute (LIBERO) is claimed alone, as before,
    and batches of 50 ms (Meta-World) about twenty at a time; an environment's pace never sets another's. A
    grant older than half the lease (the driver stalled: stopped, suspended) is claimed again first, so jobs
    another driver took over meanwhile are not run twice. A batch asked for again (a retry), or not planned, is
    claimed alone. Jobs claimed ahead are held as any claim is: renewed, released once their rows are committed
    or when the leases close."""

    def __init__(self, leases: Leases, batches: Sequence[Batch], clock: Callable[[], float]) -> None:
        self._leases, self._clock = leases, clock
        self._batches = [tuple(batch) for batch in batches]
        self._place = {_keys(batch): i for i, batch in enumerate(self._batches)}
        self._claimed = bytearray(len(self._batches))  # 1: the planned batch went into a claim
        self._granted: dict[tuple[str, ...], tuple[float, Batch]] = {}  # claimed ahead: (lease clock, jobs)
        self._answered: dict[Hashable, deque[float]] = {}  # per environment: its answered asks, recent ones
        self._environments: dict[int, Hashable] = {}
        self.transactions = 0  # how many claims went to the catalog (for tests and benchmarks)

    def _environment(self, batch: Batch) -> Hashable:
        """The environment ``batch`` needs (``faults.environment_key``), once per task object."""
        task = getattr(batch[0], "task", None) if batch else None
        if task is None:
            return None
        found = self._environments.get(id(task))
        if found is None:
            found = self._environments[id(task)] = f"{task.id}#{task.content_hash()}"
        return found

    def _pace(self, environment: Hashable, now: float) -> float | None:
        """Seconds between the environment's answered asks lately, or None while too little time has passed."""
        answered = self._answered.get(environment)
        if not answered or now - answered[0] < PACE_AFTER_S:  # two workers asking at once tell no pace
            return None
        return (now - answered[0]) / len(answered)

    def _note(self, environment: Hashable, now: float, jobs: Batch) -> Batch:
        if jobs:  # an ask answered with nothing (all held elsewhere, or done) is followed at once by another
            answered = self._answered.setdefault(environment, deque())
            answered.append(now)
            while len(answered) > 1 and now - answered[0] > PACE_WINDOW_S:
                answered.popleft()
        return jobs

    def _alone(self, jobs: Batch) -> Batch:
        self.transactions += 1
        return self._leases.claim(jobs)

    def __call__(self, batch: Batch) -> Batch:
        """The jobs of ``batch`` this driver holds and that have no row (as :meth:`Leases.claim`)."""
        now, key = self._clock(), _keys(batch)
        environment = self._environment(batch)
        if key in self._granted:
            claimed_at, jobs = self._granted.pop(key)
            if jobs and self._leases.clock() - claimed_at > self._leases.ttl_s / 2:
                jobs = self._alone(jobs)  # a stall: the leases may have run out and been taken over
            return self._note(environment, now, jobs)
        place = self._place.get(key)
        if place is None or self._claimed[place]:  # asked again, or not planned: alone, as Leases.claim
            return self._note(environment, now, self._alone(batch))
        pace = self._pace(environment, now)
        wanted = 1 if pace is None else max(1, int(AHEAD_S / pace)) if pace > 0 else len(self._batches)
        along, count = [place], len(batch)
        for i in range(place + 1, len(self._batches)):
            following = self._batches[i]
            if len(along) >= wanted or self._claimed[i] or count + len(following) > AHEAD_JOBS \
                    or self._environment(following) != environment:
                break
            along.append(i)
            count += len(following)
        for i in along:
            self._claimed[i] = 1
        claimed_at = self._leases.clock()
        self.transactions += 1
        held = {job.key for job in self._leases.claim(tuple(job for i in along for job in self._batches[i]))}
        for i in along[1:]:
            following = self._batches[i]
            self._granted[_keys(following)] = (claimed_at, tuple(job for job in following if job.key in held))
        return self._note(environment, now, tuple(job for job in batch if job.key in held))


def _keys(batch: Any) -> tuple[str, ...]:
    return tuple(job.key for job in batch)
