"""The SQL catalog: one row per episode, keyed by the episode key.

SQLite in the store directory by default; any SQLAlchemy URL (PostgreSQL:
``postgresql+psycopg://...``) is accepted. Only the driver writes rows, and only
after the episode's file is complete. The key is the primary key, so a retry or
a rerun can never duplicate an episode. Campaigns link to episodes through
``campaign_episodes``; the link carries the campaign's display name for the
policy, so two campaigns can share an episode under different names.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError
from tenacity import Retrying, retry_if_exception, retry_if_exception_type, stop_after_attempt, wait_incrementing

from assay.errors import StoreError, UndecodableRow
from assay.store import claims, counts, listing, relinks
from assay.store.chunks import WIDE_CHUNK, insert_rows, select_in
from assay.store.chunks import chunked as _chunks  # every IN over keys is chunked (assay.store.chunks)
from assay.store.records import SCHEMA_VERSION, EpisodeRecord, Outcome
from assay.store.schema import (
    ADDED_COLUMNS,
    ADDED_INDEXES,
    campaign_episodes,
    campaigns,
    cell_counts,
    episodes,
    failed_checks,
    metadata,
    pruned_episodes,
    store_meta,
    unparsable_rows,
)
from assay.store.validation import Summary, mark_seals


class IntegrityRow(NamedTuple):
    """What a resume checks of a recorded episode (:meth:`Catalog.integrity`)."""

    outcome: str
    data_path: str | None
    data_sha256: str | None


class ResumeRow(NamedTuple):
    """What a resume reads of a recorded episode (:meth:`Catalog.resume_rows`): no step file, no JSON decoded.

    ``problem`` is why the row cannot be trusted as the database itself sees it (an outcome that is not one,
    a JSON column that is not JSON where the database can tell: SQLite's ``json_valid``), else None.
    """

    outcome: str
    data_path: str | None
    data_bytes: int | None
    problem: str | None


@dataclass(frozen=True)
class CampaignRow:
    """One campaign as the catalog holds it (:meth:`Catalog.campaigns`): its resolved spec and
    how many episodes link to it."""

    name: str
    spec_hash: str
    spec: dict[str, Any]
    created_at: str
    updated_at: str
    episodes: int


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# Catalog columns derived from EpisodeRecord's fields: a dict field is stored as JSON in
# ``<field>_json`` (``policy_spec`` in ``policy_json``), an enum by its value, the rest as is.
# ``campaign`` and ``policy_name`` live on the link (campaign_episodes), not on the episode.
_LINK_FIELDS = frozenset({"campaign", "policy_name"})
_RENAMED = {"policy_spec": "policy_json"}
_HINTS = typing.get_type_hints(EpisodeRecord)


@dataclass(frozen=True)
class _Field:
    name: str
    column: str
    kind: str  # "json", "enum" or "plain"


def _field(name: str) -> _Field:
    hint = _HINTS[name]
    if typing.get_origin(hint) is dict:
        return _Field(name, _RENAMED.get(name, f"{name}_json"), "json")
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _Field(name, name, "enum")
    return _Field(name, name, "plain")


_FIELDS = tuple(_field(f.name) for f in dataclasses.fields(EpisodeRecord) if f.name not in _LINK_FIELDS)


def _row(record: EpisodeRecord) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for f in _FIELDS:
        value = getattr(record, f.name)
        row[f.column] = json.dumps(value, sort_keys=True) if f.kind == "json" else \
            value.value if f.kind == "enum" else value
    row["created_at"] = _now()
    return row


def _facts(record: EpisodeRecord) -> counts.Facts:
    return counts.Facts(record.task_id, record.variant_key, record.variant_name, record.outcome.value, record.steps,
                        record.total_return, record.seed)


def _record(row: Any) -> EpisodeRecord:
    m = row._mapping
    try:
        return _decode(m)
    except (ValueError, TypeError, KeyError) as exc:  # json.JSONDecodeError is a ValueError
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'bad value'}"
        raise UndecodableRow(str(m["key"]), why) from None


def _decode(m: Any) -> EpisodeRecord:
    values: dict[str, Any] = {name: m[name] for name in _LINK_FIELDS}
    for f in _FIELDS:
        raw = m[f.column]
        values[f.name] = json.loads(raw) if f.kind == "json" else _HINTS[f.name](raw) if f.kind == "enum" else raw
    return EpisodeRecord(**values)


def redact_url(url: str) -> str:
    """A database URL as it may be shown or logged: the password replaced by ``***``."""
    try:
        return str(sa.engine.make_url(url).render_as_string(hide_password=True))
    except (SQLAlchemyError, ValueError, TypeError):
        return re.sub(r"(//[^:/@]*:)[^@]*@", r"\1***@", url)


P = ParamSpec("P")
R = TypeVar("R")


def _guarded(method: Callable[Concatenate[Catalog, P], R]) -> Callable[Concatenate[Catalog, P], R]:
    """Database and OS errors (a full disk, a lost server) become one-line StoreErrors."""

    @functools.wraps(method)
    def wrapper(self: Catalog, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except SQLAlchemyError as exc:
            detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise StoreError(f"catalog {self.display_url}: {method.__name__} failed: {type(exc).__name__}: "
                             f"{redact_url(detail)}") from None
        except OSError as exc:
            raise StoreError(f"catalog {self.display_url}: {method.__name__} failed: {exc.strerror or exc}") from None

    return wrapper


# What two processes creating one SQLite catalog at the same moment can raise (the loser retries: create_all checks
# first); on PostgreSQL an advisory lock (this key, any 64-bit number of Assay's own) makes them take turns.
_CREATE_RACES = (sa.exc.OperationalError, sa.exc.IntegrityError, sa.exc.ProgrammingError)
_CREATE_LOCK = 0x4153534159_0001  # "ASSAY", 1


def sqlite_busy(exc: BaseException) -> bool:
    """SQLite's "database is locked" (SQLITE_BUSY) for a write: the whole transaction was rolled back, and running
    it again is safe. Seen once in an interrupted sweep on a loaded machine (``add_many``, the catalog writer's
    thread beside the driver's lease claims), despite the 30 s busy timeout; SQLite also returns it at once, without
    waiting, to a WAL transaction that cannot upgrade a read snapshot older than another connection's commit."""
    return isinstance(exc, sa.exc.OperationalError) and "database is locked" in str(getattr(exc, "orig", exc))


def _raced(method: Callable[P, R]) -> Callable[P, R]:
    """Run a write again when it lost a race with another driver on the same rows: two drivers of one store (job
    leases, :mod:`assay.store.claims`) may both find a campaign or a link missing and insert it; the loser's
    transaction is rolled back whole by its IntegrityError, and the retry reads what the winner committed. A write
    that SQLite refused as busy (:func:`sqlite_busy`) is rolled back whole too, and run again."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        retried = retry_if_exception_type(sa.exc.IntegrityError) | retry_if_exception(sqlite_busy)
        for attempt in Retrying(stop=stop_after_attempt(4), wait=wait_incrementing(0.05, 0.1), reraise=True,
                                retry=retried):
            with attempt:
                return method(*args, **kwargs)
        raise AssertionError("unreachable")  # Retrying re-raises the last error

    return wrapper


class Catalog:
    """Episode rows and campaign links behind one SQLAlchemy engine.

    Every method turns database and OS errors into one-line :class:`StoreError`; a row that
    does not decode is skipped by :meth:`episodes` (its key kept in ``skipped``), refused by
    :meth:`episode`, and reported by :meth:`undecodable`, which a resume treats as damaged.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.display_url = redact_url(url)  # what messages show: never the password
        self.skipped: dict[str, str] = {}  # rows that episodes() could not decode and left out: key -> why
        try:
            self.engine = sa.create_engine(url, future=True)
            if self.engine.dialect.name == "sqlite":
                sa.event.listen(self.engine, "connect", _sqlite_pragmas)
            self._create_tables()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open catalog {self.display_url}: {exc.__class__.__name__}: "
                             f"{redact_url(str(exc).splitlines()[0])}") from None

    def _create_tables(self) -> None:
        """Create or upgrade the catalog (:meth:`_create_in`), safe against drivers doing it at the same moment: on
        PostgreSQL in one transaction that first takes an advisory lock (DDL is transactional there, so the
        second driver waits and then finds the catalog whole); on SQLite retried when another process won a step.
        """
        if self.engine.dialect.name == "postgresql":
            with self.engine.begin() as conn:
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_CREATE_LOCK)))
                self._create_in(conn)
            return
        for attempt in Retrying(stop=stop_after_attempt(5), wait=wait_incrementing(0.2, 0.2), reraise=True,
                                retry=retry_if_exception_type(_CREATE_RACES)):
            with attempt:
                with self.engine.begin() as conn:
                    self._create_in(conn)
                if self.engine.dialect.name == "sqlite":
                    _planner_stats(self.engine)

    def _create_in(self, conn: sa.Connection) -> None:
        """``create_all``, the nullable columns added since a catalog was made (:data:`ADDED_COLUMNS`), the
        store's ``schema_version`` (StoreError for another), and the counts (:meth:`_count_cells`)."""
        metadata.create_all(conn)
        _add_columns(conn)
        found = conn.execute(sa.select(store_meta.c.value).where(store_meta.c.name == "schema_version")).scalar()
        if found is None:
            conn.execute(store_meta.insert().values(name="schema_version", value=str(SCHEMA_VERSION)))
        elif int(found) != SCHEMA_VERSION:
            raise StoreError(f"catalog {self.display_url} has schema_version {found}; this Assay reads "
                             f"{SCHEMA_VERSION}")
        mark_seals(conn)
        self._count_cells(conn)

    def _count_cells(self, conn: sa.Connection) -> None:
        """The indexes the aggregate queries read (built once on a catalog from before them), and ``cell_counts``
        counted from the rows unless it is this version's (:mod:`assay.store.counts`)."""
        for index in ADDED_INDEXES:
            index.create(conn, checkfirst=True)
        found = conn.execute(sa.select(store_meta.c.value).where(store_meta.c.name == counts.META)).scalar()
        if found != counts.VERSION:
            counts.rebuild(conn)
        else:
            listing.fill_links(conn)  # links an older Assay made (none: a read of an empty partial index)

    def rebuild_counts(self) -> None:
        """Count every cell of ``cell_counts`` anew from the rows (``assay store verify --recount``)."""
        with self.engine.begin() as conn:
            counts.rebuild(conn)

    def close(self) -> None:
        """Close the database connections."""
        self.engine.dispose()

    # -- writes (driver only) -------------------------------------------------
    @_guarded
    def save_campaign(self, name: str, spec_hash: str, spec: dict[str, Any]) -> str | None:
        """Claim the name ``name`` for the spec ``spec_hash`` and save its resolved ``spec``; None when saved, else
        the other spec's hash the name already holds (nothing is written then).

        The name's primary key decides: the insert is tried first, in a transaction of its own, so of two drivers
        claiming one new name at once exactly one inserts and the other's insert fails on the key (SQLite waits
        for the first's commit, PostgreSQL blocks on the key until it commits); only then is the row read, and
        updated only where it holds the same spec hash (the resolved document of an adaptive campaign changes).
        """
        now = _now()
        values = {"spec_hash": spec_hash, "spec_json": json.dumps(spec, sort_keys=True), "updated_at": now}
        try:
            with self.engine.begin() as conn:
                conn.execute(campaigns.insert().values(name=name, created_at=now, **values))
            return None
        except sa.exc.IntegrityError:  # the name is taken: by this spec (a resume) or another
            pass
        with self.engine.begin() as conn:
            same = campaigns.c.name == name, campaigns.c.spec_hash == spec_hash
            if conn.execute(campaigns.update().where(*same).values(**values)).rowcount:
                return None
            held = conn.execute(sa.select(campaigns.c.spec_hash).where(campaigns.c.name == name)).scalar()
        return str(held)

    @_guarded
    @_raced
    def add(self, record: EpisodeRecord) -> bool:
        """Insert the episode (if new) and link it to its campaign; True if the episode was new."""
        with self.engine.begin() as conn:
            new = conn.execute(sa.select(episodes.c.key).where(episodes.c.key == record.key)).first() is None
            if new:
                conn.execute(episodes.insert().values(**_row(record)))
                self._relink(conn, [record.key], {record.key: _facts(record)})
            self._link(conn, record.campaign, [(record.key, record.policy_name)], {record.key: _facts(record)})
        return new

    @_guarded
    @_raced
    def add_many(self, records: list[EpisodeRecord]) -> int:
        """``add`` for many records in one transaction (what a busy driver needs); returns how many were new."""
        if not records:
            return 0
        with self.engine.begin() as conn:
            keys = [r.key for r in records]
            present: set[str] = set()
            for chunk in _chunks(keys, 500):
                present |= set(conn.execute(sa.select(episodes.c.key).where(episodes.c.key.in_(chunk))).scalars())
            fresh = {r.key: r for r in records if r.key not in present}
            facts = {r.key: _facts(r) for r in fresh.values()}
            if fresh:
                insert_rows(conn, episodes, (_row(r) for r in fresh.values()))
                self._relink(conn, list(fresh), facts)
            by_campaign: dict[str, list[tuple[str, str]]] = {}
            for r in records:
                by_campaign.setdefault(r.campaign, []).append((r.key, r.policy_name))
            for campaign, pairs in by_campaign.items():
                self._link(conn, campaign, list(dict(pairs).items()), facts)
        return len(fresh)

    @_guarded
    @_raced
    def link(self, campaign: str, keys_and_policies: Iterable[tuple[str, str]]) -> None:
        """Link episodes to a campaign under the policy names it gave them."""
        with self.engine.begin() as conn:
            self._link(conn, campaign, list(keys_and_policies))

    def _relink(self, conn: sa.Connection, keys: list[str], facts: dict[str, counts.Facts]) -> None:
        """Link episodes recorded again (in this transaction) to every campaign that linked them before they were
        forgotten (:mod:`assay.store.relinks`)."""
        for campaign, pairs in relinks.restore(conn, keys).items():
            self._link(conn, campaign, pairs, facts)

    def _link(self, conn: sa.Connection, campaign: str, pairs: list[tuple[str, str]],
              facts: dict[str, counts.Facts] | None = None) -> None:
        """Insert the links not there yet and count them in their cells (``facts``: what the caller knows of
        the episodes, the rest read from their rows)."""
        if not pairs:
            return
        keys = [k for k, _ in pairs]
        present: set[str] = set()
        for chunk in _chunks(keys, 500):
            present |= set(
                conn.execute(
                    sa.select(campaign_episodes.c.key).where(
                        campaign_episodes.c.campaign == campaign, campaign_episodes.c.key.in_(chunk)
                    )
                ).scalars()
            )
        rows = [{"campaign": campaign, "key": k, "policy_name": p} for k, p in pairs if k not in present]
        if rows:
            known = facts or {}
            missing = [r["key"] for r in rows if r["key"] not in known]
            known = {**known, **counts.facts_of(conn, missing)} if missing else known
            insert_rows(conn, campaign_episodes, listing.listed(rows, known))  # with outcome and time, to page
            counts.add_links(conn, campaign, [(r["policy_name"], known[r["key"]]) for r in rows if r["key"] in known])

    # -- job leases (claims): which driver runs a job that has no row yet (:mod:`assay.store.claims`) ------------
    @_guarded
    def claim(self, keys: Sequence[str], campaign: str, owner: str, now: float, ttl_s: float) -> list[str]:
        """Claim ``keys`` for ``owner`` until ``now + ttl_s`` (free ones, expired ones, its own); those it now holds
        and that have no row, in order."""
        with self.engine.begin() as conn:
            return claims.claim(conn, keys, campaign, owner, now, ttl_s)

    @_guarded
    def renew_claims(self, owner: str, now: float, ttl_s: float) -> int:
        """Extend every lease ``owner`` holds to ``now + ttl_s``; how many it holds."""
        with self.engine.begin() as conn:
            return claims.renew(conn, owner, now, ttl_s)

    @_guarded
    def release_claims(self, owner: str, keys: Sequence[str] | None = None) -> int:
        """Delete ``owner``'s claims on ``keys`` (all when None); how many went."""
        with self.engine.begin() as conn:
            return claims.release(conn, owner, keys)

    @_guarded
    def claim_owners(self) -> list[str]:
        """Every driver that holds a claim now."""
        with self.engine.connect() as conn:
            return claims.owners(conn)

    @_guarded
    def lease_ends(self) -> list[float]:
        """When each job lease held now runs out (wall-clock seconds), expired ones included."""
        with self.engine.connect() as conn:
            return claims.lease_ends(conn)

    @_guarded
    def claims_elsewhere(self, keys: Sequence[str], owner: str) -> dict[str, tuple[str, float]]:
        """The claims on ``keys`` held by drivers other than ``owner``: key -> (owner, lease end)."""
        with self.engine.connect() as conn:
            return claims.held_by_others(conn, keys, owner)

    @_guarded
    def register_forgotten(self, table: str) -> None:
        """Record that ``table`` (a higher layer's, keyed by a ``key`` column holding the episode
        key) must lose its rows whenever :meth:`forget` forgets their episodes.

        The registration is stored in ``store_meta`` (``forget:<table>``), so every later
        process forgets from it too, even one that never imports the owning layer. Idempotent.
        """
        if not _TABLE_NAME.fullmatch(table) or table in metadata.tables:
            raise StoreError(f"cannot register {table!r} to be forgotten: give the name of a table of your own "
                             f"(letters, digits, _; at most {64 - len(_FORGET)} characters), "
                             f"not one of {', '.join(sorted(metadata.tables))}")
        name = _FORGET + table
        # another process may register it at the same moment: the second try then finds its row
        for attempt in Retrying(stop=stop_after_attempt(2), retry=retry_if_exception_type(sa.exc.IntegrityError),
                                reraise=True):
            with attempt, self.engine.begin() as conn:
                if conn.execute(sa.select(store_meta.c.name).where(store_meta.c.name == name)).first() is None:
                    conn.execute(store_meta.insert().values(name=name, value="key"))

    @_guarded
    def forgotten_tables(self) -> list[str]:
        """The tables registered with :meth:`register_forgotten`, sorted."""
        with self.engine.connect() as conn:
            return _registered(conn)

    @_guarded
    def forget(self, keys: Iterable[str]) -> int:
        """Delete episodes (rows, every campaign's link, their prune marks and verdicts, the rows of every registered
        table) so they can be re-run, in one transaction: all of it goes, or none. Each link is remembered
        (:mod:`assay.store.relinks`): the episode's next row links it to every campaign again.

        Used when an episode's step file is missing or corrupted: such an episode must
        never be scored. Returns how many episode rows were deleted. Higher layers'
        tables keyed by episode key (failure categories) are cleared when registered
        with :meth:`register_forgotten`; the store names none of them.
        """
        keys = list(keys)
        if not keys:
            return 0
        deleted = 0
        with self.engine.begin() as conn:
            cells = counts.cells_of(conn, keys)
            extra = [sa.table(name, sa.column("key")) for name in _registered(conn)
                     if sa.inspect(conn).has_table(name)]
            relinks.remember(conn, keys)  # every campaign's link comes back with the episode's next row
            for chunk in _chunks(keys, 500):
                for table in extra:
                    conn.execute(table.delete().where(table.c.key.in_(chunk)))
                conn.execute(campaign_episodes.delete().where(campaign_episodes.c.key.in_(chunk)))
                conn.execute(pruned_episodes.delete().where(pruned_episodes.c.key.in_(chunk)))
                conn.execute(failed_checks.delete().where(failed_checks.c.key.in_(chunk)))
                deleted += conn.execute(episodes.delete().where(episodes.c.key.in_(chunk))).rowcount
            counts.recount(conn, cells)  # from the rows that remain, not from what the deleted rows say now
        return deleted

    @_guarded
    def set_meta(self, name: str, value: str) -> None:
        """Set a ``store_meta`` value (an update, else an insert; an insert another driver won becomes an update)."""
        for attempt in Retrying(stop=stop_after_attempt(2), retry=retry_if_exception_type(sa.exc.IntegrityError),
                                reraise=True):
            with attempt, self.engine.begin() as conn:
                if not conn.execute(store_meta.update().where(store_meta.c.name == name).values(value=value)).rowcount:
                    conn.execute(store_meta.insert().values(name=name, value=value))

    # -- reads ----------------------------------------------------------------
    @_guarded
    def meta(self, name: str) -> str | None:
        """A ``store_meta`` value, or None."""
        with self.engine.connect() as conn:
            value = conn.execute(sa.select(store_meta.c.value).where(store_meta.c.name == name)).scalar()
        return None if value is None else str(value)

    @_guarded
    def existing_keys(self, keys: Iterable[str]) -> set[str]:
        """The given keys that have a row."""
        found: set[str] = set()
        with self.engine.connect() as conn:
            for chunk in _chunks(list(keys), 500):
                found |= set(conn.execute(sa.select(episodes.c.key).where(episodes.c.key.in_(chunk))).scalars())
        return found

    @_guarded
    def integrity(self, keys: Iterable[str]) -> dict[str, IntegrityRow]:
        """For each key present: its outcome, data_path and data_sha256, what a resume checks."""
        found: dict[str, IntegrityRow] = {}
        columns = (episodes.c.key, episodes.c.outcome, episodes.c.data_path, episodes.c.data_sha256)
        with self.engine.connect() as conn:
            for chunk in _chunks(list(keys), 500):
                for row in conn.execute(sa.select(*columns).where(episodes.c.key.in_(chunk))):
                    found[row.key] = IntegrityRow(row.outcome, row.data_path, row.data_sha256)
        return found

    @_guarded
    def resume_rows(self, keys: Iterable[str]) -> dict[str, ResumeRow]:
        """For each key present: its outcome, file, file size and whether the row is sound, checked by the
        database (what a resume needs; nothing is decoded in Python). The outcome, file and size are read from
        ``ix_episodes_resume`` (no wide row is read); on SQLite the rows whose JSON ``json_valid`` rejects are the
        partial index ``ix_episodes_unparsable`` (normally empty), asked once."""
        outcomes = [o.value for o in Outcome]
        columns = (episodes.c.key, episodes.c.outcome, episodes.c.data_path, episodes.c.data_bytes)
        found: dict[str, ResumeRow] = {}
        with self.engine.connect() as conn:
            unparsable: dict[str, str] = {}
            if self.engine.dialect.name == "sqlite":  # json_valid is SQLite's; elsewhere `assay store verify` decodes
                first = sa.func.coalesce(*(sa.case((sa.func.json_valid(episodes.c[f.column]) == 1, None),
                                                   else_=sa.literal(f.column)) for f in _FIELDS if f.kind == "json"))
                unparsable = {str(r.key): str(r.problem) for r in conn.execute(
                    sa.select(episodes.c.key, first.label("problem")).where(unparsable_rows.dialect_options[
                        "sqlite"]["where"]))}
            for key, outcome, path, size in select_in(conn, sa.select(*columns), episodes.c.key, list(keys),
                                                      size=WIDE_CHUNK):
                why = f"outcome {outcome!r} is not one of {', '.join(outcomes)}" if outcome not in outcomes \
                    else f"{unparsable[key]} is not JSON" if key in unparsable else None
                found[key] = ResumeRow(str(outcome), path, None if size is None else int(size), why)
        return found

    @_guarded
    def recorded_steps(self, keys: Iterable[str]) -> dict[str, int]:
        """For each key present: the number of steps its row records (a step file must have that many rows)."""
        found: dict[str, int] = {}
        with self.engine.connect() as conn:
            for chunk in _chunks(list(keys), 500):
                for row in conn.execute(sa.select(episodes.c.key, episodes.c.steps).where(episodes.c.key.in_(chunk))):
                    found[row.key] = int(row.steps)
        return found

    @_guarded
    def summaries(self, keys: Iterable[str]) -> dict[str, Summary]:
        """For each key present: the summary its row records (outcome, steps, total return, success step),
        which its step file's seal must repeat."""
        found: dict[str, Summary] = {}
        columns = (episodes.c.key, episodes.c.outcome, episodes.c.steps, episodes.c.total_return,
                   episodes.c.success_step)
        with self.engine.connect() as conn:
            for chunk in _chunks(list(keys), 500):
                for row in conn.execute(sa.select(*columns).where(episodes.c.key.in_(chunk))):
                    found[row.key] = Summary(str(row.outcome), int(row.steps), float(row.total_return),
                                             None if row.success_step is None else int(row.success_step))
        return found

    @_guarded
    def variant_specs(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The variant (its stored dump: name, perturbations) of each of ``keys`` that some episode ran under."""
        found: dict[str, dict[str, Any]] = {}
        with self.engine.connect() as conn:
            for chunk in _chunks(sorted(set(keys)), 500):
                query = sa.select(episodes.c.variant_key, episodes.c.variant_json).where(
                    episodes.c.variant_key.in_(chunk)).distinct()
                for row in conn.execute(query):
                    try:
                        found.setdefault(str(row.variant_key), json.loads(row.variant_json))
                    except ValueError:
                        continue  # an undecodable row names no variant
        return found

    @_guarded
    def campaigns(self) -> list[CampaignRow]:
        """Every campaign, the most recently updated first."""
        counts = (  # the kept per-cell counts: a sum over a campaign's cells, not a count of its links
            sa.select(cell_counts.c.campaign, sa.func.sum(cell_counts.c.episodes).label("episodes"))
            .group_by(cell_counts.c.campaign)
            .subquery()
        )
        query = (
            sa.select(campaigns, sa.func.coalesce(counts.c.episodes, 0).label("episodes"))
            .outerjoin(counts, counts.c.campaign == campaigns.c.name)
            .order_by(campaigns.c.updated_at.desc(), campaigns.c.name)
        )
        with self.engine.connect() as conn:
            return [CampaignRow(r.name, r.spec_hash, json.loads(r.spec_json), r.created_at, r.updated_at,
                                int(r.episodes)) for r in conn.execute(query)]

    def campaign(self, name: str) -> CampaignRow | None:
        """The campaign called ``name``, or None."""
        return next((c for c in self.campaigns() if c.name == name), None)

    @_guarded
    def latest_campaign(self) -> str | None:
        """The most recently updated campaign, or None in an empty store."""
        rows = self.campaigns()
        return rows[0].name if rows else None

    @_guarded
    def episodes(
        self,
        campaign: str | None = None,
        task: str | None = None,
        policy: str | None = None,
        outcome: str | None = None,
        limit: int | None = None,
    ) -> list[EpisodeRecord]:
        """Episode records, filtered by campaign (its links), task, policy and outcome, at most ``limit``."""
        query = sa.select(episodes, campaign_episodes.c.campaign, campaign_episodes.c.policy_name).join(
            campaign_episodes, campaign_episodes.c.key == episodes.c.key
        )
        if campaign is not None:
            query = query.where(campaign_episodes.c.campaign == campaign)
        if task is not None:
            query = query.where(episodes.c.task_id == task)
        if policy is not None:
            query = query.where(campaign_episodes.c.policy_name == policy)
        if outcome is not None:
            query = query.where(episodes.c.outcome == outcome)
        query = query.order_by(
            campaign_episodes.c.campaign, campaign_episodes.c.policy_name, episodes.c.task_id,
            episodes.c.variant_key, episodes.c.episode_index,
        )
        if limit is not None:
            query = query.limit(limit)
        found: list[EpisodeRecord] = []
        with self.engine.connect() as conn:
            for row in conn.execute(query):
                try:
                    found.append(_record(row))
                except UndecodableRow as bad:
                    self.skipped[bad.key] = bad.why
        return found

    @_guarded
    def records(self, campaign: str, keys: Sequence[str]) -> list[EpisodeRecord]:
        """The records of ``keys`` as ``campaign`` links them (its policy names), in the order of ``keys``; keys it
        does not link, or whose row does not decode (kept in ``skipped``), are left out. A page's rows, by key."""
        query = sa.select(episodes, campaign_episodes.c.campaign, campaign_episodes.c.policy_name) \
            .join(campaign_episodes, campaign_episodes.c.key == episodes.c.key) \
            .where(campaign_episodes.c.campaign == campaign)
        found: dict[str, EpisodeRecord] = {}
        with self.engine.connect() as conn:
            for row in select_in(conn, query, episodes.c.key, list(dict.fromkeys(keys))):
                try:
                    found[row.key] = _record(row)
                except UndecodableRow as bad:
                    self.skipped[bad.key] = bad.why
        return [found[key] for key in keys if key in found]

    @_guarded
    def undecodable(self, keys: Iterable[str] | None = None) -> dict[str, str]:
        """Episodes (among ``keys``, or all) whose row does not decode: key -> why."""
        found: dict[str, str] = {}
        with self.engine.connect() as conn:
            chunks = _chunks(list(keys), 500) if keys is not None else [None]
            for chunk in chunks:
                query = sa.select(episodes) if chunk is None else sa.select(episodes).where(episodes.c.key.in_(chunk))
                for row in conn.execute(query):
                    try:
                        _decode({**row._mapping, "campaign": "", "policy_name": ""})
                    except (ValueError, TypeError, KeyError) as exc:
                        first = str(exc).splitlines()[0] if str(exc) else "bad value"
                        found[row._mapping["key"]] = f"{type(exc).__name__}: {first}"
        return found

    @_guarded
    def episode(self, key_prefix: str) -> EpisodeRecord:
        """The episode whose key starts with ``key_prefix`` (unique prefix required)."""
        query = (
            sa.select(episodes, campaign_episodes.c.campaign, campaign_episodes.c.policy_name)
            .join(campaign_episodes, campaign_episodes.c.key == episodes.c.key)
            .where(episodes.c.key.startswith(key_prefix, autoescape=True), *_key_range(key_prefix))
            .limit(10)
        )
        with self.engine.connect() as conn:
            rows = list(conn.execute(query))
        keys = sorted({r._mapping["key"] for r in rows})
        if not keys:
            raise StoreError(f"no episode with key {key_prefix!r} in {self.display_url}")
        if len(keys) > 1:
            raise StoreError(f"key prefix {key_prefix!r} is ambiguous: {', '.join(k[:12] for k in keys[:5])} ...")
        return _record(rows[0])


def _key_range(prefix: str) -> tuple[sa.ColumnElement[bool], ...]:
    """The keys starting with ``prefix`` as a range of the primary key (``LIKE 'abc%'`` alone is a scan of every
    key on SQLite, whose ``LIKE`` ignores case)."""
    if not prefix or ord(prefix[-1]) >= 0x10FFFF:
        return ()
    return episodes.c.key >= prefix, episodes.c.key < prefix[:-1] + chr(ord(prefix[-1]) + 1)


# What SQLite's planner is told of the indexes the aggregate queries read (sqlite_stat1): without statistics it
# joins a link to its episode through the primary key's index and reads the wide row, though the covering index
# is as selective (each holds one entry per key); told so, it reads the covering index alone (~6x faster here).
_PLANNER_STATS = (("episodes", "sqlite_autoindex_episodes_1", "1000000 1"),
                  ("episodes", "ix_episodes_facts", "1000000 1 1 1 1 1 1 1 1"),
                  ("episodes", "ix_episodes_resume", "1000000 1 1 1 1"),
                  ("campaign_episodes", "sqlite_autoindex_campaign_episodes_1", "1000000 100000 1"),
                  ("campaign_episodes", "ix_campaign_episodes_policy", "1000000 100000 1 1"))


def _planner_stats(engine: sa.Engine) -> None:
    """Write :data:`_PLANNER_STATS` where missing (an ``ANALYZE`` of the catalog would write equivalent ones)."""
    with engine.begin() as conn:
        if conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE name = 'sqlite_stat1'").first() is None:
            conn.exec_driver_sql("ANALYZE sqlite_master")  # creates the statistics table, reads nothing else
        present = {row[0] for row in conn.exec_driver_sql("SELECT idx FROM sqlite_stat1")}
        missing = [row for row in _PLANNER_STATS if row[1] not in present]
        for table, index, stat in missing:
            conn.exec_driver_sql("INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES (?, ?, ?)", (table, index, stat))
    if missing:
        engine.dispose()  # connections load statistics when they open


def _add_columns(conn: sa.Connection) -> None:
    for name, columns in ADDED_COLUMNS.items():
        present = {c["name"] for c in sa.inspect(conn).get_columns(name)}
        for column in columns:
            if column in present:
                continue
            kind = metadata.tables[name].c[column].type.compile(dialect=conn.dialect)
            conn.exec_driver_sql(f"ALTER TABLE {name} ADD COLUMN {column} {kind}")  # a race: retried whole


# store_meta rows naming higher layers' tables that forget() clears (Catalog.register_forgotten).
_FORGET = "forget:"
_TABLE_NAME = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{63 - len(_FORGET)}}}")


def _registered(conn: sa.Connection) -> list[str]:
    names: Sequence[str] = conn.execute(
        sa.select(store_meta.c.name).where(store_meta.c.name.startswith(_FORGET))).scalars().all()
    return sorted(name[len(_FORGET):] for name in names)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers (dashboards) never block the writer
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")  # two drivers (job leases) wait for each other's commits
    cursor.close()
