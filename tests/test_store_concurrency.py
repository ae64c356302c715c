"""Every wait has a limit and two runs never share a store's jobs (issue 25).

* Two ``assay run`` of one campaign on one store run side by side (the run lock is shared,
  job leases in the catalog split the jobs, ``tests/test_leases.py``); each job runs once and
  every checksum verifies.
* A policy that never answers: the default (or the campaign's) wall-clock limit turns
  it into ``error: wall_timeout`` and the campaign goes on with the other policy.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from assay.run import DEFAULT_EPISODE_TIMEOUT_S, FaultPolicy
from assay.spec import campaign_from_data
from assay.store import Outcome, Store
from assay.store.locking import LOCK_NAME, run_lock

ROOT = Path(__file__).resolve().parent.parent


def _assay(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "assay.cli.app", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_the_run_lock_excludes_a_second_holder_and_is_reentrant(tmp_path):
    order: list[str] = []
    waited: list[str] = []
    with run_lock(tmp_path):
        with run_lock(tmp_path):  # re-entrant in one process
            order.append("inner")

        def second() -> None:
            # another open file description: what a second process would see
            import fcntl

            fd = os.open(tmp_path / LOCK_NAME, os.O_RDWR)
            try:
                with pytest.raises(BlockingIOError):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                waited.append(os.read(fd, 32).decode())
            finally:
                os.close(fd)

        thread = threading.Thread(target=second)
        thread.start()
        thread.join()
    assert order == ["inner"] and waited == [str(os.getpid())]  # the holder's pid names who holds it


@pytest.mark.slow
def test_two_concurrent_runs_of_one_campaign_run_each_job_once(tmp_path):
    campaign = tmp_path / "twice.yaml"
    campaign.write_text("name: twice\nseed: 3\nepisodes: 4\nenvs_per_worker: 2\n"
                        "tasks: [metaworld/reach@1]\npolicies: [expert, random]\n")
    store = tmp_path / "store"
    runs = [_assay("run", str(campaign), "--store", str(store), "-x", "inline", "--json") for _ in range(2)]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    import json

    results = [json.loads(out[out.index("{"):]) for out in outputs]
    assert sum(r["ran"] for r in results) == 8, outputs  # between them, each job once
    assert all(r["ran"] + r["skipped"] + r["elsewhere"] == 8 for r in results), outputs
    with Store(store, create=False) as opened:
        records = opened.catalog.episodes(campaign="twice")
        assert len(records) == 8 and len({r.key for r in records}) == 8
        assert opened.damaged(r.key for r in records) == {}  # every checksum verifies


def test_every_run_has_a_default_wall_clock_limit():
    from assay.cli.campaign_commands import fault_policy

    spec = campaign_from_data({"name": "c", "episodes": 1, "tasks": ["metaworld/reach@1"], "policies": ["expert"]})
    assert FaultPolicy().episode_timeout_s == DEFAULT_EPISODE_TIMEOUT_S == 900.0
    assert fault_policy(spec, None).episode_timeout_s == 900.0
    timed = spec.model_copy(update={"episode_timeout_s": 30.0})
    assert fault_policy(timed, None).episode_timeout_s == 30.0
    assert fault_policy(timed, 5.0).episode_timeout_s == 5.0
    assert timed.content_hash() == spec.content_hash()  # an execution setting is not the campaign's identity


@pytest.mark.slow
def test_a_hung_policy_becomes_an_error_and_the_campaign_goes_on(tmp_path):
    campaign = tmp_path / "hang.yaml"
    campaign.write_text(
        "name: hang\nseed: 5\nepisodes: 1\nepisode_timeout_s: 12\ntasks: [metaworld/reach@1]\n"
        "policies: [{name: hanger, entrypoint: 'tests.faulty_policies:HangingExpert', params: {modulo: 1}}, expert]\n")
    started = time.monotonic()
    # --allow-errors: every episode of 'hanger' is an error by design, which the gate otherwise fails loudly
    run = _assay("run", str(campaign), "--store", str(tmp_path / "store"), "--workers", "2", "--allow-errors")
    output = run.communicate(timeout=240)[0]
    assert run.returncode == 0, output
    with Store(tmp_path / "store", create=False) as opened:
        records = opened.catalog.episodes(campaign="hang")
    hung = [r for r in records if r.policy_name == "hanger"]
    assert len(hung) == 1 and all(r.outcome is Outcome.ERROR and r.reason.startswith("wall_timeout") for r in hung)
    assert all(r.outcome is Outcome.SUCCESS for r in records if r.policy_name == "expert")
    assert len(records) == 2 and time.monotonic() - started < 200


def test_a_dead_writers_campaign_temporary_is_cleaned(tmp_path):
    import socket

    dead = subprocess.Popen(["true"])
    dead.wait()
    with Store(tmp_path / "store") as store:
        folder = store.root / "campaigns" / "c"
        folder.mkdir(parents=True)
        stale = folder / f"campaign.json.tmp-{socket.gethostname()}-{dead.pid}"
        mine = folder / f"campaign.json.tmp-{socket.gethostname()}-{os.getpid()}"
        stale.write_text("{")
        mine.write_text("{")
        assert store.clean_temporaries() == 1
        assert not stale.exists() and mine.exists()  # a live writer's temporary is left alone
