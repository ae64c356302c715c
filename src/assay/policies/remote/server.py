"""The policy server: any Assay policy over openpi's websocket protocol.

Protocol (openpi's, so its clients work unchanged):

* ``GET /healthz`` answers 200; any other path upgrades to a websocket;
* when an API key is set, the upgrade needs ``Authorization: Api-Key <key>`` (else 401);
* on connect the server sends one metadata frame; each request frame (one
  observation: ``observation/state``, ``prompt``, each image the contract names, as uint8:
  a served camera policy's ``image.<camera>``, ...) gets exactly one reply
  frame ``{"actions": (H, A), "server_timing": {queue_ms, batch_size, infer_ms}}``;
* when the policy raises, the traceback goes out as a text frame and the
  connection closes with 1011; a malformed request (not msgpack, not a map, a
  missing key or a wrong shape) gets a ``protocol error: ...`` text frame and
  close code 1008. The server itself survives both.

Limits, so that no client can exhaust the server (each set in :class:`ServerConfig`):
at most ``max_connections`` websockets at once (more get HTTP 503 at the upgrade), a
connection idle for ``idle_timeout_s`` is closed (1000, "idle"), keepalive pings drop
dead peers, each connection buffers at most two frames, at most ``max_large_frames``
frames over 1 MiB are decoded at once, and a log line repeated more than
``LOG_REPEATS`` times a minute is suppressed (with a count) instead of filling stderr.

Requests from all connections meet in a :class:`DynamicBatcher`. Two ways to serve:

* **sessions** (``serve-policy``'s default): each environment is a session with its own policy
  instance, made by the server's ``factory`` and reset with the session's seed and prompt, so a
  policy that keeps state per environment (a phase machine, an RNG stream, an action queue, an
  instruction embedding) behaves exactly as it does in process. An Assay client names the session
  in each request (``assay/session``, ``assay/seed``, ``assay/step``: the request's index within
  its episode; a client's reset ends its earlier sessions, so the live ones are the environments
  running now); a plain openpi client's connection is its session. A request for an unknown
  session past its first step (the server restarted, or evicted the session) is refused, so
  lost state never passes silently;
* **stateless** (a policy class that declares ``stateless = True``, ``serve-policy --stateless``,
  or a server built without a factory): the policy is reset once, with one slot per row of the
  largest batch, and treated as a function of each row's observation, batched across sessions.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import numpy as np

from assay.errors import AssayError
from assay.policies.contract import (
    PROMPT_KEY,
    STATE_KEY,
    ActionContract,
    ArraySpec,
    ImageLayout,
    PolicyContract,
    task_interface,
)
from assay.policies.protocol import Policy, PolicyContext, SupportsMetadata
from assay.policies.remote.batcher import DynamicBatcher
from assay.policies.remote.wire import (
    MAX_MESSAGE_BYTES,
    SEED_KEY,
    SESSION_KEY,
    STEP_KEY,
    WireError,
    packb,
    session_epoch,
    unpackb,
)
from assay.spec import TaskSpec

INTERNAL_ERROR = 1011
POLICY_VIOLATION = 1008
NORMAL_CLOSURE = 1000
LARGE_FRAME_BYTES = 1 << 20
LOG_REPEATS = 20  # identical log lines per minute before they are suppressed
MAX_SESSION_ID = 256


class ProtocolError(AssayError, ValueError):
    """A request that does not follow the protocol or the server's contract."""


class ServerStartError(AssayError):
    """The policy server did not come up (its port taken, its policy failing to build, ...)."""


@dataclass(frozen=True)
class ServerConfig:
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
    max_sessions: int = 4096

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.max_large_frames < 1 or self.max_sessions < 1:
            raise ValueError("max_connections, max_large_frames and max_sessions must be at least 1")
        if self.idle_timeout_s is not None and self.idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s must be positive, got {self.idle_timeout_s}")


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


SERVER_LOGGERS = ("websockets", "websockets.server", "asyncio")


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
        action=ActionContract(dim=given.action_dim, mode=given.mode, gripper=given.gripper, low=given.low, high=given.high),
        control_hz=given.control_hz,
    )


class PolicyServer:
    def __init__(self, policy: Policy, task: TaskSpec, config: ServerConfig = ServerConfig(),
                 identity: dict[str, Any] | None = None, contract: PolicyContract | None = None,
                 factory: Callable[[], Policy] | None = None) -> None:
        self.policy, self.task, self.config = policy, task, config
        self.contract = contract if contract is not None else default_contract(policy, task)
        self.factory = None if getattr(policy, "stateless", False) else factory
        self.sessions: OrderedDict[str, Policy] = OrderedDict()  # least recently used first
        self._epochs: dict[str, int] = {}  # Assay client -> its latest epoch (see _end_older_epochs)
        self._sessions_lock = threading.Lock()
        self.metadata: dict[str, Any] = {
            "assay": dict(identity or {}, task=task.id),
            "contract": self.contract.model_dump(mode="json"),
            "server": {"max_batch": config.max_batch, "max_wait_ms": config.max_wait_ms,
                       "sessions": self.factory is not None},
        }
        self._metadata_frame = packb(self.metadata)
        self._large_frames: asyncio.Semaphore | None = None  # made on the serving loop
        self.batcher = DynamicBatcher(self._infer, config.max_batch, config.max_wait_ms / 1000.0)
        slots = config.max_batch
        policy.reset(PolicyContext(task, tuple(range(slots)), tuple(task.instruction for _ in range(slots))))
        self.port: int | None = None

    # -- inference (runs on the batcher's thread) ------------------------------------------------
    def _infer(self, rows: list[dict[str, Any]]) -> list[Any]:
        if self.factory is not None:
            return [self._infer_session(row) for row in rows]
        try:
            return self._act(self.policy, rows)
        except Exception:  # noqa: BLE001 - a batch failed; find the rows that provoke it
            if len(rows) == 1:
                return [_Traceback(traceback.format_exc())]
            results: list[Any] = []
            for row in rows:
                results.extend(self._infer([row]))
            return results

    def _infer_session(self, row: dict[str, Any]) -> Any:
        """One row on its session's own policy instance (made and reset on the session's first request)."""
        session = row[SESSION_KEY]
        try:
            with self._sessions_lock:
                policy = self.sessions.get(session)
                if policy is not None:
                    self.sessions.move_to_end(session)
            if policy is None:
                if row.get(STEP_KEY, 0) != 0:
                    raise LookupError(f"session {session!r} is unknown at step {row[STEP_KEY]}: the server restarted "
                                      "or evicted it, and its policy state is gone; rerun the episode")
                assert self.factory is not None
                self._end_older_epochs(session)
                policy = self.factory()
                prompt = row.get(PROMPT_KEY, self.task.instruction)
                policy.reset(PolicyContext(self.task, (int(row.get(SEED_KEY, 0)),), (prompt,)))
                with self._sessions_lock:
                    self.sessions[session] = policy
                    while len(self.sessions) > self.config.max_sessions:
                        self.sessions.popitem(last=False)
            return self._act(policy, [row])[0]
        except Exception:  # noqa: BLE001 - the session's policy failed: this row fails, and the session ends
            self.end_sessions([session])
            return _Traceback(traceback.format_exc())

    def _end_older_epochs(self, session: str) -> None:
        """A client's new epoch (it reset: its earlier episodes are over) ends its sessions of older epochs,
        so the live sessions, each holding a policy instance, are the environments running now."""
        found = session_epoch(session)
        if found is None:
            return
        client, epoch = found
        with self._sessions_lock:
            if self._epochs.get(client, -1) >= epoch:
                return
            self._epochs[client] = epoch
            if len(self._epochs) > self.config.max_sessions:  # forget clients long gone
                self._epochs.pop(next(iter(self._epochs)))
            stale = []
            for name in self.sessions:
                parts = session_epoch(name)
                if parts is not None and parts[0] == client and parts[1] < epoch:
                    stale.append(name)
            for name in stale:
                del self.sessions[name]

    def end_sessions(self, sessions: list[str]) -> None:
        with self._sessions_lock:
            for session in sessions:
                self.sessions.pop(session, None)

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
                                    f"keys given: {sorted(map(str, request))}")
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
                                    f"keys given: {sorted(map(str, request))}")
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
        if len(connection.server.all_connections) >= self.config.max_connections:  # open ones, not this one
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE,
                                      f"policy server at its limit of {self.config.max_connections} connections\n")
        if self.config.api_key:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Api-Key {self.config.api_key}".encode()):
                return connection.respond(HTTPStatus.UNAUTHORIZED, "missing or wrong API key\n")
        return None

    async def _handle(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        own_session = f"connection-{id(ws)}"  # a plain openpi client: its connection is its session
        try:
            await ws.send(self._metadata_frame)
            while True:
                try:
                    message = await asyncio.wait_for(ws.recv(), self.config.idle_timeout_s)
                except TimeoutError:
                    await ws.close(NORMAL_CLOSURE, f"idle for {self.config.idle_timeout_s:g} s")
                    return
                try:
                    request = await self._decode(message)
                except (WireError, ProtocolError) as exc:
                    await ws.send(f"protocol error: {exc}")
                    await ws.close(POLICY_VIOLATION, "protocol error")
                    return
                request.setdefault(SESSION_KEY, own_session)
                try:
                    actions, timing = await self.batcher.submit(request)
                except _Traceback as failure:
                    await ws.send(failure.text)
                    await ws.close(INTERNAL_ERROR, "Internal server error. Traceback included in previous frame.")
                    return
                try:
                    reply = packb({"actions": actions, "server_timing": timing})
                except (WireError, TypeError) as exc:
                    await ws.send(f"Traceback: the policy's actions cannot be sent: {exc}")
                    await ws.close(INTERNAL_ERROR, "Internal server error. Traceback included in previous frame.")
                    return
                await ws.send(reply)
        except ConnectionClosed:
            pass
        finally:
            self.end_sessions([own_session])

    async def _decode(self, message: Any) -> dict[str, Any]:
        """Validate one request; frames over 1 MiB are decoded at most ``max_large_frames`` at a time."""
        if len(message) < LARGE_FRAME_BYTES:
            return self.validate(message)
        assert self._large_frames is not None
        async with self._large_frames:
            return await asyncio.to_thread(self.validate, message)

    async def serve(self, ready: threading.Event | None = None, stop: asyncio.Event | None = None) -> None:
        """Serve until ``stop`` is set (or forever); sets ``self.port`` (useful with port 0)."""
        from websockets.asyncio.server import serve

        self._large_frames = asyncio.Semaphore(self.config.max_large_frames)
        repeats = RepeatFilter()
        for name in SERVER_LOGGERS:
            logging.getLogger(name).addFilter(repeats)
        batching = asyncio.create_task(self.batcher.run())
        ping = self.config.ping_interval_s
        try:
            async with serve(self._handle, self.config.host, self.config.port, process_request=self._process_request,
                             max_size=self.config.max_message_bytes, compression=None, max_queue=2,
                             ping_interval=ping, ping_timeout=ping) as server:
                self.port = server.sockets[0].getsockname()[1]
                if ready is not None:
                    ready.set()
                await (stop.wait() if stop is not None else asyncio.Future())
        finally:
            batching.cancel()
            for name in SERVER_LOGGERS:
                logging.getLogger(name).removeFilter(repeats)

    @property
    def url(self) -> str:
        return f"ws://{self.config.host}:{self.port}"


class _Traceback(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text.strip().splitlines()[-1] if text.strip() else "policy failed")
        self.text = text


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
