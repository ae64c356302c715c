"""The store: atomic files, checksums, an idempotent catalog, schema versions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import sqlalchemy as sa

from assay.errors import StoreError
from assay.store import SCHEMA_VERSION, Catalog, EpisodeRecord, Outcome, Store, build_table, write_episode
from assay.store.episodes import remove_stale_temporaries


def _columns(n=4):
    return {
        "step": np.arange(n, dtype=np.int32), "t": np.arange(n) / 10.0, "observation.state": np.ones((n, 3)),
        "action": np.zeros((n, 2)), "reward": np.ones(n), "success": np.zeros(n, bool),
        "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool),
    }


def _record(key="k" * 24, campaign="c", policy="p"):
    return EpisodeRecord(key=key, campaign=campaign, task_id="metaworld/reach@1", task_hash="h", variant_key="nominal",
                         variant_name="nominal", variant={}, policy_name=policy, policy_version="1", policy_spec={},
                         seed=1, episode_index=0, instruction="reach", outcome=Outcome.SUCCESS, reason="", steps=4,
                         total_return=4.0, success_step=3, trajectory_hash="t")


def test_episode_files_round_trip_with_schema_version_and_checksum(tmp_path):
    table = build_table(_columns(), {"episode_key": "abcdef", "task_id": "metaworld/reach@1"})
    relpath, sha = write_episode(tmp_path, "abcdef", table)
    store = Store(tmp_path)
    record = dataclasses.replace(_record(key="abcdef"), data_path=relpath, data_sha256=sha)
    loaded = store.steps(record)
    assert loaded.schema.metadata[b"schema_version"] == str(SCHEMA_VERSION).encode()
    assert loaded.column("observation.state").type.list_size == 3
    np.testing.assert_array_equal(loaded.column("reward").to_numpy(), np.ones(4))
    (tmp_path / relpath).write_bytes((tmp_path / relpath).read_bytes()[:-10])  # truncate it
    with pytest.raises(StoreError, match="does not match its recorded checksum"):
        store.steps(record)


def test_misaligned_or_incomplete_step_data_is_refused():
    columns = _columns()
    columns["reward"] = np.ones(3)
    with pytest.raises(StoreError, match="not time-aligned"):
        build_table(columns, {})
    del columns["action"]
    with pytest.raises(StoreError, match="missing required column"):
        build_table(columns, {})


def test_catalog_is_idempotent_and_shares_episodes_between_campaigns(tmp_path):
    catalog = Catalog(f"sqlite:///{tmp_path / 'c.sqlite'}")
    assert catalog.add(_record()) is True
    assert catalog.add(_record()) is False  # a retry cannot duplicate an episode
    catalog.add(_record(campaign="other", policy="renamed"))
    assert [r.policy_name for r in catalog.episodes(campaign="other")] == ["renamed"]
    assert len(catalog.episodes(campaign="c")) == 1
    assert catalog.existing_keys(["k" * 24, "x"]) == {"k" * 24}
    assert catalog.episode("kkk").key == "k" * 24
    with pytest.raises(StoreError, match="no episode"):
        catalog.episode("zzz")


def test_catalog_refuses_a_newer_schema(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    Catalog(url).close()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("update store_meta set value='99' where name='schema_version'"))
    engine.dispose()
    with pytest.raises(StoreError, match="schema_version 99"):
        Catalog(url)


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    import socket

    folder = tmp_path / "episodes" / "ab"
    folder.mkdir(parents=True)
    dead = folder / f"abc.parquet.tmp-{socket.gethostname()}-999999999"
    alive = folder / f"abd.parquet.tmp-{socket.gethostname()}-1"  # pid 1 always exists
    dead.write_bytes(b"partial")
    alive.write_bytes(b"partial")
    assert remove_stale_temporaries(tmp_path) == 1
    assert not dead.exists() and alive.exists()
