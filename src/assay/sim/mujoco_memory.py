"""What MuJoCo's XML compiler keeps after a model is built, and letting it go.

Two things outlive a compiled model in MuJoCo 3.3 (measured on LIBERO-Object's scene,
a 271 MB model of 1.03 M mesh vertices):

* ``mj_loadXML`` keeps the last model's spec (every mesh as parsed) for ``mj_saveLastXML``
  until the next load: ~350 MB. Once freed, ``mj_saveLastXML`` (robosuite's
  ``sim.model.get_xml()``) has nothing to save; the model and its data are untouched.
* A global asset cache (capped at 500 MB by default) keeps decoded meshes and textures
  so that a later compile of the same files is faster: ~150-200 MB after a few LIBERO-Object
  scenes, which then build in 6-8 s instead of 12-13 s (the robot and the room are shared).
  One worker over LIBERO-Object's tasks held 1.62 GB with it and 1.42 GB without
  (benchmarks/libero_memory.py), so a LIBERO environment turns it off.

:func:`release_compiler_memory` frees the first and hands the freed pages back to the
operating system (glibc's ``malloc_trim``); :func:`disable_asset_cache` keeps the second
empty, and only in a process that has compiled nothing yet: shrinking a cache that holds
assets can crash MuJoCo 3.3 (its ``Trim`` walks a priority set whose order a cache hit
changed in place). Neither changes the physics or a frame.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import sys
from typing import Any


@functools.cache
def _libmujoco() -> Any:
    """MuJoCo's shared library as loaded by the ``mujoco`` package (None when it cannot be found)."""
    import mujoco

    found = sorted(glob.glob(os.path.join(os.path.dirname(mujoco.__file__), "libmujoco*")))
    if not found:
        return None
    library = ctypes.CDLL(found[0])
    library.mj_globalCache.restype = ctypes.c_void_p
    library.mj_setCacheSize.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return library


def release_compiler_memory() -> bool:
    """Free the last XML spec and hand freed heap pages back; False when MuJoCo's library cannot be reached."""
    library = _libmujoco()
    if library is None:
        return False
    library.mj_freeLastXML()
    libc_name = ctypes.util.find_library("c")
    if libc_name:
        libc = ctypes.CDLL(libc_name)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
    return True



def disable_asset_cache() -> bool:
    """Keep MuJoCo's asset cache empty from now on, if this process has compiled no model yet (judged by
    ``mujoco`` not being imported); True when it was done, False when the cache was left as it is."""
    if "mujoco" in sys.modules:
        return False
    library = _libmujoco()
    cache = library.mj_globalCache() if library is not None else None
    if not cache:
        return False
    library.mj_setCacheSize(cache, 0)  # on an empty cache: nothing is trimmed, and nothing is ever inserted
    return True
