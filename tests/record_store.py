"""A store holding hand-built episode records and a resolved campaign spec (no simulator, no step files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.store import EpisodeRecord, Store


def fake_store(root: Path, campaign: str, records: list[EpisodeRecord], spec: dict[str, Any] | None = None) -> Path:
    """Catalog rows for ``records`` linked to ``campaign`` (whose resolved spec is ``spec``), in a new store."""
    with Store(root, create=True) as store:
        store.catalog.save_campaign(campaign, f"hash-{campaign}", spec or {"campaign": {"name": campaign}})
        store.catalog.add_many([r.__class__(**{**r.__dict__, "campaign": campaign}) for r in records])
        store.catalog.link(campaign, [(r.key, r.policy_name) for r in records])
    return root
