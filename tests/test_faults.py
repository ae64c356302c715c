"""Fault tolerance of the local executor: killed workers, hung episodes, a killed driver.

Every test checks the three guarantees: no job lost, none duplicated, no partial file.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.run import InlineExecutor, LocalExecutor, prepare_campaign, run_campaign
from assay.run.faults import Dispatcher, Failure, FaultPolicy, WorkItem, environment_key
from assay.spec import campaign_from_data
from assay.store import Outcome, Store
from tests.helpers import comparable_steps, kill_after_episodes

pytestmark = pytest.mark.sim


def killing_campaign(markers: Path, once: bool = True, name: str = "kills", episodes: int = 6) -> dict:
    return {"name": name, "seed": 3, "episodes": episodes, "envs_per_worker": 2, "tasks": ["metaworld/reach@1"],
            "policies": [{"name": "killer", "entrypoint": "tests.faulty_policies:KillingExpert",
                          "params": {"marker_dir": str(markers), "modulo": 3, "once": once}}]}


def run_and_collect(root: Path, executor, data: dict, data_url: str | None = None):
    """Run ``data`` into a store at ``root``; return (summary, {key: comparable result}, records)."""
    with Store(root, data_url=data_url) as store:
        planned = prepare_campaign(campaign_from_data(data))
        summary = run_campaign(planned, store, executor)
        records = store.catalog.episodes(campaign=data["name"])
        assert sorted(r.key for r in records) == sorted(j.key for j in planned.jobs), "a job was lost or added"
        steps = {r.key: comparable_steps(store, r) for r in records}
        results = {r.key: (r.outcome, r.reason, r.steps, r.trajectory_hash, steps[r.key]) for r in records}
        return summary, results, records


def assert_no_partial_files(root: Path) -> None:
    files = [p for p in (root / "episodes").rglob("*") if p.is_file()]
    assert [p for p in files if not p.name.endswith(".parquet")] == []


@pytest.mark.slow
def test_a_sigkilled_worker_is_replaced_and_its_batch_retried(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    data = killing_campaign(markers)
    executor = LocalExecutor(tmp_path / "local", workers=2)
    summary, results, records = run_and_collect(tmp_path / "local", executor, data)
    killed = len(list(markers.iterdir()))
    assert killed >= 1 and executor.restarts == killed, "the campaign seed must make some episodes kill their worker"
    assert summary.ran == 6 and all(r.outcome is Outcome.SUCCESS for r in records)
    assert_no_partial_files(tmp_path / "local")
    # The same campaign with nothing left to kill, in one process: identical results.
    _, reference, _ = run_and_collect(tmp_path / "inline", InlineExecutor(tmp_path / "inline"), data)
    assert results == reference


@pytest.mark.slow
def test_a_job_that_always_kills_its_worker_ends_as_error_after_bounded_retries(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    executor = LocalExecutor(tmp_path / "store", workers=2, faults=FaultPolicy(max_attempts=2))
    summary, _, records = run_and_collect(tmp_path / "store", executor, killing_campaign(markers, False, episodes=4))
    deadly = [r for r in records if r.seed % 3 == 0]
    assert deadly and len(deadly) < len(records)
    for record in deadly:
        assert record.outcome is Outcome.ERROR
        assert record.reason.startswith("worker died 2 times") and "SIGKILL" in record.reason
    # Batch-mates of a deadly episode are split off and succeed on their own.
    assert all(r.outcome is Outcome.SUCCESS for r in records if r.seed % 3)
    assert summary.ran == 4
    assert_no_partial_files(tmp_path / "store")


@pytest.mark.slow
@pytest.mark.extended  # two minutes of waiting on a wall clock; tests/test_store_concurrency.py's hung policy stays
def test_a_hung_episode_becomes_wall_timeout_and_its_batch_mates_finish(tmp_path):
    data = {"name": "hangs", "seed": 5, "episodes": 4, "envs_per_worker": 2, "tasks": ["metaworld/reach@1"],
            "policies": [{"name": "hanger", "entrypoint": "tests.faulty_policies:HangingExpert", "params": {"modulo": 3}}]}
    # A hung episode sleeps an hour, so the limit can be generous: 60 s leaves a machine at load 20 ample room
    # to start a worker, build the environment and finish the batch-mates (a few seconds unloaded), while a batch
    # that has not begun stepping within it is recorded whole (tests/test_batch_timeout.py); nothing here
    # depends on how fast the machine is, only on a hang being far longer than honest work.
    executor = LocalExecutor(tmp_path, workers=2, faults=FaultPolicy(episode_timeout_s=60.0))
    started = time.monotonic()
    summary, _, records = run_and_collect(tmp_path, executor, data)
    hung = [r for r in records if r.seed % 3 == 0]
    assert hung and len(hung) < len(records), "the campaign seed must make some episodes hang"
    for record in hung:
        assert record.outcome is Outcome.ERROR and record.reason.startswith("wall_timeout")
        assert record.data_path is None
    assert all(r.outcome is Outcome.SUCCESS for r in records if r.seed % 3)
    assert summary.ran == 4 and time.monotonic() - started < 600  # the hang was cut (it sleeps 3600 s)
    assert_no_partial_files(tmp_path)


def test_fault_policy_refuses_nonsense():
    from assay.errors import AssayError

    with pytest.raises(AssayError, match="max_attempts"):
        FaultPolicy(max_attempts=0)
    with pytest.raises(AssayError, match="timeout"):
        FaultPolicy(episode_timeout_s=0)


@pytest.mark.slow
def test_driver_killed_with_its_workers_resumes_from_the_catalog(tmp_path, write_campaign):
    path = write_campaign("""
        name: resume-local
        seed: 1
        episodes: 6
        envs_per_worker: 1
        tasks: [metaworld/reach@1, metaworld/drawer-open@1]
        policies: [expert, random]
    """)
    store = tmp_path / "store"
    command = [sys.executable, "-m", "assay.cli.app", "run", str(path), "--store", str(store),
               "--executor", "local", "--workers", "2"]
    done = kill_after_episodes(command, store, 4)
    assert 4 <= done < 24, f"the kill should land mid-campaign (saw {done} episodes)"

    resumed = subprocess.run(command + ["--json"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    with Store(store) as opened:
        records = opened.catalog.episodes(campaign="resume-local")
        assert len(records) == 24 and len({r.key for r in records}) == 24
        for record in records:
            opened.steps(record)  # complete and matching its checksum
    assert_no_partial_files(store)
    assert len(list((store / "episodes").rglob("*.parquet"))) == 24


def test_dispatch_keeps_workers_on_the_environments_they_built():
    planned = prepare_campaign(campaign_from_data({"name": "d", "seed": 0, "episodes": 3, "envs_per_worker": 1,
                                                   "tasks": ["metaworld/reach@1", "metaworld/door-open@1"],
                                                   "policies": ["expert"]}))
    batches = [(job,) for job in planned.jobs]
    dispatcher = Dispatcher(batches, FaultPolicy())
    reach, door = environment_key(WorkItem(batches[0])), environment_key(WorkItem(batches[-1]))
    assert reach != door and {environment_key(WorkItem(b)) for b in batches} == {reach, door}
    first = dispatcher.take()
    assert environment_key(first) == reach
    assert environment_key(dispatcher.take((), {reach})) == door  # a fresh worker gets an environment nobody is on
    assert environment_key(dispatcher.take({door}, {reach})) == door  # a warm worker stays where it is
    assert environment_key(dispatcher.take({reach}, {door})) == reach
    assert dispatcher.failed(first, Failure.DIED, "test") == []  # retried, and retries go first whatever is warm
    assert dispatcher.take({door}, {reach}) == WorkItem(first.jobs, 2)
    rest = []
    while dispatcher.has_work():
        rest.append(dispatcher.take({door}, ()))
    assert [environment_key(item) for item in rest] == [door, reach]  # nothing warm left: steal the rest
