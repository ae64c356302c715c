"""``ServedEnv``: a SimEnv whose simulator is a served one (``assay serve-sim``), one session per environment.

A process's environments on one server share one connection (a campaign worker is one client of the
server: one server process steps all its environments, as its own process would). The handshake runs when
the connection opens; a refusal (another version, busy, not a simulator server) is a
:class:`~assay.errors.SimulatorRefused` naming the fix. A connection that breaks mid-episode makes that
step or reset raise :class:`~assay.errors.SimulatorLostError` (the episode's outcome is ``error``; rerun
with ``--retry-errors``); the next reset connects again and opens a new session, so a restarted server
takes the campaign up from the next episode.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from assay.errors import SimulatorLostError, SimulatorRefused, WireError
from assay.served.handshake import hello, mismatch
from assay.served.protocol import (
    E_BUSY,
    E_PROTOCOL,
    E_SIM,
    E_VERSION,
    PROTOCOL,
    decode_observation,
    decode_steps,
    decode_transition,
    packb,
    split_error,
    unpackb,
)
from assay.served.server import MAX_FRAME_BYTES
from assay.served.transport import connect
from assay.sim.protocol import Observation, Transition
from assay.sim.render import RendererInfo, adopt_renderer
from assay.spec import TaskSpec, Variant

CONNECT_TIMEOUT_S = 10.0
FIRST_FRAME_TIMEOUT_S = 10.0  # a server sends its facts as soon as the websocket is open
HELLO_TIMEOUT_S = 30.0
# Building a LIBERO scene takes ~10 s, more under load; a step of a camera task a fraction of a second.
REPLY_TIMEOUT_S = 600.0


class _Link:
    """One connection to a served simulator, after its handshake; requests are answered in order."""

    def __init__(self, url: str, backend: str) -> None:
        self.url, self.backend, self.where = url, backend, f"the simulator server at {url}"
        self._lock = threading.Lock()
        self._sessions = itertools.count(1)
        try:
            self._ws = connect(url, CONNECT_TIMEOUT_S, MAX_FRAME_BYTES)
        except (OSError, TimeoutError) as exc:
            raise SimulatorRefused(f"{self.where} cannot be reached ({_reason(exc)}): start it with `assay serve-sim "
                                   f"{backend} --port PORT`, or fix `simulators: {{{backend}: ...}}`") from None
        except Exception as exc:  # noqa: BLE001 - websockets' handshake errors: not a websocket server at all
            raise SimulatorRefused(f"{self.where} is not a websocket server ({_reason(exc)}): point `simulators:` at "
                                   f"`assay serve-sim {backend}`") from None
        self.dead = False
        self.server = self._hello()

    def _hello(self) -> dict[str, Any]:
        """The server's facts (its first frame), then the client's hello and the server's answer; a refusal, or a
        server that is not a simulator server, raises SimulatorRefused naming the fix."""
        asked = hello(self.backend)
        served = self._first_frame()
        refused = mismatch(asked, served, self.where)
        if refused is not None:
            self.close()
            raise SimulatorRefused(f"{refused[0]}: {refused[1]}")
        try:
            self._ws.send(packb(asked))
            frame = self._ws.recv(timeout=HELLO_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - closed or silent at the hello: whatever it is, it is not ours
            self.close()
            raise SimulatorRefused(f"{self.where} did not answer the {PROTOCOL} hello ({_reason(exc)}): point "
                                   f"`simulators:` at `assay serve-sim {self.backend}`") from None
        if isinstance(frame, str):
            self.close()
            code, message = split_error(frame)
            raise SimulatorRefused(f"{code}: {message}" if code else f"{self.where} refused the hello: {frame[:200]}")
        return served

    def _first_frame(self) -> dict[str, Any]:
        """What the server says first: its facts (or a refusal: E_BUSY)."""
        try:
            frame = self._ws.recv(timeout=FIRST_FRAME_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - closed or silent: whatever it is, it is not our server
            self.close()
            raise SimulatorRefused(f"{self.where} said nothing a {PROTOCOL} server says first ({_reason(exc)}): "
                                   f"point `simulators:` at `assay serve-sim {self.backend}`") from None
        if isinstance(frame, str):
            self.close()
            code, message = split_error(frame)
            if code in (E_VERSION, E_BUSY, E_PROTOCOL):
                raise SimulatorRefused(f"{code}: {message}")
            raise SimulatorRefused(f"{self.where} answered with {frame[:120]!r}: it does not speak {PROTOCOL}; point "
                                   f"`simulators:` at `assay serve-sim {self.backend}`")
        try:
            facts = unpackb(frame, MAX_FRAME_BYTES)
        except WireError:
            facts = None
        if not isinstance(facts, dict) or facts.get("protocol") is None:
            self.close()
            kind = "a policy server (openpi's metadata)" if isinstance(facts, dict) else "something else"
            raise SimulatorRefused(f"{self.where} is {kind}, not a {PROTOCOL} simulator server: point "
                                   f"`simulators: {{{self.backend}: ...}}` at `assay serve-sim {self.backend}`")
        return facts

    def new_session(self) -> int:
        """A session number not used before on this connection."""
        return next(self._sessions)

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return its answer; an error frame raises (refusals as SimulatorRefused, the
        backend's faults and a lost connection as SimulatorLostError)."""
        with self._lock:
            if self.dead:
                raise SimulatorLostError(f"{self.where} went away: restart `assay serve-sim {self.backend}`; rerun "
                                         "with --retry-errors for the episodes it took")
            try:
                self._ws.send(packb(message))
                frame = self._ws.recv(timeout=REPLY_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - closed, reset, timed out: the server is gone for this link
                self.dead = True
                self.close()
                raise SimulatorLostError(f"{self.where} went away during {message.get('op')} ({_reason(exc)}): "
                                         f"restart `assay serve-sim {self.backend}`; rerun with --retry-errors for "
                                         "the episodes it took") from None
        if isinstance(frame, str):
            raise self.refusal(frame)
        reply = unpackb(frame, MAX_FRAME_BYTES)
        if not isinstance(reply, dict):
            raise SimulatorRefused(f"{self.where} answered {message.get('op')} with a {type(reply).__name__}: it does "
                                   f"not speak {PROTOCOL}")
        return reply

    def refusal(self, frame: str) -> SimulatorLostError | SimulatorRefused:
        """What an error frame (``CODE: message``) raises: the backend's fault as SimulatorLostError (the
        episode's error), a refusal as SimulatorRefused (E_PROTOCOL also ends the connection)."""
        code, text = split_error(frame)
        if code == E_SIM:
            return SimulatorLostError(f"the served {self.backend} simulator raised: {text}")
        if code == E_PROTOCOL:  # the server closes the connection after it: so does this side (its slot is freed)
            self.close()
        return SimulatorRefused(frame)

    def close(self) -> None:
        """Close the connection (the server closes this connection's environments)."""
        self.dead = True
        with contextlib.suppress(Exception):  # closing a broken connection has nothing left to report
            self._ws.close()


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_LINKS: dict[tuple[str, str], _Link] = {}
_LINKS_LOCK = threading.Lock()


def link(url: str, backend: str) -> _Link:
    """This process's connection to ``url`` for ``backend``: the open one, else a new one (handshake included).
    A server that is busy is asked again for up to :data:`BUSY_WAIT_S` (a client that just left frees its slot
    a moment later)."""
    with _LINKS_LOCK:
        current = _LINKS.get((url, backend))
        if current is None or current.dead:
            current = _LINKS[(url, backend)] = _busy_waited(url, backend)
        return current


BUSY_WAIT_S = 2.0


def _busy_waited(url: str, backend: str) -> _Link:
    deadline = time.monotonic() + BUSY_WAIT_S
    while True:
        try:
            return _Link(url, backend)
        except SimulatorRefused as exc:
            if not str(exc).startswith(E_BUSY) or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


class ServedEnv:
    """A :class:`~assay.sim.SimEnv` (and ``SupportsFramesOnDemand``) stepped by a served simulator at ``url``."""

    def __init__(self, task: TaskSpec, url: str) -> None:
        self.task, self.url = task, url
        self._skip = False
        self._initial: dict[str, Any] = {}
        self._link, self._session = self._open()

    def _open(self) -> tuple[_Link, int]:
        served = link(self.url, self.task.backend)
        session = served.new_session()
        served.request({"op": "open", "session": session, "task": self.task.model_dump(mode="json"),
                        "task_hash": self.task.content_hash()})
        return served, session

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        """Reset the served environment (a new session first, on a new connection, if the last one broke)."""
        if self._link.dead:
            self._link, self._session = self._open()
        reply = self._link.request({"op": "reset", "session": self._session, "seed": int(seed),
                                    "variant": variant.model_dump(mode="json") if variant is not None else None})
        self._skip = False
        self._initial = dict(reply.get("initial_conditions") or {})
        if reply.get("renderer"):
            adopt_renderer(RendererInfo(**reply["renderer"]))
        return decode_observation(reply.get("observation"), self._link.where)

    def skip_next_frames(self) -> None:
        """The next step's observation is not rendered (sent with that step: no round trip of its own)."""
        self._skip = True

    def step(self, action: np.ndarray) -> Transition:
        """One step of the served environment."""
        skip, self._skip = self._skip, False
        reply = self._link.request({"op": "step", "session": self._session, "skip_frames": skip,
                                    "action": np.asarray(action, dtype=np.float64)})
        return decode_transition(reply, self._link.where)

    def together_key(self) -> _Link | None:
        """The connection: environments on one step together, in one request (None once it broke: alone)."""
        return None if self._link.dead else self._link

    def step_together(self, others: Sequence[ServedEnv], actions: Sequence[np.ndarray]) -> list[Transition | Exception]:
        """This environment's step and ``others``' (on the same connection) in one request (``steps``; one a shape of
        action, when the batch mixes tasks whose actions differ): each one's transition, or what its step raised (a
        backend's fault is that environment's alone)."""
        envs = [self, *others]
        arrays = [np.asarray(action, dtype=np.float64) for action in actions]
        if len(arrays) != len(envs):
            raise ValueError(f"{len(envs)} environments and {len(arrays)} actions")
        shapes: dict[tuple[int, ...], list[int]] = {}
        for index, array in enumerate(arrays):
            shapes.setdefault(array.shape, []).append(index)
        outcomes: list[Transition | Exception | None] = [None] * len(envs)
        for members in shapes.values():
            skips = []
            for index in members:
                skips.append(envs[index]._skip)
                envs[index]._skip = False
            try:
                reply = self._link.request({"op": "steps", "sessions": [envs[index]._session for index in members],
                                            "skip_frames": skips, "actions": np.stack([arrays[i] for i in members])})
                answers: list[Any] = decode_steps(reply, len(members), self._link.where)
            except (SimulatorLostError, SimulatorRefused) as exc:  # the request failed: each of its steps did
                answers = [exc] * len(members)
            for index, answer in zip(members, answers, strict=True):
                outcomes[index] = self._answer(answer)
        return cast(list[Transition | Exception], outcomes)

    def _answer(self, reply: Any) -> Transition | Exception:
        """One step's answer within a ``steps`` reply: its transition, or what its step raised (its alone)."""
        if isinstance(reply, (Transition, Exception)):
            return reply
        if isinstance(reply, str):
            return self._link.refusal(reply)
        if not isinstance(reply, dict):
            return SimulatorRefused(f"{self._link.where} answered a step with a {type(reply).__name__}: it does not "
                                    f"speak {PROTOCOL}")
        try:
            return decode_transition(reply, self._link.where)
        except SimulatorRefused as exc:
            return exc

    def initial_conditions(self) -> dict[str, Any]:
        """What the served environment's last reset chose."""
        return dict(self._initial)

    def close(self) -> None:
        """Close the session (the connection stays for this process's other environments)."""
        if self._link.dead:
            return
        with contextlib.suppress(SimulatorLostError, SimulatorRefused):
            self._link.request({"op": "close", "session": self._session})


def close_links() -> None:
    """Close every connection this process holds (its servers close their environments)."""
    with _LINKS_LOCK:
        for served in _LINKS.values():
            served.close()
        _LINKS.clear()


__all__ = ["ServedEnv", "close_links", "link"]
