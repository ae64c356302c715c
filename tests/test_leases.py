"""Job leases (issue 39): two drivers, or two campaigns, on one store never run a job twice.

* The claims themselves (fast, no simulator): a free job is claimed by one of two drivers, a live claim is
  left to its owner, an expired one is taken over and its old owner cannot renew it, a job with a row is
  never claimed; two processes claiming the same jobs at once on SQLite split them without "database is
  locked"; the run lock is shared by runs and exclusive for bulk work.
* Real drivers on a real SQLite store (Meta-World): two ``assay run`` of one campaign record every job once,
  every file verifies and the results equal a one-driver run; one of two drivers SIGKILLed mid-run leaves
  its jobs to the other once their short leases expire; two campaigns at once on one store both complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from assay.errors import StoreError
from assay.policies import ExpertPolicy, PolicyContext
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.run.leases import Leases, owner_id
from assay.spec import campaign_from_data
from assay.store import Store
from assay.store.locking import LOCK_NAME, run_lock

ROOT = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 240  # only a hang reaches it; nothing here is timed


class PacedExpert:
    """Meta-World's expert, 25 ms slower per step, so a kill lands while both drivers hold claims."""

    def __init__(self) -> None:
        self._expert = ExpertPolicy()

    def reset(self, context: PolicyContext) -> None:
        self._expert.reset(context)

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        time.sleep(0.025)
        return self._expert.act(observations)


# -- the claims, on a catalog alone ---------------------------------------------------------------------------

def test_a_free_job_is_claimed_once_a_live_claim_is_kept_and_an_expired_one_taken_over(tmp_path):
    with Store(tmp_path / "s") as store:
        assert store.claim(["a", "b"], "c", "one", now=100.0, ttl_s=10) == ["a", "b"]
        assert store.claim(["b", "c"], "c", "two", now=105.0, ttl_s=10) == ["c"]  # b: one's lease holds
        assert store.claims_elsewhere(["a", "b", "c"], "two") == {"a": ("one", 110.0), "b": ("one", 110.0)}
        assert store.claim(["a"], "c", "one", now=106.0, ttl_s=10) == ["a"]  # its own: renewed
        assert store.claim(["a", "b"], "c", "two", now=111.0, ttl_s=10) == ["b"]  # b expired at 110; a at 116
        assert store.renew_claims("one", now=112.0, ttl_s=10) == 1  # a only: b is two's now
        assert store.claims_elsewhere(["a", "b"], "one") == {"b": ("two", 121.0)}
        assert store.release_claims("two", ["b"]) == 1 and store.release_claims("one") == 1
        assert store.claims_elsewhere(["a", "b", "c"], "nobody") == {"c": ("two", 115.0)}


def test_a_job_with_a_row_is_done_and_never_claimed(tmp_path):
    data = {"name": "c", "seed": 1, "episodes": 2, "horizon": 5, "tasks": ["gymnasium/Pendulum-v1"],
            "policies": ["random"]}
    plan = prepare_campaign(campaign_from_data(data))
    with Store(tmp_path / "s") as store:
        done = plan.jobs[0]
        from assay.run.faults import error_records

        store.record(error_records([done], "recorded before"))  # a row: done, whoever wrote it
        keys = [job.key for job in plan.jobs]
        assert store.claim(keys, "c", "one", now=0.0, ttl_s=10) == [plan.jobs[1].key]
        with store.catalog.engine.connect() as conn:  # and no claim is left on the done job
            assert conn.execute(sa.text("select key from job_claims")).scalars().all() == [plan.jobs[1].key]


def test_leases_wait_for_another_drivers_jobs_and_take_over_the_expired(tmp_path):
    data = {"name": "c", "seed": 1, "episodes": 3, "horizon": 5, "tasks": ["gymnasium/Pendulum-v1"],
            "policies": ["random"]}
    jobs = prepare_campaign(campaign_from_data(data)).jobs
    with Store(tmp_path / "s") as store:
        from assay.run.faults import error_records

        store.claim([jobs[0].key], "c", "dead", now=time.time(), ttl_s=0.5)  # a driver that died
        store.claim([jobs[1].key], "c", "live", now=time.time(), ttl_s=60)  # one that finishes its job
        with Leases(store, "c", ttl_s=30) as leases:
            assert leases.claim(jobs) == (jobs[2],) and leases.elsewhere == {jobs[0].key, jobs[1].key}
            store.record(error_records([jobs[2]], "ran here"))
            leases.release([jobs[2].key])
            threading.Timer(0.2, lambda: store.record(error_records([jobs[1]], "ran there"))).start()
            taken = list(leases.wait_for_others([jobs[0], jobs[1]], poll_s=0.05))
            store.record(error_records(taken[0], "taken over"))  # (the caller runs them)
            assert taken == [[jobs[0]]] and leases.finished_elsewhere == [jobs[1].key]
        with store.catalog.engine.connect() as conn:
            owners = conn.execute(sa.text("select owner from job_claims")).scalars().all()
        assert owners == ["live"]  # its own claims released at the end; the live driver lets go of its own


def test_a_rerun_releases_the_claims_of_a_dead_driver_of_its_host_at_once(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = owner_id().split(":")[0]
    with Store(tmp_path / "s") as store:
        store.claim(["a"], "c", f"{host}:{dead.pid}:0000", now=time.time(), ttl_s=600)  # crashed here
        store.claim(["b"], "c", f"{host}:{os.getpid()}:1111", now=time.time(), ttl_s=600)  # alive here
        store.claim(["c"], "c", f"elsewhere:{dead.pid}:2222", now=time.time(), ttl_s=600)  # another host's
        with Leases(store, "c", ttl_s=30) as leases:
            jobs: Any = tuple(SimpleNamespace(key=key) for key in "abc")  # what a claim reads of a job
            assert [job.key for job in leases.claim(jobs)] == ["a"]
        assert store.claim_owners() == sorted([f"{host}:{os.getpid()}:1111", f"elsewhere:{dead.pid}:2222"])


class _Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _planned(n: int, size: int = 2) -> list[tuple[Any, ...]]:
    """``n`` batches of ``size`` jobs (what a claim reads of a job: its key)."""
    return [tuple(SimpleNamespace(key=f"k{b:03d}{j}") for j in range(size)) for b in range(n)]


def _granted(batch: tuple[Any, ...]) -> list[str]:
    return [job.key for job in batch]


def test_short_batches_are_claimed_many_at_a_time_and_each_job_granted_once(tmp_path):
    from assay.run.leases import AHEAD_S, PACE_AFTER_S

    batches, clock = _planned(200), _Clock()
    with Store(tmp_path / "s") as store, Leases(store, "c", ttl_s=60) as leases:
        ahead = leases.ahead(batches, clock)
        got = []
        for batch in batches:  # an executor asking every 10 ms
            got.append(_granted(ahead(batch)))
            clock.now += 0.01
        assert got == [_granted(batch) for batch in batches]  # every job, in its own batch, once
        # one transaction each until the pace is read (PACE_AFTER_S), then about AHEAD_S of asks a transaction
        alone = int(PACE_AFTER_S / 0.01) + 1
        assert alone - 1 + math.ceil((200 - alone) / (AHEAD_S / 0.01)) <= ahead.transactions <= alone + 4
        assert sorted(store.claims_elsewhere([j.key for b in batches for j in b], "nobody")) == sorted(
            j.key for b in batches for j in b)  # all held by this driver
    with Store(tmp_path / "s") as store:
        assert store.claim_owners() == []  # released at the end


def test_long_batches_are_claimed_one_at_a_time(tmp_path):
    batches, clock = _planned(6, size=1), _Clock()
    with Store(tmp_path / "s") as store, Leases(store, "c", ttl_s=600) as leases:
        ahead = leases.ahead(batches, clock)
        for i, batch in enumerate(batches):  # two workers asking at once, then a batch of a minute each
            assert _granted(ahead(batch)) == _granted(batch)
            clock.now += 60.0 if i % 2 else 0.0
            # nothing beyond the batch asked for is held: a batch of a minute is never claimed ahead
            held = store.claims_elsewhere([j.key for b in batches for j in b], "nobody")
            assert sorted(held) == sorted(j.key for b in batches[: i + 1] for j in b)
        assert ahead.transactions == 6


def _spied(leases: Leases, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The jobs of each claim ``leases`` sends to the catalog, in order."""
    claims: list[list[str]] = []
    claim = leases.claim
    monkeypatch.setattr(leases, "claim", lambda jobs: claims.append(_granted(jobs)) or claim(jobs))
    return claims


def test_a_claim_ahead_leaves_out_what_another_driver_holds_and_retries_alone(tmp_path, monkeypatch):
    batches, clock = _planned(80), _Clock()
    taken = batches[30][1].key
    with Store(tmp_path / "s") as store, Leases(store, "c", ttl_s=60) as leases:
        store.claim([taken], "c", "other", now=time.time(), ttl_s=60)
        claims = _spied(leases, monkeypatch)
        ahead = leases.ahead(batches, clock)
        for batch in batches[:30]:
            ahead(batch)
            clock.now += 0.05
        assert _granted(ahead(batches[30])) == [batches[30][0].key] and leases.elsewhere == {taken}
        last = max(int(key[1:4]) for claim in claims for key in claim)  # the last batch claimed ahead
        assert 40 <= last < 79
        del claims[:]
        assert _granted(ahead(batches[3])) == _granted(batches[3])  # a retry: its own claims, renewed, alone
        assert _granted(ahead(batches[79])) == _granted(batches[79])  # out of order, not claimed yet: alone
        assert _granted(ahead(batches[last])) == _granted(batches[last])  # claimed ahead: no transaction
        stranger = (SimpleNamespace(key="not-planned"),)
        assert _granted(ahead(stranger)) == ["not-planned"]
        assert claims == [_granted(batches[3]), _granted(batches[79]), ["not-planned"]]
        # the batch after the last claimed ahead, asked now, takes along those right after it, short of batch 79
        assert _granted(ahead(batches[last + 1])) == _granted(batches[last + 1])
        n = len(claims[-1]) // 2
        assert n >= 2 and last + 1 + n <= 79
        assert claims[-1] == [key for b in batches[last + 1: last + 1 + n] for key in _granted(b)]


def test_a_grant_kept_past_half_the_lease_is_claimed_again(tmp_path, monkeypatch):
    """A driver that stalls (stopped, suspended) past its lease, while another takes its jobs over, does not run
    what it claimed ahead: a grant older than half the lease goes back to the catalog first."""
    batches, clock, wall = _planned(40), _Clock(), _Clock()
    wall.now = 1_000.0
    with Store(tmp_path / "s") as store, Leases(store, "c", ttl_s=30, clock=wall) as a:
        ahead = a.ahead(batches, clock)
        for batch in batches[:10]:
            ahead(batch)
            clock.now += 0.05
        keys = _granted(batches[15])
        assert sorted(store.claims_elsewhere(keys, "nobody")) == keys  # claimed ahead by A, not asked yet
        wall.now += 120.0  # A stalls; B takes the expired claims over
        b = Leases(store, "c", ttl_s=30, clock=wall)
        assert _granted(b.claim(batches[15])) == keys
        assert _granted(ahead(batches[15])) == [] and a.elsewhere >= set(keys)
        assert _granted(ahead(batches[16])) == _granted(batches[16])  # expired, nobody took it: A's again
        b.close()


def test_a_dispatcher_on_two_environments_gets_every_job_once_and_each_soon_after_its_claim(tmp_path, monkeypatch):
    """The local and Ray executors' dispatcher asks environment by environment: what a claim takes along is the
    next batches of the asked one's environment, handed out within about ``AHEAD_S`` of the claim."""
    from assay.run.faults import Dispatcher, FaultPolicy
    from assay.run.leases import AHEAD_S

    tasks = [SimpleNamespace(id=f"t{i}", content_hash=lambda i=i: f"h{i}") for i in range(3)]
    # the plan's order: policy by policy, task by task (as campaigns plan), 8 batches a cell of 2 jobs each
    batches = [tuple(SimpleNamespace(key=f"{p:02d}{t}{b}{j}", task=tasks[t]) for j in range(2))
               for p in range(4) for t in range(3) for b in range(8)]
    clock = _Clock()
    with Store(tmp_path / "s") as store, Leases(store, "c", ttl_s=60) as leases:
        claimed_at: dict[str, float] = {}
        claim = leases.claim

        def spy(jobs):
            for job in jobs:
                claimed_at.setdefault(job.key, clock.now)
            return claim(jobs)

        monkeypatch.setattr(leases, "claim", spy)
        ahead = leases.ahead(batches, clock)
        dispatcher = Dispatcher(batches, FaultPolicy(), ahead)
        warm: list[set[str]] = [set(), set()]
        handed: list[str] = []
        waited: list[float] = []
        while dispatcher.has_work():
            for worker in (0, 1):  # two workers taking turns, 25 ms a batch between them
                other = warm[1 - worker]
                item = dispatcher.take(warm[worker], other)
                if item is None:
                    continue
                warm[worker] = {f"{item.jobs[0].task.id}#{item.jobs[0].task.content_hash()}"}
                handed += [job.key for job in item.jobs]
                waited += [clock.now - claimed_at[job.key] for job in item.jobs]
                clock.now += 0.025
        assert sorted(handed) == sorted(job.key for batch in batches for job in batch)  # each once
        # nothing waits long after its claim (taking along another environment's batches, 1.45 s here)
        assert max(waited) <= AHEAD_S
        assert ahead.transactions < len(batches) / 2  # 34 for 96 batches here


def test_a_claim_ahead_takes_at_most_ahead_jobs_jobs(tmp_path, monkeypatch):
    from assay.run import leases as module

    monkeypatch.setattr(module, "PACE_AFTER_S", 0.0)  # the pace is read from the second ask on
    batches, clock = _planned(module.AHEAD_JOBS, size=4), _Clock()
    with Store(tmp_path / "s") as store, Leases(store, "c", ttl_s=60) as leases:
        sizes: list[int] = []
        claim = leases.claim
        monkeypatch.setattr(leases, "claim", lambda jobs: sizes.append(len(jobs)) or claim(jobs))
        ahead = leases.ahead(batches, clock)
        for batch in batches:  # a microsecond an ask: the pace alone would take every batch at once
            assert _granted(ahead(batch)) == _granted(batch)
            clock.now += 1e-6
        assert sizes == [4] + [module.AHEAD_JOBS] * 3 + [module.AHEAD_JOBS - 4]
        assert ahead.transactions == len(sizes) == 5


CLAIMER = """
import sys, time
from assay.store import Store
store = Store(sys.argv[1], create=False)
keys = [f"k{i:04d}" for i in range(400)]
mine = []
for start in range(0, 400, 4):  # a driver's claims, a batch at a time
    mine += store.claim(keys[start:start + 4], "c", sys.argv[2], time.time(), 60)
print(" ".join(mine))
"""


def test_two_processes_claiming_the_same_jobs_at_once_split_them(tmp_path):
    Store(tmp_path / "s").close()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    runs = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(tmp_path / "s"), owner], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for owner in ("one", "two")]
    outputs = [run.communicate(timeout=HANG_GUARD_S) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    one, two = (set(out.split()) for out, _ in outputs)
    assert not one & two and len(one | two) == 400  # every job to exactly one of them


# -- the run lock: shared by runs, exclusive for bulk work ----------------------------------------------------

def _probe(path: Path, flags: int) -> bool:
    """Whether another open file description (what a second process sees) gets the lock with ``flags`` now."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, flags | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_runs_share_the_run_lock_and_bulk_work_excludes_them(tmp_path):
    path = tmp_path / LOCK_NAME
    with run_lock(tmp_path, shared=True), run_lock(tmp_path, shared=True):  # re-entrant
        assert _probe(path, fcntl.LOCK_SH) and not _probe(path, fcntl.LOCK_EX)  # another run: yes; a prune: waits
        with pytest.raises(StoreError, match="holds the run lock .* shared"), run_lock(tmp_path):
            pass
    assert _probe(path, fcntl.LOCK_EX)  # released
    with run_lock(tmp_path), run_lock(tmp_path, shared=True):  # a run inside a bulk command's hold: covered
        assert not _probe(path, fcntl.LOCK_SH)
        assert path.read_text() == str(os.getpid())


# -- real drivers on one store ---------------------------------------------------------------------------------

def _assay(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "assay.cli.app", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _finish(run: subprocess.Popen) -> dict[str, Any]:
    out, err = run.communicate(timeout=HANG_GUARD_S)
    assert run.returncode == 0, err[-3000:]
    return json.loads(out[out.index("{"):])


def _kill_group(run: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(run.pid, signal.SIGKILL)
    run.communicate()


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(json.dumps(data))
    return path


def _results(store: Store, name: str) -> dict[str, tuple[str, int, str]]:
    return {r.key: (r.outcome.value, r.steps, r.trajectory_hash) for r in store.catalog.episodes(campaign=name)}


def _one_driver(root: Path, data: dict[str, Any]) -> dict[str, tuple[str, int, str]]:
    with Store(root) as store:
        run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(store.data_root))
        return _results(store, data["name"])


def _exactly_once(root: Path, names: list[str]) -> dict[str, dict[str, tuple[str, int, str]]]:
    """Each campaign's results; every row once, no claim left, and `assay store verify` passes."""
    verify = _assay("store", "verify", "--store", str(root), "--json")
    out, err = verify.communicate(timeout=HANG_GUARD_S)
    assert verify.returncode == 0, out + err[-2000:]
    with Store(root, create=False) as store:
        with store.catalog.engine.connect() as conn:
            keys = conn.execute(sa.text("select key from episodes")).scalars().all()
            assert len(keys) == len(set(keys))
            assert conn.execute(sa.text("select count(*) from job_claims")).scalar() == 0
        return {name: _results(store, name) for name in names}


CAMPAIGN = {"name": "pair", "seed": 7, "episodes": 5, "envs_per_worker": 2, "horizon": 60,
            "tasks": ["metaworld/reach@1"], "policies": ["expert", "random"]}


@pytest.mark.slow
@pytest.mark.sim
def test_two_drivers_of_one_campaign_run_every_job_once_and_equal_one_driver(tmp_path):
    data = {**CAMPAIGN, "policies": [{"name": "paced", "entrypoint": "tests.test_leases:PacedExpert"}, "random"]}
    reference = _one_driver(tmp_path / "alone", data)
    campaign, root = _write(tmp_path, data), tmp_path / "store"
    runs = [_assay("run", str(campaign), "--store", str(root), "-x", "inline", "--json") for _ in range(2)]
    try:
        a, b = (_finish(run) for run in runs)
    finally:
        for run in runs:
            _kill_group(run)
    assert a["ran"] + b["ran"] == 10 and a["ran"] and b["ran"]  # side by side, and between them each job once
    for one in (a, b):
        assert one["ran"] + one["skipped"] + one["elsewhere"] == 10
    assert _exactly_once(root, ["pair"]) == {"pair": reference}


KILLED = {**CAMPAIGN, "name": "killed", "episodes": 12, "envs_per_worker": 1, "horizon": 80,
          "policies": [{"name": "paced", "entrypoint": "tests.test_leases:PacedExpert"}]}


@pytest.mark.slow
@pytest.mark.sim
@pytest.mark.chaos
def test_one_of_two_drivers_killed_mid_run_the_other_finishes_after_its_leases_expire(tmp_path):
    reference = _one_driver(tmp_path / "alone", KILLED)
    campaign, root = _write(tmp_path, KILLED), tmp_path / "store"
    lease = ("--lease-seconds", "3")
    victim = _assay("run", str(campaign), "--store", str(root), "-x", "local", "--workers", "2", "--json", *lease)
    survivor = _assay("run", str(campaign), "--store", str(root), "-x", "inline", "--json", *lease)
    try:
        deadline, victims = time.monotonic() + HANG_GUARD_S, f"owner like '%:{victim.pid}:%'"
        while victim.poll() is None and time.monotonic() < deadline and not (  # both drivers at work
                _count(root, "job_claims", f"where {victims}") and _count(root, "job_claims", f"where not {victims}")):
            time.sleep(0.02)
        assert victim.poll() is None, "the first driver ended before the kill; pace the campaign slower"
        os.killpg(victim.pid, signal.SIGKILL)  # the driver and its workers at once: a lost machine
        victim.communicate()
        held = _count(root, "job_claims", f"where {victims}")
        result = _finish(survivor)
    finally:
        for run in (victim, survivor):
            _kill_group(run)
    assert held >= 1  # the dead driver left claims, which the survivor (started before) waited out and took over
    assert result["ran"] + result["skipped"] + result["elsewhere"] == 12 and result["ran"] >= held
    assert _exactly_once(root, ["killed"]) == {"killed": reference}


def _count(root: Path, table: str, where: str = "") -> int:
    import sqlite3

    try:
        with sqlite3.connect(root / "catalog.sqlite", timeout=5) as conn:
            return int(conn.execute(f"select count(*) from {table} {where}").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0


@pytest.mark.slow
@pytest.mark.sim
def test_two_campaigns_at_once_on_one_store_both_complete(tmp_path):
    first = {**CAMPAIGN, "name": "first", "policies": ["expert"]}
    second = {**CAMPAIGN, "name": "second"}  # shares first's five jobs (same task, policy and seeds)
    references = {"first": _one_driver(tmp_path / "a", first), "second": _one_driver(tmp_path / "b", second)}
    root = tmp_path / "store"
    runs = [_assay("run", str(_write(tmp_path, data)), "--store", str(root), "-x", "inline", "--json")
            for data in (first, second)]
    try:
        a, b = (_finish(run) for run in runs)
    finally:
        for run in runs:
            _kill_group(run)
    assert a["ran"] + a["skipped"] + a["elsewhere"] == 5 and b["ran"] + b["skipped"] + b["elsewhere"] == 10
    assert a["ran"] + b["ran"] == 10  # the shared five ran once
    assert _exactly_once(root, ["first", "second"]) == references
