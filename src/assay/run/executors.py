"""Executors: one method, ``run(batches) -> iterator of EpisodeRecord``.

* ``InlineExecutor``: in this process; for tests and debugging.
* ``LocalExecutor``: a pool of worker processes (start method ``spawn``), each
  keeping its environments across batches; records stream back as batches finish.

Results never depend on the executor or the worker count: each episode's
initial conditions and each policy's randomness derive from the episode seed.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Protocol

from assay.errors import AssayError
from assay.run.worker import Worker
from assay.spec import EpisodeJob
from assay.store import EpisodeRecord

Batch = tuple[EpisodeJob, ...]


class Executor(Protocol):
    def run(self, batches: Sequence[Batch]) -> Iterator[EpisodeRecord]: ...


class InlineExecutor:
    name = "inline"

    def __init__(self, store_root: str | Path) -> None:
        self.store_root = Path(store_root)

    def run(self, batches: Sequence[Batch]) -> Iterator[EpisodeRecord]:
        worker = Worker(self.store_root)
        try:
            for batch in batches:
                yield from worker.run_batch(batch)
        finally:
            worker.close()


_WORKER: Worker | None = None


def _init_worker(store_root: str) -> None:
    global _WORKER
    _WORKER = Worker(store_root)


def _run_in_worker(batch: Batch) -> list[EpisodeRecord]:
    assert _WORKER is not None, "worker not initialised"
    return _WORKER.run_batch(batch)


class LocalExecutor:
    """Worker processes on this machine; at most ``2 × workers`` batches in flight."""

    name = "local"

    def __init__(self, store_root: str | Path, workers: int = 2) -> None:
        if workers < 1:
            raise AssayError(f"--workers must be at least 1, got {workers}")
        self.store_root = Path(store_root)
        self.workers = workers

    def run(self, batches: Sequence[Batch]) -> Iterator[EpisodeRecord]:
        if not batches:
            return
        context = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=_init_worker,
                                   initargs=(str(self.store_root),))
        pending: set[Future[list[EpisodeRecord]]] = set()
        queue = list(reversed(batches))
        try:
            while queue or pending:
                while queue and len(pending) < 2 * self.workers:
                    pending.add(pool.submit(_run_in_worker, queue.pop()))
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield from future.result()
        except BrokenProcessPool:
            raise AssayError("a worker process died; rerun the same command to resume where it stopped") from None
        finally:
            for future in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)


def make_executor(name: str, store_root: str | Path, workers: int = 2) -> Executor:
    if name == "inline":
        return InlineExecutor(store_root)
    if name == "local":
        return LocalExecutor(store_root, workers)
    raise AssayError(f"unknown executor {name!r}; valid: inline, local")
