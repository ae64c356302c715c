"""What the catalog keeps beside the rows (cell counts, paired seed patterns, the links' listing columns) equals a
recount from the rows after kills, repairs, concurrent writers and an older catalog.

``assay results``, the leaderboard, the dashboard and the report read per-cell counts (``cell_counts``) and paired
seed patterns (``seed_patterns``, :mod:`assay.store.pairs`) kept in the transactions that write the rows. Here the
kept numbers are compared, cell by cell and pattern by pattern, with the database's own ``GROUP BY`` of the rows
(``aggregates.count_differences``, ``aggregates.pattern_differences``): after writers killed with SIGKILL in the
middle of their transactions, after episodes forgotten (a repair) and written again, after two writers of
overlapping episodes at once (SQLite and PostgreSQL), and on a catalog written before the patterns were kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from assay.store import EpisodeRecord, Outcome, Store
from assay.store import aggregates as ag
from assay.store.schema import campaign_episodes
from tests import test_postgres
from tests.aggregate_support import build, check_store

POLICIES = ("a", "b", "c")
TASKS = ("metaworld/reach@1", "metaworld/push@1")
VARIANTS = ("nominal", "dim")
SEEDS = 40


def job_record(campaign: str, policy: str, task: str, variant: str, seed: int, salt: int = 0) -> EpisodeRecord:
    """One episode of a synthetic campaign: its key is its job (policy, task, variant, seed), its outcome drawn
    from the key (``salt`` changes it, as a re-run of a repaired episode would not: the seed decides)."""
    key = hashlib.sha256(f"{policy}/{task}/{variant}/{seed}".encode()).hexdigest()[:32]
    draw = int(hashlib.sha256(f"{key}/{salt}".encode()).hexdigest()[:8], 16) / 2**32
    outcome = Outcome.ERROR if draw < 0.1 else Outcome.SUCCESS if draw < 0.55 else \
        Outcome.TIMEOUT if draw < 0.8 else Outcome.FAILURE
    steps = 0 if outcome is Outcome.ERROR else 10 + seed % 30
    return EpisodeRecord(
        key=key, campaign=campaign, task_id=task, task_hash="h", variant_key=variant, variant_name=variant,
        variant={"name": variant, "perturbations": []}, policy_name=policy, policy_version="1",
        policy_spec={"builtin": "expert"}, seed=seed, episode_index=seed, instruction="do it", outcome=outcome,
        reason="worker died" if outcome is Outcome.ERROR else "", steps=steps, total_return=draw * 10 if steps else 0.0,
        success_step=steps - 1 if outcome is Outcome.SUCCESS else None, trajectory_hash="t")


def every_job(campaign: str = "kept") -> list[EpisodeRecord]:
    return [job_record(campaign, p, t, v, s) for s in range(SEEDS) for p in POLICIES for t in TASKS for v in VARIANTS]


# A writer that records the jobs in a shuffled order (its own seed), a few per transaction, each batch also linked
# to a second campaign under other policy names, as fast as it can: killed, it stops anywhere in a transaction.
WRITER = """
import random, sys, dataclasses
from assay.store import Store
from tests.test_kept_counts import every_job
root, url, seed = sys.argv[1], sys.argv[2] or None, int(sys.argv[3])
jobs = every_job()
random.Random(seed).shuffle(jobs)
with Store(root, url) as store:
    for start in range(0, len(jobs), 7):
        batch = jobs[start:start + 7]
        store.record(batch)
        store.record([dataclasses.replace(r, campaign="shared", policy_name=r.policy_name + "-2") for r in batch
                      if r.seed % 3 == 0])
        print("wrote", start + len(batch), flush=True)
print("finished", flush=True)
"""


def _writer(root: Path, url: str | None, seed: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.Popen([sys.executable, "-c", WRITER, str(root), url or "", str(seed)], env=env,
                            cwd=Path(__file__).parent.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def agrees_with_a_recount(store: Store) -> int:
    """Assert the kept counts and patterns equal the rows', and every link is listed; how many links there are."""
    cells, differences = ag.count_differences(store.catalog)
    assert differences == []
    assert ag.pattern_differences(store.catalog) == []
    with store.catalog.engine.connect() as conn:
        unlisted = conn.execute(sa.select(sa.func.count()).select_from(campaign_episodes).where(
            sa.or_(campaign_episodes.c.outcome.is_(None), campaign_episodes.c.linked_at.is_(None)))).scalar()
        links = conn.execute(sa.select(sa.func.count()).select_from(campaign_episodes)).scalar()
    assert unlisted == 0
    return int(links or 0)


def test_kept_patterns_equal_the_rows_through_forgetting_and_rebuilding(tmp_path):
    with Store(tmp_path / "store") as store:
        records = build(store)
        agrees_with_a_recount(store)
        store.forget([r.key for r in records[::5]])  # a repair: their groups are counted anew
        agrees_with_a_recount(store)
        check_store(store)
        store.record([r for r in records[::5]])  # and run again
        agrees_with_a_recount(store)
        check_store(store)
        store.catalog.rebuild_counts()
        agrees_with_a_recount(store)


def test_a_hand_edited_pattern_is_named_by_verify_and_recounted(tmp_path):
    with Store(tmp_path / "store") as store:
        build(store)
    with sqlite3.connect(tmp_path / "store" / "catalog.sqlite") as db:
        db.execute("UPDATE seed_patterns SET rows = rows + 2 WHERE rowid = (SELECT min(rowid) FROM seed_patterns)")
    with Store(tmp_path / "store") as store:
        found = ag.pattern_differences(store.catalog)
        assert len(found) == 1
        kept, counted = (int(part.split(" ")[-1]) for part in found[0].split("} ")[1].split(", "))
        assert kept == counted + 2
        store.catalog.rebuild_counts()
        agrees_with_a_recount(store)


def test_a_catalog_from_before_the_patterns_is_counted_and_listed_on_open(tmp_path):
    with Store(tmp_path / "store") as store:
        records = build(store)
        before = {across: ag.seed_patterns(store.catalog, "golden", across, cols)
                  for across, cols in (("policy", ["expert", "router", "shaky"]),
                                       ("variant", ["k-light", "k-mass", "nominal"]))}
    with sqlite3.connect(tmp_path / "store" / "catalog.sqlite") as db:  # what an older Assay left
        db.execute("DROP TABLE seed_patterns")
        db.execute("DROP TABLE seed_rows")
        db.execute("UPDATE campaign_episodes SET outcome = NULL, linked_at = NULL")
        db.execute("UPDATE store_meta SET value = '1' WHERE name = 'cell_counts'")
    with Store(tmp_path / "store") as store:
        assert agrees_with_a_recount(store) == len(records) + sum(1 for r in records if r.seed % 2 == 0)
        after = {across: ag.seed_patterns(store.catalog, "golden", across, [str(c) for c in cols])
                 for across, cols in (("policy", ["expert", "router", "shaky"]),
                                      ("variant", ["k-light", "k-mass", "nominal"]))}
        assert after == before
    with sqlite3.connect(tmp_path / "store" / "catalog.sqlite") as db:  # links an older Assay made since
        db.execute("UPDATE campaign_episodes SET linked_at = NULL WHERE rowid % 3 = 0")
    with Store(tmp_path / "store") as store:
        agrees_with_a_recount(store)


def test_an_episode_twice_on_one_paired_row_is_refused_both_ways(tmp_path):
    with Store(tmp_path / "store") as store:
        one = job_record("c", "a", TASKS[0], "nominal", 1)
        twin = dataclasses.replace(one, key="f" * 32, instruction="another")  # same policy, task, variant, seed
        store.record([one, job_record("c", "b", TASKS[0], "nominal", 1), twin])
        for from_rows in (False, True):
            with pytest.raises(ag.DuplicateEpisodes):
                ag.seed_patterns(store.catalog, "c", "policy", ["a", "b"], from_rows=from_rows)
        assert ag.seed_patterns(store.catalog, "c", "policy", ["b"]) == \
            ag.seed_patterns(store.catalog, "c", "policy", ["b"], from_rows=True)
        store.forget([twin.key])
        agrees_with_a_recount(store)


def _kill_and_resume(root: Path, url: str | None) -> None:
    rng = random.Random(51)
    total = len(every_job()) + sum(1 for r in every_job() if r.seed % 3 == 0)
    for round_ in range(3):  # killed mid-write, three times
        writer = _writer(root, url, round_)
        stop = rng.randrange(20, 300)
        assert writer.stdout is not None
        for line in writer.stdout:  # once it has written that many, it is killed in the middle of what follows
            if line.startswith("wrote") and int(line.split()[1]) >= stop:
                break
        time.sleep(rng.random() * 0.01)
        writer.send_signal(signal.SIGKILL)
        writer.communicate()
        with Store(root, url) as store:
            assert agrees_with_a_recount(store) < total  # killed before it finished
    finisher = _writer(root, url, 99)
    out, err = finisher.communicate(timeout=300)
    assert finisher.returncode == 0 and "finished" in out, err[-2000:]
    with Store(root, url) as store:
        links = agrees_with_a_recount(store)
        assert links == total
        victims = [r.key for r in rng.sample(every_job(), 60)]
        store.forget(victims)  # a repair forgets them ...
        agrees_with_a_recount(store)
        again = [r for r in every_job() if r.key in set(victims)]
        store.record(again)  # ... and the rerun records them again
        store.record([dataclasses.replace(r, campaign="shared", policy_name=r.policy_name + "-2") for r in again
                      if r.seed % 3 == 0])
        assert agrees_with_a_recount(store) == links
        check = ag.seed_patterns(store.catalog, "kept", "policy", list(POLICIES))
        assert check == ag.seed_patterns(store.catalog, "kept", "policy", list(POLICIES), from_rows=True)


def _two_writers(root: Path, url: str | None) -> None:
    with Store(root, url):
        pass  # created once, before the writers race
    writers = [_writer(root, url, seed) for seed in (1, 2)]
    for writer in writers:
        out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0 and "finished" in out, err[-2000:]
    with Store(root, url) as store:
        assert agrees_with_a_recount(store) == len(every_job()) + sum(1 for r in every_job() if r.seed % 3 == 0)


@pytest.mark.slow
def test_kept_counts_survive_kills_and_repairs_on_sqlite(tmp_path):
    _kill_and_resume(tmp_path / "store", None)


@pytest.mark.slow
def test_two_writers_of_the_same_episodes_keep_exact_counts_on_sqlite(tmp_path):
    _two_writers(tmp_path / "store", None)


@pytest.fixture(scope="module")
def server_url():
    """A PostgreSQL server on loopback for this module, started as tests/test_postgres.py starts its own."""
    yield from test_postgres.postgres_url.__wrapped__()


# make test-extended; make test kills and repairs on SQLite above, and checks PostgreSQL's kept counts against its rows
# in test_postgres.test_counts_equal_rows_on_postgres
@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.extended
def test_kept_counts_survive_kills_and_repairs_on_postgres(tmp_path, server_url):
    _kill_and_resume(tmp_path / "store", test_postgres.fresh_database(server_url, "kills"))


@pytest.mark.slow
@pytest.mark.postgres
def test_two_writers_of_the_same_episodes_keep_exact_counts_on_postgres(tmp_path, server_url):
    _two_writers(tmp_path / "store", test_postgres.fresh_database(server_url, "racers"))
