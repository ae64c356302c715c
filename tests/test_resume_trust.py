"""A resume trusts the catalog and reads no step file (issue 39).

Every `assay run` used to read and hash every finished episode's file before its first job
(1.4 ms an episode: ~23 minutes at 1 M episodes, 1 M GETs on object storage). Now a resume
checks the row as the database sees it and each file's existence and size from the data
root's metadata; hashing is `assay store verify`'s and `assay run --verify-files`'s job.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from assay.store import Store
from assay.store.roots import LISTED, FsspecRoot, LocalRoot
from tests.test_integrity import _run


def _no_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any read of a step file (DataRoot.read, DataRoot.sha256) fails the test; the store's marker may be read."""
    for kind in (LocalRoot, FsspecRoot):
        for name in ("read", "sha256"):
            original = getattr(kind, name)

            def refuse(self: object, relpath: str, original: object = original) -> object:
                if relpath.startswith("episodes/"):
                    raise AssertionError(f"a resume read the step file {relpath}")
                return original(self, relpath)  # type: ignore[operator]

            monkeypatch.setattr(kind, name, refuse)


def test_the_resume_plan_reads_no_step_file_and_still_finds_missing_and_resized_files(tmp_path, monkeypatch):
    root = tmp_path / "store"
    _, records = _run(root)
    records = sorted(records, key=lambda r: r.key)
    assert all(r.data_bytes == (root / r.data_path).stat().st_size for r in records)
    missing, truncated, grown, intact = records
    (root / missing.data_path).unlink()
    path = root / truncated.data_path
    path.write_bytes(path.read_bytes()[:-1])
    path = root / grown.data_path
    path.write_bytes(path.read_bytes() + b"\0")
    _no_reads(monkeypatch)
    with Store(root) as store:
        plan = store.resume_plan([r.key for r in records])
    assert plan.done == {intact.key}
    assert plan.damaged == {missing.key, truncated.key, grown.key}
    with Store(root) as store:
        rows = store.catalog.resume_rows([r.key for r in records])
        assert store.untrusted(rows) == {
            missing.key: "missing",
            truncated.key: f"{truncated.data_bytes - 1} bytes, the catalog records {truncated.data_bytes} "
                           "(truncated or replaced)",
            grown.key: f"{grown.data_bytes + 1} bytes, the catalog records {grown.data_bytes} (truncated or replaced)"}
    monkeypatch.undo()
    second, again = _run(root)
    assert (second.ran, second.skipped, second.repaired) == (3, 1, 3)
    assert {r.key: r.trajectory_hash for r in again} == {r.key: r.trajectory_hash for r in records}


def test_a_catalog_from_before_sizes_gains_the_column_and_its_rows_are_checked_for_existence(tmp_path):
    root = tmp_path / "store"
    _, records = _run(root)
    with sqlite3.connect(root / "catalog.sqlite") as db:
        db.execute("DROP INDEX ix_episodes_resume")  # an index on the column (issue 51), which such a catalog lacks
        db.execute("ALTER TABLE episodes DROP COLUMN data_bytes")  # what a catalog made before issue 39 holds
    with Store(root) as store:
        with store.catalog.engine.connect() as conn:
            columns = [row[1] for row in conn.exec_driver_sql("PRAGMA table_info(episodes)")]
        assert "data_bytes" in columns
        old = store.catalog.episodes(campaign="integrity")
        assert {r.data_bytes for r in old} == {None}
        victim, shortened = sorted(old, key=lambda r: r.key)[:2]
        (root / victim.data_path).unlink()
        path = root / shortened.data_path
        path.write_bytes(path.read_bytes()[:-1])
        plan = store.resume_plan([r.key for r in old])
    assert plan.damaged == {victim.key}  # no recorded size: the shortened file is found by verify, not here
    assert shortened.key in plan.done


def test_unsound_rows_are_found_by_the_database_without_decoding(tmp_path):
    root = tmp_path / "store"
    _, records = _run(root)
    keys = sorted(r.key for r in records)
    with sqlite3.connect(root / "catalog.sqlite") as db:
        db.execute("UPDATE episodes SET outcome = 'bogus' WHERE key = ?", (keys[0],))
        db.execute("UPDATE episodes SET provenance_json = '{\"cut' WHERE key = ?", (keys[1],))
    with Store(root) as store:
        rows = store.catalog.resume_rows(keys)
    assert rows[keys[0]].problem == "outcome 'bogus' is not one of success, failure, timeout, error"
    assert rows[keys[1]].problem == "provenance_json is not JSON"
    assert rows[keys[2]].problem is None
    assert rows[keys[2]].outcome == {r.key: r.outcome.value for r in records}[keys[2]]


@pytest.mark.parametrize("count", [3, LISTED + 4])
def test_sizes_through_fsspec_ask_per_file_or_list_the_folder(tmp_path: Path, count: int):
    local = LocalRoot(tmp_path)
    written = {f"episodes/ab/{i:04d}.parquet": b"x" * (i + 1) for i in range(count)}
    for relpath, data in written.items():
        local.write(relpath, data)
    asked = [*written, "episodes/ab/none.parquet", "episodes/zz/none.parquet"]
    expected = {relpath: len(data) for relpath, data in written.items()} | {asked[-2]: None, asked[-1]: None}
    assert local.sizes(asked) == expected
    assert FsspecRoot(f"file://{tmp_path}").sizes(asked) == expected
