"""The shared-root preflight runs for every executor whose workers are separate processes, and for every data root
that is not a local directory (issue 50): a ``memory://`` root with worker processes is refused in one line before
anything runs, a local worker that does not see the driver's probe says so before its first batch, and the inline
executor writes and reads back an fsspec root first."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import AssayError
from assay.run import InlineExecutor, LocalExecutor, prepare_campaign, run_campaign
from assay.run.preflight import PROBE_DIR, check_from_worker, needs_probe, run_token, write_probe
from assay.spec import campaign_from_data
from assay.store import Store

CAMPAIGN = {"name": "probe", "seed": 1, "episodes": 2, "horizon": 3, "envs_per_worker": 1,
            "tasks": ["gymnasium/Pendulum-v1"], "policies": ["random"]}


def test_a_memory_root_with_worker_processes_is_refused_in_one_line() -> None:
    with pytest.raises(AssayError) as refused:
        LocalExecutor("memory://bucket/data", 2)
    assert str(refused.value) == (
        "the data root memory://bucket/data lives in one process's memory, and the local executor's workers are "
        "other processes: they would write step files the driver never sees; use --executor inline, or give --data "
        "a directory or a URL every worker reaches")
    from assay.run.ray_executor import RayExecutor

    with pytest.raises(AssayError, match="the ray executor's workers are other processes"):
        RayExecutor("memory://bucket/data", 1)


def test_assay_run_refuses_a_memory_data_root_with_local_workers_before_creating_the_store(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent("""\
        name: probe
        episodes: 2
        horizon: 3
        tasks: [gymnasium/Pendulum-v1]
        policies: [random]
        """))
    result = CliRunner().invoke(app, ["run", str(path), "--store", str(tmp_path / "s"), "--data", "memory://x/d"])
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: the data root memory://x/d lives in one process's memory, and the local executor")
    assert not (tmp_path / "s").exists()


def test_a_worker_that_does_not_see_the_drivers_probe_names_itself(tmp_path: Path) -> None:
    driver = write_probe(tmp_path / "driver-view", run_token(), "driver", "local")
    with pytest.raises(AssayError) as failed:
        check_from_worker(tmp_path / "worker-view", driver)
    message = str(failed.value)
    assert message.startswith(f"the data root {tmp_path / 'worker-view'} is not shared with worker process "
                              f"{os.getpid()} (host ") and "the probe the driver wrote there is not visible" in message
    assert "\n" not in message
    check_from_worker(tmp_path / "driver-view", driver)  # the same root: passes
    assert [p.name for p in (tmp_path / "driver-view" / PROBE_DIR).iterdir()] == [Path(driver.relpath).name]


def test_local_workers_probe_the_root_and_leave_no_probe(tmp_path: Path) -> None:
    with Store(tmp_path / "store") as store:
        summary = run_campaign(prepare_campaign(campaign_from_data(CAMPAIGN)), store,
                               LocalExecutor(store.data_root, 2))
        assert summary.ran == 2
        assert list((Path(store.data_root) / PROBE_DIR).iterdir()) == []


def test_the_inline_executor_probes_an_fsspec_root_first(tmp_path: Path) -> None:
    assert needs_probe("memory://inline/data") and needs_probe("s3://bucket/x")
    assert not needs_probe(tmp_path) and not needs_probe(f"file://{tmp_path}")
    with Store(tmp_path / "store", data_url="memory://inline-probe/data") as store:
        summary = run_campaign(prepare_campaign(campaign_from_data(CAMPAIGN)), store, InlineExecutor(store.data_root))
        assert summary.ran == 2 and store.files.glob(f"{PROBE_DIR}/*") == []
