"""The served simulators' websocket channel on a real loopback socket: every message arrives whole and in order
whatever its size against the channel's read size (64 KiB a ``recv``: a frame may take many reads, and one read may
hold many frames), in both directions, binary and text, and a peer that closes ends the channel in one line."""

from __future__ import annotations

import socket
import threading

import pytest

from assay.served.transport import READ_BYTES, Channel, accept, connect

READ = READ_BYTES  # what one Channel.recv read takes at most
SIZES = [0, 1, 125, 126, 65535, READ - 1, READ, READ + 1, 2 * READ + 7, 3 * 1024 * 1024]


def _payload(size: int, seed: int) -> bytes:
    return bytes((i * 31 + seed) % 251 for i in range(min(size, 4096))) * (size // 4096) + bytes(
        (i * 31 + seed) % 251 for i in range(size % 4096))


@pytest.fixture
def pair():
    """(client channel, server channel) over loopback TCP, the opening handshake done."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[Channel | None] = []
    thread = threading.Thread(target=lambda: accepted.append(accept(listener.accept()[0], 10.0, 1 << 23)))
    thread.start()
    client = connect(f"ws://127.0.0.1:{port}", 10.0, 1 << 23)
    thread.join(10)
    listener.close()
    server = accepted[0]
    assert server is not None
    yield client, server
    client.close()
    server.close()


def test_every_size_arrives_whole_and_in_order_both_ways(pair) -> None:
    client, server = pair
    sent = [_payload(size, seed) for seed, size in enumerate(SIZES)]
    echoed: list[bytes | str] = []

    def echo() -> None:  # the server reads each and answers it reversed, as a simulator answers its requests
        for _ in sent:
            message = server.recv(timeout=10)
            echoed.append(message)
            server.send(message[::-1])

    thread = threading.Thread(target=echo)
    thread.start()
    answers = []
    for message in sent:
        client.send(message)
        answers.append(client.recv(timeout=10))
    thread.join(10)
    assert [len(m) for m in echoed] == SIZES and echoed == sent
    assert answers == [m[::-1] for m in sent]


def test_many_frames_in_one_read_come_out_one_by_one(pair) -> None:
    client, server = pair
    messages = [_payload(300, seed) for seed in range(40)] + ["a text frame"]
    for message in messages:  # all sent before the server reads: they reach it together
        client.send(message)
    received = [server.recv(timeout=10) for _ in messages]
    assert received == messages and isinstance(received[-1], str)


def test_a_closed_peer_ends_the_channel(pair) -> None:
    client, server = pair
    client.close()
    with pytest.raises(ConnectionError, match="closed"):
        server.recv(timeout=10)
    assert list(server) == []
