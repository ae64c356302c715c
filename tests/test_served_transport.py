"""The served simulators' websocket channel on a real loopback socket: every message arrives whole and in order
whatever its size against the channel's read size (64 KiB a ``recv``, and 13 bytes, so that headers and frames split
across reads at known places: a frame may take many reads, and one read may hold many frames), binary both ways and
text both ways, and a peer that closes ends the channel."""

from __future__ import annotations

import socket
import threading

import pytest

from assay.served import transport
from assay.served.transport import READ_BYTES, Channel, accept, connect

READ = READ_BYTES  # what one Channel.recv read takes at most
# payload sizes around websocket's length encodings (125/126, 65535/65536) and the read size (the client's frame
# header is 8 bytes up to 65535 and 14 above, the server's 2-4 and 10)
SIZES = [0, 1, 125, 126, 127, READ - 14, READ - 8, READ - 1, READ, READ + 1, 2 * READ + 7, 3 * 1024 * 1024]
SMALL_READ_SIZES = [0, 1, 12, 13, 14, 125, 126, 127, 65535, 65536, 70001]


def _payload(size: int, seed: int) -> bytes:
    return bytes((i * 31 + seed) % 251 for i in range(min(size, 4096))) * (size // 4096) + bytes(
        (i * 31 + seed) % 251 for i in range(size % 4096))


@pytest.fixture
def pair():
    """(client channel, server channel) over loopback TCP, the opening handshake done."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[Channel | None] = []
    thread = threading.Thread(target=lambda: accepted.append(accept(listener.accept()[0], 10.0, 1 << 23)),
                              daemon=True)
    thread.start()
    client = connect(f"ws://127.0.0.1:{port}", 10.0, 1 << 23)
    thread.join(10)
    listener.close()
    server = accepted[0]
    assert server is not None
    yield client, server
    client.close()
    server.close()


@pytest.mark.parametrize(("read", "sizes"), [(READ, SIZES), (13, SMALL_READ_SIZES)],
                         ids=["64KiB-reads", "13-byte-reads"])
def test_every_size_arrives_whole_and_in_order_both_ways(pair, monkeypatch, read, sizes) -> None:
    monkeypatch.setattr(transport, "READ_BYTES", read)
    client, server = pair
    sent = [_payload(size, seed) for seed, size in enumerate(sizes)]
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
    assert [len(m) for m in echoed] == sizes and echoed == sent
    assert answers == [m[::-1] for m in sent]


def test_many_frames_in_one_read_come_out_one_by_one(pair) -> None:
    client, server = pair
    messages = [_payload(300, seed) for seed in range(40)] + ["a text frame"]
    for message in messages:  # all sent before the server reads: they reach it together
        client.send(message)
    received = [server.recv(timeout=10) for _ in messages]
    assert received == messages and isinstance(received[-1], str)
    answers = ["E_SIM: a text answer", b"a binary one", "another text"]  # a server answers refusals as text
    for answer in answers:
        server.send(answer)
    assert [client.recv(timeout=10) for _ in answers] == answers


def test_a_closed_peer_ends_the_channel(pair) -> None:
    client, server = pair
    client.close()
    with pytest.raises(ConnectionError, match="closed"):
        server.recv(timeout=10)
    left: list[list[bytes | str]] = []
    reader = threading.Thread(target=lambda: left.append(list(server)), daemon=True)  # iterating ends too
    reader.start()
    reader.join(10)
    assert left == [[]]
