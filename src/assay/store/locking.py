"""One campaign run at a time per store: an exclusive lock on ``STORE/.run.lock`` (and ``DATA/.run.lock``).

Two ``assay run`` of one campaign on one store used to run every job twice and
overwrite each other's step files (their checksums then disagreed with the rows).
The lock is ``filelock``'s ``FileLock`` on a file in the store directory (an ``flock``
underneath): the kernel releases it when its holder dies (kill -9 included), so a crashed
run never blocks the next; the holder writes its pid into the file for the run that waits.
A second run waits for the first and then finds its episodes done. The lock is
re-entrant within a process (a command that runs several campaigns in turn, or a
caller that already holds it). It covers runs on one host, or on a shared file
system whose ``flock`` reaches every client (NFSv4, Lustre with ``flock``).
``Store.run_lock`` takes it on the store directory and then on a local data root
(``--data``), so two store directories that somehow share a data root (a copied
store) never write its step files at once; the data root's marker
(``assay.store.identity``) already refuses two different stores there.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from assay.errors import StoreError

LOCK_NAME = ".run.lock"

_locks: dict[Path, FileLock] = {}  # one lock per lock file in this process: filelock counts re-entries
_guard = threading.Lock()
_unwritten: dict[Path, str] = {}  # lock files whose holder pid could not be written, and why (a full disk)


def _write_holder(path: Path) -> Callable[[int], None]:
    """``on_acquired`` for the lock at ``path``: the holder's pid in the file, for the next run's "waiting for"."""

    def write(fd: int) -> None:
        try:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
        except OSError as exc:
            _unwritten[path] = str(exc.strerror or exc)

    return write


def _holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()[:64]
    except OSError:
        return "another process"
    return f"pid {text}" if text.isdigit() else "another process"


def _lock(path: Path) -> FileLock:
    with _guard:
        if path not in _locks:
            _locks[path] = FileLock(path, thread_local=False, on_acquired=_write_holder(path))
        return _locks[path]


def refuse_a_file(path: Path) -> None:
    """One line when a store path, or the first of its ancestors that exists, is a file rather than a directory."""
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        where = f"the store path {path}" if existing == path else f"{existing} (on the store path {path})"
        raise StoreError(f"{where} is a file, not a directory; give --store a directory (assay run creates a new "
                         "one there)")


@contextlib.contextmanager
def run_lock(root: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the store's run lock for the block; ``on_wait(holder)`` is called once if it must wait."""
    directory = Path(root).expanduser().resolve()
    refuse_a_file(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)  # a run takes the lock before it creates the store
    except OSError as exc:
        raise StoreError(f"directory {directory} is not writable: {exc.strerror or exc}") from None
    path = directory / LOCK_NAME
    lock = _lock(path)
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            if on_wait is not None:
                on_wait(_holder(path))
            lock.acquire()
    except OSError as exc:
        raise StoreError(f"cannot open the run lock {path}: {exc.strerror or exc}") from None
    if path in _unwritten:  # a full disk fails here first
        why = _unwritten.pop(path)
        lock.release()
        raise StoreError(f"cannot write the run lock {path}: {why}")
    try:
        yield
    finally:
        lock.release()
