"""`assay store verify` closes two bypasses (issue 39).

* A row without a step file used to be skipped: a row edited to ``outcome=success, data_path=NULL``
  passed. Only an ``error`` before the first step (0 steps, nothing to write) and a pruned episode
  (``assay store prune``) may lack one; any other such row is named.
* Results read the kept per-cell counts (``cell_counts``), which nothing compared with the rows: verify
  now counts the rows afresh (``aggregates.cell_totals(from_rows=True)``), names each cell that differs
  with the kept and the counted value of each field, and ``--recount`` counts them anew.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3

from typer.testing import CliRunner

from assay.cli.app import app
from assay.store import EpisodeRecord, Outcome, Store
from assay.store import aggregates as ag
from tests.aggregate_support import build
from tests.test_integrity import _run

runner = CliRunner()


def _verify(root, *extra: str):
    result = runner.invoke(app, ["store", "verify", "--store", str(root), "--json", *extra])
    return result.exit_code, json.loads(result.stdout)


def _setup_error(key: str) -> EpisodeRecord:
    """An episode whose environment failed to build: an error before its first step, no step file."""
    return EpisodeRecord(key=key, campaign="integrity", task_id="gymnasium/Pendulum-v1@1", task_hash="h",
                         variant_key="nominal", variant_name="nominal", variant={}, policy_name="random",
                         policy_version="1", policy_spec={"builtin": "random"}, seed=7, episode_index=99,
                         instruction="", outcome=Outcome.ERROR, reason="setup failed: no display", steps=0,
                         total_return=0.0, success_step=None, trajectory_hash="t", initial_conditions={},
                         timings={})


def test_a_row_without_a_step_file_is_named_unless_it_may_have_none(tmp_path):
    root = tmp_path / "store"
    _, records = _run(root)
    with Store(root) as store:
        store.record([_setup_error("e" * 24)])
    code, clean = _verify(root)
    assert code == 0, clean
    assert (clean["episodes"], clean["files"], clean["ok"], clean["without_steps"]) == (5, 4, 4, 1)
    lied, errored = sorted(records, key=lambda r: r.key)[:2]
    with sqlite3.connect(root / "catalog.sqlite") as db:  # edits behind Assay's back
        db.execute("UPDATE episodes SET outcome = 'success', data_path = NULL, data_sha256 = NULL WHERE key = ?",
                   (lied.key,))
        db.execute("UPDATE episodes SET outcome = 'error', data_path = NULL WHERE key = ?", (errored.key,))
    code, document = _verify(root)
    assert code == 1
    assert {p["key"]: p["problem"] for p in document["problems"]} == {
        lied.key: "no step file, yet the row records success after 20 steps (only an error before the first "
                  "step, or a pruned episode, has none)",
        errored.key: "no step file, yet the row records error after 20 steps (only an error before the first "
                       "step, or a pruned episode, has none)"}
    assert (document["files"], document["ok"], document["failed"], document["without_steps"]) == (2, 2, 2, 1)
    with Store(root) as store:
        assert set(store.damaged([r.key for r in records])) == {lied.key, errored.key}
    again, rerun = _run(root, verify_files=True)  # --verify-files re-runs both, from the same seeds
    assert (again.ran, again.repaired) == (2, 2)
    assert {r.key: (r.outcome, r.trajectory_hash) for r in rerun if r.key != "e" * 24} == \
        {r.key: (r.outcome, r.trajectory_hash) for r in records}


def test_kept_counts_that_differ_from_the_rows_are_named_and_recounted(tmp_path):
    root = tmp_path / "store"
    _run(root)
    code, clean = _verify(root)
    assert code == 0 and clean["counts"] == {"cells": 1, "recounted": False, "refused": False, "differ": [],
                                             "patterns_differ": []}
    with sqlite3.connect(root / "catalog.sqlite") as db:
        db.execute("UPDATE cell_counts SET successes = successes + 3, return_sum = return_sum * (1 + 1e-12)")
        [(timeouts,)] = db.execute("SELECT timeouts FROM cell_counts").fetchall()
    assert timeouts == 4  # a sum of returns off by 1e-12 of itself is a float summed in another order: not named
    code, document = _verify(root)
    assert code == 1 and document["problems"] == []  # every file is fine; the counts are not
    assert document["counts"]["differ"] == [{"campaign": "integrity", "policy": "random",
                                             "task": "gymnasium/Pendulum-v1@1", "variant": "nominal",
                                             "fields": {"successes": {"kept": 3.0, "counted": 0.0}}}]
    plain = runner.invoke(app, ["store", "verify", "--store", str(root)])
    assert plain.exit_code == 1
    assert "counts  integrity / random / gymnasium/Pendulum-v1@1 / nominal: successes kept 3, counted 0" in plain.output
    assert "cell counts: 1 cells, 1 differ; run `assay store verify --recount`" in plain.output.replace("\n", " ")
    code, recounted = _verify(root, "--recount")
    assert code == 0 and recounted["counts"]["recounted"] is True
    code, after = _verify(root)
    assert code == 0 and after["counts"]["differ"] == []


def test_count_differences_on_the_golden_store(tmp_path):
    with Store(tmp_path / "store") as store:
        records = build(store)
        assert ag.count_differences(store.catalog) == (len(ag.cell_totals(store.catalog)), [])
        # a failure of an odd seed (linked to "golden" only) turned into a success behind Assay's back
        victim = next(r for r in records if r.outcome is Outcome.FAILURE and r.seed % 2)
        before = next(t for t in ag.cell_totals(store.catalog, "golden")
                      if (t.policy, t.task, t.variant_key) == (victim.policy_name, victim.task_id, victim.variant_key))
    with sqlite3.connect(tmp_path / "store" / "catalog.sqlite") as db:
        db.execute("UPDATE episodes SET outcome = 'success' WHERE key = ?", (victim.key,))
        db.execute("UPDATE cell_counts SET return_squares = return_squares + 0.5 WHERE campaign = 'other' AND "
                   "policy_name = 'expert-again' AND task_id = 'metaworld/push@1' AND variant_key = 'nominal'")
    with Store(tmp_path / "store") as store:
        cells, found = ag.count_differences(store.catalog)
        squares = next(t.return_squares for t in ag.cell_totals(store.catalog, "other", from_rows=True)
                       if (t.policy, t.task, t.variant_key) == ("expert-again", "metaworld/push@1", "nominal"))
    assert cells == len(ag.cell_totals(store.catalog))
    assert [dataclasses.astuple(d) for d in found] == [
        ("golden", victim.policy_name, victim.task_id, victim.variant_name,
         {"successes": (before.successes, before.successes + 1), "failures": (before.failures, before.failures - 1)}),
        ("other", "expert-again", "metaworld/push@1", "nominal", {"return_squares": (squares + 0.5, squares)}),
    ]
    assert found[0].describe() == (f"golden / {victim.policy_name} / {victim.task_id} / {victim.variant_name}: "
                                   f"successes kept {before.successes}, counted {before.successes + 1}; "
                                   f"failures kept {before.failures}, counted {before.failures - 1}")
