"""The store's run lock on ``STORE/.run.lock`` (and ``DATA/.run.lock``): shared by runs, exclusive for bulk work.

Campaign runs (``assay run``, ``run_campaign``) take it **shared**: many drivers, of one campaign or of
several, run on one store at once, and the job leases in the catalog (:mod:`assay.store.claims`) keep
each job to one of them. Commands that change a store in bulk take it **exclusive** and so never overlap
a run: ``assay store prune`` (deletes step files a run may be reading back), the first open that creates a
store (two first runs would race to create its catalog), and the commands that mine or rewrite a store
under :func:`assay.cli.failures_commands.locked_store` (failure mining, boundary search, regression sets),
as before. An exclusive holder waits for every shared one and the other way round.

The exclusive lock is ``filelock``'s ``FileLock`` (an ``flock`` underneath); the shared one is an ``flock``
with ``LOCK_SH`` on the same file. The kernel releases either when its holder dies (kill -9 included), so
a crashed run never blocks the next; the exclusive holder writes its pid into the file for the one that
waits. Both are re-entrant within a process, and a shared request inside an exclusive hold of the same
process is covered by it (a command that mines a store and runs a campaign in it); an exclusive request
inside a shared hold is refused (it would wait for itself). The lock covers runs on one host, or on a
shared file system whose ``flock`` reaches every client (NFSv4, Lustre with ``flock``).
``Store.run_lock`` takes it on the store directory and then on a local data root (``--data``); the data
root's marker (``assay.store.identity``) refuses two different stores there, and two copies of one store
with separate catalogs (which the shared lock would not keep apart: their leases are in different
catalogs).
"""

from __future__ import annotations

import contextlib
import fcntl
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
_shared: dict[Path, list[int]] = {}  # lock files this process holds shared: [descriptor, holds]


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
    if path in _shared:
        return "this process"
    try:
        probe = os.open(path, os.O_RDONLY)
    except OSError:
        return "another process"
    try:  # a shared lock granted at once: the holders are campaign runs (they write no pid)
        fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return "campaign runs in progress"
    except OSError:
        pass
    finally:
        os.close(probe)  # drops the probe's lock, if it got one
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()[:64]
    except OSError:
        return "another process"
    return f"pid {text}" if text.isdigit() else "another process"


def held_elsewhere(root: Path | str) -> str | None:
    """Who holds the run lock of ``root`` now (``campaign runs in progress``, ``pid N``), or None when nobody does;
    a probe that takes the lock for no longer than it asks (a dry run's warning, never a decision)."""
    path = Path(root).expanduser().resolve() / LOCK_NAME
    try:
        probe = os.open(path, os.O_RDONLY)
    except OSError:  # no lock file: never held
        return None
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return _holder(path)
    finally:
        os.close(probe)  # drops the probe's lock, if it got one
    return None


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
def run_lock(root: Path | str, on_wait: Callable[[str], None] | None = None, shared: bool = False,
             unless: Callable[[], bool] | None = None) -> Iterator[bool]:
    """Hold the store's run lock for the block, exclusive or ``shared``; ``on_wait(holder)`` is called once if it
    must wait. ``unless`` (exclusive only): while waiting, stop waiting as soon as it returns True and run the
    block without the lock; the block is given whether the lock is held (``assay run`` creating a store that
    another run creates meanwhile and then holds shared)."""
    directory = Path(root).expanduser().resolve()
    refuse_a_file(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)  # a run takes the lock before it creates the store
    except OSError as exc:
        raise StoreError(f"directory {directory} is not writable: {exc.strerror or exc}") from None
    path = directory / LOCK_NAME
    lock = _lock(path)
    if shared and not lock.is_locked:  # held exclusive by this process: that covers a shared hold
        with _shared_lock(path, on_wait):
            yield True
        return
    if path in _shared:
        raise StoreError(f"this process holds the run lock {path} shared (a campaign run); it cannot take it "
                         "exclusive inside that")
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            if on_wait is not None:
                on_wait(_holder(path))
            if not _wait_for(lock, unless):
                yield False
                return
    except OSError as exc:
        raise StoreError(f"cannot open the run lock {path}: {exc.strerror or exc}") from None
    if path in _unwritten:  # a full disk fails here first
        why = _unwritten.pop(path)
        lock.release()
        raise StoreError(f"cannot write the run lock {path}: {why}")
    try:
        yield True
    finally:
        lock.release()


def _wait_for(lock: FileLock, unless: Callable[[], bool] | None) -> bool:
    """Take ``lock``, waiting as long as it takes, or until ``unless()``; whether it was taken."""
    if unless is None:
        lock.acquire()
        return True
    while not unless():
        try:
            lock.acquire(timeout=0.1)
            return True
        except Timeout:
            continue
    return False


@contextlib.contextmanager
def _shared_lock(path: Path, on_wait: Callable[[str], None] | None) -> Iterator[None]:
    """``flock(LOCK_SH)`` on ``path`` for the block, one descriptor per process however often it is re-entered."""
    with _guard:
        held = _shared.get(path)
        if held is not None:
            held[1] += 1
    if held is None:
        fd = _open_shared(path, on_wait)
        with _guard:
            held = _shared.setdefault(path, [fd, 0])
            held[1] += 1
        if held[0] != fd:  # another thread of this process got there first
            os.close(fd)
    try:
        yield
    finally:
        with _guard:
            held[1] -= 1
            if held[1] == 0:
                del _shared[path]
                os.close(held[0])  # closing the descriptor drops its lock


def _open_shared(path: Path, on_wait: Callable[[str], None] | None) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot open the run lock {path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait(_holder(path))
            fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError as exc:
        os.close(fd)
        raise StoreError(f"cannot take the run lock {path}: {exc.strerror or exc}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd
