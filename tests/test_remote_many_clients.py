"""serve-policy for many clients (issue 40): sessions belong to their client, an idle crowd cannot lock the
server out, a campaign wider than the server's connection limit completes, errors are one coded line.
All on loopback with random free ports; bounded in time and memory; nothing asserts on speed."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from assay.cli.serve_commands import policy_server
from assay.policies import PolicyContext
from assay.policies.remote import (
    CapacityWarning,
    PolicyServer,
    PolicyServerConfig,
    RemotePolicy,
    ServerThread,
    packb,
    unpackb,
)
from assay.policies.remote.wire import CLIENT_HEADER, SEED_KEY, SESSION_KEY, STEP_KEY
from assay.run import InlineExecutor, LocalExecutor
from assay.store import Outcome
from tests.remote_support import state_task
from tests.test_faults import run_and_collect


class Counter:
    """Stateful: per slot, how many times it was asked in this episode, and the slot's seed."""

    def reset(self, context: PolicyContext) -> None:
        self.seeds, self.calls = list(context.seeds), [0] * context.batch_size

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        out = []
        for slot in observations["env_ids"]:
            self.calls[slot] += 1
            out.append([self.calls[slot], self.seeds[slot], 0.0, 0.0])
        return np.asarray(out, dtype=np.float64)


def _counter_server(**config: Any) -> PolicyServer:
    return PolicyServer(Counter(), state_task(), PolicyServerConfig(**{"port": 0, "max_wait_ms": 0.0, **config}),
                        {"policy": "counter", "version": "1"}, factory=Counter)


def _victim_steps(policy: RemotePolicy, steps: int) -> list[list[int]]:
    batch = {"state": np.zeros((2, 39)), "instruction": ["go", "go"], "env_ids": np.arange(2)}
    return [policy.act(batch)[:, 0, :2].astype(int).tolist() for _ in range(steps)]


def _rogue(port: int, token: str | None, names: list[str], replies: list[str], done: list[str],
           leave: threading.Event) -> None:
    """Opens a fresh session per name (step 0), as fast as the server answers; keeps the error lines; then says
    it is ``done`` and holds its connection (and so its sessions) until ``leave`` is set."""
    headers = {CLIENT_HEADER: token} if token else None
    with connect(f"ws://127.0.0.1:{port}", additional_headers=headers) as ws:
        ws.recv()
        for name in names:
            ws.send(packb({"observation/state": np.zeros(39), "prompt": "x", SESSION_KEY: name, STEP_KEY: 0,
                           SEED_KEY: 1}))
            reply = ws.recv(timeout=30)
            if isinstance(reply, str):
                replies.append(reply)
        done.append(token or "anon")
        leave.wait(timeout=120)


def _episode(policy: RemotePolicy, seeds: tuple[int, ...]) -> dict[str, np.ndarray]:
    policy.reset(PolicyContext(state_task(), seeds, ("go",) * len(seeds)))
    return {"state": np.zeros((len(seeds), 39)), "instruction": ["go"] * len(seeds), "env_ids": np.arange(len(seeds))}


@pytest.mark.slow
def test_a_rogue_clients_5000_fresh_sessions_leave_another_clients_episodes_intact():
    """Rogues from 10 owners (6 tokens, several named like the victim's sessions, and 4 tokenless connections)
    open 5,000 fresh sessions and hold the table full. The victim's episode goes on intact; its next episode,
    wider than what it frees, is refused (E_SESSIONS_FULL) while the rogues' sessions are fresh, retried, and
    served once they have idled past --session-idle-s (an injected clock: no sleeping)."""
    now = [0.0]
    server = _counter_server(max_sessions=300, max_sessions_per_client=64, session_grace_s=0.2,
                             session_idle_s=120.0)
    server.sessions.clock = lambda: now[0]
    leave = threading.Event()
    with ServerThread(server):
        victim = RemotePolicy(server.url, timeout_s=30)
        batch = _episode(victim, (7, 9))
        before = [victim.act(batch)[:, 0, :2].astype(int).tolist() for _ in range(3)]
        spoofed = [f"{victim._client}/{victim._epoch + k}/{slot}" for k in range(1, 50) for slot in (0, 1)]
        # first 4 tokenless connections (4 owners, one epoch each: all their sessions stay live) take their quotas,
        # then 6 tokens try; every rogue holds its connection open
        plans = [(None, [f"anon{i}/1/{k}" for k in range(500)]) for i in range(4)]
        plans += [(uuid.uuid4().hex, spoofed + [f"r{i}/1/{k}" for k in range(500 - len(spoofed))]) for i in range(6)]
        replies: list[str] = []
        done: list[str] = []
        threads = [threading.Thread(target=_rogue, args=(server.port, token, names, replies, done, leave))
                   for token, names in plans]
        during = []
        for first, last in ((0, 4), (4, len(plans))):
            for thread in threads[first:last]:
                thread.start()
            during += [victim.act(batch)[:, 0, :2].astype(int).tolist() for _ in range(1 if first == 0 else 2)]
            deadline = time.monotonic() + 120
            while len(done) < last and time.monotonic() < deadline:
                time.sleep(0.05)
        after = [victim.act(batch)[:, 0, :2].astype(int).tolist() for _ in range(2)]
        full = len(server.sessions)
        now[0] = 100.0  # the victim's next episode: 4 environments, 2 more than its last one frees
        wider = _episode(victim, (11, 13, 15, 17))
        answered: list[Any] = []
        next_episode = threading.Thread(target=lambda: answered.append(victim.act(wider)))
        next_episode.start()
        deadline, rogues_refused = time.monotonic() + 30, server.sessions.refused_full
        while server.sessions.refused_full == rogues_refused and next_episode.is_alive() \
                and time.monotonic() < deadline:
            time.sleep(0.005)
        refused = server.sessions.refused_full - rogues_refused
        now[0] = 125.0  # the rogues' sessions (last stepped at 0) have idled past 120 s, the victim's (100) not
        next_episode.join(timeout=60)
        later = victim.act(wider)[:, 0, :2].astype(int).tolist()
        expired = server.sessions.expired
        leave.set()
        for thread in threads:
            thread.join(timeout=60)
        victim.close()
        deadline = time.monotonic() + 10
        while len(server.sessions) and time.monotonic() < deadline:  # everyone left: their sessions end
            time.sleep(0.05)
        left = len(server.sessions)
    assert before + during + after == [[[n, 7], [n, 9]] for n in range(1, 9)], "the victim's state went on intact"
    assert full == 300, "the rogues held every session the victim did not"
    codes = {reply.split(":", 1)[0] for reply in replies}
    # the four tokenless connections share one client's minimum (64) and are then refused for their share; the
    # tokens fill the rest
    assert codes <= {"E_SESSION_QUOTA", "E_SESSIONS_FULL", "E_SESSION_SHARE"} and "E_SESSION_SHARE" in codes, codes
    assert all("\n" not in reply and "Traceback" not in reply for reply in replies)
    # past the limits every fresh session is refused, none evicted; a spoofed name of a newer epoch ends only the
    # rogue's own earlier ones
    assert len(replies) >= 5000 - 298 - 6 * len(spoofed)
    assert refused >= 1, "the next episode was refused while the rogues' sessions were fresh"
    assert [a[:, 0, :2].astype(int).tolist() for a in answered] == [[[1, 11], [1, 13], [1, 15], [1, 17]]], \
        "retried, the next episode got its four sessions"
    assert later == [[2, 11], [2, 13], [2, 15], [2, 17]]
    assert expired == 298, "the idle rogue sessions ended, and none of the victim's"
    assert left == 0


def test_a_session_name_reaches_only_its_own_clients_session():
    server = _counter_server()
    with ServerThread(server):
        victim = RemotePolicy(server.url, timeout_s=10)
        victim.reset(PolicyContext(state_task(), (7, 9), ("go", "go")))
        _victim_steps(victim, 2)
        name = f"{victim._client}/{victim._epoch}/0"
        with connect(f"ws://127.0.0.1:{server.port}", additional_headers={CLIENT_HEADER: uuid.uuid4().hex}) as ws:
            ws.recv()
            ws.send(packb({"observation/state": np.zeros(39), SESSION_KEY: name, STEP_KEY: 2, SEED_KEY: 7}))
            refused = ws.recv(timeout=10)
            ws.send(packb({"observation/state": np.zeros(39), SESSION_KEY: name, STEP_KEY: 0, SEED_KEY: 5}))
            own = unpackb(ws.recv(timeout=10))["actions"][0, :2].tolist()
        assert refused.startswith("E_SESSION_UNKNOWN: ") and own == [1, 5], "its own fresh session, not the victim's"
        assert _victim_steps(victim, 1) == [[[3, 7], [3, 9]]]
        victim.close()


def _idle_crowd(url: str, count: int, stack: contextlib.ExitStack, **headers: str) -> list[Any]:
    crowd = [stack.enter_context(connect(url, additional_headers=headers or None)) for _ in range(count)]
    for ws in crowd:
        ws.recv()
    return crowd


@pytest.mark.slow
def test_64_idle_sockets_do_not_stop_a_new_or_an_active_client():
    """The server's default eviction threshold (10 s). A newcomer arriving right after an idle crowd filled the
    server is answered 503 with a Retry-After (when the crowd will have idled 10 s), waits it out (beyond the
    5-9 s of plain backoff) and is seated; the active client stepping meanwhile keeps its place and its state."""
    server = _counter_server(max_connections=64)
    assert server.config.evict_idle_after_s == 10.0
    with ServerThread(server), contextlib.ExitStack() as stack:
        url = f"ws://127.0.0.1:{server.port}"
        active = RemotePolicy(server.url, timeout_s=10)
        active.reset(PolicyContext(state_task(), (7, 9), ("go", "go")))
        steps = _victim_steps(active, 1)  # 2 connections
        crowd = _idle_crowd(url, 62, stack)  # the server is now full
        with pytest.raises(InvalidStatus) as refused, connect(url):
            pass
        newcomer = RemotePolicy(server.url, timeout_s=10)
        newcomer.reset(PolicyContext(state_task(), (3,), ("go",)))
        one = {"state": np.zeros((1, 39)), "instruction": ["go"], "env_ids": np.arange(1)}
        seated: list[Any] = []
        arriving = threading.Thread(target=lambda: seated.append(newcomer.act(one)))
        arriving.start()
        while arriving.is_alive():  # the active client goes on stepping while the newcomer waits
            steps += _victim_steps(active, 1)
            arriving.join(timeout=0.3)
        # while another idle crowd keeps arriving, the active client keeps its place and its state
        more: list[Any] = []
        for _ in range(3):
            more += _idle_crowd(url, 20, stack)
            steps += _victim_steps(active, 1)
        evictions = server.book.evictions
        newcomer.close()
        active.close()
    retry_after = int(refused.value.response.headers["Retry-After"])
    assert refused.value.response.status_code == 503 and 9 <= retry_after <= 10, "come back when the crowd gives way"
    assert [row[0, 0, :2].tolist() for row in seated] == [[1, 3]], "the newcomer was seated"
    assert steps == [[[n, 7], [n, 9]] for n in range(1, len(steps) + 1)], "no request of the active client was lost"
    assert len(steps) >= 1 + 1 + 3 and evictions >= 60 + 1 and len(crowd) == 62


def test_without_the_api_key_a_crowd_holds_no_connection():
    server = _counter_server(max_connections=4, api_key="s3cret")
    with ServerThread(server):
        url = f"ws://127.0.0.1:{server.port}"
        for _ in range(64):
            with pytest.raises(InvalidStatus) as refused, connect(url):
                pass
            assert refused.value.response.status_code == 401
        with connect(url, additional_headers={"Authorization": "Api-Key s3cret"}) as ws:
            assert unpackb(ws.recv())["server"]["max_connections"] == 4


def test_busy_connections_get_503_with_retry_after_and_the_client_shares_what_it_holds():
    server = _counter_server(max_connections=3, evict_idle_after_s=None)
    with ServerThread(server), contextlib.ExitStack() as stack:
        url = f"ws://127.0.0.1:{server.port}"
        _idle_crowd(url, 2, stack)
        with pytest.raises(InvalidStatus) as busy, connect(f"ws://127.0.0.1:{server.port}"), connect(url):
            pass
        assert busy.value.response.status_code == 503 and busy.value.response.headers["Retry-After"] == "1"
        client = RemotePolicy(server.url, timeout_s=10)
        client.reset(PolicyContext(state_task(), (1, 2, 3, 4), ("go",) * 4))
        four = {"state": np.zeros((4, 39)), "instruction": ["go"] * 4, "env_ids": np.arange(4)}
        answers = [client.act(four)[:, 0, :2].astype(int).tolist() for _ in range(2)]
        held = len(client._idle)
        client.close()
    assert answers == [[[1, 1], [1, 2], [1, 3], [1, 4]], [[2, 1], [2, 2], [2, 3], [2, 4]]]
    assert held == 1, "one connection left for this client: its four rows took turns on it"


@pytest.mark.slow
@pytest.mark.sim
def test_a_campaign_of_2_workers_by_40_envs_against_a_64_connection_server_has_no_errors(tmp_path):
    data = {"name": "wide", "seed": 4, "episodes": 80, "envs_per_worker": 40, "horizon": 10,
            "tasks": ["gymnasium/Pendulum-v1"], "policies": [{"name": "random", "builtin": "random"}]}
    _, local, _ = run_and_collect(tmp_path / "in-process", InlineExecutor(tmp_path / "in-process"), data)
    server = policy_server("random", "gymnasium/Pendulum-v1", {}, PolicyServerConfig(port=0, max_connections=64))
    assert server.factory is not None, "random keeps a generator per environment: served with sessions"
    with ServerThread(server):
        served = {**data, "policies": [{"name": "random", "remote": server.url}]}
        with pytest.warns(CapacityWarning, match="accepts 64 connections and this run may open 2 x 40 = 80"):
            summary, results, records = run_and_collect(tmp_path / "served", LocalExecutor(tmp_path / "served", 2),
                                                         served)
    assert summary.ran == 80 and [r for r in records if r.outcome is Outcome.ERROR] == []
    assert sorted((v[0], v[2], v[3]) for v in results.values()) == sorted((v[0], v[2], v[3]) for v in local.values())


def test_serve_policy_help_states_the_memory_cost_and_the_session_limits():
    from typer.testing import CliRunner

    from assay.cli.app import app

    result = CliRunner().invoke(app, ["serve-policy", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    text = " ".join(result.output.split())
    assert result.exit_code == 0
    for phrase in ("--max-sessions", "--max-sessions-per-client", "--max-buffer-mb", "one shared instance",
                   "20 MiB per session stateful and nothing per session stateless", "--session-idle-s",
                   "End a session not stepped for this many seconds, freeing its instance (0: never)",
                   "[default: 120.0]"):
        assert phrase in text, phrase


def test_a_byte_budget_below_one_frame_is_refused_not_raised_silently():
    """--max-buffer-mb 1 used to become 16 (the frame cap) without a word: the budget the user set was not the
    server's."""
    from typer.testing import CliRunner

    from assay.cli.app import app

    result = CliRunner().invoke(app, ["serve-policy", "expert", "--port", "0", "--max-buffer-mb", "1"])
    assert result.exit_code == 2 and result.stderr.strip() == (
        "error: --max-buffer-mb 1 cannot hold one frame of --max-message-mb 16; give --max-buffer-mb 16 or more")


def test_serve_policy_announces_its_session_limits_and_idle_window():
    from assay.cli.serve_commands import announcement

    stateful = _counter_server(max_sessions=40, api_key="k")
    assert announcement(stateful) == (
        "serving counter (1) for fake/state@1 on ws://127.0.0.1:0 — max batch 32, max wait 0 ms, sessions (at most "
        "40, an instance each, ended after 120 s idle), API key required; GET /healthz for health")
    never = _counter_server(session_idle_s=None)
    assert "sessions (at most 1024, an instance each);" in announcement(never)
    shared = policy_server("mlp", "metaworld/reach@1", {"hidden": [8]}, PolicyServerConfig(port=0))
    assert "stateless (one instance);" in announcement(shared)
