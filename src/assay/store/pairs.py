"""Paired seed patterns kept beside the rows (``seed_rows``, ``seed_patterns``), so paired statistics never scan
a campaign's episodes.

McNemar, Newcombe, the leaderboard's bootstrap of whole seed rows and robustness retention need which outcomes
occur *together* on one paired row: one (task, variant key, seed) across policies (``across="policy"``), or one
(policy, task, seed) across variant keys (``across="variant"``). A ``GROUP BY`` of every link per row and then
per pattern costs seconds at a million episodes; so, as :mod:`assay.store.counts` keeps the cells' counts, the
catalog keeps in the same transactions:

* ``seed_rows``: one row per (campaign, across, group, seed) holding the outcome code of each column present
  (:data:`SUCCESS`, :data:`FAILED`, :data:`ERRORED`; :data:`DUPLICATE` where two episodes of one column share
  the row, which a paired table cannot hold);
* ``seed_patterns``: per (campaign, across, group), how many rows show each pattern: what readers read
  (:func:`kept_patterns`), a few hundred rows per campaign whatever its size.

A new link moves its two rows from their old pattern to the new one (:func:`add_links`: the rows are read, on
PostgreSQL locked, in key order, and the patterns' counts changed by atomic upserts); forgetting episodes
counts the groups they were in anew from the rows that remain (:func:`recount`), and a catalog from before the
tables, or whose counts are doubted, is counted anew from its rows (:func:`rebuild`, with ``cell_counts``).
Only rows whose outcome is one of Assay's are counted, as in ``cell_counts``.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa

from assay.store.chunks import CHUNK, chunked, insert_rows, select_in
from assay.store.records import Outcome
from assay.store.schema import campaign_episodes, episodes, seed_patterns, seed_rows

MISSING, SUCCESS, FAILED, ERRORED = 0, 1, 2, 3  # outcome codes of a pattern: no episode, success, failure or timeout
DUPLICATE = 9  # two episodes of one column on one paired row
ACROSS = ("policy", "variant")
OUTCOMES = tuple(o.value for o in Outcome)


class Link(NamedTuple):
    """What a paired row reads of one link: its policy name and its episode's facts."""

    policy: str
    task_id: str
    variant_key: str
    seed: int
    outcome: str


def code_of(outcome: str) -> int:
    """The pattern code of an outcome (timeouts are failures; errors are their own)."""
    return SUCCESS if outcome == Outcome.SUCCESS.value else ERRORED if outcome == Outcome.ERROR.value else FAILED


def _rows_of(link: Link) -> Iterator[tuple[str, str, str, str]]:
    """(across, g0, g1, column) of the two paired rows a link sits on."""
    yield "policy", link.task_id, link.variant_key, link.policy
    yield "variant", link.policy, link.task_id, link.variant_key


def _hash(*parts: object) -> str:
    return hashlib.sha1(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()


def _dump(codes: dict[str, int]) -> str:
    return json.dumps(codes, sort_keys=True, separators=(",", ":"))


def add_links(conn: sa.Connection, campaign: str, links: Iterable[Link]) -> None:
    """Put new links of ``campaign`` on their paired rows and move those rows' pattern counts."""
    adds: dict[str, tuple[str, str, str, int, list[tuple[str, int]]]] = {}
    for link in links:
        if link.outcome not in OUTCOMES:
            continue
        for across, g0, g1, column in _rows_of(link):
            row = adds.setdefault(_hash(campaign, across, g0, g1, link.seed), (across, g0, g1, link.seed, []))
            row[4].append((column, code_of(link.outcome)))
    if not adds:
        return
    ids = sorted(adds)  # one lock order for every writer (PostgreSQL)
    query = sa.select(seed_rows.c.id, seed_rows.c.pattern).order_by(seed_rows.c.id)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    held = {str(r.id): str(r.pattern) for r in select_in(conn, query, seed_rows.c.id, ids)}
    moved: Counter[tuple[str, str, str, str]] = Counter()
    fresh, changed = [], []
    for row_id in ids:
        across, g0, g1, seed, columns = adds[row_id]
        old = held.get(row_id)
        codes: dict[str, int] = json.loads(old) if old is not None else {}
        for column, code in columns:
            codes[column] = DUPLICATE if column in codes else code
        new = _dump(codes)
        if old is not None:
            moved[(across, g0, g1, old)] -= 1
            changed.append({"b_id": row_id, "b_pattern": new})
        else:
            fresh.append({"id": row_id, "campaign": campaign, "across": across, "g0": g0, "g1": g1, "seed": seed,
                          "pattern": new})
        moved[(across, g0, g1, new)] += 1
    insert_rows(conn, seed_rows, fresh)
    update = seed_rows.update().where(seed_rows.c.id == sa.bindparam("b_id")).values(pattern=sa.bindparam("b_pattern"))
    for chunk in chunked(changed):
        conn.execute(update, chunk)
    _count(conn, campaign, moved)


def _count(conn: sa.Connection, campaign: str, moved: Counter[tuple[str, str, str, str]]) -> None:
    """Add ``moved`` (across, g0, g1, pattern -> rows gained or lost) to ``seed_patterns``, in key order, by one
    upsert statement executed for every changed pattern."""
    rows = [{"campaign": campaign, "across": across, "g0": g0, "g1": g1, "pattern_id": _hash(pattern),
             "pattern": pattern, "rows": delta}
            for (across, g0, g1, pattern), delta in moved.items() if delta]
    rows.sort(key=lambda row: tuple(row[c] for c in _KEY))
    if not rows:
        return
    dialect = conn.dialect.name
    if dialect in ("sqlite", "postgresql"):
        from sqlalchemy.dialects import postgresql, sqlite

        insert = (sqlite.insert if dialect == "sqlite" else postgresql.insert)(seed_patterns)
        upsert = insert.on_conflict_do_update(index_elements=list(_KEY),
                                              set_={"rows": seed_patterns.c.rows + insert.excluded.rows})
        for chunk in chunked(rows):
            conn.execute(upsert, chunk)
        return
    for row in rows:  # another database: an update, else an insert
        where = sa.and_(*(seed_patterns.c[c] == row[c] for c in _KEY))
        if not conn.execute(seed_patterns.update().where(where).values(rows=seed_patterns.c.rows + row["rows"])) \
                .rowcount:
            conn.execute(seed_patterns.insert().values(**row))


_KEY = ("campaign", "across", "g0", "g1", "pattern_id")


def _linked_rows(where: sa.ColumnElement[bool] | None, order: Sequence[sa.ColumnElement[Any]]) -> sa.Select[Any]:
    query = sa.select(campaign_episodes.c.campaign, campaign_episodes.c.policy_name, episodes.c.task_id,
                      episodes.c.variant_key, episodes.c.seed, episodes.c.outcome) \
        .select_from(campaign_episodes.join(episodes, campaign_episodes.c.key == episodes.c.key)) \
        .where(episodes.c.outcome.in_(OUTCOMES)).order_by(*order)
    return query.where(where) if where is not None else query


def _count_from_rows(conn: sa.Connection, across: str, where: sa.ColumnElement[bool] | None) -> None:
    """Write the paired rows of ``across`` (and their pattern counts) of the links ``where`` selects, counted
    from the rows in group order, so only one paired row is held at a time."""
    first, second = (episodes.c.task_id, episodes.c.variant_key) if across == "policy" else \
        (campaign_episodes.c.policy_name, episodes.c.task_id)
    query = _linked_rows(where, (campaign_episodes.c.campaign, first, second, episodes.c.seed))
    moved: dict[str, Counter[tuple[str, str, str, str]]] = {}
    fresh: list[dict[str, Any]] = []
    current: tuple[str, str, str, int] | None = None
    codes: dict[str, int] = {}

    def close() -> None:
        if current is None:
            return
        campaign, g0, g1, seed = current
        pattern = _dump(codes)
        fresh.append({"id": _hash(campaign, across, g0, g1, seed), "campaign": campaign, "across": across, "g0": g0,
                      "g1": g1, "seed": seed, "pattern": pattern})
        moved.setdefault(campaign, Counter())[(across, g0, g1, pattern)] += 1

    rows = conn.execute(query.execution_options(yield_per=CHUNK * 10))
    for r in rows:
        link = Link(str(r.policy_name), str(r.task_id), str(r.variant_key), int(r.seed), str(r.outcome))
        _, g0, g1, column = next(x for x in _rows_of(link) if x[0] == across)
        here = (str(r.campaign), g0, g1, link.seed)
        if here != current:
            close()
            current, codes = here, {}
            if len(fresh) >= CHUNK * 10:
                insert_rows(conn, seed_rows, fresh)
                fresh.clear()
        codes[column] = DUPLICATE if column in codes else code_of(link.outcome)
    close()
    insert_rows(conn, seed_rows, fresh)
    for campaign, counted in sorted(moved.items()):
        _count(conn, campaign, counted)


def recount(conn: sa.Connection, cells: Iterable[tuple[str, str, str, str]]) -> None:
    """Count anew, from the rows, the paired rows of every group that ``cells`` (campaign, policy, task, variant
    key: where links were deleted) touch."""
    groups = sorted({(c, "policy", task, variant) for c, _, task, variant in cells} |
                    {(c, "variant", policy, task) for c, policy, task, _ in cells})
    for campaign, across, g0, g1 in groups:
        group = sa.and_(seed_rows.c.campaign == campaign, seed_rows.c.across == across, seed_rows.c.g0 == g0,
                        seed_rows.c.g1 == g1)
        conn.execute(seed_rows.delete().where(group))
        conn.execute(seed_patterns.delete().where(seed_patterns.c.campaign == campaign,
                                                  seed_patterns.c.across == across, seed_patterns.c.g0 == g0,
                                                  seed_patterns.c.g1 == g1))
        first, second = (episodes.c.task_id, episodes.c.variant_key) if across == "policy" else \
            (campaign_episodes.c.policy_name, episodes.c.task_id)
        _count_from_rows(conn, across, sa.and_(campaign_episodes.c.campaign == campaign, first == g0, second == g1))


def rebuild(conn: sa.Connection) -> None:
    """Count every paired row anew from the rows (with ``cell_counts``: :func:`assay.store.counts.rebuild`)."""
    if conn.dialect.name == "postgresql":  # writers wait: none of their moves is lost between the delete and the count
        conn.exec_driver_sql("LOCK TABLE seed_rows, seed_patterns IN EXCLUSIVE MODE")
    conn.execute(seed_rows.delete())
    conn.execute(seed_patterns.delete())
    for across in ACROSS:
        _count_from_rows(conn, across, None)


class KeptPattern(NamedTuple):
    """How many paired rows of one group show one pattern (column -> code), as kept."""

    g0: str
    g1: str
    codes: dict[str, int]
    rows: int


def kept_patterns(conn: sa.Connection, campaign: str, across: str, from_rows: bool = False) -> list[KeptPattern]:
    """The campaign's kept pattern counts across ``across`` (with ``from_rows``: counted anew from the rows, in
    memory, as :func:`rebuild` would: what ``assay store verify`` compares them with)."""
    if not from_rows:
        query = sa.select(seed_patterns.c.g0, seed_patterns.c.g1, seed_patterns.c.pattern, seed_patterns.c.rows) \
            .where(seed_patterns.c.campaign == campaign, seed_patterns.c.across == across, seed_patterns.c.rows != 0)
        return [KeptPattern(str(r.g0), str(r.g1), json.loads(r.pattern), int(r.rows)) for r in conn.execute(query)]
    counted: Counter[tuple[str, str, str]] = Counter()
    rows: dict[tuple[str, str, int], dict[str, int]] = {}
    for r in conn.execute(_linked_rows(campaign_episodes.c.campaign == campaign, ())):
        link = Link(str(r.policy_name), str(r.task_id), str(r.variant_key), int(r.seed), str(r.outcome))
        _, g0, g1, column = next(x for x in _rows_of(link) if x[0] == across)
        codes = rows.setdefault((g0, g1, link.seed), {})
        codes[column] = DUPLICATE if column in codes else code_of(link.outcome)
    for (g0, g1, _), codes in rows.items():
        counted[(g0, g1, _dump(codes))] += 1
    return [KeptPattern(g0, g1, json.loads(pattern), n) for (g0, g1, pattern), n in sorted(counted.items())]


