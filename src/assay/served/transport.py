"""A websocket on a blocking socket, with no thread: websockets' own sans-I/O protocol objects do the framing.

websockets' threaded client and server read the socket on a thread of their own and hand each message over to
the caller's: two thread wake-ups more per round trip, which on a loaded 2-core machine was ~30% of a served
step's wire time (echo of a step-sized message: 245 µs threaded, 175 µs here, load average 6.8). A served
simulator answers one request at a time on each connection, so the caller's thread reads its own answer:
:class:`Channel` sends a frame, then reads the socket until the next data frame (answering pings and a close as
the protocol object says). The bytes on the wire are websockets' (RFC 6455, masked from the client), so any
websocket peer can talk to either side.
"""

from __future__ import annotations

import socket
from typing import Any

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.uri import parse_uri

READ_BYTES = 1 << 16


class Channel:
    """One websocket over ``sock``, driven by ``protocol`` (a handshake already done)."""

    def __init__(self, sock: socket.socket, protocol: ClientProtocol | ServerProtocol) -> None:
        self.sock, self.protocol = sock, protocol
        self._parts: list[bytes] = []
        self.pending: list[Any] = []  # frames that arrived with the handshake's last bytes

    def _flush(self) -> None:
        data = b"".join(self.protocol.data_to_send())
        if data:
            try:
                self.sock.sendall(data)
            except OSError as exc:
                raise ConnectionError(f"sending failed: {exc}") from None

    def send(self, message: bytes | str) -> None:
        """Send one binary (bytes) or text (str) message."""
        if self.protocol.state is not State.OPEN:
            raise ConnectionError("the connection is closed")
        if isinstance(message, str):
            self.protocol.send_text(message.encode())
        else:
            self.protocol.send_binary(message)
        self._flush()

    def recv(self, timeout: float | None = None) -> bytes | str:
        """The next message (bytes, or str for a text frame); TimeoutError past ``timeout`` seconds."""
        self.sock.settimeout(timeout)
        while True:
            events, self.pending = [*self.pending, *self.protocol.events_received()], []
            for index, event in enumerate(events):
                message = self._message(event)
                if message is not None:
                    self.pending = events[index + 1:]
                    return message
            if self.protocol.state is State.CLOSED:
                raise ConnectionError("the peer closed the connection")
            try:
                # 64 KiB a read: CPython allocates the whole buffer each call, and 1 MiB cost ~12.5 µs more CPU a
                # read here (benchmarks/recv_size.py); a frame that does not fit takes more reads
                data = self.sock.recv(READ_BYTES)
            except TimeoutError:
                raise
            except OSError as exc:
                raise ConnectionError(f"receiving failed: {exc}") from None
            if data:
                self.protocol.receive_data(data)
            else:
                self.protocol.receive_eof()
            self._flush()  # pongs, and the answer to a close

    def _message(self, event: Any) -> bytes | str | None:
        if not isinstance(event, Frame):
            return None
        if event.opcode is Opcode.CLOSE:
            raise ConnectionError("the peer closed the connection")
        if event.opcode not in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
            return None
        if event.opcode is not Opcode.CONT:
            self._parts = [bytes(event.data)] if not event.fin else []
            first_text = event.opcode is Opcode.TEXT
            if event.fin:
                return bytes(event.data).decode() if first_text else bytes(event.data)
            self._text = first_text
            return None
        self._parts.append(bytes(event.data))
        if not event.fin:
            return None
        data, self._parts = b"".join(self._parts), []
        return data.decode() if self._text else data

    def close(self) -> None:
        """Send a close frame (when still open) and close the socket."""
        try:
            if self.protocol.state is State.OPEN:
                self.protocol.send_close()
                self._flush()
        except OSError:  # ConnectionError among them: closing a broken connection has nothing to report
            pass
        self.sock.close()

    def __iter__(self) -> Any:
        """Messages until the peer closes."""
        while True:
            try:
                yield self.recv()
            except ConnectionError:
                return


def connect(url: str, timeout: float, max_size: int) -> Channel:
    """A client channel to ``url`` (ws:// only), its opening handshake done within ``timeout`` seconds."""
    uri = parse_uri(url)
    if uri.secure:
        raise ValueError("wss:// is not served here: put a TLS proxy in front and connect to it with ws://")
    sock = socket.create_connection((uri.host, uri.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
    protocol = ClientProtocol(uri, max_size=max_size)
    protocol.send_request(protocol.connect())
    channel = Channel(sock, protocol)
    channel._flush()
    while protocol.state is State.CONNECTING:
        data = sock.recv(1 << 16)
        if not data:
            sock.close()
            raise ConnectionError("the server closed the connection during the websocket handshake")
        protocol.receive_data(data)
        for event in protocol.events_received():
            if isinstance(event, Response) and protocol.handshake_exc is not None:
                sock.close()
                raise protocol.handshake_exc
            if not isinstance(event, Response):  # the server's first frame, in the same bytes as its response
                channel.pending.append(event)
    if protocol.handshake_exc is not None or (protocol.state is not State.OPEN and not channel.pending):
        sock.close()
        raise ConnectionError("the websocket handshake failed")
    return channel  # open, or closed right after a first frame (a refusal) that recv still gives


def accept(sock: socket.socket, timeout: float, max_size: int) -> Channel | None:
    """The server side of an accepted ``sock``: its opening handshake within ``timeout`` seconds (None: failed)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
    sock.settimeout(timeout)
    protocol = ServerProtocol(max_size=max_size)
    channel = Channel(sock, protocol)
    try:
        request = None
        while request is None:
            for event in protocol.events_received():
                if isinstance(event, Request):
                    request = event
                else:
                    channel.pending.append(event)
            if request is not None:
                break
            data = sock.recv(1 << 16)
            if not data:
                return None
            protocol.receive_data(data)
        protocol.send_response(protocol.accept(request))
        channel._flush()
    except OSError:
        return None
    return channel if protocol.state is State.OPEN else None
