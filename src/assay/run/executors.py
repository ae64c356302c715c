"""Executors: one method, ``run(batches) -> iterator of EpisodeRecord``.

* ``InlineExecutor``: in this process; for tests and debugging.
* ``LocalExecutor``: worker processes on this machine (start method ``spawn``),
  each keeping its environments across batches; records stream back as batches
  finish. A worker that dies is replaced and its batch retried; a batch past its
  wall-clock limit has its worker killed (see :mod:`assay.run.faults`).
* ``RayExecutor`` (:mod:`assay.run.ray_executor`): long-lived Ray actors, same contract.

Before the first episode the data root is probed (:mod:`assay.run.preflight`): by each local worker
process as it starts, by every Ray node and actor, and in process by the inline executor when the root is
an fsspec URL; a ``memory://`` root with worker processes is refused in one line.

Results never depend on the executor or the worker count: each episode's
initial conditions and each policy's randomness derive from the episode seed.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Hashable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from enum import Enum
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from assay.annotations import developer_api, public_api
from assay.errors import AssayError
from assay.run.driver import Driver, Event, Happened
from assay.run.faults import Batch, Claim, FaultPolicy, rss_mb
from assay.run.observers import observed
from assay.run.preflight import (
    Probe,
    check_from_worker,
    needs_probe,
    probe_in_process,
    refuse_process_memory,
    remove_probe,
    run_token,
    write_probe,
)
from assay.run.worker import Worker
from assay.store import EpisodeRecord
from assay.store.roots import as_root

__all__ = ["Batch", "Executor", "InlineExecutor", "LocalExecutor", "make_executor"]

EXECUTORS = ("inline", "local", "ray")
# A worker process that re-ran the user's script (no ``__main__`` guard) exits with this status.
MAIN_GUARD_EXIT = 86
MAIN_GUARD_HINT = ("worker processes start with 'spawn' and import your script again, so a script that runs a "
                   "campaign with the local executor must do it under `if __name__ == \"__main__\":` "
                   "(docs/PYTHON_API.md)")


def _refuse_while_importing_main() -> None:
    """In a spawned worker that is importing the parent's ``__main__`` (the condition under which
    multiprocessing itself refuses to start a process): say why on stderr and exit with ``MAIN_GUARD_EXIT``."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        sys.stderr.write(f"assay: a worker process re-ran the script that started it: {MAIN_GUARD_HINT}\n")
        sys.stderr.flush()
        os._exit(MAIN_GUARD_EXIT)


class Reply(Enum):
    """The tag of what a worker process sends the driver: ``(tag, payload)``."""

    READY = "ready"  # the worker imported and built itself; payload None
    STARTED = "started"  # the batch's policy answered its first inference (built, reset, acted); payload None
    OK = "ok"        # a batch is done; payload: its records
    RAISE = "raise"  # an infrastructure error that must stop the driver; payload: the AssayError


@developer_api
class Executor(Protocol):
    """What every executor is: ``run(batches)`` yields each episode's record as it is stored (httpx's transports)."""

    def run(self, batches: Sequence[Batch], claim: Claim | None = None) -> Iterator[EpisodeRecord]:
        """Run every batch and yield its episodes' records, in completion order. ``claim`` (job leases, when the
        campaign runner gives one) is called with each batch just before it first runs: run only the jobs it
        returns, and skip the batch when it returns none. An executor whose ``run`` takes no ``claim`` still
        works: the runner then claims every pending job before it calls ``run``."""


@runtime_checkable
class SupportsWorkers(Protocol):
    """An executor whose process count may be set before it runs (``--workers auto``: the local executor)."""

    workers: int


def _root(store_root: str | Path) -> str | Path:
    """A local directory stays a Path; an fsspec URL (``s3://``, ``file://``) stays a string."""
    return as_root(store_root)


@public_api
class InlineExecutor:
    """Batches in this process, one after another. With ``pipelined`` (the default) a batch's files
    are written on a writer thread while the next batch rolls out (Parquet encoding, zstd and hashing
    release the GIL); at most one batch waits to be written, and its records are passed on only once
    its files exist, so a catalog row still follows its file. ``pipelined=False`` writes on the
    stepping thread (same files, same records: for comparisons)."""

    name = "inline"

    def __init__(self, store_root: str | Path, pipelined: bool = True) -> None:
        self.store_root = _root(store_root)
        self.pipelined = pipelined

    @observed
    def run(self, batches: Sequence[Batch], claim: Claim | None = None) -> Iterator[EpisodeRecord]:
        """Run the batches in this process; pipelined, a writer thread writes a batch's files as the next rolls out."""
        if any(batches) and needs_probe(self.store_root):  # an fsspec root: written and read back first
            probe_in_process(self.store_root)
        worker = Worker(self.store_root)
        try:
            claimed = (granted for granted in (claim(b) if claim else b for b in batches) if granted)
            if not self.pipelined:
                for batch in claimed:
                    yield from worker.run_batch(batch)
                return
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="assay-writer") as writer:
                written: Future[list[EpisodeRecord]] | None = None
                for batch in claimed:
                    try:
                        recorders = worker.roll(batch)
                    except Exception:
                        if written is not None:  # what finished before the error still reaches the catalog
                            yield from written.result()
                        raise
                    if written is not None:
                        yield from written.result()
                    written = writer.submit(worker.save, recorders)
                if written is not None:
                    yield from written.result()
        finally:
            worker.close()


def _worker_main(conn: Connection, store_root: str | Path, probe: Probe | None = None) -> None:
    """A worker process: batches in, ``(Reply.OK, records)`` or ``(Reply.RAISE, exception)`` out, until EOF. Before
    any batch it checks the data root against the driver's ``probe`` (a root it does not share is RAISE, and it exits).

    Once told to stop it closes its environments and leaves with ``os._exit``, as a forked multiprocessing
    child does: everything it wrote is already renamed into place and every record is sent, and the
    interpreter's own teardown of a process holding MuJoCo, SciPy and Meta-World took 0.3-0.4 s, which every
    campaign waited for at its end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    if probe is not None:
        try:
            check_from_worker(store_root, probe)
        except AssayError as exc:
            conn.send((Reply.RAISE, exc))
            conn.close()
            os._exit(0)
    worker = Worker(store_root)
    conn.send((Reply.READY, None))
    try:
        _serve(conn, worker)
    finally:
        worker.close()
    conn.close()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os._exit(0)


def _serve(conn: Connection, worker: Worker) -> None:
    driver = os.getppid()
    while True:
        try:
            jobs = conn.recv()
        except EOFError:
            return
        if jobs is None:
            return
        try:
            recorders = worker.roll(jobs, on_started=lambda: conn.send((Reply.STARTED, None)))
            if os.getppid() != driver:  # the driver died: its job leases pass to another driver, which writes
                return  # these episodes' files; an orphan writing them later would replace that driver's files
            conn.send((Reply.OK, worker.save(recorders)))
        except Exception as exc:  # noqa: BLE001 - an infrastructure error (store unwritable) stops the driver
            conn.send((Reply.RAISE, AssayError(f"worker failed: {type(exc).__name__}: {exc}")))


def describe_exit(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class _Slot:
    """One worker process and its pipe."""

    def __init__(self, context: Any, store_root: str | Path, probe: Probe | None = None) -> None:
        self.conn, child = context.Pipe(duplex=True)
        self.process: BaseProcess = context.Process(target=_worker_main, args=(child, store_root, probe), daemon=True)
        self.process.start()
        child.close()
        self.ready = False  # a process that dies before it is ready is broken, not unlucky

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=10)
        self.conn.close()

    def ask_to_stop(self) -> None:
        """Tell the worker to finish (it holds no batch); it exits on its own, see :meth:`stopped`."""
        with contextlib.suppress(OSError):
            self.conn.send(None)

    def stopped(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the exit asked for, then kill what is left."""
        self.process.join(timeout=timeout)
        self.kill()


class _ProcessPool:
    """The :class:`~assay.run.driver.WorkerPool` of worker processes on this machine (``spawn``)."""

    reuse_environments = True
    send_ahead = False  # a pipe message hands over a batch in ~2 ms; a death stays one batch's

    def __init__(self, store_root: str | Path, faults: FaultPolicy, probe: Probe | None = None) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.store_root, self.faults, self.probe = store_root, faults, probe
        self.slots: dict[Hashable, _Slot] = {}
        self.stopping: list[_Slot] = []  # retired, asked to exit, not yet reaped
        self._next = 0

    def spawn(self) -> int:
        self._reap()
        self._next += 1
        self.slots[self._next] = _Slot(self.context, self.store_root, self.probe)
        return self._next

    def assign(self, worker: Hashable, jobs: Batch) -> None:
        self.slots[worker].conn.send(jobs)

    def wait(self, busy: Sequence[Hashable], timeout: float | None) -> list[Event]:
        slots = [(w, self.slots[w]) for w in busy]
        wait([s.conn for _, s in slots] + [s.process.sentinel for _, s in slots], timeout)
        events: list[Event] = []
        for worker, slot in slots:
            events += self._events(worker, slot)
        return events

    def _events(self, worker: Hashable, slot: _Slot) -> list[Event]:
        """What ``slot`` has to say: READY, then DONE or DIED (or nothing yet)."""
        events: list[Event] = []
        while slot.conn.poll():
            try:
                status, payload = slot.conn.recv()
            except (EOFError, OSError):
                slot.process.join(timeout=10)  # EOF comes first; let the exit be reaped
                break
            if status is Reply.READY:
                slot.ready = True
                events.append(Event(worker, Happened.READY))
            elif status is Reply.STARTED:
                events.append(Event(worker, Happened.STARTED))
            elif status is Reply.OK:
                return [*events, Event(worker, Happened.DONE, payload)]
            elif status is Reply.RAISE:
                raise payload
        if not slot.process.is_alive():
            # Exiting on its own before "ready" means the worker cannot start (an import error): stop.
            # Killed by a signal (OOM killer, an operator, chaos) it was unlucky: retry like any death.
            exitcode = slot.process.exitcode
            killed = exitcode is not None and exitcode < 0
            if not slot.ready and exitcode == MAIN_GUARD_EXIT:
                raise AssayError(f"the worker processes could not start: {MAIN_GUARD_HINT}")
            if not slot.ready and not killed:
                raise AssayError(f"a worker process failed to start ({describe_exit(exitcode)}); "
                                 "run with --executor inline to see the error")
            events.append(Event(worker, Happened.DIED, detail=describe_exit(exitcode)))
        return events

    def worn_out(self, worker: Hashable, records: Sequence[EpisodeRecord]) -> bool:
        """Above ``worker_rss_limit_mb`` (a leak in the policy would poison the next batch)."""
        limit = self.faults.worker_rss_limit_mb
        pid = self.slots[worker].process.pid
        resident = rss_mb(pid) if limit is not None and pid is not None else None
        return resident is not None and limit is not None and resident > limit

    def kill(self, worker: Hashable) -> None:
        self.slots.pop(worker).kill()

    def retire(self, worker: Hashable) -> None:
        """Ask ``worker`` to exit without waiting for it: the driver goes on with the others at once, and
        :meth:`close` (or the next :meth:`spawn`) reaps it."""
        slot = self.slots.pop(worker)
        slot.ask_to_stop()
        self.stopping.append(slot)

    def _reap(self) -> None:
        for slot in [s for s in self.stopping if not s.process.is_alive()]:
            self.stopping.remove(slot)
            slot.stopped(timeout=0)

    def close(self) -> None:
        """Ask every worker to exit, then wait for all of them together (at most 5 s, then kill)."""
        for slot in self.slots.values():
            slot.ask_to_stop()
        leaving = [*self.stopping, *self.slots.values()]
        self.stopping, self.slots = [], {}
        deadline = time.monotonic() + 5.0
        for slot in leaving:
            slot.stopped(timeout=max(0.0, deadline - time.monotonic()))


@public_api
class LocalExecutor:
    """Worker processes on this machine, one batch in flight each (the loop: :class:`~assay.run.driver.Driver`).

    Fault tolerance: see :mod:`assay.run.faults`; ``faults`` sets the retry bound
    and the per-episode wall-clock limit.
    """

    name = "local"

    def __init__(self, store_root: str | Path, workers: int = 2, faults: FaultPolicy | None = None) -> None:
        _refuse_while_importing_main()  # before the script goes on to wait for the store its parent holds
        if workers < 1:
            raise AssayError(f"--workers must be at least 1, got {workers}")
        refuse_process_memory(store_root, "local")
        self.store_root = _root(store_root)
        self.workers = workers
        self.faults = faults or FaultPolicy()
        self.restarts = 0  # worker processes replaced after a death, a timeout or a resource error

    @observed
    def run(self, batches: Sequence[Batch], claim: Claim | None = None) -> Iterator[EpisodeRecord]:
        """Run the batches on worker processes under the driver loop (retries, wall-clock limits, restarts)."""
        _refuse_while_importing_main()
        if not any(batches):
            return
        probe = write_probe(self.store_root, run_token(), "driver", "local")  # each worker reads it back first
        if probe.error is not None:
            raise AssayError(f"the driver cannot write the data root {self.store_root}: {probe.error}")
        driver = Driver(_ProcessPool(self.store_root, self.faults, probe), self.workers, self.faults, self.store_root)
        try:
            yield from driver.run(batches, claim)
        finally:
            self.restarts += driver.restarts
            remove_probe(self.store_root, probe)


def make_executor(
    name: str,
    store_root: str | Path,
    workers: int = 2,
    address: str | None = None,
    faults: FaultPolicy | None = None,
) -> Executor:
    """The executor called ``name``; ``address`` is the Ray cluster (``HOST:PORT``, ``ray://HOST:PORT``, ``auto``;
    None: ``RAY_ADDRESS``, else a local Ray)."""
    if address is not None and name != "ray":
        raise AssayError(f"--address is for the ray executor only (got --executor {name})")
    if name == "inline":
        return InlineExecutor(store_root)
    if name == "local":
        return LocalExecutor(store_root, workers, faults)
    if name == "ray":
        from assay.run.ray_executor import RayExecutor

        return RayExecutor(store_root, actors=workers, address=address, faults=faults)
    raise AssayError(f"unknown executor {name!r}; valid: {', '.join(EXECUTORS)}")
