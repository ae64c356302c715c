"""One bad catalog row must not make the store unusable (issue 25).

An outcome ``bogus`` or broken JSON in a row used to crash ``run`` and ``results``;
now the row is left out and named, and a rerun forgets and re-runs that episode.
A full disk during a catalog write is one ``StoreError`` line, not a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import StoreError
from assay.store import Store

runner = CliRunner()
CAMPAIGN = "name: rows\nseed: 2\nepisodes: 3\nhorizon: 20\ntasks: [metaworld/reach@1]\npolicies: [random]\n"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    (tmp_path / "rows.yaml").write_text(CAMPAIGN)
    result = runner.invoke(app, ["run", str(tmp_path / "rows.yaml"), "--store", str(tmp_path / "store"), "-x", "inline"])
    assert result.exit_code == 0, result.output
    return tmp_path / "store"


def _damage(store: Path) -> list[str]:
    with sqlite3.connect(store / "catalog.sqlite") as db:
        keys = [k for (k,) in db.execute("SELECT key FROM episodes ORDER BY key")]
        db.execute("UPDATE episodes SET outcome = 'bogus' WHERE key = ?", (keys[0],))
        db.execute("UPDATE episodes SET policy_info_json = '{not json' WHERE key = ?", (keys[1],))
    return keys


@pytest.mark.sim
def test_results_leave_out_a_damaged_row_and_say_so(store):
    keys = _damage(store)
    result = runner.invoke(app, ["results", "--store", str(store), "--campaign", "rows", "--json"])
    assert result.exit_code == 0, result.output
    # Results read counts (issue 39): the row whose outcome is not one is left out and named; the row whose
    # policy_info is broken JSON still has a sound outcome, steps and return, and is counted.
    assert "1 damaged catalog row(s) left out" in result.output and keys[0][:12] in result.output
    document = json.loads(result.output[result.output.index("{"):])
    assert [row["episodes"] for row in document["results"]] == [2]
    with Store(store, create=False) as opened:
        assert [r.key for r in opened.catalog.episodes(campaign="rows")] == [keys[2]]
        assert set(opened.catalog.undecodable()) == set(keys[:2])
        with pytest.raises(StoreError, match="cannot be read: ValueError: 'bogus' is not a valid Outcome"):
            opened.catalog.episode(keys[0][:12])


@pytest.mark.sim
def test_a_rerun_forgets_and_reruns_the_damaged_rows(store, tmp_path):
    keys = _damage(store)
    with Store(store, create=False) as opened:
        before = {r.key: r.trajectory_hash for r in opened.catalog.episodes(campaign="rows")}
    result = runner.invoke(app, ["run", str(tmp_path / "rows.yaml"), "--store", str(store), "-x", "inline", "--json"])
    assert result.exit_code == 0, result.output
    assert '"repaired": 2' in result.output and '"ran": 2' in result.output
    with Store(store, create=False) as opened:
        records = opened.catalog.episodes(campaign="rows")
        assert sorted(r.key for r in records) == keys and not opened.catalog.undecodable()
        assert {r.key: r.trajectory_hash for r in records}[keys[2]] == before[keys[2]]


@pytest.mark.sim
def test_a_full_disk_during_a_catalog_write_is_one_store_error(store):
    with Store(store, create=False) as opened:
        record = opened.catalog.episodes(campaign="rows")[0]
        engine = opened.catalog.engine
        engine.dispose()

        @sa.event.listens_for(engine, "connect")
        def _no_room(dbapi_connection, _record):  # SQLite's own "database or disk is full"
            pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
            dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

        big = dataclasses.replace(record, key="f" * 24, policy_info={"blob": "x" * 200_000})
        with pytest.raises(StoreError) as raised:
            opened.catalog.add(big)
    message = str(raised.value)
    assert "\n" not in message and "full" in message and message.startswith("catalog sqlite:")
