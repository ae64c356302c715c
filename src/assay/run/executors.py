"""Executors: one method, ``run(batches) -> iterator of EpisodeRecord``.

* ``InlineExecutor``: in this process; for tests and debugging.
* ``LocalExecutor``: worker processes on this machine (start method ``spawn``),
  each keeping its environments across batches; records stream back as batches
  finish. A worker that dies is replaced and its batch retried; a batch past its
  wall-clock limit has its worker killed (see :mod:`assay.run.faults`).
* ``RayExecutor`` (:mod:`assay.run.ray_executor`): long-lived Ray actors, same contract.

Results never depend on the executor or the worker count: each episode's
initial conditions and each policy's randomness derive from the episode seed.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from enum import Enum
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Protocol

from assay.errors import AssayError
from assay.run.faults import Batch, Dispatcher, Failure, FaultPolicy, WorkItem, environment_key, exhausted, rss_mb
from assay.run.worker import Worker
from assay.store import EpisodeRecord
from assay.store.roots import as_root, remove_stale_temporaries

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
    OK = "ok"        # a batch is done; payload: its records
    RAISE = "raise"  # an infrastructure error that must stop the driver; payload: the AssayError


class Executor(Protocol):
    def run(self, batches: Sequence[Batch]) -> Iterator[EpisodeRecord]: ...


def _root(store_root: str | Path) -> str | Path:
    """A local directory stays a Path; an fsspec URL (``s3://``, ``file://``) stays a string."""
    return as_root(store_root)


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

    def run(self, batches: Sequence[Batch]) -> Iterator[EpisodeRecord]:
        worker = Worker(self.store_root)
        try:
            if not self.pipelined:
                for batch in batches:
                    yield from worker.run_batch(batch)
                return
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="assay-writer") as writer:
                written: Future[list[EpisodeRecord]] | None = None
                for batch in batches:
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


def _worker_main(conn: Connection, store_root: str | Path) -> None:
    """A worker process: batches in, ``(Reply.OK, records)`` or ``(Reply.RAISE, exception)`` out, until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    worker = Worker(store_root)
    conn.send((Reply.READY, None))
    try:
        while True:
            try:
                jobs = conn.recv()
            except EOFError:
                return
            if jobs is None:
                return
            try:
                conn.send((Reply.OK, worker.run_batch(jobs)))
            except Exception as exc:  # noqa: BLE001 - an infrastructure error (store unwritable) stops the driver
                conn.send((Reply.RAISE, AssayError(f"worker failed: {type(exc).__name__}: {exc}")))
    finally:
        worker.close()


def describe_exit(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class _Slot:
    """One worker process and the work item it holds (at most one, so a death or a timeout is attributable)."""

    def __init__(self, context: Any, store_root: str | Path) -> None:
        self.conn, child = context.Pipe(duplex=True)
        self.process: BaseProcess = context.Process(target=_worker_main, args=(child, store_root), daemon=True)
        self.process.start()
        child.close()
        self.item: WorkItem | None = None
        self.deadline: float | None = None
        self.ready = False  # a process that dies before it is ready is broken, not unlucky
        self.faults = FaultPolicy()
        self.environments: set[str] = set()  # what this process has built (Dispatcher.take keeps it on them)

    def assign(self, item: WorkItem, faults: FaultPolicy) -> None:
        """Send ``item``; its wall-clock limit runs from now, or from start-up if the process is still starting."""
        self.item, self.faults = item, faults
        self.environments.add(environment_key(item))
        self.deadline = faults.deadline(time.monotonic()) if self.ready else None
        self.conn.send(item.jobs)

    def mark_ready(self) -> None:
        self.ready = True
        if self.item is not None:
            self.deadline = self.faults.deadline(time.monotonic())

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=10)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(timeout=5)
        self.kill()


class LocalExecutor:
    """Worker processes on this machine, one batch in flight each.

    Fault tolerance: see :mod:`assay.run.faults`; ``faults`` sets the retry bound
    and the per-episode wall-clock limit.
    """

    name = "local"

    def __init__(self, store_root: str | Path, workers: int = 2, faults: FaultPolicy | None = None) -> None:
        _refuse_while_importing_main()  # before the script goes on to wait for the store its parent holds
        if workers < 1:
            raise AssayError(f"--workers must be at least 1, got {workers}")
        self.store_root = _root(store_root)
        self.workers = workers
        self.faults = faults or FaultPolicy()
        self.restarts = 0  # worker processes replaced after a death or a timeout

    def run(self, batches: Sequence[Batch]) -> Iterator[EpisodeRecord]:
        _refuse_while_importing_main()
        dispatcher = Dispatcher(batches, self.faults)
        if not dispatcher.has_work():
            return
        context = multiprocessing.get_context("spawn")
        slots = [_Slot(context, self.store_root) for _ in range(min(self.workers, len(batches)))]
        try:
            while True:
                self._hand_out(slots, dispatcher)
                busy = [slot for slot in slots if slot.item is not None]
                if not busy:
                    return
                deadlines = [s.deadline for s in busy if s.deadline is not None]
                timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
                wait([s.conn for s in busy] + [s.process.sentinel for s in busy], timeout)
                finished: list[EpisodeRecord] = []
                for index, slot in enumerate(slots):
                    if slot.item is not None:
                        records, replace = self._check(slot, dispatcher)
                        if replace:
                            slots[index] = _Slot(context, self.store_root)
                            self.restarts += 1
                        finished += records
                # Hand out the next batches before the caller writes catalog rows, so no worker waits on it.
                self._hand_out(slots, dispatcher)
                yield from finished
        finally:
            for slot in slots:
                slot.stop()

    def _hand_out(self, slots: list[_Slot], dispatcher: Dispatcher) -> None:
        for slot in slots:
            if slot.item is None and dispatcher.has_work():
                elsewhere = {environment_key(s.item) for s in slots if s.item is not None}
                slot.assign(dispatcher.take(slot.environments, elsewhere), self.faults)

    def _worn_out(self, slot: _Slot, records: list[EpisodeRecord]) -> bool:
        """Whether a worker that finished its batch must be replaced before it gets another one: an
        episode ended in a resource error (a leak in the policy would poison the next one), or the
        process is above ``worker_rss_limit_mb``."""
        limit = self.faults.worker_rss_limit_mb
        resident = rss_mb(slot.process.pid) if limit is not None and slot.process.pid is not None else None
        if exhausted(records) is None and (resident is None or limit is None or resident <= limit):
            return False
        slot.stop()
        return True

    def _check(self, slot: _Slot, dispatcher: Dispatcher) -> tuple[list[EpisodeRecord], bool]:
        """Collect what ``slot`` has to say: (records to pass on, whether its process must be replaced)."""
        item = slot.item
        assert item is not None
        while slot.conn.poll():
            try:
                status, payload = slot.conn.recv()
            except (EOFError, OSError):
                slot.process.join(timeout=10)  # EOF comes first; let the exit be reaped
                break
            if status is Reply.READY:
                slot.mark_ready()
            elif status is Reply.OK:
                slot.item = slot.deadline = None
                return dispatcher.succeeded(payload), self._worn_out(slot, payload)
            elif status is Reply.RAISE:
                raise payload
        if not slot.process.is_alive():
            slot.kill()
            # Exiting on its own before "ready" means the worker cannot start (an import error): stop.
            # Killed by a signal (OOM killer, an operator, chaos) it was unlucky: retry like any death.
            killed = slot.process.exitcode is not None and slot.process.exitcode < 0
            if not slot.ready and slot.process.exitcode == MAIN_GUARD_EXIT:
                raise AssayError(f"the worker processes could not start: {MAIN_GUARD_HINT}")
            if not slot.ready and not killed:
                raise AssayError(f"a worker process failed to start ({describe_exit(slot.process.exitcode)}); "
                                 "run with --executor inline to see the error")
            records = dispatcher.failed(item, Failure.DIED, describe_exit(slot.process.exitcode))
            remove_stale_temporaries(self.store_root)  # what the dead writer left half-written
            return records, True
        if slot.deadline is not None and time.monotonic() >= slot.deadline:
            slot.kill()
            remove_stale_temporaries(self.store_root)
            return dispatcher.failed(item, Failure.TIMED_OUT, "wall-clock limit"), True
        return [], False


def make_executor(
    name: str,
    store_root: str | Path,
    workers: int = 2,
    address: str | None = None,
    faults: FaultPolicy | None = None,
) -> Executor:
    """The executor called ``name``; ``address`` is the Ray cluster (``auto``, ``ray://HOST:PORT``)."""
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
