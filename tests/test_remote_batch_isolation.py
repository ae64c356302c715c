"""One row's failure never changes its batch-mates (issue 50, item 1). A stateful policy served with a session per
environment is stepped once per answer; when one row of a batch fails, the rows the server already answered keep
their answers (they are never asked again, which would step their sessions twice), and the failing row records its
own error: the policy's, or a full session table's, never "session unknown"."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from assay.policies.remote import PolicyServer, PolicyServerConfig, RemotePolicy, ServerThread
from assay.run import rollout
from assay.spec import Pipeline
from assay.store import Outcome
from tests.remote_support import Integrator, SeededNoise, jobs_for, state_task

SEEDS = [10, 11, 12, 13, 14, 15]
TASK = state_task(horizon=8)


def _episodes(pipeline: Pipeline, factory: Any, params: dict[str, Any] | None = None, **config: Any) -> list[Any]:
    """The six episodes of one batch against a fresh server whose sessions ``factory`` makes."""
    server = PolicyServer(factory(), TASK, PolicyServerConfig(port=0, max_wait_ms=2.0, **config),
                          {"policy": "noise", "version": "1"}, factory=factory)
    with ServerThread(server):
        policy = RemotePolicy(server.url, timeout_s=10, **(params or {}))
        try:
            return rollout([Integrator(TASK) for _ in SEEDS], policy, jobs_for(TASK, SEEDS, pipeline=pipeline))
        finally:
            policy.close()


@pytest.mark.parametrize("pipeline", [Pipeline.LOCKSTEP, Pipeline.DECOUPLED])
def test_one_failing_row_leaves_its_five_batch_mates_bit_identical(pipeline: Pipeline) -> None:
    undisturbed = _episodes(pipeline, SeededNoise)
    disturbed = _episodes(pipeline, lambda: SeededNoise(fail_seed=12, fail_at=3))
    assert [r.outcome for r in undisturbed] == [Outcome.TIMEOUT] * 6
    for before, after in zip(undisturbed, disturbed, strict=True):
        if after.job.seed == 12:
            continue
        assert (after.outcome, after.steps, after.reason) == (Outcome.TIMEOUT, 8, "")
        assert after.trajectory_hash() == before.trajectory_hash(), f"seed {after.job.seed} changed"
    failed = disturbed[SEEDS.index(12)]
    assert failed.outcome is Outcome.ERROR and failed.steps == 3
    assert "E_POLICY: the policy raised RuntimeError: injected failure at request 3" in failed.reason
    assert "E_SESSION_UNKNOWN" not in failed.reason
    assert np.array_equal(failed.columns()["action"], undisturbed[SEEDS.index(12)].columns()["action"][:3])


def test_a_full_session_table_fails_only_the_refused_row_with_its_own_code() -> None:
    """Five sessions for six environments: the sixth is refused E_SESSIONS_FULL, waits its (short) deadline, and ends
    with that code; the five served ones are untouched."""
    undisturbed = _episodes(Pipeline.LOCKSTEP, SeededNoise)
    full = _episodes(Pipeline.LOCKSTEP, SeededNoise, {"capacity_wait_s": 0.3, "backoff_s": 0.02}, max_sessions=5)
    refused = [r for r in full if r.outcome is Outcome.ERROR]
    assert len(refused) == 1 and refused[0].steps == 0
    assert "E_SESSIONS_FULL: the server holds its limit of 5 sessions" in refused[0].reason
    assert "waited 0.3 s (capacity_wait_s)" in refused[0].reason
    for before, after in zip(undisturbed, full, strict=True):
        if after is not refused[0]:
            assert after.outcome is Outcome.TIMEOUT and after.trajectory_hash() == before.trajectory_hash()


def test_a_request_the_server_closed_unread_goes_to_another_connection_once() -> None:
    """The client's idle connections are evicted (1013) for newcomers: a request sent on one before the client saw
    the close is dropped unread by the server and sent again on another connection (else the client finds the
    connection closed first); either way each session is stepped exactly once per answer."""
    import time

    from websockets.sync.client import connect

    from assay.policies import PolicyContext
    from tests.test_remote_many_clients import Counter

    server = PolicyServer(Counter(), TASK, PolicyServerConfig(port=0, max_wait_ms=0.0, max_connections=2,
                                                       evict_idle_after_s=0.2), {"policy": "c", "version": "1"},
                          factory=Counter)
    with ServerThread(server):
        policy = RemotePolicy(server.url, timeout_s=10)
        policy.reset(PolicyContext(TASK, (7, 9), ("go", "go")))
        batch = {"state": np.zeros((2, 39)), "instruction": ["go", "go"], "env_ids": np.arange(2)}
        first = policy.act(batch)[:, 0, :2].tolist()
        time.sleep(0.3)  # both of its connections have idled past the eviction threshold
        answers = [first]
        with connect(f"ws://127.0.0.1:{server.port}") as newcomer:
            newcomer.recv()  # seated in place of one of the client's connections
            for _ in range(3):
                answers.append(policy.act(batch)[:, 0, :2].tolist())
                time.sleep(0.25)  # idle again: the next request may meet another eviction
        evictions = server.book.evictions
        policy.close()
    assert evictions >= 1
    assert answers == [[[n, 7], [n, 9]] for n in range(1, 5)], "each session stepped once per answer"
