"""Sessions of a stateful served policy, each bound to the client that opened it.

A session is one environment's policy instance (made by the server's factory, reset with the
episode's seed and prompt). Its key is ``(owner, name)``: ``owner`` is the client as the server
knows it (an Assay client's ``X-Assay-Client`` token, else the connection itself), ``name`` what
the request says (``assay/session``). A request can therefore only reach its own client's
sessions: another client naming the same session gets a session of its own, never this one.

Nothing is ever evicted to make room. A client holds at most ``per_client`` sessions and the
server at most ``max_sessions``; a request that would open one more is refused with a coded line
(``E_SESSION_QUOTA``, ``E_SESSIONS_FULL``) and every live session goes on. Sessions end when
their client starts a new epoch (an Assay client's reset: its earlier episodes are over), when
their policy raises, and when the client's last connection closes. Each live session holds one
policy instance, so a stateful policy costs ``max_sessions`` x its instance size at most.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from assay.errors import SessionRefused
from assay.policies.protocol import Policy
from assay.policies.remote.wire import E_SESSION_QUOTA, E_SESSION_UNKNOWN, E_SESSIONS_FULL, session_epoch

DEFAULT_MAX_SESSIONS = 1024
DEFAULT_SESSIONS_PER_CLIENT = 256


@dataclass
class _Client:
    sessions: dict[str, Policy | None] = field(default_factory=dict)  # None: being built
    epochs: dict[str, int] = field(default_factory=dict)  # an Assay client's name -> its latest epoch


class SessionTable:
    """Live sessions by owner; thread-safe (the batcher's thread opens them, the event loop ends them)."""

    def __init__(self, factory: Callable[[], Policy], max_sessions: int = DEFAULT_MAX_SESSIONS,
                 per_client: int = DEFAULT_SESSIONS_PER_CLIENT) -> None:
        if max_sessions < 1 or per_client < 1:
            raise ValueError("max_sessions and per_client must be at least 1")
        self.factory, self.max_sessions, self.per_client = factory, max_sessions, per_client
        self._clients: dict[Hashable, _Client] = {}
        self._count = 0
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
            client = self._clients.setdefault(owner, _Client())
            policy = client.sessions.get(name)
            if policy is not None:
                return policy
            if name in client.sessions:
                raise SessionRefused(E_SESSION_UNKNOWN, f"session {name!r} is still being opened by another request")
            if step != 0:
                raise SessionRefused(E_SESSION_UNKNOWN, f"session {name!r} is unknown at step {step}: the server "
                                     "restarted or the session ended, and its policy state is gone; rerun the episode")
            self._end_older_epochs(client, name)
            if len(client.sessions) >= self.per_client:
                raise SessionRefused(E_SESSION_QUOTA, f"this client already holds {len(client.sessions)} sessions, "
                                     f"the limit per client (--max-sessions-per-client); end episodes or reset first")
            if self._count >= self.max_sessions:
                raise SessionRefused(E_SESSIONS_FULL, f"the server holds its limit of {self.max_sessions} sessions "
                                     "(--max-sessions); try again when other episodes have ended")
            client.sessions[name] = None  # reserved: the quota counts it while it is built
            self._count += 1
        try:
            policy = self.factory()
            reset(policy)
        except BaseException:
            self.end(owner, [name])
            raise
        with self._lock:
            if name in client.sessions:
                client.sessions[name] = policy
        return policy

    def _end_older_epochs(self, client: _Client, name: str) -> None:
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
                del client.sessions[other]
                self._count -= 1

    def end(self, owner: Hashable, names: list[str]) -> None:
        """End these sessions of ``owner`` (unknown ones are ignored)."""
        with self._lock:
            client = self._clients.get(owner)
            for name in names:
                if client is not None and name in client.sessions:
                    del client.sessions[name]
                    self._count -= 1

    def end_client(self, owner: Hashable) -> int:
        """End every session of ``owner`` (its last connection closed); returns how many ended."""
        with self._lock:
            client = self._clients.pop(owner, None)
            ended = len(client.sessions) if client is not None else 0
            self._count -= ended
            return ended
