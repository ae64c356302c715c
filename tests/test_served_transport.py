"""The served simulators' websocket channel on a real loopback socket: every message arrives whole and in order
whatever its size against the channel's read size (64 KiB a ``recv``, and 13 bytes, so that headers and frames split
across reads at known places: a frame may take many reads, and one read may hold many frames), binary both ways and
text both ways, and a peer that closes ends the channel.

The channel frames and parses whole binary frames itself and hands every other frame to websockets' protocol object:
so a ping between data frames is answered and the data after it still arrives, fragments are joined, a frame over
the cap and an unmasked client frame close the connection with websockets' own codes, frames that come in the same
bytes as the handshake's response are read, and a read that times out leaves the channel usable."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from websockets.client import ClientProtocol
from websockets.frames import CloseCode, Frame, Opcode
from websockets.server import ServerProtocol
from websockets.uri import parse_uri

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


def _pair(max_size: int = 1 << 23) -> tuple[Channel, Channel]:
    """(client channel, server channel) over loopback TCP, the opening handshake done."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[Channel | None] = []
    thread = threading.Thread(target=lambda: accepted.append(accept(listener.accept()[0], 10.0, max_size)),
                              daemon=True)
    thread.start()
    client = connect(f"ws://127.0.0.1:{port}", 10.0, max_size)
    thread.join(10)
    listener.close()
    server = accepted[0]
    assert server is not None
    return client, server


@pytest.fixture
def pair():
    client, server = _pair()
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


def test_a_ping_between_data_frames_is_answered_and_the_data_after_it_arrives(pair, monkeypatch) -> None:
    client, server = pair
    seen: list[Frame] = []
    parsed = server.protocol.events_received
    monkeypatch.setattr(server.protocol, "events_received", lambda: seen.extend(parsed()) or seen[len(seen):])
    server.protocol.send_ping(b"are you there")
    server._flush()
    server.send(b"after the ping")
    assert client.recv(timeout=10) == b"after the ping"  # the ping went to websockets, which queued its pong
    client.send(b"next")
    assert server.recv(timeout=10) == b"next"  # the pong came first, through websockets; the stream is in step
    assert [(frame.opcode, frame.data) for frame in seen] == [(Opcode.PONG, b"are you there")]


def test_fragments_are_joined_and_a_whole_frame_after_them_arrives(pair) -> None:
    client, server = pair
    client.protocol.send_binary(b"part one, ", fin=False)
    client.protocol.send_continuation(b"part two", fin=True)
    client.protocol.send_text(b"text in ", fin=False)
    client.protocol.send_continuation(b"two parts", fin=True)
    client._flush()
    client.send(b"whole")
    assert [server.recv(timeout=10) for _ in range(3)] == [b"part one, part two", "text in two parts", b"whole"]


def test_a_frame_over_the_cap_closes_the_connection_as_too_big() -> None:
    client, server = _pair(max_size=1000)
    try:
        client.send(b"x" * 1000)
        assert server.recv(timeout=10) == b"x" * 1000  # at the cap: taken
        client.send(b"x" * 1001)
        with pytest.raises(ConnectionError, match="closed here .1009"):
            server.recv(timeout=10)
        with pytest.raises(ConnectionError, match="closed"):
            client.recv(timeout=10)
        assert client.protocol.close_rcvd is not None
        assert client.protocol.close_rcvd.code == CloseCode.MESSAGE_TOO_BIG
    finally:
        client.close()
        server.close()


def test_an_unmasked_frame_from_a_client_is_a_protocol_error(pair) -> None:
    client, server = pair
    client.sock.sendall(transport._header(3, masked=False) + b"abc")  # RFC 6455 5.1: a client must mask
    with pytest.raises(ConnectionError):
        server.recv(timeout=10)
    with pytest.raises(ConnectionError, match="closed"):
        client.recv(timeout=10)
    assert client.protocol.close_rcvd is not None and client.protocol.close_rcvd.code == CloseCode.PROTOCOL_ERROR


def test_frames_in_the_same_bytes_as_the_handshake_response_are_read() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def server() -> None:  # the response, a binary frame, a text frame and a close, in one write
        sock = listener.accept()[0]
        protocol = ServerProtocol()
        request = b""
        while not request.endswith(b"\r\n\r\n"):
            request += sock.recv(1)
        protocol.receive_data(request)
        protocol.send_response(protocol.accept(protocol.events_received()[0]))
        sock.sendall(b"".join(protocol.data_to_send()) + transport._header(5, masked=False) + b"facts"
                     + Frame(Opcode.TEXT, b"E_BUSY: all slots taken").serialize(mask=False)
                     + Frame(Opcode.CLOSE, b"\x03\xe8").serialize(mask=False))
        sock.close()

    thread = threading.Thread(target=server, daemon=True)
    thread.start()
    client = connect(f"ws://127.0.0.1:{port}", 10.0, 1 << 20)
    thread.join(10)
    listener.close()
    assert client.recv(timeout=10) == b"facts"
    assert client.recv(timeout=10) == "E_BUSY: all slots taken"
    with pytest.raises(ConnectionError, match="closed"):
        client.recv(timeout=10)
    client.close()


def test_a_read_that_times_out_leaves_the_channel_usable(pair) -> None:
    client, server = pair
    with pytest.raises(TimeoutError):
        client.recv(timeout=0.05)
    server.send(b"late")
    assert client.recv(timeout=10) == b"late"
    client.send(b"and back")
    got: list[bytes | str] = []
    reader = threading.Thread(target=lambda: got.append(server.recv()), daemon=True)  # no timeout: waits for ever
    reader.start()
    reader.join(10)
    assert got == [b"and back"]
    server.send(b"again")
    assert client.recv(timeout=float("inf")) == b"again"  # an infinite timeout is none
    with pytest.raises(ValueError, match="at least 0"):
        client.recv(timeout=-1.0)


LENGTHS = [0, 1, 125, 126, 127, 65535, 65536, 70001]


@pytest.mark.parametrize("length", LENGTHS)
def test_the_channels_frames_are_websockets_own_bytes_both_ways(length: int) -> None:
    """The channel's frames against websockets' own serializer and parser, so that a mistake shared by both ends of
    the channel (a length's byte order, a mask) cannot pass: the server's frame is the bytes websockets would send, a
    client's frame parses in websockets' server, and websockets' masked frame parses in the channel."""
    payload = _payload(length, 7)
    assert transport._header(length, masked=False) + payload == Frame(Opcode.BINARY, payload).serialize(mask=False)
    mine, theirs = socket.socketpair()
    client = ClientProtocol(parse_uri("ws://localhost:1"))
    server = ServerProtocol(max_size=None)
    client.send_request(client.connect())
    server.receive_data(b"".join(client.data_to_send()))
    server.send_response(server.accept(server.events_received()[0]))
    client.receive_data(b"".join(server.data_to_send()))
    client.events_received()
    sender = Channel(mine, client, 1 << 23)
    try:
        sender.send(payload)
        wire = b""
        while len(wire) < length + 2:
            wire += theirs.recv(1 << 20)
        while True:  # the rest of a long frame
            server.receive_data(wire)
            frames = server.events_received()
            if frames:
                break
            wire = theirs.recv(1 << 20)
        assert [(frame.opcode, frame.data) for frame in frames] == [(Opcode.BINARY, payload)]
        theirs.sendall(Frame(Opcode.BINARY, payload).serialize(mask=False))
        assert sender.recv(timeout=10) == payload
    finally:
        sender.close()
        theirs.close()


def test_websockets_masked_frames_parse_in_the_channel(pair) -> None:
    client, server = pair
    for length in LENGTHS:
        payload = _payload(length, 3)
        client.sock.sendall(Frame(Opcode.BINARY, payload).serialize(mask=True))
        assert server.recv(timeout=10) == payload


def _request_head() -> tuple[ClientProtocol, bytes]:
    protocol = ClientProtocol(parse_uri("ws://127.0.0.1:1"))
    protocol.send_request(protocol.connect())
    return protocol, b"".join(protocol.data_to_send())


@pytest.mark.parametrize("split", ["in one write with a frame behind it", "its end split across two writes",
                                   "with no end within the channel's head limit"])
def test_a_request_head_and_the_frame_right_behind_it_are_read(monkeypatch, split: str) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[Channel | None] = []
    thread = threading.Thread(target=lambda: accepted.append(accept(listener.accept()[0], 10.0, 1 << 20)),
                              daemon=True)
    thread.start()
    raw = socket.create_connection(listener.getsockname())
    _, head = _request_head()
    frame = Frame(Opcode.BINARY, b"right behind the head").serialize(mask=True)
    if split == "in one write with a frame behind it":
        raw.sendall(head + frame)
    elif split == "its end split across two writes":
        raw.sendall(head[:-3])
        time.sleep(0.05)  # most likely two reads; either way the same bytes must come out
        raw.sendall(head[-3:] + frame)
    else:  # more than the limit came with no end: websockets reads the head and everything after it
        monkeypatch.setattr(transport, "_MAX_HEAD", 64)
        raw.sendall(head[:-3])
        time.sleep(0.05)
        raw.sendall(head[-3:] + frame)
    thread.join(10)
    listener.close()
    server = accepted[0]
    assert server is not None
    assert server._own_frames is (split != "with no end within the channel's head limit")
    try:
        assert server.recv(timeout=10) == b"right behind the head"
        server.send(b"answer")
        response = b""
        while b"answer" not in response:
            response += raw.recv(1 << 16)
        assert response.startswith(b"HTTP/1.1 101") and response.endswith(b"answer")
    finally:
        raw.close()
        server.close()


def test_an_http_error_response_is_refused_with_its_status() -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def server() -> None:  # a web server that is not a websocket server: a 404 with a body, then close
        sock = listener.accept()[0]
        request = b""
        while not request.endswith(b"\r\n\r\n"):
            request += sock.recv(1)
        sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot here.")
        sock.close()

    thread = threading.Thread(target=server, daemon=True)
    thread.start()
    with pytest.raises(Exception, match="404"):
        connect(f"ws://127.0.0.1:{listener.getsockname()[1]}", 10.0, 1 << 20)
    thread.join(10)
    listener.close()
