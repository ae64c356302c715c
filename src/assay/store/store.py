"""The Store: a directory of episode files plus the catalog that indexes them.

Layout (``schema_version`` 1)::

    STORE/
      catalog.sqlite                  the catalog (unless a database URL is given)
      episodes/<key[:2]>/<key>.parquet  per-step data, one file per episode
      packs/<id[:2]>/<id>.parquet     or, with ``storage: {pack: batch}``, one file per batch, a row group
                                      per episode (``assay.store.packs``)
      campaigns/<name>/campaign.json  the resolved campaign, saved beside its results
      store.json                      which catalog indexes this store (its URL, password removed) and its ID
      .run.lock                       held by the campaign run in progress (``assay.store.locking``)
    DATA/ (the store directory unless ``data_url``)
      .assay-store.json               the ID of the store that owns this data root
      .run.lock                       held by the run in progress too, where the data root is local

On a cluster the step files go where every node can reach them: ``data_url``, a
shared directory or an fsspec URL (``s3://bucket/prefix``). The catalog remembers
it (``store_meta.data_url``), so readers find the files without being told, and
it stays with the driver: workers write files, only the driver writes rows.

A row without a step file is an ``error`` before the first step, or an episode whose step file and videos
``assay store prune`` deleted (:mod:`assay.store.retention`, which keeps the row and marks it); anything else
is damaged, and ``Store.damaged`` (``assay store verify``) says so.

The store remembers its catalog in ``store.json``: opening it with another catalog
(a PostgreSQL campaign rerun without ``--catalog``) is refused, since it would rerun
everything into a new catalog and overwrite the files, unless ``new_catalog`` is asked.
A second store on one catalog or on one data root is refused (``assay.store.identity``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from assay.annotations import public_api
from assay.errors import SpecError, StoreError
from assay.lazy import deferred_module
from assay.store.catalog import CampaignRow, Catalog, IntegrityRow, ResumeRow
from assay.store.checks import FileCheck, check_files, failed, record_verdicts, require_seals
from assay.store.episodes import (
    Root,
    is_url,
    read_episode,
    remove_stale_temporaries,
    write_blob,
)
from assay.store.identity import DEFAULT_CATALOG, check_catalog, check_data_root, follow_move
from assay.store.locking import held_elsewhere, refuse_a_file, run_lock
from assay.store.records import SCHEMA_VERSION, EpisodeRecord, Outcome
from assay.store.retention import PrunePlan, orphan_packs, plan_prune, prune, pruned
from assay.store.roots import DataRoot, local_path, open_root
from assay.store.schema import episodes
from assay.store.summaries import TaskLookup
from assay.store.validation import Summary, table_problem

if TYPE_CHECKING:
    import pyarrow as pa
else:  # loaded at first use: listing and scoring commands read the catalog only
    pa = deferred_module("pyarrow")


def public_catalog_url(url: str | None) -> str:
    """The catalog URL as the store records it: the default's name, or the URL without its password."""
    if url is None:
        return DEFAULT_CATALOG
    from sqlalchemy.engine import URL, make_url
    from sqlalchemy.exc import ArgumentError

    try:
        given = make_url(url)
    except ArgumentError:
        return url
    public = URL.create(given.drivername, given.username, None, given.host, given.port, given.database, given.query)
    return str(public.render_as_string(hide_password=False))


@dataclass(frozen=True)
class ResumePlan:
    """What a resume does with a campaign's keys, decided by :meth:`Store.resume_plan`.

    ``done`` are kept (skipped, linked to the campaign); ``damaged`` (an unreadable row, an
    untrusted step file) and ``errored`` (recorded as ``error``, only with ``retry_errors``)
    are forgotten and re-run, as is every key never recorded. The three sets are disjoint.
    """

    done: frozenset[str]
    damaged: frozenset[str]
    errored: frozenset[str]

    @property
    def forget(self) -> list[str]:
        """The recorded keys to forget before they are re-run (sorted)."""
        return sorted(self.damaged | self.errored)


VERIFY_CHUNK = 5000  # keys whose rows a file check reads at a time
_R = TypeVar("_R")


def summary_of(record: EpisodeRecord) -> Summary:
    """The summary a record states, which its step file's seal must repeat."""
    return Summary(record.outcome.value, record.steps, record.total_return, record.success_step)


@public_api
class Store:
    """A store directory, the catalog indexing it and its data root (see the module docstring).

    Opening checks the store's identity (:mod:`assay.store.identity`): a catalog or a data root that
    belongs to another store is refused before anything is written.
    """

    def __init__(
        self, root: str | Path, catalog_url: str | None = None, create: bool = True, data_url: str | None = None,
        new_catalog: bool = False,
    ) -> None:
        self.root = Path(root).expanduser().resolve()
        refuse_a_file(self.root)
        known_id = self._check_catalog(catalog_url, new_catalog) if self.root.is_dir() else None
        if create:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                probe = self.root / f".write-probe-{os.getpid()}"
                probe.write_bytes(b"")
                probe.unlink()
            except OSError as exc:
                raise StoreError(f"store directory {self.root} is not writable: {exc.strerror or exc}") from None
        elif not self.root.is_dir():
            raise StoreError(f"no store at {self.root} (run a campaign with --store {root} first)")
        elif catalog_url is None and not (self.root / "catalog.sqlite").exists():
            raise StoreError(f"{self.root} holds no catalog.sqlite; is it an Assay store?")
        self.catalog = Catalog(catalog_url or f"sqlite:///{self.root / 'catalog.sqlite'}")
        try:
            self.store_id = check_catalog(self.catalog, self.root, known_id, create)
            self.data_root: Root = self._data_root(data_url, create, public_catalog_url(catalog_url))
            if create:
                follow_move(self.catalog, self.root)
                self._remember_catalog(catalog_url)
        except BaseException:
            self.catalog.close()
            raise

    def _check_catalog(self, catalog_url: str | None, new_catalog: bool) -> str | None:
        """Refuse a catalog other than the one ``store.json`` names (unless ``new_catalog``); the store ID it keeps."""
        path = self.root / "store.json"
        if not path.exists():
            return None
        try:
            document = json.loads(path.read_text())
            known, store_id = document.get("catalog"), document.get("store_id")
        except (OSError, ValueError, AttributeError):
            raise StoreError(f"{path} is not valid JSON; it names the store's catalog") from None
        given = public_catalog_url(catalog_url)
        if known and known != given and not new_catalog:
            hint = "omit --catalog" if known == DEFAULT_CATALOG else f"pass --catalog {known} (with its password)"
            raise StoreError(f"the store {self.root} is indexed by the catalog {known}, not {given}: {hint}, "
                             "or pass --new-catalog to index it anew")
        return str(store_id) if store_id else None

    def _remember_catalog(self, catalog_url: str | None) -> None:
        path = self.root / "store.json"
        document = {"schema_version": SCHEMA_VERSION, "catalog": public_catalog_url(catalog_url)}
        if self.store_id is not None:
            document["store_id"] = self.store_id
        try:
            if path.exists() and json.loads(path.read_text()) == document:
                return
        except (OSError, ValueError):
            pass
        write_blob(self.root, "store.json", json.dumps(document, indent=2, sort_keys=True).encode())

    def _data_root(self, data_url: str | None, create: bool, catalog_name: str) -> Root:
        """Where step files go: ``data_url``, else the one the catalog remembers, else the store directory;
        refused when another store's marker is there (checked before the catalog records it)."""
        known = self.catalog.meta("data_url")
        if data_url is not None and not is_url(data_url):
            data_url = str(Path(data_url).expanduser().resolve())
        if data_url is not None and known is not None and data_url != known:
            raise StoreError(
                f"the store {self.root} keeps its step data at {known}; got {data_url} (use that, or a new store)")
        chosen = data_url or known
        root: Root = self.root if chosen is None else chosen if is_url(chosen) else Path(chosen)
        check_data_root(root, self.store_id, self.root, create, catalog_name)
        if data_url is not None and known is None:
            self.catalog.set_meta("data_url", data_url)
        return root

    @property
    def files(self) -> DataRoot:
        """The data root as files: step files and videos are read through it (a directory or an fsspec URL)."""
        return open_root(self.data_root)

    def close(self) -> None:
        """Close the catalog's connections."""
        self.catalog.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def campaign_dir(self, name: str) -> Path:
        """The directory holding campaign ``name``'s resolved spec."""
        return self.root / "campaigns" / name

    def save_resolved_campaign(self, name: str, spec_hash: str, resolved: dict[str, Any]) -> Path:
        """Claim the campaign's name in the catalog for this spec, then write the resolved campaign beside its
        results (atomically). SpecError, before anything is written, when the name holds another spec: of two
        campaigns of one name started at once, the catalog's key on the name lets exactly one through."""
        held = self.catalog.save_campaign(name, spec_hash, resolved)
        if held is not None:
            raise SpecError(f"campaign {name!r} already exists in {self.root} with a different spec (spec hash "
                            f"{held[:12]}, this one {spec_hash[:12]}); give the changed campaign a new name "
                            "(episodes it shares with the old one are reused, not rerun)")
        directory = self.campaign_dir(name)
        directory.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"schema_version": SCHEMA_VERSION, **resolved}, indent=2, sort_keys=True)
        write_blob(self.root, f"campaigns/{name}/campaign.json", text.encode())  # no temporary left on a full disk
        return directory / "campaign.json"

    def clean_temporaries(self) -> int:
        """Delete temporaries of dead writers: step files (in the data root) and resolved campaigns."""
        removed = remove_stale_temporaries(self.data_root)
        if self.data_root != self.root:
            removed += remove_stale_temporaries(self.root)
        return removed

    @contextlib.contextmanager
    def run_lock(self, on_wait: Callable[[str], None] | None = None, shared: bool = False) -> Iterator[None]:
        """The store's run lock on this store and on its data root, where that is a local directory or a ``file://``
        URL (see :mod:`assay.store.locking`); an object store's root has no lock (its marker still refuses a second
        store). Exclusive by default (``assay store prune``, the commands that mine or rewrite a store in bulk);
        ``shared`` for a campaign run: many at once, job leases in the catalog keep each job to one of them."""
        with run_lock(self.root, on_wait, shared=shared):
            local = local_path(self.data_root)
            with run_lock(local, on_wait, shared=shared) if local is not None else contextlib.nullcontext():
                yield

    def damaged(self, keys: Iterable[str], unsealed: set[str] | None = None,
                lookup: TaskLookup | None = None) -> dict[str, str]:
        """Episodes among ``keys`` whose catalog row does not decode, or whose step data cannot be trusted: key ->
        why (missing, no checksum or another, ``schema_version``, episode key, required columns, rows vs the
        catalog's steps, the file's seal vs the row's summary, a file without a seal in a sealed store, the summary
        recomputed from the steps vs the row's): every file is read and hashed (:mod:`assay.store.checks`).
        ``assay store verify`` reports them; ``assay run --verify-files`` forgets and re-runs them.

        A row without a step file is damaged unless it may have none: an ``error`` before the first step
        (0 steps) or an episode whose files ``assay store prune`` deleted (:mod:`assay.store.retention`).
        ``unsealed``, when given, receives the keys of readable files of a legacy store written before seals.
        ``lookup`` finds a task no campaign of the store names (its horizon and success mode judge the outcome).
        """
        check = self.check_files(keys, lookup)
        if unsealed is not None:
            unsealed |= check.unsealed
        return check.problems

    def check_files(self, keys: Iterable[str], lookup: TaskLookup | None = None) -> FileCheck:
        """What :meth:`damaged` finds, with the tally ``assay store verify`` prints; reads the catalog a chunk
        of keys at a time, so a million episodes are never held as rows."""
        return self._guard("checking step files",
                           lambda: check_files(self.catalog, self.data_root, list(keys), lookup, VERIFY_CHUNK))

    def record_verdicts(self, problems: dict[str, str]) -> None:
        """Keep what ``assay store verify`` found (key -> why) until each episode is repaired (forgotten and
        re-run): results of a campaign linking one are refused meanwhile, and a resume re-runs them."""
        self._guard("recording the verdict", lambda: record_verdicts(self.catalog, problems))

    def failed_checks(self, keys: Iterable[str] | None = None, campaign: str | None = None) -> dict[str, str]:
        """The episodes the last ``assay store verify`` found wrong and no repair has re-run since: key -> why
        (among ``keys``, or linked to ``campaign``, or all)."""
        return self._guard("reading the verdict", lambda: failed(self.catalog, keys, campaign))

    def require_seals(self) -> None:
        """Make a legacy store sealed: every step file must carry a seal from now on (never undone)."""
        require_seals(self.catalog)

    def _guard(self, what: str, call: Callable[[], _R]) -> _R:
        try:
            return call()
        except SQLAlchemyError as exc:
            detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise StoreError(f"catalog {self.catalog.display_url}: {what} failed: {type(exc).__name__}: "
                             f"{detail}") from None

    def recorded_keys(self) -> list[str]:
        """Every episode key the catalog holds, sorted (what ``assay store verify`` checks)."""
        try:
            with self.catalog.engine.connect() as conn:
                keys: Sequence[Any] = conn.execute(sa.select(episodes.c.key).order_by(episodes.c.key)).scalars().all()
                return [str(k) for k in keys]
        except SQLAlchemyError as exc:
            raise StoreError(f"catalog {self.catalog.display_url}: listing episodes failed: "
                             f"{type(exc).__name__}") from None

    def resume_plan(self, keys: Iterable[str], retry_errors: bool = False, verify: bool = False) -> ResumePlan:
        """Decide which of ``keys`` a resume keeps and which it re-runs; reads only, changes nothing.

        A recorded episode is kept unless it is untrusted or, with ``retry_errors``, it was recorded as
        ``error``. By default that is decided without reading any step file: the row must be sound as the
        catalog sees it (:meth:`Catalog.resume_rows`) and its file must exist with the size the row records
        (:meth:`untrusted`; a row from before sizes were recorded: exist). ``verify`` reads and checks every
        file as ``assay store verify`` does (:meth:`damaged`: checksum, schema, key, columns, rows, seal, summary).
        An episode the last ``assay store verify`` found wrong (:meth:`failed_checks`) is re-run either way.
        """
        rows = self.catalog.resume_rows(keys)
        damaged = set(self.damaged(rows) if verify else self.untrusted(rows)) | set(self.failed_checks(rows))
        errored = {key for key, row in rows.items() if row.outcome == Outcome.ERROR.value} - damaged \
            if retry_errors else set()
        return ResumePlan(frozenset(set(rows) - damaged - errored), frozenset(damaged), frozenset(errored))

    def untrusted(self, rows: dict[str, ResumeRow]) -> dict[str, str]:
        """Of the recorded ``rows`` (:meth:`Catalog.resume_rows`), those a resume re-runs without reading a
        file: key -> why (an unsound row; a step file missing, or of another size than the row records)."""
        found = {key: f"catalog row cannot be read ({row.problem})" for key, row in rows.items()
                 if row.problem is not None}
        with_data = {key: row for key, row in rows.items() if row.data_path is not None and key not in found}
        sizes = self.files.sizes(sorted({row.data_path for row in with_data.values() if row.data_path is not None}))
        for key, row in with_data.items():
            size = sizes.get(row.data_path or "")
            if size is None:
                found[key] = "missing"
            elif row.data_bytes is not None and size != row.data_bytes:
                found[key] = f"{size} bytes, the catalog records {row.data_bytes} (truncated or replaced)"
        return found

    def prune(self, campaigns: Sequence[str] = (), older_than: timedelta | None = None, dry_run: bool = False,
              on_wait: Callable[[str], None] | None = None) -> PrunePlan:
        """Delete the step files and videos of the episodes of ``campaigns`` and/or older than ``older_than``,
        keeping their catalog rows and summaries (:mod:`assay.store.retention`); ``dry_run`` only plans. The
        deletion holds the run lock, so it never overlaps a campaign run on this store."""
        if dry_run:
            return plan_prune(self.catalog, self.files, campaigns, older_than)
        with self.run_lock(on_wait):
            return prune(self.catalog, self.files, plan_prune(self.catalog, self.files, campaigns, older_than))

    def prune_orphans(self, dry_run: bool = False, on_wait: Callable[[str], None] | None = None,
                      now: float | None = None) -> list[tuple[str, int]]:
        """Delete the pack files no catalog row names (:func:`assay.store.retention.orphan_packs`); returns them
        (relative path, bytes); ``dry_run`` only lists. Holds the run lock exclusively, so no run is writing a
        pack meanwhile; a data root without a lock (an object store) is refused while any driver holds an
        unexpired job lease (a run in flight)."""
        if dry_run:
            return orphan_packs(self.catalog, self.files)
        with self.run_lock(on_wait):
            unlocked = local_path(self.data_root) is None
            check = functools.partial(self._refuse_live_leases, now) if unlocked else None
            if check is not None:
                check()  # early, before a long listing
            found = orphan_packs(self.catalog, self.files, after_listing=check)
            for path, _ in found:
                self.files.delete(path)
            return found

    def run_in_progress(self) -> str | None:
        """Who is running on this store now (the holder of its run lock or of its data root's, or the drivers of its
        live job leases), or None: what a dry run of ``store prune --orphans`` warns of, since a run's packs in
        flight are named by no row until it records them."""
        for directory in (self.root, local_path(self.data_root)):
            holder = held_elsewhere(directory) if directory is not None else None
            if holder is not None:
                return holder
        live = self.live_leases()
        return f"drivers holding {len(live)} job leases" if live else None

    def live_leases(self, now: float | None = None) -> list[float]:
        """When each unexpired job lease on this store ends (a run is going on while there are any)."""
        at = time.time() if now is None else now
        return [end for end in self.catalog.lease_ends() if end > at]

    def _refuse_live_leases(self, now: float | None) -> None:
        live = self.live_leases(now)
        if live:
            raise StoreError(f"a run holds {len(live)} job leases on this store (the last ends at "
                             f"{datetime.fromtimestamp(max(live), UTC).isoformat(timespec='seconds')}); its "
                             "packs in flight are named by no row yet, so orphans are pruned once no run "
                             "is going on")

    def forget(self, keys: Iterable[str]) -> int:
        """Forget episodes so they can be re-run (see :meth:`Catalog.forget`); how many rows went."""
        return self.catalog.forget(keys)

    # What the campaign runner needs from the catalog, so that it talks to the store alone.

    def campaign(self, name: str) -> CampaignRow | None:
        """The campaign's catalog row, or ``None`` when no campaign of that name ran here."""
        return self.catalog.campaign(name)

    def link(self, campaign: str, keys_and_policies: Iterable[tuple[str, str]]) -> None:
        """Count episodes recorded earlier (by any campaign) as ``campaign``'s too."""
        self.catalog.link(campaign, keys_and_policies)

    def record(self, records: Sequence[EpisodeRecord]) -> None:
        """Catalog rows for episodes whose files are already written, all in one transaction."""
        self.catalog.add_many(list(records))

    def existing_keys(self, keys: Iterable[str]) -> set[str]:
        """The given episode keys that have a row (done, whoever ran them)."""
        return self.catalog.existing_keys(keys)

    def claim(self, keys: Sequence[str], campaign: str, owner: str, now: float, ttl_s: float) -> list[str]:
        """Job leases (:mod:`assay.store.claims`): claim ``keys`` for ``owner``; those it holds and that have no row."""
        return self.catalog.claim(keys, campaign, owner, now, ttl_s)

    def renew_claims(self, owner: str, now: float, ttl_s: float) -> int:
        """Extend every lease ``owner`` holds to ``now + ttl_s``; how many it holds."""
        return self.catalog.renew_claims(owner, now, ttl_s)

    def release_claims(self, owner: str, keys: Sequence[str] | None = None) -> int:
        """Delete ``owner``'s claims on ``keys`` (all when None)."""
        return self.catalog.release_claims(owner, keys)

    def claim_owners(self) -> list[str]:
        """Every driver that holds a claim now."""
        return self.catalog.claim_owners()

    def claims_elsewhere(self, keys: Sequence[str], owner: str) -> dict[str, tuple[str, float]]:
        """The claims on ``keys`` other drivers hold: key -> (owner, lease end)."""
        return self.catalog.claims_elsewhere(keys, owner)

    def integrity(self, keys: Iterable[str]) -> dict[str, IntegrityRow]:
        """The catalog's integrity columns (outcome, checksum, steps, ...) of the recorded ``keys``."""
        return self.catalog.integrity(keys)

    def steps(self, record: EpisodeRecord, verify: bool = True, check_seal: bool = True) -> pa.Table:
        """The per-step table of an episode, checked against its catalog row (checksum, key, columns, rows and,
        unless ``check_seal`` is False, the summary sealed in the file); ``verify=False`` checks nothing."""
        if record.data_path is not None and record.data_sha256 is None and verify:
            raise StoreError(f"episode file {record.data_path} does not match its catalog row: no checksum in the "
                             "row (`assay run --verify-files` re-runs it; `assay store verify` lists every such file)")
        if record.data_path is None:
            mark = pruned(self.catalog, [record.key]).get(record.key)
            if mark is not None:
                raise StoreError(f"episode {record.key[:12]}: step file pruned ({mark.pruned_at}, `assay store "
                                 "prune`); its catalog row and summary are kept")
            raise StoreError(f"episode {record.key} has no step data ({record.outcome.value}: {record.reason})")
        # check_format=False: table_problem names a wrong format with the rest (when verified)
        table = read_episode(self.data_root, record.data_path, record.data_sha256 if verify else None,
                             check_format=False, key=record.key)
        problem = table_problem(table.schema, table.num_rows, record.key, record.steps,
                                summary_of(record) if check_seal else None) if verify else None
        if problem is not None:
            raise StoreError(f"episode file {record.data_path} does not match its catalog row: {problem} "
                             "(`assay run` re-runs it; `assay store verify` lists every such file)")
        return table
