"""The Ray executor against the local one, on a local Ray instance (``ray.init(num_cpus=2)``).

One Ray session for the module: starting Ray costs seconds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from assay.run import InlineExecutor, LocalExecutor
from assay.run.faults import FaultPolicy
from assay.run.ray_executor import PolicyServing, RayExecutor
from assay.store import Outcome
from tests.test_campaign import SMALL
from tests.test_faults import assert_no_partial_files, killing_campaign, run_and_collect

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.sim, pytest.mark.ray]

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    environ = dict(os.environ)
    # Actors import test policies (tests.faulty_policies), so they need the repository on their path.
    # address="local": a new instance even when another Ray cluster runs on this machine (ray.init() would join it)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}})
    yield
    ray.shutdown()
    # ray.init() leaves RAY_AUTH_MODE=token (its token under this HOME), PYTHONBREAKPOINT and more in os.environ:
    # a later test's cluster must start from the environment this module found
    os.environ.clear()
    os.environ.update(environ)


def test_ray_gives_exactly_the_local_results(tmp_path):
    _, local, _ = run_and_collect(tmp_path / "local", LocalExecutor(tmp_path / "local", 2), SMALL)
    executor = RayExecutor(tmp_path / "ray", actors=2)
    summary, on_ray, records = run_and_collect(tmp_path / "ray", executor, SMALL)
    assert summary.ran == 12 and on_ray == local
    assert {r.outcome for r in records} >= {Outcome.SUCCESS}
    assert executor.restarts == 0


def test_a_sigkilled_actor_is_replaced_and_its_batch_retried(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    data = killing_campaign(markers, name="ray-kills")
    executor = RayExecutor(tmp_path / "ray", actors=2)
    summary, on_ray, records = run_and_collect(tmp_path / "ray", executor, data)
    killed = len(list(markers.iterdir()))
    assert killed >= 1 and executor.restarts == killed
    assert summary.ran == 6 and all(r.outcome is Outcome.SUCCESS for r in records)
    assert_no_partial_files(tmp_path / "ray")
    # Inline equals local (tests/test_campaign.py); it is the cheaper reference.
    _, reference, _ = run_and_collect(tmp_path / "inline", InlineExecutor(tmp_path / "inline"), data)
    assert on_ray == reference


def test_actors_killed_while_batches_are_sent_ahead_lose_and_repeat_nothing(tmp_path, monkeypatch):
    """Twelve episodes in six batches on two actors: each actor is sent its next batch while it runs one. The
    policy kills its actor on its first visit to every third episode; whatever a dead actor held (its running batch
    and, when the kill lands then, the one sent ahead) runs again elsewhere, and the records equal a run in this
    process. The driver's rule for short batches is lifted, so
    what is sent ahead does not depend on how fast this machine runs a batch (under CI's load, over a second)."""
    from assay.run import driver

    monkeypatch.setattr(driver, "AHEAD_BELOW_S", float("inf"))
    markers = tmp_path / "markers"
    markers.mkdir()
    data = killing_campaign(markers, name="ray-kills-ahead", episodes=12)
    executor = RayExecutor(tmp_path / "ray", actors=2)
    summary, on_ray, records = run_and_collect(tmp_path / "ray", executor, data)
    killed = len(list(markers.iterdir()))
    assert killed >= 2 and executor.restarts == killed
    # batches were sent ahead; whether a kill lands while an actor holds one is the machine's timing (twice in four
    # CI runs it did not), so the put-back itself is proved by tests/test_driver.py's scripted pools, and here
    # only that nothing is lost or repeated either way
    assert executor.sent_ahead >= 1
    assert summary.ran == 12 and all(r.outcome is Outcome.SUCCESS for r in records)
    assert_no_partial_files(tmp_path / "ray")
    _, reference, _ = run_and_collect(tmp_path / "inline", InlineExecutor(tmp_path / "inline"), data)
    assert on_ray == reference


@pytest.mark.extended  # a minute and a half of waiting on a wall clock
def test_a_hung_episode_on_ray_becomes_wall_timeout(tmp_path):
    data = {"name": "ray-hangs", "seed": 5, "episodes": 2, "envs_per_worker": 2, "tasks": ["metaworld/reach@1"],
            "policies": [{"name": "hanger", "entrypoint": "tests.faulty_policies:HangingExpert", "params": {"modulo": 3}}]}
    # the limit must let the other episode build its environment and finish on a machine at load 10-20 (it took
    # 6-10 s there); the hang is an hour, so any limit far below that tests the same thing
    executor = RayExecutor(tmp_path, actors=2, faults=FaultPolicy(episode_timeout_s=45.0))
    _, _, records = run_and_collect(tmp_path, executor, data)
    outcomes = sorted((r.seed % 3 == 0, r.outcome.value, r.reason.split(":")[0]) for r in records)
    assert outcomes == [(False, "success", ""), (True, "error", "wall_timeout")]


def test_a_constructor_hang_on_ray_costs_one_timeout_for_its_batch(tmp_path):
    data = {"name": "ray-hang-build", "seed": 5, "episodes": 2, "envs_per_worker": 2, "horizon": 5,
            "tasks": ["gymnasium/Pendulum-v1"],
            "policies": [{"name": "stuck", "entrypoint": "tests.faulty_policies:HangingConstructor"}]}
    executor = RayExecutor(tmp_path, actors=1, faults=FaultPolicy(episode_timeout_s=6.0))
    _, _, records = run_and_collect(tmp_path, executor, data)
    assert [r.reason.split(":")[0] for r in records] == ["wall_timeout", "wall_timeout"]
    assert all("its batch of 2 took no step" in r.reason for r in records) and executor.restarts == 1


def test_a_shared_policy_server_batches_requests_from_several_actors(tmp_path):
    """Two env actors feed one expert server; step files go to an fsspec URL; results equal local."""
    data = {"name": "served", "seed": 11, "episodes": 4, "envs_per_worker": 2,
            "tasks": ["metaworld/reach@1", "metaworld/drawer-open@1"], "policies": ["expert"]}
    _, reference, _ = run_and_collect(tmp_path / "inline", InlineExecutor(tmp_path / "inline"), data)
    shared = tmp_path / "shared-data"
    executor = RayExecutor(f"file://{shared}", actors=2, serving=PolicyServing(max_batch=8, max_wait_ms=20.0))
    summary, on_ray, _ = run_and_collect(tmp_path / "ray", executor, data, data_url=f"file://{shared}")
    assert summary.ran == 8 and on_ray == reference
    (stats,) = executor.server_stats.values()
    assert stats["max_requests_per_call"] >= 2, f"requests from the two actors were never merged: {stats}"
    assert stats["calls"] < stats["requests"]
    assert len(list(shared.rglob("*.parquet"))) == 8 and not (tmp_path / "ray" / "episodes").exists()
    assert_no_partial_files(shared)


def test_the_cli_runs_a_campaign_on_ray_with_step_files_at_a_url(tmp_path, write_campaign):
    import json

    from typer.testing import CliRunner

    from assay.cli.app import app

    path = write_campaign("""
        name: cli-ray
        seed: 2
        episodes: 2
        envs_per_worker: 1
        tasks: [metaworld/reach@1]
        policies: [expert]
    """)
    shared = tmp_path / "shared"
    args = ["run", str(path), "--store", str(tmp_path / "store"), "--executor", "ray", "--workers", "2",
            "--data", f"file://{shared}", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ran"] == 2
    assert len(list(shared.rglob("*.parquet"))) == 2
    shown = CliRunner().invoke(app, ["episodes", "ls", "--store", str(tmp_path / "store"), "--json"])
    assert len(json.loads(shown.stdout)["episodes"]) == 2

    wrong = CliRunner().invoke(app, args[:4] + ["--executor", "local", "--address", "auto"])
    assert wrong.exit_code == 2 and "--address is for the ray executor only" in wrong.stderr


def test_a_policy_beside_its_campaign_file_runs_on_ray_actors(tmp_path):
    """The campaign file's directory reaches the actors (their own processes, on the driver's paths only through
    ``import_roots``): the module beside the file, and the sibling it imports, load there."""
    import json

    from typer.testing import CliRunner

    from assay.cli.app import app

    (tmp_path / "ray_side_policies.py").write_text(
        "import numpy as np\nfrom ray_side_gain import GAIN\n\n\nclass Damped:\n"
        "    def reset(self, context):\n        pass\n\n"
        "    def act(self, observations):\n        return np.clip(-GAIN * observations['state'][:, 2:3], -2, 2)\n")
    (tmp_path / "ray_side_gain.py").write_text("GAIN = 0.5\n")
    (tmp_path / "beside.yaml").write_text("name: ray-beside\nseed: 0\nepisodes: 2\nhorizon: 5\nenvs_per_worker: 1\n"
                                          "tasks: [gymnasium/Pendulum-v1]\npolicies: [ray_side_policies:Damped]\n")
    result = CliRunner().invoke(app, ["run", str(tmp_path / "beside.yaml"), "--store", str(tmp_path / "store"),
                                      "--executor", "ray", "--workers", "1", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["ran"] == 2 and document["outcomes"]["timeout"] == 2, document


@pytest.mark.slow
def test_a_remote_campaign_on_ray_gives_exactly_the_local_results(tmp_path):
    """A served policy driven from Ray actors: the same episodes, down to the step data, as local workers."""
    from assay.policies import ExpertPolicy
    from assay.sim import default_registry
    from tests.remote_support import serving

    reach = default_registry().get("metaworld/reach@1")
    with serving(ExpertPolicy(), reach, max_batch=8, max_wait_ms=2) as server:
        data = {"name": "remote-ray", "seed": 3, "episodes": 4, "horizon": 20, "envs_per_worker": 2,
                "tasks": ["metaworld/reach@1"], "policies": [{"name": "served", "remote": server.url}]}
        _, local, _ = run_and_collect(tmp_path / "local", LocalExecutor(tmp_path / "local", 2), data)
        _, on_ray, _ = run_and_collect(tmp_path / "ray", RayExecutor(tmp_path / "ray", actors=2), data)
    assert on_ray == local and len(local) == 4
    assert all(v[0] is not Outcome.ERROR for v in local.values())



def test_a_ray_instance_with_a_runtime_environment_has_its_node_probed_by_a_task(tmp_path):
    """This module's Ray carries a runtime environment (``env_vars``): its workers' environment is not this
    process's, so the preflight starts its task there (tests/test_ray_own_node.py: the in-process probe)."""
    from assay.run import preflight

    assert preflight._own_head_node(ray) is None
    assert preflight.preflight(ray, str(tmp_path / "root"), preflight.run_token()) == 1
    assert list((tmp_path / "root" / preflight.PROBE_DIR).iterdir()) == []  # the task's probe, read back and deleted
