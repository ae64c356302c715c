"""What a step file must be before it is trusted: checked when it is read and before a resume skips it.

A file is trusted when it matches its catalog row: the recorded SHA-256, the current
``schema_version``, the episode key in its metadata, every required column, and one
row per recorded step. A file that fails any of these is treated like a damaged one:
readers raise :class:`StoreError`, a resume forgets the episode and re-runs it.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.parquet as pq

from assay.store.episodes import REQUIRED_COLUMNS
from assay.store.records import SCHEMA_VERSION
from assay.store.roots import Root, open_root


def table_problem(schema: pa.Schema, rows: int, key: str, steps: int) -> str | None:
    """Why a step table does not belong to the catalog row (``key``, ``steps``), or None."""
    meta = schema.metadata or {}
    version = meta.get(b"schema_version", b"").decode("utf-8", "replace")
    if version != str(SCHEMA_VERSION):
        return f"schema_version {version or 'missing'}, expected {SCHEMA_VERSION}"
    stored = meta.get(b"episode_key", b"").decode("utf-8", "replace")
    if stored != key:
        return f"episode_key {stored or 'missing'} is not the catalog's {key}"
    missing = [column for column in REQUIRED_COLUMNS if column not in schema.names]
    if missing:
        return f"missing required column(s) {', '.join(missing)}"
    if rows != steps:
        return f"{rows} rows, the catalog records {steps} steps"
    return None


def file_problem(root: Root, relpath: str, sha256: str | None, key: str, steps: int) -> str | None:
    """Why the episode file cannot be trusted (missing, checksum, schema, key, columns, rows), or None."""
    try:
        data = open_root(root).read(relpath)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        return "checksum mismatch (corrupted or truncated)"
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        return f"not a readable Parquet file ({exc})"
    return table_problem(parquet.schema_arrow, parquet.metadata.num_rows, key, steps)
