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
from collections.abc import Callable, Iterator, Sequence
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
    """:meth:`Leases.claim` for an executor that asks for ``batches`` in about the order given, with one catalog
    transaction for many short batches instead of one each.

    An ask that finds nothing claimed for its batch claims it together with the batches after it that the
    executor would ask for within ``AHEAD_S`` at the pace of its asks so far (read once the asks have come in for
    ``PACE_AFTER_S``: at first every worker asks at once), at most ``AHEAD_JOBS`` jobs; what each of those is
    granted is handed over when it is asked for. So a batch of a minute (LIBERO) is claimed alone, as before,
    and batches of 50 ms (Meta-World) about twenty at a time. A batch asked for again (a retry) or not planned
    is claimed alone. Jobs claimed ahead are held as any claim is: renewed, released when their rows are
    committed or when the leases close, and waited out by other drivers for at most ``AHEAD_S`` of this
    driver's work longer than before."""

    def __init__(self, leases: Leases, batches: Sequence[Batch], clock: Callable[[], float]) -> None:
        self._leases, self._clock = leases, clock
        self._batches = [tuple(batch) for batch in batches]
        self._place = {_keys(batch): i for i, batch in enumerate(self._batches)}
        self._granted: dict[tuple[str, ...], Batch] = {}
        self._next = 0  # the first planned batch not claimed yet
        self._first: float | None = None
        self._asks = 0
        self.transactions = 0  # how many claims went to the catalog (for tests and benchmarks)

    def _pace(self, now: float) -> float | None:
        """Seconds between asks so far, or None while too little time has passed to tell."""
        if self._first is None or not self._asks or now - self._first < PACE_AFTER_S:
            return None
        return (now - self._first) / self._asks

    def __call__(self, batch: Batch) -> Batch:
        """The jobs of ``batch`` this driver holds and that have no row (as :meth:`Leases.claim`)."""
        now = self._clock()
        if self._first is None:
            self._first = now
        pace, self._asks = self._pace(now), self._asks + 1
        key = _keys(batch)
        if key in self._granted:
            return self._granted.pop(key)
        place = self._place.pop(key, None)
        if place is None or place < self._next:  # asked again, or not planned: alone, as Leases.claim
            self.transactions += 1
            return self._leases.claim(batch)
        along = [place]
        wanted = 1 if pace is None else max(1, int(AHEAD_S / pace)) if pace > 0 else len(self._batches)
        jobs = len(batch)
        for i in range(max(self._next, place + 1), len(self._batches)):
            if len(along) >= wanted or jobs + len(self._batches[i]) > AHEAD_JOBS:
                break
            if _keys(self._batches[i]) in self._place:  # not asked for yet
                along.append(i)
                jobs += len(self._batches[i])
        self._next = max(self._next, along[-1] + 1)
        self.transactions += 1
        held = {job.key for job in self._leases.claim(tuple(job for i in along for job in self._batches[i]))}
        for i in along[1:]:
            self._place.pop(_keys(self._batches[i]), None)
            self._granted[_keys(self._batches[i])] = tuple(job for job in self._batches[i] if job.key in held)
        return tuple(job for job in batch if job.key in held)


def _keys(batch: Any) -> tuple[str, ...]:
    return tuple(job.key for job in batch)
