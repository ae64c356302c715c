"""The fast tier's guard itself: `make test-fast` fails a test that builds a simulator, in its own process or in a
process it spawns, and passes one that builds none.

The guard is tests/conftest.py (refused backend constructors) and tests/fast_tier/sitecustomize.py (refused
simulator imports in spawned processes). Each case runs pytest in a fresh process over a scratch folder holding
copies of both files and one test module, with ``ASSAY_TEST_TIER=fast`` and nothing inherited from this run's
own guard, and reads the outcome.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

BUILDS_METAWORLD = """
from assay.sim.metaworld_env import MetaWorldEnv

def test_builds_a_simulator():
    MetaWorldEnv("metaworld/reach@1")
"""

CHILD_IMPORTS_MUJOCO = """
import subprocess, sys

def test_spawns_a_simulator():
    subprocess.run([sys.executable, "-c", "import mujoco"], check=False)
"""

BUILDS_NOTHING = """
def test_builds_nothing():
    assert sum(range(4)) == 6
"""


def _run_fast_tier(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    shutil.copytree(TESTS / "fast_tier", tmp_path / "fast_tier")
    (tmp_path / "test_case.py").write_text(textwrap.dedent(source))
    env = {k: v for k, v in os.environ.items() if k not in ("ASSAY_FAST_TIER_LOG", "PYTHONPATH", "PYTEST_ADDOPTS")}
    env["ASSAY_TEST_TIER"] = "fast"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                           str(tmp_path / "test_case.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize(("source", "what"), [(BUILDS_METAWORLD, "MetaWorldEnv"),
                                              (CHILD_IMPORTS_MUJOCO, "mujoco imported")])
def test_the_fast_tier_fails_a_test_that_builds_a_simulator(tmp_path, source, what):
    done = _run_fast_tier(tmp_path, source)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed" in done.stdout and "builds no simulator" in done.stdout + done.stderr
    assert what in done.stdout + done.stderr


def test_the_fast_tier_passes_a_test_that_builds_none(tmp_path):
    done = _run_fast_tier(tmp_path, BUILDS_NOTHING)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
