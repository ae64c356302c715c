"""The catalog on a real PostgreSQL server (what a cluster shares), not only SQLite.

The fixture starts Debian's ``postgresql`` binaries on loopback in a temporary
directory (as the ``postgres`` user when run as root: initdb refuses root) and
stops it afterwards. ``make test`` installs the package when it is missing.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
import sqlalchemy as sa

from assay.errors import StoreError
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import Catalog, EpisodeRecord, Outcome, Store

pytestmark = pytest.mark.postgres


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url():
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL binaries not found: apt-get install -y postgresql (make test does)")
    pytest.importorskip("psycopg")
    data = Path(tempfile.mkdtemp(prefix="assay-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    subprocess.run(as_user + [initdb, "-D", str(data / "db"), "-U", "assay", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True)
    options = f"-h 127.0.0.1 -p {port} -k {data} -F"  # -F: no fsync (a throwaway server; nothing here is durable)
    subprocess.run(as_user + [pg_ctl, "-D", str(data / "db"), "-o", options, "-l", str(data / "log"), "-w", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://assay@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(as_user + [pg_ctl, "-D", str(data / "db"), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(data, ignore_errors=True)


def fresh_database(server_url: str, name: str) -> str:
    """An empty database ``name`` on the server (dropped first if there): one catalog per test on a shared server."""
    engine = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return server_url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
def catalog(postgres_url):
    opened = Catalog(postgres_url)
    yield opened
    with opened.engine.begin() as conn:  # each test starts from an empty catalog
        for table in ("campaign_episodes", "episodes", "campaigns", "cell_counts", "job_claims", "forgotten_links"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
        conn.exec_driver_sql("DELETE FROM store_meta WHERE name <> 'schema_version'")
    opened.close()


def _record(key: str, campaign: str = "c", policy: str = "p", seed: int = 1) -> EpisodeRecord:
    return EpisodeRecord(key=key, campaign=campaign, task_id="metaworld/reach@1", task_hash="h" * 16,
                         variant_key="v", variant_name="nominal", variant={}, policy_name=policy, policy_version="1",
                         policy_spec={"builtin": "expert"}, seed=seed, episode_index=0, instruction="reach",
                         outcome=Outcome.SUCCESS, reason="", steps=3, total_return=1.5, success_step=2,
                         trajectory_hash="t" * 32, initial_conditions={"hand": [0.0, 0.1]}, timings={"sim_s": 0.1})


def test_rows_round_trip_and_a_key_is_stored_once(catalog):
    record = _record("a" * 24, seed=2**40)  # BIGINT seeds
    assert catalog.add(record) is True
    assert catalog.add(record) is False
    assert catalog.add(dataclasses.replace(record, campaign="other", policy_name="q")) is False
    (back,) = catalog.episodes(campaign="c")
    assert back == record
    assert [r.policy_name for r in catalog.episodes(campaign="other")] == ["q"]
    assert catalog.existing_keys(["a" * 24, "b" * 24]) == {"a" * 24}
    assert catalog.episode("aaa").key == "a" * 24


def test_prefix_lookups_and_campaign_listing(catalog):
    for key in ("ab" + "0" * 22, "ab" + "1" * 22, "cd" + "0" * 22):
        catalog.add(_record(key))
    catalog.save_campaign("c", "hash", {"x": 1})
    with pytest.raises(StoreError, match="ambiguous"):
        catalog.episode("ab")
    with pytest.raises(StoreError, match="no episode"):
        catalog.episode("zz")
    (campaign,) = catalog.campaigns()
    assert (campaign.name, campaign.episodes, campaign.spec) == ("c", 3, {"x": 1})
    catalog.set_meta("data_url", "s3://bucket/prefix")
    assert catalog.meta("data_url") == "s3://bucket/prefix"


@pytest.mark.sim
def test_a_campaign_runs_and_resumes_against_postgres(tmp_path, postgres_url, catalog):
    data = {"name": "pg", "seed": 4, "episodes": 2, "envs_per_worker": 2, "tasks": ["metaworld/reach@1"],
            "policies": ["expert", "random"]}
    planned = prepare_campaign(campaign_from_data(data))
    with Store(tmp_path, catalog_url=postgres_url) as store:
        first = run_campaign(planned, store, InlineExecutor(tmp_path))
        second = run_campaign(planned, store, InlineExecutor(tmp_path))
        records = store.catalog.episodes(campaign="pg")
        for record in records:
            store.steps(record)
    assert (first.ran, second.ran, second.skipped) == (4, 0, 4)
    assert sorted(r.key for r in records) == sorted(j.key for j in planned.jobs)


def test_add_many_is_add_in_one_transaction(catalog):
    records = [_record(f"{i:024x}", seed=i) for i in range(5)]
    assert catalog.add(records[0]) is True
    assert catalog.add_many(records + [dataclasses.replace(records[1], campaign="other")]) == 4
    assert catalog.add_many(records) == 0
    assert sorted(r.key for r in catalog.episodes(campaign="c")) == sorted(r.key for r in records)
    assert [r.key for r in catalog.episodes(campaign="other")] == [records[1].key]


def test_a_second_store_directory_on_one_postgres_catalog_is_refused(tmp_path, postgres_url, catalog):
    """Issue 36: two store directories sharing one PostgreSQL catalog overwrote each other's files."""
    from assay.errors import StoreError

    with Store(tmp_path / "a", catalog_url=postgres_url) as first:
        store_id = first.store_id
    with pytest.raises(StoreError, match=r"already indexes the store at .*/a \(id "):
        Store(tmp_path / "b", catalog_url=postgres_url)
    with Store(tmp_path / "a", catalog_url=postgres_url, create=False) as again:
        assert again.store_id == store_id == catalog.meta("store_id")


def test_counts_equal_rows_on_postgres(tmp_path, postgres_url, catalog):
    """Issue 39: the aggregate queries (GROUP BY, seed patterns, JSON paths through ``#>>``, the kept counts'
    upserts and recounts) give on PostgreSQL what the rows give."""
    from tests.aggregate_support import build, check_store

    with Store(tmp_path, catalog_url=postgres_url) as store:
        records = build(store)
        check_store(store)
        check_store(store, "other")
        store.forget([r.key for r in records[:4]])
        check_store(store)
        store.catalog.rebuild_counts()
        check_store(store, "other")


CLAIMER = """
import sys, time
from assay.store import Catalog
catalog = Catalog(sys.argv[1])
keys = [f"k{i:04d}" for i in range(400)]
mine = []
for start in range(0, 400, 4):  # a driver's claims, a batch at a time
    mine += catalog.claim(keys[start:start + 4], "c", sys.argv[2], time.time(), 60)
print(" ".join(mine))
"""


def test_job_leases_on_postgresql(catalog, postgres_url):
    """The claims of tests/test_leases.py on PostgreSQL: free, live, expired, renewed, and two processes at once."""
    import subprocess
    import sys

    assert catalog.claim(["a", "b"], "c", "one", 100.0, 10) == ["a", "b"]
    assert catalog.claim(["b", "c"], "c", "two", 105.0, 10) == ["c"]
    assert catalog.claim(["a", "b"], "c", "two", 111.0, 10) == ["a", "b"]  # one's leases ended at 110
    assert catalog.renew_claims("one", 112.0, 10) == 0 and catalog.claims_elsewhere(["a"], "one") == {
        "a": ("two", 121.0)}
    catalog.add_many([_record("c")])
    assert catalog.claim(["c"], "c", "one", 200.0, 10) == []  # a row: done, and two's claim released
    assert catalog.release_claims("two") == 2 and catalog.claim_owners() == []
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    runs = [subprocess.Popen([sys.executable, "-c", CLAIMER, postgres_url, owner], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for owner in ("p1", "p2")]
    outputs = [run.communicate(timeout=240) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    one, two = (set(out.split()) for out, _ in outputs)
    assert not one & two and len(one | two) == 400


RACE_TRIALS = 50


def test_two_drivers_creating_one_postgresql_catalog_at_once_both_open_it(tmp_path, postgres_url):
    """Issue 50: two drivers opening one store on a fresh PostgreSQL catalog at once both succeed, in every one of 50
    trials (a fresh schema each, named by the URL's search_path; the second driver starts 0 to 0.25 s after the
    first, so it lands on every step of the first's creating the catalog), and agree on the store's ID."""
    import sqlalchemy as sa

    from assay.store import counts
    from tests.race_support import drivers_on_one_catalog, race

    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    names = [f"race_{os.getpid()}_{t}" for t in range(RACE_TRIALS)]
    with admin.connect() as conn:
        for name in names:
            conn.exec_driver_sql(f"CREATE SCHEMA {name}")
    trials = [(str(tmp_path / name), f"{postgres_url}?options=-csearch_path%3D{name}") for name in names]
    try:
        for outcomes in race(drivers_on_one_catalog, [trials, trials], RACE_TRIALS):
            assert [o[2] for o in outcomes] == ["ok", "ok"], outcomes
            assert outcomes[0][3] == outcomes[1][3]  # one store ID
        with admin.connect() as conn:
            for name in names:
                tables = set(sa.inspect(conn).get_table_names(schema=name))
                assert {"episodes", "campaigns", "campaign_episodes", "cell_counts", "seed_rows", "seed_patterns",
                        "store_meta"} <= tables, name
                meta = dict(conn.exec_driver_sql(f"SELECT name, value FROM {name}.store_meta").all())
                assert meta["schema_version"] == "1" and meta["cell_counts"] == counts.VERSION, (name, meta)
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        admin.dispose()


def test_same_name_campaigns_claimed_at_once_on_postgresql_give_one_winner(catalog, postgres_url):
    """Issue 50, the name claim of tests/test_store_races.py on PostgreSQL: two processes claim one new campaign name
    for different specs at once, 50 trials: exactly one saves it, the other is told the winner's spec hash."""
    from tests.race_support import campaign_claims, race

    for trial, outcomes in enumerate(race(campaign_claims, [(postgres_url, RACE_TRIALS)] * 2, RACE_TRIALS)):
        assert sorted(o[2] for o in outcomes) == ["ok", "refused"], outcomes
        winner = next(o for o in outcomes if o[2] == "ok")
        assert next(o for o in outcomes if o[2] == "refused")[3] == winner[3]
        row = catalog.campaign(f"race-{trial}")
        assert row is not None and row.spec_hash == winner[3] and row.spec == {"racer": winner[1]}
