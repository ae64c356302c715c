"""Store: the data contract (episode records, per-step Parquet), the SQL catalog, provenance.

May import ``assay.spec`` only.

Every name is loaded on first use (PEP 562), as ``assay.metrics``' are: a process that needs one module of the
store (a Ray node's probe of the data root needs ``store.roots``) does not import the catalog's SQLAlchemy,
pyarrow and the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assay.lazy import lazy_names

if TYPE_CHECKING:
    from assay.store.catalog import CampaignRow, Catalog, IntegrityRow, redact_url
    from assay.store.columns import step_matrix
    from assay.store.episodes import (
        build_table,
        encode_episode,
        episode_relpath,
        read_episode,
        write_blob,
        write_episode,
    )
    from assay.store.features import REQUIRED_COLUMNS, STEP_FEATURES, STEP_FORMAT, Feature, check_step_format
    from assay.store.locking import run_lock
    from assay.store.provenance import provenance, renderer_counts, renderer_label, renderer_notes, renderer_of
    from assay.store.records import SCHEMA_VERSION, EpisodeRecord, Outcome
    from assay.store.store import ResumePlan, Store
    from assay.store.video import read_video, step_frames, video_relpath, write_video

_LAZY = {
    "assay.store.catalog": ("CampaignRow", "Catalog", "IntegrityRow", "redact_url"),
    "assay.store.columns": ("step_matrix",),
    "assay.store.episodes": (
        "build_table", "encode_episode", "episode_relpath", "read_episode", "write_blob", "write_episode"
    ),
    "assay.store.features": ("REQUIRED_COLUMNS", "STEP_FEATURES", "STEP_FORMAT", "Feature", "check_step_format"),
    "assay.store.locking": ("run_lock",),
    "assay.store.provenance": ("provenance", "renderer_counts", "renderer_label", "renderer_notes", "renderer_of"),
    "assay.store.records": ("SCHEMA_VERSION", "EpisodeRecord", "Outcome"),
    "assay.store.store": ("ResumePlan", "Store"),
    "assay.store.video": ("read_video", "step_frames", "video_relpath", "write_video"),
}

__all__ = [
    "CampaignRow",
    "Catalog",
    "EpisodeRecord",
    "Feature",
    "IntegrityRow",
    "Outcome",
    "REQUIRED_COLUMNS",
    "ResumePlan",
    "SCHEMA_VERSION",
    "STEP_FEATURES",
    "STEP_FORMAT",
    "Store",
    "build_table",
    "check_step_format",
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
    "step_matrix",
    "redact_url",
    "run_lock",
    "video_relpath",
    "write_blob",
    "write_episode",
    "write_video",
]

__getattr__ = lazy_names(__name__, _LAZY, globals())
