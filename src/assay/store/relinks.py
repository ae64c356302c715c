"""A repaired episode keeps every campaign's link: links remembered when an episode is forgotten, restored with its row.

Campaigns share episodes (the campaign name is not part of the key). When a resume finds a shared episode damaged,
it forgets it (row, every campaign's link) and re-runs it for its own campaign; the other campaigns would lose the
episode for good, show as incomplete, and ``store prune --campaign`` would no longer see it as shared. So
:meth:`~assay.store.catalog.Catalog.forget` keeps each link it deletes in ``forgotten_links``
(:func:`remember`), and the transaction that inserts the episode's new row links it to every campaign remembered
there, counts it in their cells and clears the memory (:func:`restore`): all of it commits with the row, or none.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from assay.store.schema import campaign_episodes, forgotten_links

CHUNK = 500  # keys per IN list


def remember(conn: sa.Connection, keys: Sequence[str]) -> None:
    """Keep the links of ``keys`` (about to be deleted) until the episodes are recorded again."""
    for start in range(0, len(keys), CHUNK):
        chunk = keys[start:start + CHUNK]
        kept = {(r.key, r.campaign) for r in conn.execute(
            sa.select(forgotten_links.c.key, forgotten_links.c.campaign).where(forgotten_links.c.key.in_(chunk)))}
        links = conn.execute(sa.select(campaign_episodes.c.key, campaign_episodes.c.campaign,
                                       campaign_episodes.c.policy_name).where(campaign_episodes.c.key.in_(chunk)))
        rows = [{"key": r.key, "campaign": r.campaign, "policy_name": r.policy_name} for r in links
                if (r.key, r.campaign) not in kept]
        if rows:
            conn.execute(forgotten_links.insert(), rows)


def restore(conn: sa.Connection, keys: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    """The remembered links of ``keys`` (episodes whose rows are inserted in this transaction), by campaign, as
    (key, policy name) pairs; they are deleted here, and the caller links them in the same transaction."""
    found: dict[str, list[tuple[str, str]]] = {}
    for start in range(0, len(keys), CHUNK):
        chunk = keys[start:start + CHUNK]
        rows = list(conn.execute(sa.select(forgotten_links).where(forgotten_links.c.key.in_(chunk))))
        for row in rows:
            found.setdefault(str(row.campaign), []).append((str(row.key), str(row.policy_name)))
        if rows:
            conn.execute(forgotten_links.delete().where(forgotten_links.c.key.in_(chunk)))
    return found
