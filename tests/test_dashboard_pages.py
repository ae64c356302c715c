"""The dashboard's episode and failure lists, a page at a time: newest first, keyset cursors, bounded by the page.

``GET /api/campaigns/NAME/episodes?after=KEY&limit=N`` (and ``/failures``) read one range of the listing index
``(campaign, policy, outcome, linked_at, key)`` per (policy, outcome) cell: the episodes in the order they were
recorded for the campaign, newest first, the next page's address in the ``Link`` header (``next`` in the failures
document). Checked here: the pages of a campaign are exactly its episodes, newest first, none twice; a walk through
the pages while episodes are being recorded sees every episode that was there when it started exactly once; the
filters; the failure counts equal a recount; the page query reads the covering index alone; PostgreSQL too.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from assay.server import ServerConfig, create_app
from assay.store import EpisodeRecord, Store, listing
from assay.store.schema import campaign_episodes
from tests import test_postgres
from tests.test_kept_counts import job_record

POLICIES = ("a", "b")
TASK = "metaworld/reach@1"


def records(seeds: range, policies: tuple[str, ...] = POLICIES) -> list[EpisodeRecord]:
    return [job_record("c", p, TASK, v, s) for s in seeds for p in policies for v in ("nominal", "dim")]


def recorded_in_order(store: Store) -> list[str]:
    """The campaign's keys, newest link first, as the catalog holds them (what every page must follow)."""
    with store.catalog.engine.connect() as conn:
        rows = conn.execute(sa.select(campaign_episodes.c.key).where(campaign_episodes.c.campaign == "c")
                            .order_by(campaign_episodes.c.linked_at.desc(), campaign_episodes.c.key.desc()))
        return [str(k) for k in rows.scalars()]


def walk(client: TestClient, address: str, limit: int, between: Iterator[None] | None = None) -> list[str]:
    """Every page of a list through its ``Link`` headers; ``between`` runs before each later page."""
    keys: list[str] = []
    url: str | None = f"{address}{'&' if '?' in address else '?'}limit={limit}"
    while url is not None:
        response = client.get(url)
        assert response.status_code == 200, response.text
        body = response.json()
        keys += [e["key"] for e in (body if isinstance(body, list) else body["episodes"])]
        assert len(body if isinstance(body, list) else body["episodes"]) <= limit
        link = re.match(r'<([^>]+)>; rel="next"', response.headers.get("link", ""))
        url = link.group(1) if link else None
        if not isinstance(body, list):
            assert (body["next"] is None) == (url is None)
        if url is not None and between is not None:
            next(between, None)
    return keys


def _server(root: Path, url: str | None = None) -> TestClient:
    return TestClient(create_app(ServerConfig(root, "t", root, catalog_url=url)), base_url="http://127.0.0.1")


def _store(root: Path, url: str | None = None) -> Store:
    store = Store(root, url)
    store.catalog.save_campaign("c", "h", {"campaign": {"name": "c"}})
    return store


def test_pages_are_the_campaign_newest_first_each_once(tmp_path):
    with _store(tmp_path / "s") as store:
        for seed in range(12):  # twelve transactions: links made at twelve moments
            store.record(records(range(seed, seed + 1)))
        newest_first = recorded_in_order(store)
    assert len(newest_first) == 48 and len(set(newest_first)) == 48
    with _server(tmp_path / "s") as client:
        for limit in (1, 5, 7, 48, 100):
            assert walk(client, "/api/campaigns/c/episodes", limit) == newest_first
        last_written = {r.key for r in records(range(11, 12))}
        assert set(walk(client, "/api/campaigns/c/episodes", 4)[:4]) == last_written  # the last batch comes first
        only_a = walk(client, "/api/campaigns/c/episodes?policy=a", 5)
        assert only_a == [k for k in newest_first if k in {r.key for r in records(range(12), ("a",))}]
        wanted = {r.key for r in records(range(12)) if r.outcome.value == "timeout"}
        assert walk(client, "/api/campaigns/c/episodes?outcome=timeout", 3) == [k for k in newest_first if k in wanted]
        assert client.get("/api/campaigns/c/episodes", params={"after": "f" * 32}).status_code == 400
        assert client.get("/api/campaigns/c/episodes", params={"limit": 0}).status_code == 422


def test_a_walk_through_the_pages_sees_each_older_episode_once_while_a_run_records_more(tmp_path):
    with _store(tmp_path / "s") as store:
        for seed in range(10):
            store.record(records(range(seed, seed + 1)))
        before = recorded_in_order(store)

        def recording() -> Iterator[None]:
            for seed in range(100, 130):  # a driver goes on recording between page reads
                store.record(records(range(seed, seed + 1)))
                yield None

        with _server(tmp_path / "s") as client:
            seen = walk(client, "/api/campaigns/c/episodes", 6, recording())
            assert seen == before  # every older episode once, in order; the new ones are all newer than the cursor
            assert len(walk(client, "/api/campaigns/c/episodes", 50)) == len(recorded_in_order(store)) > len(before)


def test_failure_pages_and_counts(tmp_path):
    with _store(tmp_path / "s") as store:
        for seed in range(15):
            store.record(records(range(seed, seed + 1)))
        every = records(range(15))
        newest_first = recorded_in_order(store)
    failed = {r.key for r in every if r.outcome.value != "success"}
    counts: dict[str, dict[str, int]] = {}
    for r in every:
        if r.outcome.value != "success":
            counts.setdefault(r.policy_name, {}).setdefault(r.outcome.value, 0)
            counts[r.policy_name][r.outcome.value] += 1
    with _server(tmp_path / "s") as client:
        first = client.get("/api/campaigns/c/failures", params={"limit": 4}).json()
        assert first["by_policy"] == counts  # a recount of the rows
        assert walk(client, "/api/campaigns/c/failures", 4) == [k for k in newest_first if k in failed]
        only_b = walk(client, "/api/campaigns/c/failures?policy=b", 3)
        assert only_b == [k for k in newest_first if k in failed and k in {r.key for r in every
                                                                            if r.policy_name == "b"}]
        assert all(e["failure"] is not None and "attribution" in e["failure"] for e in first["episodes"])


def test_the_page_query_reads_only_the_listing_index(tmp_path):
    with _store(tmp_path / "s") as store:
        store.record(records(range(3)))
        with store.catalog.engine.connect() as conn:
            cursor = listing.cursor_of(conn, "c", recorded_in_order(store)[2])
            query = sa.select(campaign_episodes.c.linked_at, campaign_episodes.c.key).where(
                campaign_episodes.c.campaign == "c", campaign_episodes.c.policy_name == "a",
                campaign_episodes.c.outcome == "failure",
                sa.or_(campaign_episodes.c.linked_at < cursor[0], sa.and_(campaign_episodes.c.linked_at == cursor[0],
                                                                          campaign_episodes.c.key < cursor[1]))) \
                .order_by(campaign_episodes.c.linked_at.desc(), campaign_episodes.c.key.desc()).limit(51)
            compiled = query.compile(conn, compile_kwargs={"literal_binds": True})
            plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}"))
    assert "USING COVERING INDEX ix_campaign_episodes_listing" in plan and "TEMP B-TREE" not in plan, plan


@pytest.fixture(scope="module")
def server_url():
    """A PostgreSQL server on loopback for this module, started as tests/test_postgres.py starts its own."""
    yield from test_postgres.postgres_url.__wrapped__()


@pytest.mark.postgres
def test_pages_on_postgres(tmp_path, server_url):
    with _store(tmp_path / "s", server_url) as store:
        for seed in range(6):
            store.record(records(range(seed, seed + 1)))
            store.record([dataclasses.replace(r, campaign="other") for r in records(range(seed, seed + 1))])
        newest_first = recorded_in_order(store)
    with _server(tmp_path / "s", server_url) as client:
        assert walk(client, "/api/campaigns/c/episodes", 5) == newest_first
        assert walk(client, "/api/campaigns/c/failures", 2) == [
            k for k in newest_first if k in {r.key for r in records(range(6)) if r.outcome.value != "success"}]
