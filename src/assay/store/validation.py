"""What a step file must be before it is trusted: checked when it is read and before a resume skips it.

A file is trusted when it matches its catalog row: the recorded SHA-256, the current
``schema_version``, the episode key in its metadata, every required column, one
row per recorded step, and its **seal**: the episode's summary (outcome, steps,
total return, success step) that the worker wrote into the file's metadata with the
file, which the catalog row must repeat. The checksum in the row covers the file, not
the row; the seal covers the row: a row edited after the fact (a timeout turned into a
success, a return set to 1e9) no longer matches its own file. A file that fails any
of these is treated like a damaged one: readers raise :class:`StoreError`, a resume
forgets the episode and re-runs it, ``assay store verify`` names the field. Files
written before seals existed carry none; they are checked on everything else.

A packed episode (:mod:`assay.store.packs`) is checked the same way on its row group: the checksum is
the pack's (shared by its episodes, so damage to a pack fails each of them), the key, columns, rows and
seal its own, from the pack's index. A pack is read and hashed once however many of its episodes are
checked together (``cache``).
"""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING, NamedTuple

import sqlalchemy as sa

from assay.errors import StoreError
from assay.lazy import deferred_module
from assay.store.features import FORMAT_KEY, REQUIRED_COLUMNS, STEP_FORMAT
from assay.store.packs import PACK_DIR, locate, pack_index
from assay.store.roots import Root, open_root
from assay.store.schema import episodes, store_meta
from assay.store.summaries import FACT_COLUMNS, StepFacts, step_facts

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
else:  # loaded at first use: listing and scoring commands read the catalog only
    pa = deferred_module("pyarrow")
    pq = deferred_module("pyarrow.parquet")


class Summary(NamedTuple):
    """An episode's summary as the catalog row holds it and the step file's seal repeats it."""

    outcome: str
    steps: int
    total_return: float
    success_step: int | None


SEAL_FIELDS = Summary._fields  # the metadata names of the seal, one per summary field
SEAL_META = "seal_version"  # store_meta: whether every step file of the store is sealed (assay.store.checks)
SEALED, LEGACY = "1", "0"  # every step file sealed; a legacy store, which may hold files from before seals


def mark_seals(conn: sa.Connection) -> None:
    """Write the store's seal version once, when its catalog is created or first opened by an Assay that keeps it:
    sealed for a catalog whose rows name no step file, legacy for one whose rows do (they were written before the
    marker, maybe before seals). Never changed here."""
    if conn.execute(sa.select(store_meta.c.value).where(store_meta.c.name == SEAL_META)).first() is not None:
        return
    with_files = conn.execute(sa.select(episodes.c.key).where(episodes.c.data_path.is_not(None)).limit(1)).first()
    conn.execute(store_meta.insert().values(name=SEAL_META, value=LEGACY if with_files else SEALED))


def seal(summary: Summary) -> dict[str, str]:
    """The step file's metadata entries that seal ``summary`` (the return as ``repr``: it reads back exactly)."""
    return {"outcome": summary.outcome, "steps": str(summary.steps), "total_return": repr(float(summary.total_return)),
            "success_step": "" if summary.success_step is None else str(summary.success_step)}


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def seal_problem(meta: dict[bytes, bytes], summary: Summary) -> str | None:
    """Which sealed field of the file's metadata the catalog row contradicts, or None (also for an unsealed file)."""
    text = {name: meta.get(name.encode()) for name in SEAL_FIELDS}
    if any(value is None for value in text.values()):
        return None
    found = {name: value.decode("utf-8", "replace") for name, value in text.items() if value is not None}
    given = seal(summary)
    for name in SEAL_FIELDS:
        if name == "total_return":
            try:
                equal = _same(float(found[name]), float(summary.total_return))
            except ValueError:
                equal = False
        else:
            equal = found[name] == given[name]
        if not equal:
            return (f"sealed {name} {found[name] or 'none'} in the step file, {given[name] or 'none'} in the "
                    "catalog row (the row was changed after the episode was recorded)")
    return None


def is_sealed(schema: pa.Schema) -> bool:
    """Whether the step file carries a seal (files written before seals existed do not)."""
    meta = schema.metadata or {}
    return all(name.encode() in meta for name in SEAL_FIELDS)


def table_problem(schema: pa.Schema, rows: int, key: str, steps: int, summary: Summary | None = None) -> str | None:
    """Why a step table does not belong to the catalog row (``key``, ``steps``, its ``summary``), or None."""
    meta = schema.metadata or {}
    version = meta.get(FORMAT_KEY, b"").decode("utf-8", "replace")
    if version != str(STEP_FORMAT):
        return f"{FORMAT_KEY.decode()} {version or 'missing'}, expected {STEP_FORMAT}"
    stored = meta.get(b"episode_key", b"").decode("utf-8", "replace")
    if stored != key:
        return f"episode_key {stored or 'missing'} is not the catalog's {key}"
    missing = [column for column in REQUIRED_COLUMNS if column not in schema.names]
    if missing:
        return f"missing required column(s) {', '.join(missing)}"
    if rows != steps:
        return f"{rows} rows, the catalog records {steps} steps"
    return seal_problem(meta, summary) if summary is not None else None


def file_problem(root: Root, relpath: str, sha256: str | None, key: str, steps: int,
                 summary: Summary | None = None) -> str | None:
    """Why the episode file cannot be trusted (missing, no checksum or another, schema, key, columns, rows, seal),
    or None."""
    return file_check(root, relpath, sha256, key, steps, summary).problem


class Footer(NamedTuple):
    """A step file as read and hashed once (not its bytes: a cache holds this): its schema, its Parquet footer, and
    what its steps say of each episode's summary (:mod:`assay.store.summaries`), by row group (None: the file is
    the episode's own); a missing entry, or None, where the columns to recompute it from are not there."""

    schema: pa.Schema
    metadata: pq.FileMetaData
    facts: dict[int | None, StepFacts | None]


# A step file as read and hashed once: the problem of the file as a whole, else its footer.
Opened = tuple[str, None] | tuple[None, Footer]


class Checked(NamedTuple):
    """What :func:`file_check` found of one episode's step data: why it cannot be trusted (or None), whether it
    carries a seal (False also when it cannot be read), and what its steps say (None when unread)."""

    problem: str | None
    sealed: bool
    facts: StepFacts | None


def _open(root: Root, relpath: str, sha256: str | None) -> Opened:
    try:
        data = open_root(root).read(relpath)
    except FileNotFoundError:
        return "missing", None
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})", None
    if sha256 is None:
        return "no checksum in the catalog row (it names a step file, so it must record the file's SHA-256)", None
    if hashlib.sha256(data).hexdigest() != sha256:
        return "checksum mismatch (corrupted or truncated)", None
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        return None, Footer(parquet.schema_arrow, parquet.metadata, _facts(parquet))
    except (pa.ArrowException, OSError) as exc:
        return f"not a readable Parquet file ({exc})", None


def _facts(parquet: pq.ParquetFile) -> dict[int | None, StepFacts | None]:
    """The step facts of the file (its own episode's) or of each row group (a pack's episodes); {} when a column
    they need is missing or the index is unreadable (the other checks name why)."""
    schema = parquet.schema_arrow  # built anew on each access
    if not set(FACT_COLUMNS) <= set(schema.names):
        return {}
    columns = list(FACT_COLUMNS)  # one thread: a file of an episode is small, and threads cost more than they save
    try:
        if pack_index(schema.metadata) is None:
            return {None: step_facts(parquet.read(columns=columns, use_threads=False))}
    except StoreError:
        return {}
    return {group: step_facts(parquet.read_row_group(group, columns=columns, use_threads=False))
            for group in range(parquet.metadata.num_row_groups)}


def file_check(root: Root, relpath: str, sha256: str | None, key: str, steps: int,
               summary: Summary | None = None, cache: dict[tuple[str, str | None], Opened] | None = None,
               ) -> Checked:
    """:func:`file_problem`, whether the file carries a seal, and what its steps say of the summary. ``cache``
    keeps each file opened (by path and checksum), so a pack checked for each of its episodes is read once."""
    opened = cache.get((relpath, sha256)) if cache is not None else None
    if opened is None:
        opened = _open(root, relpath, sha256)
        if cache is not None and relpath.startswith(PACK_DIR + "/"):  # only a pack is asked for again
            cache[(relpath, sha256)] = opened
    problem, footer = opened
    if footer is None:
        return Checked(problem, False, None)
    try:
        found = locate(footer.schema, footer.metadata, key)
    except StoreError as exc:
        return Checked(str(exc), False, None)
    return Checked(table_problem(found.schema, found.rows, key, steps, summary), is_sealed(found.schema),
                   footer.facts.get(found.row_group))
