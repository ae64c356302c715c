"""A catalog write that SQLite refuses as busy ("database is locked") is rolled back whole and run again.

Seen once: an interrupted ``assay sweep`` on a loaded machine ended "add_many failed: OperationalError: database is
locked" (exit 2 instead of 130), despite the catalog's 30 s busy timeout; its cause was not reproduced here. SQLite
also returns the error at once, without waiting, to a WAL transaction whose read snapshot is older than another
connection's commit (the first test shows it). A write the catalog retries is safe to run again: the failed attempt
left nothing.
"""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

from assay.store import Catalog, EpisodeRecord, Outcome
from assay.store import catalog as catalog_module


def _record(key: str) -> EpisodeRecord:
    return EpisodeRecord(key=key, campaign="c", task_id="metaworld/reach@1", task_hash="h" * 16, variant_key="v",
                         variant_name="nominal", variant={}, policy_name="p", policy_version="1",
                         policy_spec={"builtin": "expert"}, seed=1, episode_index=0, instruction="reach",
                         outcome=Outcome.SUCCESS, reason="", steps=3, total_return=1.5, success_step=2,
                         trajectory_hash="t" * 32)


def test_sqlite_refuses_a_stale_snapshot_s_write_at_once_whatever_the_busy_timeout(tmp_path):
    path = tmp_path / "wal.sqlite"
    with sqlite3.connect(path) as setup:
        setup.execute("PRAGMA journal_mode=WAL")
        setup.execute("CREATE TABLE t (x INTEGER)")
    mine = sqlite3.connect(path, isolation_level=None)
    mine.execute("PRAGMA busy_timeout=30000")
    mine.execute("BEGIN")
    mine.execute("SELECT count(*) FROM t").fetchone()  # the transaction's snapshot
    with sqlite3.connect(path) as other:
        other.execute("INSERT INTO t VALUES (1)")  # committed after that snapshot
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        mine.execute("INSERT INTO t VALUES (2)")
    mine.execute("ROLLBACK")
    mine.close()


def test_add_many_refused_as_busy_is_run_again_and_stores_every_row_once(tmp_path, monkeypatch):
    catalog = Catalog(f"sqlite:///{tmp_path / 'catalog.sqlite'}")
    catalog.add_many([_record("k0")])
    real_insert, refused = catalog_module.insert_rows, []

    def busy_once(conn, table, rows, *args, **kwargs):
        written = real_insert(conn, table, rows, *args, **kwargs)  # the first attempt's rows: rolled back below
        if table is catalog_module.episodes and not refused:
            refused.append(True)
            raise sa.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked"))
        return written

    monkeypatch.setattr(catalog_module, "insert_rows", busy_once)
    assert catalog.add_many([_record("k1"), _record("k2"), _record("k0")]) == 2  # k0 was there already
    assert refused == [True]
    assert sorted(r.key for r in catalog.episodes(campaign="c")) == ["k0", "k1", "k2"]


def test_only_sqlite_busy_is_retried_as_one():
    locked = sa.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked"))
    full = sa.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full"))
    assert catalog_module.sqlite_busy(locked) and not catalog_module.sqlite_busy(full)
    assert not catalog_module.sqlite_busy(ValueError("database is locked"))
