"""Chaos tier: SIGKILL the orchestrator, a worker and a policy server mid-campaign (issue 11, G2-G4).

After the rerun every planned job exists exactly once (episodes rows, campaign
links, files), no partial or orphaned file remains, every file matches its
checksum, and outcomes and trajectory hashes equal an undisturbed run. Kill
points come from a seeded RNG, so a failure reproduces. Bounded: Pendulum, 40
steps, a policy paced at 3 ms per step; the tier takes about 2 minutes on 2
shared cores (it is also marked ``slow``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import Outcome, Store
from tests.chaos_support import finish, free_port, kill_group, start_run, start_server, wait_for_episodes, workers_of

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

EPISODES = 16
CAMPAIGN = {"name": "chaos", "seed": 11, "episodes": EPISODES, "envs_per_worker": 1, "horizon": 40,
            "tasks": ["gymnasium/Pendulum-v1"], "policies": ["tests.chaos_support:PacedRandom"]}
SEED = 20261202


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(json.dumps(data))
    return path


def _undisturbed(root: Path, data: dict) -> dict[str, tuple[str, int, str]]:
    with Store(root) as store:
        run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(root))
        return {r.key: (r.outcome.value, r.steps, r.trajectory_hash) for r in store.catalog.episodes(campaign=data["name"])}


def assert_exactly_once(root: Path, name: str, reference: dict[str, tuple[str, int, str]]) -> None:
    """Every job once, no orphan or partial file, every checksum good, results equal the undisturbed run."""
    with Store(root) as store:
        records = store.catalog.episodes(campaign=name)
        assert {r.key: (r.outcome.value, r.steps, r.trajectory_hash) for r in records} == reference
        with store.catalog.engine.connect() as conn:
            assert conn.execute(sa.text("select count(*) from episodes")).scalar() == len(reference)
            assert conn.execute(sa.text("select count(*) from campaign_episodes")).scalar() == len(reference)
        assert store.damaged(reference) == {}
        on_disk = {str(p.relative_to(root)) for p in (root / "episodes").rglob("*") if p.is_file()}
        assert on_disk == {r.data_path for r in records if r.data_path}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, tuple[str, int, str]]:
    return _undisturbed(tmp_path_factory.mktemp("undisturbed"), CAMPAIGN)


def test_orchestrator_killed_at_three_random_points_then_resumed(tmp_path, reference):
    rng = random.Random(SEED)
    targets = sorted(rng.sample(range(1, EPISODES - 3), 3))
    campaign, root = _write(tmp_path, CAMPAIGN), tmp_path / "store"
    seen = []
    for target in targets:
        process = start_run(campaign, root, "--workers", "2")
        try:
            seen.append(wait_for_episodes(process, root, target))
            assert process.poll() is None, "the campaign ended before the kill point; pace it slower"
            os.kill(process.pid, signal.SIGKILL)  # the orchestrator alone: its workers are orphaned mid-batch
            time.sleep(0.3)
        finally:
            kill_group(process)
    assert seen == sorted(seen) and seen[-1] < EPISODES, seen
    result = finish(start_run(campaign, root, "--workers", "2"))
    assert result["ran"] + result["skipped"] == EPISODES and result["skipped"] >= seen[-1]
    assert_exactly_once(root, "chaos", reference)


def test_worker_killed_twice_the_campaign_completes_in_the_same_run(tmp_path, reference):
    rng = random.Random(SEED + 1)
    targets = sorted(rng.sample(range(1, EPISODES - 4), 2))
    campaign, root = _write(tmp_path, CAMPAIGN), tmp_path / "store"
    process = start_run(campaign, root, "--workers", "2")
    killed = []
    try:
        for target in targets:
            wait_for_episodes(process, root, target)
            workers = workers_of(process.pid)
            assert workers and process.poll() is None, "no worker to kill; pace the campaign slower"
            victim = rng.choice(workers)
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
            time.sleep(0.2)
        result = finish(process)
    finally:
        kill_group(process)
    assert len(killed) == 2 and result["ran"] == EPISODES
    assert result["outcomes"]["error"] == 0  # the dead worker's batch was retried, not lost or errored
    assert_exactly_once(root, "chaos", reference)


def test_policy_server_killed_errors_are_honest_and_retry_errors_completes(tmp_path):
    port = free_port()
    data = {**CAMPAIGN, "name": "chaos-remote", "episodes": 12,
            "policies": [{"name": "served", "remote": f"ws://127.0.0.1:{port}",
                          "params": {"connect_attempts": 2, "backoff_s": 0.05, "timeout_s": 5}}]}
    campaign, root = _write(tmp_path, data), tmp_path / "store"
    server = start_server(port)
    try:
        reference = _undisturbed(tmp_path / "undisturbed", data)
        assert all(outcome != Outcome.ERROR.value for outcome, _, _ in reference.values())
        process = start_run(campaign, root, "--workers", "2")
        try:
            wait_for_episodes(process, root, random.Random(SEED + 2).randrange(2, 8))
            assert process.poll() is None
            kill_group(server)  # the server dies with requests in flight
            result = finish(process)
        finally:
            kill_group(process)
        errors = result["outcomes"]["error"]
        assert errors > 0 and result["ran"] == 12
        with Store(root) as store:
            failed = [r for r in store.catalog.episodes(campaign="chaos-remote") if r.outcome is Outcome.ERROR]
        assert len(failed) == errors and all(r.reason.strip() for r in failed), [r.reason for r in failed]
        server = start_server(port)
        plain = finish(start_run(campaign, root, "--workers", "2"))
        assert (plain["ran"], plain["outcomes"]["error"]) == (0, 0)  # errors are kept unless asked
        retried = finish(start_run(campaign, root, "--workers", "2", "--retry-errors"))
        assert (retried["ran"], retried["retried"], retried["outcomes"]["error"]) == (errors, errors, 0)
        assert_exactly_once(root, "chaos-remote", reference)
    finally:
        kill_group(server)
