"""A ``module:attr`` policy in a file beside its campaign file imports without ``PYTHONPATH``: from the CLI
(driver and worker processes) and from a run the dashboard starts; when it cannot, the error says what to do."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.errors import UnknownPolicyError
from assay.policies import resolve_policy
from assay.server.runs import RunManager, RunState
from assay.spec import PolicySpec
from assay.store import Store

POLICY = '''
import numpy as np

from helpers import GAIN  # a sibling module: the campaign's directory is on the path, not just this file


class Damped:
    """Torque -GAIN * angular velocity on Pendulum (state: cos, sin, velocity)."""

    def reset(self, context):
        self.slots = context.batch_size

    def act(self, observations):
        return np.clip(-GAIN * observations["state"][:, 2:3], -2.0, 2.0)
'''

CAMPAIGN = """
name: beside
seed: 0
episodes: 2
horizon: 5
envs_per_worker: 2
tasks: [gymnasium/Pendulum-v1]
policies: [my_policies:Damped]
"""


def _campaign_dir(root: Path, campaign: str = CAMPAIGN) -> Path:
    directory = root / "campaigns"
    directory.mkdir()
    (directory / "my_policies.py").write_text(POLICY)
    (directory / "helpers.py").write_text("GAIN = 0.5\n")
    (directory / "beside.yaml").write_text(campaign)
    return directory


def _episodes(store: Path) -> list:
    with Store(store) as opened:
        return opened.catalog.episodes(campaign="beside")


@pytest.mark.sim
def test_a_policy_beside_its_campaign_file_runs_from_the_cli_in_worker_processes(tmp_path):
    directory = _campaign_dir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "assay", "run", str(directory / "beside.yaml"), "--store",
                           str(tmp_path / "store"), "--executor", "local", "--workers", "1"],
                          cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    episodes = _episodes(tmp_path / "store")
    assert len(episodes) == 2 and {r.outcome.value for r in episodes} == {"timeout"}  # Pendulum: no success signal
    assert {r.policy_name for r in episodes} == {"Damped"} and all(r.steps == 5 for r in episodes)


@pytest.mark.sim
def test_a_policy_beside_its_campaign_file_runs_when_the_dashboard_starts_it(tmp_path):
    directory = _campaign_dir(tmp_path)
    manager = RunManager(tmp_path / "store", directory, executor="local", workers=1)
    run = manager.start("beside.yaml")
    deadline = time.monotonic() + 300
    while run.state is RunState.RUNNING:
        assert time.monotonic() < deadline, Path(run.log).read_text()
        time.sleep(0.2)
    assert run.state is RunState.SUCCEEDED, Path(run.log).read_text()
    assert run.to_dict()["error"] is None
    assert len(_episodes(tmp_path / "store")) == 2


def test_a_dashboard_run_that_fails_shows_why(tmp_path):
    directory = _campaign_dir(tmp_path, CAMPAIGN.replace("my_policies:Damped", "not_there:Policy"))
    manager = RunManager(tmp_path / "store", directory, executor="inline")
    run = manager.start("beside.yaml")
    run.process.wait(timeout=300)
    shown = run.to_dict()
    assert shown["state"] == "failed"
    assert shown["error"].startswith(f"error: {directory / 'beside.yaml'}:8: policy 'Policy': no module 'not_there'")
    assert "campaign file's directory" in shown["error"] and "PYTHONPATH" in shown["error"]


def test_a_missing_module_says_where_it_is_looked_for_and_a_missing_dependency_names_itself(tmp_path, monkeypatch):
    with pytest.raises(UnknownPolicyError, match=r"no module 'absent_pkg' \(a module:attr policy is imported from "
                                                  r"the Python path, which holds the campaign file's directory"):
        resolve_policy(PolicySpec(name="p", entrypoint="absent_pkg.policies:P"))
    (tmp_path / "needs_dep.py").write_text("import absent_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UnknownPolicyError, match=r"importing module 'needs_dep' failed: No module named "
                                                  r"'absent_dependency_xyz'"):
        resolve_policy(PolicySpec(name="p", entrypoint="needs_dep:P"))
