"""A store that checks itself: step files validated against their catalog rows on read and on
resume, `assay store verify`, the store's own catalog remembered, self-describing Parquet files,
and `assay episodes replay`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import StoreError
from assay.store import Store
from assay.store.catalog import episodes as episodes_table
from assay.store.store import public_catalog_url
from tests.test_integrity import _run


def _rewrite(store_root: Path, record, table: pa.Table) -> None:
    """Replace an episode's file and update its checksum, as a careless tool (or an attacker) would."""
    path = store_root / record.data_path
    pq.write_table(table, path)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    with Store(store_root) as store, store.catalog.engine.begin() as conn:
        conn.execute(episodes_table.update().where(episodes_table.c.key == record.key).values(data_sha256=sha))


def _tamper(root: Path, records) -> dict[str, str]:
    """Four files, each wrong in one way the checksum cannot see; returns key -> the expected problem."""
    with Store(root) as store:
        tables = {r.key: store.steps(r) for r in records}
    version, key, columns, rows = sorted(records, key=lambda r: r.key)
    meta = dict(tables[version.key].schema.metadata)
    _rewrite(root, version, tables[version.key].replace_schema_metadata({**meta, b"schema_version": b"99"}))
    meta = dict(tables[key.key].schema.metadata)
    _rewrite(root, key, tables[key.key].replace_schema_metadata({**meta, b"episode_key": b"0" * 24}))
    _rewrite(root, columns, tables[columns.key].drop_columns(["action", "reward"]))
    _rewrite(root, rows, tables[rows.key].slice(0, 10))
    return {version.key: "schema_version 99, expected 1",
            key.key: f"episode_key {'0' * 24} is not the catalog's {key.key}",
            columns.key: "missing required column(s) action, reward",
            rows.key: "10 rows, the catalog records 20 steps"}


def test_files_that_do_not_match_their_catalog_row_are_refused_and_rerun(tmp_path):
    root = tmp_path / "store"
    first, records = _run(root)
    before = {r.key: (r.trajectory_hash, r.steps) for r in records}
    expected = _tamper(root, records)
    with Store(root) as store:
        assert store.damaged(before) == expected
        for record in store.catalog.episodes(campaign="integrity"):  # the rows with the updated checksums
            with pytest.raises(StoreError, match="does not match its catalog row"):
                store.steps(record)
    second, again = _run(root, verify_files=True)
    assert (second.ran, second.repaired) == (4, 4)
    assert {r.key: (r.trajectory_hash, r.steps) for r in again} == before
    with Store(root) as store:
        assert store.damaged(before) == {}


def test_store_verify_lists_every_untrustworthy_file(tmp_path):
    root = tmp_path / "store"
    _, records = _run(root)
    runner = CliRunner()
    clean = runner.invoke(app, ["store", "verify", "--store", str(root)])
    assert clean.exit_code == 0 and f"4 step files checked in {root.resolve()} (4 episodes): 4 ok, 0 failed" \
        in clean.output.replace("\n", "")
    expected = _tamper(root, records[:4])
    result = runner.invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert (document["ok"], document["failed"]) == (0, 4)
    assert {p["key"]: p["problem"] for p in document["problems"]} == expected


def test_the_store_refuses_another_catalog_unless_told(tmp_path):
    root = tmp_path / "store"
    _run(root)
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    with pytest.raises(StoreError, match=r"indexed by the catalog sqlite \(catalog.sqlite in the store\), not "
                                         r"sqlite:///.*other.sqlite: omit --catalog, or pass --new-catalog"):
        Store(root, other)
    with Store(root, other, new_catalog=True):
        pass
    assert json.loads((root / "store.json").read_text())["catalog"] == other
    with pytest.raises(StoreError, match=r"indexed by the catalog sqlite:///.*other.sqlite, not sqlite \(catalog"):
        Store(root)  # the rerun that forgot --catalog
    result = CliRunner().invoke(app, ["episodes", "ls", "--store", str(root)])
    assert result.exit_code == 2 and "pass --catalog sqlite:///" in result.output


def test_the_recorded_catalog_url_has_no_password():
    assert public_catalog_url("postgresql+psycopg://eval:s3cret@db.lab:5432/assay") == \
        "postgresql+psycopg://eval@db.lab:5432/assay"
    assert public_catalog_url(None) == "sqlite (catalog.sqlite in the store)"


def test_a_step_file_names_its_episode_without_the_catalog(tmp_path):
    root = tmp_path / "store"
    _, records = _run(root)
    record = records[0]
    meta = {k.decode(): v.decode() for k, v in pq.read_schema(root / record.data_path).metadata.items()}
    assert meta["episode_key"] == record.key and meta["seed"] == str(record.seed)
    assert meta["instruction"] == record.instruction and meta["task_id"] == "gymnasium/Pendulum-v1@1"
    policy = json.loads(meta["policy"])
    assert (policy["name"], policy["version"]) == (record.policy_name, record.policy_version)
    assert policy["spec"] == record.policy_spec


def test_episodes_replay_resimulates_and_finds_the_first_difference(tmp_path):
    root = tmp_path / "store"
    _, records = _run(root)
    record = records[0]
    runner = CliRunner()
    same = runner.invoke(app, ["episodes", "replay", record.key[:10], "--store", str(root)])
    assert same.exit_code == 0, same.output
    assert f"episode {record.key[:12]}: 20 steps replayed, every state and reward identical" in same.output
    with Store(root) as store:
        table = store.steps(record)
    rewards = table.column("reward").to_numpy().copy()
    rewards[7] += 1e-9
    index = table.column_names.index("reward")
    _rewrite(root, record, table.set_column(index, "reward", pa.array(rewards)))
    result = runner.invoke(app, ["episodes", "replay", record.key, "--store", str(root), "--json"])
    assert result.exit_code == 1, result.output
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["identical"] is False and document["first_difference"]["step"] == 7
    assert document["first_difference"]["what"].startswith("reward ")



def _edit_row(root: Path, key: str, **values) -> None:
    """Change a catalog row behind the store's back, as a careless script (or an attacker) would."""
    with Store(root) as store, store.catalog.engine.begin() as conn:
        conn.execute(episodes_table.update().where(episodes_table.c.key == key).values(**values))


SEAL_EDITS = [  # (field edited in the catalog row, new value, the problem store verify names)
    ("outcome", "success", "sealed outcome timeout in the step file, success in the catalog row"),
    ("total_return", 1e9, "sealed total_return {ret!r} in the step file, 1000000000.0 in the catalog row"),
    ("success_step", 3, "sealed success_step none in the step file, 3 in the catalog row"),
    ("steps", 19, "20 rows, the catalog records 19 steps"),
]


def test_each_edited_summary_field_is_caught_by_store_verify_and_by_replay(tmp_path):
    """Issue 36: the step file seals the episode's outcome, steps, total return and success step; a catalog
    row changed afterwards is named by `store verify`, by `episodes replay` and re-run by `run --verify-files`."""
    root = tmp_path / "store"
    _, records = _run(root)
    records = sorted(records, key=lambda r: r.key)
    meta = {k.decode(): v.decode() for k, v in pq.read_schema(root / records[0].data_path).metadata.items()}
    assert (meta["outcome"], meta["steps"], meta["success_step"]) == ("timeout", "20", "")
    assert float(meta["total_return"]) == records[0].total_return  # repr: exact
    expected = {}
    for record, (column, value, problem) in zip(records, SEAL_EDITS, strict=False):
        _edit_row(root, record.key, **{column: value})
        expected[record.key] = problem.format(ret=record.total_return)
    runner = CliRunner()
    result = runner.invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    found = {p["key"]: p["problem"] for p in document["problems"]}
    assert {k: v.split(" (")[0] for k, v in found.items()} == expected
    assert (document["ok"], document["failed"], document["unsealed"]) == (0, 4, 0)
    # the replay names what the catalog row claims and the simulation does not
    replayed = runner.invoke(app, ["episodes", "replay", records[0].key, "--store", str(root), "--json"])
    assert replayed.exit_code == 1, replayed.output
    answer = json.loads(replayed.stdout)
    assert answer["first_difference"] is None  # the step file is intact; the row lies
    assert answer["summary_differences"] == [{"field": "outcome", "recorded": "success", "replayed": "timeout"}]
    assert answer["seal_problem"].startswith(expected[records[0].key])
    plain = runner.invoke(app, ["episodes", "replay", records[1].key, "--store", str(root)])
    assert plain.exit_code == 1
    assert f"total_return {records[1].total_return!r} in the replay, 1000000000.0 in the catalog row" in plain.output
    with Store(root) as store, pytest.raises(StoreError, match="sealed success_step none in the step file"):
        store.steps(store.catalog.episode(records[2].key))
    # a plain resume reads no step file (issue 39), but re-runs what `store verify` found and kept (issue 50)
    second, again = _run(root)
    assert (second.ran, second.repaired) == (4, 4)
    assert {r.key: (r.outcome.value, r.total_return, r.success_step) for r in again} == \
        {r.key: (r.outcome.value, r.total_return, r.success_step) for r in records}


@pytest.mark.sim
def test_a_file_without_a_seal_fails_in_a_sealed_store_and_is_counted_in_a_legacy_one(tmp_path):
    """Issue 50: "legacy" is the store's property (``store_meta.seal_version``), not a row's."""
    root = tmp_path / "store"
    _, records = _run(root)
    with Store(root) as store:
        table = store.steps(records[0])
    meta = {k: v for k, v in table.schema.metadata.items()
            if k.decode() not in ("outcome", "steps", "total_return", "success_step")}
    _rewrite(root, records[0], table.replace_schema_metadata(meta))
    result = CliRunner().invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert result.exit_code == 1, result.output  # a store made by this Assay seals every file
    document = json.loads(result.stdout)
    assert (document["ok"], document["failed"], document["sealed_store"]) == (3, 1, True)
    assert document["problems"][0]["problem"].startswith("no seal in the step file")
    with Store(root) as store, store.catalog.engine.begin() as conn:  # a catalog from before the marker
        conn.exec_driver_sql("DELETE FROM store_meta WHERE name = 'seal_version'")
    with Store(root) as store:
        assert store.catalog.meta("seal_version") == "0"  # it names step files: legacy, written once
    result = CliRunner().invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["ok"], document["unsealed"], document["sealed_store"]) == (4, 1, False)
