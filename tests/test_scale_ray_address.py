"""Joining an existing Ray cluster (issue 39): ``--address HOST:PORT`` (what ``ray start --head`` prints),
``ray://HOST:PORT`` (Ray Client), ``auto``, and ``RAY_ADDRESS`` when ``--address`` is not given; anything
else is one line naming the valid forms. A two-node ``ray.cluster_utils.Cluster`` campaign run through
the CLI with ``--address HOST:PORT``, and through Ray Client with ``--address ray://HOST:PORT``, gives
exactly the episodes of a local run (Ray Client used to fail: a concurrency group given per call, which
it refuses, is now named on the actor's method).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from assay.errors import AssayError
from assay.run.ray_executor import ADDRESS_FORMS, RayExecutor, cluster_address
from assay.store import Store
from tests.test_integrity import CAMPAIGN, _run

VALID = ["10.0.0.7:6379", "head-0.ray.svc.cluster.local:6379", "localhost:6380", "[::1]:6379",
         "ray://10.0.0.7:10001", "ray://raycluster-head-svc:10001", "auto"]


@pytest.mark.parametrize("address", VALID)
def test_the_valid_forms_are_accepted_as_given(address):
    assert cluster_address(address, environ={}) == address
    assert RayExecutor("/tmp/x", address=address).address == address


@pytest.mark.parametrize("address", ["10.0.0.7", "http://10.0.0.7:6379", "ray://", "ray://head", "head:0",
                                     "head:65536", "local", "10.0.0.7:63 79", "gcs://head:6379"])
def test_a_bad_address_is_one_line_naming_the_valid_forms(address):
    with pytest.raises(AssayError) as bad:
        cluster_address(address, environ={})
    assert str(bad.value) == f"--address {address!r} is not a Ray cluster address; valid: {ADDRESS_FORMS}"
    assert "\n" not in str(bad.value)


def test_ray_address_is_honoured_when_address_is_not_given(monkeypatch):
    assert cluster_address(None, environ={"RAY_ADDRESS": "10.0.0.7:6379"}) == "10.0.0.7:6379"
    assert cluster_address("auto", environ={"RAY_ADDRESS": "10.0.0.7:6379"}) == "auto"  # --address wins
    assert cluster_address(None, environ={"RAY_ADDRESS": ""}) is None
    assert cluster_address(None, environ={}) is None
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert RayExecutor("/tmp/x").address == "ray://head:10001"
    monkeypatch.setenv("RAY_ADDRESS", "head")
    with pytest.raises(AssayError, match=r"^RAY_ADDRESS 'head' is not a Ray cluster address; valid: HOST:PORT"):
        RayExecutor("/tmp/x")


def test_ray_client_without_its_package_names_the_extra(monkeypatch):
    pytest.importorskip("ray")
    import ray

    if ray.is_initialized():
        pytest.skip("a Ray instance is connected in this process")
    monkeypatch.setitem(sys.modules, "grpc", None)  # what a plain `pip install ray` lacks
    with pytest.raises(AssayError) as missing:
        RayExecutor("/tmp/x", address="ray://127.0.0.1:1")._connect()
    assert str(missing.value) == ("the Ray address ray://127.0.0.1:1 needs Ray Client: pip install 'assay[ray]' "
                                  "(it installs ray[client])")


def test_the_cli_refuses_a_bad_address_before_creating_the_store(tmp_path):
    from assay.cli.app import app

    spec = tmp_path / "c.yaml"
    spec.write_text(yaml.safe_dump(CAMPAIGN))
    result = CliRunner().invoke(app, ["run", str(spec), "--store", str(tmp_path / "store"), "-x", "ray",
                                      "--address", "head"])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: --address 'head' is not a Ray cluster address; valid: {ADDRESS_FORMS}"
    assert not (tmp_path / "store").exists()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    if ray.is_initialized():  # join the cluster below, not a Ray an earlier test left connected
        ray.shutdown()
    started = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    started.add_node(num_cpus=1)
    try:
        yield started
    finally:
        ray.shutdown()
        started.shutdown()


@pytest.fixture
def client_server(cluster):
    """A Ray Client server in front of the cluster (what `ray start --head` runs on port 10001), in the mode
    that serves its client itself: the proxy mode's per-client server failed to start now and then here."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "ray.util.client.server", "--address", cluster.address,
                               "--host", "127.0.0.1", "--port", str(port), "--mode", "legacy"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, "the Ray Client server exited"
            time.sleep(0.5)
        yield f"ray://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.ray
@pytest.mark.ray_cluster
@pytest.mark.slow
def test_ray_client_joins_by_ray_url_and_equals_a_local_run(client_server: str, tmp_path: Path) -> None:
    pytest.importorskip("grpc", reason="Ray Client needs ray[client] (pip install 'assay[ray]')")
    import ray

    from assay.cli.app import app

    if ray.is_initialized():  # a Ray this process joined as a driver would be reused, not the client
        ray.shutdown()
    spec = tmp_path / "c.yaml"
    spec.write_text(yaml.safe_dump({**CAMPAIGN, "name": "client"}))
    root = tmp_path / "client-store"
    address = client_server
    try:
        result = CliRunner().invoke(app, ["run", str(spec), "--store", str(root), "--executor", "ray",
                                          "--address", address, "--workers", "2", "--json"])
        assert result.exit_code == 0, result.output
        assert ray.util.client.ray.is_connected()  # through Ray Client, not as a driver on a node
    finally:
        ray.shutdown()
    with Store(root) as store:
        remote = {r.key: (r.outcome, r.steps, r.total_return, r.trajectory_hash)
                  for r in store.catalog.episodes(campaign="client")}
    _, local = _run(tmp_path / "local-store", {**CAMPAIGN, "name": "client"})
    assert len(remote) == 4
    assert remote == {r.key: (r.outcome, r.steps, r.total_return, r.trajectory_hash) for r in local}


@pytest.mark.ray
@pytest.mark.ray_cluster
@pytest.mark.slow
def test_a_two_node_cluster_joined_by_host_and_port_equals_a_local_run(cluster, tmp_path: Path) -> None:
    import ray

    from assay.cli.app import app

    if ray.is_initialized():
        ray.shutdown()
    address = cluster.address  # HOST:PORT, as `ray start --head` prints it
    assert not address.startswith("ray://") and ":" in address
    spec = tmp_path / "c.yaml"
    spec.write_text(yaml.safe_dump(CAMPAIGN))
    root = tmp_path / "cluster-store"
    result = CliRunner().invoke(app, ["run", str(spec), "--store", str(root), "--executor", "ray",
                                      "--address", address, "--workers", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ran"] == 4
    assert ray.get_runtime_context().gcs_address == address  # the run joined that cluster: two nodes
    assert len([node for node in ray.nodes() if node["Alive"]]) == 2
    with Store(root) as store:
        remote = {r.key: (r.outcome, r.steps, r.total_return, r.trajectory_hash)
                  for r in store.catalog.episodes(campaign=CAMPAIGN["name"])}
    _, local = _run(tmp_path / "local-store")
    assert remote == {r.key: (r.outcome, r.steps, r.total_return, r.trajectory_hash) for r in local}
