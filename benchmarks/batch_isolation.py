"""One failing row against its batch-mates (issue 50): a batch of 6 environments served by a stateful policy with a
session per environment (each answer draws from an RNG seeded by the episode's seed), where the episode of seed 12
raises at its 4th request. Counts, per trial, the batch-mates whose trajectory differs from an undisturbed run of the
same six, and prints the failing row's reason; then the reason a full session table (5 sessions for 6 environments)
gives the row it refuses.

    PYTHONPATH=src:. .venv/bin/python benchmarks/batch_isolation.py [--trials 8]

Uses the test policy and environment of ``tests/remote_support.py``; nothing here depends on a particular Assay
version beyond the server and client, so an older checkout is measured the same way (PYTHONPATH=OLD/src:.).
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from assay.policies.remote import PolicyServer, PolicyServerConfig, RemotePolicy, ServerThread
from assay.policies.remote.client import RemoteParams
from assay.run import rollout
from tests.remote_support import Integrator, SeededNoise, jobs_for, state_task

SEEDS, TASK = [10, 11, 12, 13, 14, 15], state_task(horizon=8)


def episodes(factory: Any, params: dict[str, Any] | None = None, **config: Any) -> list[Any]:
    server = PolicyServer(factory(), TASK, PolicyServerConfig(port=0, max_wait_ms=2.0, **config),
                          {"policy": "noise", "version": "1"}, factory=factory)
    with ServerThread(server):
        policy = RemotePolicy(server.url, timeout_s=10, **(params or {}))
        try:
            return rollout([Integrator(TASK) for _ in SEEDS], policy, jobs_for(TASK, SEEDS))
        finally:
            policy.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=8)
    trials = parser.parse_args().trials
    logging.getLogger("assay.policy_server").setLevel(logging.CRITICAL)  # the injected failure's traceback
    for trial in range(trials):
        undisturbed = episodes(SeededNoise)
        disturbed = episodes(lambda: SeededNoise(fail_seed=12, fail_at=3))
        changed = sum(a.trajectory_hash() != b.trajectory_hash()
                      for a, b in zip(undisturbed, disturbed, strict=True) if a.job.seed != 12)
        print(f"trial {trial}: {changed} of 5 batch-mates changed; the failing row: {disturbed[2].reason}")
    short = {"connect_attempts": 2, "backoff_s": 0.01}
    if "capacity_wait_s" in RemoteParams.model_fields:  # a checkout that waits for room: a short wait
        short["capacity_wait_s"] = 0.3
    full = episodes(SeededNoise, short, max_sessions=5)
    print("a full table:", sorted(r.reason for r in full if r.outcome.value == "error"))


if __name__ == "__main__":
    main()
