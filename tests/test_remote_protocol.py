"""Our server speaks openpi's protocol: driven by the real openpi-client from PyPI, and by raw frames."""

from __future__ import annotations

import logging
import threading
import urllib.error
import urllib.request

import msgpack
import numpy as np
import pytest
from openpi_client import msgpack_numpy as openpi_msgpack
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from assay.policies import MLPPolicy
from assay.policies.remote import WireError, packb, unpackb
from tests.remote_support import SMALL_MLP, RaisingPolicy, serving, state_task

# openpi-client 0.1.2 calls websockets' connect() outside a `with`; websockets >= 17.1 warns (and still works).
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager:DeprecationWarning")


def test_wire_format_is_openpis_byte_for_byte():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    raw = msgpack.unpackb(packb({"a": array, "s": np.float32(2.5)}), raw=False)
    assert raw["a"] == {b"__ndarray__": True, b"data": array.tobytes(), b"dtype": "<f4", b"shape": [2, 3]}
    assert raw["s"] == {b"__npgeneric__": True, b"data": 2.5, b"dtype": "<f4"}
    # both directions against openpi's own codec
    theirs = openpi_msgpack.unpackb(packb({"a": array}))
    np.testing.assert_array_equal(theirs["a"], array)
    ours = unpackb(openpi_msgpack.packb({"b": np.array([1, 2], dtype=np.uint8), "p": "text", "g": np.int64(3)}))
    assert ours["b"].dtype == np.uint8 and ours["b"].tolist() == [1, 2] and ours["p"] == "text" and ours["g"] == 3


@pytest.mark.parametrize("frame, message", [
    (b"\xc1\xc1", "not a valid msgpack"),
    (msgpack.packb({b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|O", b"shape": [1]}), "not allowed"),
    (msgpack.packb({b"__ndarray__": True, b"data": b"\0" * 7, b"dtype": "<f8", b"shape": [1]}), "needs 8 bytes"),
    (msgpack.packb({b"__ndarray__": True, b"data": b"", b"dtype": "<f8", b"shape": [-1]}), "non-negative"),
    ("text", "binary frame"),
])
def test_malformed_frames_are_refused_and_never_unpickled(frame, message):
    with pytest.raises(WireError, match=message):
        unpackb(frame)
    with pytest.raises(WireError, match="no wire form"):
        packb({"x": np.array([object()])})


@pytest.fixture(scope="module")
def mlp_server():
    policy = MLPPolicy(**SMALL_MLP)
    with serving(policy, state_task(), max_batch=16, max_wait_ms=20, api_key="k3y") as server:
        yield server, policy


def test_real_openpi_client_gets_metadata_and_actions(mlp_server):
    server, policy = mlp_server
    client = WebsocketClientPolicy("127.0.0.1", server.port, api_key="k3y")
    metadata = client.get_server_metadata()
    assert metadata["contract"]["observations"]["observation/state"] == {"shape": [39], "dtype": "float32"}
    state = np.linspace(-1, 1, 39, dtype=np.float32)
    reply = client.infer({"observation/state": state, "prompt": "pick"})
    expected = policy.act({"state": state[None]})
    np.testing.assert_array_equal(reply["actions"], expected)  # (1, 4): a chunk of one
    assert set(reply["server_timing"]) == {"queue_ms", "batch_size", "infer_ms"}
    assert urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5).status == 200


@pytest.mark.parametrize("key", [None, "wrong"])
def test_api_key_is_enforced(mlp_server, key):
    server, _ = mlp_server
    with pytest.raises(InvalidStatus, match="401"):
        WebsocketClientPolicy("127.0.0.1", server.port, api_key=key)


def test_requests_from_many_clients_are_batched_dynamically(mlp_server):
    server, policy = mlp_server
    clients = [WebsocketClientPolicy("127.0.0.1", server.port, api_key="k3y") for _ in range(12)]
    states = np.random.default_rng(0).normal(size=(12, 39)).astype(np.float32)
    replies: list = [None] * 12
    barrier = threading.Barrier(12)

    def ask(i):
        barrier.wait()
        replies[i] = clients[i].infer({"observation/state": states[i], "prompt": "x"})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(r["server_timing"]["batch_size"] for r in replies) > 1  # gathered across connections
    np.testing.assert_array_equal(np.concatenate([r["actions"] for r in replies]), policy.act({"state": states}))


def _raw(server, key="k3y"):
    return connect(f"ws://127.0.0.1:{server.port}", additional_headers={"Authorization": f"Api-Key {key}"})


@pytest.mark.parametrize("frame, message", [
    (b"\xc1", "not a valid msgpack"),
    (packb([1, 2]), "must be a map"),
    (packb({"prompt": "no state"}), "needs 'observation/state'"),
    (packb({"observation/state": np.zeros(5, np.float32)}), "shape (5,), expected (39,)"),
])
def test_malformed_request_gets_a_protocol_error_and_the_server_survives(mlp_server, frame, message):
    """A malformed frame gets one line with a code (no traceback, no file path), then close 1008."""
    server, _ = mlp_server
    with _raw(server) as ws:
        ws.recv()  # metadata
        ws.send(frame)
        error = ws.recv()
        assert isinstance(error, str) and error.startswith("E_PROTOCOL: ") and message in error
        assert "\n" not in error and "Traceback" not in error and ".py" not in error
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv()
        assert closed.value.rcvd.code == 1008
    client = WebsocketClientPolicy("127.0.0.1", server.port, api_key="k3y")
    assert client.infer({"observation/state": np.zeros(39, np.float32)})["actions"].shape == (1, 4)


def test_oversized_message_is_cut_off_and_the_server_survives():
    with serving(MLPPolicy(**SMALL_MLP), state_task(), max_message_bytes=4096) as server:
        with connect(f"ws://127.0.0.1:{server.port}", max_size=None) as ws:
            ws.recv()
            ws.send(packb({"observation/state": np.zeros(39, np.float32), "blob": b"\0" * 10_000}))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv()
            assert closed.value.rcvd.code == 1009  # message too big
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        assert client.infer({"observation/state": np.zeros(39, np.float32)})["actions"].shape == (1, 4)


def test_policy_exception_is_one_coded_line_to_the_client_and_a_traceback_in_the_log(caplog):
    with caplog.at_level(logging.ERROR, logger="assay.policy_server"), \
            serving(RaisingPolicy(), state_task(), max_batch=8, max_wait_ms=50) as server:
        good = WebsocketClientPolicy("127.0.0.1", server.port)
        with connect(f"ws://127.0.0.1:{server.port}") as ws:
            ws.recv()
            bad_state = np.full(39, 500.0, np.float32)
            ws.send(packb({"observation/state": bad_state}))
            results = {}
            thread = threading.Thread(target=lambda: results.update(
                good=good.infer({"observation/state": np.zeros(39, np.float32)})))
            thread.start()
            text = ws.recv()
            assert text == "E_POLICY: the policy raised RuntimeError: state out of the training range"
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv()
            assert closed.value.rcvd.code == 1011
            thread.join()
        assert results["good"]["actions"].tolist() == [[0.0, 0.0, 0.0, 0.0]]
        with pytest.raises(RuntimeError, match="E_POLICY: the policy raised RuntimeError") as openpi_error:
            good.infer({"observation/state": np.full(39, 500.0, np.float32)})  # the real openpi client
        assert "Traceback" not in str(openpi_error.value)
    logged = [r for r in caplog.records if r.name == "assay.policy_server"]
    assert logged and all(r.exc_info is not None for r in logged), "the traceback goes to the server's log"


def test_server_binds_loopback_by_default():
    from assay.policies.remote import PolicyServerConfig

    assert PolicyServerConfig().host == "127.0.0.1"
