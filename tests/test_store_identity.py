"""One store per catalog and per data root (issue 36): a store ID in the catalog, store.json and the
data root's marker; a second store on either is refused in one line, and the first stays intact."""

from __future__ import annotations

import fcntl
import json
import os
import threading

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import StoreError
from assay.store import Store
from assay.store.identity import MARKER
from assay.store.locking import LOCK_NAME
from tests.test_integrity import CAMPAIGN


@pytest.fixture
def campaign(write_campaign):
    return write_campaign(json.dumps(CAMPAIGN))


def _run(campaign, store, *extra: str):
    return CliRunner().invoke(app, ["run", str(campaign), "--store", str(store), "--executor", "inline", *extra])


def _verify(store, *extra: str) -> dict:
    result = CliRunner().invoke(app, ["store", "verify", "--store", str(store), "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_the_store_id_is_in_the_catalog_store_json_and_the_data_roots_marker(tmp_path, campaign):
    data = tmp_path / "data"
    assert _run(campaign, tmp_path / "a", "--data", str(data)).exit_code == 0
    with Store(tmp_path / "a", create=False) as store:
        store_id = store.store_id
        assert store_id and store.catalog.meta("store_id") == store_id
        assert store.catalog.meta("store_root") == str((tmp_path / "a").resolve())
    assert json.loads((tmp_path / "a" / "store.json").read_text())["store_id"] == store_id
    assert json.loads((data / MARKER).read_text()) == {"store_id": store_id, "store": str((tmp_path / "a").resolve())}


def test_a_second_store_on_one_data_root_is_refused_and_the_first_is_intact(tmp_path, campaign):
    data = tmp_path / "data"
    assert _run(campaign, tmp_path / "a", "--data", str(data)).exit_code == 0
    before = sorted(p.read_bytes() for p in (data / "episodes").rglob("*.parquet"))
    line = _one_line_error(_run(campaign, tmp_path / "b", "--data", str(data)))
    assert f"the data root {data} belongs to the store at {(tmp_path / 'a').resolve()}" in line
    assert f"give {(tmp_path / 'b').resolve()} its own --data" in line
    assert sorted(p.read_bytes() for p in (data / "episodes").rglob("*.parquet")) == before
    assert (_verify(tmp_path / "a")["ok"], _verify(tmp_path / "a")["failed"]) == (4, 0)
    # the refused store was not bound to that data root: it can still be given its own
    assert _run(campaign, tmp_path / "b", "--data", str(tmp_path / "data-b")).exit_code == 0
    assert _verify(tmp_path / "b")["ok"] == 4


def test_a_second_store_directory_on_one_catalog_is_refused_and_the_first_is_intact(tmp_path, campaign):
    catalog = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    assert _run(campaign, tmp_path / "a", "--catalog", catalog).exit_code == 0
    line = _one_line_error(_run(campaign, tmp_path / "b", "--catalog", catalog))
    assert f"the catalog {catalog} already indexes the store at {(tmp_path / 'a').resolve()}" in line
    assert f"use --store {(tmp_path / 'a').resolve()}, or give {(tmp_path / 'b').resolve()} its own catalog" in line
    assert not (tmp_path / "b" / "episodes").exists() and not (tmp_path / "b" / "store.json").exists()
    assert _verify(tmp_path / "a", "--catalog", catalog)["ok"] == 4
    # a store directory that has an ID of its own is refused too, with both IDs named
    assert _run(campaign, tmp_path / "c").exit_code == 0
    line = _one_line_error(_run(campaign, tmp_path / "c", "--catalog", catalog, "--new-catalog"))
    assert f"the catalog {catalog} belongs to another store" in line


def test_a_moved_store_keeps_its_identity_and_a_store_from_before_ids_gets_one(tmp_path, campaign):
    assert _run(campaign, tmp_path / "a").exit_code == 0
    with Store(tmp_path / "a", create=False) as store:
        store_id = store.store_id
    (tmp_path / "a").rename(tmp_path / "moved")
    assert _run(campaign, tmp_path / "moved").exit_code == 0  # same ID: the same store, somewhere else
    with Store(tmp_path / "moved", create=False) as store:
        assert store.store_id == store_id and store.catalog.meta("store_root") == str((tmp_path / "moved").resolve())
    # a store written before IDs: none in store.json, the catalog or a marker
    legacy = tmp_path / "moved"
    document = json.loads((legacy / "store.json").read_text())
    del document["store_id"]
    (legacy / "store.json").write_text(json.dumps(document))
    (legacy / MARKER).unlink()
    with Store(legacy, create=False) as store, store.catalog.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM store_meta WHERE name IN ('store_id', 'store_root')")
    with Store(legacy, create=False) as store:  # a read writes nothing
        assert store.store_id is None
    assert not (legacy / MARKER).exists()
    assert _verify(legacy)["ok"] == 4
    with Store(legacy) as store:  # the first open to write gives it an ID
        assert store.store_id and store.store_id != store_id
    assert json.loads((legacy / MARKER).read_text())["store_id"] == store.store_id


def test_the_run_lock_covers_the_data_root(tmp_path):
    data = tmp_path / "data"
    store = Store(tmp_path / "a", data_url=str(data))
    waited: list[str] = []
    try:
        with store.run_lock():
            assert (data / LOCK_NAME).exists() and (tmp_path / "a" / LOCK_NAME).exists()

            def second() -> None:  # another open file description: what a second process would see
                fd = os.open(data / LOCK_NAME, os.O_RDWR)
                try:
                    with pytest.raises(BlockingIOError):
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    waited.append(os.read(fd, 32).decode())
                finally:
                    os.close(fd)

            thread = threading.Thread(target=second)
            thread.start()
            thread.join()
    finally:
        store.close()
    assert waited == [str(os.getpid())]


def test_an_fsspec_data_root_is_marked_through_fsspec(tmp_path):
    url = f"file://{tmp_path / 'remote'}"
    with Store(tmp_path / "a", data_url=url) as store:
        assert json.loads((tmp_path / "remote" / MARKER).read_text())["store_id"] == store.store_id
    with pytest.raises(StoreError, match=f"the data root {url} belongs to the store at"):
        Store(tmp_path / "b", data_url=url)


def test_two_copies_of_one_store_on_one_data_root_are_refused_a_move_and_an_own_data_root_are_not(tmp_path, campaign):
    import shutil

    data = tmp_path / "data"
    assert _run(campaign, tmp_path / "a", "--data", str(data)).exit_code == 0
    before = sorted(p.read_bytes() for p in (data / "episodes").rglob("*.parquet"))
    shutil.copytree(tmp_path / "a", tmp_path / "copy")  # same ID, its own SQLite catalog, the same data root
    line = _one_line_error(_run(campaign, tmp_path / "copy"))
    assert f"the data root {data} is also the data root of a copy of this store at {(tmp_path / 'a').resolve()}" in line
    assert f"remove one of {(tmp_path / 'a').resolve()} and {(tmp_path / 'copy').resolve()}" in line
    assert json.loads((data / MARKER).read_text())["store"] == str((tmp_path / "a").resolve())
    line = _one_line_error(CliRunner().invoke(app, ["store", "prune", "--store", str(tmp_path / "copy"),
                                                    "--campaign", CAMPAIGN["name"]]))
    assert "a copy of this store" in line
    assert sorted(p.read_bytes() for p in (data / "episodes").rglob("*.parquet")) == before
    with pytest.raises(StoreError, match="a copy of this store"):  # its rows may name files the other pruned
        Store(tmp_path / "copy", create=False)
    assert (_verify(tmp_path / "a")["ok"], _verify(tmp_path / "a")["failed"]) == (4, 0)
    # the original still runs; once it is gone, the remaining directory is a moved store and the marker follows
    assert _run(campaign, tmp_path / "a").exit_code == 0
    shutil.rmtree(tmp_path / "a")
    assert _run(campaign, tmp_path / "copy").exit_code == 0
    assert json.loads((data / MARKER).read_text())["store"] == str((tmp_path / "copy").resolve())
    # a copy of a store that keeps its data in its own directory has its own data root: no refusal
    assert _run(campaign, tmp_path / "own").exit_code == 0
    shutil.copytree(tmp_path / "own", tmp_path / "own-copy")
    assert _run(campaign, tmp_path / "own-copy").exit_code == 0
    assert json.loads((tmp_path / "own-copy" / MARKER).read_text())["store"] == str((tmp_path / "own-copy").resolve())
    assert json.loads((tmp_path / "own" / MARKER).read_text())["store"] == str((tmp_path / "own").resolve())


def test_two_directories_on_one_shared_catalog_are_one_store_not_copies(tmp_path, campaign):
    """Two directories with the same store.json on one shared catalog (a store reached by two paths, as on
    hosts that mount it differently) share rows and leases: not refused; and the store_root the catalog
    names follows the directory that last opened it to write."""
    import shutil

    catalog, data = f"sqlite:///{tmp_path / 'shared.sqlite'}", tmp_path / "data"
    assert _run(campaign, tmp_path / "a", "--catalog", catalog, "--data", str(data)).exit_code == 0
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert _run(campaign, tmp_path / "b", "--catalog", catalog).exit_code == 0
    with Store(tmp_path / "b", catalog_url=catalog, create=False) as store:
        assert store.catalog.meta("store_root") == str((tmp_path / "b").resolve())
    assert _verify(tmp_path / "a", "--catalog", catalog)["ok"] == 4
