"""Per-environment state on the policy server: a stateful policy served by ``serve-policy`` behaves as
it does in process (one instance per environment session, reset with the episode's seed and prompt),
lost state is refused instead of passing silently, and a stateless class stays batched."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from assay.cli.serve_commands import policy_server
from assay.errors import RemotePolicyError
from assay.policies import PolicyContext
from assay.policies.remote import PolicyServer, RemotePolicy, ServerConfig, ServerThread
from assay.run import InlineExecutor, LocalExecutor
from assay.store import Outcome
from tests.remote_support import SMALL_MLP, state_task
from tests.test_faults import run_and_collect

DEGRADED = {"action_noise": 0.4, "action_delay": 2}


class Counter:
    """Stateful: answers, per slot, how many times it was asked in this episode, plus the slot's seed."""

    def reset(self, context: PolicyContext) -> None:
        self.seeds, self.calls = list(context.seeds), [0] * context.batch_size
        self.prompts = list(context.instructions)

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        out = []
        for slot in observations["env_ids"]:
            self.calls[slot] += 1
            out.append([self.calls[slot], self.seeds[slot], len(self.prompts[slot]), 0.0])
        return np.asarray(out, dtype=np.float64)


def _counter_server(**config: Any) -> PolicyServer:
    return PolicyServer(Counter(), state_task(), ServerConfig(port=0, **config), {"policy": "counter", "version": "1"},
                        factory=Counter)


def _campaign(name: str, policy: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "episodes": 4, "horizon": 15, "envs_per_worker": 2, "seed": 11,
            "tasks": ["metaworld/reach@1"], "policies": [{"name": "degraded", **policy}], **extra}


def _outcomes(results: dict) -> list[tuple]:
    """Outcome, steps and trajectory hash (states and actions, bit for bit) of each episode, without its key
    (a served policy's version differs from the in-process one, and so does the step file's metadata)."""
    return sorted((v[0], v[2], v[3]) for v in results.values())


def test_each_session_keeps_its_own_state_and_seed():
    server = _counter_server()
    with ServerThread(server):
        policy = RemotePolicy(server.url, timeout_s=5)
        policy.reset(PolicyContext(state_task(), (7, 9), ("reach", "reach the red ball")))
        batch = {"state": np.zeros((2, 39)), "instruction": ["reach", "reach the red ball"], "env_ids": np.arange(2)}
        first = policy.act(batch)
        alone = policy.act({**batch, "state": np.zeros((1, 39)), "instruction": ["reach the red ball"],
                            "env_ids": np.array([1])})
        second = policy.act(batch)
        policy.reset(PolicyContext(state_task(), (5,), ("reach",)))
        assert len(server.sessions) == 2
        fresh = policy.act({**batch, "state": np.zeros((1, 39)), "instruction": ["reach"], "env_ids": np.array([0])})
        assert len(server.sessions) == 1, "a reset ends the client's earlier sessions (and frees their instances)"
        other = RemotePolicy(server.url, timeout_s=5)  # another client's sessions are its own
        other.reset(PolicyContext(state_task(), (8,), ("reach",)))
        other.act({**batch, "state": np.zeros((1, 39)), "instruction": ["reach"], "env_ids": np.array([0])})
        assert len(server.sessions) == 2
        other.close()
        policy.close()
    assert first[:, 0, :3].tolist() == [[1, 7, 5], [1, 9, 18]]
    assert alone[:, 0, :3].tolist() == [[2, 9, 18]]
    assert second[:, 0, :3].tolist() == [[2, 7, 5], [3, 9, 18]]
    assert fresh[:, 0, :3].tolist() == [[1, 5, 5]], "a reset starts new sessions"
    assert server.metadata["server"]["sessions"] is True


def test_a_session_unknown_past_its_first_step_is_refused_not_silently_restarted():
    server = _counter_server()
    with ServerThread(server):
        policy = RemotePolicy(server.url, timeout_s=5)
        policy.reset(PolicyContext(state_task(), (7,), ("reach",)))
        batch = {"state": np.zeros((1, 39)), "instruction": ["reach"], "env_ids": np.arange(1)}
        policy.act(batch)
        owner = ("client", policy._client)
        server.sessions.end(owner, server.sessions.names(owner))  # as a restart would
        with pytest.raises(RemotePolicyError, match="E_SESSION_UNKNOWN: .*unknown at step 1"):
            policy.act(batch)
        policy.close()


def test_sessions_beyond_the_limit_are_refused_and_live_ones_never_evicted():
    server = _counter_server(max_sessions=2)
    with ServerThread(server):
        policy = RemotePolicy(server.url, timeout_s=5)
        policy.reset(PolicyContext(state_task(), (1, 2, 3), ("a", "b", "c")))
        one = {"state": np.zeros((1, 39)), "instruction": ["x"]}
        for slot in (0, 1):
            policy.act({**one, "env_ids": np.array([slot])})
        with pytest.raises(RemotePolicyError, match="E_SESSIONS_FULL: the server holds its limit of 2 sessions"):
            policy.act({**one, "env_ids": np.array([2])})
        owner = ("client", policy._client)
        assert sorted(name.rsplit("/", 1)[1] for name in server.sessions.names(owner)) == ["0", "1"]
        assert policy.act({**one, "env_ids": np.array([1])})[0, 0, 0] == 2, "a live session goes on"
        policy.close()


@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager:DeprecationWarning")
def test_a_plain_openpi_client_is_one_session_per_connection():
    client_policy = pytest.importorskip("openpi_client.websocket_client_policy")
    server = _counter_server()
    request = {"observation/state": np.zeros(39, np.float32), "prompt": "go"}
    with ServerThread(server):
        client = client_policy.WebsocketClientPolicy("127.0.0.1", server.port)
        answers = [client.infer(request)["actions"] for _ in range(3)]
        other = client_policy.WebsocketClientPolicy("127.0.0.1", server.port)
        second = other.infer(request)["actions"]
        for each in (client, other):
            each._ws.close()  # openpi's client has no close()
    assert [int(a[0][0]) for a in answers] == [1, 2, 3]
    assert int(second[0][0]) == 1


def test_a_stateless_class_is_served_as_one_batched_instance():
    server = policy_server("mlp", "metaworld/reach@1", SMALL_MLP, ServerConfig(port=0))
    assert server.factory is None and server.metadata["server"]["sessions"] is False
    assert server.metadata["assay"]["sessions"] is False


@pytest.mark.slow
@pytest.mark.sim
def test_a_served_stateful_policy_matches_it_in_process_on_any_worker_count(tmp_path):
    """degraded-expert keeps an RNG stream seeded from each episode's seed and a queue of delayed actions:
    served with sessions, its episodes equal the in-process ones step for step, inline and on 2 workers;
    served statelessly they do not (the test can fail)."""
    _, local, _ = run_and_collect(tmp_path / "in-process", InlineExecutor(tmp_path / "in-process"),
                                  _campaign("degraded", {"builtin": "degraded-expert", "params": DEGRADED}))
    served = {}
    for stateless in (False, True):
        server = policy_server("degraded-expert", "metaworld/reach@1", DEGRADED, ServerConfig(port=0, max_wait_ms=2),
                               stateless=stateless)
        with ServerThread(server):
            runs = [("inline", InlineExecutor)] + ([] if stateless else [("local-2", lambda r: LocalExecutor(r, 2))])
            for label, make in runs:
                root = tmp_path / f"{label}-{stateless}"
                _, served[label, stateless], _ = run_and_collect(root, make(root),
                                                                 _campaign("degraded", {"remote": server.url}))
    assert all(v[0] is not Outcome.ERROR for v in local.values())
    assert _outcomes(served["inline", False]) == _outcomes(served["local-2", False]) == _outcomes(local)
    assert len({v[3] for v in local.values()}) == 4, "four distinct trajectories (hash of states and actions)"
    assert _outcomes(served["inline", True]) != _outcomes(local)


def test_server_errors_are_assay_errors_naming_the_cause():
    import socket

    from assay.errors import AssayError
    from assay.policies.remote import ProtocolError, ServerStartError

    assert issubclass(ProtocolError, AssayError) and issubclass(ProtocolError, ValueError)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = PolicyServer(Counter(), state_task(), ServerConfig(port=port))
        cause = rf"127.0.0.1:{port} did not start \(OSError: .*address already in use"
        with pytest.raises(ServerStartError, match=cause), ServerThread(server):
            pass
