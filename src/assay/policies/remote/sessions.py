"""Sessions of a stateful served policy, each bound to the client that opened it.

A session is one environment's policy instance (made by the server's factory, reset with the
episode's seed and prompt). Its key is ``(owner, name)``: ``owner`` is the client as the server
knows it (an Assay client's ``X-Assay-Client`` token, else the connection itself), ``name`` what
the request says (``assay/session``). A request can therefore only reach its own client's
sessions: another client naming the same session gets a session of its own, never this one.

A client holds at most ``per_client`` sessions and the server at most ``max_sessions``; a request
that would open one more is refused with a coded line (``E_SESSION_QUOTA``, ``E_SESSIONS_FULL``)
and every live session goes on. The table is shared fairly among the clients holding sessions
(``active``; the connections without a token count as one client together): every client may open
``minimum`` sessions while the table has room (a new client always gets them); past that, a client
may open more only while it holds less than its fair share (``max_sessions // active``) and the
table has more than ``reserved`` free places (a quarter of it by default), kept for clients below
their minimum; otherwise it is refused ``E_SESSION_SHARE``. So a client over its share is refused
first, and identities that filled the table still leave newcomers ``reserved`` places (the bound:
an identity takes ``minimum`` at most from them, so identities minted after the fill can take them).

Sessions end when their client starts a new epoch (an Assay client's reset: its earlier episodes
are over), when their policy raises, when the client's last connection closes, and when they have
not been stepped for ``idle_s`` seconds (an episode in progress asks every few steps; a session left
behind by a client that went quiet without closing its connection is over). Expired sessions are
ended at the next request, oldest first, and by :meth:`SessionTable.expire` (the server calls it
periodically), so at a full table every live session was stepped within ``idle_s``: no session in
use is ever ended to make room for another client's. Each live session holds one policy instance,
so a stateful policy costs ``max_sessions`` x its instance size at most, and only for sessions in use.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from assay.errors import SessionRefused
from assay.policies.protocol import Policy
from assay.policies.remote.limits import share_group
from assay.policies.remote.wire import (
    E_SESSION_QUOTA,
    E_SESSION_SHARE,
    E_SESSION_UNKNOWN,
    E_SESSIONS_FULL,
    session_epoch,
)

DEFAULT_MAX_SESSIONS = 1024
DEFAULT_SESSIONS_PER_CLIENT = 256
DEFAULT_MIN_SESSIONS = 64  # every client may open this many while the table has room
DEFAULT_SESSION_IDLE_S = 120.0

_Key = tuple[Hashable, str]  # (owner, session name)


@dataclass
class _Client:
    sessions: dict[str, Policy | None] = field(default_factory=dict)  # None: being built
    epochs: dict[str, int] = field(default_factory=dict)  # an Assay client's name -> its latest epoch


class SessionTable:
    """Live sessions by owner; thread-safe (the batcher's thread opens them, the event loop ends them).

    ``idle_s``: a session not stepped for this long ends (None: never); ``minimum``: what every client may
    open while the table has room (at most ``per_client`` and ``max_sessions``); ``reserved``: the free places
    only clients below their minimum may take (default a quarter of ``max_sessions``, at most
    ``max_sessions - minimum``);
    ``clock``: monotonic seconds (injectable for tests)."""

    def __init__(self, factory: Callable[[], Policy], max_sessions: int = DEFAULT_MAX_SESSIONS,
                 per_client: int = DEFAULT_SESSIONS_PER_CLIENT, idle_s: float | None = DEFAULT_SESSION_IDLE_S,
                 clock: Callable[[], float] = time.monotonic, minimum: int = DEFAULT_MIN_SESSIONS,
                 reserved: int | None = None) -> None:
        if max_sessions < 1 or per_client < 1 or minimum < 1:
            raise ValueError("max_sessions, per_client and minimum must be at least 1")
        if idle_s is not None and idle_s <= 0:
            raise ValueError(f"idle_s must be positive seconds (or None: never), got {idle_s}")
        self.factory, self.max_sessions, self.per_client = factory, max_sessions, per_client
        self.minimum = min(minimum, per_client, max_sessions)
        self.reserved = min(max_sessions // 4 if reserved is None else reserved, max_sessions - self.minimum)
        self.idle_s, self.clock = idle_s, clock
        self._clients: dict[Hashable, _Client] = {}
        self._used: OrderedDict[_Key, float] = OrderedDict()  # live sessions, least recently stepped first
        self._count = 0
        self._held_by: dict[Hashable, int] = {}  # share group -> the sessions it holds (the share's divisor: its size)
        self.expired = 0  # sessions ended for idling (for tests and logs)
        self.refused_full = 0  # requests refused with E_SESSIONS_FULL
        self.refused_share = 0  # requests refused with E_SESSION_SHARE
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._count

    def names(self, owner: Hashable) -> list[str]:
        """The live sessions of ``owner`` (for tests and logs)."""
        with self._lock:
            client = self._clients.get(owner)
            return [] if client is None else [n for n, p in client.sessions.items() if p is not None]

    def get(self, owner: Hashable, name: str, step: int, reset: Callable[[Policy], None]) -> Policy:
        """The session's policy; at step 0 a new session is opened (made, then ``reset``). Raises
        :class:`SessionRefused` for an unknown session past step 0 or one over a limit."""
        with self._lock:
            now = self.clock()
            self._expire(now)
            client = self._clients.setdefault(owner, _Client())
            policy = client.sessions.get(name)
            if policy is not None:
                self._touch((owner, name), now)
                return policy
            if name in client.sessions:
                raise SessionRefused(E_SESSION_UNKNOWN, f"session {name!r} is still being opened by another request")
            if step != 0:
                idle = f", or it was not stepped for {self.idle_s:g} s" if self.idle_s is not None else ""
                raise SessionRefused(E_SESSION_UNKNOWN, f"session {name!r} is unknown at step {step}: the server "
                                     f"restarted or the session ended (its client reset or left{idle}), and its "
                                     "policy state is gone; rerun the episode")
            self._end_older_epochs(owner, client, name)
            if len(client.sessions) >= self.per_client:
                raise SessionRefused(E_SESSION_QUOTA, f"this client already holds {len(client.sessions)} sessions, "
                                     f"the limit per client (--max-sessions-per-client); end episodes or reset first")
            if self._count >= self.max_sessions:
                self.refused_full += 1
                within = f", each stepped within the last {self.idle_s:g} s" if self.idle_s is not None else ""
                raise SessionRefused(E_SESSIONS_FULL, f"the server holds its limit of {self.max_sessions} sessions "
                                     f"(--max-sessions){within}; try again when other episodes have ended")
            self._check_share(owner, client)
            self._held(owner, 1)
            client.sessions[name] = None  # reserved: the quota counts it while it is built
            self._count += 1
            self._touch((owner, name), now)
        try:
            policy = self.factory()
            reset(policy)
        except BaseException:
            self.end(owner, [name])
            raise
        with self._lock:
            if name in client.sessions:
                client.sessions[name] = policy
                self._touch((owner, name), self.clock())  # building it may take a while: its idle time starts now
        return policy

    def _held(self, owner: Hashable, change: int) -> None:
        """``owner`` holds ``change`` more (or fewer) sessions. Clients without a token count as one group
        (``limits.share_group``): many plain connections share one minimum and count once in the share."""
        group = share_group(owner)
        left = self._held_by.get(group, 0) + change
        if left > 0:
            self._held_by[group] = left
        else:
            self._held_by.pop(group, None)

    def _check_share(self, owner: Hashable, client: _Client) -> None:
        """Refuse (``E_SESSION_SHARE``) a client (its group) past its minimum that holds its fair share, or that
        would take one of the places kept for clients below their minimum. Called with the lock held."""
        held = self._held_by.get(share_group(owner), 0)
        if held < self.minimum:
            return
        active = max(1, len(self._held_by))
        share = max(self.minimum, self.max_sessions // active)
        if held < share and self._count < self.max_sessions - self.reserved:
            return
        self.refused_share += 1
        raise SessionRefused(E_SESSION_SHARE, f"this client holds {held} sessions, its fair share of the server's "
                             f"{self.max_sessions} while {active} clients hold sessions (each may open "
                             f"{self.minimum}, and the last {self.reserved} places are kept for clients below that); "
                             "try again when other episodes have ended")

    def expire(self) -> int:
        """End every session not stepped for ``idle_s``; returns how many ended."""
        with self._lock:
            before = self.expired
            self._expire(self.clock())
            return self.expired - before

    def _touch(self, key: _Key, now: float) -> None:
        self._used[key] = now
        self._used.move_to_end(key)

    def _expire(self, now: float) -> None:
        """End the sessions idle past ``idle_s``, oldest first (a session being built is left to finish). Called
        with the lock held."""
        if self.idle_s is None:
            return
        while self._used:
            key, used = next(iter(self._used.items()))
            if now - used < self.idle_s:
                return
            owner, name = key
            client = self._clients.get(owner)
            if client is not None and name in client.sessions and client.sessions[name] is None:
                self._touch(key, now)  # being built: its idle time starts when it is ready
                continue
            self._drop(client, key)
            self.expired += 1

    def _drop(self, client: _Client | None, key: _Key) -> None:
        """Forget one session (its instance is freed with the last reference). Called with the lock held."""
        self._used.pop(key, None)
        if client is not None and key[1] in client.sessions:
            del client.sessions[key[1]]
            self._count -= 1
            self._held(key[0], -1)

    def _end_older_epochs(self, owner: Hashable, client: _Client, name: str) -> None:
        """A new epoch of an Assay client (it reset: its earlier episodes are over) ends its sessions of
        older epochs, so the live sessions are the environments running now. Called with the lock held."""
        found = session_epoch(name)
        if found is None:
            return
        prefix, epoch = found
        if client.epochs.get(prefix, -1) >= epoch:
            return
        client.epochs[prefix] = epoch
        for other in list(client.sessions):
            parts = session_epoch(other)
            if parts is not None and parts[0] == prefix and parts[1] < epoch:
                self._drop(client, (owner, other))

    def end(self, owner: Hashable, names: list[str]) -> None:
        """End these sessions of ``owner`` (unknown ones are ignored)."""
        with self._lock:
            client = self._clients.get(owner)
            for name in names:
                self._drop(client, (owner, name))

    def end_client(self, owner: Hashable) -> int:
        """End every session of ``owner`` (its last connection closed); returns how many ended."""
        with self._lock:
            client = self._clients.pop(owner, None)
            if client is None:
                return 0
            ended = len(client.sessions)
            for name in client.sessions:
                self._used.pop((owner, name), None)
            self._count -= ended
            self._held(owner, -ended)
            return ended
