"""The policy server cannot be exhausted (issue 25): a connection cap, idle timeouts, bounded
decoding of large frames, and logs that do not grow without bound. All on loopback, bounded."""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from assay.policies.remote import packb, unpackb
from assay.policies.remote.limits import RepeatFilter
from tests.remote_support import serving, state_task


class Zeros:
    def reset(self, context) -> None:
        pass

    def act(self, observations):
        return np.zeros((len(observations["state"]), 4))


def _request(extra: int = 0) -> bytes:
    message = {"observation/state": np.zeros(39), "prompt": "do it"}
    if extra:
        message["padding"] = np.zeros(extra, dtype=np.uint8)
    return packb(message)


def test_connections_past_the_cap_are_refused_with_503_and_a_freed_slot_is_reused():
    with serving(Zeros(), state_task(), max_connections=3) as server:
        url = f"ws://127.0.0.1:{server.port}"
        stack = contextlib.ExitStack()
        held = [stack.enter_context(connect(url)) for _ in range(3)]
        for ws in held:
            ws.recv()
        with pytest.raises(InvalidStatus) as refused, connect(url):
            pass
        assert refused.value.response.status_code == 503
        held.pop().close()
        deadline = time.monotonic() + 5
        while True:  # the server notices the close asynchronously
            try:
                with connect(url) as ws:
                    ws.recv()
                    ws.send(_request())
                    assert unpackb(ws.recv())["actions"].shape[-1] == 4
                break
            except InvalidStatus:
                assert time.monotonic() < deadline, "a freed slot was never reused"
                time.sleep(0.05)
        stack.close()


def test_an_idle_connection_is_closed_and_a_busy_one_is_not():
    with serving(Zeros(), state_task(), idle_timeout_s=2.0) as server:
        url = f"ws://127.0.0.1:{server.port}"
        with connect(url) as idle, connect(url) as busy:
            idle.recv()
            busy.recv()
            for _ in range(10):  # 3 s of requests 0.3 s apart: never idle for 2 s
                busy.send(_request())
                busy.recv()
                time.sleep(0.3)
            with pytest.raises(ConnectionClosed) as closed:
                idle.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
            assert "idle" in closed.value.rcvd.reason


def test_large_frames_are_decoded_a_bounded_number_at_a_time():
    with serving(Zeros(), state_task(), max_large_frames=1) as server:
        active, most = [0], [0]
        lock = threading.Lock()
        validate = server.validate

        def watched(message):
            with lock:
                active[0] += 1
                most[0] = max(most[0], active[0])
            time.sleep(0.1)
            try:
                return validate(message)
            finally:
                with lock:
                    active[0] -= 1

        server.validate = watched
        url = f"ws://127.0.0.1:{server.port}"
        replies: list[int] = []

        def client() -> None:
            with connect(url, max_size=None) as ws:
                ws.recv()
                ws.send(_request(extra=2 << 20))
                replies.append(unpackb(ws.recv())["actions"].shape[-1])

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert replies == [4, 4, 4, 4] and most[0] == 1


def test_a_repeated_log_line_is_let_through_a_bounded_number_of_times():
    now = [0.0]
    repeats = RepeatFilter(limit=5, window_s=60.0, clock=lambda: now[0])
    record = lambda: logging.LogRecord("websockets.server", logging.ERROR, __file__, 1, "accept failed", None, None)  # noqa: E731
    passed = [repeats.filter(record()) for _ in range(100)]
    assert sum(passed) == 5
    now[0] = 61.0
    summary = record()
    assert repeats.filter(summary) and "95 more like it suppressed" in summary.getMessage()
    other = logging.LogRecord("websockets.server", logging.ERROR, __file__, 1, "another line", None, None)
    assert repeats.filter(other)


def test_the_client_waits_out_a_server_restart_of_a_few_seconds():
    import socket

    from assay.policies.remote.client import RemoteParams, fetch_metadata

    assert RemoteParams().connect_attempts == 8 and RemoteParams().max_backoff_s == 2.0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    found: dict = {}
    thread = threading.Thread(target=lambda: found.update(fetch_metadata(f"ws://127.0.0.1:{port}")))
    thread.start()
    time.sleep(3.0)  # the server is down for 3 s, then comes up on the same port
    with serving(Zeros(), state_task(), port=port):
        thread.join(timeout=30)
    assert found.get("assay", {}).get("policy") == "test"
