"""Job leases in the catalog (``job_claims``): two drivers on one store never run a job twice.

A driver claims a batch's jobs before it dispatches them, in one transaction per call:

* a job with no claim is claimed by an insert that does nothing on conflict (the primary key is the job
  key), so of two drivers claiming at once exactly one gets it;
* a job claimed by a driver whose lease ran out (``expires_at`` passed: it died, or stalled longer than its
  lease) is taken over by a conditional update (``... WHERE expires_at <= now``), which the database
  evaluates on the row as it is when the update runs, so two drivers taking over at once cannot both win;
* a job this driver already holds has its lease extended;
* after that, what this driver holds is read back, and any claimed job whose row already exists (another
  driver finished it and let its claim go) is released again and not returned: a row means done.

A driver renews all its leases at once (:func:`renew`: a heartbeat) and deletes its claims once their rows
are committed and at exit (:func:`release`). The lease is kept by wall-clock time (``time.time()``) of the
driver that writes it, so the drivers' hosts must agree on the time to well within a lease (NTP does).

These functions take a connection inside a transaction; :class:`~assay.store.catalog.Catalog` wraps them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import sqlalchemy as sa

from assay.store.chunks import CHUNK, chunked
from assay.store.schema import episodes, job_claims


def _chunks(items: Sequence[str]) -> Iterator[list[str]]:
    return chunked(items, CHUNK)  # keys per statement: assay.store.chunks, as every IN over keys


def _insert_new(conn: sa.Connection, rows: list[dict[str, object]]) -> int | None:
    """Insert the claims that are not there yet (an existing claim is left as it is); how many were inserted, or
    None where the driver cannot tell."""
    dialect = conn.dialect.name
    if dialect in ("sqlite", "postgresql"):
        from sqlalchemy.dialects import postgresql, sqlite

        insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        done = conn.execute(insert(job_claims).on_conflict_do_nothing(index_elements=["key"]), rows)  # cached
        return int(done.rowcount) if conn.dialect.supports_sane_multi_rowcount else None
    inserted = 0
    for row in rows:  # another database: one savepoint per claim
        try:
            with conn.begin_nested():
                conn.execute(job_claims.insert().values(**row))
            inserted += 1
        except sa.exc.IntegrityError:
            continue
    return inserted


def claim(conn: sa.Connection, keys: Sequence[str], campaign: str, owner: str, now: float,
          ttl_s: float) -> list[str]:
    """Claim ``keys`` for ``owner`` until ``now + ttl_s``; returns those it holds now and that have no row yet,
    in the order given (see the module docstring)."""
    expires = now + ttl_s
    held: set[str] = set()
    mine: set[str]
    for chunk in _chunks(keys):
        in_chunk = job_claims.c.key.in_(chunk)
        rows = [{"key": k, "campaign": campaign, "owner": owner, "expires_at": expires} for k in dict.fromkeys(chunk)]
        if _insert_new(conn, rows) == len(rows):  # every one was free: all are this driver's (the common case)
            mine = set(chunk)
        else:
            conn.execute(job_claims.update().where(in_chunk, sa.or_(job_claims.c.owner == owner,
                                                                    job_claims.c.expires_at <= now))
                         .values(owner=owner, campaign=campaign, expires_at=expires))
            mine = set(
                conn.execute(sa.select(job_claims.c.key).where(in_chunk, job_claims.c.owner == owner)).scalars())
        if mine:
            done: set[str] = set(
                conn.execute(sa.select(episodes.c.key).where(episodes.c.key.in_(sorted(mine)))).scalars())
            if done:
                conn.execute(job_claims.delete().where(job_claims.c.key.in_(sorted(done)),
                                                       job_claims.c.owner == owner))
            held |= mine - done
    return [k for k in keys if k in held]


def renew(conn: sa.Connection, owner: str, now: float, ttl_s: float) -> int:
    """Extend every lease ``owner`` holds to ``now + ttl_s``; how many it holds."""
    return int(conn.execute(job_claims.update().where(job_claims.c.owner == owner)
                            .values(expires_at=now + ttl_s)).rowcount)


def release(conn: sa.Connection, owner: str, keys: Sequence[str] | None = None) -> int:
    """Delete ``owner``'s claims on ``keys`` (all of them when None); how many went."""
    if keys is None:
        return int(conn.execute(job_claims.delete().where(job_claims.c.owner == owner)).rowcount)
    gone = 0
    for chunk in _chunks(keys):
        gone += conn.execute(job_claims.delete().where(job_claims.c.owner == owner,
                                                       job_claims.c.key.in_(chunk))).rowcount
    return gone


def held_by_others(conn: sa.Connection, keys: Sequence[str], owner: str) -> dict[str, tuple[str, float]]:
    """The claims on ``keys`` that another driver holds: key -> (its owner, when its lease runs out)."""
    found: dict[str, tuple[str, float]] = {}
    columns = (job_claims.c.key, job_claims.c.owner, job_claims.c.expires_at)
    for chunk in _chunks(keys):
        for row in conn.execute(sa.select(*columns).where(job_claims.c.key.in_(chunk), job_claims.c.owner != owner)):
            found[str(row.key)] = (str(row.owner), float(row.expires_at))
    return found


def owners(conn: sa.Connection) -> list[str]:
    """Every driver that holds a claim, sorted."""
    rows: Sequence[str] = conn.execute(sa.select(job_claims.c.owner).distinct()).scalars().all()
    return sorted(rows)


def lease_ends(conn: sa.Connection) -> list[float]:
    """When each claim's lease runs out (expired ones included)."""
    ends: Sequence[float] = conn.execute(sa.select(job_claims.c.expires_at)).scalars().all()
    return [float(end) for end in ends]
