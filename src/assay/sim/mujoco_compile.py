"""Compile a MuJoCo XML file once: while :func:`compiled_once` is active, a file compiled just before is copied.

Building a Meta-World environment is mostly MuJoCo compiling its XML file (~105 of ~115 ms for pick-place on
the 2-core machine), and a worker builds several environments of one task back to back (``envs_per_worker``).
Inside :func:`compiled_once`, ``mujoco.MjModel.from_xml_path(path)`` compiles a file it has not compiled
before, keeps that model untouched, and hands out copies of it (``mj_copyModel``: every array byte for byte,
~15 ms); a copy is what a fresh compile gives (``tests/test_mujoco_compile.py`` compares their saved models
byte for byte, and the episodes run on them). Only the last file compiled is kept (a Meta-World model is
~21 MB); a file is known by its absolute path, size and modification time, so an edited file is compiled
again (a file it includes is not looked at: an edit there needs a new process, or :func:`forget`). A call with
``assets`` (files in memory), for a file that cannot be read, or from another thread while the block is active,
is compiled as always. The block holds a re-entrant lock, so builds in two threads of one process wait for each
other rather than see the patch half-made.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_LOCK = threading.RLock()
_kept: dict[tuple[str, int, int], Any] = {}  # at most one: the last file compiled, as compiled


def _key(path: str) -> tuple[str, int, int] | None:
    """How a file is known (absolute path, size, modification time); None where it cannot be read (MuJoCo's own
    compile then says what is wrong, as it would have)."""
    try:
        stat = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    return os.path.abspath(path), stat.st_size, stat.st_mtime_ns


def forget() -> None:
    """Drop the kept model (tests; memory)."""
    with _LOCK:
        _kept.clear()


@contextmanager
def compiled_once() -> Iterator[None]:
    """Within the block, ``mujoco.MjModel.from_xml_path`` copies the model of a file it compiled last."""
    import mujoco

    with _LOCK:
        original = mujoco.MjModel.__dict__["from_xml_path"]
        compile_file = mujoco.MjModel.from_xml_path
        owner = threading.get_ident()

        def from_xml_path(filename: str, assets: dict[str, bytes] | None = None) -> Any:
            if assets is not None:
                return compile_file(filename, assets)
            key = _key(filename)
            if key is None or threading.get_ident() != owner:  # another thread's build: compiled as always
                return compile_file(filename)
            model = _kept.get(key)
            if model is None:
                model = compile_file(filename)
                _kept.clear()
                _kept[key] = model
            return copy.copy(model)

        mujoco.MjModel.from_xml_path = staticmethod(from_xml_path)
        try:
            yield
        finally:
            mujoco.MjModel.from_xml_path = original
