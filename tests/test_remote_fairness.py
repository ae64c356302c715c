"""Fair serving (issue 50): the session table and the connection seats are shared among clients, a client over its
share is refused first, a new client always gets a minimum, each client's request rate is bounded, and a campaign
refused for room waits (up to a deadline it states) instead of recording errors.

The unit tests use injected clocks (no sleeping); the end-to-end one (``slow``) runs identities, slow-drip sockets
and a 2-client campaign against one real server. ``benchmarks/serve_fairness.py`` measures the full-size attack."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import numpy as np
import pytest
from websockets.exceptions import InvalidStatus, WebSocketException
from websockets.sync.client import connect

from assay.errors import SessionRefused
from assay.policies import PolicyContext
from assay.policies.remote import PolicyServer, PolicyServerConfig, RemotePolicy, ServerThread, packb
from assay.policies.remote.limits import SHARE_IDLE_S, ConnectionBook, RequestRate
from assay.policies.remote.sessions import SessionTable
from assay.policies.remote.wire import CLIENT_HEADER, SEED_KEY, SESSION_KEY, STEP_KEY
from assay.run import rollout
from assay.store import Outcome
from tests.remote_support import Integrator, SeededNoise, jobs_for, state_task


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _open(table: SessionTable, owner: Any, name: str) -> str:
    """"opened", or the refusal's code."""
    context = PolicyContext(state_task(), (1,), ("go",))
    try:
        table.get(owner, name, 0, lambda made: made.reset(context))
    except SessionRefused as refused:
        return refused.code
    return "opened"


def test_identities_over_their_share_are_refused_first_and_a_newcomer_gets_its_minimum() -> None:
    table = SessionTable(SeededNoise, max_sessions=100, per_client=50, minimum=10, reserved=20, clock=_Clock())
    codes: dict[str, list[str]] = {f"rogue{i}": [] for i in range(5)}
    for k in range(50):  # five identities take turns opening fresh sessions
        for rogue, got in codes.items():
            got.append(_open(table, rogue, f"{rogue}/1/{k}"))
    held = [len(table.names(rogue)) for rogue in codes]
    assert sum(held) == 80 and min(held) >= 10, "each got its minimum; together they stop short of the reserve"
    assert {code for got in codes.values() for code in got} == {"opened", "E_SESSION_SHARE"}
    newcomers = [[_open(table, who, f"{who}/1/{k}") for k in range(10)] for who in ("worker-a", "worker-b")]
    assert newcomers == [["opened"] * 10] * 2 and len(table) == 100, "two newcomers got their minimum at once"
    assert _open(table, "worker-c", "c/1/0") == "E_SESSIONS_FULL"  # a full table gives its own code
    assert table.refused_share == sum(got.count("E_SESSION_SHARE") for got in codes.values())


def test_connections_without_a_token_count_as_one_client_in_the_share() -> None:
    table = SessionTable(SeededNoise, max_sessions=100, per_client=80, minimum=10, reserved=0, clock=_Clock())
    for i in range(20):  # twenty plain openpi connections, a session each
        assert _open(table, ("connection", i), "connection") == "opened"
    opened = [_open(table, ("client", "big"), f"big/1/{k}") for k in range(60)]
    assert opened.count("opened") == 50, "its share is 100 // 2 (itself and the plain connections), not 100 // 21"
    assert opened[50:] == ["E_SESSION_SHARE"] * 10


def _seat(book: ConnectionBook, owner: Any) -> Any:
    """Admit and seat a connection of ``owner``; its seat, and the seat it evicted (or None)."""
    ws = object()
    admitted, victim = book.admit(ws, owner)
    assert admitted
    return book.seat(ws, owner), victim


def test_slow_drip_sockets_give_a_new_client_a_seat_but_not_each_other() -> None:
    clock = _Clock()
    book = ConnectionBook(8, evict_idle_after_s=10.0, clock=clock)
    drips = [_seat(book, ("connection", i))[0] for i in range(8)]  # the server is full
    for i, seat in enumerate(drips):  # each sends a request every 5 s: none has idled 10 s
        seat.last_active, seat.requests = 100.0 + 0.5 * i, 1
    clock.now = 104.0
    drips[0].busy = True  # answering a request: never evicted
    assert _seat(book, ("client", "campaign"))[1] is drips[1], "the idlest drip not busy gives its seat to a newcomer"
    assert book.admit(object(), ("connection", 99)) == (False, None), "a drip reconnecting takes no seat back"
    assert _seat(book, ("client", "campaign"))[1] is drips[2], "the campaign grows while the drips hold more seats"
    for seat in drips[3:]:
        seat.last_active = clock.now - SHARE_IDLE_S / 2  # all just answered: none idle long enough
    assert book.admit(object(), ("client", "campaign")) == (False, None)


def test_a_new_client_takes_a_seat_from_any_group_and_a_held_one_only_from_a_larger_group() -> None:
    clock = _Clock()
    book = ConnectionBook(4, evict_idle_after_s=10.0, clock=clock)
    seats = [_seat(book, ("client", f"t{i}"))[0] for i in range(4)]  # four tokens, a seat each
    clock.now = 5.0
    assert _seat(book, ("client", "new"))[1] is seats[0], "a client holding no seat always gets one"
    assert book.admit(object(), ("client", "t2")) == (False, None), "one holding a seat takes none from an equal"


def test_each_client_has_its_own_request_rate() -> None:
    clock = _Clock()
    rate = RequestRate(10.0, clock=clock)
    assert [rate.wait("a") for _ in range(10)] == [0.0] * 10, "a burst of one second's worth"
    assert rate.wait("a") == pytest.approx(0.1) and rate.wait("a") == pytest.approx(0.2), "then each waits its turn"
    assert rate.wait("b") == 0.0, "another client is not slowed"
    clock.now = 1.0  # refilled at 10 a second, less the two it owed
    assert [rate.wait("a") for _ in range(8)] == [0.0] * 8 and rate.wait("a") > 0
    assert rate.delayed == 3
    with pytest.raises(ValueError, match="rate must be positive"):
        RequestRate(0)


def test_the_limits_are_published_and_checked() -> None:
    config = PolicyServerConfig(min_sessions_per_client=8, max_requests_per_s=50.0)
    assert config.limits()["min_sessions_per_client"] == 8 and config.limits()["max_requests_per_s"] == 50.0
    with pytest.raises(ValueError, match="max_requests_per_s must be positive"):
        PolicyServerConfig(max_requests_per_s=0)
    with pytest.raises(ValueError, match="reserved_sessions must be 0 or more"):
        PolicyServerConfig(reserved_sessions=-1)


# -- end to end ---------------------------------------------------------------------------------------------------

TASK = state_task(horizon=12)
SEEDS = [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]]


def _attack(port: int, token: str, sessions: int, leave: threading.Event, codes: list[str]) -> None:
    """One identity opening ``sessions`` fresh sessions as fast as answered, then holding them."""
    with connect(f"ws://127.0.0.1:{port}", additional_headers={CLIENT_HEADER: token}) as ws:
        ws.recv()
        for k in range(sessions):
            ws.send(packb({"observation/state": np.zeros(39), SESSION_KEY: f"r/1/{k}", STEP_KEY: 0, SEED_KEY: 1}))
            reply = ws.recv(timeout=60)
            codes.append(reply.split(":", 1)[0] if isinstance(reply, str) else "opened")
        leave.wait(timeout=120)


def _drip(port: int, every: float, leave: threading.Event, lost: list[int]) -> None:
    """A plain connection sending a request every ``every`` seconds, reconnecting when it loses its seat."""
    while not leave.is_set():
        try:
            with connect(f"ws://127.0.0.1:{port}") as ws:
                ws.recv()
                while not leave.is_set():
                    ws.send(packb({"observation/state": np.zeros(39)}))
                    ws.recv(timeout=30)
                    leave.wait(every)
        except (InvalidStatus, WebSocketException, OSError, TimeoutError):
            lost.append(1)
            leave.wait(0.3)


def _campaign(url: str, results: dict[int, list[Any]], worker: int) -> None:
    policy = RemotePolicy(url, timeout_s=30, capacity_wait_s=60, backoff_s=0.05, max_backoff_s=0.5)
    try:
        results[worker] = rollout([Integrator(TASK) for _ in SEEDS[worker]], policy, jobs_for(TASK, SEEDS[worker]))
    finally:
        policy.close()


def _serve(**config: Any) -> PolicyServer:
    return PolicyServer(SeededNoise(), TASK, PolicyServerConfig(port=0, max_wait_ms=1.0, **config),
                        {"policy": "noise", "version": "1"}, factory=SeededNoise)


@pytest.mark.slow
def test_identities_and_slow_drip_sockets_cost_a_campaign_no_episode() -> None:
    """5 identities x 300 fresh sessions and 12 slow-drip sockets against a 16-connection, 64-session server (8 a
    client at least, 16 kept for newcomers) while 2 clients x 6 environments run: 0 errors, trajectories equal to
    an undisturbed run."""
    limits = {"max_connections": 16, "max_sessions": 64, "max_sessions_per_client": 32, "min_sessions_per_client": 8}
    undisturbed: dict[int, list[Any]] = {}
    with ServerThread(_serve(**limits)) as server:
        for worker in (0, 1):
            _campaign(server.url, undisturbed, worker)
    leave, codes, lost = threading.Event(), [], []
    attacked: dict[int, list[Any]] = {}
    with ServerThread(_serve(**limits)) as server:
        port = server.port
        assert port is not None
        rogues = [threading.Thread(target=_attack, args=(port, uuid.uuid4().hex, 300, leave, codes)) for _ in range(5)]
        drips = [threading.Thread(target=_drip, args=(port, 1.5, leave, lost)) for _ in range(12)]
        for thread in [*rogues, *drips]:
            thread.start()
        deadline = time.monotonic() + 60
        while len(server.sessions or ()) < 48 and time.monotonic() < deadline:  # the rogues fill all but the reserve
            time.sleep(0.02)
        workers = [threading.Thread(target=_campaign, args=(server.url, attacked, w)) for w in (0, 1)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(timeout=120)
        leave.set()
        for thread in [*rogues, *drips]:
            thread.join(timeout=30)
        refused_share = server.sessions.refused_share if server.sessions else 0
    for worker in (0, 1):
        assert [(r.outcome, r.reason) for r in attacked[worker]] == [(Outcome.TIMEOUT, "")] * 6
        assert [r.trajectory_hash() for r in attacked[worker]] == [r.trajectory_hash() for r in undisturbed[worker]]
    assert "E_SESSION_SHARE" in codes and refused_share >= codes.count("E_SESSION_SHARE") > 0
