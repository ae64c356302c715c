from __future__ import annotations

import os
import re
import tempfile
import textwrap
from pathlib import Path

import pytest

# `make test-fast` (ASSAY_TEST_TIER=fast) builds no simulator: no MuJoCo (Meta-World, LIBERO/robosuite, a
# Gymnasium MuJoCo task); Gymnasium's classic-control tasks (Pendulum, numpy only) are allowed. In this process
# those backends' constructors are refused and noted; processes spawned from here load
# tests/fast_tier/sitecustomize.py, which refuses the simulator packages themselves. Either way the test that
# asked fails, and so does the run.
FAST_TIER = os.environ.get("ASSAY_TEST_TIER") == "fast"
_BUILT: list[str] = []  # "<test>: <backend>" for every simulator the fast tier was asked to build
_NOTED = [0]  # how many of those (and of the spawned processes' log lines) a report has already failed for


def _note(what: str) -> AssertionError:
    _BUILT.append(f"{os.environ.get('PYTEST_CURRENT_TEST', '?')}: {what}")
    return AssertionError(f"the fast test tier builds no simulator ({what}): mark the test `sim`")


def _refuse(backend: type) -> None:
    def refused(self, *args, **kwargs):
        raise _note(backend.__name__)

    backend.__init__ = refused


def _refuse_mujoco_tasks(backend: type) -> None:
    built = backend.__init__

    def checked(self, *args, **kwargs):
        built(self, *args, **kwargs)
        module = type(self._env.unwrapped).__module__
        if "mujoco" in module or module.startswith("gymnasium_robotics"):
            self.close()
            raise _note(f"{backend.__name__} {module}")

    backend.__init__ = checked


def pytest_configure(config: pytest.Config) -> None:
    if not FAST_TIER:
        return
    from assay.sim.gymnasium_env import GymnasiumEnv
    from assay.sim.libero_env import LiberoEnv
    from assay.sim.metaworld_env import MetaWorldEnv

    _refuse(MetaWorldEnv)
    _refuse(LiberoEnv)
    _refuse_mujoco_tasks(GymnasiumEnv)
    log = Path(tempfile.mkdtemp(prefix="assay-fast-tier-")) / "simulators.log"
    log.touch()
    os.environ["ASSAY_FAST_TIER_LOG"] = str(log)
    here = str(Path(__file__).parent / "fast_tier")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    if not FAST_TIER:
        return
    report, seen = outcome.get_result(), len(_BUILT) + _logged()
    if seen > _NOTED[0]:  # built during this phase (a session fixture's set-up counts for the test that asked)
        _NOTED[0] = seen
        if not report.failed:
            report.outcome = "failed"
            report.longrepr = f"the fast test tier builds no simulator, and {item.nodeid} built one: mark it `sim`"


def _logged() -> int:
    path = os.environ.get("ASSAY_FAST_TIER_LOG")
    return len(Path(path).read_text().splitlines()) if path and Path(path).exists() else 0


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if FAST_TIER and (_BUILT or _logged()):
        built = _BUILT + Path(os.environ["ASSAY_FAST_TIER_LOG"]).read_text().splitlines()
        print("\nthe fast test tier built simulators:\n  " + "\n  ".join(built))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def write_campaign(tmp_path: Path):
    """Write a campaign YAML into tmp_path and return its path."""

    def write(text: str, name: str = "campaign.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    return write


RAY_MARK = re.compile(r"pytest\.mark\.ray(_cluster)?\b")


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown to a pytest without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under pytest-xdist (``make test``: ``-n 2``), each test file runs in one worker, so a module's fixtures are
    built once, and every file that marks a test ``ray`` or ``ray_cluster`` runs in one worker, one after another
    (each starts its own local Ray instance; two at once on a 2-core machine starve each other). pytest-xdist's
    ``loadgroup`` cannot say this under pytest 9 (it renames node ids, which pytest 9 no longer reads)."""
    from xdist.scheduler import LoadScopeScheduling

    tests = Path(__file__).parent
    ray_files = {f"tests/{path.name}" for path in tests.glob("test_*.py") if RAY_MARK.search(path.read_text())}

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "ray" if path in ray_files else path

    return ByFile(config, log)
