"""One campaign run at a time per store: an exclusive lock on ``STORE/.run.lock`` (and ``DATA/.run.lock``).

Two ``assay run`` of one campaign on one store used to run every job twice and
overwrite each other's step files (their checksums then disagreed with the rows).
The lock is an ``flock`` on a file in the store directory: the kernel releases it
when its holder dies (kill -9 included), so a crashed run never blocks the next.
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
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from assay.errors import StoreError

LOCK_NAME = ".run.lock"

_held: dict[Path, tuple[int, int]] = {}  # lock path -> (fd, depth) for this process
_guard = threading.Lock()


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 64).decode("ascii", "replace").strip()
    except OSError:
        return "another process"
    return f"pid {text}" if text.isdigit() else "another process"


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
    with _guard:
        if path in _held:
            fd, depth = _held[path]
            _held[path] = (fd, depth + 1)
            acquired = False
        else:
            acquired = True
    if acquired:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open the run lock {path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait(_holder(fd))
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:  # the holder's pid, for the next run's "waiting for pid N"; a full disk fails here first
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
        except OSError as exc:
            os.close(fd)  # closing releases the flock
            raise StoreError(f"cannot write the run lock {path}: {exc.strerror or exc}") from None
        with _guard:
            _held[path] = (fd, 1)
    try:
        yield
    finally:
        with _guard:
            fd, depth = _held[path]
            if depth > 1:
                _held[path] = (fd, depth - 1)
            else:
                del _held[path]
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
