"""One store per catalog and per data root: a store ID, and refusals when two stores would meet.

Two stores sharing one ``--data`` directory, or two store directories sharing one
(PostgreSQL) catalog, overwrite each other's step files and rows: a resume of one
then finds the other's files under its keys (checksum mismatches) and re-runs them,
breaking the other in turn. So each store has an ID (a random UUID, made when the
store is first created), kept in three places:

* ``store_meta.store_id`` in the catalog (with ``store_root``, where that store lives,
  for messages); claimed in one transaction, so two stores created at once on one
  catalog cannot both win;
* ``STORE/store.json`` (``store_id``), beside the catalog URL it already names;
* a marker ``.assay-store.json`` at the top of the data root (the store directory
  itself by default), written through the data root (a directory or an fsspec URL) by an exclusive
  create (``DataRoot.create``: a hard link that fails when the name exists, or an object store's
  conditional write), so of two stores opened on one new data root at once exactly one marks it and
  the other is refused.

Opening a store compares them and refuses, in one line, a store directory whose ID
is not its catalog's (a second store on one catalog) and a data root whose marker
names another store (a second store on one data root), or names a copy of this store that still
exists elsewhere with the same ID and its own catalog (two copies on one data root would prune and
overwrite each other's files; a moved store, whose old directory is gone, is accepted and the marker
follows it). A store from before IDs
gets one the first time it is opened to write (``create=True``); read-only opens
check what exists and write nothing.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import sqlalchemy as sa

from assay.errors import StoreError
from assay.store.catalog import Catalog
from assay.store.roots import Root, open_root
from assay.store.schema import store_meta

MARKER = ".assay-store.json"  # at the top of the data root
DEFAULT_CATALOG = "sqlite (catalog.sqlite in the store)"  # store.json's name for a store's own SQLite catalog


def new_store_id() -> str:
    """A fresh store ID."""
    return uuid.uuid4().hex


def claim(catalog: Catalog, store_id: str, root: Path) -> tuple[str, str | None]:
    """Give the catalog ``store_id`` unless it has one; return the catalog's ID and the root it names.

    Insert-if-absent in one transaction: of two stores claiming one new catalog at once, one wins
    and the other reads the winner's ID back (and is then refused by :func:`check_catalog`).
    """
    try:
        with catalog.engine.begin() as conn:
            found = conn.execute(sa.select(store_meta.c.value).where(store_meta.c.name == "store_id")).scalar()
            if found is None:
                conn.execute(store_meta.insert(), [{"name": "store_id", "value": store_id},
                                                   {"name": "store_root", "value": str(root)}])
                return store_id, str(root)
    except sa.exc.IntegrityError:  # another process claimed it between our read and our insert
        pass
    return str(catalog.meta("store_id")), catalog.meta("store_root")


def check_catalog(catalog: Catalog, root: Path, known_id: str | None, create: bool) -> str | None:
    """The store's ID after checking it against the catalog's; StoreError when the catalog is another store's.

    ``known_id`` is the ID in ``store.json`` (None for a new store, or one from before IDs). Only with
    ``create`` is a missing ID made and written to the catalog.
    """
    catalog_id, catalog_root = catalog.meta("store_id"), catalog.meta("store_root")
    if catalog_id is None:
        if not create:
            return known_id
        catalog_id, catalog_root = claim(catalog, known_id or new_store_id(), root)
    if known_id is not None and known_id != catalog_id:
        raise StoreError(f"the catalog {catalog.display_url} belongs to another store (id {catalog_id[:8]}, at "
                         f"{catalog_root}), not to {root} (id {known_id[:8]}): give this store its own catalog")
    if known_id is None and catalog_root is not None and Path(catalog_root) != root:
        raise StoreError(f"the catalog {catalog.display_url} already indexes the store at {catalog_root} (id "
                         f"{catalog_id[:8]}); a second store directory on one catalog overwrites its rows and files: "
                         f"use --store {catalog_root}, or give {root} its own catalog")
    return catalog_id


def follow_move(catalog: Catalog, root: Path) -> None:
    """The same store (same ID) opened to write from another directory: the catalog's ``store_root`` names
    where it is now (for messages). Called once every identity check has passed."""
    if catalog.meta("store_root") not in (None, str(root)):
        catalog.set_meta("store_root", str(root))


def read_marker(data_root: Root) -> dict[str, str] | None:
    """The data root's marker (``store_id``, ``store``), or None where there is none."""
    try:
        text = open_root(data_root).read(MARKER)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"cannot read the data root's marker {open_root(data_root).where(MARKER)}: {exc}") from None
    try:
        found = json.loads(text)
    except ValueError:
        raise StoreError(f"{open_root(data_root).where(MARKER)} is not valid JSON; it names the store that "
                         "owns this data root") from None
    return found if isinstance(found, dict) else None


def check_data_root(data_root: Root, store_id: str | None, root: Path, create: bool,
                    catalog: str = DEFAULT_CATALOG) -> None:
    """Refuse a data root whose marker names another store, or a copy of this one that still exists elsewhere;
    with ``create``, mark an unmarked or moved-from data root as ours."""
    if store_id is None:
        return
    marker = read_marker(data_root)
    if marker is None:
        if not create or _claim(data_root, store_id, root):
            return
        marker = read_marker(data_root)  # another store created it between our read and our create: judge it
        if marker is None:
            raise StoreError(f"the data root {open_root(data_root).where(MARKER)} appeared and vanished while "
                             "this store claimed it; open the store again")
    where = open_root(data_root).where("").rstrip("/")
    if marker.get("store_id") != store_id:
        raise StoreError(f"the data root {where} belongs to the store at {marker.get('store', '?')} (id "
                         f"{str(marker.get('store_id', '?'))[:8]}); a second store on one data root overwrites its "
                         f"step files: give {root} its own --data")
    named = Path(str(marker.get("store", root)))
    if named == root:
        return
    if data_root != root and _copy_elsewhere(named, root, store_id, catalog):
        raise StoreError(f"the data root {where} is also the data root of a copy of this store at {named} (same id "
                         f"{store_id[:8]}); two copies on one data root prune and overwrite each other's step files "
                         f"and read each other's changes: remove one of {named} and {root}")
    if create:
        _mark(data_root, store_id, root)  # the store moved, or is a copy whose data root is its own directory


def _marker(store_id: str, root: Path) -> bytes:
    return json.dumps({"store_id": store_id, "store": str(root)}, indent=2, sort_keys=True).encode()


def _claim(data_root: Root, store_id: str, root: Path) -> bool:
    """Create the marker of an unmarked data root, exclusively: of two stores opened on it at once exactly one
    creates it (True); the other finds the winner's marker (False) and is judged by it."""
    return open_root(data_root).create(MARKER, _marker(store_id, root))


def _mark(data_root: Root, store_id: str, root: Path) -> None:
    """Rewrite the marker of a data root already this store's (the store moved)."""
    open_root(data_root).write(MARKER, _marker(store_id, root))


def _copy_elsewhere(named: Path, root: Path, store_id: str, catalog: str) -> bool:
    """Whether ``named`` is another directory than ``root`` holding a store with this ID and a catalog of its own
    (a copy, not a move; two directories on one shared catalog are one store, whose rows and leases they share).
    ``catalog`` is this store's catalog as ``store.json`` names it."""
    try:
        if not named.is_dir() or named.samefile(root):
            return False
        other = json.loads((named / "store.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(other, dict) or other.get("store_id") != store_id:
        return False
    return bool(catalog == DEFAULT_CATALOG or other.get("catalog") != catalog)
