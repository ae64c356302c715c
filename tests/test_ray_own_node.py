"""On a Ray instance the driver started itself with no runtime environment, the preflight probes the driver's node
in process: its workers are the children of this process's raylet, with the environment and file system this
process had, so a task started only to write a probe there would cost a worker's start-up (0.2-0.6 s on 2 cores)
and prove nothing more. A cluster's nodes are each probed by a task (tests/test_ray_preflight.py), as is a Ray
instance with a runtime environment (tests/test_ray.py)."""

from __future__ import annotations

import os

import pytest

from assay.errors import AssayError
from assay.run import preflight

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.ray]


@pytest.fixture(scope="module")
def plain_ray():
    environ = dict(os.environ)
    # address="local": a new instance even when another Ray cluster runs on this machine; no runtime_env
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    os.environ.clear()  # ray.init() leaves variables behind (see tests/test_ray.py)
    os.environ.update(environ)


def test_the_driver_probes_its_own_ray_node_in_process(plain_ray, tmp_path, monkeypatch):
    assert preflight._own_head_node(ray) == ray.get_runtime_context().get_node_id()

    def no_task(root: str, token: str) -> None:
        raise AssertionError("a probe task ran on the driver's own node")

    monkeypatch.setattr(preflight, "node_probe", no_task)  # a task would carry this, and fail
    assert preflight.preflight(ray, str(tmp_path / "root"), preflight.run_token()) == 1
    assert list((tmp_path / "root" / preflight.PROBE_DIR).iterdir()) == []  # written, read back and deleted
    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(AssayError, match=r"^node this-process .* cannot write the data root .*a-file"):
        preflight.preflight(ray, str(tmp_path / "a-file"), preflight.run_token())
