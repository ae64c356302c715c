"""One declared step-feature schema, a step format checked on read, a key format in the episode key's inputs."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from assay.errors import StoreError
from assay.run import rollout
from assay.sim import Transition
from assay.spec import NOMINAL, CampaignSpec, PolicySpec, ResolvedPolicy, Variant, content_hash, episode_key, plan
from assay.spec import campaign as campaign_module
from assay.spec.campaign import EpisodeJob
from assay.store import REQUIRED_COLUMNS, STEP_FEATURES, STEP_FORMAT, Catalog, build_table, read_episode
from assay.store.features import feature_of
from assay.testing import ConstantPolicy, FunctionEnv, fake_task

POLICY = ResolvedPolicy(PolicySpec(name="p", builtin="random"), "1")


class TracingPolicy(ConstantPolicy):
    def step_trace(self, slot: int) -> dict[str, float | str]:
        return {"skill": "reach", "similarity": 0.5}


def _recorded_columns() -> dict[str, np.ndarray]:
    task = fake_task(horizon=3)
    env = FunctionEnv(task, lambda s, t, a: Transition({"state": np.array([float(t)])}, 1.0, False, False, False,
                                                       {"contact": 1.0, "safety.limit": 0.0}))
    job = EpisodeJob("c", task, Variant(), POLICY, 0, 2, episode_key(task, Variant(), POLICY, 2), task.instruction)
    [recorder] = rollout([env], TracingPolicy(), [job])
    return recorder.columns()


def test_every_column_the_recorder_writes_is_a_declared_feature_and_the_required_ones_are_declared_required():
    columns = _recorded_columns()
    assert {"info.contact", "info.safety.limit", "trace.skill", "trace.similarity"} <= set(columns)
    assert all(feature_of(name) is not None for name in columns), [n for n in columns if feature_of(n) is None]
    assert tuple(f.name for f in STEP_FEATURES if f.required) == REQUIRED_COLUMNS
    assert set(REQUIRED_COLUMNS) <= set(columns)
    assert feature_of("info.") is None and feature_of("observation.images.front").dtype == "int32"


def test_a_writer_cannot_add_an_undeclared_column():
    columns = {**_recorded_columns(), "velocity": np.zeros(3)}
    with pytest.raises(StoreError) as raised:
        build_table(columns, {})
    message = str(raised.value)
    assert "\n" not in message and message.startswith("step column(s) velocity are not declared step features")
    assert "info.*" in message and "observation.state" in message


def _write_file(tmp_path, version: bytes | None) -> str:
    table = build_table(_recorded_columns(), {"episode_key": "k" * 24})
    meta = dict(table.schema.metadata)
    if version is None:
        del meta[b"schema_version"]
    else:
        meta[b"schema_version"] = version
    (tmp_path / "episodes").mkdir(exist_ok=True)
    pq.write_table(table.replace_schema_metadata(meta), tmp_path / "episodes" / "old.parquet")
    return "episodes/old.parquet"


@pytest.mark.parametrize(("version", "expected"), [
    (b"0", "it has step format 0, from an older Assay, and this Assay reads format 1: re-run its campaign into a "
           "new store"),
    (None, "it has no step-format version (schema_version missing) and this Assay reads format 1: re-run its "
           "campaign into a new store"),
    (b"7", "it has step format 7 and this Assay reads format 1: read it with a newer Assay"),
])
def test_a_step_file_of_another_format_is_one_line_that_says_what_to_do(tmp_path, version, expected):
    relpath = _write_file(tmp_path, version)
    with pytest.raises(StoreError) as raised:
        read_episode(tmp_path, relpath)
    assert str(raised.value) == f"step file {tmp_path / relpath}: {expected}"
    assert STEP_FORMAT == 1
    current = _write_file(tmp_path, b"1")
    assert read_episode(tmp_path, current).num_rows == 3  # this format reads
    assert read_episode(tmp_path, relpath, check_format=False).num_rows == 3  # the catalog check does it instead


def test_a_store_whose_catalog_is_of_an_older_format_is_one_line(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    Catalog(url).close()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("update store_meta set value='0' where name='schema_version'"))
    engine.dispose()
    with pytest.raises(StoreError) as raised:
        Catalog(url)
    assert "\n" not in str(raised.value) and "schema_version 0; this Assay reads 1" in str(raised.value)


def test_the_key_format_is_an_input_from_format_2_on_and_format_1_keys_are_unchanged(monkeypatch):
    task = fake_task()
    golden = episode_key(task, NOMINAL, POLICY, 5)
    identity = {"task": task.id, "task_hash": task.content_hash(), "variant": NOMINAL.model_dump(mode="json"),
                "policy": POLICY.spec.identity(POLICY.version), "seed": 5}
    assert golden == content_hash(identity, length=24)  # format 1: no key_format among the inputs
    monkeypatch.setattr(campaign_module, "KEY_FORMAT", 2)
    bumped = episode_key(task, NOMINAL, POLICY, 5)
    assert bumped == content_hash({**identity, "key_format": 2}, length=24) != golden
    # the per-cell fast path (plan) gives the same keys as episode_key under the new format too
    spec = CampaignSpec(name="c", episodes=2, tasks=(task.id,), policies=(POLICY.spec,), variants=({},))
    jobs = plan(spec, [task], [POLICY])
    assert [j.key for j in jobs] == [episode_key(task, NOMINAL, POLICY, j.seed) for j in jobs]
