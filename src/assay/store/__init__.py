"""Store: the data contract (episode records, per-step Parquet), the SQL catalog, provenance.

May import ``assay.spec`` only.
"""

from assay.store.catalog import CampaignRow, Catalog, IntegrityRow, redact_url
from assay.store.episodes import (
    REQUIRED_COLUMNS,
    build_table,
    encode_episode,
    episode_relpath,
    read_episode,
    write_blob,
    write_episode,
)
from assay.store.locking import run_lock
from assay.store.provenance import provenance, renderer_counts, renderer_label, renderer_notes, renderer_of
from assay.store.records import SCHEMA_VERSION, EpisodeRecord, Outcome
from assay.store.store import ResumePlan, Store
from assay.store.video import read_video, step_frames, video_relpath, write_video

__all__ = [
    "CampaignRow",
    "Catalog",
    "EpisodeRecord",
    "IntegrityRow",
    "Outcome",
    "REQUIRED_COLUMNS",
    "ResumePlan",
    "SCHEMA_VERSION",
    "Store",
    "build_table",
    "encode_episode",
    "episode_relpath",
    "provenance",
    "renderer_counts",
    "renderer_label",
    "renderer_notes",
    "renderer_of",
    "read_episode",
    "read_video",
    "step_frames",
    "redact_url",
    "run_lock",
    "video_relpath",
    "write_blob",
    "write_episode",
    "write_video",
]
