"""The store's boundary for higher layers: the resume plan, forget registration, typed rows (issue 20)."""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa

from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import ResumePlan, Store

CAMPAIGN = {
    "name": "boundary",
    "seed": 5,
    "episodes": 4,
    "envs_per_worker": 2,
    "horizon": 10,
    "tasks": ["gymnasium/Pendulum-v1"],
    "policies": ["random"],
}


@pytest.fixture
def recorded(tmp_path):
    root = tmp_path / "store"
    with Store(root) as store:
        run_campaign(prepare_campaign(campaign_from_data(CAMPAIGN)), store, InlineExecutor(root))
        records = sorted(store.catalog.episodes(campaign="boundary"), key=lambda r: r.key)
    return root, records


def test_the_resume_plan_keeps_recorded_keys_and_reruns_damaged_errored_and_new_ones(recorded):
    root, records = recorded
    keys = [r.key for r in records]
    damaged, errored = records[0], records[1]
    (root / damaged.data_path).unlink()
    with Store(root) as store:
        with store.catalog.engine.begin() as conn:
            conn.execute(sa.text("update episodes set outcome = 'error' where key = :k"), {"k": errored.key})
        plain = store.resume_plan([*keys, "n" * 24])
        assert plain == ResumePlan(done=frozenset(keys[1:]), damaged=frozenset({damaged.key}), errored=frozenset())
        retry = store.resume_plan(keys, retry_errors=True)
        assert retry.done == frozenset(keys[2:])
        assert (retry.damaged, retry.errored) == ({damaged.key}, {errored.key})
        assert retry.forget == sorted([damaged.key, errored.key])
        assert store.catalog.existing_keys(keys) == set(keys)  # deciding changes nothing
        with pytest.raises(dataclasses.FrozenInstanceError):
            retry.done = frozenset()  # type: ignore[misc]


def test_an_empty_store_plans_every_key_to_run(tmp_path):
    with Store(tmp_path / "empty") as store:
        assert store.resume_plan(["a" * 24]) == ResumePlan(frozenset(), frozenset(), frozenset())
