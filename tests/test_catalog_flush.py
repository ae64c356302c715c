"""Batched catalog writes: rows go in transactions sized by count or age, and a kill mid-flush loses nothing.

The driver hands each record to ``CatalogWriter``, which commits what it holds in one transaction
once ``rows`` records are held or the oldest has waited ``seconds`` (``CommitPolicy``; issue 39:
not one transaction per ``envs_per_worker`` rows). Killing the driver *inside* a transaction
(SIGKILL while the rows are inserted but not committed) leaves the earlier transactions in the
catalog and none of the killed one; the rerun then has every job exactly once, with the undisturbed
run's results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from assay.errors import AssayError, StoreError
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.run.catalog_writer import CatalogWriter, CommitPolicy
from assay.spec import campaign_from_data
from assay.store import Store

pytestmark = pytest.mark.chaos

CAMPAIGN = {"name": "flush", "seed": 5, "episodes": 8, "envs_per_worker": 2, "horizon": 15,
            "tasks": ["gymnasium/Pendulum-v1"], "policies": ["random"]}

# Runs the campaign inline; the second flush stops inside its transaction (rows inserted, links being
# written, nothing committed), says so through a marker file, and waits to be killed.
DRIVER = """
import json, sys, time
from pathlib import Path
from assay.store import catalog as catalog_module
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.run.catalog_writer import CommitPolicy
from assay.spec import campaign_from_data
from assay.store import Store

data, root, marker = json.loads(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
link, flushes = catalog_module.Catalog._link, []

def stalling_link(self, conn, campaign, pairs, *more):
    if pairs:
        flushes.append(len(pairs))
        if len(flushes) == 2:
            marker.write_text(str(len(pairs)))
            time.sleep(120)  # killed here, mid-transaction
    return link(self, conn, campaign, pairs, *more)

catalog_module.Catalog._link = stalling_link
with Store(root) as store:
    run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(root),
                 commit=CommitPolicy(rows=2, seconds=600))
"""


def _results(store: Store) -> dict[str, tuple[str, int, str]]:
    return {r.key: (r.outcome.value, r.steps, r.trajectory_hash) for r in store.catalog.episodes(campaign="flush")}


def _counts(store: Store) -> tuple[int, int]:
    with store.catalog.engine.connect() as conn:
        return (conn.execute(sa.text("select count(*) from episodes")).scalar_one(),
                conn.execute(sa.text("select count(*) from campaign_episodes")).scalar_one())


def test_the_driver_commits_by_count_in_finishing_order(tmp_path: Path, monkeypatch):
    committed: list[list[str]] = []
    original = Store.record

    def recording(self, records):
        committed.append([r.key for r in records])
        original(self, records)

    monkeypatch.setattr(Store, "record", recording)
    finished: list[str] = []
    campaign = prepare_campaign(campaign_from_data(CAMPAIGN))
    with Store(tmp_path / "store") as store:
        run_campaign(campaign, store, InlineExecutor(tmp_path / "store"), on_record=lambda r: finished.append(r.key),
                     commit=CommitPolicy(rows=3, seconds=600))
        assert _counts(store) == (8, 8)
    assert committed == [finished[0:3], finished[3:6], finished[6:8]]  # count-sized; the rest at the end


def _wait_for(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_held_row_is_committed_once_it_is_old_enough_without_another_record(tmp_path: Path):
    commits: list[list[str]] = []
    with Store(tmp_path / "store") as store:
        run_campaign(prepare_campaign(campaign_from_data(CAMPAIGN)), store, InlineExecutor(tmp_path / "store"))
        records = store.catalog.episodes(campaign="flush")
    writer = CatalogWriter(lambda rows: commits.append([r.key for r in rows]), CommitPolicy(rows=100, seconds=0.05))
    with writer:
        writer.add(records[0])
        _wait_for(lambda: writer.commits == 1)  # no second record, no end of run: the age alone commits it
        assert commits == [[records[0].key]]
        writer.add(records[1])
        writer.add(records[2])
        writer.flush()
        assert commits[-1] == [records[1].key, records[2].key]
    assert writer.commits == 2


def test_a_failed_commit_is_raised_once_to_the_driver(tmp_path: Path):
    with Store(tmp_path / "store") as store:
        run_campaign(prepare_campaign(campaign_from_data(CAMPAIGN)), store, InlineExecutor(tmp_path / "store"))
        records = store.catalog.episodes(campaign="flush")

    def full_disk(rows):
        raise StoreError("catalog: add_many failed: database or disk is full")

    writer = CatalogWriter(full_disk, CommitPolicy(rows=1, seconds=600))
    writer.add(records[0])
    _wait_for(lambda: writer._error is not None)
    with pytest.raises(StoreError, match="disk is full"):
        writer.add(records[1])
    writer.close()  # already raised: not again
    late = CatalogWriter(full_disk, CommitPolicy(rows=100, seconds=600))
    late.add(records[0])
    with pytest.raises(StoreError, match="disk is full"):
        late.close()  # the last commit, at close
    with pytest.raises(AssayError, match="commit rows must be at least 1"):
        CommitPolicy(rows=0)


def test_a_kill_mid_flush_then_rerun_loses_nothing_and_duplicates_nothing(tmp_path: Path):
    with Store(tmp_path / "reference") as store:
        run_campaign(prepare_campaign(campaign_from_data(CAMPAIGN)), store, InlineExecutor(tmp_path / "reference"))
        reference = _results(store)
    root, marker = tmp_path / "store", tmp_path / "mid-flush"
    process = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(CAMPAIGN), str(root), str(marker)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), process.stderr.read().decode() if process.poll() is not None else "no flush"
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait()
        process.stderr.close()
    assert marker.read_text() == "2"  # the second commit's two rows were inside the killed transaction
    with Store(root) as store:
        assert _counts(store) == (2, 2)  # the first batch committed, none of the second
        on_disk = len(list((root / "episodes").rglob("*.parquet")))
        assert on_disk >= 4  # the killed commit's files are complete (renamed) but have no rows, nor do later ones
        summary = run_campaign(prepare_campaign(campaign_from_data(CAMPAIGN)), store, InlineExecutor(root))
        assert (summary.skipped, summary.ran) == (2, 6)
        assert _results(store) == reference
        assert _counts(store) == (8, 8)  # no duplicate row or link
        assert store.damaged(reference) == {}
        files = {str(p.relative_to(root)) for p in (root / "episodes").rglob("*") if p.is_file()}
        assert files == {r.data_path for r in store.catalog.episodes(campaign="flush")}
