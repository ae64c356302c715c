"""The store's boundary for higher layers: the resume plan, forget registration, typed rows (issue 20)."""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa

from assay.errors import StoreError
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import ResumePlan, Store
from tests.helpers import record_as_error

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
    record_as_error(root, errored)
    with Store(root) as store:
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


def _count(store: Store, table: str) -> int:
    with store.catalog.engine.connect() as conn:
        return int(conn.execute(sa.text(f"select count(*) from {table}")).scalar())


def test_a_registered_tables_rows_are_forgotten_with_their_episode_in_every_later_process(recorded):
    from assay.failures.categories import Categorized, Category
    from assay.failures.table import FailureTable

    root, records = recorded
    victim, kept = records[0], records[1]
    with Store(root) as store:
        assert store.catalog.forgotten_tables() == []
        FailureTable(store).put({r.key: Categorized(Category.COLLISION, (Category.COLLISION,), "reach")
                                 for r in (victim, kept)})
        assert store.catalog.forgotten_tables() == ["failure_categories"]
    with Store(root) as store:  # a later process that never builds a FailureTable (a resume) still clears it
        assert store.forget([victim.key]) == 1
        assert _count(store, "failure_categories") == 1
    with Store(root) as store:
        assert set(FailureTable(store).get()) == {kept.key}
        FailureTable(store)  # registering again changes nothing
        assert store.catalog.forgotten_tables() == ["failure_categories"]


def test_an_unregistered_table_is_left_alone_and_forgetting_still_works(recorded):
    root, records = recorded
    with Store(root) as store:
        with store.catalog.engine.begin() as conn:
            conn.execute(sa.text("create table notes (key varchar(64) primary key, note text)"))
            conn.execute(sa.text("insert into notes values (:k, 'mine')"), {"k": records[0].key})
        assert store.forget([records[0].key]) == 1
        assert _count(store, "notes") == 1  # the store names no other layer's table
        assert store.catalog.existing_keys([r.key for r in records]) == {r.key for r in records[1:]}


def test_forgetting_is_atomic_when_a_registered_table_cannot_be_cleared(recorded):
    root, records = recorded
    keys = [r.key for r in records]
    with Store(root) as store:
        with store.catalog.engine.begin() as conn:
            conn.execute(sa.text("create table broken (episode varchar(64))"))  # registered, but no key column
        store.catalog.register_forgotten("broken")
        with pytest.raises(StoreError, match="forget failed"):
            store.forget(keys[:2])
        assert store.catalog.existing_keys(keys) == set(keys)  # nothing went: rows and links intact
        assert _count(store, "campaign_episodes") == 4


@pytest.mark.parametrize("name", ["episodes", "store_meta", "x; drop table episodes", "", "t" * 60])
def test_registering_a_catalog_table_or_a_bad_name_is_refused(tmp_path, name):
    with Store(tmp_path / "s") as store, pytest.raises(StoreError, match="cannot register"):
        store.catalog.register_forgotten(name)


def test_catalog_queries_return_typed_frozen_rows(recorded):
    from assay.spec import campaign_from_data as parse
    from assay.store import CampaignRow, IntegrityRow

    root, records = recorded
    with Store(root) as store:
        (row,) = store.catalog.campaigns()
        assert isinstance(row, CampaignRow)
        assert (row.name, row.episodes, row.spec_hash) == ("boundary", 4, parse(CAMPAIGN).content_hash())
        assert row.spec["campaign"]["name"] == "boundary" and row.created_at <= row.updated_at
        assert store.catalog.campaign("boundary") == row and store.catalog.campaign("nope") is None
        with pytest.raises(dataclasses.FrozenInstanceError):
            row.episodes = 0  # type: ignore[misc]
        found = store.catalog.integrity([records[0].key, "n" * 24])
        assert found == {records[0].key: IntegrityRow(records[0].outcome.value, records[0].data_path,
                                                      records[0].data_sha256)}
        assert found[records[0].key].outcome == records[0].outcome.value


def test_catalog_columns_are_derived_from_every_record_field_and_round_trip(recorded):
    from assay.store import EpisodeRecord
    from assay.store.catalog import _FIELDS, _LINK_FIELDS, episodes

    assert {f.name for f in _FIELDS} | _LINK_FIELDS == {f.name for f in dataclasses.fields(EpisodeRecord)}
    assert {f.column for f in _FIELDS} | {"created_at"} == set(episodes.c.keys())  # no column without a field
    root, records = recorded
    with Store(root) as store:
        record = dataclasses.replace(records[0], key="r" * 24, variant={"x": [1, 2]}, policy_spec={"p": 1},
                                     initial_conditions={"q": 0.5}, policy_info={"skill": "reach"},
                                     timings={"sim": 0.25}, provenance={"git": "abc"})
        assert store.catalog.add(record)
        assert store.catalog.episode("r" * 24) == record


def test_a_store_from_before_registrations_has_its_categories_forgotten_by_a_resumed_run(recorded, tmp_path):
    """A store whose failure_categories table predates forget registrations (no store_meta row): the next
    command registers it, so the resume that re-runs a damaged episode also drops its stale category."""
    import yaml
    from typer.testing import CliRunner

    from assay.cli.app import app
    from assay.failures.categories import Categorized, Category
    from assay.failures.table import FailureTable

    root, records = recorded
    victim, kept = records[0], records[1]
    with Store(root) as store:
        FailureTable(store).put({r.key: Categorized(Category.COLLISION, (Category.COLLISION,), "reach")
                                 for r in (victim, kept)})
        with store.catalog.engine.begin() as conn:  # as written before registrations existed
            conn.execute(sa.text("delete from store_meta where name = 'forget:failure_categories'"))
        assert store.catalog.forgotten_tables() == []
    (root / victim.data_path).unlink()
    spec = tmp_path / "boundary.yaml"
    spec.write_text(yaml.safe_dump(CAMPAIGN))
    result = CliRunner().invoke(app, ["run", str(spec), "--store", str(root), "--executor", "inline"])
    assert result.exit_code == 0, result.output
    with Store(root) as store:
        assert store.catalog.forgotten_tables() == ["failure_categories"]
        assert set(FailureTable(store).get()) == {kept.key}  # the re-run episode lost its stale category
        assert {r.key for r in store.catalog.episodes(campaign="boundary")} == {r.key for r in records}


def test_the_campaign_runner_talks_to_the_store_alone():
    """The run layer reaches the catalog only through Store's methods (resume_plan, forget, campaign, link,
    record, integrity), so another catalog needs no change there."""
    import re
    from pathlib import Path

    import assay.run

    sources = {p.name: p.read_text() for p in Path(assay.run.__file__).parent.glob("*.py")}
    reaching = {name for name, text in sources.items() if re.search(r"\.catalog\b", text)}
    assert reaching == set(), reaching


def test_a_registration_the_database_refuses_is_a_one_line_store_error(tmp_path):
    with Store(tmp_path / "s") as store:
        with store.catalog.engine.begin() as conn:  # every insert into store_meta fails in the database
            conn.execute(sa.text("create trigger refuse before insert on store_meta "
                                 "begin select raise(abort, 'store_meta refuses writes'); end"))
        with pytest.raises(StoreError) as error:
            store.catalog.register_forgotten("notes")
        message = str(error.value)
        assert "register_forgotten failed" in message and "store_meta refuses writes" in message
        assert "\n" not in message and error.value.__cause__ is None
        assert store.catalog.forgotten_tables() == []
