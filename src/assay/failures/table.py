"""Failure categories stored on the episode: a ``failure_categories`` table beside the catalog's.

The catalog's schema belongs to ``assay.store``; this table lives in the same
database (``store.catalog.engine``) under its own SQLAlchemy MetaData, keyed by
episode key, so it joins the episodes table and a PostgreSQL catalog gets it too.
Rewriting an episode's row replaces it (categorization is a pure function of the
recorded data, so this is idempotent). The table is registered with the catalog
(``register_forgotten``), so an episode the store forgets loses its category too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from assay.errors import StoreError
from assay.failures.categories import Categorized, Category
from assay.store import Store
from assay.store.chunks import delete_in, insert_rows, select_in

metadata = sa.MetaData()
failure_categories = sa.Table(
    "failure_categories",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("category", sa.String(40), nullable=True, index=True),
    sa.Column("family", sa.String(40), nullable=False),
    sa.Column("signals_json", sa.Text, nullable=False),
    sa.Column("evidence_json", sa.Text, nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False),
)


def adopt(store: Store) -> bool:
    """Register ``failure_categories`` to be forgotten in a store that has the table but no registration
    (a store written before registrations existed, whose table no failures command has opened since).
    Returns whether it registered; a store without the table is left alone."""
    if failure_categories.name in store.catalog.forgotten_tables():
        return False
    if not sa.inspect(store.catalog.engine).has_table(failure_categories.name):
        return False
    try:
        store.catalog.register_forgotten(failure_categories.name)
    except StoreError:  # a read-only catalog: reading commands still work, a writable open registers it
        return False
    return True


class FailureTable:
    """The ``failure_categories`` table in a store's catalog: one category per episode key, forgotten with it."""

    def __init__(self, store: Store) -> None:
        self.engine = store.catalog.engine
        metadata.create_all(self.engine)
        store.catalog.register_forgotten(failure_categories.name)  # a forgotten episode loses its category

    def put(self, items: dict[str, Categorized]) -> None:
        """Insert or replace the categories of the given episode keys."""
        now = datetime.now(UTC).isoformat()
        rows = [{"key": key, "category": c.category.value if c.category else None, "family": c.family,
                 "signals_json": json.dumps([s.value for s in c.signals]),
                 "evidence_json": json.dumps(c.evidence, sort_keys=True), "created_at": now}
                for key, c in items.items()]
        if not rows:
            return
        with self.engine.begin() as conn:  # a chunk of keys per statement, in one transaction (assay.store.chunks)
            delete_in(conn, failure_categories, failure_categories.c.key, list(items))
            insert_rows(conn, failure_categories, rows)

    def get(self, keys: Sequence[str] | None = None) -> dict[str, Categorized]:
        """The stored categories of ``keys`` (every stored one when None), by episode key."""
        query = sa.select(failure_categories)
        with self.engine.connect() as conn:
            found: Iterable[Any] = conn.execute(query) if keys is None else \
                select_in(conn, query, failure_categories.c.key, list(dict.fromkeys(keys)))
            return {row.key: _categorized(row) for row in found}


def _categorized(row: Any) -> Categorized:
    return Categorized(Category(row.category) if row.category else None,
                       tuple(Category(s) for s in json.loads(row.signals_json)), row.family,
                       json.loads(row.evidence_json))
