"""Damaged step files are detected and re-run, never scored (issue 11, guarantee G1).

A resume reads no step file (issue 39): a missing file, or one of another size than its row records,
is re-run; a file damaged at the same size is found by hashing, `assay store verify` and
`assay run --verify-files`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from assay.errors import StoreError
from assay.metrics import rate_table
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import Outcome, Store
from tests.helpers import record_as_error

CAMPAIGN = {
    "name": "integrity",
    "seed": 3,
    "episodes": 4,
    "envs_per_worker": 2,
    "horizon": 20,
    "tasks": ["gymnasium/Pendulum-v1"],
    "policies": ["random"],
}


def _run(root: Path, data: dict = CAMPAIGN, retry_errors: bool = False, verify_files: bool = False):
    with Store(root) as store:
        summary = run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(root),
                               retry_errors=retry_errors, verify_files=verify_files)
        records = store.catalog.episodes(campaign=data["name"])
        return summary, records


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, same name: only the checksum can tell
    path.write_bytes(bytes(data))


def test_a_corrupted_and_a_truncated_file_are_rerun_with_identical_trajectories(tmp_path):
    root = tmp_path / "store"
    first, records = _run(root)
    assert first.ran == 4
    before = {r.key: r.trajectory_hash for r in records}
    corrupted, truncated = sorted(records, key=lambda r: r.key)[:2]
    _corrupt(root / corrupted.data_path)
    path = root / truncated.data_path
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    with Store(root) as store:  # the damage is what a reader would trip on
        with pytest.raises(StoreError, match="checksum"):
            store.steps(corrupted)
        assert store.damaged(before) == {corrupted.key: "checksum mismatch (corrupted or truncated)",
                                         truncated.key: "checksum mismatch (corrupted or truncated)"}

    # A plain resume reads no file: the truncated one is caught by its size, the flipped byte is not.
    second, _ = _run(root)
    assert (second.ran, second.skipped, second.repaired) == (1, 3, 1)
    with Store(root) as store:
        assert store.damaged(before) == {corrupted.key: "checksum mismatch (corrupted or truncated)"}
    # --verify-files hashes every file first, as `assay store verify` does, and re-runs what fails.
    third, again = _run(root, verify_files=True)
    assert (third.ran, third.skipped, third.repaired) == (1, 3, 1)
    assert {r.key: r.trajectory_hash for r in again} == before
    with Store(root) as store:
        assert store.damaged(before) == {}
        for record in again:
            store.steps(record)  # every file now matches its checksum
        with store.catalog.engine.connect() as conn:
            assert conn.execute(sa.text("select count(*) from episodes")).scalar() == 4
            assert conn.execute(sa.text("select count(*) from campaign_episodes")).scalar() == 4


def test_a_missing_file_is_rerun_and_the_damaged_episode_is_never_counted(tmp_path):
    root = tmp_path / "store"
    _, records = _run(root)
    victim = records[0]
    (root / victim.data_path).unlink()
    with Store(root) as store:
        # A second campaign shares the episode: forgetting it removes every campaign's link.
        store.catalog.link("other", [(victim.key, "random")])
        store.catalog.save_campaign("other", "x", {})
        with store.catalog.engine.begin() as conn:
            conn.execute(sa.text("create table failure_categories (key varchar(64) primary key, category text)"))
            conn.execute(sa.text("insert into failure_categories values (:k, 'stall')"), {"k": victim.key})
        store.catalog.register_forgotten("failure_categories")  # what assay.failures.table does on creating it
        assert store.damaged([r.key for r in records]) == {victim.key: "missing"}
        assert store.catalog.forget([victim.key]) == 1
        # Between forget and re-run, results count 3 episodes, not 4: the lost one is not scored.
        rows = rate_table(store.catalog.episodes(campaign="integrity"), by=("policy",))
        assert sum(r.episodes for r in rows) == 3
        assert store.catalog.episodes(campaign="other") == []
        with store.catalog.engine.connect() as conn:
            assert conn.execute(sa.text("select count(*) from failure_categories")).scalar() == 0
    summary, again = _run(root)
    assert (summary.ran, summary.repaired) == (1, 0)  # already forgotten above: a plain resume runs it
    assert sorted((r.key, r.trajectory_hash) for r in again) == sorted((r.key, r.trajectory_hash) for r in records)


def test_resume_repairs_through_the_cli_and_reports_it(tmp_path, write_campaign):
    path = write_campaign(json.dumps(CAMPAIGN))
    root = tmp_path / "store"
    command = [sys.executable, "-m", "assay.cli.app", "run", str(path), "--store", str(root),
               "--executor", "inline", "--json"]
    first = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    files = sorted((root / "episodes").rglob("*.parquet"))
    files[0].write_bytes(b"")
    second = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    assert (second["ran"], second["repaired"], second["skipped"]) == (1, 1, 3)
    # The same episodes give the same results; the return's sums were added in another order (the repaired
    # cell was counted anew from its rows), so they agree to rounding.
    assert [row.pop("group") for row in second["results"]] == [row.pop("group") for row in first["results"]]
    assert second["results"] == [pytest.approx(row) for row in first["results"]]


def test_retry_errors_reruns_error_episodes_only_when_asked(tmp_path):
    root = tmp_path / "store"
    _, records = _run(root)
    record_as_error(root, records[0])
    plain, kept = _run(root)
    assert plain.ran == 0 and sum(r.outcome is Outcome.ERROR for r in kept) == 1
    retried, fixed = _run(root, retry_errors=True)
    assert (retried.ran, retried.retried) == (1, 1)
    assert sorted((r.key, r.trajectory_hash, r.outcome) for r in fixed) == sorted(
        (r.key, r.trajectory_hash, r.outcome) for r in records)

