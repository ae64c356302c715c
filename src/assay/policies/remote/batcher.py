"""The dynamic batcher: requests from every connection, one batched ``act`` call.

A batch closes when it holds ``max_batch`` rows (one per request, unless
``rows`` says how many a request carries) or when its oldest request has
waited ``max_wait_s``; inference runs on one thread off the event loop, and
requests that arrive meanwhile form the next batch. ``max_batch=1`` is openpi's
serial behaviour.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

Infer = Callable[[list[Any]], list[Any]]
"""Rows in, one result per row out (a value, or an exception instance for a row that failed)."""


@dataclass
class _Pending:
    request: Any
    future: asyncio.Future[tuple[Any, dict[str, float]]]
    enqueued: float = field(default_factory=time.perf_counter)


class DynamicBatcher:
    """Merges concurrent requests into batched ``infer`` calls (used by the websocket and Ray servers)."""

    def __init__(self, infer: Infer, max_batch: int = 32, max_wait_s: float = 0.005,
                 rows: Callable[[Any], int] | None = None) -> None:
        if max_batch < 1 or max_wait_s < 0:
            raise ValueError("max_batch must be >= 1 and max_wait_s >= 0")
        self.infer, self.max_batch, self.max_wait_s = infer, max_batch, max_wait_s
        self.rows_of = rows or (lambda request: 1)
        self._pending: list[_Pending] = []
        self._arrived: asyncio.Event | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="assay-infer")
        self.batches = 0
        self.rows = 0

    async def submit(self, request: Any) -> tuple[Any, dict[str, float]]:
        """The row's result and its ``server_timing`` (queue_ms, batch_size, infer_ms)."""
        if self._arrived is None:  # submitted before run() got to start: run() picks the event up
            self._arrived = asyncio.Event()
        pending = _Pending(request, asyncio.get_running_loop().create_future())
        self._pending.append(pending)
        self._arrived.set()
        return await pending.future

    async def run(self) -> None:
        """The batching loop; runs until cancelled."""
        self._arrived = self._arrived or asyncio.Event()
        loop = asyncio.get_running_loop()
        try:
            while True:
                while not self._pending:
                    self._arrived.clear()
                    await self._arrived.wait()
                deadline = self._pending[0].enqueued + self.max_wait_s
                while self._size(len(self._pending)) < self.max_batch:
                    remaining = deadline - time.perf_counter()
                    if remaining <= 0:
                        break
                    self._arrived.clear()
                    try:
                        await asyncio.wait_for(self._arrived.wait(), remaining)
                    except TimeoutError:
                        break
                count = self._take()
                batch = self._pending[:count]
                del self._pending[:count]
                started = time.perf_counter()
                results = await loop.run_in_executor(self._pool, self.infer, [p.request for p in batch])
                infer_ms = (time.perf_counter() - started) * 1000.0
                self.batches += 1
                self.rows += len(batch)
                for pending, result in zip(batch, results, strict=True):
                    if pending.future.done():
                        continue  # the connection went away meanwhile
                    timing = {"queue_ms": (started - pending.enqueued) * 1000.0, "batch_size": len(batch),
                              "infer_ms": infer_ms}
                    if isinstance(result, BaseException):
                        pending.future.set_exception(result)
                    else:
                        pending.future.set_result((result, timing))
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _size(self, count: int) -> int:
        """Rows in the first ``count`` pending requests."""
        return sum(self.rows_of(p.request) for p in self._pending[:count])

    def _take(self) -> int:
        """How many pending requests the next batch takes: up to ``max_batch`` rows, at least one request."""
        count, rows = 0, 0
        for pending in self._pending:
            rows += self.rows_of(pending.request)
            if count and rows > self.max_batch:
                break
            count += 1
        return count
