"""A Ray cluster started with token authentication (``RAY_AUTH_MODE=token``, Ray 2.52 and later): the driver
needs the same token as every node (``RAY_AUTH_TOKEN``, a file named by ``RAY_AUTH_TOKEN_PATH``, or
``~/.ray/auth_token``), and without it ``assay run`` says so in one line instead of a traceback (issue 51).

The slow test starts a two-node ``ray.cluster_utils.Cluster`` in a process whose environment carries the mode
and a token (every node it starts inherits them), then runs ``assay run --executor ray --address HOST:PORT``
as a driver with the token in the environment, with the token in ``~/.ray/auth_token``, in token mode without a
token, and with authentication off.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from assay.errors import AssayError
from assay.run import ray_executor
from assay.run.ray_executor import TOKEN_HINT, RayExecutor
from tests.test_integrity import CAMPAIGN


class _Refused(Exception):
    pass


def _fake_ray(raised: Exception) -> SimpleNamespace:
    def init(**_: object) -> None:
        raise raised

    return SimpleNamespace(is_initialized=lambda: False, init=init,
                           exceptions=SimpleNamespace(AuthenticationError=_Refused))


def test_a_driver_without_the_token_is_one_line_naming_the_three_places(monkeypatch):
    monkeypatch.setattr(ray_executor, "_ray", lambda: _fake_ray(_Refused("Token authentication is enabled but no "
                                                                          "authentication token\nwas found.")))
    with pytest.raises(AssayError) as refused:
        RayExecutor("/tmp/x", address="10.0.0.7:6379")._connect()
    assert str(refused.value) == f"cannot join the Ray cluster at 10.0.0.7:6379: it needs its token and this " \
                                 f"driver has none: {TOKEN_HINT}"
    assert "RAY_AUTH_TOKEN_PATH" in TOKEN_HINT and "~/.ray/auth_token" in TOKEN_HINT


def test_a_refused_connection_without_token_mode_names_token_mode(monkeypatch):
    monkeypatch.setattr(ray_executor, "_ray", lambda: _fake_ray(ConnectionError("Failed to connect to Ray cluster "
                                                                                 "at 10.0.0.7:6379")))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with pytest.raises(AssayError) as off:
        RayExecutor("/tmp/x", address="10.0.0.7:6379")._connect()
    assert str(off.value) == ("cannot join the Ray cluster at 10.0.0.7:6379: Failed to connect to Ray cluster at "
                              "10.0.0.7:6379 (a cluster started with RAY_AUTH_MODE=token refuses a driver without "
                              f"it: {TOKEN_HINT})")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # in token mode, the failure is not about the mode
    with pytest.raises(AssayError) as other:
        RayExecutor("/tmp/x", address="10.0.0.7:6379")._connect()
    assert str(other.value) == "cannot join the Ray cluster at 10.0.0.7:6379: Failed to connect to Ray cluster at " \
                               "10.0.0.7:6379"


CLUSTER = """
import os, sys, time
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
cluster.add_node(num_cpus=1)
print(cluster.address, flush=True)
try:
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.5)
finally:
    cluster.shutdown()
"""


@pytest.mark.ray
@pytest.mark.ray_cluster
@pytest.mark.slow
def test_token_authentication_on_every_node_and_the_driver(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    token = secrets.token_hex(32)
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    stop = tmp_path / "stop"
    cluster = subprocess.Popen([sys.executable, "-c", CLUSTER, str(stop)], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True,
                               env=base | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token,
                                           "HOME": str(tmp_path / "cluster-home")})
    try:
        assert cluster.stdout is not None
        address = cluster.stdout.readline().strip()
        assert ":" in address, "the cluster did not start"
        spec = tmp_path / "c.yaml"
        spec.write_text(yaml.safe_dump({**CAMPAIGN, "name": "token"}))
        with_file = tmp_path / "file-home"
        (with_file / ".ray").mkdir(parents=True)
        (with_file / ".ray" / "auth_token").write_text(token)
        nobody = tmp_path / "no-home"
        nobody.mkdir()

        def driver(label: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "assay", "run", str(spec), "--store", str(tmp_path / label),
                                   "--executor", "ray", "--address", address, "--workers", "2", "--json"],
                                  env=base | env, capture_output=True, text=True, timeout=300)

        by_env = driver("env", {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "HOME": str(nobody)})
        assert by_env.returncode == 0, by_env.stderr[-2000:]
        assert json.loads(by_env.stdout)["ran"] == 4
        by_file = driver("file", {"RAY_AUTH_MODE": "token", "HOME": str(with_file)})
        assert by_file.returncode == 0, by_file.stderr[-2000:]
        assert json.loads(by_file.stdout)["skipped"] == 0 and json.loads(by_file.stdout)["ran"] == 4
        missing = driver("missing", {"RAY_AUTH_MODE": "token", "HOME": str(nobody)})
        assert missing.returncode != 0
        assert f"error: cannot join the Ray cluster at {address}: it needs its token and this driver has none" \
            in missing.stderr and "Traceback" not in missing.stderr
        off = driver("off", {"HOME": str(nobody)})
        assert off.returncode != 0 and "a cluster started with RAY_AUTH_MODE=token refuses a driver" in off.stderr
    finally:
        stop.touch()
        deadline = time.monotonic() + 120
        while cluster.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        if cluster.poll() is None:
            cluster.kill()
        cluster.communicate()
