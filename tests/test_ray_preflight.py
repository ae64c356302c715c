"""A Ray campaign proves its data root is shared before its first episode (issue 36).

A two-node ``ray.cluster_utils.Cluster`` on this machine, each node with its own home directory
(``HOME`` of the second node's raylet, so of its workers): the data root ``file://~/data`` then names
a different directory on each node, as a node-local path on a real cluster does. The preflight fails
naming the second node, before any episode; a root every node shares runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.errors import AssayError
from assay.run import prepare_campaign, run_campaign
from assay.run.preflight import PROBE_DIR, Probe, check_probe, write_probe
from assay.spec import campaign_from_data
from assay.store import Store
from tests.test_integrity import CAMPAIGN

ray = pytest.importorskip("ray")


def test_a_probe_the_driver_cannot_read_names_its_node(tmp_path: Path) -> None:
    probe = write_probe(tmp_path / "elsewhere", "t0k3n", "a1b2c3d4e5f6a7b8c9", "10.0.0.7")
    assert (tmp_path / "elsewhere" / probe.relpath).read_text() == probe.content
    with pytest.raises(AssayError, match=r"^the data root .*/shared is not shared with node a1b2c3d4e5f6 "
                                         r"\(10\.0\.0\.7, host .*\): the probe a worker wrote there is not visible"):
        check_probe(tmp_path / "shared", probe)
    check_probe(tmp_path / "elsewhere", probe)  # readable: passes, and the probe is gone
    assert not (tmp_path / "elsewhere" / probe.relpath).exists()
    broken = Probe("ffff0000ffff0000", "10.0.0.8", "n2", "x", "y", error="cannot write /data: Permission denied")
    with pytest.raises(AssayError, match=r"node ffff0000ffff \(10\.0\.0\.8, host n2\) cannot write the data root"):
        check_probe(tmp_path, broken)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory):
    from ray.cluster_utils import Cluster

    homes = tmp_path_factory.mktemp("homes")
    monkey = pytest.MonkeyPatch()
    monkey.setenv("HOME", str(homes / "head"))  # the driver's and the head node's home
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    second = cluster.add_node(num_cpus=1, env_vars={"HOME": str(homes / "second")})
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield second.node_id, homes
    finally:
        ray.shutdown()
        cluster.shutdown()
        monkey.undo()


def _campaign(name: str):
    return prepare_campaign(campaign_from_data({**CAMPAIGN, "name": name}))


@pytest.mark.ray
@pytest.mark.ray_cluster
@pytest.mark.slow
def test_a_root_that_is_not_shared_fails_at_the_preflight_naming_the_node(two_nodes, tmp_path: Path) -> None:
    from assay.run.ray_executor import RayExecutor

    second, homes = two_nodes
    with Store(tmp_path / "store", data_url="file://~/data") as store:
        executor = RayExecutor(store.data_root, actors=2)
        with pytest.raises(AssayError) as failed:
            run_campaign(_campaign("private"), store, executor)
        assert store.catalog.episodes() == []  # before any episode
    message = str(failed.value)
    assert message.startswith(f"the data root file://~/data is not shared with node {second[:12]} (")
    assert "\n" not in message and "give --data a directory every node mounts" in message
    assert list((homes / "second" / "data" / PROBE_DIR).iterdir())  # the probe is where that node wrote it
    assert not (homes / "head" / "data" / "episodes").exists()


@pytest.mark.ray
@pytest.mark.ray_cluster
@pytest.mark.slow
def test_a_shared_root_passes_the_preflight_on_every_node(two_nodes, tmp_path: Path) -> None:
    from assay.run.ray_executor import RayExecutor

    with Store(tmp_path / "store", data_url=str(tmp_path / "shared")) as store:
        executor = RayExecutor(store.data_root, actors=2)
        summary = run_campaign(_campaign("shared"), store, executor)
        assert summary.ran == 4 and executor.probed_nodes == 2
        for record in store.catalog.episodes(campaign="shared"):
            store.steps(record)
    assert list((tmp_path / "shared" / PROBE_DIR).iterdir()) == []  # every probe read back and deleted
