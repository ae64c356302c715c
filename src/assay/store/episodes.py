"""Per-step episode data in Parquet: the time-aligned half of the data contract.

One file per episode, ``episodes/<key[:2]>/<key>.parquet``. Row ``t`` holds the
observation the policy saw at step ``t``, the action it chose, and what the
simulator returned for it (reward, success, termination, info scalars), with the
policy latency and the time ``t / control_hz``. Vectors are fixed-size lists of
float64 so a replay uses exactly the recorded numbers. The schema metadata
carries ``schema_version``, the episode key and the task id.

Files are written atomically: to a temporary name beside the target, then
renamed, so a reader never sees a partial file.

The root is a local directory (a ``Path``) or, for a cluster, any fsspec URL
(``s3://bucket/prefix``, ``gs://...``, ``file:///shared/...``) that every node can
reach. On a URL the file is built in memory and written whole: to a temporary
then renamed on file systems, in one put on object stores (an object appears
whole or not at all).
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

Root = str | Path


def is_url(root: Root) -> bool:
    return isinstance(root, str) and "://" in root


def _filesystem(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError:
        raise StoreError(f"step data at {url} needs fsspec: pip install 'assay[ray]'") from None
    try:
        fs, base = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise StoreError(f"cannot open step-data location {url}: {exc}") from None
    return fs, base.rstrip("/")


def _local_fs(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def _tmp_suffix() -> str:
    return f"{_TMP_MARK}{socket.gethostname()}-{os.getpid()}"


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


def write_blob(root: Root, relpath: str, data: bytes) -> str:
    """Write ``data`` at ``root/relpath`` atomically (temporary name, then rename); return its sha256.

    On an object store (no rename) the single PUT is the atomic step.
    """
    if is_url(root):
        fs, base = _filesystem(str(root))
        final = f"{base}/{relpath}"
        try:
            fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
            if _local_fs(fs):
                tmp = final + _tmp_suffix()
                fs.pipe_file(tmp, data)
                fs.mv(tmp, final)
            else:
                fs.pipe_file(final, data)
        except OSError as exc:
            raise StoreError(f"cannot write {root}/{relpath}: {exc}") from None
        return hashlib.sha256(data).hexdigest()
    final = Path(root) / relpath
    tmp = final.with_name(f"{final.name}{_tmp_suffix()}")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, final)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write {final}: {exc.strerror or exc}") from None
    return hashlib.sha256(data).hexdigest()


def write_episode(root: Root, key: str, table: pa.Table) -> tuple[str, str]:
    """Write atomically; return (path relative to the store, sha256 of the file)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    relpath = episode_relpath(key)
    return relpath, write_blob(root, relpath, sink.getvalue().to_pybytes())


def read_episode(root: Root, relpath: str, expected_sha256: str | None = None) -> pa.Table:
    if is_url(root):
        fs, base = _filesystem(str(root))
        try:
            data = fs.cat_file(f"{base}/{relpath}")
        except FileNotFoundError:
            raise StoreError(f"episode file {root}/{relpath} does not exist") from None
        if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
            raise StoreError(f"episode file {root}/{relpath} does not match its recorded checksum (corrupted or truncated)")
        return pq.read_table(pa.BufferReader(data))
    path = Path(root) / relpath
    if not path.exists():
        raise StoreError(f"episode file {path} does not exist")
    if expected_sha256 is not None and _sha256(path) != expected_sha256:
        raise StoreError(f"episode file {path} does not match its recorded checksum (corrupted or truncated)")
    return pq.read_table(path)


def check_episode_file(root: Root, relpath: str, expected_sha256: str | None) -> str | None:
    """Why the episode file cannot be trusted (missing, or not matching its checksum), or None if it is intact.

    The whole file is hashed: a size or mtime check would miss a flipped byte, and a
    file that fails here is re-run instead of scored.
    """
    if is_url(root):
        fs, base = _filesystem(str(root))
        try:
            data = fs.cat_file(f"{base}/{relpath}")
        except FileNotFoundError:
            return "missing"
        actual = hashlib.sha256(data).hexdigest()
    else:
        path = Path(root) / relpath
        try:
            actual = _sha256(path)
        except FileNotFoundError:
            return "missing"
        except OSError as exc:
            return f"unreadable ({exc.strerror or exc})"
    if expected_sha256 is not None and actual != expected_sha256:
        return "checksum mismatch (corrupted or truncated)"
    return None


def remove_stale_temporaries(root: Root) -> int:
    """Delete temporaries left by dead writers on this host; return how many were removed."""
    if is_url(root):
        fs, base = _filesystem(str(root))
        names = fs.glob(f"{base}/episodes/*/*{_TMP_MARK}*") + fs.glob(f"{base}/campaigns/*/*{_TMP_MARK}*")
        remove = fs.rm_file
    else:
        names = [str(p) for folder in ("episodes", "campaigns") for p in (Path(root) / folder).glob(f"*/*{_TMP_MARK}*")]
        remove = lambda name: Path(name).unlink(missing_ok=True)  # noqa: E731
    host = socket.gethostname()
    removed = 0
    for name in names:
        owner = name.rsplit(_TMP_MARK, 1)[1]
        owner_host, _, pid = owner.rpartition("-")
        if owner_host == host and pid.isdigit() and not _alive(int(pid)):
            remove(name)
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
