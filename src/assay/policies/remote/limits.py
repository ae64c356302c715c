"""What keeps a policy server's resources bounded whatever its clients do.

* :class:`ConnectionBook`: who holds a connection, and who may lose it. At ``max_connections``
  a new client does not get HTTP 503 while some connection has sat idle for ``evict_idle_after_s``:
  the idlest one is closed (1013, "evicted") to seat the newcomer, connections that never sent a
  request first. A connection answering requests is never idle that long, so active clients keep
  their place, and a crowd of idle sockets is cycled out instead of locking the server. The seats
  are also shared among clients (``share_group``: an Assay client's token; every connection without
  one counts as one anonymous group): a newcomer whose group holds fewer seats than another's takes the
  seat of that group's idlest connection idle at least ``SHARE_IDLE_S`` (the group holding the most
  seats first, and only while it keeps more than the newcomer then holds; a group holding no seat
  takes one from any), so sockets that each send a request every few seconds cannot hold every seat
  against a new client. A connection busy with a request is never evicted (its request is answered). A 503
  says when to come back (``retry_after``: when the idlest connection will have idled that long),
  and an upgrade whose connection is lost before it is seated gives its place back at once
  (``forget``), so aborted handshakes cannot hold the server at 503.
* :class:`RequestRate`: a token bucket per client, ``rate`` requests a second (bursts of one second's
  worth); a request over it waits its turn (the connection is not busy meanwhile, so it may be evicted,
  and its request is then dropped unread), so one client cannot take the server's whole attention.
* :class:`ByteBudget`: bytes buffered and being decoded, across all connections. A connection
  may hold up to ``SMALL_FRAME_BYTES`` unasked; beyond that (a large frame arriving) it needs one
  of ``limit // (2 x ticket_bytes)`` tickets, a ticket covering one whole frame and its decoded
  copy, held until its request is answered. Without a free ticket the connection's socket is not
  read (TCP pushes back on the sender) until one is returned, first come first served. Frames in
  flight are thus bounded by the budget, not by connections x frames, and no wait can deadlock: a
  ticket holder always finishes.
* :func:`return_memory_to_os`: after a burst of large frames, freed memory goes back to the
  operating system (glibc keeps large freed blocks otherwise, and RSS stays at its peak).
* :class:`RepeatFilter`: a log line repeated more than ``LOG_REPEATS`` times a minute is counted,
  not printed.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

SMALL_FRAME_BYTES = 64 * 1024
LOG_REPEATS = 20  # identical log lines per minute before they are suppressed
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
SHARE_IDLE_S = 1.0  # a connection idle this long may give its seat to a client holding fewer seats
ANONYMOUS: tuple[str] = ("anonymous",)  # the share group of every connection that names no client


def share_group(owner: Hashable) -> Hashable:
    """Whose seats an owner's count with: an Assay client's own (its token), else one anonymous group for every
    connection that names no client (each is its own owner, so it would otherwise count as a client)."""
    return ANONYMOUS if isinstance(owner, tuple) and owner[:1] == ("connection",) else owner


class RequestRate:
    """A token bucket per client: ``rate`` requests a second, bursts of ``burst`` (default one second's worth).
    :meth:`wait` takes a token and says how long its request must wait for it (0: none)."""

    def __init__(self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive requests per second, got {rate}")
        self.rate, self.burst, self.clock = rate, max(1.0, rate if burst is None else burst), clock
        self._buckets: dict[Hashable, tuple[float, float]] = {}  # client -> (tokens, when)
        self.delayed = 0  # requests that had to wait (for tests and logs)

    def wait(self, owner: Hashable) -> float:
        """Seconds the next request of ``owner`` waits (its token is taken now: requests queue in order)."""
        now = self.clock()
        tokens, then = self._buckets.get(owner, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate) - 1.0
        if len(self._buckets) > 10_000:  # many clients: forget the ones whose bucket has refilled
            self._buckets = {k: v for k, v in self._buckets.items() if v[0] + (now - v[1]) * self.rate < self.burst}
        self._buckets[owner] = (tokens, now)
        if tokens >= 0:
            return 0.0
        self.delayed += 1
        return -tokens / self.rate


class RepeatFilter(logging.Filter):
    """Let a log line through at most ``limit`` times per ``window_s``; then count it and say so once.

    Under a flood (file descriptors exhausted, the accept loop failing thousands of times a
    second) this keeps stderr readable and bounded instead of gigabytes of the same traceback.
    """

    def __init__(self, limit: int = LOG_REPEATS, window_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self._seen: dict[tuple[str, object], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is printed (a suppressed run is summed up in the first line after it)."""
        key = (record.name, record.msg)
        now = self.clock()
        start, count = self._seen.get(key, (now, 0))
        if now - start > self.window_s:
            if count > self.limit:
                record.msg = f"{record.msg} (and {count - self.limit} more like it suppressed in {now - start:.0f} s)"
            start, count = now, 0
        count += 1
        self._seen[key] = (start, count)
        if len(self._seen) > 10_000:  # many distinct lines: forget the oldest windows
            self._seen.clear()
        return count <= self.limit


@dataclass
class Seat:
    """One open websocket: its owner, when it last finished a request, whether it is answering one now."""

    ws: Any
    owner: Hashable
    last_active: float
    requests: int = 0
    busy: bool = False
    evicted: bool = False


@dataclass
class ConnectionBook:
    """Seats for at most ``max_connections`` websockets, and the choice of whom to evict for a newcomer."""

    max_connections: int
    evict_idle_after_s: float | None = 10.0
    open_timeout_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    seats: dict[int, Seat] = field(default_factory=dict)
    owners: dict[Hashable, int] = field(default_factory=dict)  # owner -> seats it holds
    _admitting: dict[int, float] = field(default_factory=dict)  # upgrades admitted, not seated yet
    evictions: int = 0

    def admit(self, connection: Any, owner: Hashable = None) -> tuple[bool, Seat | None]:
        """At an upgrade by ``owner``: (admitted, the seat to evict for it, if any). Refused only when every seat
        is taken by a connection busy or idle for less than ``evict_idle_after_s``, and none idle ``SHARE_IDLE_S``
        belongs to a group holding more seats than the newcomer's."""
        now = self.clock()
        for key, since in list(self._admitting.items()):
            if now - since > self.open_timeout_s:  # a handshake that never finished
                del self._admitting[key]
        taken = sum(not s.evicted for s in self.seats.values()) + len(self._admitting)
        victim = None
        if taken >= self.max_connections:
            victim = self._idlest(now) or self._over_share(now, owner)
            if victim is None:
                return False, None
            victim.evicted = True
            self.evictions += 1
        self._admitting[id(connection)] = now
        return True, victim

    def retry_after(self) -> int:
        """Whole seconds (at least 1) until a newcomer refused now could be seated: when the idlest connection
        will have idled ``evict_idle_after_s`` (a busy one, or a handshake being seated, that long from now);
        1 when nothing is evicted (only a connection that closes frees a seat)."""
        if self.evict_idle_after_s is None:
            return 1
        now = self.clock()
        waits = [self.evict_idle_after_s - (now - s.last_active) for s in self.seats.values()
                 if not s.evicted and not s.busy]
        return max(1, math.ceil(min(waits, default=self.evict_idle_after_s)))

    def forget(self, connection: Any) -> None:
        """``connection`` was lost: an upgrade it had been admitted for gives its place back."""
        self._admitting.pop(id(connection), None)

    def _idlest(self, now: float) -> Seat | None:
        if self.evict_idle_after_s is None:
            return None
        idle = [s for s in self.seats.values()
                if not s.evicted and not s.busy and now - s.last_active >= self.evict_idle_after_s]
        return min(idle, key=lambda s: (s.requests > 0, s.last_active), default=None)

    def _over_share(self, now: float, owner: Hashable) -> Seat | None:
        """The seat a newcomer of ``owner`` may take though nothing idled ``evict_idle_after_s``: the idlest one,
        idle ``SHARE_IDLE_S`` at least, of the group holding the most seats, if that group still holds more than
        the newcomer's after the swap (a group holding none takes one from any group: every client gets a seat)."""
        if owner is None:
            return None
        held: dict[Hashable, int] = {}
        for seat in self.seats.values():
            if not seat.evicted:
                group = share_group(seat.owner)
                held[group] = held.get(group, 0) + 1
        mine = held.get(share_group(owner), 0)
        above = mine + 1 if mine else 0
        idle = [s for s in self.seats.values() if not s.evicted and not s.busy and now - s.last_active >= SHARE_IDLE_S
                and held[share_group(s.owner)] > above]
        return max(idle, key=lambda s: (held[share_group(s.owner)], now - s.last_active), default=None)

    def seat(self, ws: Any, owner: Hashable) -> Seat:
        """Seat a connection whose handshake is done."""
        self._admitting.pop(id(ws), None)
        seat = Seat(ws, owner, self.clock())
        self.seats[id(ws)] = seat
        self.owners[owner] = self.owners.get(owner, 0) + 1
        return seat

    def leave(self, seat: Seat) -> bool:
        """The connection closed; True when it was its owner's last."""
        self.seats.pop(id(seat.ws), None)
        left = self.owners.get(seat.owner, 1) - 1
        if left > 0:
            self.owners[seat.owner] = left
            return False
        self.owners.pop(seat.owner, None)
        return True


class ByteBudget:
    """Tickets for large frames: ``limit // ticket_bytes`` of them (at least one); see the module docstring.

    ``charge`` is called as bytes arrive on a connection, ``settle`` when its request is answered (with
    the bytes it still buffers), ``drop`` when it closes; ``hold(connection, paused)`` stops or restarts
    reading its socket."""

    def __init__(self, limit: int, ticket_bytes: int, hold: Callable[[Any, bool], None] | None = None,
                 decoded: bool = False) -> None:
        self.limit, self.ticket_bytes = limit, ticket_bytes
        self.hold = hold or (lambda connection, paused: connection.hold_for_budget(paused))
        # ``decoded``: a ticket also pays for the frame's decoded copy (msgpack copies its binary payloads)
        self.tickets = max(1, limit // (ticket_bytes * (2 if decoded else 1)))
        self.held: set[int] = set()
        self.charged: dict[int, int] = {}
        self.waiting: deque[Any] = deque()
        self.over: set[int] = set()  # ticket holders paused for buffering more than one ticket covers
        self.peak_tickets = 0
        self.on_drained: Callable[[], None] | None = None  # called when the last ticket is returned

    def charge(self, connection: Any, count: int) -> None:
        """``count`` more bytes arrived on ``connection``."""
        key = id(connection)
        total = self.charged.get(key, 0) + count
        self.charged[key] = total
        if total <= SMALL_FRAME_BYTES or connection in self.waiting:
            return
        if key not in self.held:
            if len(self.held) < self.tickets and not self.waiting:
                self._give(connection)
            else:
                self.waiting.append(connection)
                self.hold(connection, True)
        elif total > self.ticket_bytes and key not in self.over:
            self.over.add(key)
            self.hold(connection, True)

    def settle(self, connection: Any, remaining: int) -> None:
        """``connection``'s request is answered; it still buffers ``remaining`` bytes."""
        key = id(connection)
        if key not in self.charged:
            return
        self.charged[key] = remaining
        if key in self.over and remaining <= self.ticket_bytes:
            self.over.discard(key)
            self.hold(connection, False)
        if key in self.held and remaining <= SMALL_FRAME_BYTES:
            self._take_back(key)

    def drop(self, connection: Any) -> None:
        """``connection`` closed: whatever it held is free."""
        key = id(connection)
        self.charged.pop(key, None)
        self.over.discard(key)
        with contextlib.suppress(ValueError):
            self.waiting.remove(connection)
        if key in self.held:
            self._take_back(key)

    def _give(self, connection: Any) -> None:
        self.held.add(id(connection))
        self.peak_tickets = max(self.peak_tickets, len(self.held))

    def _take_back(self, key: int) -> None:
        self.held.discard(key)
        while self.waiting and len(self.held) < self.tickets:
            connection = self.waiting.popleft()
            self._give(connection)
            self.hold(connection, False)
        if not self.held and self.on_drained is not None:
            self.on_drained()


def buffered_bytes(connection: Any) -> int:
    """Bytes a websockets connection holds unread: its parser's buffer and its queue of frames
    (0 where this websockets version names them otherwise: the budget then frees a little early)."""
    reader = getattr(getattr(connection, "protocol", None), "reader", None)
    pending = len(getattr(reader, "buffer", b""))
    frames = getattr(getattr(getattr(connection, "recv_messages", None), "frames", None), "queue", ())
    return pending + sum(len(getattr(frame, "data", b"")) for frame in frames)


def budgeted_connection(budget: ByteBudget, book: ConnectionBook) -> type:
    """websockets' server connection, charging every byte received to ``budget``; when it is lost, whatever
    it held of ``budget`` and of ``book`` (an admitted upgrade not seated yet) is given back."""
    from websockets.asyncio.server import ServerConnection

    class BudgetedConnection(ServerConnection):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.lost = False
            self._holds = {"queue": False, "budget": False}
            self.recv_messages.pause = lambda: self._reading("queue", True)
            self.recv_messages.resume = lambda: self._reading("queue", False)

        def _reading(self, why: str, paused: bool) -> None:
            before = any(self._holds.values())
            self._holds[why] = paused
            after = any(self._holds.values())
            if before != after:
                (self.transport.pause_reading if after else self.transport.resume_reading)()

        def hold_for_budget(self, paused: bool) -> None:
            self._reading("budget", paused)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            budget.charge(self, len(data))

        def connection_lost(self, exc: Exception | None) -> None:
            self.lost = True  # an upgrade read before the loss is not admitted after it (``PolicyServer``)
            book.forget(self)
            budget.drop(self)
            super().connection_lost(exc)

    return BudgetedConnection


def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to tune
        return None


def cap_mmap_threshold(size: int) -> bool:
    """Serve allocations of ``size`` bytes or more from their own mappings, returned to the system when
    freed (glibc otherwise raises this threshold after the first large free, and keeps later frames in its
    heap). Process-wide; True where it took effect."""
    libc = _libc()
    return bool(libc is not None and hasattr(libc, "mallopt") and libc.mallopt(M_MMAP_THRESHOLD, size) == 1)


def return_memory_to_os() -> None:
    """Give freed heap memory back to the operating system (glibc's ``malloc_trim``; else nothing)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
