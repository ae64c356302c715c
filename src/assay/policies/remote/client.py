"""The remote policy client: a campaign's ``remote:ws://host:port`` policy.

Each environment row becomes one openpi request: ``observation/state`` (in the
dtype the server's contract declares, float32 when it declares none), ``prompt``,
each camera's RGB image under the wire key openpi policies read
(``observation/image``, ``observation/wrist_image``; ``images:`` in the
campaign's policy params maps them otherwise; a served Assay camera policy whose
contract names ``image.<camera>`` gets exactly those keys) as uint8 HWC, resized with padding
to the size the contract declares (openpi's ``resize_with_pad``), and any other
observation the contract names. The server's metadata frame is read before the
first request is built, so every request of a campaign has the same form. When the
server keeps sessions (an Assay server: ``server.sessions`` in its metadata), each
request also names its environment's session (``assay/session``: unique per reset and
slot), the episode's seed (``assay/seed``) and its index in the episode (``assay/step``),
so a stateful policy keeps its state per environment on the server too. The rows of
a batch travel concurrently on a pool of connections (openpi's protocol answers
one request per connection at a time), so a server with a dynamic batcher can
gather them, and those of other workers, into one forward pass. The reply's
``actions`` is one action ``(A,)`` or a chunk ``(H, A)``.

Connections are opened with retries (tenacity): exponential backoff with jitter, by default
8 attempts from 0.1 s doubling to at most 2 s, each wait within 25 % of that (5 to 9 s in all), so a
server that restarts within about 5 s is
reached again and clients turned away together do not come back together (``connect_attempts``,
``backoff_s`` and ``max_backoff_s`` are policy params). HTTP 503 (the server holds its limit of
busy connections) is retried the same way, each wait at least the ``Retry-After`` the server sends
(up to 25 % more; at most ``MAX_RETRY_AFTER_S``): an Assay server says when an idle connection can
next be evicted for a newcomer (at most its eviction threshold, 10 s), so a client arriving right
after an idle crowd waits for its seat instead of giving up first. A client that already holds
connections does not wait for more: it sends its rows over the ones it has, one request at a time
on each, so a campaign wider than the server's connection limit runs slower instead of failing. A new session refused
because the server holds its limit of sessions (``E_SESSIONS_FULL``) is asked again with the same
backoff (sessions end as other episodes end or idle out) before its row fails. A request whose idle
connection the server closed (1000 idle, 1013 evicted: the server drops such a request unanswered)
is sent again once on a fresh connection. Every request has a timeout. A server that is gone
(refused, closed, timed out, busy past the retry budget) raises :class:`PolicyUnavailableError`,
which the runner turns into ``error`` episodes for the whole batch at once; an error frame (one
coded line: the server's policy raised, a session refused) raises :class:`RemotePolicyError` for
the batch, and the runner asks each row alone, so only the row that provokes it fails.

Each client names itself to the server with a random token (``X-Assay-Client``): its sessions are
bound to it, so no other client can reach them. :func:`capacity_warning` compares what a campaign
will open with the limits a server publishes in its metadata.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import uuid
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator
from tenacity import AsyncRetrying, RetryCallState, RetryError, retry_if_exception, stop_after_attempt

from assay.errors import (
    CapacityWarning,
    EpisodeError,
    PolicyUnavailableError,
    RemotePolicyError,
    ServerBusyError,
    SpecError,
    WireError,
)
from assay.policies.contract import PROMPT_KEY, STATE_KEY, ImageLayout, PolicyContract, camera_wire_keys
from assay.policies.protocol import PolicyContext
from assay.policies.remote.wire import (
    CLIENT_HEADER,
    E_SESSIONS_FULL,
    KEEPS_CONNECTION,
    MAX_MESSAGE_BYTES,
    SEED_KEY,
    SESSION_KEY,
    STEP_KEY,
    packb,
    session_id,
    unpackb,
)


class RemoteParams(BaseModel):
    """The ``remote:`` policy's params: timeouts, retries, the API key's variable, image keys and sizes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(default=30.0, gt=0, description="per-request timeout")
    connect_attempts: int = Field(default=8, ge=1, le=100, description="connection attempts before giving up")
    backoff_s: float = Field(default=0.1, ge=0, description="first retry delay; doubles each attempt")
    max_backoff_s: float = Field(default=2.0, ge=0, description="longest delay between two attempts")
    api_key_env: str = Field(default="ASSAY_API_KEY", description="environment variable holding the API key")
    max_message_bytes: int = Field(default=MAX_MESSAGE_BYTES, gt=0)
    images: dict[str, str] | None = Field(
        default=None, description="wire key -> camera, e.g. {observation/image: front}; default: cameras in order")
    image_size: tuple[int, int] | None = Field(
        default=None, description="(height, width) every image is resized to with zero padding, as openpi's "
        "LIBERO client does (render 256, send 224), where the server's contract declares no size; default: "
        "as rendered")

    @field_validator("image_size")
    @classmethod
    def _positive(cls, size: tuple[int, int] | None) -> tuple[int, int] | None:
        if size is not None and min(size) < 1:
            raise ValueError(f"image_size {list(size)} must be two positive integers [height, width], e.g. [224, 224]")
        return size


RETRYABLE_CLOSE = (1000, 1013)  # the server closed an idle connection (idle timeout, evicted): resend on a new one
BUSY = 503
MAX_RETRY_AFTER_S = 30.0  # the longest Retry-After honoured (a larger one is a server's mistake or a stall)


class _Resend(Exception):
    """The server closed an idle connection before reading the request: send it again elsewhere."""

    def __init__(self, error: PolicyUnavailableError) -> None:
        super().__init__(str(error))
        self.error = error


def _headers(params: RemoteParams, client: str | None) -> dict[str, str]:
    key = os.environ.get(params.api_key_env)
    headers = {"Authorization": f"Api-Key {key}"} if key else {}
    if client is not None:
        headers[CLIENT_HEADER] = client
    return headers


def _status(exc: BaseException) -> int | None:
    from websockets.exceptions import InvalidStatus

    return exc.response.status_code if isinstance(exc, InvalidStatus) else None


def _refused(exc: BaseException, params: RemoteParams) -> str | None:
    """A reason not worth retrying (the server answered, and said no), else None."""
    status = _status(exc)
    if status in (401, 403):
        return f"the server refused the API key (HTTP {status}); set the key in ${params.api_key_env}"
    if status is not None and status != BUSY:
        return f"the server answered HTTP {status} instead of a websocket"
    return None


async def _open(url: str, params: RemoteParams, client: str | None) -> tuple[Any, dict[str, Any]]:
    """One attempt: a connection and its metadata frame."""
    from websockets.asyncio.client import ClientConnection, connect

    ws: ClientConnection = await asyncio.wait_for(
        connect(url, additional_headers=_headers(params, client), max_size=params.max_message_bytes,
                compression=None, open_timeout=None, ping_interval=None),
        params.timeout_s)
    metadata = unpackb(await asyncio.wait_for(ws.recv(), params.timeout_s), params.max_message_bytes)
    return ws, metadata if isinstance(metadata, dict) else {}


def _retry_after(exc: BaseException | None) -> float | None:
    """The seconds a 503's ``Retry-After`` header asks for (a number; an HTTP date is ignored), else None."""
    from websockets.exceptions import InvalidStatus

    if not isinstance(exc, InvalidStatus) or exc.response.status_code != BUSY:
        return None
    try:
        return max(0.0, float(exc.response.headers.get("Retry-After", "")))
    except ValueError:
        return None


def backoff_s(params: RemoteParams, attempt: int, retry_after: float | None = None) -> float:
    """The wait after failed attempt ``attempt`` (1, 2, ...): ``backoff_s`` doubling to at most ``max_backoff_s``,
    drawn within 25 % of that (jitter: clients turned away together spread out); at least ``retry_after`` (up to
    ``MAX_RETRY_AFTER_S``, plus up to 25 %) when the server said when to come back."""
    base = min(params.backoff_s * 2 ** (attempt - 1), params.max_backoff_s)
    wait = base * random.uniform(0.75, 1.25)
    if retry_after is not None:
        wait = max(wait, min(retry_after, MAX_RETRY_AFTER_S) * random.uniform(1.0, 1.25))
    return float(wait)


def _backoff(params: RemoteParams) -> Any:
    """tenacity's wait: :func:`backoff_s`, honouring the ``Retry-After`` of a 503."""
    def wait(state: RetryCallState) -> float:
        failed = state.outcome.exception() if state.outcome is not None else None
        return backoff_s(params, state.attempt_number, _retry_after(failed))

    return wait


async def _connect(url: str, params: RemoteParams, client: str | None = None,
                   attempts: int | None = None) -> tuple[Any, dict[str, Any]]:
    """Open one connection and read its metadata frame, retrying (backoff with jitter) what may pass:
    a refused or reset connection, a timeout, HTTP 503. ``attempts`` overrides ``connect_attempts``."""
    from websockets.exceptions import InvalidStatus

    tries = attempts or params.connect_attempts
    retrying = AsyncRetrying(stop=stop_after_attempt(tries), reraise=False, wait=_backoff(params),
                             retry=retry_if_exception(lambda exc: _refused(exc, params) is None))
    try:
        opened: tuple[Any, dict[str, Any]] = await retrying(_open, url, params, client)
        return opened
    except RetryError as exhausted:
        last = exhausted.last_attempt.exception()
        busy = last is not None and _status(last) == BUSY
        detail = f"{type(last).__name__}: {last}".strip() if last is not None else "no attempt"
        if busy:
            raise ServerBusyError(f"policy server {url} busy (HTTP 503: every connection it holds is in use) after "
                                  f"{tries} attempts, each waiting at least its Retry-After") from None
        raise PolicyUnavailableError(f"policy server {url} unreachable after {tries} attempts ({detail})") from None
    except InvalidStatus as exc:  # not retried: the server answered, and said no
        raise PolicyUnavailableError(f"policy server {url}: {_refused(exc, params)}") from None


def capacity_warning(url: str, metadata: dict[str, Any], clients: int, rows: int) -> str | None:
    """Why ``clients`` clients (workers) of ``rows`` environments each would exceed the limits ``url``
    publishes (``server`` in its metadata), or None. Past the connection limit each client shares its
    connections (slower, not failing); past the session limits episodes would be refused."""
    published = metadata.get("server")
    server: dict[str, Any] = published if isinstance(published, dict) else {}
    wanted, found = clients * rows, []
    connections = server.get("max_connections")
    if isinstance(connections, int) and wanted > connections:
        found.append(f"accepts {connections} connections and this run may open {clients} x {rows} = {wanted}: "
                     "each worker will share its connections (requests wait their turn)")
    if server.get("sessions") is True:
        total, per_client = server.get("max_sessions"), server.get("max_sessions_per_client")
        if isinstance(per_client, int) and rows > per_client:
            found.append(f"holds {per_client} sessions per client and each worker runs {rows} environments: "
                         "lower envs_per_worker or restart it with a larger --max-sessions-per-client")
        if isinstance(total, int) and wanted > total:
            found.append(f"holds {total} sessions and this run may open {wanted}: episodes past the limit will be "
                         "errors; use fewer workers or restart it with a larger --max-sessions")
    return f"policy server {url} " + "; it ".join(found) if found else None


def warn_capacity(url: str, params: Mapping[str, Any], clients: int, rows: int) -> str | None:
    """Read the server's metadata and warn (:class:`CapacityWarning`) when :func:`capacity_warning` finds
    something; returns the message. A server that cannot be reached now is left to the run to report."""
    try:
        metadata = fetch_metadata(url, **params)
    except SpecError:
        return None
    message = capacity_warning(url, metadata, clients, rows)
    if message is not None:
        warnings.warn(message, CapacityWarning, stacklevel=2)
    return message


def fetch_metadata(url: str, **params: Any) -> dict[str, Any]:
    """Connect once, read the server's metadata frame, close (used before a campaign starts)."""
    settings = RemoteParams(**params)

    async def fetch() -> dict[str, Any]:
        ws, metadata = await _connect(url, settings)
        await ws.close()
        return metadata

    try:
        return asyncio.run(fetch())
    except PolicyUnavailableError as exc:
        raise SpecError(f"{exc}; start it with `assay serve-policy POLICY --port PORT`") from None


class _Loop:
    """An asyncio event loop in a daemon thread: the client's connections live there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="assay-remote-policy", daemon=True)
        self.thread.start()

    def run(self, coroutine: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


class RemotePolicy:
    """A Policy whose ``act`` is answered by an openpi-protocol server."""

    Params = RemoteParams
    version = "1"

    def __init__(self, url: str, **params: Any) -> None:
        self.url = url
        self.params = RemoteParams(**params)
        self.metadata: dict[str, Any] = {}
        self.contract: PolicyContract | None = None
        self._loop: _Loop | None = None
        self._idle: list[Any] = []
        self._images: dict[str, str] = {}  # wire key -> camera, set at reset from the task's cameras
        self._batch_sizes: dict[int, int] = {}  # env slot -> the server's batch size for its latest request
        self._seeds: tuple[int, ...] = ()
        self._client = uuid.uuid4().hex  # names this client's sessions on the server
        self._epoch = 0  # counts resets: a new one tells the server the previous episodes are over
        self._steps: dict[int, int] = {}  # env slot -> requests sent in its episode
        self._pool_cap: int | None = None  # connections the server let this client hold (after a 503)

    @staticmethod
    def supports(task: Any) -> str | None:
        """Accept every task: the server answers what it serves."""
        return None

    def reset(self, context: PolicyContext) -> None:
        """Start a batch: camera keys for the wire, the seeds, and a new epoch (the server ends the old episodes)."""
        # openpi servers have no reset; the served policy is a function of its observation
        self._images = camera_wire_keys([c.name for c in context.task.cameras], self.params.images)
        self._seeds, self._epoch, self._steps = tuple(context.seeds), self._epoch + 1, {}
        self._pool_cap = None  # a new batch tries for a connection per environment again

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """Send every row to the server (one connection per environment, within the server's cap) and stack the answers.
        """
        if self._loop is None:
            self._loop = _Loop()
        slots = [int(s) for s in np.asarray(observations.get("env_ids", np.arange(len(observations["state"]))))]
        replies = self._loop.run(self._round(observations, slots))
        self._batch_sizes.update(zip(slots, (size for _, size in replies), strict=True))
        return _stack([actions for actions, _ in replies], self.url)

    def step_trace(self, slot: int) -> dict[str, float]:
        """The server's batch size for the request that produced this slot's action (``trace.server_batch_size``)."""
        size = self._batch_sizes.get(slot)
        return {"server_batch_size": float(size)} if size is not None else {}

    def episode_info(self, slot: int) -> dict[str, Any]:
        """What the server said about itself (its metadata frame, contract aside), kept with each episode."""
        return {"server": {k: v for k, v in self.metadata.items() if k != "contract"}} if self.metadata else {}

    def _requests(self, observations: Mapping[str, Any], slots: list[int]) -> list[dict[str, Any]]:
        state = np.asarray(observations["state"])
        server = self.metadata.get("server")
        sessions = isinstance(server, dict) and server.get("sessions") is True
        dtype: np.dtype[Any] = np.dtype(np.float32)
        if self.contract is not None and STATE_KEY in self.contract.observations:
            dtype = np.dtype(self.contract.observations[STATE_KEY].dtype)
        images = {key: (camera, self._image_target(key)) for key, camera in self._wire_images().items()
                  if f"image.{camera}" in observations}
        extra = [k for k in (self.contract.observations if self.contract else {})
                 if k not in (STATE_KEY, PROMPT_KEY) and k not in images]
        rows = []
        for row in range(len(state)):
            request: dict[str, Any] = {STATE_KEY: np.ascontiguousarray(state[row], dtype=dtype),
                                       PROMPT_KEY: str(observations["instruction"][row])}
            for key, (camera, target) in images.items():
                request[key] = wire_image(observations[f"image.{camera}"][row], *target)
            for key in extra:
                name = key.split("/", 1)[-1]
                if name in observations:
                    request[key] = np.ascontiguousarray(observations[name][row])
            if sessions:
                slot = slots[row]
                step = self._steps.get(slot, 0)
                self._steps[slot] = step + 1
                request.update({SESSION_KEY: session_id(self._client, self._epoch, slot), STEP_KEY: step,
                                SEED_KEY: int(self._seeds[slot]) if slot < len(self._seeds) else 0})
            rows.append(request)
        return rows

    def _wire_images(self) -> dict[str, str]:
        """Wire key -> camera for this request: the ``image.<camera>`` keys a served Assay camera policy's
        contract names (each under its own key), else every camera under the openpi wire keys."""
        named = {key: key[len("image."):] for key in (self.contract.images if self.contract else {})
                 if key.startswith("image.")}
        return named or self._images

    def _image_target(self, key: str) -> tuple[tuple[int, int] | None, ImageLayout]:
        """The (height, width) and layout the server's contract declares for an image key, else the campaign's
        ``image_size`` (None: as rendered)."""
        fallback = self.params.image_size, ImageLayout.HWC
        if self.contract is None:
            return fallback
        if key in self.contract.images:
            spec = self.contract.images[key]
            return (spec.height, spec.width), spec.layout
        declared = self.contract.observations.get(key)
        if declared is not None and len(declared.shape) == 3:
            return (declared.shape[0], declared.shape[1]), ImageLayout.HWC
        return fallback

    async def _round(self, observations: Mapping[str, Any], slots: list[int]) -> list[tuple[np.ndarray, int | None]]:
        from websockets.protocol import State

        self._idle = [ws for ws in self._idle if ws.state is State.OPEN]  # a restarted server left stale ones
        await self._grow(len(slots))
        # built only now: the contract (state dtype, image sizes) is known before the first request
        requests = self._requests(observations, slots)
        connections, self._idle = self._idle[: len(requests)], self._idle[len(requests):]
        results: list[Any] = [None] * len(requests)

        async def lane(ws: Any, rows: range) -> None:  # one connection answers one request at a time
            for row in rows:
                ws, results[row] = await self._answer(ws, requests[row])
            if ws is not None:
                self._idle.append(ws)

        lanes = len(connections)
        await asyncio.gather(*(lane(ws, range(k, len(requests), lanes)) for k, ws in enumerate(connections)))
        for result in results:
            if isinstance(result, PolicyUnavailableError):
                raise result
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results

    async def _grow(self, rows: int) -> None:
        """Hold a connection per row, as far as the server allows: the first with the whole retry budget,
        the others with one attempt each; a 503 caps this client's pool until its next reset."""
        if not self._idle:
            self._adopt(*await _connect(self.url, self.params, self._client))
        want = min(rows, self._pool_cap or rows)
        missing = want - len(self._idle)
        if missing <= 0:
            return
        opened = await asyncio.gather(*(_connect(self.url, self.params, self._client, attempts=1)
                                        for _ in range(missing)), return_exceptions=True)
        for result in opened:
            if not isinstance(result, BaseException):
                self._adopt(*result)
        if any(isinstance(result, ServerBusyError) for result in opened):
            self._pool_cap = len(self._idle)

    def _adopt(self, ws: Any, metadata: dict[str, Any]) -> None:
        self._idle.append(ws)
        if metadata and not self.metadata:
            self.metadata = metadata
            self.contract = PolicyContract.from_metadata(metadata)

    async def _answer(self, ws: Any | None, request: dict[str, Any]) -> tuple[Any | None, Any]:
        """(the connection to go on with, or None; the reply or the exception) for one request. A request
        whose idle connection the server closed is sent once more on a fresh connection; a new session refused
        for a full server (``E_SESSIONS_FULL``) is asked again after :func:`backoff_s`, up to ``connect_attempts``
        times in all."""
        resent, full = False, 0
        while True:
            try:
                if ws is None:
                    ws = (await _connect(self.url, self.params, self._client))[0]
                return ws, await self._request(ws, request)
            except _Resend as resend:
                if resent:
                    return None, resend.error
                ws, resent = None, True
            except RemotePolicyError as exc:  # answered with an error: the connection goes on if the server says so
                if ws is not None and exc.code not in KEEPS_CONNECTION:
                    await ws.close()
                    ws = None
                full += exc.code == E_SESSIONS_FULL
                if exc.code != E_SESSIONS_FULL or full >= self.params.connect_attempts:
                    return ws, exc
                await asyncio.sleep(backoff_s(self.params, full))
            except EpisodeError as exc:  # this row's failure, reported for it
                if ws is not None:
                    await ws.close()  # a late reply would answer the next request: never reuse it
                return None, exc

    async def _request(self, ws: Any, request: dict[str, Any]) -> tuple[np.ndarray, int | None]:
        from websockets.exceptions import ConnectionClosed

        try:
            await ws.send(packb(request))
            reply = await asyncio.wait_for(ws.recv(), self.params.timeout_s)
        except TimeoutError:
            raise PolicyUnavailableError(
                f"policy server {self.url}: no reply within {self.params.timeout_s:g} s") from None
        except ConnectionClosed as exc:
            error = PolicyUnavailableError(f"policy server {self.url} closed the connection ({exc})")
            if exc.rcvd is not None and exc.rcvd.code in RETRYABLE_CLOSE:
                raise _Resend(error) from None
            raise error from None
        except OSError as exc:
            raise PolicyUnavailableError(f"policy server {self.url}: {type(exc).__name__}: {exc}") from None
        if isinstance(reply, str):
            lines = [line for line in reply.strip().splitlines() if line.strip()]
            last = lines[-1] if lines else "empty error"
            raise RemotePolicyError(f"policy server {self.url} failed: {last}", last.split(":", 1)[0])
        try:
            message = unpackb(reply, self.params.max_message_bytes)
        except WireError as exc:
            raise RemotePolicyError(f"policy server {self.url} sent a malformed reply: {exc}") from None
        actions = message.get("actions") if isinstance(message, dict) else None
        if not isinstance(actions, np.ndarray):
            raise RemotePolicyError(f"policy server {self.url}: reply has no 'actions' array")
        timing = message.get("server_timing")
        size = timing.get("batch_size") if isinstance(timing, dict) else None
        return actions, int(size) if isinstance(size, (int, np.integer)) else None

    def close(self) -> None:
        """Close the connections and stop the client's event loop thread."""
        if self._loop is not None and self._loop.thread.is_alive():
            idle, self._idle = self._idle, []

            async def close_all() -> None:
                await asyncio.gather(*(ws.close() for ws in idle), return_exceptions=True)

            try:
                self._loop.run(close_all(), timeout=5)
            finally:
                self._loop.stop()
        self._loop = None


def wire_image(image: np.ndarray, size: tuple[int, int] | None, layout: ImageLayout = ImageLayout.HWC) -> np.ndarray:
    """One camera frame as openpi policies take it: uint8, resized with zero padding to ``size`` (H, W)
    keeping its aspect ratio (openpi's ``image_tools.resize_with_pad``, bilinear), HWC or CHW."""
    frame = np.asarray(image)
    if frame.dtype.kind == "f":
        frame = (255 * np.clip(frame, 0.0, 1.0)).astype(np.uint8)
    frame = frame.astype(np.uint8, copy=False)
    if size is not None and frame.shape[:2] != tuple(size):
        from PIL import Image

        height, width = size
        ratio = max(frame.shape[1] / width, frame.shape[0] / height)
        scaled = Image.fromarray(frame).resize((int(frame.shape[1] / ratio), int(frame.shape[0] / ratio)),
                                               resample=Image.Resampling.BILINEAR)
        canvas = Image.new(scaled.mode, (width, height), 0)
        canvas.paste(scaled, (max(0, int((width - scaled.width) / 2)), max(0, int((height - scaled.height) / 2))))
        frame = np.asarray(canvas)
    if layout is ImageLayout.CHW:
        frame = np.moveaxis(frame, -1, 0)
    return np.ascontiguousarray(frame)


def _stack(replies: list[np.ndarray], url: str) -> np.ndarray:
    """``(B, A)`` or ``(B, H, A)``; the runner judges dtype, shape and finiteness per row."""
    shapes = {reply.shape for reply in replies}
    if len(shapes) != 1:
        raise RemotePolicyError(f"policy server {url}: replies of different shapes {sorted(shapes)} in one batch")
    return np.stack(replies)
