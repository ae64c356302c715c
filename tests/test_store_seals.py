"""Seals that hold (issue 50): `store verify` recomputes every summary from the step data, a NULL checksum is a
failure, "legacy" is the store's property, `--recount` never blesses a row its steps contradict, and `results`
refuses a campaign until what `verify` found is repaired.

The three forgeries of the issue, on a real store (Pendulum, 4 timeouts of 20 steps):

* **laundered**: one seal key stripped from the step file, its checksum recomputed, the row's outcome set to
  success (the row then looked like a file from before seals, and `--recount` blessed it);
* **unhashed**: the row's checksum set to NULL and a byte of its file flipped (the hash was skipped: "ok");
* **consistent**: the row, the file's seal and the checksum all rewritten to success (only the steps tell).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.run.closed_loop import outcome_after
from assay.sim import Transition
from assay.spec import SuccessMode, TaskSpec
from assay.store import Store
from assay.store import aggregates as ag
from assay.store.catalog import episodes as episodes_table
from assay.store.summaries import StepFacts, TaskRule, ended_at
from tests.test_integrity import _run

runner = CliRunner()


def _edit_row(root: Path, key: str, **values) -> None:
    with Store(root) as store, store.catalog.engine.begin() as conn:
        conn.execute(episodes_table.update().where(episodes_table.c.key == key).values(**values))


def _rewrite_metadata(root: Path, record, changes: dict[bytes, bytes | None]) -> None:
    """Rewrite an episode's file with its metadata changed (None: removed) and its checksum and size recomputed, as
    an attacker with write access to the store would."""
    path = root / record.data_path
    table = pq.read_table(path)
    meta = {k: v for k, v in {**table.schema.metadata, **changes}.items() if v is not None}
    pq.write_table(table.replace_schema_metadata(meta), path)
    _edit_row(root, record.key, data_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
              data_bytes=path.stat().st_size)


def _flip(path: Path, at: int = 8) -> None:
    """Flip one byte of a file's first data page (past the magic ``PAR1``): the footer still parses, so only a hash
    (or reading the data) can tell."""
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def _forge(root: Path, records) -> dict[str, str]:
    """The three forgeries; key -> what `store verify` must say of each (the start of its problem)."""
    laundered, unhashed, consistent = sorted(records, key=lambda r: r.key)[:3]
    _rewrite_metadata(root, laundered, {b"outcome": None})
    _edit_row(root, laundered.key, outcome="success")
    _edit_row(root, unhashed.key, data_sha256=None)
    _flip(root / unhashed.data_path)
    _rewrite_metadata(root, consistent, {b"outcome": b"success"})
    _edit_row(root, consistent.key, outcome="success")
    return {laundered.key: "no seal in the step file",
            unhashed.key: "no checksum in the catalog row",
            consistent.key: "the step data ends the episode in timeout at its last step, the catalog row records "
                            "success"}


def _verify(root: Path, *extra: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["store", "verify", "--store", str(root), "--json", *extra])
    return result.exit_code, json.loads(result.stdout)


def _results(root: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["results", "--store", str(root), "--campaign", "integrity", "--json"])
    return result.exit_code, result.output


def test_the_three_forgeries_fail_verify_and_results_refuse_the_campaign_until_repaired(tmp_path):
    root = tmp_path / "store"
    _, records = _run(root)
    honest = {r.key: (r.outcome.value, r.total_return, r.success_step) for r in records}
    assert {o for o, _, _ in honest.values()} == {"timeout"}
    expected = _forge(root, records)
    code, document = _verify(root)
    assert code == 1
    found = {p["key"]: p["problem"] for p in document["problems"]}
    assert set(found) == set(expected) and all(found[k].startswith(v) for k, v in expected.items()), found
    assert (document["ok"], document["failed"], document["sealed_store"]) == (1, 3, True)
    # --recount never blesses them: the kept counts still say 4 timeouts, and verify still fails
    code, document = _verify(root, "--recount")
    assert code == 1 and document["counts"]["refused"] and not document["counts"]["recounted"]
    with Store(root) as store:
        assert [(t.successes, t.timeouts) for t in ag.cell_totals(store.catalog, "integrity")] == [(0, 4)]
        assert store.failed_checks(campaign="integrity") == {k: found[k] for k in expected}
    code, output = _results(root)
    assert code == 2 and "3 of its episodes failed `assay store verify`" in output and "refused" in output
    assert len([line for line in output.splitlines() if line.startswith("error: ")]) == 1
    report = runner.invoke(app, ["report", "integrity", "--store", str(root), "-o", str(tmp_path / "r.html")])
    assert report.exit_code == 2 and "failed `assay store verify`" in report.output, report.output
    # the repair: a plain rerun re-runs what verify found; then verify passes and results read again
    summary, again = _run(root)
    assert (summary.ran, summary.repaired) == (3, 3)
    assert {r.key: (r.outcome.value, r.total_return, r.success_step) for r in again} == honest
    code, document = _verify(root)
    assert code == 0 and document["failed"] == 0, document
    code, output = _results(root)
    assert code == 0, output
    assert json.loads(output)["results"][0]["successes"] == 0


def test_each_summary_field_is_recomputed_from_the_steps_even_in_a_legacy_store(tmp_path):
    """With the seal rewritten to match and the checksum recomputed, only the step data contradicts the row; and a
    legacy store (files without seals allowed) still recomputes every summary."""
    root = tmp_path / "store"
    _, records = _run(root)
    records = sorted(records, key=lambda r: r.key)
    forged = {  # field: (new value, the start of the problem named)
        "total_return": (1e9, "the step data's rewards sum to"),
        "success_step": (3, "the step data's first success is at step none, the catalog row records success_step 3"),
        "outcome": ("failure", "the step data ends the episode in timeout at its last step, the catalog row records "
                               "failure"),
        "trajectory_hash": ("0" * 32, "the step data's states, actions and rewards do not hash"),
    }
    for record, (field, (value, _)) in zip(records, forged.items(), strict=True):
        seal = {b"outcome": b"failure"} if field == "outcome" else \
            {b"total_return": repr(value).encode()} if field == "total_return" else \
            {b"success_step": b"3"} if field == "success_step" else {}
        _rewrite_metadata(root, record, seal)
        _edit_row(root, record.key, **{field: value})
    with Store(root) as store, store.catalog.engine.begin() as conn:  # a store from before the seal marker
        conn.exec_driver_sql("DELETE FROM store_meta WHERE name = 'seal_version'")
    code, document = _verify(root)
    assert code == 1 and not document["sealed_store"]
    found = {p["key"]: p["problem"] for p in document["problems"]}
    for record, (_, problem) in zip(records, forged.values(), strict=True):
        assert found[record.key].startswith(problem), found[record.key]


def test_a_legacy_store_whose_files_are_all_sealed_becomes_sealed_and_stays_so(tmp_path):
    root = tmp_path / "store"
    _run(root)
    with Store(root) as store, store.catalog.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM store_meta WHERE name = 'seal_version'")
    with Store(root) as store:
        assert store.catalog.meta("seal_version") == "0"
    code, document = _verify(root)
    assert code == 0 and document["sealed_store"]
    with Store(root) as store:
        assert store.catalog.meta("seal_version") == "1"


def test_a_reader_refuses_a_row_without_a_checksum(tmp_path):
    from assay.errors import StoreError

    root = tmp_path / "store"
    _, records = _run(root)
    _edit_row(root, records[0].key, data_sha256=None)
    with Store(root) as store, pytest.raises(StoreError, match="no checksum in the row"):
        store.steps(store.catalog.episode(records[0].key))


# -- the outcome rule restated below the run layer equals the rollout's ---------------------------------------------

def _task(horizon: int, success: SuccessMode) -> TaskSpec:
    return TaskSpec.model_validate({"name": "toy/reach", "version": 1, "backend": "toy", "env_name": "r",
                                    "instructions": ["reach"], "horizon": horizon, "control_hz": 10, "state_dim": 1,
                                    "action": {"dim": 1}, "success": success.value})


def _rollout_end(task: TaskSpec, flags: list[tuple[bool, bool, bool]]) -> tuple[int, str] | None:
    for step, (success, terminated, truncated) in enumerate(flags, start=1):
        outcome = outcome_after(task, Transition({}, 0.0, terminated, truncated, success), step)
        if outcome is not None:
            return step - 1, outcome.value
    return None


def test_the_restated_outcome_rule_equals_the_rollouts_on_every_short_episode():
    cases = 0
    for mode, horizon, rows in itertools.product(list(SuccessMode), (1, 2, 3, 5), (1, 2, 3)):
        task = _task(horizon, mode)
        for flags in itertools.product(itertools.product((False, True), repeat=3), repeat=rows):
            success, terminated, truncated = (np.array([f[i] for f in flags]) for i in range(3))
            facts = StepFacts(rows, 0.0, None, success, terminated, truncated, hashlib.sha256())
            assert ended_at(facts, TaskRule(horizon, mode)) == _rollout_end(task, list(flags)), (mode, horizon, flags)
            cases += 1
    assert cases == 3 * 4 * (8 + 64 + 512)
