"""A websocket on a blocking socket, with no thread: websockets' sans-I/O protocol objects do the handshake and
every frame but the common one.

websockets' threaded client and server read the socket on a thread of their own and hand each message over to
the caller's: two thread wake-ups more per round trip, which on a loaded 2-core machine was ~30% of a served
step's wire time (echo of a step-sized message: 245 µs threaded, 175 µs here, load average 6.8). A served
simulator answers one request at a time on each connection, so the caller's thread reads its own answer:
:class:`Channel` sends a frame, then reads the socket until the next data frame (answering pings and a close as
the protocol object says). The bytes on the wire are websockets' (RFC 6455, masked from the client), so any
websocket peer can talk to either side. A whole binary message in one frame is framed and parsed by
:class:`Channel` itself (see there); a read waits on the kernel's timeout, not Python's: one system call.
"""

from __future__ import annotations

import math
import os
import socket
import struct
import sys
from typing import Any

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.uri import parse_uri

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - websockets built without its C extension
    from websockets.utils import apply_mask

READ_BYTES = 1 << 16
_BINARY = 0x82  # FIN set, no extension bits, opcode 2: a whole binary message in one frame
_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 1 << 20  # an opening handshake's head with no end within this many bytes: websockets reads it all


def _header(length: int, masked: bool) -> bytes:
    """A whole binary frame's header (RFC 6455 5.2): the length in 7, 7+16 or 7+64 bits, and the mask bit."""
    bit = 0x80 if masked else 0
    if length < 126:
        return bytes((_BINARY, bit | length))
    if length < 1 << 16:
        return struct.pack("!BBH", _BINARY, bit | 126, length)
    return struct.pack("!BBQ", _BINARY, bit | 127, length)


class Channel:
    """One websocket over ``sock``, driven by ``protocol`` (a handshake already done), frames at most ``max_size``.

    A whole binary message in one frame, the steady state both ways, is framed and parsed here; every other frame
    (text, ping, pong, close, fragments, extension bits, a frame over ``max_size``) goes whole to ``protocol``,
    whose parser therefore always stands at a frame boundary and whose state stays exact. The frames websockets'
    own ``Frame.parse`` and ``Frame.serialize`` would make and take are the same bytes; doing the common one here
    saves its generator-driven parser and frame objects, ~7 µs a round trip hot and ~3 times that between the
    steps of a loaded host (benchmarks/served_anatomy.py)."""

    def __init__(self, sock: socket.socket, protocol: ClientProtocol | ServerProtocol, max_size: int) -> None:
        self.sock, self.protocol, self.max_size = sock, protocol, max_size
        self.client = isinstance(protocol, ClientProtocol)  # a client masks what it sends, a server what it reads
        self._parts: list[bytes] = []  # a fragmented message's parts so far (websockets assembles none)
        self._buffer = bytearray()  # bytes read and not yet parsed
        self._own_frames = True  # False once websockets was handed a frame it must finish (over max_size)
        self._timeout: float | None = sock.gettimeout()
        self._keys, self._key_at = b"", 0  # mask keys drawn ahead (a client's)
        self.pending: list[Any] = []  # frames websockets parsed and recv has not given yet

    def _flush(self) -> None:
        data = b"".join(self.protocol.data_to_send())
        if data:
            self._sendall(data)

    def _sendall(self, data: bytes | memoryview) -> None:
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
            self._flush()
            return
        if self.client:  # masked with a fresh key from the OS's generator, as websockets masks
            key = self._mask_key()
            parts = [_header(len(message), True) + key, apply_mask(message, key)]
        else:
            parts = [_header(len(message), False), message]
        try:
            sent = self.sock.sendmsg(parts)  # header and payload in one system call, neither copied
        except OSError as exc:
            raise ConnectionError(f"sending failed: {exc}") from None
        if sent < len(parts[0]) + len(parts[1]):  # a large frame the socket took only in part
            self._sendall(memoryview(b"".join(parts))[sent:])

    def _mask_key(self) -> bytes:
        """Four bytes from the OS's generator (RFC 6455 10.3: unpredictable), drawn 4 KiB at a time: one system call
        a thousand frames, where ``os.urandom(4)`` a frame is one each."""
        if self._key_at >= len(self._keys):
            self._keys, self._key_at = os.urandom(4096), 0
        self._key_at += 4
        return self._keys[self._key_at - 4:self._key_at]

    def recv(self, timeout: float | None = None) -> bytes | str:
        """The next message (bytes, or str for a text frame); TimeoutError past ``timeout`` seconds."""
        self._set_timeout(timeout)
        while True:
            message = self._next_message()
            if message is not None:
                return message
            try:
                # 64 KiB a read: CPython allocates the whole buffer each call, and 1 MiB cost ~12.5 µs more CPU a
                # read here (benchmarks/recv_size.py); a frame that does not fit takes more reads
                data = self.sock.recv(READ_BYTES)
            except (TimeoutError, BlockingIOError):  # SO_RCVTIMEO ran out (EAGAIN), or settimeout's timeout did
                raise TimeoutError(f"no message within {timeout} s") from None
            except OSError as exc:
                raise ConnectionError(f"receiving failed: {exc}") from None
            if not data:
                self._to_protocol(bytes(self._buffer))
                self._buffer.clear()
                self.protocol.receive_eof()
                self._flush()
                message = self._from_protocol()
                if message is not None:
                    return message
                raise ConnectionError("the peer closed the connection")
            if self._own_frames:
                self._buffer += data
            else:
                self._to_protocol(data)

    def _set_timeout(self, timeout: float | None) -> None:
        """Reads wait at most ``timeout`` seconds (None: for ever). On Linux the socket stays blocking and the
        kernel keeps the timeout (SO_RCVTIMEO): a read is one system call, where a Python timeout makes it three
        (a read that finds nothing, a poll, the read). Set only when it changes: each setting is a system call. The
        kernel's timeout holds for each read and each send call, not for a whole message (``SO_SNDTIMEO`` too)."""
        if timeout is not None and not math.isfinite(timeout):
            timeout = None  # for ever
        if timeout == self._timeout:
            return
        if timeout is not None and timeout < 0:
            raise ValueError(f"a timeout must be at least 0 seconds, got {timeout}")
        if sys.platform == "linux":
            if self.sock.gettimeout() is not None:
                self.sock.settimeout(None)
            seconds = 0.0 if timeout is None else max(timeout, 1e-6)  # 0 is none
            whole = int(seconds)
            value = struct.pack("ll", whole, int((seconds - whole) * 1e6))
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)  # a send past it fails, as before
        else:  # pragma: no cover - elsewhere a Python timeout
            self.sock.settimeout(timeout)
        self._timeout = timeout

    def _next_message(self) -> bytes | str | None:
        """The next message in what was read so far (None: none is whole yet)."""
        if self.pending:
            message = self._from_protocol()
            if message is not None:
                return message
        buffer = self._buffer
        while self._own_frames and len(buffer) >= 2:
            first, second = buffer[0], buffer[1]
            length, start = second & 0x7F, 2
            if length == 126:
                if len(buffer) < 4:
                    return None
                length, start = int.from_bytes(buffer[2:4], "big"), 4
            elif length == 127:
                if len(buffer) < 10:
                    return None
                length, start = int.from_bytes(buffer[2:10], "big"), 10
            masked = bool(second & 0x80)
            start += 4 if masked else 0
            if length > self.max_size:  # websockets refuses it (close 1009): it reads everything from here on
                self._own_frames = False
                self._to_protocol(bytes(buffer))
                buffer.clear()
                return self._from_protocol()
            end = start + length
            if len(buffer) < end:
                return None
            if first == _BINARY and masked is not self.client and not self._parts and \
                    self.protocol.state is State.OPEN:
                with memoryview(buffer) as view:
                    # the mask as bytes: websockets' pure-Python apply_mask takes no memoryview for it
                    data = apply_mask(view[start:end], bytes(view[start - 4:start])) if masked else \
                        bytes(view[start:end])
                del buffer[:end]
                return data
            frame = bytes(buffer[:end])  # any other frame: websockets' to parse, answer and account for
            del buffer[:end]
            self._to_protocol(frame)
            message = self._from_protocol()
            if message is not None:
                return message
        return None

    def _to_protocol(self, data: bytes) -> None:
        if data:
            self.protocol.receive_data(data)
            self._flush()  # pongs, and the answer to a close

    def _from_protocol(self) -> bytes | str | None:
        """The next message among the frames websockets parsed (None: none); ConnectionError once it closed."""
        events, self.pending = [*self.pending, *self.protocol.events_received()], []
        for index, event in enumerate(events):
            message = self._message(event)
            if message is not None:
                self.pending = events[index + 1:]
                return message
        if self.protocol.state is not State.OPEN:  # closing or closed: no message can come any more
            sent = self.protocol.close_sent
            if sent is None or self.protocol.close_rcvd is not None:
                raise ConnectionError("the peer closed the connection")
            raise ConnectionError(f"the connection was closed here ({sent.code}: {sent.reason or 'no reason'})")
        return None

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


def _handshake(sock: socket.socket,
               protocol: ClientProtocol | ServerProtocol) -> tuple[Any, bytearray, list[Any], bool]:
    """Read the peer's opening handshake into ``protocol``. Returns its Request or Response (None if none came: the
    peer closed first, or websockets refused what came, ``handshake_exc``); the bytes after its HTTP head, for the
    channel; the frames websockets parsed past it; and whether websockets reads everything from here on.

    websockets gets the head alone, so that its parser stands at a frame boundary and the frames the peer sent right
    behind the head are the channel's to read. It reads everything itself where it wants more than the head (a
    refusal's body) or where no head's end came within ``_MAX_HEAD`` bytes."""
    rest, seen, whole, searched = bytearray(), list[Any](), False, 0
    while True:
        data = sock.recv(1 << 16)
        if not data:
            protocol.receive_eof()
            seen += protocol.events_received()
            return _head_of(seen), bytearray(), [e for e in seen if e is not _head_of(seen)], True
        if whole:
            protocol.receive_data(data)
        else:
            rest += data
            end = rest.find(_HEAD_END, max(0, searched - len(_HEAD_END) + 1))
            searched = len(rest)
            if end < 0 and len(rest) <= _MAX_HEAD:
                continue
            cut = end + len(_HEAD_END) if end >= 0 else len(rest)
            protocol.receive_data(bytes(rest[:cut]))
            del rest[:cut]
            seen += protocol.events_received()
            whole = _head_of(seen) is None  # websockets wants more (a body), or the head's end never came
            if whole and rest:
                protocol.receive_data(bytes(rest))
                rest.clear()
        seen += protocol.events_received()
        head = _head_of(seen)
        if head is not None or protocol.handshake_exc is not None:
            return head, rest, [event for event in seen if event is not head], whole


def _head_of(events: list[Any]) -> Any:
    return next((event for event in events if isinstance(event, (Request, Response))), None)


def connect(url: str, timeout: float, max_size: int) -> Channel:
    """A client channel to ``url`` (ws:// only), its opening handshake done within ``timeout`` seconds."""
    uri = parse_uri(url)
    if uri.secure:
        raise ValueError("wss:// is not served here: put a TLS proxy in front and connect to it with ws://")
    sock = socket.create_connection((uri.host, uri.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
    protocol = ClientProtocol(uri, max_size=max_size)
    protocol.send_request(protocol.connect())
    channel = Channel(sock, protocol, max_size)
    channel._flush()
    response, rest, frames, whole = _handshake(sock, protocol)
    if protocol.handshake_exc is not None:
        sock.close()
        raise protocol.handshake_exc
    if response is None:
        sock.close()
        raise ConnectionError("the server closed the connection during the websocket handshake")
    channel._buffer += rest  # the server's first frame, when it came in the same bytes as its response
    channel.pending += frames
    channel._own_frames = not whole
    if protocol.state is not State.OPEN and not channel.pending:
        sock.close()
        raise ConnectionError("the websocket handshake failed")
    return channel  # open, or closed right after a first frame (a refusal) that recv still gives


def accept(sock: socket.socket, timeout: float, max_size: int) -> Channel | None:
    """The server side of an accepted ``sock``: its opening handshake within ``timeout`` seconds (None: failed)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
    sock.settimeout(timeout)
    protocol = ServerProtocol(max_size=max_size)
    channel = Channel(sock, protocol, max_size)
    try:
        request, rest, frames, whole = _handshake(sock, protocol)
        if not isinstance(request, Request):
            return None
        protocol.send_response(protocol.accept(request))
        channel._flush()
    except OSError:
        return None
    channel._buffer += rest
    channel.pending += frames
    channel._own_frames = not whole
    return channel if protocol.state is State.OPEN else None
