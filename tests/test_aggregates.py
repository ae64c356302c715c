"""Results from counts equal results from rows (issue 39): the database's GROUP BY against the row-based path.

``assay results``, ``compare``, ``leaderboard``, the report and the dashboard read per-cell counts
and per-seed patterns computed by the database (``assay.store.aggregates``, kept per cell in
``cell_counts``) instead of decoding every row. On a golden store with errors, partial and empty
cells, variants, a second campaign sharing episodes, renderers, safety counts and a router, every
result equals the one computed from the decoded rows (``tests/aggregate_support.py``).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.store import Store
from assay.store import aggregates as ag
from tests.aggregate_support import build, check_store, close


def test_counts_equal_rows_on_the_golden_store(tmp_path):
    with Store(tmp_path / "store") as store:
        build(store)
        check_store(store)
        check_store(store, "other")


def test_kept_counts_follow_forgetting_and_a_hand_edited_row_is_recounted(tmp_path):
    with Store(tmp_path / "store") as store:
        records = build(store)
        victims = [r.key for r in records[:5]]
        store.forget(victims)
        check_store(store)  # forgetting recounts the cells those episodes were in, for both campaigns
        check_store(store, "other")
        assert sum(t.episodes for t in ag.cell_totals(store.catalog, "golden")) == len(records) - 5
    key = records[10].key
    with sqlite3.connect(tmp_path / "store" / "catalog.sqlite") as db:  # an edit behind Assay's back
        db.execute("UPDATE episodes SET outcome = 'success' WHERE key = ?", (key,))
    with Store(tmp_path / "store") as store:
        store.forget([key])  # its cell is recounted from the rows that remain, not from what the edit says
        check_store(store)
        store.catalog.rebuild_counts()
        check_store(store)


def test_a_catalog_from_before_the_counts_is_counted_on_open(tmp_path):
    with Store(tmp_path / "store") as store:
        build(store)
        before = ag.cell_totals(store.catalog, "golden")
    with sqlite3.connect(tmp_path / "store" / "catalog.sqlite") as db:
        db.execute("DROP TABLE cell_counts")
        db.execute("DROP INDEX ix_episodes_facts")
        db.execute("DELETE FROM store_meta WHERE name = 'cell_counts'")
    with Store(tmp_path / "store") as store:
        after = ag.cell_totals(store.catalog, "golden")
        assert close([dataclasses.asdict(t) for t in after], [dataclasses.asdict(t) for t in before])
        check_store(store)


def test_two_episodes_of_one_policy_on_one_seed_are_refused_as_before(tmp_path):
    from assay.errors import AssayError
    from assay.metrics import outcome_grid, stored_grid

    with Store(tmp_path / "store") as store:
        records = build(store)
        twin = dataclasses.replace(records[0], key="another-key")  # same policy, task, variant and seed
        store.record([twin])
        totals = ag.cell_totals(store.catalog, "golden")
        with pytest.raises(AssayError, match="two episodes of one policy"):
            stored_grid(store.catalog, "golden", totals)
        with pytest.raises(AssayError, match="two episodes of one policy"):
            outcome_grid(store.catalog.episodes(campaign="golden"))
        with pytest.raises(AssayError, match="no episodes to analyse"):
            stored_grid(store.catalog, "golden", [])


def test_results_json_is_the_same_whichever_way_it_is_counted(tmp_path, monkeypatch):
    """The CLI end to end: `assay results --json` from the kept counts, and from the rows themselves."""
    with Store(tmp_path / "store") as store:
        build(store)
    runner = CliRunner()
    args = ["results", "--store", str(tmp_path / "store"), "--campaign", "golden", "--variant", "all",
            "--allow-partial", "--pass-k", "2", "--json"]
    kept = runner.invoke(app, args)
    assert kept.exit_code == 0, kept.output
    original = ag.cell_totals
    monkeypatch.setattr(ag, "cell_totals", lambda catalog, campaign=None, from_rows=False:
                        original(catalog, campaign, from_rows=True))
    import assay.cli.scoring as scoring

    monkeypatch.setattr(scoring, "cell_totals", ag.cell_totals)
    counted = runner.invoke(app, args)
    assert counted.exit_code == 0, counted.output
    one, other = json.loads(kept.output), json.loads(counted.output)
    assert close(one["results"], other["results"])
    assert one["leaderboard"] == other["leaderboard"] and one["pass_k"] == other["pass_k"]
    assert one["completeness"] == other["completeness"] and one["safety"] == other["safety"]
