"""Per-cell counts kept beside the rows (``cell_counts``), so that results never scan a campaign's episodes.

Every number a result table, a completeness line, the sign-off gate, pass^k or the dashboard shows
is a function of a few counts per (campaign, policy, task, variant) cell: episodes, successes,
failures, timeouts, errors, and over the non-error episodes the sums of steps, returns and squared
returns. A ``GROUP BY`` over a million links costs seconds; so the catalog keeps the counts in a
table of its own, changed in the same transaction as the rows they count:

* a new link (an episode recorded for a campaign, or an earlier one linked to it) adds its
  episode's facts to its cell (:func:`add_links`, an upsert: two writers never lose an increment);
* forgetting episodes recounts the cells they were in from the rows that remain (:func:`recount`),
  so a row edited by hand since it was counted cannot leave a wrong count behind;
* a catalog from before the table, or one whose counts are doubted, is counted anew from its rows
  (:func:`rebuild`; ``Catalog`` does it on open when ``store_meta.cell_counts`` is not
  :data:`VERSION`; ``assay store verify`` compares the table with a fresh count,
  ``aggregates.count_differences``, and names the cells that differ; ``--recount`` rebuilds it).

The same transactions keep each link's paired seed rows (:mod:`assay.store.pairs`: :func:`add_links` and
:func:`recount` move them too, :func:`rebuild` counts them anew) and fill a catalog's links' listing columns
(:mod:`assay.store.listing`); :data:`VERSION` 2 is all three, so a catalog an older Assay last counted is
counted anew on open.

Only rows whose outcome is one of Assay's are counted (a reader that decodes rows leaves the
others out too).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa

from assay.store import listing, pairs
from assay.store.chunks import select_in
from assay.store.records import Outcome
from assay.store.schema import campaign_episodes, cell_counts, episodes, store_meta

VERSION = "2"  # 2: paired seed rows (pairs) and the links' listing columns (listing) kept too
META = "cell_counts"
CELL = ("campaign", "policy_name", "task_id", "variant_key")
SUMS = ("episodes", "successes", "failures", "timeouts", "errors", "steps", "return_sum", "return_squares")
OUTCOMES = tuple(o.value for o in Outcome)


class Facts(NamedTuple):
    """What a count reads of an episode."""

    task_id: str
    variant_key: str
    variant_name: str
    outcome: str
    steps: int
    total_return: float
    seed: int


def facts_of(conn: sa.Connection, keys: Sequence[str]) -> dict[str, Facts]:
    """The facts of the episodes among ``keys`` that are recorded."""
    found: dict[str, Facts] = {}
    columns = (episodes.c.key, *(episodes.c[name] for name in Facts._fields))
    for row in select_in(conn, sa.select(*columns), episodes.c.key, keys):
        found[row.key] = Facts(row.task_id, row.variant_key, row.variant_name, row.outcome, int(row.steps),
                               float(row.total_return), int(row.seed))
    return found


def _delta(facts: Facts) -> list[float]:
    scored = facts.outcome != Outcome.ERROR.value
    ret = facts.total_return if scored else 0.0
    return [1, facts.outcome == "success", facts.outcome == "failure", facts.outcome == "timeout",
            facts.outcome == "error", facts.steps if scored else 0, ret, ret * ret]


def add_links(conn: sa.Connection, campaign: str, links: Iterable[tuple[str, Facts]]) -> None:
    """Add new links of ``campaign`` (each a policy name and its episode's facts) to their cells' counts and
    their paired seed rows (:mod:`assay.store.pairs`)."""
    links = list(links)
    cells: dict[tuple[str, str, str, str], list[Any]] = {}
    for policy, facts in links:
        if facts.outcome not in OUTCOMES:
            continue
        cell = cells.setdefault((campaign, policy, facts.task_id, facts.variant_key),
                                [facts.variant_name, *([0] * 7), 0.0])
        for i, value in enumerate(_delta(facts)):
            cell[1 + i] += value
    for key in sorted(cells):  # one lock order for every writer (PostgreSQL)
        name, *sums = cells[key]
        _upsert(conn, dict(zip(CELL, key, strict=True)) | {"variant_name": name} |
                {column: int(v) if i < 6 else float(v) for i, (column, v) in enumerate(zip(SUMS, sums, strict=True))})
    pairs.add_links(conn, campaign, [pairs.Link(policy, f.task_id, f.variant_key, f.seed, f.outcome)
                                     for policy, f in links])


def _upsert(conn: sa.Connection, row: dict[str, Any]) -> None:
    dialect = conn.dialect.name
    if dialect in ("sqlite", "postgresql"):
        from sqlalchemy.dialects import postgresql, sqlite

        insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        statement = insert(cell_counts).values(**row)
        conn.execute(statement.on_conflict_do_update(
            index_elements=list(CELL), set_={c: cell_counts.c[c] + statement.excluded[c] for c in SUMS}))
        return
    where = sa.and_(*(cell_counts.c[c] == row[c] for c in CELL))
    done = conn.execute(cell_counts.update().where(where).values({c: cell_counts.c[c] + row[c] for c in SUMS}))
    if not done.rowcount:
        conn.execute(cell_counts.insert().values(**row))


def counted_rows(where: sa.ColumnElement[bool] | None = None) -> sa.Select[Any]:
    """The counts of the rows themselves, one row per cell (``where`` narrows the links counted): what
    ``cell_counts`` must hold."""
    scored = episodes.c.outcome != Outcome.ERROR.value
    ret = sa.cast(episodes.c.total_return, sa.Float)

    def share(outcome: str) -> Any:
        return sa.func.sum(sa.case((episodes.c.outcome == outcome, 1), else_=0))

    cell = (campaign_episodes.c.campaign, campaign_episodes.c.policy_name, episodes.c.task_id, episodes.c.variant_key)
    query = sa.select(
        *cell, sa.func.max(episodes.c.variant_name).label("variant_name"), sa.func.count().label("episodes"),
        share("success").label("successes"), share("failure").label("failures"), share("timeout").label("timeouts"),
        share("error").label("errors"), sa.func.sum(sa.case((scored, episodes.c.steps), else_=0)).label("steps"),
        sa.func.sum(sa.case((scored, ret), else_=0.0)).label("return_sum"),
        sa.func.sum(sa.case((scored, ret * ret), else_=0.0)).label("return_squares"),
    ).select_from(campaign_episodes.join(episodes, campaign_episodes.c.key == episodes.c.key)) \
        .where(episodes.c.outcome.in_(OUTCOMES)).group_by(*cell)
    return query.where(where) if where is not None else query


def _insert_counted(conn: sa.Connection, where: sa.ColumnElement[bool] | None) -> None:
    query = counted_rows(where)
    conn.execute(cell_counts.insert().from_select([*CELL, "variant_name", *SUMS], query))


def cells_of(conn: sa.Connection, keys: Sequence[str]) -> set[tuple[str, str, str, str]]:
    """The cells (campaign, policy, task, variant key) the links of ``keys`` count in."""
    found: set[tuple[str, str, str, str]] = set()
    columns = (campaign_episodes.c.campaign, campaign_episodes.c.policy_name, episodes.c.task_id,
               episodes.c.variant_key)
    joined = campaign_episodes.join(episodes, campaign_episodes.c.key == episodes.c.key)
    query = sa.select(*columns).select_from(joined)
    found |= {(str(r.campaign), str(r.policy_name), str(r.task_id), str(r.variant_key))
              for r in select_in(conn, query, campaign_episodes.c.key, keys)}
    return found


def recount(conn: sa.Connection, cells: Iterable[tuple[str, str, str, str]]) -> None:
    """Count ``cells`` anew from the rows (after links were deleted), and the paired seed rows they touch."""
    cells = sorted(cells)
    for campaign, policy, task, variant in cells:
        match = sa.and_(cell_counts.c.campaign == campaign, cell_counts.c.policy_name == policy,
                        cell_counts.c.task_id == task, cell_counts.c.variant_key == variant)
        conn.execute(cell_counts.delete().where(match))
        _insert_counted(conn, sa.and_(campaign_episodes.c.campaign == campaign,
                                      campaign_episodes.c.policy_name == policy, episodes.c.task_id == task,
                                      episodes.c.variant_key == variant))
    pairs.recount(conn, cells)


def rebuild(conn: sa.Connection) -> None:
    """Count every cell (and every paired seed row, :func:`assay.store.pairs.rebuild`) anew from the rows, fill the
    links' listing columns where missing (:func:`assay.store.listing.fill_links`), and mark the tables as this
    version's."""
    if conn.dialect.name == "postgresql":  # writers' increments wait: none is lost between the delete and the count
        conn.exec_driver_sql("LOCK TABLE cell_counts IN EXCLUSIVE MODE")
    conn.execute(cell_counts.delete())
    _insert_counted(conn, None)
    pairs.rebuild(conn)
    listing.fill_links(conn)
    if conn.execute(sa.select(store_meta.c.name).where(store_meta.c.name == META)).first() is None:
        conn.execute(store_meta.insert().values(name=META, value=VERSION))
    else:
        conn.execute(store_meta.update().where(store_meta.c.name == META).values(value=VERSION))
