"""Per-environment state on the policy server: a stateful policy served by ``serve-policy`` behaves as
it does in process (one instance per environment session, reset with the episode's seed and prompt),
lost state is refused instead of passing silently, and a stateless class stays batched."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from assay.cli.serve_commands import policy_server
from assay.errors import RemotePolicyError, SessionRefused
from assay.policies import PolicyContext
from assay.policies.remote import PolicyServer, PolicyServerConfig, RemotePolicy, ServerThread
from assay.policies.remote.sessions import SessionTable
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
    return PolicyServer(Counter(), state_task(), PolicyServerConfig(port=0, **config),
                        {"policy": "counter", "version": "1"}, factory=Counter)


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
        policy = RemotePolicy(server.url, timeout_s=5, capacity_wait_s=0.2, backoff_s=0.01)
        policy.reset(PolicyContext(state_task(), (1, 2, 3), ("a", "b", "c")))
        one = {"state": np.zeros((1, 39)), "instruction": ["x"]}
        for slot in (0, 1):
            policy.act({**one, "env_ids": np.array([slot])})
        with pytest.raises(RemotePolicyError, match="E_SESSIONS_FULL: the server holds its limit of 2 sessions "
                                                    r"\(--max-sessions\), each stepped within the last 120 s.*; "
                                                    r"still refused after it waited 0.2 s \(capacity_wait_s\)$"):
            policy.act({**one, "env_ids": np.array([2])})
        # asked again after its first refusal (a wait is always taken then); how many more times fit into
        # capacity_wait_s depends on the machine's load, so only the second ask is certain
        assert server.sessions.refused_full >= 2, "asked again, with backoff, until capacity_wait_s had passed"
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
    server = policy_server("mlp", "metaworld/reach@1", SMALL_MLP, PolicyServerConfig(port=0))
    assert server.factory is None and server.metadata["server"]["sessions"] is False
    assert server.metadata["assay"]["sessions"] is False


def test_only_a_declared_true_makes_a_policy_stateless():
    from assay.policies import MLPPolicy, SupportsStateless, is_stateless

    class Truthy:
        stateless = "yes"  # a truthy string is not a declaration

    class Undeclared:
        pass

    assert is_stateless(MLPPolicy) and isinstance(MLPPolicy, SupportsStateless)
    assert not is_stateless(Truthy) and not is_stateless(Truthy())
    assert not is_stateless(Undeclared()) and not isinstance(Undeclared(), SupportsStateless)


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
        server = policy_server("degraded-expert", "metaworld/reach@1", DEGRADED,
                               PolicyServerConfig(port=0, max_wait_ms=2), stateless=stateless)
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
        server = PolicyServer(Counter(), state_task(), PolicyServerConfig(port=port))
        cause = rf"127.0.0.1:{port} did not start \(OSError: .*address already in use"
        with pytest.raises(ServerStartError, match=cause), ServerThread(server):
            pass


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _table(clock: _Clock, **limits: Any) -> SessionTable:
    return SessionTable(Counter, **{"max_sessions": 3, "per_client": 3, "idle_s": 120.0, "clock": clock, **limits})


def _open(table: SessionTable, owner: str, name: str, step: int = 0) -> Any:
    context = PolicyContext(state_task(), (1,), ("go",))
    return table.get(owner, name, step, lambda made: made.reset(context))


def test_a_session_not_stepped_for_the_idle_window_ends_and_one_stepped_goes_on():
    clock = _Clock()
    table = _table(clock)
    kept, dropped = _open(table, "a", "kept"), _open(table, "a", "dropped")
    clock.now = 100.0
    assert _open(table, "a", "kept", step=1) is kept
    clock.now = 119.9
    assert table.expire() == 0 and len(table) == 2
    clock.now = 120.0  # "dropped" was last stepped at 0
    assert table.expire() == 1 and table.names("a") == ["kept"] and table.expired == 1
    with pytest.raises(SessionRefused, match=r"unknown at step 1: .*or it was not stepped for 120 s") as lost:
        _open(table, "a", "dropped", step=1)
    assert lost.value.code == "E_SESSION_UNKNOWN", "lost state is refused, never silently restarted"
    assert _open(table, "a", "kept", step=2) is kept and dropped is not None
    clock.now = 10_000.0  # a request finds everything idle: it ends those sessions, then opens its own
    assert _open(table, "b", "fresh") is not None and len(table) == 1 and table.expired == 2


def test_a_full_table_takes_a_new_session_only_in_place_of_an_expired_one():
    clock = _Clock()
    table = _table(clock)
    for name, at in (("x", 0.0), ("y", 50.0), ("z", 90.0)):
        clock.now = at
        _open(table, f"rogue-{name}", name)
    clock.now = 119.0
    with pytest.raises(SessionRefused) as full:
        _open(table, "victim", "v")
    assert full.value.code == "E_SESSIONS_FULL" and table.refused_full == 1, "every session was stepped recently"
    clock.now = 121.0  # x (0) has idled past 120 s; y (50) and z (90) not
    _open(table, "victim", "v")
    assert [table.names(f"rogue-{n}") for n in "xyz"] == [[], ["y"], ["z"]] and table.names("victim") == ["v"]


def test_a_session_being_built_is_not_expired_and_its_idle_time_starts_when_ready():
    clock = _Clock()

    class SlowToBuild(Counter):
        def __init__(self) -> None:
            clock.now += 500.0  # a model that takes longer than the idle window to load

    table = SessionTable(SlowToBuild, idle_s=120.0, clock=clock)
    made = _open(table, "a", "slow")
    assert table.names("a") == ["slow"] and table.expire() == 0
    clock.now += 100.0
    assert _open(table, "a", "slow", step=1) is made


def test_the_server_ends_idle_sessions_without_any_request():
    server = _counter_server(session_idle_s=0.3)
    with ServerThread(server):
        policy = RemotePolicy(server.url, timeout_s=5)
        policy.reset(PolicyContext(state_task(), (7, 9), ("go", "go")))
        policy.act({"state": np.zeros((2, 39)), "instruction": ["go"] * 2, "env_ids": np.arange(2)})
        held = len(server.sessions)
        deadline = time.monotonic() + 20
        while len(server.sessions) and time.monotonic() < deadline:  # the client keeps its connections open
            time.sleep(0.05)
        left, expired = len(server.sessions), server.sessions.expired
        policy.close()
    assert (held, left, expired) == (2, 0, 2)
    assert server.metadata["server"]["session_idle_s"] == 0.3


def test_session_idle_must_be_positive_or_none():
    with pytest.raises(ValueError, match="session_idle_s must be positive"):
        PolicyServerConfig(session_idle_s=0)
    with pytest.raises(ValueError, match="idle_s must be positive"):
        SessionTable(Counter, idle_s=-1.0)
    assert SessionTable(Counter, idle_s=None).expire() == 0


def test_a_new_session_refused_for_a_full_server_is_retried_and_served_when_room_frees():
    server = _counter_server(max_sessions=2, session_grace_s=0)
    with ServerThread(server):
        holder, newcomer = RemotePolicy(server.url, timeout_s=5), RemotePolicy(server.url, timeout_s=5)
        holder.reset(PolicyContext(state_task(), (1, 2), ("a", "a")))
        holder.act({"state": np.zeros((2, 39)), "instruction": ["a"] * 2, "env_ids": np.arange(2)})
        newcomer.reset(PolicyContext(state_task(), (5,), ("b",)))
        answered: list[np.ndarray] = []
        waiting = threading.Thread(target=lambda: answered.append(newcomer.act(
            {"state": np.zeros((1, 39)), "instruction": ["b"], "env_ids": np.arange(1)})))
        waiting.start()
        deadline = time.monotonic() + 20
        while not server.sessions.refused_full and time.monotonic() < deadline:
            time.sleep(0.005)
        holder.close()  # its last connection closes: its sessions end (no grace here)
        waiting.join(timeout=30)
        newcomer.close()
    assert server.sessions.refused_full >= 1
    assert [a[0, 0, :2].tolist() for a in answered] == [[1, 5]], "served once the holder's sessions ended"
