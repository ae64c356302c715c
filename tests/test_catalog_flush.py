"""Batched catalog writes: a batch's rows go in one transaction, and a kill mid-flush loses nothing.

The driver holds a batch's records until its last one arrives, then writes every row in one
transaction (``CatalogWriter``). Killing the driver *inside* that transaction (SIGKILL while the
rows are inserted but not committed) leaves the earlier batches in the catalog and none of the
killed batch; the rerun then has every job exactly once, with the undisturbed run's results.
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

from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.run.campaign import CatalogWriter
from assay.spec import batch_jobs, campaign_from_data
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
from assay.spec import campaign_from_data
from assay.store import Store

data, root, marker = json.loads(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
link, flushes = catalog_module.Catalog._link, []

def stalling_link(self, conn, campaign, pairs):
    if pairs:
        flushes.append(len(pairs))
        if len(flushes) == 2:
            marker.write_text(str(len(pairs)))
            time.sleep(120)  # killed here, mid-transaction
    return link(self, conn, campaign, pairs)

catalog_module.Catalog._link = stalling_link
with Store(root) as store:
    run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(root))
"""


def _results(store: Store) -> dict[str, tuple[str, int, str]]:
    return {r.key: (r.outcome.value, r.steps, r.trajectory_hash) for r in store.catalog.episodes(campaign="flush")}


def _counts(store: Store) -> tuple[int, int]:
    with store.catalog.engine.connect() as conn:
        return (conn.execute(sa.text("select count(*) from episodes")).scalar_one(),
                conn.execute(sa.text("select count(*) from campaign_episodes")).scalar_one())


def test_the_driver_writes_one_transaction_per_finished_batch(tmp_path: Path, monkeypatch):
    flushed: list[list[str]] = []
    original = CatalogWriter.flush

    def recording_flush(self):
        if self._held:
            flushed.append([r.key for r in self._held])
        original(self)

    monkeypatch.setattr(CatalogWriter, "flush", recording_flush)
    campaign = prepare_campaign(campaign_from_data(CAMPAIGN))
    with Store(tmp_path / "store") as store:
        run_campaign(campaign, store, InlineExecutor(tmp_path / "store"))
        assert _counts(store) == (8, 8)
    assert flushed == [[job.key for job in batch] for batch in batch_jobs(list(campaign.jobs), 2)]


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
    assert marker.read_text() == "2"  # the second batch's two rows were inside the killed transaction
    with Store(root) as store:
        assert _counts(store) == (2, 2)  # the first batch committed, none of the second
        on_disk = len(list((root / "episodes").rglob("*.parquet")))
        assert on_disk == 4  # the killed batch's files are complete (renamed) but have no rows yet
        summary = run_campaign(prepare_campaign(campaign_from_data(CAMPAIGN)), store, InlineExecutor(root))
        assert (summary.skipped, summary.ran) == (2, 6)
        assert _results(store) == reference
        assert _counts(store) == (8, 8)  # no duplicate row or link
        assert store.damaged(reference) == {}
        files = {str(p.relative_to(root)) for p in (root / "episodes").rglob("*") if p.is_file()}
        assert files == {r.data_path for r in store.catalog.episodes(campaign="flush")}
