"""Retention: deleting the step files and videos of chosen campaigns or of old episodes, keeping their rows.

``assay store prune`` is what a store that grows by 100k episodes a day needs: the step files and
videos are most of its bytes and files, the catalog rows are what results, comparisons, leaderboards
and the report read (``cell_counts``, :mod:`assay.store.counts`). Pruning an episode

* moves its file's name, checksum and size to ``pruned_episodes`` (with the time) and sets the row's
  ``data_path``, ``data_sha256`` and ``data_bytes`` to NULL, in one transaction per chunk of episodes;
  the row's summary (outcome, steps, return, success step, trajectory hash) and every count are unchanged;
* then deletes the step file and the videos. A prune interrupted between the two leaves files that the
  next prune of the same selection deletes (the mark names them).

A pack file (``storage: {pack: batch}``, :mod:`assay.store.packs`) holds several episodes: it is deleted
only when none of the episodes whose rows point at it is left unpruned, i.e. with the last of them (the
packs of a campaign pruned whole go with it). A pack that a row outside the selection still points at is
kept, and counted (``kept_packs``); its selected episodes are marked pruned all the same, and their rows
and summaries stay as for any pruned episode. A pack is never rewritten.

Every reader already treats a row without ``data_path`` as an episode without step data (the report's
gallery shows no trace, listings and results are unchanged, mining and exports skip it); ``Store.steps``
says "step file pruned"; a resume keeps a pruned episode (it reads the row, not the file, and a row
without a file has nothing to check), so a rerun of the campaign runs nothing; ``assay store verify``
counts pruned episodes and checks the rest. Forgetting an episode (``Catalog.forget``) drops its mark.

The selection: episodes linked to any of ``campaigns`` and/or recorded before ``now - older_than``
(the row's ``created_at``). An episode also linked to a campaign that was not chosen (campaigns share
episodes they both planned) is kept, and counted as such, unless ``--older-than`` alone selects.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from assay.errors import StoreError
from assay.store.catalog import Catalog
from assay.store.chunks import chunked
from assay.store.packs import PACK_DIR
from assay.store.roots import DataRoot
from assay.store.schema import campaign_episodes, campaigns, episodes, pruned_episodes
from assay.store.video import video_relpath

AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
AGE_FORMS = "a number and a unit: 90s, 45m, 12h, 30d, 2w"
CHUNK = 500  # episodes per transaction (and keys per statement)
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")


def parse_age(text: str) -> timedelta:
    """``30d`` as a time span (units ``s``, ``m``, ``h``, ``d``, ``w``); StoreError naming the valid forms."""
    found = _AGE.fullmatch(text.strip().lower())
    if found is None:
        raise StoreError(f"--older-than {text!r} is not an age; valid: {AGE_FORMS}")
    return timedelta(seconds=float(found.group(1)) * AGE_UNITS[found.group(2)])


class PrunedRow(NamedTuple):
    """What ``pruned_episodes`` keeps of a pruned episode's step file, and when it was pruned."""

    data_path: str
    data_sha256: str | None
    data_bytes: int | None
    pruned_at: str


@dataclass(frozen=True)
class PrunePlan:
    """What a prune deletes (:func:`plan_prune`): the episodes, and their files found in the data root with sizes.

    ``episodes`` are the keys selected (in the order their rows were written); ``fresh`` those not pruned
    before (the rest are pruned already: only files an interrupted prune left behind are deleted for them);
    ``files`` (relative path, bytes) of step files, packs and videos that exist now; ``shared`` the episodes
    kept because a campaign not chosen links them (campaign name -> how many); ``kept_packs`` the packs of
    selected episodes left in place because an episode not selected still reads from them.
    """

    episodes: tuple[str, ...]
    fresh: tuple[str, ...]
    files: tuple[tuple[str, int], ...]
    shared: dict[str, int] = field(default_factory=dict)
    kept_packs: int = 0

    @property
    def bytes(self) -> int:
        """Bytes the deletion frees."""
        return sum(size for _, size in self.files)

    def count(self, kind: str) -> int:
        """How many of :attr:`files` are step files (``episodes``), packs (``packs``) or videos (``videos``)."""
        return sum(1 for path, _ in self.files if path.startswith(kind + "/"))


def _guard(what: str, catalog: Catalog, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise StoreError(f"catalog {catalog.display_url}: {what} failed: {type(exc).__name__}: {detail}") from None


def pruned(catalog: Catalog, keys: Sequence[str]) -> dict[str, PrunedRow]:
    """The prune marks of the pruned episodes among ``keys``."""
    def read() -> dict[str, PrunedRow]:
        found: dict[str, PrunedRow] = {}
        with catalog.engine.connect() as conn:
            for chunk in _chunks(list(keys)):
                for r in conn.execute(sa.select(pruned_episodes).where(pruned_episodes.c.key.in_(chunk))):
                    found[r.key] = PrunedRow(r.data_path, r.data_sha256,
                                             None if r.data_bytes is None else int(r.data_bytes), r.pruned_at)
        return found

    return dict(_guard("reading prune marks", catalog, read))


def _selected(catalog: Catalog, chosen: Sequence[str], cutoff: str | None) -> tuple[list[str], dict[str, int]]:
    """The keys the selection names that have (or had) a step file, and the kept shared ones per campaign."""
    has_file = sa.or_(episodes.c.data_path.is_not(None),
                      sa.exists().where(pruned_episodes.c.key == episodes.c.key))
    query = sa.select(episodes.c.key).where(has_file)
    if cutoff is not None:
        query = query.where(episodes.c.created_at < cutoff)
    shared: dict[str, int] = {}
    if chosen:
        linked = sa.select(campaign_episodes.c.key).where(campaign_episodes.c.campaign.in_(list(chosen)))
        query = query.where(episodes.c.key.in_(linked))
        others = sa.select(campaign_episodes.c.campaign, sa.func.count().label("n")).where(
            ~campaign_episodes.c.campaign.in_(list(chosen)), campaign_episodes.c.key.in_(query)) \
            .group_by(campaign_episodes.c.campaign)
        elsewhere = sa.select(campaign_episodes.c.key).where(~campaign_episodes.c.campaign.in_(list(chosen)))
        with catalog.engine.connect() as conn:
            shared = {str(r.campaign): int(r.n) for r in conn.execute(others)}
        query = query.where(~episodes.c.key.in_(elsewhere))
    # In the order the rows were written (by time, then key), not by key alone: a chunk of 500 then updates
    # rows that lie together in the table, not 500 pages scattered over it (11x faster at 200k rows on SQLite)
    with catalog.engine.connect() as conn:
        keys: Sequence[Any] = conn.execute(query.order_by(episodes.c.created_at, episodes.c.key)).scalars().all()
        return [str(k) for k in keys], shared


def _campaign_names(catalog: Catalog) -> list[str]:
    with catalog.engine.connect() as conn:
        names: Sequence[Any] = conn.execute(sa.select(campaigns.c.name)).scalars().all()
        return sorted(str(n) for n in names)


def plan_prune(catalog: Catalog, files: DataRoot, chosen: Sequence[str] = (), older_than: timedelta | None = None,
               now: datetime | None = None) -> PrunePlan:
    """What pruning the episodes of the ``chosen`` campaigns and/or those older than ``older_than`` deletes;
    reads the catalog and lists the data root, changes nothing (``assay store prune --dry-run``)."""
    if not chosen and older_than is None:
        raise StoreError(f"prune what? give --campaign NAME (repeatable) and/or --older-than AGE ({AGE_FORMS})")
    known = _guard("listing campaigns", catalog, lambda: _campaign_names(catalog))
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise StoreError(f"no campaign {', '.join(map(repr, unknown))} in this store; known: "
                         f"{', '.join(known) or 'none yet'}")
    cutoff = None if older_than is None else \
        ((now or datetime.now(UTC)) - older_than).isoformat(timespec="seconds")
    keys, shared = _guard("selecting episodes", catalog, lambda: _selected(catalog, chosen, cutoff))
    marks = pruned(catalog, keys)
    paths = _guard("reading step files", catalog, lambda: _data_paths(catalog, [k for k in keys if k not in marks]))
    wanted = {*paths.values(), *(mark.data_path for mark in marks.values())}
    kept = _guard("reading packs", catalog, lambda: _packs_in_use(catalog, wanted, set(keys)))
    sizes = files.sizes(sorted(wanted - kept))
    found = [(path, int(size)) for path, size in sizes.items() if size is not None]
    found += _videos(files, keys)
    return PrunePlan(tuple(keys), tuple(k for k in keys if k not in marks), tuple(sorted(found)), shared, len(kept))


def _packs_in_use(catalog: Catalog, paths: set[str], selected: set[str]) -> set[str]:
    """The packs among ``paths`` that a row not ``selected`` still points at (one pass over the rows of packed
    episodes; none at all when no pack is among ``paths``)."""
    packs = {path for path in paths if path.startswith(PACK_DIR + "/")}
    if not packs:
        return set()
    used: set[str] = set()
    query = sa.select(episodes.c.key, episodes.c.data_path).where(episodes.c.data_path.startswith(PACK_DIR + "/"))
    with catalog.engine.connect() as conn:
        for row in conn.execution_options(yield_per=CHUNK).execute(query):
            if row.data_path in packs and row.key not in selected:
                used.add(str(row.data_path))
    return used


def _data_paths(catalog: Catalog, keys: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    with catalog.engine.connect() as conn:
        for chunk in _chunks(keys):
            query = sa.select(episodes.c.key, episodes.c.data_path).where(episodes.c.key.in_(chunk),
                                                                          episodes.c.data_path.is_not(None))
            found.update({str(r.key): str(r.data_path) for r in conn.execute(query)})
    return found


def _videos(files: DataRoot, keys: Sequence[str]) -> list[tuple[str, int]]:
    """The videos of ``keys`` in the data root (one listing per folder where many of its keys are asked)."""
    folders: dict[str, list[str]] = {}
    for key in keys:
        folders.setdefault(key[:2], []).append(key)
    names: list[str] = []
    for prefix, members in sorted(folders.items()):
        if len(members) >= 16:
            wanted = set(members)
            names += [n for n in files.glob(f"videos/{prefix}/*.mp4")
                      if n.rsplit("/", 1)[-1].split(".", 1)[0] in wanted]
        else:
            for key in members:
                names += files.glob(video_relpath(key, "*"))
    sizes = files.sizes(names)
    return [(name, int(size)) for name, size in sizes.items() if size is not None]


def prune(catalog: Catalog, files: DataRoot, plan: PrunePlan, now: datetime | None = None) -> PrunePlan:
    """Mark the plan's fresh episodes pruned (a transaction per chunk), then delete their files; returns ``plan``.

    Run under the store's run lock (``Store.run_lock``): a campaign running at the same time could
    otherwise record an episode between the plan and the marks."""
    stamp = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    by_key: dict[str, list[str]] = {}
    for path, _ in plan.files:
        if not path.startswith(PACK_DIR + "/"):
            by_key.setdefault(path.rsplit("/", 1)[-1].split(".", 1)[0], []).append(path)
    fresh = set(plan.fresh)
    for chunk in _chunks(list(plan.episodes)):
        marked = [k for k in chunk if k in fresh]
        if marked:
            _guard("marking episodes pruned", catalog, functools.partial(_mark, catalog, marked, stamp))
        for key in chunk:
            for path in by_key.get(key, []):
                files.delete(path)
    for path, _ in plan.files:  # a pack once every episode reading from it is marked
        if path.startswith(PACK_DIR + "/"):
            files.delete(path)
    return plan


def _mark(catalog: Catalog, keys: list[str], stamp: str) -> None:
    with catalog.engine.begin() as conn:
        named = episodes.c.key.in_(keys) & episodes.c.data_path.is_not(None)
        rows = [{"key": r.key, "data_path": r.data_path, "data_sha256": r.data_sha256, "data_bytes": r.data_bytes,
                 "pruned_at": stamp}
                for r in conn.execute(sa.select(episodes.c.key, episodes.c.data_path, episodes.c.data_sha256,
                                                episodes.c.data_bytes).where(named))]
        if rows:
            conn.execute(pruned_episodes.insert(), rows)
            conn.execute(episodes.update().where(named).values(data_path=None, data_sha256=None, data_bytes=None))


def orphan_packs(catalog: Catalog, files: DataRoot,
                 after_listing: Callable[[], None] | None = None) -> list[tuple[str, int]]:
    """The pack files in the data root that no catalog row names, with their sizes (relative path, bytes).

    A driver killed after a worker wrote a pack but before the batch's rows were committed leaves one
    (:mod:`assay.store.packs`): its episodes run again, and when the resume batches them differently their
    new pack has another name. So does an interrupted prune (its marks name the pack, no row does) and
    forgetting every episode of a pack. Such a file is never read: deleting it loses nothing. Only safe
    while no run writes to the store (``Store.prune_orphans`` holds the run lock exclusively); a pack being
    written is named by no row until its batch commits. ``after_listing`` runs between listing the packs and
    reading the rows (a data root without a lock checks there that no run holds a lease: a pack listed was
    claimed before it was written, and a batch whose lease is released has its rows committed)."""
    listed = files.glob(f"{PACK_DIR}/*/*.parquet")  # a writer's temporary ends in .tmp-<host>-<pid>: not matched
    if not listed:
        return []
    if after_listing is not None:
        after_listing()
    query = sa.select(episodes.c.data_path).where(episodes.c.data_path.startswith(PACK_DIR + "/")).distinct()
    named = _guard("reading packs", catalog, lambda: _scalars(catalog, query))
    sizes = files.sizes([path for path in listed if path not in named])
    return [(path, int(size)) for path, size in sorted(sizes.items()) if size is not None]


def _scalars(catalog: Catalog, query: sa.Select[Any]) -> set[str]:
    with catalog.engine.connect() as conn:
        values: Iterable[object] = conn.execution_options(yield_per=CHUNK).execute(query).scalars()
        return {str(value) for value in values}


def _chunks(items: list[str]) -> Iterator[list[str]]:
    return chunked(items, CHUNK)  # assay.store.chunks: every IN over keys is chunked there
