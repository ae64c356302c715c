"""What a resume asks of a campaign's links before linking what it kept: how many it holds already.

A rerun keeps every recorded episode of its plan and links each to the campaign (an episode another campaign
recorded becomes this one's too). For a finished campaign every one is linked already: counting them, a chunk of
keys per statement, lets the rerun skip reading a million links back to find none missing.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from assay.errors import StoreError
from assay.store.chunks import WIDE_CHUNK, among, chunked
from assay.store.schema import campaign_episodes
from assay.store.store import Store


def linked_count(store: Store, campaign: str, keys: Sequence[str]) -> int:
    """How many of ``keys`` (distinct) ``campaign`` links already, counted by the database."""
    found = 0
    try:
        with store.catalog.engine.connect() as conn:
            for chunk in chunked(keys, WIDE_CHUNK):
                found += int(conn.execute(sa.select(sa.func.count()).select_from(campaign_episodes).where(
                    campaign_episodes.c.campaign == campaign,
                    among(conn.dialect.name, campaign_episodes.c.key, chunk))).scalar() or 0)
    except SQLAlchemyError as exc:
        raise StoreError(f"catalog {store.catalog.display_url}: counting links failed: {type(exc).__name__}") from None
    return found
