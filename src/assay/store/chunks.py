"""One way to bind many values: every ``IN`` over keys and every bulk write goes through here, a chunk at a time.

A database bounds the parameters one statement may bind (SQLite: ``SQLITE_MAX_VARIABLE_NUMBER``, 32,766 by
default since 3.32 and 250,000 in some builds; PostgreSQL's wire protocol: 65,535), and a statement that
binds a million keys, or an ``executemany`` of a million rows, holds them all in memory at once. So a list of
keys of any length is cut into chunks of :data:`CHUNK` values (never more than :func:`bind_limit` allows for
the values each item binds), as Django's ``bulk_batch_size`` does:

* :func:`chunked`: the chunks themselves, for a caller that builds its own statement per chunk (and
  :func:`among`, the predicate for one chunk: on PostgreSQL one array parameter, ``= ANY(...)``);
* :func:`select_in`: the rows of ``query`` whose ``column`` is among ``values``, read a chunk at a time;
* :func:`delete_in`: delete the rows whose ``column`` is among ``values``, a chunk at a time;
* :func:`insert_rows`: an ``executemany`` of ``rows`` (a dict per row), a chunk of rows at a time.

Every function takes a connection inside the caller's transaction, so a chunked write commits (or rolls back)
whole with the rest of the transaction. ``tests/test_chunks_sql.py`` checks each at a million keys on SQLite and
PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, TypeVar

import sqlalchemy as sa

T = TypeVar("T")

CHUNK = 500  # values per statement: far below every limit, and a statement's plan stays cheap to make
WIDE_CHUNK = 5000  # for a read of every planned key (a resume): a tenth of the statements, each still far below
# The fewest parameters a statement may bind on each database Assay supports (SQLite's default since 3.32;
# PostgreSQL's protocol counts them in 16 bits). Another dialect: SQLite's, the smaller.
BIND_LIMITS = {"sqlite": 32_766, "postgresql": 65_535}


def bind_limit(dialect: str) -> int:
    """The most parameters one statement may bind on ``dialect`` (a SQLAlchemy dialect name)."""
    return BIND_LIMITS.get(dialect, min(BIND_LIMITS.values()))


def chunk_size(dialect: str | None = None, binds_per_item: int = 1, size: int = CHUNK) -> int:
    """How many items go in one statement: ``size``, fewer where ``binds_per_item`` parameters each would pass
    the dialect's limit (with room for a few more parameters of the statement's own)."""
    limit = bind_limit(dialect or "") - 100
    return max(1, min(size, limit // max(1, binds_per_item)))


def chunked(items: Iterable[T], size: int = CHUNK) -> Iterator[list[T]]:
    """``items`` in lists of at most ``size``, in order (a generator or any iterable: never held whole here)."""
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, not {size}")
    if isinstance(items, Sequence):
        for start in range(0, len(items), size):
            yield list(items[start:start + size])
        return
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def among(dialect: str, column: sa.ColumnElement[Any], chunk: list[Any]) -> sa.ColumnElement[bool]:
    """``column`` is one of ``chunk``: on PostgreSQL ``= ANY(:array)``, one parameter however long the chunk (a
    statement of thousands of parameters costs more to send and plan than the lookups it asks for); elsewhere
    ``IN (...)`` (and always for a tuple of columns)."""
    if dialect == "postgresql" and not isinstance(column, sa.Tuple):
        from sqlalchemy.dialects.postgresql import ARRAY

        return column == sa.any_(sa.bindparam(None, chunk, type_=ARRAY(column.type)))
    return column.in_(chunk)


def select_in(conn: sa.Connection, query: sa.Select[Any], column: sa.ColumnElement[Any], values: Iterable[Any],
              size: int = CHUNK) -> Iterator[Any]:
    """The rows of ``query`` whose ``column`` is among ``values``, one statement per chunk of values (a value
    repeated in two chunks yields its rows twice: pass distinct values)."""
    for chunk in chunked(values, chunk_size(conn.dialect.name, 1, size)):
        yield from conn.execute(query.where(among(conn.dialect.name, column, chunk)))


def delete_in(conn: sa.Connection, table: sa.Table, column: sa.ColumnElement[Any], values: Iterable[Any],
              *where: sa.ColumnElement[bool], size: int = CHUNK) -> int:
    """Delete the rows of ``table`` whose ``column`` is among ``values`` (and that match ``where``); how many."""
    gone = 0
    for chunk in chunked(values, chunk_size(conn.dialect.name, 1, size)):
        gone += int(conn.execute(table.delete().where(among(conn.dialect.name, column, chunk), *where)).rowcount
                    or 0)
    return gone


def insert_rows(conn: sa.Connection, statement: sa.Table | sa.Insert, rows: Iterable[dict[str, Any]],
                size: int = CHUNK) -> int:
    """``executemany`` of ``statement`` (a table: its plain insert) over ``rows``, a chunk of rows per call, so
    neither the driver's parameter lists nor a multi-row ``VALUES`` ever hold them all; how many rows."""
    insert = statement.insert() if isinstance(statement, sa.Table) else statement
    written = 0
    for chunk in chunked(rows, size):
        binds = len(chunk[0]) if chunk else 1
        for part in chunked(chunk, chunk_size(conn.dialect.name, binds, size)):
            conn.execute(insert, part)
            written += len(part)
    return written
