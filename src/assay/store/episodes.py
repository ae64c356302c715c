"""Per-step episode data in Parquet: the time-aligned half of the data contract.

One file per episode, ``episodes/<key[:2]>/<key>.parquet``, or, for a campaign with ``storage: {pack: batch}``,
one file per batch with a row group per episode (:mod:`assay.store.packs`); :func:`read_episode` reads
either, giving the same table. Row ``t`` holds the
observation the policy saw at step ``t``, the action it chose, and what the
simulator returned for it (reward, success, termination, info scalars), with the
policy latency and the time ``t / control_hz``: the columns declared in
``assay.store.features`` and no others. Vectors are fixed-size lists of float64 so a
replay uses exactly the recorded numbers. The schema metadata carries the step format
(``schema_version``, checked on read), the episode key and the task id.

Files are written atomically through the store's data root (``assay.store.roots``:
a local directory or any fsspec URL, behind one interface), so a reader never
sees a partial file.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np

from assay.errors import StoreError, WriteError
from assay.lazy import deferred_module
from assay.store.features import FORMAT_KEY, REQUIRED_COLUMNS, STEP_FORMAT, check_step_columns, check_step_format
from assay.store.packs import episode_table
from assay.store.roots import Root, is_url, open_root, remove_stale_temporaries
from assay.store.trace import codecs

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
else:  # loaded at first use: listing and scoring commands read the catalog only
    pa = deferred_module("pyarrow")
    pq = deferred_module("pyarrow.parquet")

__all__ = ["Root", "build_table", "encode_episode", "episode_relpath", "is_url", "read_episode",
           "remove_stale_temporaries", "write_blob", "write_episode"]

def episode_relpath(key: str) -> str:
    """Where an episode's step file lives under the data root."""
    return f"episodes/{key[:2]}/{key}.parquet"


def _column(values: np.ndarray) -> pa.Array:
    if values.ndim == 2:
        flat = pa.array(np.ascontiguousarray(values, dtype=np.float64).reshape(-1))
        return pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
    return pa.array(values)


def build_table(columns: dict[str, np.ndarray], metadata: dict[str, Any]) -> pa.Table:
    """The Arrow table of an episode's step columns with its metadata; a missing or undeclared column, or
    misaligned lengths, refuse."""
    check_step_columns(columns)
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise StoreError(f"episode data is missing required column(s): {', '.join(missing)}")
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise StoreError(f"episode columns are not time-aligned: {lengths}")
    table = pa.table({name: _column(values) for name, values in columns.items()})
    meta = {FORMAT_KEY: str(STEP_FORMAT).encode()}
    meta.update({k.encode(): str(v).encode() for k, v in metadata.items()})
    return table.replace_schema_metadata(meta)


def write_blob(root: Root, relpath: str, data: bytes, what: str = "") -> str:
    """Write ``data`` at ``root/relpath`` atomically (temporary name, then rename); return its sha256. The one
    writer of every file Assay keeps: a reader never sees a partial file.

    On an object store (no rename) the single PUT is the atomic step. A failure is one line, ``cannot write
    <what> <where>: <reason>`` (:class:`~assay.errors.WriteError`).
    """
    try:
        return open_root(root).write(relpath, data)
    except WriteError as exc:
        if not what:
            raise
        raise WriteError(exc.where, exc.reason, what) from None


def encode_episode(table: pa.Table) -> bytes:
    """The step file's bytes: zstd Parquet, no dictionary pages, no statistics."""
    sink = pa.BufferOutputStream()
    # Dictionary pages and column statistics cost more than the zstd pass on a ~50-row table of floats
    # (they more than double the encoding time) and buy nothing here: files are read whole, never filtered.
    pq.write_table(table, sink, compression=codecs(table.column_names), use_dictionary=False, write_statistics=False)
    return bytes(sink.getvalue().to_pybytes())


def write_episode(root: Root, key: str, table: pa.Table) -> tuple[str, str]:
    """Write atomically; return (path relative to the store, sha256 of the file)."""
    relpath = episode_relpath(key)
    return relpath, write_blob(root, relpath, encode_episode(table))


def read_episode(root: Root, relpath: str, expected_sha256: str | None = None, check_format: bool = True,
                 key: str | None = None) -> pa.Table:
    """The episode's step table, from its own file or from a pack (``key`` finds it there; a pack without
    ``key`` is refused): the one reader of step data, giving a packed episode the very table its own file
    would. A one-line StoreError when the file is missing, does not match its checksum, is a pack that does not
    hold ``key`` or (unless ``check_format`` is False: the caller checks it against the catalog row) is of
    another step format."""
    data_root = open_root(root)
    where = data_root.where(relpath)
    try:
        data = data_root.read(relpath)
    except FileNotFoundError:
        raise StoreError(f"episode file {where} does not exist") from None
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
        raise StoreError(f"episode file {where} does not match its recorded checksum (corrupted or truncated)")
    try:
        table = episode_table(data, key)
    except StoreError as exc:
        raise StoreError(f"step file {where}: {exc}") from None
    if check_format:
        check_step_format(table.schema.metadata, where)
    return table
