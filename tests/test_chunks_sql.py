"""The one chunking helper (``assay.store.chunks``) every ``IN`` over keys and every bulk write goes through.

Properties checked on any list (hypothesis, small chunks so that lists cross many of them) and then at 300,001 keys
(``make test``) and a million (``make test-extended``) on SQLite and on PostgreSQL, past both databases'
bound-parameter limits (SQLite 32,766 by default, 250,000 in this build; PostgreSQL 65,535): a select returns
exactly the rows of the keys asked for that exist, a delete deletes exactly those, an insert writes every row, and
``FailureTable`` (whose single ``IN`` of every key raised "too many SQL variables" above those limits) reads and
writes every category.
"""

from __future__ import annotations

import random

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.failures.categories import Categorized, Category
from assay.failures.table import FailureTable
from assay.store import Store
from assay.store.chunks import BIND_LIMITS, CHUNK, chunk_size, chunked, delete_in, insert_rows, select_in
from tests import test_postgres

MILLION = 1_000_000

metadata = sa.MetaData()
keyed = sa.Table("chunk_probe", metadata, sa.Column("key", sa.String(16), primary_key=True),
                 sa.Column("value", sa.Integer, nullable=False))


@given(st.lists(st.integers()), st.integers(min_value=1, max_value=50))
def test_chunked_is_a_partition_in_order(items, size):
    chunks = list(chunked(items, size))
    assert [x for chunk in chunks for x in chunk] == items
    assert all(1 <= len(chunk) <= size for chunk in chunks)
    assert list(chunked(iter(items), size)) == chunks  # an iterator is cut the same way as a list


def test_chunk_size_respects_each_databases_limit():
    for dialect, limit in BIND_LIMITS.items():
        assert chunk_size(dialect) == CHUNK
        assert chunk_size(dialect, binds_per_item=200) * 200 < limit
        assert chunk_size(dialect, binds_per_item=limit) == 1
    assert chunk_size("mssql", binds_per_item=100, size=10**9) * 100 < min(BIND_LIMITS.values())
    with pytest.raises(ValueError):
        list(chunked([1], 0))


def _engine(url: str) -> sa.Engine:
    engine = sa.create_engine(url)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    return engine


@settings(max_examples=40, deadline=None)
@given(present=st.sets(st.integers(0, 300)), asked=st.lists(st.integers(0, 400), unique=True),
       size=st.integers(1, 40))
def test_select_delete_insert_match_one_statement(tmp_path_factory, present, asked, size):
    engine = _engine(f"sqlite:///{tmp_path_factory.mktemp('probe') / 'c.sqlite'}")
    with engine.begin() as conn:
        assert insert_rows(conn, keyed, [{"key": str(k), "value": k} for k in sorted(present)], size=size) == \
            len(present)
        found = {r.key for r in select_in(conn, sa.select(keyed.c.key), keyed.c.key, [str(k) for k in asked],
                                          size=size)}
        assert found == {str(k) for k in asked if k in present}
        gone = delete_in(conn, keyed, keyed.c.key, [str(k) for k in asked], keyed.c.value >= 0, size=size)
        assert gone == len(found)
        left = set(conn.execute(sa.select(keyed.c.key)).scalars())
        assert left == {str(k) for k in present} - found
    engine.dispose()


def _a_million(url: str) -> None:
    """A million keys written, half of them plus as many absent ones read back, then deleted: each exactly."""
    engine = _engine(url)
    keys = [f"k{i:07d}" for i in range(MILLION)]
    rng = random.Random(0)
    asked = rng.sample(keys, MILLION // 2) + [f"x{i:07d}" for i in range(MILLION // 2)]
    rng.shuffle(asked)
    with engine.begin() as conn:
        assert insert_rows(conn, keyed, ({"key": k, "value": i} for i, k in enumerate(keys))) == MILLION
    with engine.connect() as conn:
        values = {r.key: r.value for r in select_in(conn, sa.select(keyed.c.key, keyed.c.value), keyed.c.key, asked)}
    assert len(values) == MILLION // 2 and all(values[k] == int(k[1:]) for k in values)
    with engine.begin() as conn:
        assert delete_in(conn, keyed, keyed.c.key, asked) == MILLION // 2
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(keyed)).scalar() == MILLION // 2
    engine.dispose()


@pytest.mark.slow
@pytest.mark.extended  # the failure table below crosses SQLite's limit in make test
def test_a_million_keys_on_sqlite(tmp_path):
    _a_million(f"sqlite:///{tmp_path / 'c.sqlite'}")


@pytest.fixture(scope="module")
def server_url():
    """A PostgreSQL server on loopback for this module, started as tests/test_postgres.py starts its own."""
    yield from test_postgres.postgres_url.__wrapped__()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.extended  # PostgreSQL's limit (65,535) is crossed by the failure table test below
def test_a_million_keys_on_postgres(server_url):
    _a_million(server_url)


def _failure_table_holds(root, n, url=None):
    categorized = Categorized(Category.GRASP_FAILURE, (Category.GRASP_FAILURE,), "grasp", {"steps": 3})
    keys = [f"{i:064x}" for i in range(n)]
    with Store(root, url) as store:
        table = FailureTable(store)
        table.put(dict.fromkeys(keys, categorized))  # one IN of every key raised above the bind limit
        table.put(dict.fromkeys(keys[:10], categorized))  # replaces, never doubles
        found = table.get(keys)
        assert len(found) == n and found[keys[-1]] == categorized
        assert len(table.get(keys[::2] + ["f" * 64])) == (n + 1) // 2


# make test: past each database's bind limit, this build's SQLite's (250,000) and PostgreSQL's (65,535), by a few
# thousand keys at least; a million on both is extended
SIZES = [300_001, pytest.param(MILLION, marks=pytest.mark.extended, id="million")]
POSTGRES_SIZES = [70_001, pytest.param(MILLION, marks=pytest.mark.extended, id="million")]


@pytest.mark.slow
@pytest.mark.parametrize("n", SIZES)
def test_failure_table_holds_past_the_bind_limit_on_sqlite(tmp_path, n):
    _failure_table_holds(tmp_path / "store", n)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("n", POSTGRES_SIZES)
def test_failure_table_holds_past_the_bind_limit_on_postgres(tmp_path, server_url, n):
    _failure_table_holds(tmp_path / "store", n, test_postgres.fresh_database(server_url, f"failures_{n}"))
