"""What MuJoCo's XML compiler keeps after a model is built, and letting it go.

Two things outlive a compiled model in MuJoCo 3.3 (measured on LIBERO-Object's scene,
a 271 MB model of 1.03 M mesh vertices):

* ``mj_loadXML`` keeps the last model's spec (every mesh as parsed) for ``mj_saveLastXML``
  until the next load: ~350 MB. Once freed, ``mj_saveLastXML`` (robosuite's
  ``sim.model.get_xml()``) has nothing to save; the model and its data are untouched.
* A global asset cache (capped at 500 MB by default) keeps decoded meshes and textures
  so that a later compile of the same files is faster: ~150-200 MB after three LIBERO-Object
  scenes, which then build in 6-8 s instead of 12-13 s (the robot and the room are shared).
  It is kept: the time is worth more than the memory, and shrinking a cache that holds
  assets can crash MuJoCo 3.3 (its ``Trim`` walks a priority set whose order a cache hit
  changed in place).

:func:`release_compiler_memory` frees the first and hands the freed pages back to the
operating system (glibc's ``malloc_trim``); it changes neither the physics nor a frame.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
from typing import Any


@functools.cache
def _libmujoco() -> Any:
    """MuJoCo's shared library as loaded by the ``mujoco`` package (None when it cannot be found)."""
    import mujoco

    found = sorted(glob.glob(os.path.join(os.path.dirname(mujoco.__file__), "libmujoco*")))
    if not found:
        return None
    library = ctypes.CDLL(found[0])
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

