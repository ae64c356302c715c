"""Loaded at start-up by the processes the fast test tier spawns (tests/conftest.py puts this folder on their
PYTHONPATH): a simulator package imported there is refused and written to the tier's log, which fails the run.

The tier's own process is guarded by tests/conftest.py; this file does nothing anywhere else.
"""

import os
import sys

SIMULATORS = ("mujoco", "metaworld", "robosuite", "libero")


class _RefuseSimulators:
    """A meta path finder that refuses the simulator packages (and logs who asked)."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in SIMULATORS:
            return None
        with open(os.environ["ASSAY_FAST_TIER_LOG"], "a") as log:
            log.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?')}: a child process imported {name}\n")
        raise ImportError(f"the fast test tier builds no simulator ({name} imported): mark the test `sim`")


if os.environ.get("ASSAY_FAST_TIER_LOG"):
    sys.meta_path.insert(0, _RefuseSimulators())
