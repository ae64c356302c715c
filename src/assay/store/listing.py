"""A campaign's episodes page by page, newest first, from one covering index (keyset pagination).

Each link (``campaign_episodes``) carries its episode's outcome and when it was made (``linked_at``, UTC ISO 8601
to the microsecond), and the index ``(campaign, policy_name, outcome, linked_at, key)`` keeps the links of one
(policy, outcome) in the order they were made. A page of ``limit`` episodes after a cursor is then one range of
that index per (policy, outcome) asked for, each read backwards from the cursor for at most ``limit + 1`` entries,
merged: its cost is bounded by the number of policies and outcomes and by the page, never by the campaign.

* The cursor is an episode key (``after``): the next page holds the links made before that episode's link (ties,
  links of one transaction, broken by key, descending). Links made meanwhile are newer than every cursor, so a
  walk through the pages started before them sees each older episode exactly once, whatever is inserted.
* :func:`listed` fills a new link's two columns; links made before them (or by an older Assay) are filled from
  their episodes when the catalog opens (:func:`fill_links`: a partial index of unfilled links makes the check
  free when there are none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import sqlalchemy as sa

from assay.store.schema import campaign_episodes, episodes


class _Outcome(Protocol):
    @property
    def outcome(self) -> str: ...


def linked_now() -> str:
    """The time a link is made, as ``linked_at`` holds it (sorts as text)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def listed(rows: Sequence[dict[str, Any]], facts: Mapping[str, _Outcome]) -> list[dict[str, Any]]:
    """New link rows with their listing columns: the episode's outcome (from ``facts``, by key) and now."""
    now = linked_now()
    return [row | {"outcome": facts[row["key"]].outcome if row["key"] in facts else None, "linked_at": now}
            for row in rows]


_UNFILLED = sa.or_(campaign_episodes.c.outcome.is_(None), campaign_episodes.c.linked_at.is_(None))


def fill_links(conn: sa.Connection) -> int:
    """Fill the listing columns of links that lack them from their episodes (outcome; ``created_at`` as the time
    the link was made); how many links were filled."""
    outcome = sa.select(episodes.c.outcome).where(episodes.c.key == campaign_episodes.c.key).scalar_subquery()
    made = sa.select(episodes.c.created_at).where(episodes.c.key == campaign_episodes.c.key).scalar_subquery()
    if conn.execute(sa.select(campaign_episodes.c.key).where(_UNFILLED).limit(1)).first() is None:
        return 0
    done = conn.execute(campaign_episodes.update().where(_UNFILLED)
                        .values(outcome=sa.func.coalesce(campaign_episodes.c.outcome, outcome),
                                linked_at=sa.func.coalesce(campaign_episodes.c.linked_at, made)))
    return int(done.rowcount or 0)


@dataclass(frozen=True)
class Page:
    """One page of a campaign's links, newest first: their keys, and the cursor of the next page (None: last)."""

    keys: tuple[str, ...]
    next: str | None


def cursor_of(conn: sa.Connection, campaign: str, key: str) -> tuple[str, str] | None:
    """``(linked_at, key)`` of the campaign's link to ``key``, the position a page after it starts from; None when
    the campaign has no such link."""
    row = conn.execute(sa.select(campaign_episodes.c.linked_at).where(
        campaign_episodes.c.campaign == campaign, campaign_episodes.c.key == key)).first()
    return None if row is None else (str(row.linked_at or ""), key)


def page(conn: sa.Connection, campaign: str, cells: Sequence[tuple[str, str]], after: tuple[str, str] | None,
         limit: int) -> Page:
    """The newest ``limit`` links of ``campaign`` among ``cells`` ((policy name, outcome) pairs) made before
    ``after`` (a :func:`cursor_of`; None: from the newest), one index range per cell."""
    found: list[tuple[str, str]] = []
    for policy, outcome in sorted(set(cells)):
        query = sa.select(campaign_episodes.c.linked_at, campaign_episodes.c.key).where(
            campaign_episodes.c.campaign == campaign, campaign_episodes.c.policy_name == policy,
            campaign_episodes.c.outcome == outcome)
        if after is not None:
            at, key = after
            query = query.where(sa.or_(campaign_episodes.c.linked_at < at,
                                       sa.and_(campaign_episodes.c.linked_at == at, campaign_episodes.c.key < key)))
        query = query.order_by(campaign_episodes.c.linked_at.desc(), campaign_episodes.c.key.desc()).limit(limit + 1)
        found += [(str(r.linked_at or ""), str(r.key)) for r in conn.execute(query)]
    found.sort(reverse=True)
    shown = found[:limit]
    return Page(tuple(key for _, key in shown), shown[-1][1] if len(found) > limit else None)

