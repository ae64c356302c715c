"""Pack files: a batch's step tables in one Parquet file, one row group per episode (``storage: {pack: batch}``).

A campaign that sets ``storage: {pack: batch}`` has each worker write the episodes of a batch that share
one step schema (nearly always all of them) into one file, ``packs/<id[:2]>/<id>.parquet``, where ``id``
hashes the sorted keys of its episodes. Row group ``i`` holds episode ``i``'s rows, with the columns and
types its own step file would have. The file's schema metadata holds the step format
(``schema_version``) and the pack's index, ``assay.pack``: JSON naming, per episode key, its row group
and the metadata its own file would carry (key, task, seed, policy, the seal: see
:mod:`assay.store.validation`). The catalog row of a packed episode names the pack as its ``data_path``;
its key finds its row group through the index. Its ``data_sha256`` and ``data_bytes`` are the pack's:
every episode of a pack shares them, so damage anywhere in a pack makes each of its episodes untrusted
(``assay store verify`` names them all), and a resume's size check works as for an episode's own file.

:func:`episode_table` (through :func:`assay.store.episodes.read_episode`, the one reader) gives a packed
episode's table exactly as its own file would read: same columns, types, values and metadata.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from assay.errors import StoreError
from assay.lazy import deferred_module
from assay.store.features import FORMAT_KEY, STEP_FORMAT
from assay.store.trace import codecs

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
else:  # loaded at first use: listing and scoring commands read the catalog only
    pa = deferred_module("pyarrow")
    pq = deferred_module("pyarrow.parquet")

PACK_KEY = b"assay.pack"
PACK_FORMAT = 1  # the layout of the index; a reader refuses another
PACK_DIR = "packs"


def pack_relpath(keys: Sequence[str]) -> str:
    """Where the pack of the episodes ``keys`` lives: named after its sorted keys, so writing the same
    episodes again (a resume re-running the whole batch) replaces the same file."""
    digest = hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:24]
    return f"{PACK_DIR}/{digest[:2]}/{digest}.parquet"


def _episode_key(table: pa.Table) -> str:
    key = (table.schema.metadata or {}).get(b"episode_key")
    if not key:
        raise StoreError("a packed step table needs its episode_key metadata")
    return str(key.decode())


def same_schema_groups(tables: Sequence[pa.Table]) -> list[list[int]]:
    """The indices of ``tables`` grouped by their step schema without metadata, in first-seen order: one pack
    per group (the episodes of a batch nearly always share one; an ``info.*`` or ``trace.*`` column only some
    of them have makes another)."""
    groups: dict[pa.Schema, list[int]] = {}
    for index, table in enumerate(tables):
        plain = table.schema.remove_metadata()
        for schema, members in groups.items():
            if schema.equals(plain):
                members.append(index)
                break
        else:
            groups[plain] = [index]
    return list(groups.values())


def encode_pack(tables: Sequence[pa.Table]) -> bytes:
    """The pack file's bytes: each table a row group (zstd, no dictionary pages, no statistics, as an
    episode's own file), the index in the file's metadata; the tables must share one schema."""
    if not tables:
        raise StoreError("a pack needs at least one episode")
    episodes = {_episode_key(table): {"row_group": i, "metadata": {k.decode(): v.decode()
                                                                   for k, v in (table.schema.metadata or {}).items()}}
                for i, table in enumerate(tables)}
    if len(episodes) != len(tables):
        raise StoreError("a pack holds each episode once")
    index = {"format": PACK_FORMAT, "episodes": episodes}
    meta = {FORMAT_KEY: str(STEP_FORMAT).encode(), PACK_KEY: json.dumps(index, sort_keys=True).encode()}
    schema = tables[0].schema.remove_metadata().with_metadata(meta)
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema, compression=codecs(schema.names), use_dictionary=False,
                          write_statistics=False) as writer:
        for table in tables:
            if not table.schema.remove_metadata().equals(schema.remove_metadata()):
                raise StoreError(f"episode {_episode_key(table)} has another step schema than its pack")
            writer.write_table(table.replace_schema_metadata(meta), row_group_size=max(1, table.num_rows))
    return bytes(sink.getvalue().to_pybytes())


class Located(NamedTuple):
    """An episode in a step file: its schema with the metadata of its own file, its rows, and its row group
    (None: the file is the episode's own)."""

    schema: pa.Schema
    rows: int
    row_group: int | None


def pack_index(metadata: dict[bytes, bytes] | None) -> dict[str, Any] | None:
    """The pack's index (episode key -> row group and metadata), or None when the file is an episode's own;
    StoreError when the index is unreadable or of another layout."""
    raw = (metadata or {}).get(PACK_KEY)
    if raw is None:
        return None
    try:
        index = json.loads(raw)
        episodes = index["episodes"]
        if index.get("format") != PACK_FORMAT or not isinstance(episodes, dict):
            raise ValueError(f"pack format {index.get('format')}, this Assay reads {PACK_FORMAT}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(f"unreadable pack index ({exc})") from None
    return episodes


def locate(schema: pa.Schema, footer: pq.FileMetaData, key: str | None) -> Located:
    """Where episode ``key`` is in a step file (its Arrow schema and Parquet footer): the whole file when it is the
    episode's own, its row group when it is a pack; StoreError when a pack does not hold it (or no key is given
    for a pack)."""
    index = pack_index(schema.metadata)
    if index is None:
        return Located(schema, footer.num_rows, None)
    entry = index.get(key) if key is not None else None
    if entry is None:
        raise StoreError(f"episode {key} is not in the pack" if key else "a pack file is read by episode key")
    try:
        group = int(entry["row_group"])
        meta = {str(k).encode(): str(v).encode() for k, v in dict(entry["metadata"]).items()}
        rows = footer.row_group(group).num_rows
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise StoreError(f"the pack's index entry of episode {key} is unreadable ({exc})") from None
    return Located(schema.with_metadata(meta), rows, group)


def episode_table(data: bytes, key: str | None) -> pa.Table:
    """The step table of episode ``key`` in the step file ``data`` (its own file, or a pack), exactly as its own
    file reads; StoreError when a pack does not hold it."""
    # Read on this thread, never Arrow's pool (nor pq.read_table's dataset scan): the reader holds ``data``, and
    # a pool thread that drops it last must take the GIL; at interpreter exit that aborts the process (SIGABRT,
    # "terminate called without an active exception"; apache/arrow#34314). Step tables are small.
    parquet = pq.ParquetFile(pa.BufferReader(data))
    found = locate(parquet.schema_arrow, parquet.metadata, key)
    if found.row_group is None:
        return parquet.read(use_threads=False)
    return parquet.read_row_group(found.row_group, use_threads=False).replace_schema_metadata(found.schema.metadata)
