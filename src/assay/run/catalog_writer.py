"""The driver's catalog writes: rows committed in transactions sized by count or by age, on a writer thread.

A worker writes an episode's files (each by rename) before it hands the record back, so a row
never names a file that is not complete. The driver hands each record to :class:`CatalogWriter`,
which commits what it holds in one transaction when ``rows`` records are held or the oldest has
waited ``seconds`` (:class:`CommitPolicy`), whichever comes first, and at the end. The commit runs
on the writer's own thread, so the driver goes on handing out batches while the database writes,
and a slow batch (a LIBERO episode takes a minute) never keeps a finished row uncommitted for
longer than ``seconds``.

Exactly once: a transaction commits all of its rows or none. A kill before or during a commit
loses only rows whose jobs a resume then runs again (their files are rewritten by rename); the
episode key is the primary key, so nothing is ever stored twice. A failed commit (a full disk, a
lost server) is raised to the driver at its next record, or at :meth:`CatalogWriter.close`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from assay.errors import AssayError
from assay.store import EpisodeRecord

DEFAULT_COMMIT_ROWS = 500  # 0.25 ms a row in transactions of 500 on SQLite here, against 1.3 ms in fours
DEFAULT_COMMIT_SECONDS = 0.25  # a finished row is visible (and safe from a kill) within a quarter second


@dataclass(frozen=True)
class CommitPolicy:
    """When the driver commits the rows it holds: at ``rows`` rows, or once the oldest is ``seconds`` old."""

    rows: int = DEFAULT_COMMIT_ROWS
    seconds: float = DEFAULT_COMMIT_SECONDS

    def __post_init__(self) -> None:
        if self.rows < 1:
            raise AssayError(f"commit rows must be at least 1, got {self.rows}")
        if not self.seconds > 0:
            raise AssayError(f"commit seconds must be positive, got {self.seconds}")


Commit = Callable[[Sequence[EpisodeRecord]], None]


class CatalogWriter:
    """Holds finished records and commits them through ``commit`` (one transaction per call) on its thread.

    Use as a context manager, or call :meth:`close`: it commits what is still held, stops the thread and
    raises a commit's error that was not raised yet. ``clock`` is for tests.
    """

    def __init__(self, commit: Commit, policy: CommitPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._commit, self.policy, self._clock = commit, policy or CommitPolicy(), clock
        self._held: list[EpisodeRecord] = []
        self._oldest: float | None = None  # when the oldest held record arrived
        self._writing = False
        self._flushing = False
        self._closing = False
        self._error: BaseException | None = None
        self._raised = False
        self._changed = threading.Condition()
        self.commits = 0  # transactions committed (for tests and logs)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="assay-catalog-commit")
        self._thread = threading.Thread(target=self._loop, name="assay-catalog-writer", daemon=True)
        self._thread.start()

    def __enter__(self) -> CatalogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, record: EpisodeRecord) -> None:
        """Hold ``record`` until its commit; raises the error of an earlier commit that failed."""
        with self._changed:
            self._raise_failure()
            if not self._held:
                self._oldest = self._clock()
            self._held.append(record)
            if len(self._held) in (1, self.policy.rows):  # the first starts the clock, the rows-th is due
                self._changed.notify_all()

    def flush(self) -> None:
        """Commit everything held now and wait for it (and for a commit already under way)."""
        with self._changed:
            self._flushing = True  # everything held is due at once
            self._changed.notify_all()
            while (self._held or self._writing) and self._error is None:
                self._changed.wait()
            self._flushing = False
            self._raise_failure()

    def close(self) -> None:
        """Commit what is held, stop the thread; raise a commit's error not raised yet."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join()
        self._pool.shutdown()
        with self._changed:
            self._raise_failure()

    def _raise_failure(self) -> None:
        if self._error is not None and not self._raised:
            self._raised = True
            raise self._error

    def _due(self) -> bool:
        if not self._held:
            return False
        if self._closing or self._flushing or len(self._held) >= self.policy.rows:
            return True
        return self._oldest is not None and self._clock() - self._oldest >= self.policy.seconds

    def _loop(self) -> None:
        while True:
            with self._changed:
                while not self._due() and not (self._closing and not self._held):
                    waited = None if self._oldest is None or not self._held else \
                        max(0.0, self.policy.seconds - (self._clock() - self._oldest))
                    self._changed.wait(waited)
                if not self._held:  # closing, nothing left
                    return
                rows = self.policy.rows
                batch, self._held, self._writing = self._held[:rows], self._held[rows:], True
                self._oldest = self._clock() if self._held else None  # what is left starts anew
            error = self._pool.submit(self._commit, batch).exception()  # the driver's thread raises it
            with self._changed:
                self._writing, self._error = False, error
                self.commits += error is None
                self._changed.notify_all()
            if error is not None:
                return
