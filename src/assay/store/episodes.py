"""Per-step episode data in Parquet: the time-aligned half of the data contract.

One file per episode, ``episodes/<key[:2]>/<key>.parquet``. Row ``t`` holds the
observation the policy saw at step ``t``, the action it chose, and what the
simulator returned for it (reward, success, termination, info scalars), with the
policy latency and the time ``t / control_hz``. Vectors are fixed-size lists of
float64 so a replay uses exactly the recorded numbers. The schema metadata
carries ``schema_version``, the episode key and the task id.

Files are written atomically: to a temporary name beside the target, then
renamed, so a reader never sees a partial file.
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from assay.errors import StoreError
from assay.store.records import SCHEMA_VERSION

REQUIRED_COLUMNS = ("step", "t", "observation.state", "action", "reward", "success", "terminated", "truncated")
_TMP_MARK = ".tmp-"


def episode_relpath(key: str) -> str:
    return f"episodes/{key[:2]}/{key}.parquet"


def _column(values: np.ndarray) -> pa.Array:
    if values.ndim == 2:
        flat = pa.array(np.ascontiguousarray(values, dtype=np.float64).reshape(-1))
        return pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
    return pa.array(values)


def build_table(columns: dict[str, np.ndarray], metadata: dict[str, Any]) -> pa.Table:
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise StoreError(f"episode data is missing required column(s): {', '.join(missing)}")
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise StoreError(f"episode columns are not time-aligned: {lengths}")
    table = pa.table({name: _column(values) for name, values in columns.items()})
    meta = {b"schema_version": str(SCHEMA_VERSION).encode()}
    meta.update({k.encode(): str(v).encode() for k, v in metadata.items()})
    return table.replace_schema_metadata(meta)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_episode(root: Path, key: str, table: pa.Table) -> tuple[str, str]:
    """Write atomically; return (path relative to the store, sha256 of the file)."""
    relpath = episode_relpath(key)
    final = root / relpath
    tmp = final.with_name(f"{final.name}{_TMP_MARK}{socket.gethostname()}-{os.getpid()}")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp, compression="zstd")
        checksum = _sha256(tmp)
        os.replace(tmp, final)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write episode file {final}: {exc}") from None
    return relpath, checksum


def read_episode(root: Path, relpath: str, expected_sha256: str | None = None) -> pa.Table:
    path = root / relpath
    if not path.exists():
        raise StoreError(f"episode file {path} does not exist")
    if expected_sha256 is not None and _sha256(path) != expected_sha256:
        raise StoreError(f"episode file {path} does not match its recorded checksum (corrupted or truncated)")
    return pq.read_table(path)


def remove_stale_temporaries(root: Path) -> int:
    """Delete temporaries left by dead writers on this host; return how many were removed."""
    episodes = root / "episodes"
    if not episodes.exists():
        return 0
    host = socket.gethostname()
    removed = 0
    for tmp in episodes.glob(f"*/*{_TMP_MARK}*"):
        owner = tmp.name.rsplit(_TMP_MARK, 1)[1]
        owner_host, _, pid = owner.rpartition("-")
        if owner_host == host and pid.isdigit() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
