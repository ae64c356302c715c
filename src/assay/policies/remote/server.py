"""The policy server: any Assay policy over openpi's websocket protocol.

Protocol (openpi's, so its clients work unchanged):

* ``GET /healthz`` answers 200; any other path upgrades to a websocket;
* when an API key is set, the upgrade needs ``Authorization: Api-Key <key>`` (else 401, before any
  limit is looked at: a client without the key never holds a connection);
* on connect the server sends one metadata frame (its identity, its contract and, under ``server``,
  its limits: a campaign reads them to warn when it would open more connections or sessions than
  the server holds); each request frame (one observation: ``observation/state``, ``prompt``, each
  image the contract names, as uint8) gets exactly one reply frame
  ``{"actions": (H, A), "server_timing": {queue_ms, batch_size, infer_ms}}``;
* an error is one text frame of one line, ``CODE: message`` (the codes are in ``remote.wire``:
  ``E_PROTOCOL`` for a malformed request, then close 1008; ``E_POLICY`` when the policy raised,
  then close 1011; the session codes below). A traceback never reaches a client: it goes to the
  server's log (logger ``assay.policy_server``). The server itself survives every error.

Limits (each set in :class:`PolicyServerConfig`; see ``remote.limits``): at most ``max_connections``
websockets, and at that limit the connection idle longest (``evict_idle_after_s`` at least) is
closed (1013) to seat a newcomer, so only busy connections make the server answer HTTP 503, with a
``Retry-After`` saying when a seat can next be freed (at most ``evict_idle_after_s``); an upgrade
whose client vanishes before it is seated gives its place back at once; seats are shared among clients
(a newcomer holding fewer takes the seat of a connection idle 1 s of a client holding more); each client
is held to ``max_requests_per_s`` (a request over it waits its turn); a connection idle for
``idle_timeout_s`` is closed (1000, "idle"); keepalive pings drop dead peers; each connection
buffers at most two frames; large frames need a ticket of the global byte budget
``max_buffer_bytes`` (a ticket covers one frame and its decoded copy) from their first byte until
their request is answered; at most ``max_large_frames`` of them are decoded at once; freed memory
is returned to the system after a burst; a log line repeated more than ``LOG_REPEATS`` times a
minute is counted, not printed.

Requests from all connections meet in a :class:`DynamicBatcher`. Two ways to serve:

* **sessions** (``serve-policy``'s default for a stateful policy): each environment is a session
  with its own policy instance, made by the server's ``factory`` and reset with the session's seed
  and prompt, so a policy that keeps state per environment behaves exactly as it does in process.
  Sessions belong to their client (``remote.sessions``): an Assay client names itself with the
  ``X-Assay-Client`` header (a random token) and each session in its requests (``assay/session``,
  ``assay/seed``, ``assay/step``); a plain openpi client's connection is its client and its session.
  No client can reach, end or evict another's session; per-client and global session limits refuse
  new sessions (``E_SESSION_QUOTA``, ``E_SESSIONS_FULL``) and never end live ones, and the table is shared
  fairly (a minimum per client, a fair share past it, a reserve for newcomers: ``E_SESSION_SHARE``); a session not
  stepped for ``session_idle_s`` ends (checked at each request and every few seconds), so sessions a
  quiet client left behind cannot fill the table for good; a session unknown past its first step is
  refused (``E_SESSION_UNKNOWN``), so lost state never passes silently. Each live session holds one
  policy instance: memory grows by one instance per environment served.
* **stateless** (a policy class that declares ``stateless = True``, ``serve-policy --stateless``,
  or a server built without a factory): one shared instance, reset once with one slot per row of
  the largest batch, treated as a function of each row's observation, batched across sessions; its
  memory does not grow with clients.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import logging
import re
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import numpy as np

from assay.errors import ProtocolError, ServerStartError, SessionRefused, WireError
from assay.policies.contract import (
    PROMPT_KEY,
    STATE_KEY,
    ActionContract,
    ArraySpec,
    ImageLayout,
    PolicyContract,
    task_interface,
)
from assay.policies.protocol import Policy, PolicyContext, SupportsMetadata, is_stateless
from assay.policies.remote.batcher import DynamicBatcher
from assay.policies.remote.limits import (
    SMALL_FRAME_BYTES,
    ByteBudget,
    ConnectionBook,
    RepeatFilter,
    RequestRate,
    Seat,
    budgeted_connection,
    buffered_bytes,
    cap_mmap_threshold,
    return_memory_to_os,
)
from assay.policies.remote.sessions import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MIN_SESSIONS,
    DEFAULT_SESSION_IDLE_S,
    DEFAULT_SESSIONS_PER_CLIENT,
    SessionTable,
)
from assay.policies.remote.wire import (
    CLIENT_HEADER,
    E_POLICY,
    E_PROTOCOL,
    E_REPLY,
    MAX_MESSAGE_BYTES,
    SEED_KEY,
    SESSION_KEY,
    STEP_KEY,
    error_line,
    packb,
    unpackb,
)
from assay.spec import TaskSpec

INTERNAL_ERROR = 1011
POLICY_VIOLATION = 1008
NORMAL_CLOSURE = 1000
TRY_AGAIN_LATER = 1013
LARGE_FRAME_BYTES = 1 << 20
MAX_SESSION_ID = 256
DEFAULT_BUFFER_BYTES = 256 * 1024 * 1024
EXPIRY_SWEEP_S = 5.0  # at most this long between two sweeps for idle sessions
TIDY_AFTER_S = 0.5  # after the last large frame of a burst, collect and return memory (at most twice a second)
DEFAULT_REQUESTS_PER_S = 2000.0  # per client; one client of 40 environments asked ~3,200/s of a scripted policy alone
CLIENT_TOKEN = re.compile(r"[A-Za-z0-9_-]{8,64}")
log = logging.getLogger("assay.policy_server")
SERVER_LOGGERS = ("websockets", "websockets.server", "asyncio", log.name)


@dataclass(frozen=True)
class PolicyServerConfig:
    """The server's address, batching and limits (see the module docstring for what each bounds)."""

    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 32
    max_wait_ms: float = 5.0
    api_key: str | None = None
    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_connections: int = 64
    idle_timeout_s: float | None = 300.0
    ping_interval_s: float | None = 20.0
    max_large_frames: int = 4
    max_sessions: int = DEFAULT_MAX_SESSIONS
    max_sessions_per_client: int = DEFAULT_SESSIONS_PER_CLIENT
    max_buffer_bytes: int = DEFAULT_BUFFER_BYTES
    evict_idle_after_s: float | None = 10.0
    session_grace_s: float = 10.0
    session_idle_s: float | None = DEFAULT_SESSION_IDLE_S
    min_sessions_per_client: int = DEFAULT_MIN_SESSIONS
    reserved_sessions: int | None = None  # None: a quarter of max_sessions (see remote.sessions)
    max_requests_per_s: float | None = DEFAULT_REQUESTS_PER_S  # per client; None: no limit

    def __post_init__(self) -> None:
        if min(self.max_connections, self.max_large_frames, self.max_sessions, self.max_sessions_per_client,
               self.min_sessions_per_client) < 1:
            raise ValueError("max_connections, max_large_frames, max_sessions, max_sessions_per_client and "
                             "min_sessions_per_client must be at least 1")
        if self.reserved_sessions is not None and self.reserved_sessions < 0:
            raise ValueError(f"reserved_sessions must be 0 or more, got {self.reserved_sessions}")
        if self.max_requests_per_s is not None and self.max_requests_per_s <= 0:
            raise ValueError(f"max_requests_per_s must be positive (or None: no limit), got {self.max_requests_per_s}")
        if self.idle_timeout_s is not None and self.idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s must be positive, got {self.idle_timeout_s}")
        if self.session_idle_s is not None and self.session_idle_s <= 0:
            raise ValueError(f"session_idle_s must be positive seconds (or None: never), got {self.session_idle_s}")
        if self.max_buffer_bytes < self.max_message_bytes:
            raise ValueError(f"max_buffer_bytes ({self.max_buffer_bytes}) must hold at least one frame of "
                             f"max_message_bytes ({self.max_message_bytes})")

    def limits(self) -> dict[str, Any]:
        """What the metadata frame tells clients about the server's capacity."""
        return {"max_connections": self.max_connections, "max_sessions": self.max_sessions,
                "max_sessions_per_client": self.max_sessions_per_client,
                "min_sessions_per_client": self.min_sessions_per_client, "max_message_bytes": self.max_message_bytes,
                "max_buffer_bytes": self.max_buffer_bytes, "idle_timeout_s": self.idle_timeout_s,
                "session_idle_s": self.session_idle_s, "max_requests_per_s": self.max_requests_per_s}


def default_contract(policy: Policy, task: TaskSpec) -> PolicyContract:
    """The policy's own contract (``metadata()['contract']``), or the serving task's interface."""
    metadata = dict(policy.metadata()) if isinstance(policy, SupportsMetadata) else {}
    declared = PolicyContract.from_metadata(metadata)
    if declared is not None:
        return declared
    given = task_interface(task)
    return PolicyContract(
        observations={STATE_KEY: ArraySpec(shape=(task.state_dim,), dtype="float64")},
        state_layout=given.state_layout,
        action=ActionContract(dim=given.action_dim, mode=given.mode, gripper=given.gripper,
                              low=given.low, high=given.high),
        control_hz=given.control_hz,
    )


class _ClientError(Exception):
    """What a client is told (one coded line) and how its connection is closed."""

    def __init__(self, code: str, message: str, close: int | None = INTERNAL_ERROR) -> None:
        super().__init__(message)
        self.line, self.close = error_line(code, message), close  # close None: the connection goes on


def _raised(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()
    return f"the policy raised {type(exc).__name__}" + (f": {first[0]}" if first else "")


@dataclass
class _Row:
    owner: Hashable
    request: dict[str, Any]


class PolicyServer:
    """Serves ``policy`` for ``task``: one shared instance, or a session each from ``factory`` (module docstring)."""

    def __init__(self, policy: Policy, task: TaskSpec, config: PolicyServerConfig = PolicyServerConfig(),
                 identity: dict[str, Any] | None = None, contract: PolicyContract | None = None,
                 factory: Callable[[], Policy] | None = None) -> None:
        self.policy, self.task, self.config = policy, task, config
        self.contract = contract if contract is not None else default_contract(policy, task)
        self.factory = None if is_stateless(policy) else factory
        self.sessions = SessionTable(self.factory, config.max_sessions, config.max_sessions_per_client,
                                     config.session_idle_s, minimum=config.min_sessions_per_client,
                                     reserved=config.reserved_sessions) if self.factory is not None else None
        self.rate = RequestRate(config.max_requests_per_s) if config.max_requests_per_s else None
        self.metadata: dict[str, Any] = {
            "assay": dict(identity or {}, task=task.id),
            "contract": self.contract.model_dump(mode="json"),
            "server": {"max_batch": config.max_batch, "max_wait_ms": config.max_wait_ms,
                       "sessions": self.factory is not None, **config.limits()},
        }
        self._metadata_frame = packb(self.metadata)
        self._large_frames: asyncio.Semaphore | None = None  # made on the serving loop
        self.book = ConnectionBook(config.max_connections, config.evict_idle_after_s)
        self.budget = ByteBudget(config.max_buffer_bytes, config.max_message_bytes + SMALL_FRAME_BYTES, decoded=True)
        self.budget.on_drained = self._drained
        self._tidy: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self.batcher = DynamicBatcher(self._infer, config.max_batch, config.max_wait_ms / 1000.0)
        slots = config.max_batch
        policy.reset(PolicyContext(task, tuple(range(slots)), tuple(task.instruction for _ in range(slots))))
        self.port: int | None = None

    # -- inference (runs on the batcher's thread) ------------------------------------------------
    def _infer(self, rows: list[_Row]) -> list[Any]:
        if self.sessions is not None:
            return [self._infer_session(self.sessions, row) for row in rows]
        try:
            return self._act(self.policy, [row.request for row in rows])
        except Exception as exc:  # noqa: BLE001 - a batch failed; find the rows that provoke it
            if len(rows) == 1:
                log.error("the policy raised for a request", exc_info=True)
                return [_ClientError(E_POLICY, _raised(exc))]
            results: list[Any] = []
            for row in rows:
                results.extend(self._infer([row]))
            return results

    def _infer_session(self, sessions: SessionTable, row: _Row) -> Any:
        """One row on its session's own policy instance (made and reset on the session's first request)."""
        request = row.request
        name = request[SESSION_KEY]
        prompt = request.get(PROMPT_KEY, self.task.instruction)
        context = PolicyContext(self.task, (int(request.get(SEED_KEY, 0)),), (prompt,))
        try:
            policy = sessions.get(row.owner, name, int(request.get(STEP_KEY, 0)), lambda made: made.reset(context))
            return self._act(policy, [request])[0]
        except SessionRefused as refused:
            return _ClientError(refused.code, str(refused), close=None)  # the request failed, not the connection
        except Exception as exc:  # noqa: BLE001 - the session's policy failed: this row fails, and the session ends
            log.error("the policy raised for session %r", name, exc_info=True)
            sessions.end(row.owner, [name])
            return _ClientError(E_POLICY, _raised(exc))

    def _act(self, policy: Policy, rows: list[dict[str, Any]]) -> list[np.ndarray]:
        batch: dict[str, Any] = {"instruction": [r.get(PROMPT_KEY, self.task.instruction) for r in rows],
                                 "env_ids": np.arange(len(rows))}
        for key in (*self.contract.observations, *self.contract.images):  # image.<camera> keys stay as they are
            if key != PROMPT_KEY:
                batch[key.split("/", 1)[-1]] = np.stack([r[key] for r in rows])
        actions = np.asarray(policy.act(batch))
        if actions.ndim not in (2, 3) or actions.shape[0] != len(rows):
            raise ValueError(f"policy returned actions of shape {actions.shape} for {len(rows)} rows; "
                             "expected (B, action_dim) or (B, H, action_dim)")
        if actions.ndim == 2:
            actions = actions[:, None, :]
        return list(actions)

    # -- protocol ----------------------------------------------------------------------------------
    def validate(self, message: Any) -> dict[str, Any]:
        """Check one request against the contract; raise ProtocolError naming what is wrong."""
        request = unpackb(message, self.config.max_message_bytes)
        if not isinstance(request, dict):
            raise ProtocolError(f"a request must be a map of observations, got {type(request).__name__}")
        for key, spec in self.contract.observations.items():
            if key == PROMPT_KEY:
                continue
            value = request.get(key)
            if not isinstance(value, np.ndarray):
                raise ProtocolError(f"request needs {key!r} as an array of shape {tuple(spec.shape)}; "
                                    f"keys given: {sorted(map(str, request))[:20]}")
            if value.shape != tuple(spec.shape):
                raise ProtocolError(f"{key!r} has shape {value.shape}, expected {tuple(spec.shape)}")
            if value.dtype.kind not in "biuf":
                raise ProtocolError(f"{key!r} has dtype {value.dtype}, expected a numeric dtype ({spec.dtype})")
            request[key] = value.astype(spec.dtype, copy=False)
        for key, image in self.contract.images.items():
            value = request.get(key)
            shape = (image.channels, image.height, image.width) if image.layout is ImageLayout.CHW \
                else (image.height, image.width, image.channels)
            if not isinstance(value, np.ndarray):
                raise ProtocolError(f"request needs image {key!r} as a uint8 array of shape {shape}; "
                                    f"keys given: {sorted(map(str, request))[:20]}")
            if value.shape != shape or value.dtype != np.uint8:
                raise ProtocolError(f"image {key!r} is {value.dtype} of shape {value.shape}, expected uint8 {shape}")
        if PROMPT_KEY in request and not isinstance(request[PROMPT_KEY], str):
            raise ProtocolError(f"{PROMPT_KEY!r} must be a string")
        session = request.get(SESSION_KEY)
        if session is not None and (not isinstance(session, str) or not 0 < len(session) <= MAX_SESSION_ID):
            raise ProtocolError(f"{SESSION_KEY!r} must be a string of 1 to {MAX_SESSION_ID} characters")
        for key in (SEED_KEY, STEP_KEY):
            value = request.get(key)
            if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0):
                raise ProtocolError(f"{key!r} must be a non-negative integer, got {value!r}")
        return request

    def _process_request(self, connection: Any, request: Any) -> Any:
        if request.path == "/healthz":
            return connection.respond(HTTPStatus.OK, "OK\n")
        if self.config.api_key:  # first: a client without the key never holds or costs a seat
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Api-Key {self.config.api_key}".encode()):
                return connection.respond(HTTPStatus.UNAUTHORIZED, "missing or wrong API key\n")
        if connection.lost:  # the client left before its upgrade was read: it takes no place
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "connection closed\n")
        admitted, victim = self.book.admit(connection, self._owner_of(request.headers, connection))
        if not admitted:
            response = connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, f"policy server at its limit of "
                                          f"{self.config.max_connections} connections, all of them busy\n")
            response.headers["Retry-After"] = str(self.book.retry_after())
            return response
        if victim is not None:
            task = asyncio.get_running_loop().create_task(
                victim.ws.close(TRY_AGAIN_LATER, "evicted: idle while the server is at its connection limit"))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return None

    def _drained(self) -> None:
        """The last large frame is answered: soon, if none came meanwhile, free what the burst left. A closed
        websocket lives in reference cycles (connection, protocol, transport) holding its last frames, which
        only the cycle collector frees; then glibc is asked to give the pages back."""
        if self._tidy is None:
            self._tidy = asyncio.get_running_loop().call_later(TIDY_AFTER_S, self._tidy_up)

    def _tidy_up(self) -> None:
        self._tidy = None
        if not self.budget.held:
            gc.collect()
            return_memory_to_os()

    def _owner(self, ws: Any) -> Hashable:
        """Whose sessions this connection reaches: the Assay client it names, else itself."""
        return self._owner_of(getattr(getattr(ws, "request", None), "headers", None), ws)

    @staticmethod
    def _owner_of(headers: Any, ws: Any) -> Hashable:
        token = headers.get(CLIENT_HEADER) if headers is not None else None
        if isinstance(token, str) and CLIENT_TOKEN.fullmatch(token):
            return ("client", token)
        return ("connection", id(ws))

    async def _handle(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        seat = self.book.seat(ws, self._owner(ws))
        try:
            await ws.send(self._metadata_frame)
            while True:
                try:
                    message = await asyncio.wait_for(ws.recv(), self.config.idle_timeout_s)
                except TimeoutError:
                    await ws.close(NORMAL_CLOSURE, f"idle for {self.config.idle_timeout_s:g} s")
                    return
                if self.rate is not None and (pause := self.rate.wait(seat.owner)) > 0:
                    await asyncio.sleep(pause)  # over its client's rate: waits its turn, not busy (may be evicted)
                if seat.evicted:  # closing: the request is dropped unanswered, so a client may resend it
                    return
                seat.busy = True
                try:
                    reply, failure = await self._answer(seat, message)
                finally:
                    # not kept by this frame: a ConnectionClosed raised later keeps the frame in its traceback,
                    # and websockets keeps that exception in a reference cycle with the connection
                    message = b""
                    seat.busy, seat.last_active = False, self.book.clock()
                    seat.requests += 1
                    self.budget.settle(ws, buffered_bytes(ws))
                if failure is None:
                    await ws.send(reply)
                    continue
                await ws.send(failure.line)
                if failure.close is not None:
                    await ws.close(failure.close, failure.line.split(":", 1)[0])
                    return
        except ConnectionClosed:
            pass
        finally:
            if self.book.leave(seat) and self.sessions is not None:
                self._last_connection_closed(self.sessions, seat.owner)

    def _last_connection_closed(self, sessions: SessionTable, owner: Hashable) -> None:
        """A plain connection's session ends with it; an Assay client's sessions wait ``session_grace_s``
        for it to reconnect (it closes a connection after a timeout, the server after a policy error)."""
        grace = self.config.session_grace_s
        if not grace or (isinstance(owner, tuple) and owner[0] == "connection"):
            sessions.end_client(owner)
            return

        def expire() -> None:
            if owner not in self.book.owners:
                sessions.end_client(owner)

        asyncio.get_running_loop().call_later(grace, expire)

    async def _answer(self, seat: Seat, message: Any) -> tuple[bytes, None] | tuple[None, _ClientError]:
        """The reply frame to one request, or the error its client is told."""
        try:
            request = await self._decode(message)
        except (WireError, ProtocolError) as exc:
            return None, _ClientError(E_PROTOCOL, str(exc), POLICY_VIOLATION)
        request.setdefault(SESSION_KEY, "connection")  # a plain openpi client: its connection is its session
        try:
            actions, timing = await self.batcher.submit(_Row(seat.owner, request))
        except _ClientError as failure:
            return None, failure
        try:
            return packb({"actions": actions, "server_timing": timing}), None
        except (WireError, TypeError) as exc:
            return None, _ClientError(E_REPLY, f"the policy's actions cannot be sent: {exc}")

    async def _decode(self, message: Any) -> dict[str, Any]:
        """Validate one request; frames over 1 MiB are decoded at most ``max_large_frames`` at a time."""
        if len(message) < LARGE_FRAME_BYTES:
            return self.validate(message)
        assert self._large_frames is not None
        async with self._large_frames:
            return await asyncio.to_thread(self.validate, message)

    async def _expire_sessions(self) -> None:
        """End idle sessions even when no request comes (their instances' memory is freed)."""
        assert self.sessions is not None
        idle = self.sessions.idle_s
        if idle is None:
            return
        while True:
            await asyncio.sleep(min(max(idle / 4, 0.05), EXPIRY_SWEEP_S))
            self.sessions.expire()

    async def serve(self, ready: threading.Event | None = None, stop: asyncio.Event | None = None) -> None:
        """Serve until ``stop`` is set (or forever); sets ``self.port`` (useful with port 0)."""
        from websockets.asyncio.server import serve

        self._large_frames = asyncio.Semaphore(self.config.max_large_frames)
        cap_mmap_threshold(LARGE_FRAME_BYTES)  # large frames live in their own mappings, freed at once
        repeats = RepeatFilter()
        for name in SERVER_LOGGERS:
            logging.getLogger(name).addFilter(repeats)
        batching = asyncio.create_task(self.batcher.run())
        expiring = asyncio.create_task(self._expire_sessions()) if self.sessions is not None else None
        ping = self.config.ping_interval_s
        try:
            async with serve(self._handle, self.config.host, self.config.port, process_request=self._process_request,
                             max_size=self.config.max_message_bytes, compression=None, max_queue=2,
                             ping_interval=ping, ping_timeout=ping,
                             create_connection=budgeted_connection(self.budget, self.book)) as server:
                self.port = server.sockets[0].getsockname()[1]
                if ready is not None:
                    ready.set()
                await (stop.wait() if stop is not None else asyncio.Future())
        finally:
            batching.cancel()
            if expiring is not None:
                expiring.cancel()
            for name in SERVER_LOGGERS:
                logging.getLogger(name).removeFilter(repeats)

    @property
    def url(self) -> str:
        """``ws://host:port`` once serving."""
        return f"ws://{self.config.host}:{self.port}"


class ServerThread:
    """Run a PolicyServer on its own event loop in a thread (tests, benchmarks, notebooks)."""

    def __init__(self, server: PolicyServer) -> None:
        self.server = server
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="assay-policy-server", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._stop = asyncio.Event()
            await self.server.serve(self._ready, self._stop)

        try:
            self._loop.run_until_complete(main())
        except Exception as exc:  # noqa: BLE001 - reported by __enter__, which waits for it
            self._failure = exc
        finally:
            self._ready.set()
            self._loop.close()

    def __enter__(self) -> PolicyServer:
        self._thread.start()
        self._ready.wait(timeout=30)
        if self.server.port is None:
            where = f"{self.server.config.host}:{self.server.config.port}"
            why = f"{type(self._failure).__name__}: {self._failure}" if self._failure else "not up within 30 s"
            raise ServerStartError(f"the policy server on {where} did not start ({why})")
        return self.server

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)
