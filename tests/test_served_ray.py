"""Ray actors step a running served simulator: each job carries its URL, so an actor connects as a local worker
does, and the episodes are the in-process ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from assay.run.ray_executor import RayExecutor
from tests.served_support import served
from tests.test_served import _campaign, _run

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.sim, pytest.mark.ray]

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    environ = dict(os.environ)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO),
                                                                      os.environ.get("PYTHONPATH", "")])}})
    yield
    ray.shutdown()
    os.environ.clear()  # ray.init() leaves variables behind (see tests/test_ray.py)
    os.environ.update(environ)


def test_ray_actors_step_a_served_simulator_to_the_in_process_episodes(tmp_path):
    reference, _, _ = _run(tmp_path / "in-process", _campaign("mw"))
    with served("metaworld", clients=2) as server:
        spec = _campaign("mw", {"metaworld": server.url})
        hashes, summary, _ = _run(tmp_path / "ray", spec, RayExecutor(tmp_path / "ray", actors=2))
    assert summary.outcomes["error"] == 0 and hashes == reference
